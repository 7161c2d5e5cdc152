/* test_exp_i16.c - the exp2 and the sum of i16 attention (attn_i16.c's
 * definition): kw_attn_exp2 (portable C), kw_attn_exp2_avx2 (8 lanes, AVX2
 * + FMA) and kw_attn_exp2_avx512 (16 lanes, vscalefps) must give the same
 * bits; the lane sums with their span flushes must add what they promise.
 *
 *  1. bit for bit (memcmp) of the three over: every step of 1e-3 in
 *     [-140, 140] (both clamp limits, overflow, subnormal results), 2^20
 *     random floats in that range, the neighbourhood (+-64 floats) of the
 *     clamp limits, of the overflow threshold, of the end of the normal
 *     range (-126) and of each n + 0.5 (ties of the rounding to n), 0, -0,
 *     +-inf, NaN (clamped to 128: +inf), +-FLT_MAX, +-FLT_MIN, subnormal
 *     inputs, and lengths 1..17 (the vector tails). Skips (prints so)
 *     without AVX-512F, resp. without AVX2 + FMA.
 *  2. accuracy on every CPU: kw_attn_exp2 against libm exp2 in double
 *     within EXP_ULPS ulps of the float result where that is a normal float.
 *  3. the special values on every CPU with fixed expectations: 2^0 = 1,
 *     2^-inf = 0 (clamped to 2^-127, subnormal: not 0 but below FLT_MIN),
 *     2^inf = 2^NaN = +inf, 2^-126.5 subnormal and correctly rounded.
 *  4. the sum: kw_attn_i16_sum_add / _end over 1..1100 keys equal the
 *     definition written out here (lanes, flush after every 256th key),
 *     and are within 1e-6 relative of the double sum. */
#include "testutil.h"
#include "tensor/attn.h"
#include "tensor/kernels.h"
#include <float.h>
#include <string.h>

/* The bound for 2: f = x - n is exact, the degree-6 Taylor polynomial is
 * within 1.7e-7 relative of 2^f on |f| <= 1/2 (2.7 float ulps at most),
 * the Horner steps round about 1 ulp between them and the scaling by 2^n
 * is exact for normal results. 4 ulps leaves room for those adding up; a
 * wrong constant beyond the last few bits or a wrong 2^n is far beyond it
 * (part 1 compares bits for the small ones). */
static const double EXP_ULPS = 4.0;

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
    for (int i = 0; i <= 280000 && n < cap; i++) x[n++] = -140.0f + (float)i * 1e-3f;
    for (int i = 0; i < (1 << 20) && n < cap; i++) x[n++] = -140.0f + 280.0f * (float)rnd() / 16777216.0f;
    /* the clamp limits, the overflow threshold (128 - tiny), the end of the normal range */
    const float centres[] = {128.0f, -127.0f, -126.0f, 127.5f, -126.5f, 0.0f, 0.5f, -0.5f};
    for (size_t c = 0; c < sizeof centres / sizeof centres[0]; c++)
        for (int k = -64; k <= 64 && n < cap; k++) x[n++] = float_step(centres[c], k);
    /* ties of the rounding of n: h + 0.5 and its neighbours */
    for (int h = -128; h <= 128; h++)
        for (int k = -2; k <= 2 && n < cap; k++) x[n++] = float_step((float)h + 0.5f, k);
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
            fprintf(stderr, "%s: exp2(%.9g [%08x]) = %.9g [%08x], the portable gives %.9g [%08x]\n", what, (double)in[i],
                    float_bits(in[i]), (double)got[i], float_bits(got[i]), (double)want[i], float_bits(want[i]));
        bad++;
    }
    return bad;
}

static void test_bits(const float *in, int n, const kw_cpu_info *ci) {
    size_t bytes = sizeof(float) * (size_t)n;
    float *want = malloc(bytes), *got = malloc(bytes);
    for (int i = 0; i < n; i++) want[i] = kw_attn_exp2(in[i]);
    memcpy(got, in, bytes);
    kw_attn_i16_exp(got, n);
    KW_CHECK_MSG(memcmp(got, want, bytes) == 0, "kw_attn_i16_exp differs from kw_attn_exp2");

    struct { const char *name; void (*fn)(float *, int32_t); bool ok; } vec[] = {
        {"kw_attn_exp2_avx512", kw_attn_exp2_avx512, ci && ci->avx512f},
        {"kw_attn_exp2_avx2", kw_attn_exp2_avx2, ci && ci->avx2 && ci->fma},
    };
    for (size_t v = 0; v < sizeof vec / sizeof vec[0]; v++) {
        if (!vec[v].ok) { printf("SKIPPED part 1 (%s): the CPU lacks its ISA\n", vec[v].name); continue; }
        memcpy(got, in, bytes);
        vec[v].fn(got, n);
        int bad = count_mismatch(vec[v].name, in, got, want, n);
        KW_CHECK_MSG(bad == 0, "%s: %d of %d values differ from the portable exp2", vec[v].name, bad, n);
        /* lengths 1..17 at an odd offset: exactly len values written, the
         * masked tail equal to the full-vector result */
        for (int len = 1; len <= 17; len++) {
            float buf[32];
            for (int i = 0; i < 32; i++) buf[i] = -7.0f;
            memcpy(buf + 3, in + 1000 + len, sizeof(float) * (size_t)len);
            vec[v].fn(buf + 3, len);
            KW_CHECK(memcmp(buf + 3, want + 1000 + len, sizeof(float) * (size_t)len) == 0);
            KW_CHECK(buf[2] == -7.0f && buf[3 + len] == -7.0f);
        }
    }
    free(want);
    free(got);
}

