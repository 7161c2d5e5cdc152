/* test_tensor_quant.c - dequantization of hand-built blocks of every
 * format, quantize -> dequantize error bounds per type, and the
 * re-quantization fixed point (quantize(dequantize(q)) == q). */
#include "testutil.h"
#include <string.h>
#include "kvwise/tensor.h"
#include "tensor/quant_blocks.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float frand(void) {            /* uniform in [-1, 1) */
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * 0x1p-24 * 2.0 - 1.0);
}
static float grand(void) {            /* roughly Gaussian, std ~1 */
    return (frand() + frand() + frand() + frand()) * 0.866f;
}

#define H(f) kw_f32_to_f16(f)

static void test_known_legacy(void) {
    float y[32];
    kw_block_q4_0 a;
    a.d = H(0.5f);
    for (int j = 0; j < 16; j++) a.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    kw_dequantize_row(KW_TYPE_Q4_0, &a, y, 32);
    int bad = 0;
    for (int j = 0; j < 16; j++) bad += y[j] != (j - 8) * 0.5f || y[j + 16] != (7 - j) * 0.5f;
    KW_CHECK_EQ_INT(bad, 0);

    kw_block_q4_1 b;
    b.d = H(0.25f);
    b.m = H(-1.0f);
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    kw_dequantize_row(KW_TYPE_Q4_1, &b, y, 32);
    bad = 0;
    for (int j = 0; j < 16; j++) bad += y[j] != j * 0.25f - 1 || y[j + 16] != (15 - j) * 0.25f - 1;
    KW_CHECK_EQ_INT(bad, 0);

    /* Q5_0: value j = j (0..31): low nibble j & 15, high bit (j >> 4) in qh bit j. */
    kw_block_q5_0 c;
    c.d = H(2.0f);
    uint32_t qh = 0;
    for (int j = 0; j < 32; j++) qh |= (uint32_t)(j >> 4) << j;
    memcpy(c.qh, &qh, 4);
    for (int j = 0; j < 16; j++) c.qs[j] = (uint8_t)((j & 15) | (((j + 16) & 15) << 4));
    kw_dequantize_row(KW_TYPE_Q5_0, &c, y, 32);
    bad = 0;
    for (int j = 0; j < 32; j++) bad += y[j] != (j - 16) * 2.0f;
    KW_CHECK_EQ_INT(bad, 0);

    kw_block_q5_1 e;
    e.d = H(0.5f);
    e.m = H(3.0f);
    memcpy(e.qh, &qh, 4);
    memcpy(e.qs, c.qs, 16);
    kw_dequantize_row(KW_TYPE_Q5_1, &e, y, 32);
    bad = 0;
    for (int j = 0; j < 32; j++) bad += y[j] != j * 0.5f + 3.0f;
    KW_CHECK_EQ_INT(bad, 0);

    kw_block_q8_0 f;
    f.d = H(0.125f);
    for (int j = 0; j < 32; j++) f.qs[j] = (int8_t)(j * 8 - 127);
    kw_dequantize_row(KW_TYPE_Q8_0, &f, y, 32);
    bad = 0;
    for (int j = 0; j < 32; j++) bad += y[j] != (j * 8 - 127) * 0.125f;
    KW_CHECK_EQ_INT(bad, 0);
}

/* Writes 6-bit scale sc and min m of sub-block j into a 12-byte K scales
 * array, as ggml's layout describes it (written independently of the
 * library's packer). */
static void put_scale_min(uint8_t s[12], int j, int sc, int m) {
    if (j < 4) {
        s[j] = (uint8_t)((s[j] & 0xC0) | sc);
        s[j + 4] = (uint8_t)((s[j + 4] & 0xC0) | m);
    } else {
        s[j + 4] = (uint8_t)((sc & 15) | ((m & 15) << 4));
        s[j - 4] = (uint8_t)((s[j - 4] & 0x3F) | ((sc >> 4) << 6));
        s[j] = (uint8_t)((s[j] & 0x3F) | ((m >> 4) << 6));
    }
}

