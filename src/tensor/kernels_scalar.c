/* kernels_scalar.c - the portable reference kernel family.
 *
 * Owns the activation quantizers with llama.cpp CPU-backend numerics
 * (Q8_0/Q8_1: d = amax/127, q = round-half-even(x * 127/amax); Q8_K: ggml's
 * reference; F16/BF16: round to nearest even) and one scalar dot product
 * per weight type: integer sums per block, scaled and summed in float in
 * block order. These are the reference every SIMD family is tested
 * against. */
#include "tensor/kernels.h"
#include "tensor/quant_blocks.h"
#include <math.h>
#include <stddef.h>
#include <string.h>

uint32_t kw_dot_type(uint32_t wtype) {
    switch (wtype) {
    case KW_TYPE_F16: return KW_TYPE_F16;
    case KW_TYPE_BF16: return KW_TYPE_BF16;
    case KW_TYPE_Q4_0: case KW_TYPE_Q5_0: case KW_TYPE_Q8_0: return KW_TYPE_Q8_0;
    case KW_TYPE_Q4_1: case KW_TYPE_Q5_1: return KW_TYPE_Q8_1;
    case KW_TYPE_Q4_K: case KW_TYPE_Q5_K: case KW_TYPE_Q6_K: return KW_TYPE_Q8_K;
    default: return KW_TYPE_F32;
    }
}

/* ---------------- activation quantizers ---------------- */

/* F16 and BF16 activations are the reference conversions (quant_ref.c). */
static void act_f16(const float *x, void *dst, int64_t n) { kw_quantize_row(KW_TYPE_F16, x, dst, n); }
static void act_bf16(const float *x, void *dst, int64_t n) { kw_quantize_row(KW_TYPE_BF16, x, dst, n); }

static float block_amax(const float *x, int n) {
    float amax = 0;
    for (int j = 0; j < n; j++) {
        float a = fabsf(x[j]);
        if (a > amax) amax = a;
    }
    return amax;
}

static void act_q8_0(const float *x, void *dst, int64_t n) {
    kw_block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / KW_QK; i++, x += KW_QK) {
        float amax = block_amax(x, KW_QK);
        float id = amax != 0.0f ? 127.f / amax : 0.0f;
        b[i].d = kw_f32_to_f16(amax / 127.f);
        for (int j = 0; j < KW_QK; j++) b[i].qs[j] = (int8_t)nearbyintf(x[j] * id);
    }
}

static void act_q8_1(const float *x, void *dst, int64_t n) {
    kw_block_q8_1 *b = dst;
    for (int64_t i = 0; i < n / KW_QK; i++, x += KW_QK) {
        float amax = block_amax(x, KW_QK);
        float d = amax / 127.f, id = amax != 0.0f ? 127.f / amax : 0.0f;
        int sum = 0;
        for (int j = 0; j < KW_QK; j++) {
            b[i].qs[j] = (int8_t)nearbyintf(x[j] * id);
            sum += b[i].qs[j];
        }
        b[i].d = kw_f32_to_f16(d);
        b[i].s = kw_f32_to_f16(d * (float)sum);
    }
}

static void act_q8_K(const float *x, void *dst, int64_t n) { kw_quantize_q8_K_ref(x, dst, n / KW_QK_K); }

/* ---------------- dot products (one weight row . one activation row) ---------------- */

static float dot_f32(const void *w, const void *x, int64_t n) {
    const float *a = w, *b = x;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return (float)s;
}

/* F16 (bf16 false) or BF16 rows, summed in double. */
static float dot_half(const uint16_t *a, const uint16_t *b, int64_t n, bool bf16) {
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += bf16 ? (double)kw_bf16_to_f32(a[i]) * kw_bf16_to_f32(b[i]) : (double)kw_f16_to_f32(a[i]) * kw_f16_to_f32(b[i]);
    return (float)s;
}

static float dot_f16(const void *w, const void *x, int64_t n) { return dot_half(w, x, n, false); }
static float dot_bf16(const void *w, const void *x, int64_t n) { return dot_half(w, x, n, true); }

/* Integer dot of one Q4_x / Q5_x block's levels with 32 activation bytes:
 * value j is the low (j < 16) or high nibble of qs[j % 16], with bit j of
 * qh as its fifth bit (qh NULL for Q4_x), minus offset (8 / 16 for the _0
 * formats, 0 for the _1 ones, which add a min term instead). */
static int legacy_block_dot(const uint8_t *qs, const uint8_t *qh, int offset, const int8_t *y) {
    uint32_t h = 0;
    if (qh) memcpy(&h, qh, 4);
    int sumi = 0;
    for (int j = 0; j < KW_QK; j++) {
        int lo = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
        sumi += ((lo | (int)(((h >> j) & 1) << 4)) - offset) * y[j];
    }
    return sumi;
}

