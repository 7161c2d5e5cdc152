/* exp_avx512.h - exp of 16 floats (AVX-512F), inline for every kernel that
 * needs it: the SwiGLU and the softmax of act_avx512.c and the prefill tiles
 * of attn_avx512.c, so all compute the same bits (the i16 attention has its
 * own exp2, attn_i16.c). Include only from files compiled with AVX-512 flags.
 *
 * x = n ln2 + r with n = round(x log2 e) and |r| <= ln2/2 (ln2 split in two
 * parts, FMA), exp(r) by its Taylor series to degree 7 (truncation < 6e-9
 * relative, below float rounding), scaled by 2^n with vscalefps (overflow to
 * inf, underflow to 0 as expf). The result matches glibc expf to about 1 ulp.
 * Inline rather than called: a call inside a kernel's loop makes the
 * compiler spill every live vector register around it (all are
 * caller-saved). */
#ifndef KW_TENSOR_EXP_AVX512_H
#define KW_TENSOR_EXP_AVX512_H
#include <immintrin.h>

static inline __attribute__((always_inline)) __m512 kw_exp16(__m512 x) {
    const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
    const __m512 ln2_hi = _mm512_set1_ps(0.693145751953125f), ln2_lo = _mm512_set1_ps(1.42860682030941723e-6f);
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(100.0f)), _mm512_set1_ps(-110.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, ln2_hi, x);
    r = _mm512_fnmadd_ps(n, ln2_lo, r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

#endif
