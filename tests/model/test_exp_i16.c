/* test_exp_i16.c - the exp of i16 attention (attn_i16.c's definition):
 * kw_exp_i16 (portable C) and kw_exp_i16_avx2 (8 lanes, AVX2 + FMA) must
 * both give exactly the bits of exp16 in act_avx512.c (kw_exp_avx512).
 *
 *  1. bit for bit (memcmp) against kw_exp_avx512 over: every step of 1e-3
 *     in [-120, 110] (both clamp limits, over- and underflow), 2^20 random
 *     floats in that range, the neighbourhood (+-64 floats) of the clamp
 *     limits and of the exact overflow / underflow thresholds, a dense
 *     sweep of the arguments whose result is subnormal (-87.4 .. -104),
 *     the x where x * log2e is a tie (h + 0.5) for the rounding to n,
 *     0, -0, +-inf, NaN (exp16 clamps NaN to 100: +inf), +-FLT_MAX,
 *     +-FLT_MIN, subnormal inputs, and lengths 1..17 (the AVX2 tail).
 *     Skips (prints so) without AVX-512F, resp. without AVX2 + FMA.
 *  2. accuracy on every CPU: kw_exp_i16 against libm exp in double within
 *     EXP_ULPS ulps of the float result where that is a normal float.
 *  3. the special values on every CPU with fixed expectations: exp(0) = 1,
 *     exp(-inf) = 0, exp(+inf) = exp(NaN) = +inf, exp(-100) subnormal. */
#include "testutil.h"
#include "model/model_internal.h"
#include "tensor/kernels.h"
#include <float.h>
#include <string.h>

/* The bound for 2: range reduction with ln2 in two parts leaves r within
 * about 1 ulp of x - n ln2, the Taylor polynomial to degree 7 is within
 * 6e-9 relative of exp(r) on |r| <= ln2/2 (act_avx512.c), and the Horner
 * steps round about 1 ulp between them; act_avx512.c states ~1 ulp against
 * glibc expf. 2 ulps leaves room for those roundings adding up, and a
 * wrong constant (a polynomial term off by one float step is below that,
 * which is why part 1 compares bits) or a wrong 2^n is far beyond it. */
static const double EXP_ULPS = 2.0;

static uint32_t g_seed = 12345u;
static uint32_t rnd(void) { g_seed = g_seed * 1664525u + 1013904223u; return g_seed >> 8; }

static float bits_float(uint32_t b) { float f; memcpy(&f, &b, sizeof f); return f; }
static uint32_t float_bits(float f) { uint32_t b; memcpy(&b, &f, sizeof b); return b; }

/* The float k steps from x (x finite, no crossing of 0 needed here). */
static float float_step(float x, int k) {
    while (k > 0) { x = nextafterf(x, INFINITY); k--; }
    while (k < 0) { x = nextafterf(x, -INFINITY); k++; }
    return x;
}

/* Every input of part 1; returns the count written to x (capacity cap). */
static int make_inputs(float *x, int cap) {
    int n = 0;
    for (int i = 0; i <= 230000 && n < cap; i++) x[n++] = -120.0f + (float)i * 1e-3f;
    for (int i = 0; i < (1 << 20) && n < cap; i++) x[n++] = -120.0f + 230.0f * (float)rnd() / 16777216.0f;
    /* the clamp limits, the overflow threshold (~88.72), the end of the
     * normal range (~-87.34) and of the subnormals (~-103.97) */
    const float centres[] = {100.0f, -110.0f, 88.72283935546875f, -87.33654022216797f, -103.97207641601562f,
                             -103.2789306640625f, 0.0f};
    for (size_t c = 0; c < sizeof centres / sizeof centres[0]; c++)
        for (int k = -64; k <= 64 && n < cap; k++) x[n++] = float_step(centres[c], k);
    for (int i = 0; i <= 200000 && n < cap; i++) x[n++] = -87.4f - 16.6f * (float)i / 200000.0f;   /* subnormal results */
    /* ties of the rounding of n: x with x * log2e (as float) exactly h + 0.5,
     * where nearest-even and other roundings pick different n */
    for (int h = -160; h <= 145; h++) {
        float y = float_step(((float)h + 0.5f) / 1.44269504088896341f, -300);
        for (int k = -300; k <= 300 && n < cap; k++, y = nextafterf(y, INFINITY))
            if (y * 1.44269504088896341f == (float)h + 0.5f) x[n++] = y;
    }
    const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, FLT_MAX, -FLT_MAX, FLT_MIN, -FLT_MIN,
                             1e-40f, -1e-40f, 1e-30f, -1e-30f, 0.5f, -0.5f, 0.34657359f, -0.34657359f};
    for (size_t i = 0; i < sizeof special / sizeof special[0] && n < cap; i++) x[n++] = special[i];
    /* NaNs with other payloads */
    x[n++] = bits_float(0x7fc12345u);
    x[n++] = bits_float(0xffa00001u);
    return n;
}

