/* bench_attn.c - attention micro-benchmark on the Llama-3.2-1B shape
 * (32 query heads, 8 KV heads, head dim 64, F16 paged KV of 32-token blocks).
 *
 * Decode: one token at position D attends over D + 1 keys in every layer
 * and KV head (the KV of all layers, 128 MiB at D = 4096, is far larger
 * than the caches, as in a real decode step); reports ms per token and the
 * GB/s of K/V it streamed. Prefill: -p tokens at positions D.. in tiles (as
 * forward.c runs them) over -L layers, reported as the attention-only
 * tok/s of a 16-layer model. One thread, AVX-512 kernels (exit 77 without).
 *
 * usage: bench_attn [-d DEPTH] [-p TOKENS] [-r REPS] [-L PREFILL_LAYERS] [--kv f16|i16|i8]
 *                   [--kernel avx512|avx2|ref|read] [--cputime] [--no-decode] [--one-layer]
 *                   [-t THREADS]
 * -t N: decode on a pool of N threads, each layer's KV heads split as
 * forward.c splits them (wall time; two threads streaming the KV is what a
 * decode step at depth does, and it is not twice one thread).
 * --kv i16: the i16 cache type (tensor.h) and its VNNI kernel (attn_i16_avx512.c);
 * --kv i8 the same with the i8 type;
 * with --kernel avx2 its AVX2 kernel (attn_i16_avx2.c, needs only AVX2 + FMA),
 * with --kernel ref the portable kw_attn_i16_ref (slow: use small -d/-p).
 * --kernel read (decode only, any --kv): no attention, only a read of every
 * line of the K and V regions the decode would read, in its order, the
 * regions two blocks ahead prefetched: what the memory gives this layout
 * and thread count, against which the kernel's GB/s tell how far it is
 * from being bound by memory alone.
 * --cputime times with the process's CPU seconds (immune to other load;
 * memory stalls still count, they are spent on the CPU).
 * --one-layer: decode reads layer 0's KV in each of the 16 layers' steps, so
 * at a small depth the kernel runs from the cache (i16: 8 KV heads x 264
 * bytes x depth, 1 MiB, one core's L2, at depth ~500): what it costs in
 * compute. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "kvwise/kv.h"
#include "tensor/attn.h"
#include "bench_util.h"

#define N_LAYER 16
#define N_HEAD 32
#define N_KV 8
#define HD 64
#define BT 32

static int g_i16;   /* --kv i16 or i8 */
static int g_i8;    /* --kv i8 */
static int g_one_layer;   /* --one-layer */
enum { KERNEL_AVX512, KERNEL_AVX2, KERNEL_REF, KERNEL_READ };
static int g_kernel = KERNEL_AVX512;   /* --kernel: avx2 and ref for --kv i16/i8; read for any --kv */

static void attend_i16(const kw_attn_args *a, float *scr, int32_t n_ctx) {
    if (g_kernel == KERNEL_AVX2) kw_attn_i16_avx2(a, scr, n_ctx);
    else if (g_kernel == KERNEL_REF) kw_attn_i16_ref(a, scr, n_ctx);
    else kw_attn_i16_avx512(a, scr, n_ctx);
}

