/* cmd_generate.c - `kvwise generate`: prompt in, generated text out.
 *
 * Streams ONLY the generated text to stdout (complete UTF-8 only, through
 * the tokenizer's streaming detokenizer), so scripts can use it; load time,
 * prompt tok/s and generation tok/s go to stderr. Stops at an
 * end-of-generation token, after -n tokens, or when the context is full. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli.h"
#include "run_common.h"
#include "kvwise/sampler.h"
#include "kvwise/tokenizer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvwise generate -m MODEL (-p PROMPT | -f FILE) [-n N] [sampling options] [-t THREADS] [--ctx N]\n\n"
            "Generates a continuation of PROMPT and streams only the new text to stdout.\n"
            "Timings (load, prompt tok/s, generation tok/s) go to stderr.\n\n"
            "  -p, --prompt TEXT       the prompt (bytes as given; \"\" = just BOS)\n"
            "  -f, --file FILE         read the prompt from a file\n"
            "  -n, --n-predict N       tokens to generate (default 128; -1 = until EOG or the context is full)\n"
            "      --temp T            temperature; 0 = greedy (default 0.8)\n"
            "      --top-k K           keep the K most likely tokens; 0 = off (default 40)\n"
            "      --top-p P           keep the smallest set with probability >= P; 1 = off (default 0.95)\n"
            "      --min-p M           drop tokens below M x the top probability; 0 = off (default 0.05)\n"
            "      --repeat-penalty R  divide (multiply if negative) logits of recent tokens by R (default 1 = off)\n"
            "      --repeat-last-n N   window of recent tokens for the penalties (default 64)\n"
            "      --presence-penalty P   subtract P from logits of tokens seen in the window (default 0)\n"
            "      --frequency-penalty F  subtract F x count from logits of tokens in the window (default 0)\n"
            "  -s, --seed S            RNG seed (default: from the clock; printed on stderr)\n"
            "      --ignore-eos        keep generating after an end-of-generation token\n"
            "%s"
            "  KV cache default: f16.\n"
            "  -h, --help              this help\n",
            kw_run_common_help());
}

typedef struct gen_opts {
    long n_predict;
    kw_sampler_params sp;
    bool seed_set, ignore_eos;
} gen_opts;

/* Parses the sampling options; 1 consumed, 0 not ours, -1 bad value. */
static int parse_sampling(const kw_run_opts *o, gen_opts *g, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    static const char *const names[] = {"-n", "--n-predict", "--temp", "--top-k", "--top-p", "--min-p",
                                        "--repeat-penalty", "--repeat-last-n", "--presence-penalty",
                                        "--frequency-penalty", "-s", "--seed"};
    if (!strcmp(a, "--ignore-eos")) { g->ignore_eos = true; return 1; }
    size_t k = 0;
    while (k < sizeof names / sizeof names[0] && strcmp(a, names[k])) k++;
    if (k == sizeof names / sizeof names[0]) return 0;
    if (*i + 1 >= argc) { fprintf(stderr, "kvwise generate: %s needs a value\n", a); return -1; }
    const char *v = argv[++*i];
    long n;
    double d;
    int rc = 0;
    if (k <= 1) rc = kw_run_int(o, a, v, -1, 1 << 24, &g->n_predict);
    else if (k == 2) { rc = kw_run_float(o, a, v, 0, 100, &d); g->sp.temp = (float)d; }
    else if (k == 3) { rc = kw_run_int(o, a, v, 0, 1 << 24, &n); g->sp.top_k = (int32_t)n; }
    else if (k == 4) { rc = kw_run_float(o, a, v, 0, 1, &d); g->sp.top_p = (float)d; }
    else if (k == 5) { rc = kw_run_float(o, a, v, 0, 1, &d); g->sp.min_p = (float)d; }
    else if (k == 6) { rc = kw_run_float(o, a, v, 0.01, 100, &d); g->sp.repeat_penalty = (float)d; }
    else if (k == 7) { rc = kw_run_int(o, a, v, -1, 1 << 20, &n); g->sp.repeat_last_n = (int32_t)n; }
    else if (k == 8) { rc = kw_run_float(o, a, v, -100, 100, &d); g->sp.presence_penalty = (float)d; }
    else if (k == 9) { rc = kw_run_float(o, a, v, -100, 100, &d); g->sp.frequency_penalty = (float)d; }
    else {
        char *end = NULL;
        unsigned long long s = strtoull(v, &end, 10);
        if (!*v || *end) { fprintf(stderr, "kvwise generate: %s needs a non-negative integer (got '%s')\n", a, v); return -1; }
        g->sp.seed = (uint64_t)s;
        g->seed_set = true;
    }
    return rc ? -1 : 1;
}

/* Writes a token's text (complete UTF-8 only) to stdout. */
static void emit(const kw_tokenizer *t, kw_detok *d, int32_t id, char *buf, size_t cap) {
    size_t n = kw_detok_push(t, d, id, false, buf, cap);
    if (n) { fwrite(buf, 1, n, stdout); fflush(stdout); }
}

