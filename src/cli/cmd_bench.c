/* cmd_bench.c - `kvwise bench -m MODEL [-p 512] [-n 128] [-t 2] [-r 5] [-d 0]
 *                [-ub 512] [--batch B] [--kv-type auto] [--json]`.
 *
 * Owns the end-to-end speed report: per repetition, a prefill of p random
 * tokens in forward passes of at most ub tokens (pp tok/s; ub 512 as
 * llama-bench's default -ub and the server's default prefill step), then n
 * single-token decode steps (tg tok/s), like llama-bench's pp/tg tests. With -d D both start on top of a
 * context of D tokens (prefilled once, untimed; each test rewinds to D),
 * like llama-bench -d. With --batch B, B sequences also decode n tokens
 * together, one kw_forward of B tokens per step over a paged KV pool (the
 * scheduler's batched step), from empty contexts: aggregate tok/s and its
 * ratio to tg. Between repetitions the built-in read-bandwidth probe runs
 * on the same threads over the very pages decode streams (the model's
 * packed or mapped weights: kw_model_read_bandwidth), so the decode
 * ceiling (bandwidth / bytes read per token) comes from the same minutes
 * and the same memory as the figures; the generic probe of a fresh 256 MiB
 * buffer (kw_measure_read_bandwidth, what `kvwise plan` uses) is printed
 * beside it. Prints median and
 * min..max of each, model weight bytes, bytes read per decoded token
 * (weights, plus the KV the average step attends over; the weights from
 * the file's tensor table and as the forward pass counted them), and
 * tg as % of the ceiling. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cjson/cJSON.h>
#include "cli.h"
#include "kvwise/gguf.h"
#include "kvwise/kv.h"
#include "kvwise/memory.h"
#include "kvwise/model.h"
#include "kvwise/progress.h"
#include "kvwise/tensor.h"

typedef struct bench_opts {
    const char *model;
    int p, n, t, r, d, batch, ub;
    uint32_t kv_type;
    bool json, no_repack;
    kw_experts_mode experts;
} bench_opts;

#define KW_BENCH_MAX_BATCH 64

typedef struct stat3 { double med, lo, hi; } stat3;

static void usage(FILE *f) {
    fprintf(f, "usage: kvwise bench -m MODEL [-p N] [-n N] [-t N] [-r N] [-d N] [-ub N] [--batch N]\n"
               "                    [--kv-type T] [--json] [--no-repack] [--experts MODE]\n"
               "  -p N         prompt tokens per prefill test (default 512; 0 skips it)\n"
               "  -ub N        at most N tokens per forward pass of a prefill (default 512, as\n"
               "               llama-bench's -ub and the server's --prefill-step-size; also the\n"
               "               chunks of the -d prefill)\n"
               "  -n N         decoded tokens per generation test (default 128; 0 skips it)\n"
               "  -t N         threads (default: physical cores)\n"
               "  -r N         repetitions (default 5); median and min..max are reported\n"
               "  -d N         depth: run pp and tg on top of N tokens of context (default 0); tg\n"
               "               also runs from position 0, in 16-token bursts alternating with the\n"
               "               one at depth, and the median of tg@N / tg@0 per repetition is printed\n"
               "  --batch N    also decode n tokens in each of N sequences together (2..%d):\n"
               "               aggregate tok/s, its ratio to tg, and the weight bytes a step of N reads\n"
               "               against a one-token step (what bounds the ratio: N for dense weights,\n"
               "               less for a mixture of experts, whose N tokens pick more experts)\n"
               "  --kv-type T  KV cache type: auto (default, as the server: i16 where it runs fast, else f16),\n"
               "               i16, i8 (half the bytes, q8_0-like precision), f16, q8_0 or f32\n"
               "  --json       one JSON object on stdout\n"
               "  --no-repack  keep weights as stored (no load-time repacking)\n"
               "  --experts M  mixture of experts: first-use (default: each expert packed the first time\n"
               "               a token picks it; the warm-up is then a whole -p prefill and its time is\n"
               "               printed), load (every expert packed at load, as ik_llama.cpp's -rtr: the\n"
               "               steady state from the first repetition) or mapped (read in place)\n",
               KW_BENCH_MAX_BATCH);
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
    o->p = 512; o->n = 128; o->r = 5; o->t = kw_cpu_physical_cores(); o->ub = 512;
    o->kv_type = KW_KV_TYPE_AUTO;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int *dst = !strcmp(a, "-p") ? &o->p : !strcmp(a, "-n") ? &o->n : !strcmp(a, "-t") ? &o->t
                 : !strcmp(a, "-r") ? &o->r : !strcmp(a, "-d") ? &o->d : !strcmp(a, "--batch") ? &o->batch
                 : !strcmp(a, "-ub") || !strcmp(a, "--ubatch") ? &o->ub : NULL;
        if (dst) {
            int lo = dst == &o->t || dst == &o->r || dst == &o->ub ? 1 : dst == &o->batch ? 2 : 0;
            int hi = dst == &o->batch ? KW_BENCH_MAX_BATCH : 1 << 20;
            if (i + 1 >= argc || parse_int(argv[++i], lo, hi, dst) != 0) {
                fprintf(stderr, "kvwise bench: %s needs an integer in %d..%d\n", a, lo, hi);
                return -1;
            }
        } else if (!strcmp(a, "--kv-type") && i + 1 < argc) {
            int ty = kw_kv_type_from_name(argv[++i]);
            if (ty < 0) {
                fprintf(stderr, "kvwise bench: --kv-type takes " KW_KV_TYPE_NAMES ", not '%s'\n", argv[i]);
                return -1;
            }
            o->kv_type = (uint32_t)ty;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) o->model = argv[++i];
        else if (!strcmp(a, "--json")) o->json = true;
        else if (!strcmp(a, "--no-repack")) o->no_repack = true;
        else if (!strcmp(a, "--experts") && i + 1 < argc) {
            int mode = kw_experts_mode_from_name(argv[++i]);
            if (mode < 0) {
                fprintf(stderr, "kvwise bench: --experts takes first-use, load or mapped, not '%s'\n", argv[i]);
                return -1;
            }
            o->experts = (kw_experts_mode)mode;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); exit(0); }
        else { fprintf(stderr, "kvwise bench: unknown argument '%s'\n", a); usage(stderr); return -1; }
    }
    if (!o->model) { fprintf(stderr, "kvwise bench: -m MODEL is required\n"); usage(stderr); return -1; }
    if (o->batch && o->n == 0) { fprintf(stderr, "kvwise bench: --batch needs -n > 0\n"); return -1; }
    return 0;
}

/* Bytes a decode step streams (model.h kw_decode_weight_bytes): the packed
 * copies unless the weights stay as stored (--no-repack; --experts mapped). */