/* The legacy formats share one layout: a block is its f16 scale d, then
 * (the _1 formats) an f16 min m, then (Q5) the 4 bytes of fifth bits, then
 * the 16 bytes of nibbles; its activation block is Q8_0 (d, 32 bytes) beside
 * a _0 format and Q8_1 (d, s, 32 bytes) beside a _1 one, which adds m * s. */
_Static_assert(offsetof(kw_block_q5_1, qh) == 4 && offsetof(kw_block_q5_1, qs) == 8 && sizeof(kw_block_q5_1) == 24,
               "q5_1 layout");
_Static_assert(offsetof(kw_block_q8_1, qs) == 4 && sizeof(kw_block_q8_1) == 36, "q8_1 layout");

static float half_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return kw_f16_to_f32(h);
}

static float legacy_dot(const void *w, const void *x, int64_t n, bool has_min, bool has_qh, int offset) {
    const size_t head = has_min ? 4 : 2, wsize = head + (has_qh ? 4 : 0) + KW_QK / 2, xsize = head + KW_QK;
    const uint8_t *a = w, *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / KW_QK; i++, a += wsize, b += xsize) {
        float t = (float)legacy_block_dot(a + wsize - KW_QK / 2, has_qh ? a + head : NULL, offset, (const int8_t *)b + head) *
                  (half_at(a) * half_at(b));
        if (has_min) t += half_at(a + 2) * half_at(b + 2);
        s += t;
    }
    return s;
}

static float dot_q4_0(const void *w, const void *x, int64_t n) { return legacy_dot(w, x, n, false, false, 8); }
static float dot_q4_1(const void *w, const void *x, int64_t n) { return legacy_dot(w, x, n, true, false, 0); }
static float dot_q5_0(const void *w, const void *x, int64_t n) { return legacy_dot(w, x, n, false, true, 16); }
static float dot_q5_1(const void *w, const void *x, int64_t n) { return legacy_dot(w, x, n, true, true, 0); }

static float dot_q8_0(const void *w, const void *x, int64_t n) {
    const kw_block_q8_0 *a = w, *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / KW_QK; i++) {
        int sumi = 0;
        for (int j = 0; j < KW_QK; j++) sumi += a[i].qs[j] * b[i].qs[j];
        s += (float)sumi * (kw_f16_to_f32(a[i].d) * kw_f16_to_f32(b[i].d));
    }
    return s;
}

/* Integer dot of n weight levels with n activation bytes: a plain loop
 * the compiler vectorizes (exact integers, any order). */
static int dot_levels(const int8_t *q, const int8_t *y, int n) {
    int dot = 0;
    for (int l = 0; l < n; l++) dot += q[l] * y[l];
    return dot;
}

/* Q4_K/Q5_K: per super-block, sum_j sc_j * (q . y)_j in int, minus the min
 * term sum_j m_j * (bsums of sub-block j), both scaled by the block's d.
 * Sub-block j's 4-bit values are the low (even j) or high (odd j) nibbles
 * of qs[32 * (j / 2) ...]; Q5_K adds bit j of qh[l] as the fifth bit (qh
 * NULL for Q4_K). The levels are unpacked first, in loops without
 * branches per value, then dotted per sub-block. */
static float dot_k4_block(const uint8_t *scales, const uint8_t *qs, const uint8_t *qh, uint16_t d, uint16_t dmin,
                          const kw_block_q8_K *b) {
    int8_t v[KW_QK_K];
    for (int p = 0; p < 4; p++)
        for (int l = 0; l < 32; l++) {
            v[64 * p + l] = (int8_t)(qs[32 * p + l] & 0xF);
            v[64 * p + 32 + l] = (int8_t)(qs[32 * p + l] >> 4);
        }
    if (qh)
        for (int j = 0; j < 8; j++)
            for (int l = 0; l < 32; l++) v[32 * j + l] |= (int8_t)(((qh[l] >> j) & 1) << 4);
    int sumi = 0, summ = 0;
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        kw_get_scale_min_k4(j, scales, &sc, &m);
        sumi += sc * dot_levels(v + 32 * j, b->qs + 32 * j, 32);
        summ += m * (b->bsums[2 * j] + b->bsums[2 * j + 1]);
    }
    return kw_f16_to_f32(d) * b->d * (float)sumi - kw_f16_to_f32(dmin) * b->d * (float)summ;
}

