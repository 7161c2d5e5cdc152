/* test_toolcall.c - the streaming tool-call / reasoning parser: every
 * format (Mistral's list and v11+ NAME[ARGS] side by side), fed whole, split at every byte boundary and byte by byte (the
 * transcript of events must not depend on how the text arrives), and
 * malformed calls falling back to content. */
#include <string.h>
#include "testutil.h"
#include "kvwise/toolcall.h"

/* Transcript: consecutive text of one kind merged: "C[..]R[..]T0(name,args)". */
typedef struct { char s[8192]; size_t n; int last; char ids[8][40]; int n_frag, events; } transcript;

static void put(transcript *t, const char *s, size_t n) {
    if (t->n + n >= sizeof t->s) n = sizeof t->s - 1 - t->n;
    memcpy(t->s + t->n, s, n);
    t->n += n;
    t->s[t->n] = 0;
}

static void on_ev(void *user, const kw_tc_event *ev) {
    transcript *t = user;
    t->events++;
    if (ev->type == KW_TC_CALL_BEGIN) {
        if (t->last >= 0 && t->last < KW_TC_CALL_BEGIN) put(t, "]", 1);
        char b[1024];
        int n = snprintf(b, sizeof b, "T%d(%s,", ev->index, ev->name);
        put(t, b, (size_t)n);
        if (ev->index < 8) snprintf(t->ids[ev->index], sizeof t->ids[0], "%s", ev->id);
        t->last = KW_TC_CALL_BEGIN;
        return;
    }
    if (ev->type == KW_TC_CALL_ARGS) { put(t, ev->text, ev->len); t->n_frag++; return; }
    if (ev->type == KW_TC_CALL_END) { put(t, ev->broken ? ")!" : ")", ev->broken ? 2 : 1); return; }
    if (ev->len == 0) return;
    if ((int)ev->type != t->last) {
        if (t->last >= 0 && t->last < KW_TC_CALL_BEGIN) put(t, "]", 1);
        put(t, ev->type == KW_TC_CONTENT ? "C[" : "R[", 2);
        t->last = (int)ev->type;
    }
    put(t, ev->text, ev->len);
}

static void close_t(transcript *t) { if (t->last >= 0 && t->last < KW_TC_CALL_BEGIN) put(t, "]", 1); t->last = -1; }

/* Runs text through the parser in pieces of the given split points. */
static void run_split(const char *text, unsigned flags, size_t cut, bool bytewise, transcript *t) {
    memset(t, 0, sizeof *t);
    t->last = -1;
    kw_toolparse p;
    kw_toolparse_init(&p, flags, on_ev, t);
    size_t n = strlen(text);
    if (bytewise) for (size_t i = 0; i < n; i++) kw_toolparse_feed(&p, text + i, 1);
    else { kw_toolparse_feed(&p, text, cut); kw_toolparse_feed(&p, text + cut, n - cut); }
    kw_toolparse_finish(&p);
    kw_toolparse_free(&p);
    close_t(t);
}

static void expect(const char *text, unsigned flags, const char *want) {
    transcript t;
    run_split(text, flags, strlen(text), false, &t);
    KW_CHECK_MSG(!strcmp(t.s, want), "whole %s\n got  %s\n want %s", text, t.s, want);
    run_split(text, flags, 0, true, &t);
    KW_CHECK_MSG(!strcmp(t.s, want), "bytewise %s\n got  %s\n want %s", text, t.s, want);
    int bad = 0;
    for (size_t cut = 0; cut <= strlen(text); cut++) {
        run_split(text, flags, cut, false, &t);
        if (strcmp(t.s, want)) { if (!bad) fprintf(stderr, "split at %zu: %s\n", cut, t.s); bad++; }
    }
    KW_CHECK_MSG(bad == 0, "%d split points differ for %s", bad, text);
}

static void feeds(kw_toolparse *p, const char *s) { kw_toolparse_feed(p, s, strlen(s)); }

/* Streaming: content before a call comes out before the call; the call's
 * name comes first, then its arguments in fragments as they arrive. */