static int generate(const kw_run_opts *o, const gen_opts *g, kw_model *m, double load_ms) {
    int rc = 1;
    kw_run_prompt pr;
    int read = kw_run_prompt_read(o, m, &pr);
    const int32_t *ids = pr.ids;
    size_t n_prompt = pr.n;
    const kw_tokenizer *tok = kw_model_tokenizer(m);
    int32_t n_vocab = kw_model_hparams(m)->n_vocab;
    kw_session *s = NULL;
    kw_sampler *smp = NULL;
    char *piece = NULL;
    kw_err err = {{0}};
    if (read) goto out;
    if (n_prompt == 0) { fprintf(stderr, "kvwise generate: the prompt is empty and the vocab adds no BOS\n"); rc = 2; goto out; }
    s = kw_run_session(o, m, 0);
    if (!s) goto out;
    if ((int32_t)n_prompt >= kw_session_n_ctx(s)) {
        fprintf(stderr, "kvwise generate: the prompt has %zu tokens; the context holds %d (raise --ctx)\n", n_prompt,
                kw_session_n_ctx(s));
        rc = 2;
        goto out;
    }
    smp = kw_sampler_create(&g->sp, n_vocab, &err);
    size_t cap = kw_tokenizer_max_piece(tok) * 3 + 16;
    piece = malloc(cap);
    if (!smp || !piece) { fprintf(stderr, "kvwise generate: %s\n", smp ? "out of memory" : err.msg); goto out; }
    for (size_t i = 0; i < n_prompt; i++) kw_sampler_accept(smp, ids[i]);
    double t0 = kw_run_now_ms();
    if (kw_session_eval(s, ids, (int32_t)n_prompt, false, &err)) { fprintf(stderr, "kvwise generate: %s\n", err.msg); goto out; }
    double t1 = kw_run_now_ms();
    kw_detok d;
    bool bos_only = pr.len == 0;
    if (bos_only) kw_detok_init(&d);
    else kw_detok_init_continuation(&d);
    long n_gen = 0;
    const char *stop = "length";
    for (;;) {
        if (g->n_predict >= 0 && n_gen >= g->n_predict) break;
        int32_t t = kw_sampler_sample(smp, kw_session_logits(s, -1));
        if (!g->ignore_eos && kw_token_is_eog(tok, t)) { stop = "end of generation"; break; }
        emit(tok, &d, t, piece, cap);
        kw_sampler_accept(smp, t);
        n_gen++;
        if (kw_session_n_past(s) >= kw_session_n_ctx(s)) { stop = "context full"; break; }
        if (g->n_predict >= 0 && n_gen >= g->n_predict) break;
        if (kw_session_eval(s, &t, 1, false, &err)) { fprintf(stderr, "\nkvwise generate: %s\n", err.msg); goto out; }
    }
    size_t n = kw_detok_flush(&d, piece, cap);
    if (n) fwrite(piece, 1, n, stdout);
    fflush(stdout);
    double t2 = kw_run_now_ms();
    fprintf(stderr, "\nload: %.0f ms | prompt: %zu tokens in %.0f ms (%.1f tok/s) | generation: %ld tokens in %.0f ms "
                    "(%.1f tok/s) | stop: %s | seed %llu\n",
            load_ms, n_prompt, t1 - t0, n_prompt / ((t1 - t0) / 1e3 + 1e-9), n_gen, t2 - t1,
            n_gen / ((t2 - t1) / 1e3 + 1e-9), stop, (unsigned long long)g->sp.seed);
    rc = 0;
out:
    free(piece);
    kw_sampler_free(smp);
    return kw_run_end(s, &pr, rc);
}

int cmd_generate(int argc, char **argv) {
    kw_run_opts o = {.cmd = "generate", .kv_type = KW_KV_TYPE_AUTO};
    gen_opts g = {.n_predict = 128};
    kw_sampler_params_default(&g.sp);
    for (int i = 1; i < argc; i++) {
        kw_run_arg_kind k = kw_run_arg(&o, argc, argv, &i, usage);
        if (k == KW_RUN_ARG_TAKEN) continue;
        if (k != KW_RUN_ARG_OWN) return k == KW_RUN_ARG_HELP ? 0 : 2;
        int rc = parse_sampling(&o, &g, argc, argv, &i);
        if (rc < 0) return 2;
        if (rc == 0) { fprintf(stderr, "kvwise generate: unknown option '%s' (see --help)\n", argv[i]); return 2; }
    }
    if (!o.model) { fprintf(stderr, "kvwise generate: -m MODEL is required (see --help)\n"); return 2; }
    if (!o.prompt && !o.file) { fprintf(stderr, "kvwise generate: a prompt is required (-p TEXT or -f FILE)\n"); return 2; }
    if (!g.seed_set) g.sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20);
    double load_ms = 0;
    kw_model *m = kw_run_load(&o, &load_ms);
    if (!m) return 2;
    int rc = generate(&o, &g, m, load_ms);
    kw_model_free(m);
    return rc;
}
