/* kv_int.c - the integer KV row format (tensor.h, KW_TYPE_KV_I16 and
 * KW_TYPE_KV_I8): the one rounding rule (kw_kv_i16_quantize) and the write
 * and read of one position's row in a head's region of a KV block. The KV
 * pool (src/kv) stores rows with these, the attention kernels
 * (attn_i16*.c) read them and quantize q with the same rule. */
#include "kvwise/tensor.h"
#include <float.h>
#include <math.h>
#include <string.h>

/* round half to even for |v| < 2^22 without a libm call (lrintf was 2-4%
 * of a long prefill): adding 1.5 * 2^23 leaves no fraction bits, and the
 * addition rounds in the default mode, which is to nearest even. The
 * product that made v must not be fused into the addition (one rounding
 * instead of two): the build says -ffp-contract=off (CMakeLists.txt). */
static inline int16_t round_small(float v) { return (int16_t)((v + 12582912.0f) - 12582912.0f); }

/* The bits of max|x|: the magnitudes' bits (sign cleared) order as the
 * floats do, also as int32, so their integer max is the max of |x|, and a
 * NaN or an infinity (bits >= 0x7f800000) comes out as the largest. In 16
 * lanes of fixed count, which GCC vectorizes at -O2 (kv rows and queries
 * are quantized per token and head: the scalar loop was ~6% of decode
 * attention at depth 512, bench_attn). */
static uint32_t max_abs_bits(const float *x, int32_t n) {
    int32_t lane[16] = {0}, m = 0;
    int32_t d = 0;
    for (; d + 16 <= n; d += 16) {
        int32_t b[16];
        memcpy(b, x + d, sizeof b);
        for (int i = 0; i < 16; i++) {
            int32_t v = b[i] & 0x7fffffff;
            lane[i] = v > lane[i] ? v : lane[i];
        }
    }
    for (int i = 0; i < 16; i++) m = lane[i] > m ? lane[i] : m;
    for (; d < n; d++) {
        int32_t v;
        memcpy(&v, x + d, sizeof v);
        v &= 0x7fffffff;
        m = v > m ? v : m;
    }
    return (uint32_t)m;
}

float kw_kv_i16_quantize(const float *x, int32_t n, float qmax, int16_t *out) {
    uint32_t mb = max_abs_bits(x, n);
    bool nonfinite = mb >= 0x7f800000u;   /* a NaN or an infinity */
    float m;
    memcpy(&m, &mb, sizeof m);
    float inv = m > 0.0f ? qmax / m : INFINITY;
    /* zeros for a NaN or an infinity (scale NaN), and for a zero row or one below qmax / FLT_MAX,
     * ~1e-35 (scale 0: x * inf would not convert) */
    if (nonfinite || !(inv <= FLT_MAX)) {
        memset(out, 0, sizeof(int16_t) * (size_t)n);
        return nonfinite ? NAN : 0.0f;
    }
    int32_t d = 0;
    for (; d + 16 <= n; d += 16) {   /* fixed count, local copies (the build allows aliasing): vectorized */
        float b[16];
        int16_t o[16];
        memcpy(b, x + d, sizeof b);
        for (int i = 0; i < 16; i++) o[i] = round_small(b[i] * inv);
        memcpy(out + d, o, sizeof o);
    }
    for (; d < n; d++) out[d] = round_small(x[d] * inv);
    return m / qmax;
}

static void int_put(void *region, int32_t bt, int32_t slot, const float *x, int32_t n, int v, bool w8) {
    int16_t row[1024];
    void *q = kw_kv_i16_ints(region, bt);   /* i8: the same place */
    if (n > 1024) n = 1024;   /* layout_check: head dims <= 1024 */
    float qmax = w8 ? (float)KW_KV_I8_MAX : v ? (float)KW_KV_I16_VMAX : (float)KW_KV_I16_KMAX;
    /* a row with a NaN or an infinity gets a NaN scale: attention's output turns NaN, as with f16 */
    kw_kv_i16_scales(region)[slot] = kw_kv_i16_quantize(x, n, qmax, row);
    for (int32_t d = 0; d < n; d++) {
        size_t e = kw_kv_int_index(slot, d, n, v, w8);
        if (w8) ((int8_t *)q)[e] = (int8_t)row[d];   /* |row| <= 127 */
        else ((int16_t *)q)[e] = row[d];
    }
}

static void int_get(const void *region, int32_t bt, int32_t slot, float *x, int32_t n, int v, bool w8) {
    void *r = (void *)(uintptr_t)region;
    const void *q = kw_kv_i16_ints(r, bt);
    float s = kw_kv_i16_scales(r)[slot];
    for (int32_t d = 0; d < n; d++) x[d] = s * (float)kw_kv_int_at(q, w8, kw_kv_int_index(slot, d, n, v, w8));
}

void kw_kv_i16_put(void *region, int32_t bt, int32_t slot, const float *x, int32_t n, int v) {
    int_put(region, bt, slot, x, n, v, false);
}
void kw_kv_i16_get(const void *region, int32_t bt, int32_t slot, float *x, int32_t n, int v) {
    int_get(region, bt, slot, x, n, v, false);
}
void kw_kv_i8_put(void *region, int32_t bt, int32_t slot, const float *x, int32_t n, int v) {
    int_put(region, bt, slot, x, n, v, true);
}
void kw_kv_i8_get(const void *region, int32_t bt, int32_t slot, float *x, int32_t n, int v) {
    int_get(region, bt, slot, x, n, v, true);
}