static void test_incremental(void) {
    transcript t = {0};
    t.last = -1;
    kw_toolparse p;
    kw_toolparse_init(&p, KW_TC_TOOLS, on_ev, &t);
    feeds(&p, "Let me look.<tool");
    KW_CHECK_MSG(!strcmp(t.s, "C[Let me look."), "got %s", t.s);
    feeds(&p, "_call>{\"name\":\"f\",\"argu");
    KW_CHECK_MSG(!strcmp(t.s, "C[Let me look."), "header not complete yet: %s", t.s);
    feeds(&p, "ments\":");
    KW_CHECK_MSG(!strcmp(t.s, "C[Let me look."), "committed only at the arguments' {: %s", t.s);
    feeds(&p, "{\"path\":\"/tmp/");
    KW_CHECK_MSG(!strcmp(t.s, "C[Let me look.]T0(f,{\"path\":\"/tmp/"), "begun and streaming: %s", t.s);
    feeds(&p, "a.txt\"");
    feeds(&p, "}}");
    KW_CHECK_MSG(!strcmp(t.s, "C[Let me look.]T0(f,{\"path\":\"/tmp/a.txt\"})"), "ended with its object: %s", t.s);
    KW_CHECK_EQ_INT(t.n_frag, 3);
    feeds(&p, "</tool_call> ok");
    kw_toolparse_finish(&p);
    kw_toolparse_free(&p);
    close_t(&t);
    KW_CHECK_MSG(!strcmp(t.s, "C[Let me look.]T0(f,{\"path\":\"/tmp/a.txt\"})C[ok]"), "got %s", t.s);
    /* a prefilled opener (tool_choice) produces no event by itself */
    transcript u = {0};
    u.last = -1;
    kw_toolparse_init(&p, KW_TC_TOOLS, on_ev, &u);
    feeds(&p, "<tool_call>\n{\"name\": \"read\", \"arguments\":");
    KW_CHECK_EQ_INT(u.events, 0);
    feeds(&p, " {\"p\": 1}}");
    kw_toolparse_finish(&p);
    kw_toolparse_free(&p);
    KW_CHECK_MSG(!strcmp(u.s, "T0(read,{\"p\": 1})"), "got %s", u.s);
    /* ids: call_ + 16 hex, distinct per call */
    run_split("<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call><tool_call>{\"name\":\"b\",\"arguments\":{}}</tool_call>",
              KW_TC_TOOLS, 3, false, &u);
    KW_CHECK_EQ_INT(strlen(u.ids[0]), 21);
    KW_CHECK(!strncmp(u.ids[0], "call_", 5));
    KW_CHECK(strcmp(u.ids[0], u.ids[1]) != 0);
}