static void test_accuracy(void) {
    double worst = 0.0, worst_x = 0.0;
    int bad = 0, count = 0;
    for (int i = 0; i <= 4000000; i++) {
        float x = -125.9f + 253.8f * (float)i / 4000000.0f;   /* results normal and finite */
        double ref = exp2((double)x);
        if (ref < (double)FLT_MIN || ref > (double)FLT_MAX) continue;
        float y = kw_attn_exp2(x);
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
    KW_CHECK_MSG(bad == 0, "%d values beyond %.1f ulps of exp2 (worst %.3f at %.9g)", bad, EXP_ULPS, worst, worst_x);
}

static void test_special(void) {
    KW_CHECK(kw_attn_exp2(0.0f) == 1.0f);
    KW_CHECK(kw_attn_exp2(-0.0f) == 1.0f);
    KW_CHECK(kw_attn_exp2(1.0f) == 2.0f && kw_attn_exp2(-3.0f) == 0.125f);   /* f = 0: p = 1 exactly */
    float lo = kw_attn_exp2(-INFINITY);   /* clamped to -127: 2^-127, a subnormal */
    KW_CHECK(lo == ldexpf(1.0f, -127) && lo > 0.0f && lo < FLT_MIN);
    KW_CHECK(kw_attn_exp2(-200.0f) == lo);
    KW_CHECK(isinf(kw_attn_exp2(INFINITY)) && kw_attn_exp2(INFINITY) > 0.0f);
    KW_CHECK(isinf(kw_attn_exp2(NAN)) && kw_attn_exp2(NAN) > 0.0f);   /* vminps(NaN, 128) = 128 */
    KW_CHECK(isinf(kw_attn_exp2(128.0f)));
    float s = kw_attn_exp2(-126.5f);   /* subnormal */
    KW_CHECK(s > 0.0f && s < FLT_MIN);
    KW_CHECK_NEAR(s, exp2(-126.5), 0.5 * 1.401298464e-45);   /* half the smallest subnormal: correctly rounded */
    KW_CHECK_NEAR(kw_attn_exp2(0.5f), 1.4142135623730951, 2.0 * FLT_EPSILON);
}

/* The definition's sum written out: lane j % 16 in float, flushed into
 * double parts after every 256th key and at the end, parts in order. */
static float sum_def(const float *e, int n) {
    float lane[16] = {0};
    double part[16] = {0}, sum = 0.0;
    for (int j = 0; j < n; j++) {
        lane[j % 16] = lane[j % 16] + e[j];
        if ((j + 1) % 256 == 0)
            for (int l = 0; l < 16; l++) { part[l] = part[l] + (double)lane[l]; lane[l] = 0.0f; }
    }
    for (int l = 0; l < 16; l++) part[l] = part[l] + (double)lane[l];
    for (int l = 0; l < 16; l++) sum = sum + part[l];
    return (float)(1.0 / sum);
}

static void test_sum(void) {
    float e[1100];
    for (int j = 0; j < 1100; j++) e[j] = (float)(rnd() % 100000) / 100000.0f + (j % 7 == 0 ? 1e-6f : 0.0f);
    for (int n = 1; n <= 1100; n += (n < 40 ? 1 : 37)) {
        float lane[16] = {0};
        double part[16] = {0};
        /* in two pieces, as the AVX2 kernel hands over its tail */
        int cut = n / 3 / 16 * 16;
        kw_attn_i16_sum_add(lane, part, e, 0, cut);
        kw_attn_i16_sum_add(lane, part, e + cut, cut, n);
        float inv = kw_attn_i16_sum_end(lane, part);
        KW_CHECK_MSG(inv == sum_def(e, n), "n %d: %.9g vs %.9g", n, (double)inv, (double)sum_def(e, n));
        double exact = 0.0;
        for (int j = 0; j < n; j++) exact += (double)e[j];
        KW_CHECK_NEAR((double)inv * exact, 1.0, 1e-6);
    }
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
    test_sum();
    free(in);
    return kw_test_finish();
}