static uint64_t decode_bytes(const kw_model *m, const bench_opts *o) {
    unsigned packed = o->no_repack ? 0 : KW_DECODE_PACKED | (o->experts == KW_EXPERTS_MAPPED ? 0 : KW_DECODE_PACKED_EXPERTS);
    return kw_decode_weight_bytes(kw_model_gguf(m), kw_model_hparams(m), packed);
}

/* KV bytes a decoded token reads, on average over a tg test of n tokens on
 * top of d: step i attends over d + i + 1 positions, so d + (n + 1) / 2 on
 * average (at depth 4096 the F16 KV of the 1B shape is 128 MiB against 663
 * MiB of Q4_0 weights, so leaving it out would overstate the ceiling). */
static uint64_t decode_kv_bytes(const kw_model *m, const bench_opts *o, int32_t d) {
    kw_kv_layout lay = kw_model_kv_layout(m, o->kv_type, 32);
    return (uint64_t)((double)kw_kv_bytes_per_token(&lay) * ((double)d + (double)(o->n + 1) / 2.0));
}

/* The most tg @ d can be of tg @ d0 when decode streams its bytes at the
 * same rate at both depths: bytes read per token at d0 over those at d.
 * With 16-bit KV, Q4_0 weights of the 1B shape and d = 4096 that is 83%
 * (663 MiB of weights + 133 MiB of KV), so a ratio near it means the KV
 * streams as well as the weights, not that attention is slow. */
static double depth_ratio_bound(const kw_model *m, const bench_opts *o, uint64_t wbytes) {
    return (double)(wbytes + decode_kv_bytes(m, o, 0)) / (double)(wbytes + decode_kv_bytes(m, o, o->d));
}

static void random_tokens(int32_t *tok, int n, int32_t n_vocab, uint64_t *rng) {
    for (int i = 0; i < n; i++) {
        *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((*rng >> 33) % (uint64_t)n_vocab);
    }
}