/* The validator accepts exactly RFC 8259 JSON (one value, nothing after it). */
static void test_validator(void) {
    static const struct { const char *s; bool ok; } cases[] = {
        {"{}", true}, {"[]", true}, {"[[[]]]", true}, {"\"s\"", true}, {"[1e5, 2E-3, -0]", true},
        {"{\"a\": [1, -2.5e+3, 0, 0.1, true, false, null, \"x\\\"y\\u00e9\\/\"]}", true},
        {"{\"k\":{\"n\":[{}]}}", true}, {" { \"a\" : 1 } ", true},
        {"{\"a\":1,}", false}, {"[1,]", false}, {"{\"a\" 1}", false}, {"{'a': 1}", false}, {"[01]", false},
        {"[1.]", false}, {"[-]", false}, {"[tru]", false}, {"{\"a\":\"\\q\"}", false}, {"{\"a\":\"\\u12g4\"}", false},
        {"[1 2]", false}, {"{\"a\":1}}", false}, {"[\"tab\there\"]", false}, {"{1:2}", false}, {"[1}", false},
        {"{\"a\":[}", false}, {"[.5]", false}, {"[1e]", false}, {"[+1]", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *s = cases[i].s;
        kw_jv v;
        kw_jv_init(&v);
        int r = 0, done = 0;
        for (size_t k = 0; s[k]; k++) {
            r = kw_jv_feed(&v, (unsigned char)s[k]);
            if (r < 0) break;
            if (r == 1) done = 1;
        }
        bool ok = r >= 0 && done;
        KW_CHECK_MSG(ok == cases[i].ok, "validator says %d, want %d: %s", ok, cases[i].ok, s);
    }
    /* nesting deeper than KW_JV_MAX_DEPTH is refused, not overflowed */
    kw_jv v;
    kw_jv_init(&v);
    int r = 0;
    for (int k = 0; k < KW_JV_MAX_DEPTH + 1 && r >= 0; k++) r = kw_jv_feed(&v, '[');
    KW_CHECK_EQ_INT(r, -1);
}

/* Mistral v11+: [TOOL_CALLS]NAME[ARGS]{..}. Streaming order: nothing until
 * the arguments' `{`, then BEGIN with the name and fragments as they come. */
static void test_mistral_named_incremental(void) {
    transcript t = {0};
    t.last = -1;
    kw_toolparse p;
    kw_toolparse_init(&p, KW_TC_TOOLS, on_ev, &t);
    feeds(&p, "On it.[TOOL_");
    KW_CHECK_MSG(!strcmp(t.s, "C[On it."), "partial tag held: %s", t.s);
    feeds(&p, "CALLS]read_fi");
    feeds(&p, "le[CALL_ID]a1B2");
    feeds(&p, "c3D4e[AR");
    KW_CHECK_MSG(!strcmp(t.s, "C[On it."), "header not complete: %s", t.s);
    KW_CHECK_EQ_INT(t.events, 1);
    feeds(&p, "GS]{\"pa");
    KW_CHECK_MSG(!strcmp(t.s, "C[On it.]T0(read_file,{\"pa"), "committed at {: %s", t.s);
    feeds(&p, "th\": \"/a\"}");
    KW_CHECK_MSG(!strcmp(t.s, "C[On it.]T0(read_file,{\"path\": \"/a\"})"), "ended with its object: %s", t.s);
    feeds(&p, "[TOOL_CALLS]ls[ARGS]{}");
    kw_toolparse_finish(&p);
    kw_toolparse_free(&p);
    close_t(&t);
    KW_CHECK_MSG(!strcmp(t.s, "C[On it.]T0(read_file,{\"path\": \"/a\"})T1(ls,{})"), "got %s", t.s);
    KW_CHECK(strcmp(t.ids[0], t.ids[1]) != 0);
    KW_CHECK(!strncmp(t.ids[0], "call_", 5));        /* the model's [CALL_ID] is not the id */

    /* tool_choice prefills: named ("[TOOL_CALLS]NAME[ARGS]") and required ("[TOOL_CALLS]") give no event alone */
    static const struct { const char *prefill, *rest, *want; } pre[] = {
        {"[TOOL_CALLS]get_weather[ARGS]", " {\"city\": \"Rome\"}", "T0(get_weather,{\"city\": \"Rome\"})"},
        {"[TOOL_CALLS]", "get_weather[ARGS]{}", "T0(get_weather,{})"},
        {"[TOOL_CALLS]", "[{\"name\": \"a\", \"arguments\": {}}]", "T0(a,{})"},
        {"[TOOL_CALLS]get_weather[ARGS]", "no json", "C[[TOOL_CALLS]get_weather[ARGS]no json]"},
    };
    for (size_t i = 0; i < sizeof pre / sizeof *pre; i++) {
        transcript u = {0};
        u.last = -1;
        kw_toolparse_init(&p, KW_TC_TOOLS, on_ev, &u);
        feeds(&p, pre[i].prefill);
        KW_CHECK_EQ_INT(u.events, 0);
        feeds(&p, pre[i].rest);
        kw_toolparse_finish(&p);
        kw_toolparse_free(&p);
        close_t(&u);
        KW_CHECK_MSG(!strcmp(u.s, pre[i].want), "prefill %s: got %s", pre[i].prefill, u.s);
    }
}

/* Two calls fed in three pieces, cut at every pair of byte boundaries: the
 * transcript (names, joined argument fragments) never changes. */
static void test_mistral_named_two_cuts(void) {
    const char *text = "x[TOOL_CALLS]a[ARGS]{\"s\": \"}]\\\"\"}[TOOL_CALLS]b[CALL_ID]Q9[ARGS]{\"n\": [1, -2e3]}";
    const char *want = "C[x]T0(a,{\"s\": \"}]\\\"\"})T1(b,{\"n\": [1, -2e3]})";
    size_t n = strlen(text);
    int bad = 0, runs = 0;
    for (size_t c1 = 0; c1 <= n; c1++)
        for (size_t c2 = c1; c2 <= n; c2++) {
            transcript t = {0};
            t.last = -1;
            kw_toolparse p;
            kw_toolparse_init(&p, KW_TC_TOOLS, on_ev, &t);
            kw_toolparse_feed(&p, text, c1);
            kw_toolparse_feed(&p, text + c1, c2 - c1);
            kw_toolparse_feed(&p, text + c2, n - c2);
            kw_toolparse_finish(&p);
            kw_toolparse_free(&p);
            close_t(&t);
            runs++;
            if (strcmp(t.s, want)) { if (!bad) fprintf(stderr, "cuts %zu,%zu: %s\n", c1, c2, t.s); bad++; }
        }
    KW_CHECK_EQ_INT(bad, 0);
    KW_CHECK_EQ_INT(runs, (int)((n + 1) * (n + 2) / 2));
}

static void test_mistral_named(void) {
    const unsigned T = KW_TC_TOOLS;
    /* the older list and the v11+ form, side by side: same calls */
    expect("[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]", T,
           "T0(get_weather,{\"city\": \"Paris\"})");
    expect("[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}", T, "T0(get_weather,{\"city\": \"Paris\"})");
    /* several calls, each with its own [TOOL_CALLS], whitespace between them dropped */
    expect("[TOOL_CALLS]a[ARGS]{\"n\": 1}[TOOL_CALLS]b[ARGS]{}\n[TOOL_CALLS]c.d-e:f[ARGS] {\"k\": [true, null]}", T,
           "T0(a,{\"n\": 1})T1(b,{})T2(c.d-e:f,{\"k\": [true, null]})");
    /* [CALL_ID] before [ARGS] */
    expect("[TOOL_CALLS]read[CALL_ID]a1B2c3D4e[ARGS]{\"path\": \"/tmp/x\"}", T, "T0(read,{\"path\": \"/tmp/x\"})");
    expect("[TOOL_CALLS]a[CALL_ID]x_1-Y[ARGS]{}[TOOL_CALLS]b[ARGS]{\"z\": 0}", T, "T0(a,{})T1(b,{\"z\": 0})");
    /* text before and after, reasoning before, tags and brackets inside argument strings */
    expect("Let me check.\n\n[TOOL_CALLS]f[ARGS]{\"q\": \"[TOOL_CALLS]x[ARGS]{\"} done", T,
           "C[Let me check.]T0(f,{\"q\": \"[TOOL_CALLS]x[ARGS]{\"})C[done]");
    expect("<think>need a tool</think>\n[TOOL_CALLS]s[ARGS]{\"q\": \"\\u00e9\"}", T, "R[need a tool]T0(s,{\"q\": \"\\u00e9\"})");
    /* malformed before the commit: content, verbatim */
    expect("[TOOL_CALLS]f[ARGS]not json", T, "C[[TOOL_CALLS]f[ARGS]not json]");
    expect("[TOOL_CALLS]f[ARGS]", T, "C[[TOOL_CALLS]f[ARGS]]");
    expect("[TOOL_CALLS]f[ARGS][1, 2]", T, "C[[TOOL_CALLS]f[ARGS][1, 2]]");
    expect("[TOOL_CALLS]f[CALL_ID][ARGS]{}", T, "C[[TOOL_CALLS]f[CALL_ID][ARGS]{}]");
    expect("[TOOL_CALLS]f[CALL_ID]a b[ARGS]{}", T, "C[[TOOL_CALLS]f[CALL_ID]a b[ARGS]{}]");
    expect("[TOOL_CALLS]f g[ARGS]{}", T, "C[[TOOL_CALLS]f g[ARGS]{}]");
    expect("[TOOL_CALLS]f[ARG]{}", T, "C[[TOOL_CALLS]f[ARG]{}]");
    expect("[TOOL_CALLS]f{\"a\": 1}", T, "C[[TOOL_CALLS]f{\"a\": 1}]");   /* [ARGS] missing: not parsed */
    expect("[TOOL_CALLS]f[CALL_ID]abc", T, "C[[TOOL_CALLS]f[CALL_ID]abc]");
    expect("[TOOL_CALLS]a[ARGS]{}[TOOL_CALLS]oops", T, "T0(a,{})C[[TOOL_CALLS]oops]");
    /* committed arguments that break: the call ends broken, the rest is content */
    expect("[TOOL_CALLS]f[ARGS]{\"a\": tru} then", T, "T0(f,{\"a\": tru)!C[} then]");
    expect("[TOOL_CALLS]f[ARGS]{\"a\": \"b", T, "T0(f,{\"a\": \"b)!");
    /* without KW_TC_TOOLS it is text */
    expect("[TOOL_CALLS]f[ARGS]{}", 0, "C[[TOOL_CALLS]f[ARGS]{}]");
    /* a name or id longer than the limits is not a header */
    char longname[400], want[520];
    memset(longname, 'n', 300);
    longname[300] = 0;
    char text[480];
    snprintf(text, sizeof text, "[TOOL_CALLS]%s[ARGS]{}", longname);
    snprintf(want, sizeof want, "C[%s]", text);
    expect(text, T, want);
    snprintf(text, sizeof text, "[TOOL_CALLS]f[CALL_ID]%.*s[ARGS]{}", 65, longname);
    snprintf(want, sizeof want, "C[%s]", text);
    expect(text, T, want);
    snprintf(text, sizeof text, "[TOOL_CALLS]f[CALL_ID]%.*s[ARGS]{}", 64, longname);
    expect(text, T, "T0(f,{})");
    test_mistral_named_incremental();
    test_mistral_named_two_cuts();
}

int main(void) {
    const unsigned T = KW_TC_TOOLS;
    /* plain text is untouched, including edge whitespace */
    expect("Hello, world!\n", T, "C[Hello, world!\n]");
    expect(" a < b and [x] {y}", T, "C[ a < b and [x] {y}]");
    expect("", T, "");
    /* Qwen / Hermes */
    expect("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", T,
           "T0(get_weather,{\"city\": \"Paris\"})");
    expect("I will check.\n\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": \"</tool\"}}\n</tool_call>\n", T,
           "C[I will check.]T0(a,{\"x\": \"</tool\"})");
    expect("<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>\n<tool_call>{\"name\":\"b\",\"arguments\":{\"k\":[1,2]}}</tool_call>", T,
           "T0(a,{})T1(b,{\"k\":[1,2]})");
    /* arguments given as a JSON string are passed through */
    expect("<tool_call>{\"name\":\"a\",\"arguments\":\"{\\\"q\\\":1}\"}</tool_call>", T, "T0(a,{\"q\":1})");
    expect("<tool_call>{\"name\":\"a\",\"arguments\":\"not json\"}</tool_call>", T, "T0(a,not json)!");
    /* reasoning */
    expect("<think>\nLet me think.\n</think>\n\nThe answer is 4.", T, "R[Let me think.]C[The answer is 4.]");
    expect("Mulling it over.\n</think>\n\nDone", T | KW_TC_START_IN_THINK, "R[Mulling it over.]C[Done]");
    expect("<think>I need a tool</think>\n<tool_call>{\"name\":\"s\",\"arguments\":{\"q\":\"x\"}}</tool_call>", T,
           "R[I need a tool]T0(s,{\"q\":\"x\"})");
    expect("<think>no tools here</think>ok", 0, "R[no tools here]C[ok]");
    /* without KW_TC_TOOLS tags are text */
    expect("<tool_call>{\"name\":\"a\"}</tool_call>", 0, "C[<tool_call>{\"name\":\"a\"}</tool_call>]");
    /* Llama 3 */
    expect("<|python_tag|>{\"name\": \"search\", \"parameters\": {\"q\": \"cats\"}}", T, "T0(search,{\"q\": \"cats\"})");
    expect("<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"z\": 0}}", T,
           "T0(a,{})T1(b,{\"z\": 0})");
    expect("\n{\"name\": \"search\", \"parameters\": {\"q\": \"}\"}}", T | KW_TC_BARE_JSON, "T0(search,{\"q\": \"}\"})");
    expect("{\"answer\": 42}", T | KW_TC_BARE_JSON, "C[{\"answer\": 42}]");
    expect("{\"name\": \"x\"", T | KW_TC_BARE_JSON, "C[{\"name\": \"x\"]");
    expect("text {\"name\": \"x\", \"parameters\": {}}", T | KW_TC_BARE_JSON, "C[text {\"name\": \"x\", \"parameters\": {}}]");
    /* Mistral */
    expect("[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"n\": 1}}, {\"name\": \"b\", \"arguments\": {}}]", T,
           "T0(a,{\"n\": 1})T1(b,{})");
    /* malformed calls fall back to content, verbatim */
    expect("<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>after", T,
           "C[<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>after]");
    /* committed calls whose arguments break: the call ends broken, the rest of it is content */
    expect("<tool_call>{\"name\": \"a\", \"arguments\": {</tool_call>after", T, "T0(a,{)!C[</tool_call>after]");
    expect("<tool_call>{\"name\":\"f\",\"arguments\":{\"path\":\"/tm", T, "T0(f,{\"path\":\"/tm)!");
    expect("[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"n\": 1}}, {\"name\": \"b\", \"arguments\": {x}}] tail", T,
           "T0(a,{\"n\": 1})T1(b,{)!C[x}}] tail]");
    /* other shapes are reported whole */
    expect("<tool_call>{\"arguments\": {\"x\": 1}, \"name\": \"f\"}</tool_call>", T, "T0(f,{\"x\":1})");
    expect("<tool_call>{\"function\": {\"name\": \"g\", \"arguments\": {}}}</tool_call>", T, "T0(g,{})");
    /* extra members after the arguments, nested values, escapes */
    expect("<tool_call>{\"name\":\"f\",\"arguments\":{\"a\":1},\"id\":\"x\"}</tool_call>", T, "T0(f,{\"a\":1})");
    expect("<tool_call>{\"name\":\"w\",\"arguments\":{\"s\":\"a}\\\"b\\\\\",\"n\":[1,{\"x\":null}],\"f\":-1.5e3,\"t\":true}}</tool_call>", T,
           "T0(w,{\"s\":\"a}\\\"b\\\\\",\"n\":[1,{\"x\":null}],\"f\":-1.5e3,\"t\":true})");
    expect("<tool_call>not json at all", T, "C[<tool_call>not json at all]");
    expect("<tool_call>{\"arguments\": {}}</tool_call>", T, "C[<tool_call>{\"arguments\": {}}</tool_call>]");
    expect("[TOOL_CALLS]oops", T, "C[[TOOL_CALLS]oops]");
    expect("[TOOL_CALLS][{\"name\": 3}]", T, "C[[TOOL_CALLS][{\"name\": 3}]]");
    expect("<|python_tag|>{\"name\": \"a\", \"par", T, "C[<|python_tag|>{\"name\": \"a\", \"par]");
    expect("<think>never closed", T, "R[never closed]");
    expect("<tool_call>{\"name\":\"a\",\"arguments\":{}}", T, "T0(a,{})");   /* missing close tag at the end */
    test_incremental();
    test_validator();
    test_mistral_named();
    KW_CHECK(kw_toolparse_prompt_opens_think("<|im_start|>assistant\n<think>\n"));
    KW_CHECK(!kw_toolparse_prompt_opens_think("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    KW_CHECK(!kw_toolparse_prompt_opens_think("<|im_start|>assistant\n"));
    return kw_test_finish();
}
