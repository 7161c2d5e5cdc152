/* act_avx512.c - the AVX-512 family's activations: exp over an array and
 * the SwiGLU of the FFN (gate = silu(gate) * up) in 16 lanes (AVX-512F),
 * in place of act.c's scalar loops. exp is exp_avx512.h's (the F16
 * attention kernels inline the same one, so the family's per-token softmax
 * and theirs are bit-identical); it matches glibc expf to about 1 ulp, so
 * silu differs from the scalar path only in the last bit now and then
 * (llama.cpp's own vector silu uses a different approximation again; the
 * conformance tolerances are far above). */
#include "tensor/attn.h"
#include "exp_avx512.h"
#include <immintrin.h>

void kw_exp_avx512(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(x + i, m, kw_exp16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

void kw_swiglu_avx512(float *gate, const float *up, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
        __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, kw_exp16(_mm512_sub_ps(zero, g))));
        _mm512_mask_storeu_ps(gate + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, up + i)));
    }
}