/* The weight bytes the decode steps of the timed repetitions read, as the
 * forward pass counts them (kw_session_weight_bytes_read), and their steps:
 * the measured bytes per decoded token printed beside decode_bytes(). */
static uint64_t g_counted_bytes, g_counted_steps;
static bool g_counting;

static uint64_t counted_per_token(void) { return g_counted_steps ? g_counted_bytes / g_counted_steps : 0; }

/* The same for the batched steps (--batch B): weight bytes per step of B
 * tokens. B x a one-token step's bytes over it is what the bytes alone allow
 * the aggregate (a mixture of experts reads each distinct expert once a
 * step, so B tokens read more than one token does; dense weights, once). */
static uint64_t g_batch_bytes, g_batch_steps;

static uint64_t batch_bytes_per_step(void) { return g_batch_steps ? g_batch_bytes / g_batch_steps : 0; }

static double batch_bytes_bound(int B) {
    uint64_t one = counted_per_token(), step = batch_bytes_per_step();
    return one && step ? (double)B * (double)one / (double)step : 0;
}

/* Decodes n random tokens one at a time from position `at`; tok/s in *rate. */
static int decode_at(kw_session *s, int32_t at, int n, int32_t *tok, int32_t n_vocab, uint64_t *rng, double *rate,
                     kw_err *err) {
    random_tokens(tok, n, n_vocab, rng);
    kw_session_rewind(s, at);
    if (kw_session_n_past(s) != at)   /* a rewind only moves back: the depth must still be there */
        return kw_err_set(err, "bench: cannot decode at position %d (the session holds %d)", at, kw_session_n_past(s));
    int rc = 0;
    uint64_t b0 = kw_session_weight_bytes_read(s);
    double t0 = now_sec();
    for (int i = 0; i < n && rc == 0; i++) rc = kw_session_eval(s, tok + i, 1, false, err);
    *rate = n / (now_sec() - t0);
    if (g_counting && rc == 0) {
        g_counted_bytes += kw_session_weight_bytes_read(s) - b0;
        g_counted_steps += (uint64_t)n;
    }
    return rc;
}

/* With -d: tg at depth d (session s) and from position 0 (session s0, a
 * second session: a rewind only moves back, so decoding at 0 in s would
 * lose the depth for the next repetition), in alternating bursts of
 * KW_BENCH_DEPTH_BURST tokens, so tg@d / tg@0 is a ratio of the same
 * seconds: the host's bandwidth can change state within seconds, so two
 * tests one after the other can pair a fast-state run with a slow-state
 * one. Each session still decodes
 * n tokens from its start position, one at a time; *tg and *tg0 are tok/s
 * over each session's own decode time. */
#define KW_BENCH_DEPTH_BURST 16
static int decode_depth_pair(kw_session *s, kw_session *s0, const bench_opts *o, int32_t n_vocab, uint64_t *rng,
                             double *tg, double *tg0, kw_err *err) {
    int32_t tok[KW_BENCH_DEPTH_BURST];
    double t = 0, t0 = 0;
    int rc = 0;
    for (int done = 0; done < o->n && rc == 0; done += KW_BENCH_DEPTH_BURST) {
        int b = o->n - done < KW_BENCH_DEPTH_BURST ? o->n - done : KW_BENCH_DEPTH_BURST;
        double r = 0, r0 = 0;   /* each burst continues where its session's last one ended */
        rc = decode_at(s, o->d + done, b, tok, n_vocab, rng, &r, err);
        if (rc == 0) rc = decode_at(s0, done, b, tok, n_vocab, rng, &r0, err);
        if (rc == 0) {
            t += b / r;
            t0 += b / r0;
        }
    }
    *tg = t > 0 ? o->n / t : 0;
    *tg0 = t0 > 0 ? o->n / t0 : 0;
    return rc;
}

/* One repetition: prefill p tokens, then decode n, each on top of the
 * first o->d positions (already in the KV: each test rewinds to them);
 * with s0, the decode alternates with one from position 0 in s0
 * (decode_depth_pair), its rate in *tg0. */
