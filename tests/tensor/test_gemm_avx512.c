/* test_gemm_avx512.c - the prefill GEMM for packed Q4_0 / Q8_0 weights
 * (gemm_avx512.c, reached through kw_matmul with >= 4 activation rows on a
 * packed matrix) against a double-precision reference: dequantized weights
 * . activations quantized to Q8_0 (the dot type) with the reference
 * quantizer, within the float summation bound. Also: 1 and 2 threads are
 * bit-identical; an output row does not depend on which tile it fell in
 * (29 rows at once = 13 + 16 rows in two calls = 1 row at a time through
 * the per-row packed kernel); shapes with rows that are not a multiple of
 * 16 (tail through the unpacked kernel), several L2 passes (400 rows) and
 * rows longer than 2048 values (offset table tail: 70 blocks).
 * F16 weights: the packed int16 form (every row packed, the last group
 * zero-padded; tiles of 2 row groups x up to 6 activation rows, smaller
 * tiles with several chains per output), against the int16 block reference
 * written out here.
 * Skips (77) without AVX-512 VNNI. */
#include "testutil.h"
#include <float.h>
#include <stdbool.h>
#include <string.h>
#include "kvwise/memory.h"
#include "kvwise/tensor.h"
#include "i16_ref.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * 0x1p-24 * 2.0 - 1.0);
}

/* Dequantized int16 form of n values (the reference's view of F16 weights and activations). */
static void i16_round(const float *v, float *out, int64_t n, int act) {
    int32_t q[I16_QK];
    float d;
    for (int64_t b = 0; b < n / I16_QK; b++) {
        i16_ref_block(v + I16_QK * b, q, &d, act);
        for (int j = 0; j < I16_QK; j++) out[I16_QK * b + j] = (float)q[j] * d;
    }
}

/* F16 rounding of n values (F16 weights whose width is no multiple of 128 stay unpacked: exact F16 kernels, activations rounded to F16). */
static void f16_round(const float *v, float *out, int64_t n) {
    for (int64_t j = 0; j < n; j++) out[j] = kw_f16_to_f32(kw_f32_to_f16(v[j]));
}

static void run(uint32_t type, int64_t rows, int64_t cols, int64_t n, kw_pool *p1, kw_pool *p2) {
    size_t rb = kw_row_bytes(type, cols);
    uint8_t *wd = malloc(rb * (size_t)rows);
    float *wf = malloc(sizeof(float) * (size_t)(rows * cols)), *x = malloc(sizeof(float) * (size_t)(n * cols));
    float *y1 = malloc(sizeof(float) * (size_t)(n * rows)), *y2 = malloc(sizeof(float) * (size_t)(n * rows));
    float *y3 = malloc(sizeof(float) * (size_t)(n * rows)), *xr = malloc(sizeof(float) * (size_t)cols);
    uint8_t *xq = malloc(kw_row_bytes(KW_TYPE_Q8_0, cols));
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t j = 0; j < cols; j++) wf[r * cols + j] = frand() * 0.1f;
        kw_quantize_row(type, wf + r * cols, wd + (size_t)r * rb, cols);
        kw_dequantize_row(type, wd + (size_t)r * rb, wf + r * cols, cols);
    }
    /* some blocks 3x larger; a spike every 997 values (F16: int16 activation scale set by max|x|, not sum|x|) */
    for (int64_t i = 0; i < n * cols; i++) x[i] = frand() * ((i / 32) % 5 == 1 ? 3.0f : 1.0f) * (i % 997 == 5 ? 1000.0f : 1.0f);
    kw_matrix W = {.type = type, .rows = rows, .cols = cols, .row_bytes = rb, .data = wd};
    kw_err err = {{0}};
    const bool i16 = type == KW_TYPE_F16 && cols % I16_QK == 0;
    KW_CHECK_EQ_INT(kw_matrix_pack(&W, &err), type == KW_TYPE_F16 && !i16 ? 1 : 0);   /* 1: left unpacked */
    KW_CHECK_EQ_INT(kw_matrix_packed_rows(&W), type == KW_TYPE_F16 ? (i16 ? rows : 0) : rows / 16 * 16);
    if (i16)   /* the reference sees the weights in their int16 form */
        for (int64_t r = 0; r < rows; r++) i16_round(wf + r * cols, wf + r * cols, cols, 0);
    void *scr = kw_mem_alloc(KW_MEM_SCRATCH, kw_matmul_scratch_bytes(&W, n));

    kw_matmul(p1, &W, x, n, y1, scr);
    kw_matmul(p2, &W, x, n, y2, scr);
    KW_CHECK_MSG(memcmp(y1, y2, sizeof(float) * (size_t)(n * rows)) == 0, "%s: 1 vs 2 threads differ", kw_type_name(type));
    /* other tilings: 13 + rest rows, then one row at a time (per-row packed kernel) */
    kw_matmul(p2, &W, x, 13, y3, scr);
    kw_matmul(p2, &W, x + 13 * cols, n - 13, y3 + 13 * rows, scr);
    KW_CHECK_MSG(memcmp(y1, y3, sizeof(float) * (size_t)(n * rows)) == 0, "%s: 13 + %lld rows != %lld rows",
                 kw_type_name(type), (long long)(n - 13), (long long)n);
    for (int64_t i = 0; i < n; i++) kw_matmul(p1, &W, x + i * cols, 1, y3 + i * rows, scr);
    KW_CHECK_MSG(memcmp(y1, y3, sizeof(float) * (size_t)(n * rows)) == 0, "%s: rows one at a time differ", kw_type_name(type));

    int bad = 0;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i16) i16_round(x + i * cols, xr, cols, 1);
        else if (type == KW_TYPE_F16) f16_round(x + i * cols, xr, cols);
        else {
            kw_quantize_row(KW_TYPE_Q8_0, x + i * cols, xq, cols);
            kw_dequantize_row(KW_TYPE_Q8_0, xq, xr, cols);
        }
        for (int64_t r = 0; r < rows; r++) {
            double ref = 0, mag = 0;
            for (int64_t j = 0; j < cols; j++) {
                ref += (double)wf[r * cols + j] * xr[j];
                mag += fabs((double)wf[r * cols + j] * xr[j]);
            }
            /* float summation bound (Higham gamma_n) over <= cols + 8 roundings */
            double tol = (double)(cols + 8) * FLT_EPSILON * mag + 1e-30, d = fabs(y1[i * rows + r] - ref);
            if (d > tol) bad++;
            if (d / tol > worst) worst = d / tol;
        }
    }
    KW_CHECK_MSG(bad == 0, "%s %lldx%lld n=%lld: %d outputs beyond the float bound (worst %.2fx)", kw_type_name(type),
                 (long long)rows, (long long)cols, (long long)n, bad, worst);
    printf("%s %lld x %lld, %lld rows: worst error %.3f of the float bound\n", kw_type_name(type), (long long)rows,
           (long long)cols, (long long)n, worst);
    kw_matrix_unpack(&W);
    kw_mem_free(scr);
    free(wd); free(wf); free(x); free(y1); free(y2); free(y3); free(xr); free(xq);
}

