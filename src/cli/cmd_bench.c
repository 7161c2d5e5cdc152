/* cmd_bench.c - `kvwise bench -m MODEL [-p 512] [-n 128] [-t 2] [-r 5] [--json]`.
 *
 * Owns the end-to-end speed report: per repetition, a prefill of p random
 * tokens in one eval (pp tok/s), then n single-token decode steps from an
 * empty context (tg tok/s), like llama-bench's pp/tg tests; between
 * repetitions the built-in read-bandwidth probe runs on the same threads,
 * so the decode ceiling (bandwidth / bytes read per token) comes from the
 * same minutes as the figures. Prints median and min..max of each, model
 * weight bytes, bytes read per decoded token, and tg as % of the ceiling. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cjson/cJSON.h>
#include "cli.h"
#include "kvwise/gguf.h"
#include "kvwise/model.h"
#include "kvwise/tensor.h"

typedef struct bench_opts {
    const char *model;
    int p, n, t, r;
    bool json, no_repack;
} bench_opts;

typedef struct stat3 { double med, lo, hi; } stat3;

static void usage(FILE *f) {
    fprintf(f, "usage: kvwise bench -m MODEL [-p N] [-n N] [-t N] [-r N] [--json] [--no-repack]\n"
               "  -p N         prompt tokens per prefill test (default 512; 0 skips it)\n"
               "  -n N         decoded tokens per generation test (default 128; 0 skips it)\n"
               "  -t N         threads (default: physical cores)\n"
               "  -r N         repetitions (default 5); median and min..max are reported\n"
               "  --json       one JSON object on stdout\n"
               "  --no-repack  keep weights as stored (no load-time repacking)\n");
}

static double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static stat3 stats(double *v, int n) {
    stat3 s = {0, 0, 0};
    if (n <= 0) return s;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    s.lo = v[0];
    s.hi = v[n - 1];
    s.med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    return s;
}

static int parse_int(const char *s, int lo, int hi, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

static int parse_args(int argc, char **argv, bench_opts *o) {
    memset(o, 0, sizeof *o);
    o->p = 512; o->n = 128; o->r = 5; o->t = kw_cpu_physical_cores();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int *dst = !strcmp(a, "-p") ? &o->p : !strcmp(a, "-n") ? &o->n : !strcmp(a, "-t") ? &o->t
                 : !strcmp(a, "-r") ? &o->r : NULL;
        if (dst) {
            int lo = dst == &o->t || dst == &o->r ? 1 : 0;
            if (i + 1 >= argc || parse_int(argv[++i], lo, 1 << 20, dst) != 0) {
                fprintf(stderr, "kvwise bench: %s needs an integer >= %d\n", a, lo);
                return -1;
            }
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) o->model = argv[++i];
        else if (!strcmp(a, "--json")) o->json = true;
        else if (!strcmp(a, "--no-repack")) o->no_repack = true;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); exit(0); }
        else { fprintf(stderr, "kvwise bench: unknown argument '%s'\n", a); usage(stderr); return -1; }
    }
    if (!o->model) { fprintf(stderr, "kvwise bench: -m MODEL is required\n"); usage(stderr); return -1; }
    return 0;
}

/* Bytes a decode step streams: every weight except the embedding table,
 * of which one row is read (when it is not also the LM head). */
static uint64_t decode_bytes(const kw_model *m) {
    const kw_hparams *hp = kw_model_hparams(m);
    uint64_t b = hp->weight_bytes;
    const kw_gguf_tensor *te = kw_gguf_find_tensor(kw_model_gguf(m), "token_embd.weight");
    if (te && !hp->tied_output) b -= te->nbytes - te->nbytes / (uint64_t)(te->ne[1] > 0 ? te->ne[1] : 1);
    return b;
}

static void random_tokens(int32_t *tok, int n, int32_t n_vocab, uint64_t *rng) {
    for (int i = 0; i < n; i++) {
        *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((*rng >> 33) % (uint64_t)n_vocab);
    }
}

/* One repetition: prefill p tokens, then decode n from an empty context. */
static int run_once(kw_session *s, const bench_opts *o, int32_t n_vocab, uint64_t *rng, double *pp, double *tg,
                    kw_err *err) {
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(o->p > o->n ? o->p : o->n) + 4);
    if (!tok) return kw_err_set(err, "out of memory");
    int rc = 0;
    if (o->p > 0) {
        random_tokens(tok, o->p, n_vocab, rng);
        kw_session_rewind(s, 0);
        double t0 = now_sec();
        rc = kw_session_eval(s, tok, o->p, false, err);
        *pp = o->p / (now_sec() - t0);
    }
    if (rc == 0 && o->n > 0) {
        random_tokens(tok, o->n, n_vocab, rng);
        kw_session_rewind(s, 0);
        double t0 = now_sec();
        for (int i = 0; i < o->n && rc == 0; i++) rc = kw_session_eval(s, tok + i, 1, false, err);
        *tg = o->n / (now_sec() - t0);
    }
    free(tok);
    return rc;
}