/* Q4_K, or Q5_K (q5) with its fifth bits. */
static float dot_k45(const void *w, const void *x, int64_t n, bool q5) {
    const kw_block_q4_K *a4 = w;
    const kw_block_q5_K *a5 = w;
    const kw_block_q8_K *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / KW_QK_K; i++)
        s += q5 ? dot_k4_block(a5[i].scales, a5[i].qs, a5[i].qh, a5[i].d, a5[i].dmin, &b[i])
                : dot_k4_block(a4[i].scales, a4[i].qs, NULL, a4[i].d, a4[i].dmin, &b[i]);
    return s;
}

static float dot_q4_K(const void *w, const void *x, int64_t n) { return dot_k45(w, x, n, false); }
static float dot_q5_K(const void *w, const void *x, int64_t n) { return dot_k45(w, x, n, true); }

/* Q6_K levels of a block, in -32..31: per half h (128 values) and l, ql
 * byte l / l+32 gives the low nibbles of values l / l+32 and the high ones
 * of l+64 / l+96, and qh byte l their top 2 bits (2 bits per quarter). */
static void q6_levels(const kw_block_q6_K *a, int8_t *v) {
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = a->ql + 64 * h, *qh = a->qh + 32 * h;
        int8_t *o = v + 128 * h;
        for (int l = 0; l < 32; l++) {
            o[l] = (int8_t)(((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32);
            o[l + 32] = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
            o[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            o[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

static float dot_q6_K(const void *w, const void *x, int64_t n) {
    const kw_block_q6_K *a = w;
    const kw_block_q8_K *b = x;
    float s = 0;
    int8_t v[KW_QK_K];
    for (int64_t i = 0; i < n / KW_QK_K; i++) {
        q6_levels(&a[i], v);
        int sumi = 0;
        for (int j = 0; j < 16; j++) sumi += a[i].scales[j] * dot_levels(v + 16 * j, b[i].qs + 16 * j, 16);
        s += kw_f16_to_f32(a[i].d) * b[i].d * (float)sumi;
    }
    return s;
}

/* ---------------- GEMM drivers ---------------- */

typedef float (*dot_fn)(const void *w, const void *x, int64_t n);

static void gemm_rows(dot_fn dot, const kw_matrix *W, int64_t r0, int64_t r1, const void *X,
                      size_t x_stride, int64_t nx, float *Y, int64_t ldy) {
    const char *w = W->data;
    const char *x = X;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t i = 0; i < nx; i++)
            Y[i * ldy + r] = dot(w + (size_t)r * W->row_bytes, x + (size_t)i * x_stride, W->cols);
}

#define KW_SCALAR_GEMM(T) \
    static void gemm_##T(const kw_matrix *W, int64_t r0, int64_t r1, const void *X, size_t xs, \
                         int64_t nx, float *Y, int64_t ldy) { gemm_rows(dot_##T, W, r0, r1, X, xs, nx, Y, ldy); }
KW_SCALAR_GEMM(f32)
KW_SCALAR_GEMM(f16)
KW_SCALAR_GEMM(bf16)
KW_SCALAR_GEMM(q4_0)
KW_SCALAR_GEMM(q4_1)
KW_SCALAR_GEMM(q5_0)
KW_SCALAR_GEMM(q5_1)
KW_SCALAR_GEMM(q8_0)
KW_SCALAR_GEMM(q4_K)
KW_SCALAR_GEMM(q5_K)
KW_SCALAR_GEMM(q6_K)

void kw_kernels_scalar_init(kw_kernel_set *k) {
    memset(k, 0, sizeof *k);
    k->name = "scalar";
    k->quant[KW_TYPE_F16] = act_f16;
    k->quant[KW_TYPE_BF16] = act_bf16;
    k->quant[KW_TYPE_Q8_0] = act_q8_0;
    k->quant[KW_TYPE_Q8_1] = act_q8_1;
    k->quant[KW_TYPE_Q8_K] = act_q8_K;
    k->gemm[KW_TYPE_F32] = gemm_f32;
    k->gemm[KW_TYPE_F16] = gemm_f16;
    k->gemm[KW_TYPE_BF16] = gemm_bf16;
    k->gemm[KW_TYPE_Q4_0] = gemm_q4_0;
    k->gemm[KW_TYPE_Q4_1] = gemm_q4_1;
    k->gemm[KW_TYPE_Q5_0] = gemm_q5_0;
    k->gemm[KW_TYPE_Q5_1] = gemm_q5_1;
    k->gemm[KW_TYPE_Q8_0] = gemm_q8_0;
    k->gemm[KW_TYPE_Q4_K] = gemm_q4_K;
    k->gemm[KW_TYPE_Q5_K] = gemm_q5_K;
    k->gemm[KW_TYPE_Q6_K] = gemm_q6_K;
    for (int t = 0; t < KW_TYPE_COUNT; t++) k->gemm_experts[t] = k->gemm[t];   /* the stored layout is all it reads */
}
