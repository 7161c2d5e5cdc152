/* test_tensor_matmul.c - kw_matmul for every weight type and every kernel
 * family this CPU can run, against references computed here:
 *   ref_q: dequantized weights . activations quantized the llama.cpp way
 *          (computed in double) - the kernel may differ only by float
 *          rounding;
 *   ref_f: dequantized weights . float activations - differs from ref_q
 *          only by the activation rounding, bounded element by element.
 * Also: 1, 2 and 3 threads give bit-identical outputs (odd row counts). */
#include "testutil.h"
#include <float.h>
#include <string.h>
#include "kvwise/tensor.h"
#include "kvwise/memory.h"
#include "i16_ref.h"

static uint64_t g_rng = 0x1234567887654321ull;
static float frand(void) {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * 0x1p-24 * 2.0 - 1.0);
}
static float grand(void) { return (frand() + frand() + frand() + frand()) * 0.866f; }

/* The activation rounding of llama.cpp's CPU backend, written out here
 * independently: returns the value each activation becomes and its
 * worst-case rounding error. */
static void act_round(uint32_t wtype, const float *x, int64_t n, float *xr, float *err, float *scorr) {
    switch (wtype) {
    case KW_TYPE_F32:
        for (int64_t i = 0; i < n; i++) { xr[i] = x[i]; err[i] = 0; }
        return;
    case KW_TYPE_F16:
        for (int64_t i = 0; i < n; i++) { xr[i] = kw_f16_to_f32(kw_f32_to_f16(x[i])); err[i] = fabsf(x[i]) * 0x1p-11f; }
        return;
    case KW_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) { xr[i] = kw_bf16_to_f32(kw_f32_to_bf16(x[i])); err[i] = fabsf(x[i]) * 0x1p-8f; }
        return;
    case KW_TYPE_Q4_K: case KW_TYPE_Q5_K: case KW_TYPE_Q6_K: {
        /* Q8_K: d = 1/(-127/max) kept in float; error <= d/2 (+ float rounding). */
        static uint8_t buf[292 * 64];
        kw_quantize_row(KW_TYPE_Q8_K, x, buf, n);
        kw_dequantize_row(KW_TYPE_Q8_K, buf, xr, n);
        for (int64_t b = 0; b < n / 256; b++) {
            float amax = 0;
            for (int j = 0; j < 256; j++) amax = fmaxf(amax, fabsf(x[256 * b + j]));
            for (int j = 0; j < 256; j++) err[256 * b + j] = amax / 127 * 0.5001f;
        }
        return;
    }
    default: /* Q8_0 / Q8_1: d = amax/127 stored as F16, q = round-half-even(x * 127/amax) */
        for (int64_t b = 0; b < n / 32; b++) {
            const float *xb = x + 32 * b;
            float amax = 0;
            for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(xb[j]));
            float d16 = kw_f16_to_f32(kw_f32_to_f16(amax / 127.f)), id = amax != 0 ? 127.f / amax : 0;
            int sum = 0;
            for (int j = 0; j < 32; j++) {
                xr[32 * b + j] = nearbyintf(xb[j] * id) * d16;
                sum += (int)nearbyintf(xb[j] * id);
                err[32 * b + j] = amax / 127 * (0.5001f + 128 * 0x1p-11f);
            }
            /* Q8_1 also carries s = F16(d * sum q), which the Q4_1/Q5_1 dot
             * multiplies by the weight block's min m: the part of it that
             * is not d16 * sum q is more activation rounding. */
            float s16 = kw_f16_to_f32(kw_f32_to_f16(amax / 127.f * (float)sum));
            scorr[b] = s16 - d16 * (float)sum;
        }
        return;
    }
}

typedef struct {
    uint32_t type;
    int64_t rows, cols, n;
    kw_matrix W;
    void *wdata;
    float *wf;          /* dequantized weights */
    float *x, *y;
    void *scratch;
} mm_case;

