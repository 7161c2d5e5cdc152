/* test_attn_q8.c - the Q8_0 KV cache's attention rows: q . K-row and
 * acc += p * V-row, portable (attn.c) against AVX2 (attn_avx2.c). The two
 * must give the same bits (scores and outputs do not depend on the machine's
 * SIMD family, and the integer block dots are exact), and both must match a
 * double-precision evaluation of the same formula. Rows of 32..512 values;
 * random, all-equal, sign-alternating and zero blocks. The AVX2 half skips
 * without AVX2/FMA/F16C. */
#include "testutil.h"
#include "tensor/attn.h"
#include <math.h>
#include <string.h>

/* The formula in double: sum over blocks of d_k * d_q * isum, and
 * acc + p * d * v per element; float rounding of each step is a few ulps of
 * the result (|t| <= n * 127^2 * d_k * d_q), so 1e-5 relative is ample. */
static const double TOL_REL = 1e-5;

static uint32_t g_seed = 4242u;
static float frand(void) {
    g_seed = g_seed * 1664525u + 1013904223u;
    return (float)((g_seed >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static void fill(float *x, int n, int kind) {
    for (int i = 0; i < n; i++) {
        switch (kind) {
        case 0: x[i] = frand() * 3.0f; break;
        case 1: x[i] = 0.75f; break;
        case 2: x[i] = (i & 1) ? -2.5f : 2.5f; break;
        default: x[i] = (i / 32) % 2 ? 0.0f : frand(); break;   /* every other block all zero */
        }
    }
}

static double ref_dot(const uint8_t *q, const uint8_t *k, int n) {
    double t = 0.0;
    for (int b = 0; b < n / 32; b++) {
        uint16_t dk, dq;
        memcpy(&dk, k + 34 * b, 2);
        memcpy(&dq, q + 34 * b, 2);
        long isum = 0;
        for (int i = 0; i < 32; i++) isum += (long)((const int8_t *)q)[34 * b + 2 + i] * ((const int8_t *)k)[34 * b + 2 + i];
        t += (double)kw_f16_to_f32(dk) * kw_f16_to_f32(dq) * (double)isum;
    }
    return t;
}

int main(void) {
    const kw_cpu_info *ci = kw_cpu_info_get();
    int avx2 = ci && ci->avx2 && ci->fma && ci->f16c;
    enum { MAXN = 512 };
    float qf[MAXN], kf[MAXN], acc0[MAXN], acc1[MAXN];
    uint8_t qb[MAXN / 32 * 34], kb[MAXN / 32 * 34];
    int cases = 0, identical = 1;
    double worst = 0.0;
    for (int n = 32; n <= MAXN; n *= 2)
        for (int kq = 0; kq < 4; kq++)
            for (int kk = 0; kk < 4; kk++) {
                fill(qf, n, kq);
                fill(kf, n, kk);
                kw_quantize_row(KW_TYPE_Q8_0, qf, qb, n);
                kw_quantize_row(KW_TYPE_Q8_0, kf, kb, n);
                float s0 = kw_attn_dot_q8_0(qb, kb, n);
                double r = ref_dot(qb, kb, n), e = fabs(s0 - r) / (fabs(r) + 1e-30);
                if (r != 0.0 && e > worst) worst = e;
                KW_CHECK_MSG(r == 0.0 ? s0 == 0.0f : e <= TOL_REL, "n %d kinds %d/%d: dot %.9g vs double %.9g", n, kq, kk, s0, r);
                float p = 0.25f + 0.5f * (float)kk;
                for (int i = 0; i < n; i++) acc0[i] = acc1[i] = frand();
                kw_attn_axpy_q8_0(acc0, p, kb, n);
                if (avx2) {
                    float s1 = kw_attn_dot_q8_0_avx2(qb, kb, n);
                    kw_attn_axpy_q8_0_avx2(acc1, p, kb, n);
                    if (memcmp(&s0, &s1, sizeof s0) != 0 || memcmp(acc0, acc1, sizeof(float) * (size_t)n) != 0) identical = 0;
                    KW_CHECK_MSG(identical, "n %d kinds %d/%d: AVX2 differs (dot %.9g vs %.9g)", n, kq, kk, s0, s1);
                }
                cases++;
            }
    /* the axpy against double for one row */
    fill(kf, 64, 0);
    kw_quantize_row(KW_TYPE_Q8_0, kf, kb, 64);
    for (int i = 0; i < 64; i++) acc0[i] = 1.0f;
    kw_attn_axpy_q8_0(acc0, 0.5f, kb, 64);
    for (int i = 0; i < 64; i++) {
        uint16_t d;
        memcpy(&d, kb + 34 * (i / 32), 2);
        double want = 1.0 + 0.5 * (double)kw_f16_to_f32(d) * ((const int8_t *)kb)[34 * (i / 32) + 2 + i % 32];
        KW_CHECK_MSG(fabs(acc0[i] - want) <= 1e-6, "axpy element %d: %.9g vs %.9g", i, acc0[i], want);
    }
    printf("%d cases, AVX2 %s, max relative error of the dot vs double %.3g\n", cases,
           avx2 ? (identical ? "identical" : "DIFFERS") : "skipped", worst);
    return kw_test_finish();
}
