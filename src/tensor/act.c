/* act.c - the portable activations of the scalar family (attn.h): exp over
 * an array (expf: the per-token softmax's) and the SwiGLU of the FFN. The
 * AVX-512 family has its own (act_avx512.c). */
#include "tensor/attn.h"
#include <math.h>

void kw_exp_scalar(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = expf(x[i]);
}

/* gate = silu(gate) * up */
void kw_swiglu_scalar(float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}