static int setup(mm_case *c, uint32_t type, int64_t rows, int64_t cols, int64_t n) {
    memset(c, 0, sizeof *c);
    c->type = type; c->rows = rows; c->cols = cols; c->n = n;
    size_t rb = kw_row_bytes(type, cols);
    c->wdata = malloc(rb * (size_t)rows);
    c->wf = malloc(sizeof(float) * (size_t)(rows * cols));
    c->x = malloc(sizeof(float) * (size_t)(n * cols));
    c->y = malloc(sizeof(float) * (size_t)(n * rows));
    float *tmp = malloc(sizeof(float) * (size_t)cols);
    if (!c->wdata || !c->wf || !c->x || !c->y || !tmp) return -1;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t j = 0; j < cols; j++) tmp[j] = grand() * 0.08f;
        kw_quantize_row(type, tmp, (char *)c->wdata + (size_t)r * rb, cols);
        kw_dequantize_row(type, (char *)c->wdata + (size_t)r * rb, c->wf + r * cols, cols);
    }
    free(tmp);
    for (int64_t i = 0; i < n * cols; i++) c->x[i] = grand() * ((i / 32) % 7 == 3 ? 4.0f : 1.0f);
    c->W.type = type; c->W.rows = rows; c->W.cols = cols; c->W.row_bytes = rb; c->W.data = c->wdata;
    size_t sb = kw_matmul_scratch_bytes(&c->W, n);
    c->scratch = sb ? kw_mem_alloc(KW_MEM_SCRATCH, sb) : NULL;
    return sb && !c->scratch ? -1 : 0;
}

static void teardown(mm_case *c) {
    free(c->wdata); free(c->wf); free(c->x); free(c->y);
    kw_mem_free(c->scratch);
}

/* Checks one kernel family's output against both references. */
static void check_against_refs(mm_case *c, const char *family) {
    float *xr = malloc(sizeof(float) * (size_t)c->cols), *err = malloc(sizeof(float) * (size_t)c->cols);
    float *scorr = calloc((size_t)c->cols / 32, sizeof(float));
    bool has_min = c->type == KW_TYPE_Q4_1 || c->type == KW_TYPE_Q5_1;
    int bad_q = 0, bad_f = 0;
    double worst = 0;
    for (int64_t i = 0; i < c->n; i++) {
        act_round(c->type, c->x + i * c->cols, c->cols, xr, err, scorr);
        for (int64_t r = 0; r < c->rows; r++) {
            const float *w = c->wf + r * c->cols;
            double ref_q = 0, ref_f = 0, mag = 0, abound = 0;
            for (int64_t j = 0; j < c->cols; j++) {
                ref_q += (double)w[j] * xr[j];
                ref_f += (double)w[j] * c->x[i * c->cols + j];
                mag += fabs((double)w[j] * xr[j]);
                abound += fabs((double)w[j]) * err[j];
            }
            for (int64_t b = 0; has_min && b < c->cols / 32; b++) {
                /* the block's min m sits after d in both Q4_1 and Q5_1 blocks */
                const uint8_t *blk = (const uint8_t *)c->wdata + (size_t)r * c->W.row_bytes +
                                     (size_t)b * (size_t)kw_type_traits_get(c->type)->type_size;
                double m = kw_f16_to_f32((uint16_t)(blk[2] | (blk[3] << 8)));
                ref_q += m * scorr[b];
                mag += fabs(m * scorr[b]);
                abound += fabs(m * scorr[b]);
            }
            /* Float summation bound (Higham, gamma_n = n u / (1 - n u)) over the
             * at most cols + 8 roundings of a dot product of this length. */
            double tol = (double)(c->cols + 8) * FLT_EPSILON * mag + 1e-30;
            double y = c->y[i * c->rows + r];
            if (fabs(y - ref_q) > tol) bad_q++;
            if (fabs(y - ref_q) / (tol) > worst) worst = fabs(y - ref_q) / tol;
            if (fabs(ref_q - ref_f) > abound * 1.0001 + 1e-30) bad_f++;
        }
    }
    KW_CHECK_MSG(bad_q == 0, "%s %s n=%lld: %d outputs beyond float-rounding bound (worst %.2fx)", family,
                 kw_type_name(c->type), (long long)c->n, bad_q, worst);
    KW_CHECK_MSG(bad_f == 0, "%s %s: activation rounding beyond its bound in %d outputs", family,
                 kw_type_name(c->type), bad_f);
    free(xr);
    free(err);
    free(scorr);
}

/* Packed F16 on AVX-512 computes with int16 blocks of the weights and of the
 * activations (the F16 conformance tolerances cover the difference, see
 * docs/PERFORMANCE.md): its reference is that integer form, exact dot per
 * block, then the kernel's float steps, within the same float-rounding bound. */
