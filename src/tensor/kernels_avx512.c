/* kernels_avx512.c - the AVX-512 (F/BW/VL/DQ + VNNI, BF16 where present)
 * kernel family; only called when kw_cpu_info_get() reports them. */
#include "tensor/kernels.h"

void kw_kernels_avx512_init(kw_kernel_set *k) { (void)k; }
