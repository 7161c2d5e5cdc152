/* bench_grammar.c - grammar engine micro-benchmark: compile time per JSON
 * Schema of the corpus (tests/grammar/schemas/), index (grammar x vocab)
 * build time, and the token-mask time per decode step at a Qwen3-sized
 * vocab (151,936 tokens).
 *
 * The vocab: the union of the real byte-level BPE vocabs found in
 * ../shared/conformance/tokenizer/ (GPT-2, DeepSeek LLM/Coder, StarCoder,
 * Falcon, MPT, Refact: their decoded pieces, deduplicated), cut or padded
 * with synthetic pieces to --n-vocab, then an EOG and a special token; or
 * the vocab of one GGUF (--gguf FILE). Mask steps: a random walk per
 * schema that draws among the allowed tokens (preferring closing tokens
 * half of the time, so documents end), timing the scheduler's grammar
 * work at every step (the budget policy's mask, the distance check after
 * the token; the last tokens of --steps close the document); the share of a decode step uses --decode-ms (default 35, the 1B
 * model's decode step on the dev machine). Then the other front-ends'
 * grammars: json_object, GBNF, regex, Lark apply_patch, and tool calls
 * (forced, and tool_choice auto's tag-free text).
 *
 * usage: bench_grammar [--schemas DIR] [--n-vocab N] [--gguf FILE] [--steps N] [--decode-ms MS]
 *                      [--limit N] [--cputime] */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kvwise/gguf.h"
#include "kvwise/grammar.h"
#include "kvwise/tokenizer.h"
#include "bench_util.h"