/* KV of n positions in every layer, random rows; blocks in pool order. */
static kw_kv_pool *make_kv(int32_t n, kw_block_table *t) {
    kw_err err = {{0}};
    kw_kv_layout lay = {.n_layer = N_LAYER, .n_head_kv = N_KV, .head_dim_k = HD, .head_dim_v = HD,
                        .type = g_i8 ? KW_TYPE_KV_I8 : g_i16 ? KW_TYPE_KV_I16 : KW_TYPE_F16,
                        .block_tokens = BT};
    int32_t nb = (n + BT - 1) / BT;
    kw_kv_pool *kv = kw_kv_pool_create(&lay, nb, &err);
    if (!kv) { fprintf(stderr, "bench_attn: %s\n", err.msg); return NULL; }
    t->ids = malloc(sizeof(int32_t) * (size_t)nb);
    t->n = t->cap = nb;
    uint16_t row[HD];
    float rf[HD];
    for (int32_t b = 0; b < nb; b++) t->ids[b] = kw_kv_alloc(kv);
    for (int l = 0; l < N_LAYER; l++)
        for (int32_t j = 0; j < n; j++)
            for (int h = 0; h < N_KV; h++) {
                if (g_i16) {
                    for (int d = 0; d < HD; d++) rf[d] = frand();
                    (g_i8 ? kw_kv_i8_put : kw_kv_i16_put)(kw_kv_k(kv, t->ids[j / BT], l, h, 0), BT, j % BT, rf, HD, 0);
                    for (int d = 0; d < HD; d++) rf[d] = frand();
                    (g_i8 ? kw_kv_i8_put : kw_kv_i16_put)(kw_kv_v(kv, t->ids[j / BT], l, h, 0), BT, j % BT, rf, HD, 1);
                    continue;
                }
                for (int d = 0; d < HD; d++) row[d] = kw_f32_to_f16(frand());
                memcpy(kw_kv_k(kv, t->ids[j / BT], l, h, j % BT), row, sizeof row);
                for (int d = 0; d < HD; d++) row[d] = kw_f32_to_f16(frand());
                memcpy(kw_kv_v(kv, t->ids[j / BT], l, h, j % BT), row, sizeof row);
            }
    return kv;
}

static volatile uint64_t g_sink;

/* --kernel read: one word of every 64-byte line of head kvh's K regions of
 * the blocks holding keys [0, pos + 1), then of its V regions. */
static void read_head(const kw_attn_args *a) {
    int32_t bt = a->kv.block_tokens, nb = (a->pos[0] + bt) / bt;
    uint64_t sum = 0;
    for (int v = 0; v < 2; v++) {
        size_t bytes = (size_t)bt * (v ? a->kv.v_row_bytes : a->kv.k_row_bytes);
        for (int32_t b = 0; b < nb; b++) {
            if (b + 2 < nb) {
                const char *f = (const char *)kw_attn_region(a, b + 2, v);
                for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(f + o, 0, 2);
            }
            const uint8_t *r = kw_attn_region(a, b, v);
            for (size_t o = 0; o < bytes; o += 64) sum += r[o];
        }
    }
    g_sink += sum;
}

/* One decode step's attention for one layer: thread ith of nth takes KV
 * heads [N_KV ith / nth, N_KV (ith + 1) / nth), as forward.c's attention_task. */
typedef struct {
    float *q, *out, *scr;
    kw_kv_pool *kv;
    kw_block_table *t;
    int32_t *pos, n_ctx;
    int layer;
} decode_job;

/* Floats of one thread's attention scratch (either kernel, and the scores). */
static size_t scr_floats(int32_t n_ctx) {
    size_t tile_f = kw_attn_tile_floats(HD, HD, n_ctx), i16_f = kw_attn_i16_floats(16, HD, HD, n_ctx);
    return (tile_f > i16_f ? tile_f : i16_f) + (size_t)N_HEAD * (size_t)n_ctx;
}

static void decode_layer_task(void *v, int ith, int nth) {
    decode_job *j = v;
    float *scr = j->scr + scr_floats(j->n_ctx) * (size_t)ith;
    for (int h = N_KV * ith / nth; h < N_KV * (ith + 1) / nth; h++) {
        kw_attn_args a = {.q = j->q, .out = j->out, .kv = kw_kv_attn_view(j->kv, j->t->ids, j->layer), .pos = j->pos,
                          .i0 = 0, .n_tok = 1, .kvh = h, .n_head = N_HEAD, .G = N_HEAD / N_KV, .hk = HD, .hv = HD};
        if (g_kernel == KERNEL_READ) read_head(&a);
        else if (g_i16) attend_i16(&a, scr, j->n_ctx);
        else kw_attn_decode_avx512(&a, scr, j->n_ctx);
    }
}