static void test_known_k(void) {
    static float y[256];
    static const int sc[8] = {1, 5, 63, 17, 33, 48, 2, 60}, mn[8] = {0, 7, 1, 63, 40, 16, 31, 9};
    kw_block_q4_K a;
    memset(&a, 0, sizeof a);
    a.d = H(0.5f);
    a.dmin = H(0.25f);
    for (int j = 0; j < 8; j++) put_scale_min(a.scales, j, sc[j], mn[j]);
    /* value k: sub-block j = k/32, level (k*7) & 15; pairs of sub-blocks share bytes (low, high nibble). */
    for (int k = 0; k < 256; k++) {
        int j = k / 32, l = k % 32, lev = (k * 7) & 15;
        uint8_t *q = &a.qs[32 * (j / 2) + l];
        *q = (uint8_t)((j & 1) ? ((*q & 0x0F) | (lev << 4)) : ((*q & 0xF0) | lev));
    }
    kw_dequantize_row(KW_TYPE_Q4_K, &a, y, 256);
    int bad = 0;
    for (int k = 0; k < 256; k++) {
        int j = k / 32;
        float want = 0.5f * sc[j] * ((k * 7) & 15) - 0.25f * mn[j];
        bad += y[k] != want;
    }
    KW_CHECK_EQ_INT(bad, 0);

    kw_block_q5_K b;
    memset(&b, 0, sizeof b);
    b.d = H(0.5f);
    b.dmin = H(0.25f);
    memcpy(b.scales, a.scales, 12);
    for (int k = 0; k < 256; k++) {
        int j = k / 32, l = k % 32, lev = (k * 11) & 31;
        uint8_t *q = &b.qs[32 * (j / 2) + l];
        *q = (uint8_t)((j & 1) ? ((*q & 0x0F) | ((lev & 15) << 4)) : ((*q & 0xF0) | (lev & 15)));
        b.qh[l] = (uint8_t)(b.qh[l] | ((lev >> 4) << j));
    }
    kw_dequantize_row(KW_TYPE_Q5_K, &b, y, 256);
    bad = 0;
    for (int k = 0; k < 256; k++) {
        int j = k / 32;
        bad += y[k] != 0.5f * sc[j] * ((k * 11) & 31) - 0.25f * mn[j];
    }
    KW_CHECK_EQ_INT(bad, 0);

    /* Q6_K: value k in half h = k/128, quarter t = (k%128)/32, lane l = k%32:
     * low 4 bits in ql[64h + l + 32*(t&1)] (low nibble for t < 2), 2 high
     * bits in qh[32h + l] at bit 2t; scale index k/16. */
    kw_block_q6_K c;
    memset(&c, 0, sizeof c);
    c.d = H(0.125f);
    for (int j = 0; j < 16; j++) c.scales[j] = (int8_t)(j * 9 - 70);
    for (int k = 0; k < 256; k++) {
        int h = k / 128, t = (k % 128) / 32, l = k % 32, v = (k * 13) & 63;
        uint8_t *ql = &c.ql[64 * h + l + 32 * (t & 1)];
        *ql = (uint8_t)((t & 2) ? ((*ql & 0x0F) | ((v & 15) << 4)) : ((*ql & 0xF0) | (v & 15)));
        c.qh[32 * h + l] = (uint8_t)(c.qh[32 * h + l] | ((v >> 4) << (2 * t)));
    }
    kw_dequantize_row(KW_TYPE_Q6_K, &c, y, 256);
    bad = 0;
    for (int k = 0; k < 256; k++) bad += y[k] != 0.125f * c.scales[k / 16] * (((k * 13) & 63) - 32);
    KW_CHECK_EQ_INT(bad, 0);
}

/* Per-element bound for the legacy formats, from their definitions:
 * rounding to the nearest level is off by at most d/2, the clamp at the
 * top level of the symmetric formats by at most d, and storing d (and m)
 * as F16 adds at most (levels) * |d| * 2^-11 (+ |m| * 2^-11). */