static void print_json(const bench_opts *o, const kw_model *m, uint64_t rbytes, stat3 pp, stat3 tg, stat3 bw) {
    const kw_hparams *hp = kw_model_hparams(m);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "model", o->model);
    cJSON_AddStringToObject(j, "arch", hp->arch_name);
    cJSON_AddStringToObject(j, "kernel", kw_kernel_name());
    cJSON_AddNumberToObject(j, "threads", o->t);
    cJSON_AddNumberToObject(j, "n_prompt", o->p);
    cJSON_AddNumberToObject(j, "n_gen", o->n);
    cJSON_AddNumberToObject(j, "repetitions", o->r);
    cJSON_AddNumberToObject(j, "weight_bytes", (double)hp->weight_bytes);
    cJSON_AddNumberToObject(j, "decode_bytes_per_token", (double)rbytes);
    const struct { const char *k; stat3 s; } rows[] = {{"pp_tok_s", pp}, {"tg_tok_s", tg}, {"bandwidth_bytes_s", bw}};
    for (int i = 0; i < 3; i++) {
        cJSON *x = cJSON_AddObjectToObject(j, rows[i].k);
        cJSON_AddNumberToObject(x, "median", rows[i].s.med);
        cJSON_AddNumberToObject(x, "min", rows[i].s.lo);
        cJSON_AddNumberToObject(x, "max", rows[i].s.hi);
    }
    double ceiling = rbytes ? bw.med / (double)rbytes : 0;
    cJSON_AddNumberToObject(j, "tg_ceiling_tok_s", ceiling);
    cJSON_AddNumberToObject(j, "tg_pct_of_ceiling", ceiling > 0 ? 100 * tg.med / ceiling : 0);
    char *txt = cJSON_PrintUnformatted(j);
    if (txt) printf("%s\n", txt);
    free(txt);
    cJSON_Delete(j);
}

int cmd_bench(int argc, char **argv) {
    bench_opts o;
    if (parse_args(argc, argv, &o) != 0) return 2;
    kw_err err = {{0}};
    kw_model_opts mo = {.no_repack = o.no_repack};
    kw_model *m = kw_model_load(o.model, &mo, &err);
    if (!m) { fprintf(stderr, "kvwise bench: %s\n", err.msg); return 2; }
    const kw_hparams *hp = kw_model_hparams(m);
    kw_pool *pool = kw_pool_create(o.t);
    kw_session_opts so = {.n_ctx = (o.p > o.n ? o.p : o.n) + 8, .max_batch = o.p > 0 ? o.p : 1, .pool = pool};
    kw_session *s = pool ? kw_session_create(m, &so, &err) : NULL;
    if (!s) {
        fprintf(stderr, "kvwise bench: %s\n", pool ? err.msg : "cannot start threads");
        kw_pool_destroy(pool);
        kw_model_free(m);
        return 1;
    }
    double *pp = calloc((size_t)o.r, sizeof(double)), *tg = calloc((size_t)o.r, sizeof(double));
    double *bw = calloc((size_t)o.r + 1, sizeof(double));
    uint64_t rng = 0x6b7677697365ull;
    int rc = 0;
    if (!pp || !tg || !bw) rc = kw_err_set(&err, "out of memory");
    double warm_pp = 0, warm_tg = 0;
    bench_opts warm = o;
    warm.p = o.p > 16 ? 16 : o.p;
    warm.n = o.n > 4 ? 4 : o.n;
    if (rc == 0) rc = run_once(s, &warm, hp->n_vocab, &rng, &warm_pp, &warm_tg, &err);   /* page in the weights */
    for (int i = 0; i < o.r && rc == 0; i++) {
        bw[i] = kw_measure_read_bandwidth(pool, 0.3);
        rc = run_once(s, &o, hp->n_vocab, &rng, &pp[i], &tg[i], &err);
        if (!o.json) fprintf(stderr, "rep %d/%d: pp %.1f tok/s, tg %.1f tok/s, bandwidth %.1f GB/s\n", i + 1, o.r,
                             pp[i], tg[i], bw[i] / 1e9);
    }
    if (rc != 0) {
        fprintf(stderr, "kvwise bench: %s\n", err.msg);
    } else {
        uint64_t rbytes = decode_bytes(m);
        stat3 spp = stats(pp, o.r), stg = stats(tg, o.r), sbw = stats(bw, o.r);
        double ceiling = rbytes ? sbw.med / (double)rbytes : 0;
        if (o.json) {
            print_json(&o, m, rbytes, spp, stg, sbw);
        } else {
            char b1[32], b2[32];
            printf("model        %s (%s, %s kernels, %d threads)\n", o.model, hp->arch_name, kw_kernel_name(), o.t);
            printf("weights      %s; read per decoded token %s\n", kw_format_bytes(hp->weight_bytes, b1, sizeof b1),
                   kw_format_bytes(rbytes, b2, sizeof b2));
            if (o.p > 0) printf("pp%-5d      %8.1f tok/s  (min %.1f, max %.1f)\n", o.p, spp.med, spp.lo, spp.hi);
            if (o.n > 0) printf("tg%-5d      %8.1f tok/s  (min %.1f, max %.1f)\n", o.n, stg.med, stg.lo, stg.hi);
            printf("bandwidth    %8.1f GB/s   (min %.1f, max %.1f)\n", sbw.med / 1e9, sbw.lo / 1e9, sbw.hi / 1e9);
            if (o.n > 0) printf("ceiling      %8.1f tok/s  tg = %.0f%% of ceiling\n", ceiling, ceiling > 0 ? 100 * stg.med / ceiling : 0);
        }
    }
    free(pp); free(tg); free(bw);
    kw_session_free(s);
    kw_pool_destroy(pool);
    kw_model_free(m);
    return rc == 0 ? 0 : 1;
}
