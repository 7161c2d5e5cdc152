/* test_read_nt.c - a kernel family's non-temporal read (kernel set
 * read_nt, timed by the bandwidth probe) visits every byte it is given and
 * nothing beyond: its sum of 64-bit words equals a plain sum over several
 * lengths, with words past the end set to values that would show. Also
 * the probe, with each family forced, returns a positive bandwidth; the
 * span probe's slices (kw_span_slice) are aligned, disjoint and cover a
 * span's aligned interior exactly for any start, length and thread count,
 * and the span probe measures what it is given and nothing when given
 * nothing. */
#include "testutil.h"
#include <math.h>
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

    /* kw_span_slice: over starts 0..255 bytes off a 64-byte boundary, lengths around unit edges, 1..5 threads */
    static char mem[64 * 1024] __attribute__((aligned(64)));
    const size_t span_lens[] = {0, 100, 255, 256, 319, 320, 511, 5000, 64 * 1024 - 256};
    int bad = 0;
    for (size_t off = 0; off < 256; off += 7)
        for (size_t k = 0; k < sizeof span_lens / sizeof span_lens[0]; k++)
            for (int nth = 1; nth <= 5; nth++) {
                kw_mem_span sp = {mem + off, span_lens[k]};
                uintptr_t a0 = ((uintptr_t)sp.p + 63) & ~(uintptr_t)63, end = (uintptr_t)sp.p + sp.bytes;
                size_t want = end >= a0 + 256 ? (size_t)(end - a0) / 256 * 256 : 0, got = 0;
                uintptr_t next = a0;
                for (int t = 0; t < nth; t++) {
                    const char *p = NULL;
                    size_t n = kw_span_slice(sp, t, nth, &p);
                    if (n == 0) continue;
                    /* in thread order, contiguous, aligned, whole units, inside the span */
                    if ((uintptr_t)p != next || (uintptr_t)p % 64 || n % 256 || (uintptr_t)p + n > end) bad++;
                    next = (uintptr_t)p + n;
                    got += n;
                }
                if (got != want) bad++;
            }
    KW_CHECK_MSG(bad == 0, "%d bad span slices", bad);
    const char *q = NULL;
    KW_CHECK(kw_span_slice((kw_mem_span){mem, sizeof mem}, 2, 2, &q) == 0);   /* no thread 2 of 2 */
    KW_CHECK(kw_span_slice((kw_mem_span){NULL, 4096}, 0, 1, &q) == 0);

    /* the span probe: a real span reads at some positive rate, nothing readable gives 0 */
    kw_pool *pool = kw_pool_create(2);
    KW_CHECK(pool != NULL);
    if (pool) {
        kw_mem_span one = {mem, sizeof mem}, tiny[2] = {{mem, 100}, {mem + 1, 200}};
        /* any positive, finite rate: how fast is a benchmark's question (on a loaded
         * host the pool's threads may wait out the whole 10 ms window) */
        double rate = kw_measure_spans_bandwidth(pool, &one, 1, 0.01);
        KW_CHECK_MSG(rate > 0 && isfinite(rate), "span probe rate %g", rate);
        KW_CHECK(kw_measure_spans_bandwidth(pool, tiny, 2, 0.01) == 0);
        KW_CHECK(kw_measure_spans_bandwidth(pool, &one, 0, 0.01) == 0);
        KW_CHECK(kw_measure_spans_bandwidth(NULL, &one, 1, 0.01) == 0);
        kw_pool_destroy(pool);
    }
    return kw_test_finish();
}
