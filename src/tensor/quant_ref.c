/* quant_ref.c - reference (scalar) dequantizers and quantizers for every
 * weight type kvwise supports, plus the Q8_1/Q8_K activation formats.
 *
 * The quantizers reproduce ggml's reference rounding (quantize_row_*_ref
 * and the K-quant search make_qx_quants / make_qkx2_quants), so that
 * re-encoding a model gives the bytes gguf-py / llama-quantize would. */
#include "kvwise/tensor.h"
#include "tensor/quant_blocks.h"
#include <float.h>
#include <math.h>
#include <string.h>

#define KW_MIN(a, b) ((a) < (b) ? (a) : (b))
#define KW_MAX(a, b) ((a) > (b) ? (a) : (b))
#define GROUP_MAX_EPS 1e-15f

/* ggml's nearest_int: round half to even through the 1.5*2^23 trick
 * (valid for |f| < 2^22). */
static inline int nearest_int(float f) {
    float v = f + 12582912.f;
    int32_t i;
    memcpy(&i, &v, 4);
    return (i & 0x007fffff) - 0x00400000;
}

#define H2F(h) kw_f16_to_f32(h)
#define F2H(f) kw_f32_to_f16(f)

/* The value of largest magnitude among x[0..n), the first on a tie (0 when
 * all are zero): the _0 formats and Q8_K scale by it with its sign. */
static float signed_max(const float *x, int n) {
    float amax = 0, max = 0;
    for (int j = 0; j < n; j++)
        if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
    return max;
}

/* ---------------- legacy 32-value formats ---------------- */

