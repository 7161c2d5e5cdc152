/* attn_i16.c - attention over an i16 or i8 KV cache: the arithmetic, and
 * its portable implementation. The i8 type (tensor.h) is the same arithmetic
 * with q_int, K_int and V_int within 127 instead of 4095, 4095 and 8191
 * (the probabilities keep 8191).
 *
 * Owns the definition every path computes bit for bit (this file, the
 * AVX-512 VNNI kernel of attn_i16_avx512.c for prefill tiles and decode,
 * the AVX2 one of attn_i16_avx2.c) and the exp2 they share (kw_attn_exp2):
 *
 *   q:      m = max|q|, q_int = lrintf(q * (4095 / m)),
 *           c = ((m / 4095) * (1/sqrt(hk))) * log2e       (scores in base 2)
 *   score:  s_j = ((float)(q_int . K_int[j]) * sk_j) * c       (exact int32 dot)
 *   softmax: mx = max_j s_j, e_j = kw_attn_exp2(s_j - mx);
 *           sum: e_j into float lane j % 16 in order of j, the lanes flushed
 *           into 16 double parts after every 256th key and at the end, the
 *           parts added in order 0..15; inv = (float)(1 / sum)
 *           (attn.h, kw_attn_i16_sum_add / _end)
 *   out:    keys in chunks of 32 aligned at position 0; per chunk
 *           P_j = e_j * sv_j, pm = max P_j (chunk skipped when pm is not > 0),
 *           P_int = lrintf(P_j * (8191 / pm)), acc = fmaf(pm / 8191,
 *           (float)(P_int . V_int[chunk]), acc), chunks in order; out = acc * inv.
 *
 * The integer dot products are exact whatever their order: K and q are
 * within 4095, so a dot of at most 128 dimensions is below 128 * 4095^2 <
 * 2^31; V and P within 8191 over 32 keys are below 32 * 8191^2 < 2^31.
 * Only the float steps above have an order, and every path keeps it.
 *
 * exp2 (attn.h has its steps and constants): base 2 takes the
 * exp's range reduction down to one rounding and one subtraction, and its
 * degree-6 polynomial is within 1.7e-7 relative of 2^f, far below the 13
 * bits the probabilities keep. The lanes of float sums replaced double sums
 * per key (convert and add per 8 keys were ~9% of decode attention at depth
 * 4096, bench_attn); a span of 256 keys keeps a lane's float sum within 16
 * terms, the double parts carry the rest. kw_attn_exp2 is the portable C;
 * attn_i16_avx2.c has it in 8 lanes and the VNNI kernel in 16;
 * tests/tensor/test_exp_i16.c compares the three bit for bit. So i16
 * attention gives the same bits on any x86-64, with or without AVX-512
 * (and the portable path on any other CPU with a correctly rounded fmaf).
 * Precision: 12 bits + sign of each row's largest value for K and q, 13
 * for V and the chunk's probabilities, about what F16 keeps of a typical
 * row; i8 keeps 7 bits + sign of K and V, as q8_0 with one scale per row
 * (tests/tensor/test_attn_i16.c measures both against an F32 cache). */
#include "tensor/attn.h"
#include <math.h>
#include <string.h>

#define I16_CHUNK 32   /* keys per probability quantization chunk */

float kw_attn_i16_quant_q(const float *q, int hk, int w8, int16_t *qi) {
    float qmax = w8 ? (float)KW_KV_I8_MAX : (float)KW_KV_I16_KMAX;
    return (kw_kv_i16_quantize(q, hk, qmax, qi) * (1.0f / sqrtf((float)hk))) * KW_ATTN_LOG2E;   /* NaN stays NaN */
}