static uint32_t rnd32(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

typedef struct strset { char **s; uint32_t *len; int32_t n, cap; uint64_t *ht; uint32_t hcap; } strset;

static uint64_t hstr(const char *s, uint32_t n) {
    uint64_t h = 1469598103934665603ull;
    for (uint32_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h | 1;
}

/* adds a piece unless present; returns 1 when added */
static int set_add(strset *st, const char *p, uint32_t n) {
    if (!st->hcap) {
        st->hcap = 1u << 20;
        st->ht = calloc(st->hcap, sizeof *st->ht);
    }
    uint64_t h = hstr(p, n);
    uint32_t j = (uint32_t)h & (st->hcap - 1);
    while (st->ht[j]) {
        uint32_t k = (uint32_t)(st->ht[j] >> 32);
        if ((uint32_t)st->ht[j] == (uint32_t)h && st->len[k] == n && !memcmp(st->s[k], p, n)) return 0;
        j = (j + 1) & (st->hcap - 1);
    }
    if (st->n == st->cap) {
        st->cap = st->cap ? st->cap * 2 : 1024;
        st->s = realloc(st->s, (size_t)st->cap * sizeof *st->s);
        st->len = realloc(st->len, (size_t)st->cap * sizeof *st->len);
    }
    st->s[st->n] = malloc(n + 1);
    memcpy(st->s[st->n], p, n);
    st->len[st->n] = n;
    st->ht[j] = ((uint64_t)st->n << 32) | (uint32_t)h;
    st->n++;
    return 1;
}

static int add_gguf_vocab(strset *st, const char *path, int32_t limit) {
    kw_err e;
    kw_gguf *g = kw_gguf_open(path, &e);
    if (!g) return 0;
    kw_tokenizer *t = kw_tokenizer_load(g, &e);
    kw_gguf_close(g);
    if (!t) return 0;
    int added = 0;
    char buf[1024];
    for (int32_t i = 0; i < kw_tokenizer_n_vocab(t) && st->n < limit; i++) {
        if (kw_token_is_special(t, i) || kw_token_is_eog(t, i)) continue;
        size_t n = kw_token_to_piece(t, i, buf, sizeof buf, false);
        if (n == 0 || n > sizeof buf) continue;
        added += set_add(st, buf, (uint32_t)n);
    }
    kw_tokenizer_free(t);
    return added;
}

static kw_grammar_vocab *make_vocab(const char *gguf, int32_t n_vocab, int *n_real) {
    strset st = {0};
    char b[4];
    for (int i = 0; i < 256; i++) { b[0] = (char)i; set_add(&st, b, 1); }
    *n_real = 0;
    if (gguf) {
        *n_real = add_gguf_vocab(&st, gguf, n_vocab - 2);
    } else {
        const char *dir = getenv("KW_SHARED_DIR");
        static const char *names[] = {"deepseek-llm", "gpt-2", "deepseek-coder", "starcoder", "falcon", "mpt", "refact", NULL};
        for (int i = 0; names[i]; i++) {
            char path[1024];
            snprintf(path, sizeof path, "%s/conformance/tokenizer/ggml-vocab-%s.gguf", dir ? dir : "../shared", names[i]);
            *n_real += add_gguf_vocab(&st, path, n_vocab - 2);
        }
    }
    uint32_t seed = 4242;
    static const char alpha[] = "abcdefghijklmnopqrstuvwxyz etaoinshrdlu_ETAOIN0123456789.,;:(){}[]\"'\n";
    while (st.n < n_vocab - 2) {   /* pad with word-like synthetic pieces */
        char w[24];
        uint32_t len = 2 + rnd32(&seed) % 10, o = 0;
        if (rnd32(&seed) % 2) w[o++] = ' ';
        while (o < len) w[o++] = alpha[rnd32(&seed) % (sizeof alpha - 1)];
        set_add(&st, w, o);
    }
    st.n = n_vocab - 2;
    const char **bytes = malloc((size_t)n_vocab * sizeof *bytes);
    uint32_t *lens = malloc((size_t)n_vocab * sizeof *lens);
    uint8_t *kinds = calloc((size_t)n_vocab, 1);
    for (int32_t i = 0; i < st.n; i++) { bytes[i] = st.s[i]; lens[i] = st.len[i]; }
    bytes[n_vocab - 2] = "<|im_end|>"; lens[n_vocab - 2] = 10; kinds[n_vocab - 2] = KW_GTOK_EOG;
    bytes[n_vocab - 1] = "<|im_start|>"; lens[n_vocab - 1] = 12; kinds[n_vocab - 1] = KW_GTOK_SPECIAL;
    kw_err e;
    kw_grammar_vocab *v = kw_grammar_vocab_new(n_vocab, bytes, lens, kinds, &e);
    if (!v) fprintf(stderr, "vocab: %s\n", e.msg);
    for (int32_t i = 0; i < st.cap && i < st.n; i++) free(st.s[i]);
    free(st.s); free(st.len); free(st.ht); free(bytes); free(lens); free(kinds);
    return v;
}

typedef struct dvec { double *v; size_t n, cap; } dvec;
static void dpush(dvec *d, double x) {
    if (d->n == d->cap) { d->cap = d->cap ? d->cap * 2 : 1024; d->v = realloc(d->v, d->cap * sizeof *d->v); }
    d->v[d->n++] = x;
}
static double pct(dvec *d, double p) {
    if (!d->n) return 0;
    qsort(d->v, d->n, sizeof *d->v, cmp_double);
    size_t i = (size_t)(p * (double)(d->n - 1) + 0.5);
    return d->v[i];
}
static double mean(const dvec *d) {
    double s = 0;
    for (size_t i = 0; i < d->n; i++) s += d->v[i];
    return d->n ? s / (double)d->n : 0;
}

/* one generation walk; mask times appended to steps */
static int walk(const kw_grammar *g, const kw_grammar_index *ix, const kw_grammar_vocab *v, uint32_t seed,
                int max_steps, const char *prefer, dvec *steps, uint32_t *mask, int32_t *allowed) {
    kw_err e;
    kw_grammar_matcher *m = kw_grammar_matcher_new(g, ix, &e);
    if (!m) return -1;
    int32_t nv = kw_grammar_vocab_size(v);
    int rc = 0, t;
    for (t = 0; t < max_steps; t++) {
        /* the scheduler's per-step work: the budget policy's mask (the plain
           one until the last tokens, then the closing one) and, after the
           token, the distance check */
        double t0 = now_sec();
        bool closing_mask;
        int32_t n = kw_grammar_mask_budget(m, mask, max_steps - t, &closing_mask, &e);
        double dt = now_sec() - t0;
        if (n <= 0) { dpush(steps, dt); rc = n < 0 ? -1 : (kw_grammar_is_complete(m) ? 1 : -1); break; }
        int32_t na = 0, eog = -1;
        bool closing = rnd32(&seed) % 2;
        for (int pass = 0; pass < 2 && !na; pass++)
            for (int32_t i = 0; i < nv; i++) {
                if (!kw_grammar_mask_test(mask, i)) continue;
                if (kw_grammar_vocab_kind(v, i) == KW_GTOK_EOG) { eog = i; continue; }
                if (closing && !pass) {
                    uint32_t len;
                    const char *tb = kw_grammar_vocab_token(v, i, &len);
                    if (!tb[0] || !strchr(prefer, tb[0]) || len > 2) continue;
                }
                allowed[na++] = i;
            }
        int32_t pick = (eog >= 0 && (na == 0 || rnd32(&seed) % 4 != 0)) ? eog : allowed[rnd32(&seed) % (uint32_t)na];
        if (kw_grammar_accept_token(m, pick, &e)) { fprintf(stderr, "accept failed: %s\n", e.msg); rc = -1; break; }
        t0 = now_sec();
        if (!closing_mask && pick != eog && !kw_grammar_budget_ok(m, max_steps - t - 1)) {
            /* too few tokens left after it: back, and the closing mask's shortest token */
            kw_grammar_rollback(m, 1);
            if (kw_grammar_mask_closing(m, mask, &e) > 0)
                for (int32_t i = 0; i < nv; i++)
                    if (kw_grammar_mask_test(mask, i)) { pick = i; break; }
            if (kw_grammar_accept_token(m, pick, &e)) { fprintf(stderr, "accept failed: %s\n", e.msg); rc = -1; break; }
        }
        dt += now_sec() - t0;
        dpush(steps, dt);
        if (getenv("BENCH_GRAMMAR_TRACE") && dt > 1e-3) fprintf(stderr, "slow step %d: %.3f ms (%d allowed)\n", t, dt * 1e3, n);
        if (pick == eog || kw_grammar_is_complete(m)) { rc = 1; break; }
    }
    kw_grammar_matcher_free(m);
    return rc;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Tool-call grammars (kw_grammar_tool_call) with two tools: a forced Hermes
 * call, and tool_choice auto (tag-free text, then calls). The auto walks
 * never pick EOG and stay in the text (the state every token of a plain
 * answer is sampled in) for max_steps tokens. */
static void bench_tools(const kw_grammar_vocab *v, int max_steps, uint32_t *mask, int32_t *allowed) {
    static const char *const tags[] = {"<tool_call>", "<|python_tag|>", "[TOOL_CALLS]"};
    const char *sa = "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":40},"
                     "\"unit\":{\"enum\":[\"celsius\",\"fahrenheit\"]}},\"required\":[\"city\",\"unit\"],\"additionalProperties\":false}";
    const char *sb = "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\",\"maxLength\":80},"
                     "\"lines\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"maxItems\":8}},\"required\":[\"path\"]}";
    kw_err e;
    kw_grammar_tool t[2] = {{.name = "get_weather"}, {.name = "read_file", .strict = true}};
    cJSON *pa = cJSON_Parse(sa), *pb = cJSON_Parse(sb);
    t[0].parameters = pa;
    t[1].parameters = pb;
    kw_grammar_call_format forms[3] = {
        {.open = "<tool_call>\n", .close = "\n</tool_call>"},
        {.open = "<tool_call>\n", .close = "\n</tool_call>", .auto_text = true, .text_excl = tags, .n_text_excl = 3},
        {.open = "<tool_call>\n", .close = "\n</tool_call>", .auto_text = true, .text_excl = tags, .n_text_excl = 3}};
    /* the third: another tool set under auto, whose text rule's walks come from the vocab's cache */
    const char *names[3] = {"tool-forced", "tool-auto", "tool-auto2"};
    int32_t nv = kw_grammar_vocab_size(v);
    for (int k = 0; k < 3; k++) {
        double a = now_sec();
        kw_grammar *g = kw_grammar_tool_call(k == 2 ? t + 1 : t, k == 2 ? 1 : 2, &forms[k], NULL, NULL, &e);
        double b = now_sec();
        kw_grammar_index *ix = g ? kw_grammar_index_new(g, v, NULL, &e) : NULL;
        double c = now_sec();
        if (!ix) { fprintf(stderr, "%s: %s\n", names[k], e.msg); kw_grammar_free(g); continue; }
        dvec st = {0};
        if (k == 0) {
            for (uint32_t s = 0; s < 5; s++) walk(g, ix, v, 55 + s, max_steps, "\"]}", &st, mask, allowed);
        } else {
            uint32_t seed = 31;
            kw_grammar_matcher *m = kw_grammar_matcher_new(g, ix, &e);
            for (int step = 0; m && step < max_steps; step++) {
                double t0 = now_sec();
                int32_t n = kw_grammar_mask(m, mask, &e);
                dpush(&st, now_sec() - t0);
                if (n <= 0) break;
                int32_t na = 0;
                for (int32_t i = 0; i < nv; i++)
                    if (kw_grammar_mask_test(mask, i) && kw_grammar_vocab_kind(v, i) == KW_GTOK_TEXT) allowed[na++] = i;
                if (!na || kw_grammar_accept_token(m, allowed[rnd32(&seed) % (uint32_t)na], &e)) break;
            }
            kw_grammar_matcher_free(m);
        }
        printf("%-12s compile %.2f ms, index %.1f ms, mask mean %.3f ms p99 %.3f ms max %.3f ms (%zu steps)\n",
               names[k], (b - a) * 1e3, (c - b) * 1e3, mean(&st) * 1e3, pct(&st, 0.99) * 1e3, pct(&st, 1.0) * 1e3, st.n);
        free(st.v);
        kw_grammar_index_free(ix);
        kw_grammar_free(g);
    }
    cJSON_Delete(pa);
    cJSON_Delete(pb);
}

int main(int argc, char **argv) {
    const char *dir = "tests/grammar/schemas", *gguf = NULL;
    int32_t n_vocab = 151936;
    int max_steps = 400, limit = 100000;
    double decode_ms = 35;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--schemas") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--n-vocab") && i + 1 < argc) n_vocab = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--gguf") && i + 1 < argc) gguf = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) max_steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--decode-ms") && i + 1 < argc) decode_ms = atof(argv[++i]);
        else if (!strcmp(argv[i], "--limit") && i + 1 < argc) limit = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cputime")) g_cputime = 1;
        else { fprintf(stderr, "usage: see the comment at the top of bench/bench_grammar.c\n"); return 2; }
    }
    double t0 = now_sec();
    int n_real;
    kw_grammar_vocab *v = make_vocab(gguf, n_vocab, &n_real);
    if (!v) return 1;
    printf("vocab: %d tokens (%d real BPE pieces from %s), built in %.2f s\n", n_vocab, n_real,
           gguf ? gguf : "the shared tokenizer vocabs", now_sec() - t0);
    DIR *d = opendir(dir);
    if (!d) { fprintf(stderr, "no schema dir %s\n", dir); return 1; }
    char *names[2048];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < 2048)
        if (strstr(de->d_name, ".json")) names[n++] = strdup(de->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    if (n > limit) n = limit;
    dvec comp = {0}, idx = {0}, steps = {0}, idx_bytes = {0};
    uint32_t *mask = malloc(((size_t)n_vocab + 31) / 32 * 4);
    int32_t *allowed = malloc((size_t)n_vocab * sizeof *allowed);
    int walks_ok = 0, walks = 0;
    const char *worst = "";
    double worst_step = 0;
    for (int i = 0; i < n; i++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        static char text[1 << 20];
        size_t len = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        kw_err e;
        double a = now_sec();
        kw_grammar *g = kw_grammar_from_json_schema(text, len, NULL, NULL, &e);
        double b = now_sec();
        if (!g) { fprintf(stderr, "%s: %s\n", names[i], e.msg); continue; }
        kw_grammar_index *ix = kw_grammar_index_new(g, v, NULL, &e);
        double c = now_sec();
        if (!ix) { fprintf(stderr, "%s index: %s\n", names[i], e.msg); kw_grammar_free(g); continue; }
        dpush(&comp, b - a);
        dpush(&idx, c - b);
        if (getenv("BENCH_GRAMMAR_TRACE") && c - b > 0.3)
            fprintf(stderr, "slow index %s: %.0f ms, %u states\n", names[i], (c - b) * 1e3, kw_grammar_n_states(g));
        dpush(&idx_bytes, (double)kw_grammar_index_bytes(ix));
        size_t before = steps.n;
        walks++;
        walks_ok += walk(g, ix, v, 1000u + (uint32_t)i, max_steps, "\"]},", &steps, mask, allowed) == 1;
        for (size_t k = before; k < steps.n; k++)
            if (steps.v[k] > worst_step) { worst_step = steps.v[k]; worst = names[i]; }
        kw_grammar_index_free(ix);
        kw_grammar_free(g);
    }
    printf("schemas: %zu compiled\n", comp.n);
    printf("compile (schema -> automaton): p50 %.3f ms  p99 %.3f ms  max %.3f ms\n", pct(&comp, 0.5) * 1e3,
           pct(&comp, 0.99) * 1e3, pct(&comp, 1.0) * 1e3);
    printf("index (automaton x %d-token vocab): p50 %.1f ms  p99 %.1f ms  max %.1f ms; memory p50 %.2f MiB max %.2f MiB\n",
           n_vocab, pct(&idx, 0.5) * 1e3, pct(&idx, 0.99) * 1e3, pct(&idx, 1.0) * 1e3, pct(&idx_bytes, 0.5) / 1048576.0,
           pct(&idx_bytes, 1.0) / 1048576.0);
    double mu = mean(&steps);
    printf("mask per step: %zu steps over %d walks (%d ended): mean %.3f ms  p50 %.3f ms  p99 %.3f ms  max %.3f ms (%s)\n",
           steps.n, walks, walks_ok, mu * 1e3, pct(&steps, 0.5) * 1e3, pct(&steps, 0.99) * 1e3, pct(&steps, 1.0) * 1e3, worst);
    printf("share of a %.0f ms decode step: mean %.2f%%  max %.2f%%\n", decode_ms, mu * 1e3 / decode_ms * 100,
           pct(&steps, 1.0) * 1e3 / decode_ms * 100);
    /* the other front-ends */
    struct { const char *kind, *src, *prefer; } others[] = {
        {"json_object", NULL, "\"]},"},
        {"gbnf-arith", "root ::= expr\nexpr ::= term ((\"+\" | \"-\") term)*\nterm ::= [0-9]+ | \"(\" expr \")\"\n", ")"},
        {"regex", "[A-Z][a-z]{2,12}( [A-Z][a-z]{2,12}){0,3}, [0-9]{1,5} [A-Z][a-z]+ (St|Ave|Rd)\\.", ".,"},
        {NULL, NULL, NULL}};
    for (int k = 0; others[k].kind; k++) {
        kw_err e;
        double a = now_sec();
        kw_grammar *g = !strcmp(others[k].kind, "json_object") ? kw_grammar_json_object(NULL, &e)
                        : !strcmp(others[k].kind, "regex") ? kw_grammar_from_regex(others[k].src, strlen(others[k].src), NULL, &e)
                        : kw_grammar_from_gbnf(others[k].src, strlen(others[k].src), NULL, &e);
        if (!g) { fprintf(stderr, "%s: %s\n", others[k].kind, e.msg); continue; }
        double b = now_sec();
        kw_grammar_index *ix = kw_grammar_index_new(g, v, NULL, &e);
        double c = now_sec();
        dvec st = {0};
        for (uint32_t s = 0; s < 5; s++) walk(g, ix, v, 77 + s, max_steps, others[k].prefer, &st, mask, allowed);
        printf("%-12s compile %.2f ms, index %.1f ms, mask mean %.3f ms p99 %.3f ms max %.3f ms (%zu steps)\n",
               others[k].kind, (b - a) * 1e3, (c - b) * 1e3, mean(&st) * 1e3, pct(&st, 0.99) * 1e3, pct(&st, 1.0) * 1e3, st.n);
        free(st.v);
        kw_grammar_index_free(ix);
        kw_grammar_free(g);
    }
    const char *lark_path = "tests/grammar/fixtures/apply_patch.lark";
    FILE *f = fopen(lark_path, "rb");
    if (f) {
        static char text[1 << 16];
        size_t len = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        kw_err e;
        double a = now_sec();
        kw_grammar *g = kw_grammar_from_lark(text, len, NULL, &e);
        double b = now_sec();
        kw_grammar_index *ix = g ? kw_grammar_index_new(g, v, NULL, &e) : NULL;
        double c = now_sec();
        if (ix) {
            dvec st = {0};
            for (uint32_t s = 0; s < 5; s++) walk(g, ix, v, 99 + s, max_steps, "\n*", &st, mask, allowed);
            printf("%-12s compile %.2f ms, index %.1f ms, mask mean %.3f ms p99 %.3f ms max %.3f ms (%zu steps)\n",
                   "lark-patch", (b - a) * 1e3, (c - b) * 1e3, mean(&st) * 1e3, pct(&st, 0.99) * 1e3, pct(&st, 1.0) * 1e3, st.n);
            free(st.v);
        } else fprintf(stderr, "apply_patch: %s\n", e.msg);
        kw_grammar_index_free(ix);
        kw_grammar_free(g);
    }
    bench_tools(v, max_steps, mask, allowed);
    for (int i = 0; i < n; i++) free(names[i]);
    free(comp.v); free(idx.v); free(steps.v); free(idx_bytes.v); free(mask); free(allowed);
    kw_grammar_vocab_free(v);
    return 0;
}
