/* i16_ref.h - gemm_avx512.c's packed F16 contract written out for the tests
 * (test_gemm_avx512, test_tensor_matmul): the int16 form of one block of
 * 128 values. Weights: d = max|v| / 8191. Activations: d = the larger of
 * max|v| / 32767 and sum|v| / (2147483647 / 8191 - 128), so a block's
 * integer dot fits int32 and is exact; the sum is taken in the kernel's 16
 * lane sums and fold order. All in float; q = round-half-even(v / d) with
 * |q| capped at the range. Static: each test compiles its own copy. */
#ifndef KW_TESTS_I16_REF_H
#define KW_TESTS_I16_REF_H
#include <math.h>
#include <stdint.h>

#define I16_QK 128

static inline void i16_ref_block(const float *v, int32_t *q, float *d, int act) {
    float amax = 0, sum = 0, ls[16] = {0};
    for (int j = 0; j < I16_QK; j++) amax = fmaxf(amax, fabsf(v[j]));
    for (int j = 0; j < I16_QK; j++) ls[j % 16] += fabsf(v[j]);   /* the kernel's lane sums and fold order */
    for (int w = 8; w >= 1; w /= 2)
        for (int i = 0; i < w; i++) ls[i] += ls[i + w];
    sum = ls[0];
    float s = act ? fmaxf(amax / 32767.0f, sum / (float)(2147483647 / 8191 - I16_QK)) : amax / 8191.0f;
    float id = act ? (s > 0 ? 1.0f / s : 0.0f) : (amax > 0 ? 8191.0f / amax : 0.0f);
    float lim = act ? 32767.0f : 8191.0f;
    *d = s;
    for (int j = 0; j < I16_QK; j++) q[j] = (int32_t)fminf(fmaxf(nearbyintf(v[j] * id), -lim), lim);
}

#endif
