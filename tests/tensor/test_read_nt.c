/* test_read_nt.c - a kernel family's non-temporal read (kernel set
 * read_nt, timed by the bandwidth probe) visits every byte it is given and
 * nothing beyond: its sum of 64-bit words equals a plain sum over several
 * lengths, with words past the end set to values that would show. Also
 * the probe, with each family forced, returns a positive bandwidth. */
#include "testutil.h"
#include <stdlib.h>
#include <string.h>
#include "kvwise/tensor.h"
#include "tensor/kernels.h"

#define WORDS 1024   /* 8 KiB */

int main(void) {
    const char *families[] = {"scalar", "avx2", "avx512"};
    uint64_t *buf = aligned_alloc(64, WORDS * sizeof(uint64_t));
    KW_CHECK(buf != NULL);
    if (!buf) return kw_test_finish();
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < WORDS; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        buf[i] = x;
    }
    for (size_t f = 0; f < 3; f++) {
        if (kw_kernel_force(families[f]) != 0) continue;
        uint64_t (*nt)(const void *, size_t) = kw_kernels_active()->read_nt;
        if (nt) {
            const size_t lens[] = {256, 512, 768, 4096, 8192 - 256};
            for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
                uint64_t want = 0;
                for (size_t i = 0; i < lens[k] / 8; i++) want += buf[i];
                KW_CHECK_MSG(nt(buf, lens[k]) == want, "%s read_nt of %zu bytes", families[f], lens[k]);
                if (lens[k] + 256 <= WORDS * 8) {   /* from another aligned start */
                    uint64_t want2 = 0;
                    for (size_t i = 32; i < 32 + lens[k] / 8; i++) want2 += buf[i];
                    KW_CHECK_MSG(nt(buf + 32, lens[k]) == want2, "%s read_nt of %zu bytes at 256", families[f], lens[k]);
                }
            }
        }
        /* the AVX-512 and AVX2 decode kernels read packed weights non-temporally: the probe must time that too */
        if (strcmp(families[f], "scalar")) KW_CHECK_MSG(nt != NULL, "%s has no read_nt", families[f]);
        double bw = kw_measure_read_bandwidth(NULL, 0.02);
        KW_CHECK_MSG(bw > 1e8, "%s probe: %.0f bytes/s", families[f], bw);
    }
    free(buf);
    return kw_test_finish();
}
