/* attn_avx2.c - the row operations of the per-token attention path
 * (attn.c) for F32, F16 and Q8_0 rows, q . K-row and acc += p * V-row, in
 * the AVX2 and AVX-512 sets, and the AVX2 set's attention
 * (kw_attn_kernels_avx2). Compiled with -mavx2 -mfma -mf16c. Sums run in 8
 * lanes, then a fixed horizontal order. */
#include "tensor/kernels.h"
#include <immintrin.h>
#include <string.h>

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

/* Q8_0 (34-byte blocks: F16 scale, 32 int8; q quantized the same way): the
 * bits of attn.c's kw_attn_dot_q8_0. Per block the integer dot is exact
 * (|values| <= 127, so a maddubs pair sum <= 32258 fits int16), then
 * t += (d_k * d_q) * isum in block order. */
float kw_attn_dot_q8_0_avx2(const uint8_t *q, const uint8_t *k, int n) {
    const __m256i ones = _mm256_set1_epi16(1);
    float t = 0.0f;
    for (int b = 0; b < n / 32; b++, k += 34, q += 34) {
        __m256i kv = _mm256_loadu_si256((const __m256i *)(k + 2)), qv = _mm256_loadu_si256((const __m256i *)(q + 2));
        __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(qv, qv), _mm256_sign_epi8(kv, qv));
        __m256i p32 = _mm256_madd_epi16(p16, ones);
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(p32), _mm256_extracti128_si256(p32, 1));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
        uint16_t dk, dq;
        memcpy(&dk, k, 2);
        memcpy(&dq, q, 2);
        t += (_cvtsh_ss(dk) * _cvtsh_ss(dq)) * (float)_mm_cvtsi128_si32(s);
    }
    return t;
}

/* acc += p * V-row, Q8_0: pd = p * d per block, then multiply and add per
 * element (no FMA), the bits of attn.c's kw_attn_axpy_q8_0. */
void kw_attn_axpy_q8_0_avx2(float *acc, float p, const uint8_t *v, int n) {
    for (int b = 0; b < n / 32; b++, v += 34) {
        uint16_t d16;
        memcpy(&d16, v, 2);
        __m256 pd = _mm256_set1_ps(p * _cvtsh_ss(d16));
        for (int i = 0; i < 32; i += 8) {
            __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(v + 2 + i))));
            float *a = acc + b * 32 + i;
            _mm256_storeu_ps(a, _mm256_add_ps(_mm256_loadu_ps(a), _mm256_mul_ps(pd, x)));
        }
    }
}

/* The AVX2 set's attention: these rows with expf, the integer kernel of
 * attn_i16_avx2.c; no float decode or tile kernel (the portable paths). */
const kw_attn_kernels kw_attn_kernels_avx2 = {
    .ops = {KW_ATTN_ROWS_AVX2, kw_exp_scalar},
    .decode_supported = kw_attn_no_kernel, .decode = kw_attn_decode_scalar,
    .tile_supported = kw_attn_no_kernel, .tile = kw_attn_tile_scalar,
    .integer_supported = kw_attn_i16_supported, .integer = kw_attn_i16_avx2, .kv_type_auto = KW_TYPE_KV_I16};