static int run_once(kw_session *s, kw_session *s0, const bench_opts *o, int32_t n_vocab, uint64_t *rng, double *pp,
                    double *tg, double *tg0, kw_err *err) {
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(o->p > o->n ? o->p : o->n) + 4);
    if (!tok) return kw_err_set(err, "out of memory");
    int rc = 0;
    if (o->p > 0) {
        random_tokens(tok, o->p, n_vocab, rng);
        kw_session_rewind(s, o->d);
        double t0 = now_sec();
        rc = kw_session_eval(s, tok, o->p, false, err);
        *pp = o->p / (now_sec() - t0);
    }
    if (rc == 0 && o->n > 0 && !s0) rc = decode_at(s, o->d, o->n, tok, n_vocab, rng, tg, err);
    if (rc == 0 && o->n > 0 && s0) rc = decode_depth_pair(s, s0, o, n_vocab, rng, tg, tg0, err);
    free(tok);
    return rc;
}

/* Fills the first d positions of the session's context (untimed). */
static int prefill_depth(kw_session *s, int d, int32_t n_vocab, uint64_t *rng, kw_err *err) {
    if (d <= 0) return 0;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)d);
    if (!tok) return kw_err_set(err, "out of memory");
    random_tokens(tok, d, n_vocab, rng);
    kw_session_rewind(s, 0);
    int rc = kw_session_eval(s, tok, d, false, err);
    if (rc == 0) rc = kw_session_checkpoint(s, err);   /* a recurrent state rewinds to d only from a saved copy */
    free(tok);
    return rc;
}

/* B sequences decoding together: a paged KV pool with one block table per
 * sequence and one kw_forward of B tokens (one per sequence, each wanting
 * logits) per step, as the scheduler's decode step does. */
typedef struct batch_bench {
    int B, steps;
    kw_kv_pool *kv;
    kw_block_table *tables;
    kw_block_table **tp;
    kw_ctx *ctx;
    int32_t *tok, *pos, *seq;
    bool *want;
    float *logits;
    float *state_mem;           /* hybrid models: B recurrent states */
    kw_rec_state *states;
    kw_rec_state **sp;
} batch_bench;

static void batch_free(batch_bench *bb) {
    if (bb->tables)
        for (int i = 0; i < bb->B; i++) {
            kw_block_table_release(&bb->tables[i], bb->kv);
            kw_block_table_free(&bb->tables[i]);
        }
    kw_ctx_free(bb->ctx);
    kw_kv_pool_destroy(bb->kv);
    free(bb->tables); free(bb->tp); free(bb->tok); free(bb->pos); free(bb->seq); free(bb->want);
    kw_mem_free(bb->logits);
    kw_mem_free(bb->state_mem);
    free(bb->states); free(bb->sp);
    memset(bb, 0, sizeof *bb);
}

static int batch_init(batch_bench *bb, const kw_model *m, kw_pool *pool, const bench_opts *o, kw_err *err) {
    memset(bb, 0, sizeof *bb);
    bb->B = o->batch;
    bb->steps = o->n;
    const int32_t bt = 32, per_seq = (o->n + bt - 1) / bt;
    kw_kv_layout lay = kw_model_kv_layout(m, o->kv_type, bt);
    bb->kv = kw_kv_pool_create(&lay, per_seq * bb->B, err);
    if (!bb->kv) return -1;
    size_t B = (size_t)bb->B;
    bb->tables = calloc(B, sizeof *bb->tables);
    bb->tp = calloc(B, sizeof *bb->tp);
    bb->tok = calloc(B, sizeof *bb->tok);
    bb->pos = calloc(B, sizeof *bb->pos);
    bb->seq = calloc(B, sizeof *bb->seq);
    bb->want = calloc(B, sizeof *bb->want);
    bb->logits = kw_mem_alloc(KW_MEM_OTHER, B * (size_t)kw_model_hparams(m)->n_vocab * sizeof(float));
    if (!bb->tables || !bb->tp || !bb->tok || !bb->pos || !bb->seq || !bb->want || !bb->logits) {
        batch_free(bb);
        return kw_err_set(err, "out of memory");
    }
    for (int i = 0; i < bb->B; i++) {
        if (kw_block_table_ensure(&bb->tables[i], bb->kv, o->n) != 0) {
            batch_free(bb);
            return kw_err_set(err, "cannot reserve KV for %d sequences of %d positions", o->batch, o->n);
        }
        bb->tp[i] = &bb->tables[i];
        bb->seq[i] = i;
        bb->want[i] = true;
    }
    bb->ctx = kw_ctx_create(m, pool, bb->B, o->n, err);
    if (!bb->ctx) { batch_free(bb); return -1; }
    size_t rec = (size_t)kw_model_hparams(m)->rec_state_bytes;
    if (rec > 0) {
        bb->state_mem = kw_mem_alloc(KW_MEM_KV, B * rec);
        bb->states = calloc(B, sizeof *bb->states);
        bb->sp = calloc(B, sizeof *bb->sp);
        if (!bb->state_mem || !bb->states || !bb->sp) { batch_free(bb); return kw_err_set(err, "out of memory"); }
        for (size_t i = 0; i < B; i++) {
            bb->states[i].data = bb->state_mem + i * (rec / sizeof(float));
            bb->sp[i] = &bb->states[i];
        }
    }
    return 0;
}

