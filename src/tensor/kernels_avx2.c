/* kernels_avx2.c - the AVX2+FMA kernel family (compiled with -mavx2 -mfma
 * -mf16c; only called when kw_cpu_info_get() reports them). */
#include "tensor/kernels.h"

void kw_kernels_avx2_init(kw_kernel_set *k) { (void)k; }
