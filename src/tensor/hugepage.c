/* hugepage.c - kw_advise_hugepages(): asks the kernel to back a large,
 * not yet touched buffer with transparent huge pages (2 MiB).
 *
 * Decode streams every repacked weight once per token; with 4 KiB pages
 * that is a TLB miss (and a page walk that itself may miss the caches) per
 * 4 KiB read, which measurably lowers the achieved read bandwidth when the
 * machine is busy. Only the 2 MiB-aligned interior of the range can become
 * huge pages; the call is advice (THP "madvise" mode honours it, "never"
 * ignores it) and failures are ignored. Used for the packed weight copies,
 * which are written in full right after allocation, so huge pages add no
 * resident memory beyond the buffer itself. */
#include "tensor/kernels.h"
#include <stdint.h>
#include <sys/mman.h>

void kw_advise_hugepages(void *p, size_t bytes) {
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t a = ((uintptr_t)p + huge - 1) & ~(huge - 1), e = ((uintptr_t)p + bytes) & ~(huge - 1);
    if (p && e > a) (void)madvise((void *)a, (size_t)(e - a), MADV_HUGEPAGE);
#else
    (void)p;
    (void)bytes;
#endif
}