/* Decodes `steps` tokens in every sequence from position 0; returns aggregate tok/s or -1. */
static double batch_run(batch_bench *bb, int steps, int32_t n_vocab, uint64_t *rng, kw_err *err) {
    kw_batch b = {.n_tokens = bb->B, .tokens = bb->tok, .pos = bb->pos, .seq = bb->seq, .tables = bb->tp,
                  .want_logits = bb->want, .states = bb->sp};
    uint64_t b0 = kw_ctx_weight_bytes_read(bb->ctx);
    double t0 = now_sec();
    for (int step = 0; step < steps; step++) {
        random_tokens(bb->tok, bb->B, n_vocab, rng);
        for (int i = 0; i < bb->B; i++) bb->pos[i] = step;
        if (kw_forward(bb->ctx, bb->kv, &b, bb->logits, err)) return -1;
    }
    double rate = (double)bb->B * steps / (now_sec() - t0);
    if (g_counting) {
        g_batch_bytes += kw_ctx_weight_bytes_read(bb->ctx) - b0;
        g_batch_steps += (uint64_t)steps;
    }
    return rate;
}

static void print_json(const bench_opts *o, const kw_model *m, uint64_t wbytes, uint64_t kvbytes, stat3 pp, stat3 tg,
                       stat3 bw, stat3 bwbuf, stat3 bt, stat3 ratio, stat3 tg0, stat3 dratio) {
    uint64_t rbytes = wbytes + kvbytes;
    const kw_hparams *hp = kw_model_hparams(m);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "model", o->model);
    cJSON_AddStringToObject(j, "arch", hp->arch_name);
    cJSON_AddStringToObject(j, "kernel", kw_kernel_name());
    kw_json_add_nums(j, (kw_json_num[]){
        {"decode_prefetch_bytes", (double)kw_decode_prefetch_bytes()}, {"threads", o->t}, {"n_prompt", o->p},
        {"n_ubatch", o->ub}, {"n_gen", o->n}, {"repetitions", o->r}, {"n_depth", o->d}, {NULL, 0}});
    cJSON_AddStringToObject(j, "kv_type", kw_kv_type_name(o->kv_type));
    if (hp->n_expert > 0) cJSON_AddStringToObject(j, "experts", kw_experts_mode_name(o->experts));
    kw_json_add_nums(j, (kw_json_num[]){
        {"weight_bytes", (double)hp->weight_bytes}, {"weight_bytes_per_token", (double)wbytes},
        {"weight_bytes_per_token_counted", (double)counted_per_token()},
        {"kv_bytes_per_token", (double)kvbytes}, {"decode_bytes_per_token", (double)rbytes}, {NULL, 0}});
    const struct { const char *k; stat3 s; } rows[] = {
        {"pp_tok_s", pp}, {"tg_tok_s", tg}, {"bandwidth_bytes_s", bw}, {"probe_buffer_bytes_s", bwbuf}};
    cJSON_AddStringToObject(j, "bandwidth_source", "weights");   /* bandwidth_bytes_s: the model's own pages */
    for (int i = 0; i < 4; i++) {
        cJSON *x = cJSON_AddObjectToObject(j, rows[i].k);
        cJSON_AddNumberToObject(x, "median", rows[i].s.med);
        cJSON_AddNumberToObject(x, "min", rows[i].s.lo);
        cJSON_AddNumberToObject(x, "max", rows[i].s.hi);
    }
    double ceiling = rbytes ? bw.med / (double)rbytes : 0;
    cJSON_AddNumberToObject(j, "tg_ceiling_tok_s", ceiling);
    cJSON_AddNumberToObject(j, "tg_pct_of_ceiling", ceiling > 0 ? 100 * tg.med / ceiling : 0);
    if (o->d > 0 && o->n > 0) {
        cJSON *x = cJSON_AddObjectToObject(j, "tg_depth0_tok_s");
        cJSON_AddNumberToObject(x, "median", tg0.med);
        cJSON_AddNumberToObject(x, "min", tg0.lo);
        cJSON_AddNumberToObject(x, "max", tg0.hi);
        cJSON_AddNumberToObject(j, "tg_depth_ratio", dratio.med);
        cJSON_AddNumberToObject(j, "tg_depth_ratio_bound", depth_ratio_bound(m, o, wbytes));
    }
    if (o->batch) {
        cJSON_AddNumberToObject(j, "batch", o->batch);
        cJSON *x = cJSON_AddObjectToObject(j, "batch_tok_s");
        cJSON_AddNumberToObject(x, "median", bt.med);
        cJSON_AddNumberToObject(x, "min", bt.lo);
        cJSON_AddNumberToObject(x, "max", bt.hi);
        cJSON_AddNumberToObject(j, "batch_ratio_to_tg", ratio.med);
        cJSON_AddNumberToObject(j, "batch_step_weight_bytes_counted", (double)batch_bytes_per_step());
        cJSON_AddNumberToObject(j, "batch_ratio_bytes_bound", batch_bytes_bound(o->batch));
    }
    char *txt = cJSON_PrintUnformatted(j);
    if (txt) printf("%s\n", txt);
    free(txt);
    cJSON_Delete(j);
}

