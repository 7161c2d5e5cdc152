/* attn_avx2.c - AVX2/FMA/F16C inner loops of the attention (forward.c):
 * q . K-row and acc += p * V-row for F32 and F16 rows. Compiled with
 * -mavx2 -mfma -mf16c; forward.c calls these only when kw_cpu_info_get()
 * reports all three. Sums run in 8 lanes, then a fixed horizontal order. */
#include "model_internal.h"
#include <immintrin.h>

static float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

float kw_attn_dot_f32_avx2(const float *q, const float *k, int n) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), acc);
    float s = hsum8(acc);
    for (; i < n; i++) s += q[i] * k[i];
    return s;
}

float kw_attn_dot_f16_avx2(const float *q, const uint16_t *k, int n) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 kv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + i)));
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), kv, acc);
    }
    float s = hsum8(acc);
    for (; i < n; i++) s += q[i] * _cvtsh_ss(k[i]);
    return s;
}

void kw_attn_axpy_f32_avx2(float *acc, float p, const float *v, int n) {
    __m256 pv = _mm256_set1_ps(p);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + i), _mm256_loadu_ps(acc + i)));
    for (; i < n; i++) acc[i] += p * v[i];
}

void kw_attn_axpy_f16_avx2(float *acc, float p, const uint16_t *v, int n) {
    __m256 pv = _mm256_set1_ps(p);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 vv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + i)));
        _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(pv, vv, _mm256_loadu_ps(acc + i)));
    }
    for (; i < n; i++) acc[i] += p * _cvtsh_ss(v[i]);
}

/* Round n floats to F16 and back, in place. */
void kw_attn_round_f16_avx2(float *x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; i++) x[i] = _cvtsh_ss(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT));
}