/* F16 int16 blocks at the int32 bound: all weights 1 (q = 8191) and all
 * activations -1 (sum|x| sets the scale d = 128 / 262048: q = -round(2047.25)
 * = -2047 each), so each 128-value block's dot is -8191 * 2047 * 128 =
 * -2146173056, just inside int32; the result must be -cols (a wrapped sum
 * would be far off). Tolerance: the activation rounding, at most d/2 per
 * value (relative 0.5 / 2047.25), plus 1e-5 relative for float roundings. */
static void i16_worst_case(kw_pool *p) {
    const int64_t rows = 16, cols = 512, n = 2;
    size_t rb = kw_row_bytes(KW_TYPE_F16, cols);
    uint16_t *wd = malloc(rb * (size_t)rows);
    float *x = malloc(sizeof(float) * (size_t)(n * cols)), *y = malloc(sizeof(float) * (size_t)(n * rows));
    for (int64_t i = 0; i < rows * cols; i++) wd[i] = kw_f32_to_f16(1.0f);
    for (int64_t i = 0; i < n * cols; i++) x[i] = -1.0f;
    kw_matrix W = {.type = KW_TYPE_F16, .rows = rows, .cols = cols, .row_bytes = rb, .data = wd};
    kw_err err = {{0}};
    KW_CHECK_EQ_INT(kw_matrix_pack(&W, &err), 0);
    void *scr = kw_mem_alloc(KW_MEM_SCRATCH, kw_matmul_scratch_bytes(&W, n));
    kw_matmul(p, &W, x, n, y, scr);
    for (int64_t i = 0; i < n * rows; i++)
        KW_CHECK_MSG(fabsf(y[i] + (float)cols) <= (0.5f / 2047.25f + 1e-5f) * (float)cols, "int16 bound case: y[%lld] = %g, want %lld",
                     (long long)i, y[i], (long long)-cols);
    kw_matrix_unpack(&W);
    kw_mem_free(scr);
    free(wd); free(x); free(y);
}

int main(void) {
    kw_test_need_avx512_vnni();
    kw_pool *p1 = kw_pool_create(1), *p2 = kw_pool_create(2);
    static const uint32_t types[] = {KW_TYPE_Q4_0, KW_TYPE_Q8_0, KW_TYPE_F16};
    for (int t = 0; t < 3; t++) {
        /* several passes; Q4_0/Q8_0: 70 blocks, tiles 8+8+8+5; F16: 18 blocks of 128, tiles 6 x 4 + 5 */
        run(types[t], 400, types[t] == KW_TYPE_F16 ? 2304 : 2240, 29, p1, p2);
        run(types[t], 203, 256, 17, p1, p2);    /* 11-row tail outside the packed rows */
    }
    /* F16: a 2-group tile whose second group is partial (53 = 32 + 21 rows), tiles of 2 and 3
     * activation rows (15 = 6 + 6 + 3, then 13 + 2); widths that are no multiple of 128 (not
     * packed: exact F16 kernels). n must exceed 13 (run() splits 13 + rest). */
    run(KW_TYPE_F16, 53, 128, 15, p1, p2);
    run(KW_TYPE_F16, 37, 96, 14, p1, p2);
    run(KW_TYPE_F16, 37, 192, 14, p1, p2);
    i16_worst_case(p2);
    kw_pool_destroy(p1);
    kw_pool_destroy(p2);
    return kw_test_finish();
}