/* The float with bits (k + 127) << 23: 2^k for -126 <= k <= 127. */
static float pow2_normal(int32_t k) {
    uint32_t b = (uint32_t)(k + 127) << 23;
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

float kw_attn_exp2(float x) {
    x = x < 128.0f ? x : 128.0f;     /* vminps(x, 128): 128 unless x < 128 (so NaN -> 128) */
    x = x > -127.0f ? x : -127.0f;   /* vmaxps(x, -127) */
    /* nearbyintf in the default rounding mode: to nearest, ties to even, as
     * vroundscaleps; f = x - n is exact (|x| <= 128, |x - n| <= 1/2) */
    float n = nearbyintf(x), f = x - n;
    float p;
#define KW_SCALAR(c) (c)
    KW_ATTN_EXP2_POLY(p, f, KW_SCALAR, fmaf);
#undef KW_SCALAR
    /* p * 2^n (-127 <= n <= 128, p in about [0.7, 1.42]) as vscalefps: in
     * two halves, each 2^k a normal float; p * 2^n1 is normal, so exact,
     * and only the second product rounds (to a subnormal or inf) */
    int32_t ni = (int32_t)n, n1 = ni / 2, n2 = ni - n1;
    return (p * pow2_normal(n1)) * pow2_normal(n2);
}

void kw_attn_i16_exp(float *x, int32_t n) {
    for (int32_t j = 0; j < n; j++) x[j] = kw_attn_exp2(x[j]);
}

/* The span flush: the 16 float lanes into the double parts, lanes cleared. */
static void flush_lanes(float *lane, double *part) {
    for (int l = 0; l < 16; l++) { part[l] += (double)lane[l]; lane[l] = 0.0f; }
}

void kw_attn_i16_sum_add(float *lane, double *part, const float *e, int32_t j0, int32_t j1) {
    for (int32_t j = j0; j < j1; j++) {
        lane[j % 16] += e[j - j0];
        if (j % KW_ATTN_SPAN == KW_ATTN_SPAN - 1) flush_lanes(lane, part);
    }
}

float kw_attn_i16_sum_end(float *lane, double *part) {
    double sum = 0.0;
    flush_lanes(lane, part);
    for (int l = 0; l < 16; l++) sum += part[l];
    return (float)(1.0 / sum);
}

/* One query (token i0 + t, head kvh * G + g) over keys [0, pos + 1). */
static void i16_query(const kw_attn_args *a, int t, int g, float *s, int16_t *qi, float *acc) {
    const int hk = a->hk, hv = a->hv, bt = a->kv.block_tokens;
    const int32_t i = a->i0 + t, n = a->pos[i] + 1;
    const int h = a->kvh * a->G + g;
    const bool w8 = a->kv.type == KW_TYPE_KV_I8;
    float c = kw_attn_i16_quant_q(a->q + ((size_t)i * (size_t)a->n_head + (size_t)h) * (size_t)hk, hk, w8, qi);

    float mx = -INFINITY;
    for (int32_t j = 0; j < n; j++) {
        void *kr = kw_attn_region(a, j / bt, 0);
        const void *ki = kw_kv_i16_ints(kr, bt);   /* i8: the same place (tensor.h) */
        int32_t isum = 0;
        for (int d = 0; d < hk; d++)
            isum += (int32_t)qi[d] * kw_kv_int_at(ki, w8, kw_kv_int_index(j % bt, d, hk, 0, w8));
        s[j] = ((float)isum * kw_kv_i16_scales(kr)[j % bt]) * c;
        if (s[j] > mx) mx = s[j];
    }
    for (int32_t j = 0; j < n; j++) s[j] -= mx;
    kw_attn_i16_exp(s, n);
    float lane[16] = {0};
    double part[16] = {0};
    kw_attn_i16_sum_add(lane, part, s, 0, n);
    float inv = kw_attn_i16_sum_end(lane, part);

    memset(acc, 0, sizeof(float) * (size_t)hv);
    for (int32_t j0 = 0; j0 < n; j0 += I16_CHUNK) {
        int32_t j1 = j0 + I16_CHUNK < n ? j0 + I16_CHUNK : n;
        void *vr = kw_attn_region(a, j0 / bt, 1);   /* bt % 32 == 0: one block */
        const float *sv = kw_kv_i16_scales(vr);
        const void *vi = kw_kv_i16_ints(vr, bt);
        float p[I16_CHUNK], pm = 0.0f;
        for (int32_t j = j0; j < j1; j++) {
            p[j - j0] = s[j] * sv[j % bt];
            if (p[j - j0] > pm) pm = p[j - j0];
        }
        if (!(pm > 0.0f)) continue;
        float pinv = (float)KW_KV_I16_VMAX / pm, sp = pm / (float)KW_KV_I16_VMAX;
        int32_t pi[I16_CHUNK];
        for (int32_t j = j0; j < j1; j++) pi[j - j0] = (int32_t)lrintf(p[j - j0] * pinv);
        for (int d = 0; d < hv; d++) {
            int32_t isum = 0;
            for (int32_t j = j0; j < j1; j++) isum += pi[j - j0] * kw_kv_int_at(vi, w8, kw_kv_int_index(j % bt, d, hv, 1, w8));
            acc[d] = fmaf(sp, (float)isum, acc[d]);
        }
    }
    float *o = a->out + ((size_t)i * (size_t)a->n_head + (size_t)h) * (size_t)hv;
    for (int d = 0; d < hv; d++) o[d] = acc[d] * inv;
}

void kw_attn_i16_ref(const kw_attn_args *a, float *scr, int32_t max_ctx) {
    float *s = scr, *acc = s + max_ctx;
    int16_t *qi = (int16_t *)(acc + a->hv);
    for (int t = 0; t < a->n_tok; t++)
        for (int g = 0; g < a->G; g++) i16_query(a, t, g, s, qi, acc);
}
