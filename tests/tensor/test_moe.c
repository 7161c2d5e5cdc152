/* test_moe.c - kw_moe_experts (tensor.h), the routed experts of a
 * mixture-of-experts block, for the expert types of the files people run
 * (Q8_0, Q4_K, Q6_K, Q4_0, Q5_K, F16, F32) and every kernel family this
 * CPU can run:
 *   - against a reference composed here from the scalar family's kw_matmul
 *     and SwiGLU, per token and choice, summed in choice order: the scalar
 *     family's kw_moe_experts gives exactly its bits, every other family
 *     the same within float summation order;
 *   - 1, 2 and 3 threads give bit-identical outputs;
 *   - a token's output is the same bits alone as in any batch;
 *   - the bytes it reports are the used experts' three matrices once each;
 *   - an expert no token chose is never read (its rows are poisoned);
 *   - the same with the chosen experts packed for the family (kw_experts_pack). */
#include "testutil.h"
#include <math.h>
#include <string.h>
#include "kvwise/memory.h"
#include "kvwise/tensor.h"
#include "tensor/kernels.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * 0x1p-24 * 2.0 - 1.0);
}

enum { N_EXPERT = 6, K = 2, MAX_TOK = 9 };

typedef struct moe_case {
    int64_t embd, ff;
    kw_experts gate, up, down;
    uint8_t *data[3];
    float x[MAX_TOK * 512];
    int32_t sel[MAX_TOK * K];
    float w[MAX_TOK * K];
} moe_case;

static int make_experts(kw_experts *E, uint8_t **data, uint32_t type, int64_t rows, int64_t cols) {
    size_t rb = kw_row_bytes(type, cols);
    *data = malloc(rb * (size_t)rows * N_EXPERT);
    float *row = malloc(sizeof(float) * (size_t)cols);
    if (!*data || !row) { free(row); return -1; }
    for (int64_t r = 0; r < rows * N_EXPERT; r++) {
        for (int64_t j = 0; j < cols; j++) row[j] = frand() * 0.3f;
        kw_quantize_row(type, row, *data + (size_t)r * rb, cols);
    }
    free(row);
    *E = (kw_experts){.type = type, .rows = rows, .cols = cols, .row_bytes = rb, .n = N_EXPERT,
                      .stride = rb * (size_t)rows, .data = *data};
    return 0;
}

/* Experts 0..N_EXPERT-1 with tokens choosing among 0..3 only: 4 and 5 are
 * never chosen and their bytes are NaN-filled (any read shows in the output). */
static int setup(moe_case *c, uint32_t type, int64_t embd, int64_t ff) {
    memset(c, 0, sizeof *c);
    c->embd = embd;
    c->ff = ff;
    if (make_experts(&c->gate, &c->data[0], type, ff, embd) || make_experts(&c->up, &c->data[1], type, ff, embd) ||
        make_experts(&c->down, &c->data[2], type, embd, ff))
        return -1;
    kw_experts *all[3] = {&c->gate, &c->up, &c->down};
    for (int t = 0; t < 3; t++) memset(c->data[t] + 4 * all[t]->stride, 0xff, 2 * all[t]->stride);
    for (int64_t i = 0; i < MAX_TOK * embd; i++) c->x[i] = frand();
    for (int i = 0; i < MAX_TOK; i++) {
        int a = i % 4, b = (i * 3 + 1) % 4;
        if (b == a) b = (a + 1) % 4;
        c->sel[i * K] = a;
        c->sel[i * K + 1] = b;
        c->w[i * K] = 0.25f + 0.05f * (float)i;
        c->w[i * K + 1] = 1.0f - c->w[i * K];
    }
    return 0;
}

static void teardown(moe_case *c) {
    for (int t = 0; t < 3; t++) free(c->data[t]);
}

static kw_moe_args args(moe_case *c, int64_t i0, int64_t n, float *out) {
    return (kw_moe_args){.gate = &c->gate, .up = &c->up, .down = &c->down, .x = c->x + i0 * c->embd, .n = n, .k = K,
                         .sel = c->sel + i0 * K, .w = c->w + i0 * K, .out = out};
}

static uint64_t run(moe_case *c, kw_pool *pool, int64_t i0, int64_t n, float *out) {
    size_t sb = kw_moe_scratch_bytes(c->embd, c->ff, N_EXPERT, n, K);
    void *scratch = kw_mem_alloc(KW_MEM_SCRATCH, sb);
    kw_moe_args a = args(c, i0, n, out);
    uint64_t bytes = scratch ? kw_moe_experts(pool, &a, scratch) : 0;
    kw_mem_free(scratch);
    return bytes;
}