int cmd_bench(int argc, char **argv) {
    bench_opts o;
    if (parse_args(argc, argv, &o) != 0) return 2;
    kw_err err = {{0}};
    kw_progress prog;
    kw_progress_begin(&prog, stderr, KW_PROGRESS_AUTO, "kvwise bench: loading model", 0, KW_PROGRESS_ITEMS, "layers");
    kw_model_opts mo = {.no_repack = o.no_repack, .experts = o.experts, .progress = &prog};
    kw_model *m = kw_model_load(o.model, &mo, &err);
    kw_progress_end(&prog, m != NULL);
    if (!m) { fprintf(stderr, "kvwise bench: %s\n", err.msg); return 2; }
    const kw_hparams *hp = kw_model_hparams(m);
    o.kv_type = kw_model_kv_layout(m, o.kv_type, 32).type;   /* auto -> what this model and CPU get */
    kw_pool *pool = kw_pool_create(o.t);
    int max_batch = o.p < o.ub ? o.p : o.ub;                          /* the prefill's forward passes */
    int dchunk = o.d < o.ub ? o.d : o.ub;                             /* the depth prefill's */
    if (dchunk > max_batch) max_batch = dchunk;
    if (max_batch < 1) max_batch = 1;
    kw_session_opts so = {.n_ctx = o.d + (o.p > o.n ? o.p : o.n) + 8, .max_batch = max_batch, .pool = pool,
                          .kv_type = o.kv_type};
    kw_session *s = pool ? kw_session_create(m, &so, &err) : NULL;
    kw_session_opts so0 = {.n_ctx = o.n + 8, .max_batch = 1, .pool = pool, .kv_type = o.kv_type};
    kw_session *s0 = s && o.d > 0 && o.n > 0 ? kw_session_create(m, &so0, &err) : NULL;   /* tg at depth 0 */
    if (s && o.d > 0 && o.n > 0 && !s0) {
        kw_session_free(s);
        s = NULL;
    }
    if (!s) {
        fprintf(stderr, "kvwise bench: %s\n", pool ? err.msg : "cannot start threads");
        kw_pool_destroy(pool);
        kw_model_free(m);
        return 1;
    }
    size_t nr = (size_t)o.r + 1;
    double *pp = calloc(nr, sizeof(double)), *tg = calloc(nr, sizeof(double)), *bw = calloc(nr, sizeof(double));
    double *bt = calloc(nr, sizeof(double)), *ratio = calloc(nr, sizeof(double)), *bwbuf = calloc(nr, sizeof(double));
    double *tg0 = calloc(nr, sizeof(double)), *dratio = calloc(nr, sizeof(double));
    uint64_t rng = 0x6b7677697365ull;
    int rc = 0;
    batch_bench bb;
    memset(&bb, 0, sizeof bb);
    if (!pp || !tg || !bw || !bwbuf || !bt || !ratio || !tg0 || !dratio) rc = kw_err_set(&err, "out of memory");
    if (rc == 0 && o.batch) rc = batch_init(&bb, m, pool, &o, &err);
    double warm_pp = 0, warm_tg = 0;
    bench_opts warm = o;
    /* Page in the weights. A mixture of experts packs each expert the first time a token picks it, so
     * its warm-up (in that mode) is a whole prefill: the repetitions then see the experts as a server does once its
     * first prompts have run (the one-time cost is printed, as llama-bench's warm-up run is not). */
    warm.p = hp->n_expert > 0 && o.experts == KW_EXPERTS_FIRST_USE ? o.p : o.p > 16 ? 16 : o.p;
    warm.n = o.n > 4 ? 4 : o.n;
    warm.d = 0;
    double warm_t0 = now_sec();
    if (rc == 0) rc = run_once(s, NULL, &warm, hp->n_vocab, &rng, &warm_pp, &warm_tg, NULL, &err);
    kw_expert_stats xs;
    if (rc == 0 && !o.json && kw_model_expert_stats(m, &xs) && xs.packing) {
        if (o.experts == KW_EXPERTS_LOAD)
            fprintf(stderr, "experts: %d of %d packed at load (%.2f GiB)\n", xs.n_packed, xs.n_experts,
                    (double)xs.packed_bytes / (1u << 30));
        else
            fprintf(stderr, "warm-up: %d-token prefill in %.2f s, packing %d of %d experts (%.2f GiB) at first use\n",
                    warm.p, now_sec() - warm_t0, xs.n_packed, xs.n_experts, (double)xs.packed_bytes / (1u << 30));
    }
    if (rc == 0 && o.batch && batch_run(&bb, 2, hp->n_vocab, &rng, &err) < 0) rc = -1;
    if (rc == 0 && o.d > 0) {
        double t0 = now_sec();
        rc = prefill_depth(s, o.d, hp->n_vocab, &rng, &err);
        if (rc == 0 && !o.json) fprintf(stderr, "depth: %d tokens prefilled in %.1f s\n", o.d, now_sec() - t0);
    }
    g_counting = true;   /* the timed repetitions only */
    kw_progress_begin(&prog, stderr, KW_PROGRESS_AUTO, "kvwise bench", (uint64_t)o.r, KW_PROGRESS_ITEMS, "reps");
    for (int i = 0; i < o.r && rc == 0; i++) {
        bwbuf[i] = kw_measure_read_bandwidth(pool, 0.15);
        bw[i] = kw_model_read_bandwidth(m, pool, 0.3);
        rc = run_once(s, s0, &o, hp->n_vocab, &rng, &pp[i], &tg[i], &tg0[i], &err);
        if (rc == 0 && s0) dratio[i] = tg0[i] > 0 ? tg[i] / tg0[i] : 0;
        if (rc == 0 && o.batch) {
            bt[i] = batch_run(&bb, o.n, hp->n_vocab, &rng, &err);
            if (bt[i] < 0) rc = -1;
            ratio[i] = tg[i] > 0 ? bt[i] / tg[i] : 0;
        }
        if (!o.json && rc == 0) {
            char line[320];
            int u = snprintf(line, sizeof line, "rep %d/%d: pp %.1f tok/s, tg %.1f tok/s", i + 1, o.r, pp[i], tg[i]);
            if (o.d > 0 && o.n > 0 && u < (int)sizeof line)
                u += snprintf(line + u, sizeof line - (size_t)u, " (at d0 %.1f: %.0f%%)", tg0[i], 100 * dratio[i]);
            if (o.batch && u < (int)sizeof line)
                u += snprintf(line + u, sizeof line - (size_t)u, ", batch %d: %.1f tok/s (%.2fx tg)", o.batch, bt[i], ratio[i]);
            if (u < (int)sizeof line)
                snprintf(line + u, sizeof line - (size_t)u, ", bandwidth %.1f GB/s (256 MiB buffer %.1f)", bw[i] / 1e9, bwbuf[i] / 1e9);
            kw_progress_print(&prog, "%s\n", line);
        }
        if (rc == 0) kw_progress_note(&prog, "tg %.1f tok/s", tg[i]);
        kw_progress_add(&prog, 1);
    }
    kw_progress_end(&prog, rc == 0);
    if (rc != 0) {
        fprintf(stderr, "kvwise bench: %s\n", err.msg);
    } else {
        uint64_t wbytes = decode_bytes(m, &o), kvbytes = o.n > 0 ? decode_kv_bytes(m, &o, o.d) : 0, rbytes = wbytes + kvbytes;
        stat3 spp = stats(pp, o.r), stg = stats(tg, o.r), sbw = stats(bw, o.r), sbuf = stats(bwbuf, o.r);
        stat3 sbt = stats(bt, o.r), sra = stats(ratio, o.r), stg0 = stats(tg0, o.r), sdr = stats(dratio, o.r);
        double ceiling = rbytes ? sbw.med / (double)rbytes : 0;
        if (o.json) {
            print_json(&o, m, wbytes, kvbytes, spp, stg, sbw, sbuf, sbt, sra, stg0, sdr);
        } else {
            char b1[32], b2[32], b3[32];
            printf("model        %s (%s, %s kernels, decode prefetch %zu B, %d threads, KV %s, prefill passes of <= %d "
                   "tokens)\n",
                   o.model, hp->arch_name, kw_kernel_name(), kw_decode_prefetch_bytes(), o.t,
                   kw_kv_type_name(o.kv_type), o.ub);
            printf("weights      %s; read per decoded token %s of weights + %s of KV",
                   kw_format_bytes(hp->weight_bytes, b1, sizeof b1), kw_format_bytes(wbytes, b2, sizeof b2),
                   kw_format_bytes(kvbytes, b3, sizeof b3));
            if (g_counted_steps)
                printf(" (counted by the forward pass: %s of weights, %+.2f%%)", kw_format_bytes(counted_per_token(), b1, sizeof b1),
                       100.0 * ((double)counted_per_token() / (double)wbytes - 1.0));
            printf("\n");
            const char *at = o.d > 0 ? " @ d" : "";
            if (o.p > 0) printf("pp%-5d      %8.1f tok/s  (min %.1f, max %.1f)%s", o.p, spp.med, spp.lo, spp.hi, at);
            if (o.p > 0) printf(o.d > 0 ? "%d\n" : "\n", o.d);
            if (o.n > 0) printf("tg%-5d      %8.1f tok/s  (min %.1f, max %.1f)%s", o.n, stg.med, stg.lo, stg.hi, at);
            if (o.n > 0) printf(o.d > 0 ? "%d\n" : "\n", o.d);
            if (o.d > 0 && o.n > 0)
                printf("tg%-5d      %8.1f tok/s  (min %.1f, max %.1f) @ d0, alternating bursts: tg @ d%d = %.0f%% of it "
                       "(median of per-rep ratios; bytes read per token bound it to %.0f%%)\n", o.n, stg0.med, stg0.lo,
                       stg0.hi, o.d, 100 * sdr.med, 100 * depth_ratio_bound(m, &o, wbytes));
            if (o.batch) {
                printf("batch%-3d     %8.1f tok/s  (min %.1f, max %.1f) aggregate = %.2fx tg (median of per-rep ratios)\n",
                       o.batch, sbt.med, sbt.lo, sbt.hi, sra.med);
                if (batch_bytes_per_step() && counted_per_token())
                    printf("             a step of %d reads %s of weights, %.2fx a one-token step: the bytes bound the "
                           "aggregate to %.2fx tg\n", o.batch, kw_format_bytes(batch_bytes_per_step(), b1, sizeof b1),
                           (double)batch_bytes_per_step() / (double)counted_per_token(), batch_bytes_bound(o.batch));
            }
            printf("bandwidth    %8.1f GB/s   (min %.1f, max %.1f) reading the weights' own pages; a fresh 256 MiB "
                   "buffer %.1f GB/s\n", sbw.med / 1e9, sbw.lo / 1e9, sbw.hi / 1e9, sbuf.med / 1e9);
            if (o.n > 0) printf("ceiling      %8.1f tok/s  tg = %.0f%% of ceiling\n", ceiling, ceiling > 0 ? 100 * stg.med / ceiling : 0);
        }
    }
    free(pp); free(tg); free(bw); free(bwbuf); free(bt); free(ratio); free(tg0); free(dratio);
    batch_free(&bb);
    kw_session_free(s);
    kw_session_free(s0);
    kw_pool_destroy(pool);
    kw_model_free(m);
    return rc == 0 ? 0 : 1;
}