static void dequant_q4_0(const void *src, float *y, int64_t nb) {
    const kw_block_q4_0 *b = src;
    for (int64_t i = 0; i < nb; i++, y += KW_QK) {
        float d = H2F(b[i].d);
        for (int j = 0; j < KW_QK / 2; j++) {
            y[j] = (float)((b[i].qs[j] & 0xF) - 8) * d;
            y[j + 16] = (float)((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void quant_q4_0(const float *x, void *dst, int64_t nb) {
    kw_block_q4_0 *b = dst;
    for (int64_t i = 0; i < nb; i++, x += KW_QK) {
        float max = signed_max(x, KW_QK);
        float d = max / -8, id = d != 0 ? 1.0f / d : 0.0f;
        b[i].d = F2H(d);
        for (int j = 0; j < KW_QK / 2; j++) {
            uint8_t q0 = (uint8_t)KW_MIN(15, (int8_t)(x[j] * id + 8.5f));
            uint8_t q1 = (uint8_t)KW_MIN(15, (int8_t)(x[j + 16] * id + 8.5f));
            b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void dequant_q4_1(const void *src, float *y, int64_t nb) {
    const kw_block_q4_1 *b = src;
    for (int64_t i = 0; i < nb; i++, y += KW_QK) {
        float d = H2F(b[i].d), m = H2F(b[i].m);
        for (int j = 0; j < KW_QK / 2; j++) {
            y[j] = (float)(b[i].qs[j] & 0xF) * d + m;
            y[j + 16] = (float)(b[i].qs[j] >> 4) * d + m;
        }
    }
}

/* The _1 formats' step: x[0..n) spread from its minimum (*mn) over levels
 * steps; *id is 1/step (0 when the step is 0). */
static float min_step(const float *x, int n, float levels, float *mn, float *id) {
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    float d = (hi - lo) / levels;
    *mn = lo;
    *id = d != 0 ? 1.0f / d : 0.0f;
    return d;
}

static void quant_q4_1(const float *x, void *dst, int64_t nb) {
    kw_block_q4_1 *b = dst;
    for (int64_t i = 0; i < nb; i++, x += KW_QK) {
        float mn, id, d = min_step(x, KW_QK, 15, &mn, &id);
        b[i].d = F2H(d);
        b[i].m = F2H(mn);
        for (int j = 0; j < KW_QK / 2; j++) {
            uint8_t q0 = (uint8_t)KW_MIN(15, (int8_t)((x[j] - mn) * id + 0.5f));
            uint8_t q1 = (uint8_t)KW_MIN(15, (int8_t)((x[j + 16] - mn) * id + 0.5f));
            b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* 5-bit value j (0..31) of a Q5_0/Q5_1 block: low nibble from qs, bit 4 from qh. */
static inline int q5_value(const uint8_t *qs, uint32_t qh, int j) {
    int lo = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
    return lo | (int)(((qh >> j) & 1) << 4);
}

static void dequant_q5_0(const void *src, float *y, int64_t nb) {
    const kw_block_q5_0 *b = src;
    for (int64_t i = 0; i < nb; i++, y += KW_QK) {
        float d = H2F(b[i].d);
        uint32_t qh;
        memcpy(&qh, b[i].qh, 4);
        for (int j = 0; j < KW_QK; j++) y[j] = (float)(q5_value(b[i].qs, qh, j) - 16) * d;
    }
}

static void pack_q5(const uint8_t *q, uint8_t *qs, uint8_t qh_out[4]) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
        qh |= (uint32_t)((q[j] >> 4) & 1) << j;
        qh |= (uint32_t)((q[j + 16] >> 4) & 1) << (j + 16);
    }
    memcpy(qh_out, &qh, 4);
}

static void quant_q5_0(const float *x, void *dst, int64_t nb) {
    kw_block_q5_0 *b = dst;
    for (int64_t i = 0; i < nb; i++, x += KW_QK) {
        float max = signed_max(x, KW_QK);
        float d = max / -16, id = d != 0 ? 1.0f / d : 0.0f;
        uint8_t q[KW_QK];
        for (int j = 0; j < KW_QK; j++) q[j] = (uint8_t)KW_MIN(31, (int8_t)(x[j] * id + 16.5f));
        b[i].d = F2H(d);
        pack_q5(q, b[i].qs, b[i].qh);
    }
}

static void dequant_q5_1(const void *src, float *y, int64_t nb) {
    const kw_block_q5_1 *b = src;
    for (int64_t i = 0; i < nb; i++, y += KW_QK) {
        float d = H2F(b[i].d), m = H2F(b[i].m);
        uint32_t qh;
        memcpy(&qh, b[i].qh, 4);
        for (int j = 0; j < KW_QK; j++) y[j] = (float)q5_value(b[i].qs, qh, j) * d + m;
    }
}

static void quant_q5_1(const float *x, void *dst, int64_t nb) {
    kw_block_q5_1 *b = dst;
    for (int64_t i = 0; i < nb; i++, x += KW_QK) {
        float mn, id, d = min_step(x, KW_QK, 31, &mn, &id);
        uint8_t q[KW_QK];
        for (int j = 0; j < KW_QK; j++) q[j] = (uint8_t)((x[j] - mn) * id + 0.5f);
        b[i].d = F2H(d);
        b[i].m = F2H(mn);
        pack_q5(q, b[i].qs, b[i].qh);
    }
}

static void dequant_q8_0(const void *src, float *y, int64_t nb) {
    const kw_block_q8_0 *b = src;
    for (int64_t i = 0; i < nb; i++, y += KW_QK) {
        float d = H2F(b[i].d);
        for (int j = 0; j < KW_QK; j++) y[j] = (float)b[i].qs[j] * d;
    }
}

static float abs_max(const float *x, int n) {
    float amax = 0;
    for (int j = 0; j < n; j++) amax = KW_MAX(amax, fabsf(x[j]));
    return amax;
}

static void quant_q8_0(const float *x, void *dst, int64_t nb) {
    kw_block_q8_0 *b = dst;
    for (int64_t i = 0; i < nb; i++, x += KW_QK) {
        float d = abs_max(x, KW_QK) / 127, id = d != 0 ? 1.0f / d : 0.0f;
        b[i].d = F2H(d);
        for (int j = 0; j < KW_QK; j++) b[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

static void dequant_q8_1(const void *src, float *y, int64_t nb) {
    const kw_block_q8_1 *b = src;
    for (int64_t i = 0; i < nb; i++, y += KW_QK) {
        float d = H2F(b[i].d);
        for (int j = 0; j < KW_QK; j++) y[j] = (float)b[i].qs[j] * d;
    }
}

static void quant_q8_1(const float *x, void *dst, int64_t nb) {
    kw_block_q8_1 *b = dst;
    for (int64_t i = 0; i < nb; i++, x += KW_QK) {
        float d = abs_max(x, KW_QK) / 127, id = d != 0 ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < KW_QK; j++) {
            b[i].qs[j] = (int8_t)roundf(x[j] * id);
            sum += b[i].qs[j];
        }
        b[i].d = F2H(d);
        b[i].s = F2H((float)sum * d);
    }
}

/* ---------------- K formats ---------------- */

/* ggml make_qx_quants: symmetric levels -nmax..nmax-1 (stored +nmax) with
 * a weighted least-squares scale search; rmse_type 1 weights by x^2. */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L, int rmse_type) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    if (rmse_type == 0) {
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * x[i]);
            L[i] = (int8_t)(nmax + KW_MAX(-nmax, KW_MIN(nmax - 1, l)));
        }
        return 1 / iscale;
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * x[i]);
        l = KW_MAX(-nmax, KW_MIN(nmax - 1, l));
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * x[i]);
            l = KW_MAX(-nmax, KW_MIN(nmax - 1, l));
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) {
                int l = nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + KW_MAX(-nmax, KW_MIN(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* ggml make_qkx2_quants: asymmetric levels 0..nmax with a min, searched
 * over nstep+1 candidate scales minimising the weighted squared error.
 * Returns the scale; *the_min receives -min (>= 0). */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *w, uint8_t *L,
                              float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep) {
    float min = x[0], max = x[0];
    float sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; i++) L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_err = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)KW_MAX(0, KW_MIN(nmax, l));
        float diff = scale * L[i] + min - x[i];
        best_err += w[i] * diff * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * (x[i] - min));
            l = KW_MAX(0, KW_MIN(nmax, l));
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float err = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                err += w[i] * diff * diff;
            }
            if (err < best_err) {
                memcpy(L, Laux, (size_t)n);
                best_err = err;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* Packs eight 6-bit scales and mins into the 12-byte Q4_K/Q5_K layout. */
static void pack_scales_k4(const uint8_t ls[8], const uint8_t lm[8], uint8_t s[12]) {
    memset(s, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            s[j] = ls[j];
            s[j + 4] = lm[j];
        } else {
            s[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
            s[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            s[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

/* Shared by Q4_K (nmax 15) and Q5_K (nmax 31): chooses sub-block scales and
 * mins, packs them, and writes the final levels L[256]. */
static void quant_k_scales(const float *x, int nmax, float rmin, int nstep, uint16_t *d_out,
                           uint16_t *dmin_out, uint8_t scales_out[12], uint8_t *L) {
    float mins[8], scales[8], weights[32];
    uint8_t Laux[32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(xs[l]);
        scales[j] = make_qkx2_quants(32, nmax, xs, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        ls[j] = (uint8_t)KW_MIN(63, (uint8_t)nearest_int(inv_scale * scales[j]));
        lm[j] = (uint8_t)KW_MIN(63, (uint8_t)nearest_int(inv_min * mins[j]));
    }
    pack_scales_k4(ls, lm, scales_out);
    *d_out = F2H(max_scale / 63.f);
    *dmin_out = F2H(max_min / 63.f);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        kw_get_scale_min_k4(j, scales_out, &sc, &m);
        float d = H2F(*d_out) * sc;
        if (!d) continue;
        float dm = H2F(*dmin_out) * m;
        for (int ii = 0; ii < 32; ii++) {
            int l = nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)KW_MAX(0, KW_MIN(nmax, l));
        }
    }
}

static void quant_q4_K(const float *x, void *dst, int64_t nb) {
    kw_block_q4_K *b = dst;
    uint8_t L[KW_QK_K];
    for (int64_t i = 0; i < nb; i++, x += KW_QK_K) {
        quant_k_scales(x, 15, -1.f, 20, &b[i].d, &b[i].dmin, b[i].scales, L);
        uint8_t *q = b[i].qs;
        for (int j = 0; j < KW_QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

/* Q4_K/Q5_K sub-blocks 2j and 2j+1 of a super-block with scale d and min
 * scale dmin: each one's step and min. */
typedef struct k4_pair { float d1, m1, d2, m2; } k4_pair;

static k4_pair k4_pair_at(const uint8_t *scales, int j, float d, float dmin) {
    uint8_t sc, m;
    k4_pair p;
    kw_get_scale_min_k4(2 * j, scales, &sc, &m);
    p.d1 = d * sc;
    p.m1 = dmin * m;
    kw_get_scale_min_k4(2 * j + 1, scales, &sc, &m);
    p.d2 = d * sc;
    p.m2 = dmin * m;
    return p;
}

static void dequant_q4_K(const void *src, float *y, int64_t nb) {
    const kw_block_q4_K *b = src;
    for (int64_t i = 0; i < nb; i++) {
        float d = H2F(b[i].d), min = H2F(b[i].dmin);
        const uint8_t *q = b[i].qs;
        for (int j = 0; j < 4; j++, q += 32) {
            k4_pair p = k4_pair_at(b[i].scales, j, d, min);
            for (int l = 0; l < 32; l++) *y++ = p.d1 * (q[l] & 0xF) - p.m1;
            for (int l = 0; l < 32; l++) *y++ = p.d2 * (q[l] >> 4) - p.m2;
        }
    }
}

static void quant_q5_K(const float *x, void *dst, int64_t nb) {
    kw_block_q5_K *b = dst;
    uint8_t L[KW_QK_K];
    for (int64_t i = 0; i < nb; i++, x += KW_QK_K) {
        quant_k_scales(x, 31, -0.5f, 15, &b[i].d, &b[i].dmin, b[i].scales, L);
        uint8_t *qh = b[i].qh, *ql = b[i].qs;
        memset(qh, 0, KW_QK_K / 8);
        uint8_t m1 = 1, m2 = 2;
        for (int n = 0; n < KW_QK_K; n += 64, ql += 32) {
            for (int j = 0; j < 32; j++) {
                int l1 = L[n + j], l2 = L[n + j + 32];
                if (l1 > 15) { l1 -= 16; qh[j] |= m1; }
                if (l2 > 15) { l2 -= 16; qh[j] |= m2; }
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
            m1 = (uint8_t)(m1 << 2);
            m2 = (uint8_t)(m2 << 2);
        }
    }
}

static void dequant_q5_K(const void *src, float *y, int64_t nb) {
    const kw_block_q5_K *b = src;
    for (int64_t i = 0; i < nb; i++) {
        float d = H2F(b[i].d), min = H2F(b[i].dmin);
        const uint8_t *ql = b[i].qs, *qh = b[i].qh;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < 4; j++, ql += 32) {
            k4_pair p = k4_pair_at(b[i].scales, j, d, min);
            for (int l = 0; l < 32; l++) *y++ = p.d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - p.m1;
            for (int l = 0; l < 32; l++) *y++ = p.d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - p.m2;
            u1 = (uint8_t)(u1 << 2);
            u2 = (uint8_t)(u2 << 2);
        }
    }
}

static void quant_q6_K(const float *x, void *dst, int64_t nb) {
    kw_block_q6_K *b = dst;
    int8_t L[KW_QK_K];
    float scales[KW_QK_K / 16];
    for (int64_t i = 0; i < nb; i++, x += KW_QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < KW_QK_K / 16; ib++) {
            float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, 1);
            scales[ib] = scale;
            if (fabsf(scale) > max_abs_scale) { max_abs_scale = fabsf(scale); max_scale = scale; }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        float iscale = -128.f / max_scale;
        b[i].d = F2H(1 / iscale);
        for (int ib = 0; ib < KW_QK_K / 16; ib++)
            b[i].scales[ib] = (int8_t)KW_MIN(127, nearest_int(iscale * scales[ib]));
        for (int j = 0; j < KW_QK_K / 16; j++) {
            float d = H2F(b[i].d) * b[i].scales[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ii++) {
                int l = nearest_int(x[16 * j + ii] / d);
                L[16 * j + ii] = (int8_t)(KW_MAX(-32, KW_MIN(31, l)) + 32);
            }
        }
        uint8_t *ql = b[i].ql, *qh = b[i].qh;
        for (int j = 0; j < KW_QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                uint8_t q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF;
                uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
                ql[l] = (uint8_t)(q1 | (q3 << 4));
                ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                  ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
            }
        }
    }
}

static void dequant_q6_K(const void *src, float *y, int64_t nb) {
    const kw_block_q6_K *b = src;
    for (int64_t i = 0; i < nb; i++) {
        float d = H2F(b[i].d);
        const uint8_t *ql = b[i].ql, *qh = b[i].qh;
        const int8_t *sc = b[i].scales;
        for (int n = 0; n < KW_QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

/* ggml quantize_row_q8_K_ref: the CPU backend's K-quant activation format. */
void kw_quantize_q8_K_ref(const float *x, void *dst, int64_t nb) {
    kw_block_q8_K *b = dst;
    for (int64_t i = 0; i < nb; i++, x += KW_QK_K) {
        float max = signed_max(x, KW_QK_K);
        if (!max) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        float iscale = -127.f / max;
        for (int j = 0; j < KW_QK_K; j++) b[i].qs[j] = (int8_t)KW_MIN(127, nearest_int(iscale * x[j]));
        for (int j = 0; j < KW_QK_K / 16; j++) {
            int sum = 0;
            for (int ii = 0; ii < 16; ii++) sum += b[i].qs[j * 16 + ii];
            b[i].bsums[j] = (int16_t)sum;
        }
        b[i].d = 1 / iscale;
    }
}

static void dequant_q8_K(const void *src, float *y, int64_t nb) {
    const kw_block_q8_K *b = src;
    for (int64_t i = 0; i < nb; i++)
        for (int j = 0; j < KW_QK_K; j++) *y++ = b[i].d * b[i].qs[j];
}

/* ---------------- entry points ---------------- */

static void dequant_f32(const void *src, float *y, int64_t n) { memcpy(y, src, (size_t)n * 4); }
static void quant_f32(const float *x, void *dst, int64_t n) { memcpy(dst, x, (size_t)n * 4); }

/* F16 and BF16 (bf16 set): one value a block, converted one by one. */
static void dequant_half(const uint16_t *h, float *y, int64_t n, bool bf16) {
    for (int64_t i = 0; i < n; i++) y[i] = bf16 ? kw_bf16_to_f32(h[i]) : kw_f16_to_f32(h[i]);
}

static void quant_half(const float *x, uint16_t *h, int64_t n, bool bf16) {
    for (int64_t i = 0; i < n; i++) h[i] = bf16 ? kw_f32_to_bf16(x[i]) : kw_f32_to_f16(x[i]);
}

static void dequant_f16(const void *src, float *y, int64_t n) { dequant_half(src, y, n, false); }
static void quant_f16(const float *x, void *dst, int64_t n) { quant_half(x, dst, n, false); }
static void dequant_bf16(const void *src, float *y, int64_t n) { dequant_half(src, y, n, true); }
static void quant_bf16(const float *x, void *dst, int64_t n) { quant_half(x, dst, n, true); }

/* Each computable type's reference conversions of nb blocks (a block of F32,
 * F16 or BF16 is one value); a type without an entry converts nothing. */
typedef struct row_fns {
    void (*dequant)(const void *src, float *y, int64_t nb);
    void (*quant)(const float *x, void *dst, int64_t nb);
} row_fns;

static const row_fns g_row_fns[KW_TYPE_COUNT] = {
    [KW_TYPE_F32] = {dequant_f32, quant_f32},    [KW_TYPE_F16] = {dequant_f16, quant_f16},
    [KW_TYPE_BF16] = {dequant_bf16, quant_bf16}, [KW_TYPE_Q4_0] = {dequant_q4_0, quant_q4_0},
    [KW_TYPE_Q4_1] = {dequant_q4_1, quant_q4_1}, [KW_TYPE_Q5_0] = {dequant_q5_0, quant_q5_0},
    [KW_TYPE_Q5_1] = {dequant_q5_1, quant_q5_1}, [KW_TYPE_Q8_0] = {dequant_q8_0, quant_q8_0},
    [KW_TYPE_Q8_1] = {dequant_q8_1, quant_q8_1}, [KW_TYPE_Q4_K] = {dequant_q4_K, quant_q4_K},
    [KW_TYPE_Q5_K] = {dequant_q5_K, quant_q5_K}, [KW_TYPE_Q6_K] = {dequant_q6_K, quant_q6_K},
    [KW_TYPE_Q8_K] = {dequant_q8_K, kw_quantize_q8_K_ref},
};

/* The type's conversions and the block count of n values; NULL when the
 * type has none or n is not a whole number of blocks. */
static const row_fns *row_fns_for(uint32_t type, int64_t n, int64_t *nb) {
    const kw_type_traits *t = kw_type_traits_get(type);
    if (!t || n <= 0 || n % t->block_size) return NULL;
    *nb = n / t->block_size;
    return &g_row_fns[type];
}

void kw_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n) {
    int64_t nb;
    const row_fns *f = row_fns_for(type, n, &nb);
    if (f && f->dequant) f->dequant(src, dst, nb);
}

size_t kw_quantize_row(uint32_t type, const float *src, void *dst, int64_t n) {
    int64_t nb;
    const row_fns *f = row_fns_for(type, n, &nb);
    if (!f || !f->quant) return 0;
    f->quant(src, dst, nb);
    return (size_t)nb * (size_t)kw_type_traits_get(type)->type_size;
}