/* The reference with the scalar family: per token and choice, gate and up
 * through kw_matmul, the SwiGLU, down through kw_matmul, summed in choice order. */
static void reference(moe_case *c, int64_t n, float *out) {
    kw_kernel_force("scalar");
    float *g = malloc(sizeof(float) * (size_t)c->ff), *u = malloc(sizeof(float) * (size_t)c->ff);
    float *d = malloc(sizeof(float) * (size_t)c->embd);
    kw_matrix probe = kw_expert_matrix(&c->down, 0);
    size_t sb = kw_matmul_scratch_bytes(&probe, 1) + kw_matmul_scratch_bytes(&(kw_matrix){.type = c->gate.type,
                    .rows = c->ff, .cols = c->embd, .row_bytes = c->gate.row_bytes}, 1) + 64;
    void *scratch = kw_mem_alloc(KW_MEM_SCRATCH, sb);
    for (int64_t i = 0; i < n; i++)
        for (int j = 0; j < K; j++) {
            int32_t e = c->sel[i * K + j];
            kw_matrix G = kw_expert_matrix(&c->gate, e), U = kw_expert_matrix(&c->up, e), D = kw_expert_matrix(&c->down, e);
            kw_matmul(NULL, &G, c->x + i * c->embd, 1, g, scratch);
            kw_matmul(NULL, &U, c->x + i * c->embd, 1, u, scratch);
            kw_kernels_active()->swiglu(g, u, c->ff);
            kw_matmul(NULL, &D, g, 1, d, scratch);
            for (int64_t r = 0; r < c->embd; r++)
                out[i * c->embd + r] = j == 0 ? c->w[i * K] * d[r] : out[i * c->embd + r] + c->w[i * K + j] * d[r];
        }
    free(g); free(u); free(d);
    kw_mem_free(scratch);
}

static const char *g_best;

/* Outputs not finite; *worst the largest |out - ref|, *mag the largest |ref|. */
static int compare(const float *out, const float *ref, size_t nv, double *worst, double *mag) {
    int bad = 0;
    *worst = *mag = 0;
    for (size_t i = 0; i < nv; i++) {
        bad += !isfinite(out[i]);
        *worst = fmax(*worst, fabs((double)out[i] - ref[i]));
        *mag = fmax(*mag, fabs((double)ref[i]));
    }
    return bad;
}

/* Experts 0..3 packed for the running family (kw_experts_pack), then the
 * same checks as the stored rows get: within tolerance of the reference,
 * the same bits for 1-3 threads and alone or in a batch, the copies' bytes
 * counted, and experts 4 and 5 (stored, NaN-filled) never read. A type the
 * family has no packed form for packs nothing. */
static void check_packed(moe_case *c, const char *family, const float *ref, kw_pool *const *pools) {
    int64_t embd = c->embd;
    size_t nv = (size_t)MAX_TOK * (size_t)embd;
    void *_Atomic slots[3][N_EXPERT];
    memset(slots, 0, sizeof slots);
    kw_experts *E[3] = {&c->gate, &c->up, &c->down};
    for (int t = 0; t < 3; t++) E[t]->packed = slots[t];
    void *blocks[4] = {0};
    int packed = 0;
    for (int e = 0; e < 4; e++) {
        kw_err err = {{0}};
        blocks[e] = kw_experts_pack(E, 3, e, &err);
        packed += blocks[e] != NULL;
    }
    const char *tn = kw_type_name(c->gate.type);
    KW_CHECK_MSG(packed == 0 || packed == 4, "%s %s: %d of 4 experts packed", tn, family, packed);
    if (packed == 4) {
        kw_err err = {{0}};
        KW_CHECK(kw_experts_pack(E, 3, 2, &err) == NULL);   /* already packed */
        uint64_t want = 0;
        for (int e = 0; e < 4; e++)
            for (int t = 0; t < 3; t++) {
                kw_matrix w = kw_expert_matrix(E[t], e);
                KW_CHECK(w.packed != NULL);
                want += kw_matrix_span(&w).bytes;
            }
        KW_CHECK(kw_expert_matrix(&c->gate, 4).packed == NULL);
        float *out = malloc(nv * 4), *o2 = malloc(nv * 4);
        KW_CHECK_EQ_INT(run(c, pools[0], 0, MAX_TOK, out), want);
        double worst, mag;
        int bad = compare(out, ref, nv, &worst, &mag);
        KW_CHECK_MSG(bad == 0, "%s %s packed: %d outputs not finite", tn, family, bad);
        KW_CHECK_MSG(worst <= 2e-3 * (mag + 1), "%s %s packed: %.3g from scalar (|ref| up to %.3g)", tn, family, worst, mag);
        for (int p = 1; p < 3; p++) {
            run(c, pools[p], 0, MAX_TOK, o2);
            KW_CHECK_MSG(!memcmp(out, o2, nv * 4), "%s %s packed: %d threads differ from 1", tn, family, p + 1);
        }
        for (int64_t i = 0; i < MAX_TOK; i++) run(c, pools[1], i, 1, o2 + i * embd);
        KW_CHECK_MSG(!memcmp(out, o2, nv * 4), "%s %s packed: a token alone differs from the batch", tn, family);
        free(out);
        free(o2);
    }
    for (int e = 0; e < 4; e++) kw_mem_free(blocks[e]);
    for (int t = 0; t < 3; t++) E[t]->packed = NULL;
}