/* Counts the values where got and want differ in bits; prints the first few. */
static int count_mismatch(const char *what, const float *in, const float *got, const float *want, int n) {
    int bad = 0;
    for (int i = 0; i < n; i++) {
        if (float_bits(got[i]) == float_bits(want[i])) continue;
        if (bad < 5)
            fprintf(stderr, "%s: exp(%.9g [%08x]) = %.9g [%08x], exp16 gives %.9g [%08x]\n", what, (double)in[i],
                    float_bits(in[i]), (double)got[i], float_bits(got[i]), (double)want[i], float_bits(want[i]));
        bad++;
    }
    return bad;
}

static void test_bits(const float *in, int n, const kw_cpu_info *ci) {
    if (!ci || !ci->avx512f) { printf("SKIPPED part 1: no AVX-512F (exp16 cannot run)\n"); return; }
    size_t bytes = sizeof(float) * (size_t)n;
    float *want = malloc(bytes), *got = malloc(bytes);
    memcpy(want, in, bytes);
    kw_exp_avx512(want, n);

    for (int i = 0; i < n; i++) got[i] = kw_exp_i16(in[i]);
    int bad = count_mismatch("kw_exp_i16", in, got, want, n);
    KW_CHECK_MSG(bad == 0, "scalar: %d of %d values differ from exp16", bad, n);
    KW_CHECK(memcmp(got, want, bytes) == 0);

    memcpy(got, in, bytes);
    kw_attn_i16_exp(got, n);
    KW_CHECK_MSG(memcmp(got, want, bytes) == 0, "kw_attn_i16_exp differs from exp16");

    if (ci->avx2 && ci->fma) {
        memcpy(got, in, bytes);
        kw_exp_i16_avx2(got, n);
        bad = count_mismatch("kw_exp_i16_avx2", in, got, want, n);
        KW_CHECK_MSG(bad == 0, "avx2: %d of %d values differ from exp16", bad, n);
        KW_CHECK(memcmp(got, want, bytes) == 0);
        /* lengths 1..17 at an odd offset: exactly len values written, the
         * masked tail equal to the full-vector result */
        for (int len = 1; len <= 17; len++) {
            float buf[32];
            for (int i = 0; i < 32; i++) buf[i] = -7.0f;
            memcpy(buf + 3, in + 1000 + len, sizeof(float) * (size_t)len);
            kw_exp_i16_avx2(buf + 3, len);
            KW_CHECK(memcmp(buf + 3, want + 1000 + len, sizeof(float) * (size_t)len) == 0);
            KW_CHECK(buf[2] == -7.0f && buf[3 + len] == -7.0f);
        }
    } else {
        printf("SKIPPED part 1 (AVX2): no AVX2 + FMA\n");
    }
    free(want);
    free(got);
}

static void test_accuracy(void) {
    double worst = 0.0, worst_x = 0.0;
    int bad = 0, count = 0;
    for (int i = 0; i <= 4000000; i++) {
        float x = -87.3f + 175.9f * (float)i / 4000000.0f;   /* results normal and finite */
        double ref = exp((double)x);
        if (ref < (double)FLT_MIN || ref > (double)FLT_MAX) continue;
        float y = kw_exp_i16(x);
        int e;
        frexp(ref, &e);
        double ulp = ldexp(1.0, e - 24);   /* one float ulp at ref's binade */
        double d = fabs((double)y - ref) / ulp;
        count++;
        if (d > worst) { worst = d; worst_x = x; }
        if (!(d <= EXP_ULPS)) bad++;
    }
    printf("accuracy: %d values, worst %.3f ulps (at x = %.9g), bound %.1f\n", count, worst, worst_x, EXP_ULPS);
    KW_CHECK(count > 3000000);
    KW_CHECK_MSG(bad == 0, "%d values beyond %.1f ulps of exp (worst %.3f at %.9g)", bad, EXP_ULPS, worst, worst_x);
}

static void test_special(void) {
    KW_CHECK(kw_exp_i16(0.0f) == 1.0f);
    KW_CHECK(kw_exp_i16(-0.0f) == 1.0f);
    KW_CHECK(kw_exp_i16(-INFINITY) == 0.0f && !signbit(kw_exp_i16(-INFINITY)));
    KW_CHECK(kw_exp_i16(-200.0f) == 0.0f);
    KW_CHECK(isinf(kw_exp_i16(INFINITY)) && kw_exp_i16(INFINITY) > 0.0f);
    KW_CHECK(isinf(kw_exp_i16(NAN)) && kw_exp_i16(NAN) > 0.0f);   /* vminps(NaN, 100) = 100 */
    KW_CHECK(isinf(kw_exp_i16(89.0f)));
    float s = kw_exp_i16(-100.0f);   /* 3.72e-44: subnormal */
    KW_CHECK(s > 0.0f && s < FLT_MIN);
    KW_CHECK_NEAR(s, exp(-100.0), 0.5 * 1.401298464e-45);   /* half the smallest subnormal: correctly rounded */
    float e1 = kw_exp_i16(1.0f);
    KW_CHECK_NEAR(e1, 2.718281828459045, 2.0 * FLT_EPSILON);
}

int main(void) {
    const kw_cpu_info *ci = kw_cpu_info_get();
    enum { CAP = 1700000 };
    float *in = malloc(sizeof(float) * CAP);
    int n = make_inputs(in, CAP);
    KW_CHECK(n < CAP);
    test_bits(in, n, ci);
    test_accuracy();
    test_special();
    free(in);
    return kw_test_finish();
}
