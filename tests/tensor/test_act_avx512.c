/* test_act_avx512.c - the AVX-512 SwiGLU (act_avx512.c) against the scalar
 * family's formula (act.c: g / (1 + expf(-g)) * u, glibc expf),
 * over a dense sweep of gate values (-110..110, where exp under/overflows),
 * odd lengths (masked tail) and special values. Skips (77) without AVX-512F. */
#include "testutil.h"
#include "tensor/attn.h"
#include <float.h>
#include <string.h>

/* The vector exp is accurate to about 1 ulp and the division and product
 * add one rounding each: 4 ulps of the result (relative 4 * FLT_EPSILON)
 * bounds the difference; values below FLT_MIN compare absolutely. */
static const float TOL_ULPS = 4.0f;

int main(void) {
    const kw_cpu_info *ci = kw_cpu_info_get();
    if (!ci || !ci->avx512f) { printf("SKIPPED: no AVX-512F\n"); return 77; }
    enum { N = 200003 };
    float *g = malloc(sizeof(float) * N), *u = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) {
        g[i] = -110.0f + 220.0f * (float)i / (float)(N - 1);
        u[i] = 0.5f + (float)(i % 7) * 0.25f;
    }
    g[0] = 0.0f; g[1] = -0.0f; g[2] = 1e-30f; g[3] = -1e30f; g[4] = 1e30f; g[5] = 88.7f; g[6] = -88.7f;
    memcpy(y, g, sizeof(float) * N);
    kw_swiglu_avx512(y, u, N);
    int bad = 0;
    double worst = 0;
    for (int i = 0; i < N; i++) {
        float ref = g[i] / (1.0f + expf(-g[i])) * u[i];
        double d = fabs((double)y[i] - (double)ref), tol = TOL_ULPS * FLT_EPSILON * fabs((double)ref);
        if (tol < FLT_MIN) tol = FLT_MIN;
        if (!(d <= tol)) bad++;
        if (d / tol > worst) worst = d / tol;
    }
    KW_CHECK_MSG(bad == 0, "%d of %d values beyond %g ulps (worst %.2f of the bound)", bad, N, (double)TOL_ULPS, worst);
    /* the tail: lengths 1..17 write exactly n values */
    for (int n = 1; n <= 17; n++) {
        float a[32], b[32];
        for (int i = 0; i < 32; i++) { a[i] = 7.0f; b[i] = 1.0f; }
        kw_swiglu_avx512(a, b, n);
        int ok = 1;
        for (int i = n; i < 32; i++) ok &= a[i] == 7.0f;
        KW_CHECK_MSG(ok, "n = %d wrote past the end", n);
    }
    printf("swiglu avx512 vs scalar: worst %.3f of the %g-ulp bound over %d values\n", worst, (double)TOL_ULPS, N);
    free(g); free(u); free(y);
    return kw_test_finish();
}