static void check_type(uint32_t type, int64_t embd, int64_t ff, kw_pool *const *pools) {
    moe_case *c = malloc(sizeof *c);
    if (!c || setup(c, type, embd, ff)) { KW_CHECK(0); free(c); return; }
    size_t nv = (size_t)MAX_TOK * (size_t)embd;
    float *ref = malloc(nv * 4), *out = malloc(nv * 4), *o2 = malloc(nv * 4), *alone = malloc(nv * 4);
    reference(c, MAX_TOK, ref);
    static const char *families[] = {"scalar", "avx2", "avx512"};
    for (int f = 0; f < 3; f++) {
        if (kw_kernel_force(families[f]) != 0) continue;
        uint64_t bytes = run(c, pools[0], 0, MAX_TOK, out);
        KW_CHECK_EQ_INT(bytes, 4 * (c->gate.stride + c->up.stride + c->down.stride));   /* experts 0..3 */
        double worst, mag;
        int bad = compare(out, ref, nv, &worst, &mag);
        KW_CHECK_MSG(bad == 0, "%s %s: %d outputs not finite (an unchosen expert was read?)", kw_type_name(type),
                     families[f], bad);
        if (f == 0) KW_CHECK_MSG(worst == 0, "%s scalar: %.3g from the composed reference", kw_type_name(type), worst);
        else KW_CHECK_MSG(worst <= 2e-3 * (mag + 1), "%s %s: %.3g from scalar (|ref| up to %.3g)", kw_type_name(type),
                          families[f], worst, mag);
        /* threads */
        for (int p = 1; p < 3; p++) {
            run(c, pools[p], 0, MAX_TOK, o2);
            KW_CHECK_MSG(!memcmp(out, o2, nv * 4), "%s %s: %d threads differ from 1", kw_type_name(type), families[f], p + 1);
        }
        /* batch independence: each token alone, and a batch of the last 5 */
        for (int64_t i = 0; i < MAX_TOK; i++) run(c, pools[1], i, 1, alone + i * embd);
        KW_CHECK_MSG(!memcmp(out, alone, nv * 4), "%s %s: a token alone differs from the batch", kw_type_name(type),
                     families[f]);
        run(c, pools[1], 4, 5, o2);
        KW_CHECK_MSG(!memcmp(out + 4 * embd, o2, (size_t)5 * embd * 4), "%s %s: a smaller batch differs",
                     kw_type_name(type), families[f]);
        check_packed(c, families[f], ref, pools);
    }
    kw_kernel_force(g_best);
    free(ref); free(out); free(o2); free(alone);
    teardown(c);
    free(c);
}

int main(void) {
    const char *best = kw_kernel_name();
    g_best = best;
    kw_pool *pools[3] = {NULL, kw_pool_create(2), kw_pool_create(3)};
    check_type(KW_TYPE_Q8_0, 96, 64, pools);
    check_type(KW_TYPE_Q4_0, 64, 96, pools);
    check_type(KW_TYPE_F16, 48, 40, pools);
    check_type(KW_TYPE_F32, 40, 24, pools);
    check_type(KW_TYPE_Q4_K, 256, 256, pools);
    check_type(KW_TYPE_Q5_K, 256, 256, pools);
    check_type(KW_TYPE_Q6_K, 512, 256, pools);
    kw_kernel_force(best);
    /* the scratch bound grows with the batch and covers every type */
    KW_CHECK(kw_moe_scratch_bytes(256, 256, 8, 2, 2) < kw_moe_scratch_bytes(256, 256, 8, 4, 2));
    KW_CHECK(kw_moe_scratch_bytes(256, 256, 8, 0, 2) == 0);
    kw_pool_destroy(pools[1]);
    kw_pool_destroy(pools[2]);
    return kw_test_finish();
}