int main(int argc, char **argv) {
    int32_t depth = 4096, n_pre = 512;
    int reps = 5, pre_layers = 2, do_decode = 1, n_threads = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-d") && i + 1 < argc) depth = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-p") && i + 1 < argc) n_pre = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-L") && i + 1 < argc) pre_layers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cputime")) g_cputime = 1;
        else if (!strcmp(argv[i], "--kv") && i + 1 < argc &&
                 (!strcmp(argv[i + 1], "i16") || !strcmp(argv[i + 1], "i8") || !strcmp(argv[i + 1], "f16"))) {
            i++;
            g_i8 = !strcmp(argv[i], "i8");
            g_i16 = g_i8 || !strcmp(argv[i], "i16");
        }
        else if (!strcmp(argv[i], "--kernel") && i + 1 < argc && !strcmp(argv[i + 1], "avx512")) g_kernel = KERNEL_AVX512, i++;
        else if (!strcmp(argv[i], "--kernel") && i + 1 < argc && !strcmp(argv[i + 1], "avx2")) g_kernel = KERNEL_AVX2, i++;
        else if (!strcmp(argv[i], "--kernel") && i + 1 < argc && !strcmp(argv[i + 1], "ref")) g_kernel = KERNEL_REF, i++;
        else if (!strcmp(argv[i], "--kernel") && i + 1 < argc && !strcmp(argv[i + 1], "read")) g_kernel = KERNEL_READ, i++;
        else if (!strcmp(argv[i], "--no-decode")) do_decode = 0;
        else if (!strcmp(argv[i], "--one-layer")) g_one_layer = 1;
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) n_threads = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [-d DEPTH] [-p TOKENS] [-r REPS] [-L PREFILL_LAYERS] [--kv f16|i16|i8] "
                            "[--kernel avx512|avx2|ref|read] [--cputime] [--no-decode] [--one-layer] [-t THREADS]\n", argv[0]);
            return 2;
        }
    }
    if (depth < 1 || n_pre < 0 || reps < 1 || reps > 1000 || pre_layers < 1 || pre_layers > N_LAYER ||
        (g_kernel != KERNEL_AVX512 && g_kernel != KERNEL_READ && !g_i16) || (g_kernel == KERNEL_READ && n_pre > 0)) {
        fprintf(stderr, "bench_attn: bad arguments (--kernel avx2|ref need --kv i16|i8, --kernel read -p 0)\n");
        return 2;
    }
    if (n_threads < 1 || n_threads > N_KV || (n_threads > 1 && g_cputime)) {
        fprintf(stderr, "bench_attn: -t takes 1..%d threads, and --cputime only one (it sums the threads' time)\n", N_KV);
        return 2;
    }
    const kw_cpu_info *ci = kw_cpu_info_get();
    bool runs = !ci ? false
              : g_kernel == KERNEL_READ ? true
              : !g_i16 ? ci->avx512f && kw_attn_decode_supported(KW_TYPE_F16, N_HEAD / N_KV, HD, HD)
              : g_kernel == KERNEL_AVX512 ? ci->avx512f && ci->avx512bw && ci->avx512vnni
              : g_kernel == KERNEL_AVX2 ? ci->avx2 && ci->fma : true;
    if (!runs) {
        printf("bench_attn: needs AVX-512F (VNNI for --kv i16, AVX2 + FMA for --kernel avx2); skipped\n");
        return 77;
    }
    int32_t n_ctx = depth + n_pre;
    kw_block_table t = {0};
    kw_kv_pool *kv = make_kv(n_ctx, &t);
    if (!kv) return 1;
    int32_t n_tok = n_pre > 0 ? n_pre : 1;
    float *q = malloc(sizeof(float) * (size_t)n_tok * N_HEAD * HD);
    float *out = malloc(sizeof(float) * (size_t)n_tok * N_HEAD * HD);
    float *scr = malloc(sizeof(float) * scr_floats(n_ctx) * (size_t)n_threads);   /* one per decode thread */
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n_tok);
    double *ts = malloc(sizeof(double) * (size_t)reps);
    if (!q || !out || !scr || !pos || !ts) { fprintf(stderr, "bench_attn: out of memory\n"); return 1; }
    for (int64_t i = 0; i < (int64_t)n_tok * N_HEAD * HD; i++) q[i] = frand();
    printf("shape        %d heads, %d KV heads, head dim %d, %s KV%s, %d-token blocks, %d thread%s (decode%s), %s time\n",
           N_HEAD, N_KV, HD, g_i8 ? "i8" : g_i16 ? "i16" : "F16", g_kernel == KERNEL_READ ? " (read only, no attention)"
           : !g_i16 ? "" : g_kernel == KERNEL_AVX2 ? " (AVX2 kernel)"
           : g_kernel == KERNEL_REF ? " (portable ref)" : " (VNNI kernel)", BT, n_threads, n_threads > 1 ? "s" : "",
           g_one_layer ? ", layer 0's KV in every layer" : "", g_cputime ? "CPU" : "wall");

    if (do_decode) {
        pos[0] = depth;
        kw_pool *pool = n_threads > 1 ? kw_pool_create(n_threads) : NULL;
        decode_job job = {.q = q, .out = out, .kv = kv, .t = &t, .pos = pos, .n_ctx = n_ctx, .scr = scr};
        if (n_threads > 1 && !pool) { fprintf(stderr, "bench_attn: out of memory\n"); return 1; }
        for (int r = 0; r < reps; r++) {
            double t0 = now_sec();
            for (int l = 0; l < N_LAYER; l++) {
                job.layer = g_one_layer ? 0 : l;
                kw_pool_run(pool, decode_layer_task, &job);
            }
            ts[r] = now_sec() - t0;
        }
        kw_pool_destroy(pool);
        qsort(ts, (size_t)reps, sizeof *ts, cmp_double);
        double bytes = (double)N_LAYER * N_KV * (depth + 1) * (HD * (g_i8 ? 1 : 2) + (g_i16 ? 4 : 0)) * 2;
        printf("decode @%-6d %.3f ms/token (min %.3f, max %.3f), %.1f GB/s of K/V (%.1f MiB per token)\n", depth,
               ts[reps / 2] * 1e3, ts[0] * 1e3, ts[reps - 1] * 1e3, bytes / ts[reps / 2] * 1e-9, bytes / 1048576.0);
    }

    if (n_pre > 0) {
        int G = N_HEAD / N_KV, per = kw_attn_tile_tokens(G);
        for (int32_t i = 0; i < n_pre; i++) pos[i] = depth + i;
        for (int r = 0; r < reps; r++) {
            double t0 = now_sec();
            for (int l = 0; l < pre_layers; l++)
                for (int32_t i0 = 0; i0 < n_pre; i0 += per)
                    for (int h = 0; h < N_KV; h++) {
                        kw_attn_args a = {.q = q, .out = out, .kv = kw_kv_attn_view(kv, t.ids, l), .pos = pos,
                                          .i0 = i0, .n_tok = n_pre - i0 < per ? n_pre - i0 : per, .kvh = h,
                                          .n_head = N_HEAD, .G = G, .hk = HD, .hv = HD};
                        if (g_i16) attend_i16(&a, scr, n_ctx);
                        else kw_attn_tile_avx512(&a, scr, n_ctx);
                    }
            ts[r] = now_sec() - t0;
        }
        qsort(ts, (size_t)reps, sizeof *ts, cmp_double);
        double per_model = ts[reps / 2] * N_LAYER / pre_layers;
        printf("prefill %d @%d: %.1f tok/s attention only, 16 layers (%.3f s; min %.3f, max %.3f per %d layers)\n", n_pre,
               depth, n_pre / per_model, per_model, ts[0], ts[reps - 1], pre_layers);
    }
    free(q); free(out); free(scr); free(pos); free(ts); free(t.ids);
    kw_kv_pool_destroy(kv);
    return 0;
}
