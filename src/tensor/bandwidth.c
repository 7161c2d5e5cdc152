/* bandwidth.c - the memory read-bandwidth probe (kw_measure_read_bandwidth).
 *
 * Reads a buffer of KW_BW_BYTES (8x a typical last-level cache) with every
 * pool thread streaming its own contiguous slice, repeatedly for about
 * `seconds`, and returns the best pass in bytes/s: the decode ceiling the
 * planner and `kvwise bench` divide weight bytes by. The buffer comes from
 * the accounted allocator (KW_MEM_SCRATCH) and is freed before returning.
 * It is on transparent huge pages like the repacked weights that
 * decode streams (memory.h kw_mem_alloc_huge): with 4 KiB pages the probe paid TLB misses
 * the weights no longer pay, and so under-stated the ceiling. Passes
 * alternate between plain loads and, where the kernel family has them, the
 * non-temporal loads its decode kernels read packed weights with (kernel
 * set read_nt; the AVX-512 and AVX2 families): on this host (AMD EPYC, whose L3 takes every line L2
 * evicts) they read 68.5 GB/s where plain loads read 56.9 in the host's
 * fast state (alike in the slow one, ~38), and a probe of plain loads
 * alone put decode at 103% of its ceiling. */
#include "kvwise/tensor.h"
#include "kvwise/memory.h"
#include "tensor/kernels.h"
#include <string.h>
#include <time.h>

#define KW_BW_BYTES ((size_t)256 << 20)

typedef unsigned long long kw_v4i __attribute__((vector_size(32)));   /* unsigned: sums wrap, no UB */

typedef struct {
    const char *buf;
    size_t bytes;
    uint64_t (*read_nt)(const void *p, size_t bytes);   /* NULL: plain loads */
    unsigned long long sink[64];
} bw_task;

static double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Sums a slice with four independent vector accumulators so the loads,
 * not the adds, are the bottleneck. */
static void read_task(void *v, int ith, int nth) {
    bw_task *t = v;
    size_t per = t->bytes / (size_t)nth / 128 * 128;
    const kw_v4i *p = (const kw_v4i *)(t->buf + per * (size_t)ith);
    if (t->read_nt) {
        t->sink[ith % 64] = t->read_nt(p, per / 256 * 256);
        return;
    }
    size_t n = per / sizeof(kw_v4i);
    kw_v4i a = {0}, b = {0}, c = {0}, d = {0};
    for (size_t i = 0; i + 4 <= n; i += 4) {
        a += p[i];
        b += p[i + 1];
        c += p[i + 2];
        d += p[i + 3];
    }
    kw_v4i s = a + b + c + d;
    t->sink[ith % 64] = s[0] + s[1] + s[2] + s[3];
}

double kw_measure_read_bandwidth(kw_pool *pool, double seconds) {
    kw_pool *own = NULL;
    if (!pool) pool = own = kw_pool_create(2);
    char *buf = kw_mem_alloc_huge(KW_MEM_SCRATCH, KW_BW_BYTES);
    if (!buf) {
        kw_pool_destroy(own);
        return 0;
    }
    memset(buf, 1, KW_BW_BYTES);                 /* fault every page in */
    bw_task t;
    memset(&t, 0, sizeof t);
    t.buf = buf;
    t.bytes = KW_BW_BYTES;
    kw_pool_run(pool, read_task, &t);            /* warm-up pass */
    double best = 0, start = now_sec();
    int passes = 0;
    uint64_t (*nt)(const void *, size_t) = kw_kernels_active()->read_nt;
    do {
        t.read_nt = passes % 2 ? nt : NULL;   /* alternate, so both see the same host state */
        double t0 = now_sec();
        kw_pool_run(pool, read_task, &t);
        double dt = now_sec() - t0;
        if (dt > 0 && (double)KW_BW_BYTES / dt > best) best = (double)KW_BW_BYTES / dt;
        passes++;
    } while (now_sec() - start < seconds || passes < 3);
    kw_mem_free(buf);
    kw_pool_destroy(own);
    return best;
}
