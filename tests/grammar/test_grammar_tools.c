/* test_grammar_tools.c - the tool-call grammar (kw_grammar_tool_call): a
 * forced call in each call format (open / close text, arguments key, the
 * arguments alone), the arguments under each tool's schema with $refs
 * resolved in that schema, and tool_choice auto: free text that never
 * contains a call tag, then calls; the bare-JSON form. Acceptance by hand
 * strings, the mask checked against accept_token along a path, and random
 * walks over a small vocab whose every output is checked. */
#include "testutil.h"
#include "gtest_util.h"
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static const char *WEATHER = "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":8},"
                             "\"unit\":{\"enum\":[\"c\",\"f\"]}},\"required\":[\"city\",\"unit\"]}";
static const char *REFD = "{\"$defs\":{\"n\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":9}},\"type\":\"object\","
                          "\"properties\":{\"k\":{\"$ref\":\"#/$defs/n\"}},\"required\":[\"k\"],\"additionalProperties\":false}";
static const char *TAGS[] = {"<tool_call>", "<|python_tag|>", "[TOOL_CALLS]"};

typedef struct two { cJSON *a, *b; kw_grammar_tool t[2]; } two;

static void two_init(two *w, bool strict_b) {
    w->a = cJSON_Parse(WEATHER);
    w->b = cJSON_Parse(REFD);
    w->t[0] = (kw_grammar_tool){.name = "get_weather", .parameters = w->a};
    w->t[1] = (kw_grammar_tool){.name = "count", .parameters = w->b, .strict = strict_b};
}
static void two_free(two *w) { cJSON_Delete(w->a); cJSON_Delete(w->b); }

static kw_grammar *build(const kw_grammar_tool *t, uint32_t n, const kw_grammar_call_format *f) {
    kw_err e = {{0}};
    kw_json_schema_opts jo = {.whitespace = KW_JSON_WS_BOUNDED};
    kw_grammar *g = kw_grammar_tool_call(t, n, f, &jo, NULL, &e);
    if (!g) fprintf(stderr, "tool call grammar: %s\n", e.msg);
    return g;
}

#define ACC(g, s) KW_CHECK_MSG(gt_accepts(g, s, strlen(s)), "should accept '%s'", s)
#define REJ(g, s) KW_CHECK_MSG(!gt_accepts(g, s, strlen(s)), "should reject '%s'", s)