static void check_i16_ref(mm_case *c, const char *family) {
    int64_t nb = c->cols / I16_QK;
    int32_t *qx = malloc(sizeof(int32_t) * (size_t)c->cols), qw[I16_QK];
    float *dx = malloc(sizeof(float) * (size_t)nb), dw;
    int bad = 0;
    double worst = 0;
    for (int64_t i = 0; i < c->n; i++) {
        for (int64_t b = 0; b < nb; b++) i16_ref_block(c->x + i * c->cols + I16_QK * b, qx + I16_QK * b, dx + b, 1);
        for (int64_t r = 0; r < c->rows; r++) {
            double ref = 0, mag = 0;
            for (int64_t b = 0; b < nb; b++) {
                i16_ref_block(c->wf + r * c->cols + I16_QK * b, qw, &dw, 0);
                int64_t dot = 0;
                for (int j = 0; j < I16_QK; j++) dot += (int64_t)qw[j] * qx[I16_QK * b + j];
                ref += (double)dw * dx[b] * (double)dot;
                mag += fabs((double)dw * dx[b] * (double)dot);
            }
            double tol = (double)(c->cols + 8) * FLT_EPSILON * mag + 1e-30, d = fabs(c->y[i * c->rows + r] - ref);
            if (d > tol) bad++;
            if (d / tol > worst) worst = d / tol;
        }
    }
    KW_CHECK_MSG(bad == 0, "%s f16 (int16 blocks) n=%lld: %d outputs beyond float-rounding bound (worst %.2fx)", family,
                 (long long)c->n, bad, worst);
    free(qx);
    free(dx);
}

static void run_checks(mm_case *c, const char *family, float *y1, kw_pool *p1, kw_pool *p2, kw_pool *p3) {
    size_t bytes = sizeof(float) * (size_t)(c->n * c->rows);
    kw_matmul(p1, &c->W, c->x, c->n, c->y, c->scratch);
    memcpy(y1, c->y, bytes);
    if (c->type == KW_TYPE_F16 && c->W.packed) check_i16_ref(c, family);
    else check_against_refs(c, family);
    kw_matmul(p2, &c->W, c->x, c->n, c->y, c->scratch);
    KW_CHECK_MSG(memcmp(y1, c->y, bytes) == 0, "%s %s: 1 vs 2 threads differ", family, kw_type_name(c->type));
    kw_matmul(p3, &c->W, c->x, c->n, c->y, c->scratch);
    KW_CHECK_MSG(memcmp(y1, c->y, bytes) == 0, "%s %s: 1 vs 3 threads differ", family, kw_type_name(c->type));
    kw_matmul(NULL, &c->W, c->x, c->n, c->y, c->scratch);
    KW_CHECK_MSG(memcmp(y1, c->y, bytes) == 0, "%s %s: no pool differs", family, kw_type_name(c->type));
}

int main(void) {
    const uint32_t types[] = {KW_TYPE_F32, KW_TYPE_F16, KW_TYPE_BF16, KW_TYPE_Q4_0, KW_TYPE_Q4_1, KW_TYPE_Q5_0,
                              KW_TYPE_Q5_1, KW_TYPE_Q8_0, KW_TYPE_Q4_K, KW_TYPE_Q5_K, KW_TYPE_Q6_K};
    const char *families[] = {"scalar", "avx2", "avx512"};
    const int64_t ns[] = {1, 2, 3, 4, 8, 11};   /* decode, the small-batch kernel sizes, prefill tiles */
    kw_pool *p1 = kw_pool_create(1), *p2 = kw_pool_create(2), *p3 = kw_pool_create(3);
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        for (size_t k = 0; k < 2 * sizeof ns / sizeof ns[0]; k++) {
            mm_case c;
            /* 197 rows: odd, not a multiple of any tile, several chunks per thread. 480 columns
             * (the second pass; the K-quants need whole 256-value super-blocks) make an odd
             * block count: the packed Q4_0 / Q8_0 pairs' last block has no mate. */
            const size_t nn = sizeof ns / sizeof ns[0];
            const int64_t cols = k < nn ? 512 : 480;
            if (cols % kw_type_traits_get(types[t])->block_size) continue;
            if (setup(&c, types[t], 197, cols, ns[k % nn]) != 0) { KW_CHECK(!"alloc"); teardown(&c); continue; }
            float *y1 = malloc(sizeof(float) * (size_t)(c.n * c.rows));
            for (size_t f = 0; f < 3; f++) {
                if (kw_kernel_force(families[f]) != 0) continue;
                run_checks(&c, families[f], y1, p1, p2, p3);
                kw_err err;
                int rc = kw_matrix_pack(&c.W, &err);
                KW_CHECK(rc == 0 || rc == 1);
                if (rc == 0) {
                    char name[64];
                    snprintf(name, sizeof name, "%s-packed", families[f]);
                    KW_CHECK(c.W.packed != NULL);
                    run_checks(&c, name, y1, p1, p2, p3);
                    kw_matrix_unpack(&c.W);
                    KW_CHECK(c.W.packed == NULL);
                }
            }
            free(y1);
            teardown(&c);
        }
    }
    kw_pool_destroy(p1);
    kw_pool_destroy(p2);
    kw_pool_destroy(p3);
    return kw_test_finish();
}