static void test_roundtrip_legacy(void) {
    enum { N = 4096 };
    static float x[N], y[N];
    static uint8_t q[N * 2], q2[N * 2];
    for (int i = 0; i < N; i++) x[i] = grand() * ((i / 32) % 5 == 0 ? 10.0f : 0.1f);
    const uint32_t types[] = {KW_TYPE_Q4_0, KW_TYPE_Q4_1, KW_TYPE_Q5_0, KW_TYPE_Q5_1, KW_TYPE_Q8_0};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        uint32_t ty = types[t];
        size_t got = kw_quantize_row(ty, x, q, N);
        KW_CHECK_EQ_INT(got, kw_row_bytes(ty, N));
        kw_dequantize_row(ty, q, y, N);
        int bad = 0;
        for (int b = 0; b < N / 32; b++) {
            const float *xb = x + 32 * b;
            float amax = 0, mn = xb[0], mx = xb[0];
            for (int j = 0; j < 32; j++) {
                amax = fmaxf(amax, fabsf(xb[j]));
                mn = fminf(mn, xb[j]);
                mx = fmaxf(mx, xb[j]);
            }
            float bound;
            switch (ty) {
            case KW_TYPE_Q4_0: bound = amax / 8 * (1 + 16 * 0x1p-11f); break;
            case KW_TYPE_Q5_0: bound = amax / 16 * (1 + 32 * 0x1p-11f); break;
            case KW_TYPE_Q8_0: bound = amax / 127 * (0.5f + 128 * 0x1p-11f); break;
            case KW_TYPE_Q4_1: bound = (mx - mn) / 15 * (0.5f + 16 * 0x1p-11f) + fabsf(mn) * 0x1p-11f; break;
            default: bound = (mx - mn) / 31 * (0.5f + 32 * 0x1p-11f) + fabsf(mn) * 0x1p-11f; break;
            }
            bound = bound * 1.0001f + 1e-30f;
            for (int j = 0; j < 32; j++) bad += fabsf(y[32 * b + j] - xb[j]) > bound;
        }
        KW_CHECK_MSG(bad == 0, "%s: %d values beyond the bound", kw_type_name(ty), bad);
        /* Fixed point: re-quantizing the dequantized values gives the same bytes (Q8_0, Q4_0, Q5_0). */
        if (ty == KW_TYPE_Q8_0 || ty == KW_TYPE_Q4_0 || ty == KW_TYPE_Q5_0) {
            kw_quantize_row(ty, y, q2, N);
            KW_CHECK_MSG(memcmp(q, q2, got) == 0, "%s re-quantization differs", kw_type_name(ty));
        }
    }
}

/* llama.cpp's tests/test-quantize-fns.cpp: data 0.1 + 2 cos(i + offset),
 * error sqrt(sum d^2) / n must stay below MAX_QUANTIZATION_TOTAL_ERROR =
 * 0.002 for every 4-bit-and-up type. */
#define MAX_QUANTIZATION_TOTAL_ERROR 0.002f
static void test_roundtrip_all(void) {
    enum { N = 32 * 128 };
    static float x[N], y[N];
    static uint8_t q[N * 4];
    for (int i = 0; i < N; i++) x[i] = 0.1f + 2 * cosf((float)i + 0.1f);
    const uint32_t types[] = {KW_TYPE_F16, KW_TYPE_BF16, KW_TYPE_Q4_0, KW_TYPE_Q4_1, KW_TYPE_Q5_0, KW_TYPE_Q5_1,
                              KW_TYPE_Q8_0, KW_TYPE_Q4_K, KW_TYPE_Q5_K, KW_TYPE_Q6_K, KW_TYPE_Q8_K, KW_TYPE_Q8_1};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        memset(y, 0, sizeof y);
        size_t got = kw_quantize_row(types[t], x, q, N);
        KW_CHECK_EQ_INT(got, kw_row_bytes(types[t], N));
        kw_dequantize_row(types[t], q, y, N);
        double s = 0;
        for (int i = 0; i < N; i++) s += (double)(x[i] - y[i]) * (x[i] - y[i]);
        float err = (float)(sqrt(s) / N);
        KW_CHECK_MSG(err < MAX_QUANTIZATION_TOTAL_ERROR, "%s error %g", kw_type_name(types[t]), err);
    }
    /* A block of zeros quantizes to zeros (no division by zero). */
    memset(x, 0, sizeof x);
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        kw_quantize_row(types[t], x, q, 256);
        kw_dequantize_row(types[t], q, y, 256);
        int bad = 0;
        for (int i = 0; i < 256; i++) bad += y[i] != 0;
        KW_CHECK_MSG(bad == 0, "%s zeros", kw_type_name(types[t]));
    }
    /* Bad sizes are refused. */
    KW_CHECK_EQ_INT(kw_quantize_row(KW_TYPE_Q4_K, x, q, 100), 0);
    KW_CHECK_EQ_INT(kw_quantize_row(KW_TYPE_Q2_K, x, q, 256), 0);
}

int main(void) {
    test_known_legacy();
    test_known_k();
    test_roundtrip_legacy();
    test_roundtrip_all();
    return kw_test_finish();
}