static void test_forced_formats(void) {
    two w;
    two_init(&w, true);
    kw_grammar_call_format hermes = {.open = "<tool_call>\n", .close = "\n</tool_call>"};
    kw_grammar *g = build(w.t, 2, &hermes);
    KW_CHECK(g != NULL);
    if (g) {
        ACC(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"unit\": \"c\"}}\n</tool_call>");
        ACC(g, "<tool_call>\n{\"name\":\"count\",\"arguments\":{\"k\":7}}\n</tool_call>");
        REJ(g, "<tool_call>\n{\"name\": \"count\", \"arguments\": {\"k\": 12}}\n</tool_call>");          /* maximum */
        REJ(g, "<tool_call>\n{\"name\": \"count\", \"arguments\": {\"k\": 1, \"x\": 1}}\n</tool_call>");   /* strict */
        REJ(g, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>");
        REJ(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>"); /* required */
        REJ(g, "{\"name\": \"count\", \"arguments\": {\"k\": 1}}");                                        /* no tags */
        REJ(g, "Sure.");
        kw_grammar_free(g);
    }
    /* one tool, Llama 3 key, no tags; non-strict: extra properties allowed */
    kw_grammar_call_format llama = {.args_key = "parameters"};
    w.t[1].strict = false;
    g = build(&w.t[1], 1, &llama);
    KW_CHECK(g != NULL);
    if (g) {
        ACC(g, "{\"name\": \"count\", \"parameters\": {\"k\": 3}}");
        REJ(g, "{\"name\": \"count\", \"arguments\": {\"k\": 3}}");
        REJ(g, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"a\", \"unit\": \"c\"}}");
        kw_grammar_free(g);
    }
    kw_grammar_call_format args = {.args_only = true};
    g = build(&w.t[0], 1, &args);
    KW_CHECK(g != NULL);
    if (g) {
        ACC(g, "{\"city\": \"Oslo\", \"unit\": \"f\"}");
        REJ(g, "{\"city\": \"Oslo\", \"unit\": \"k\"}");
        REJ(g, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"f\"}}");
        kw_grammar_free(g);
    }
    /* arguments alone need exactly one tool; a tool without a name fails */
    kw_err e = {{0}};
    KW_CHECK(kw_grammar_tool_call(w.t, 2, &args, NULL, NULL, &e) == NULL && strstr(e.msg, "one tool"));
    kw_grammar_tool nameless = {.name = ""};
    KW_CHECK(kw_grammar_tool_call(&nameless, 1, &hermes, NULL, NULL, &e) == NULL && strstr(e.msg, "name"));
    /* a schema feature the compiler lacks fails naming it */
    cJSON *bad = cJSON_Parse("{\"type\":\"object\",\"not\":{}}");
    kw_grammar_tool bt = {.name = "b", .parameters = bad};
    KW_CHECK(kw_grammar_tool_call(&bt, 1, &hermes, NULL, NULL, &e) == NULL && strstr(e.msg, "'not'"));
    cJSON_Delete(bad);
    two_free(&w);
}

static void test_auto_text(void) {
    two w;
    two_init(&w, true);
    kw_grammar_call_format f = {.open = "<tool_call>\n", .close = "\n</tool_call>", .auto_text = true,
                                .text_excl = TAGS, .n_text_excl = 3};
    kw_grammar *g = build(w.t, 2, &f);
    KW_CHECK(g != NULL);
    if (!g) { two_free(&w); return; }
    ACC(g, "");
    ACC(g, "Plain answer, with <b>tags</b> and [brackets] and <tool_ but no call.");
    ACC(g, "<<tool_cal[TOOL_CALL<|python_ta");                   /* partial tags, restarting, at the end */
    ACC(g, "I'll check.\n<tool_call>\n{\"name\": \"count\", \"arguments\": {\"k\": 1}}\n</tool_call>");
    ACC(g, "<tool_call>\n{\"name\": \"count\", \"arguments\": {\"k\": 1}}\n</tool_call>\n<tool_call>\n"
           "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"x\", \"unit\": \"c\"}}\n</tool_call>\n");
    REJ(g, "text <tool_call> more text");                        /* a tag in the text that is no valid call */
    REJ(g, "a [TOOL_CALLS] b");
    REJ(g, "a <|python_tag|> b");
    REJ(g, "<tool_call>\n{\"name\": \"count\", \"arguments\": {\"k\": 99}}\n</tool_call>");
    REJ(g, "<tool_call>\n{\"name\": \"count\", \"arguments\": {\"k\": 1}}\n</tool_call> and text after");
    kw_grammar_free(g);
    /* at most one call */
    f.max_calls = 1;
    g = build(w.t, 2, &f);
    KW_CHECK(g != NULL);
    if (g) {
        const char *one = "<tool_call>\n{\"name\": \"count\", \"arguments\": {\"k\": 1}}\n</tool_call>";
        char twice[512];
        snprintf(twice, sizeof twice, "%s\n%s", one, one);
        ACC(g, one);
        REJ(g, twice);
        kw_grammar_free(g);
    }
    /* bare: one call or text that cannot start one */
    kw_grammar_call_format b = {.args_key = "parameters", .auto_text = true, .bare = true, .text_excl = TAGS, .n_text_excl = 3};
    g = build(w.t, 2, &b);
    KW_CHECK(g != NULL);
    if (g) {
        ACC(g, "{\"name\": \"count\", \"parameters\": {\"k\": 2}}");
        ACC(g, "The answer is {x}.");
        ACC(g, "<b>bold</b>");
        ACC(g, "[");
        ACC(g, "");
        REJ(g, "{not a call}");
        REJ(g, " leading space");
        REJ(g, "x <tool_call>");
        kw_grammar_free(g);
    }
    /* tags the construction cannot take */
    kw_err e = {{0}};
    const char *rep[] = {"<a<b>"};
    kw_grammar_call_format r = f;
    r.text_excl = rep;
    r.n_text_excl = 1;
    KW_CHECK(kw_grammar_tool_call(w.t, 2, &r, NULL, NULL, &e) == NULL && strstr(e.msg, "first character"));
    two_free(&w);
}

/* Random walks under the mask: every output either ends in calls that parse or
 * is text with no tag in it; the mask agrees with accept_token along a path. */
static void test_walks(void) {
    two w;
    two_init(&w, true);
    kw_grammar_call_format f = {.open = "<tool_call>\n", .close = "\n</tool_call>", .auto_text = true,
                                .text_excl = TAGS, .n_text_excl = 3};
    kw_grammar *g = build(w.t, 2, &f);
    static const char *extra[] = {"<tool_call>", "<tool", "_call>", "\n</tool_call>", "<|python_tag|>", "[TOOL_CALLS]",
                                  "{\"name\": \"", "count", "get_weather", "\", \"arguments\": {", "\"k\": ", "}}",
                                  "Hello", " world", "<b>", "[x]", "\n", NULL};
    kw_grammar_vocab *v = gt_vocab_small(extra, 1);
    kw_err e = {{0}};
    kw_grammar_index *ix = g && v ? kw_grammar_index_new(g, v, NULL, &e) : NULL;
    KW_CHECK_MSG(ix != NULL, "index: %s", e.msg);
    if (ix) {
        kw_grammar_matcher *m = kw_grammar_matcher_new(g, ix, &e);
        const char *path = "Hi <b>x</b> <tool_cal <tool_call>\n{\"name\": \"count\", \"arguments\": {\"k\": 4}}\n</tool_call>";
        KW_CHECK(m != NULL);
        for (size_t i = 0; m && path[i]; i++) {
            int bad = gt_check_mask_exact(m, v);
            KW_CHECK_MSG(bad == 0, "after %zu bytes: %d tokens disagree", i, bad);
            KW_CHECK_MSG(kw_grammar_accept_bytes(m, path + i, 1, &e) == 0, "byte %zu: %s", i, e.msg);
        }
        kw_grammar_matcher_free(m);
        int calls = 0, texts = 0;
        for (uint32_t seed = 1; seed <= 60; seed++) {
            char out[4096], why[256];
            size_t n = 0;
            int rc = gt_random_walk(g, ix, v, seed, 300, 0.05, "}\"", out, sizeof out, &n, why, sizeof why);
            KW_CHECK_MSG(rc >= 0, "walk %u: %s", seed, why);
            if (rc != 1) continue;
            const char *c = strstr(out, "<tool_call>");
            if (c) {
                calls++;
                const char *open = c + strlen("<tool_call>\n"), *close = strstr(open, "\n</tool_call>");
                KW_CHECK_MSG(close != NULL, "walk %u: an unclosed call: %s", seed, out);
                cJSON *o = close ? cJSON_ParseWithLength(open, (size_t)(close - open)) : NULL;
                const cJSON *nm = cJSON_GetObjectItemCaseSensitive(o, "name");
                KW_CHECK_MSG(cJSON_IsString(nm) && cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(o, "arguments")),
                             "walk %u: the call parses: %s", seed, out);
                cJSON_Delete(o);
            } else {
                texts++;
                KW_CHECK_MSG(!strstr(out, "[TOOL_CALLS]") && !strstr(out, "<|python_tag|>"), "walk %u: a tag in text: %s", seed, out);
            }
        }
        KW_CHECK_MSG(texts > 0, "some walks end as text (%d)", texts);
        fprintf(stderr, "walks: %d with calls, %d text\n", calls, texts);
    }
    kw_grammar_index_free(ix);
    kw_grammar_vocab_free(v);
    kw_grammar_free(g);
    two_free(&w);
}

int main(void) {
    test_forced_formats();
    test_auto_text();
    test_walks();
    return kw_test_finish();
}
