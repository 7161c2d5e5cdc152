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
 * alone put decode at 103% of its ceiling.
 *
 * kw_measure_spans_bandwidth reads given memory instead (the model's own
 * weights, kvwise bench): every span split into one contiguous slice per
 * thread, as decode's streaming split reads a matrix, spans in order, the
 * same alternation and best pass. On the session-15 host a fresh 256 MiB
 * buffer read ~10% faster than a model-sized region at the same moment
 * (median passes 77-78 against 67-73 GB/s) and where a model copy landed
 * moved decode by up to 26%, so the pages decode streams are the only
 * honest measure of what it could reach. */
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

/* Sums the whole 128-byte units of bytes at p (32-byte aligned) with four
 * independent vector accumulators, so the loads, not the adds, are the
 * bottleneck. */
static uint64_t plain_sum(const void *p, size_t bytes) {
    const kw_v4i *q = p;
    size_t n = bytes / sizeof(kw_v4i);
    kw_v4i a = {0}, b = {0}, c = {0}, d = {0};
    for (size_t i = 0; i + 4 <= n; i += 4) {
        a += q[i];
        b += q[i + 1];
        c += q[i + 2];
        d += q[i + 3];
    }
    kw_v4i s = a + b + c + d;
    return s[0] + s[1] + s[2] + s[3];
}

static void read_task(void *v, int ith, int nth) {
    bw_task *t = v;
    size_t per = t->bytes / (size_t)nth / 128 * 128;
    const char *p = t->buf + per * (size_t)ith;
    t->sink[ith % 64] = t->read_nt ? t->read_nt(p, per / 256 * 256) : plain_sum(p, per);
}

/* Runs task (whose read_nt field is *nt_slot) for about `seconds`, passes
 * alternating between plain loads and the kernel family's non-temporal
 * read, so both see the same host state; returns the best pass's
 * bytes / s for `bytes` read per pass. */
static double best_pass(kw_pool *pool, kw_task_fn task, void *arg, uint64_t (**nt_slot)(const void *, size_t),
                        double bytes, double seconds) {
    uint64_t (*nt)(const void *, size_t) = kw_kernels_active()->read_nt;
    double best = 0, start = now_sec();
    int passes = 0;
    do {
        *nt_slot = passes % 2 ? nt : NULL;
        double t0 = now_sec();
        kw_pool_run(pool, task, arg);
        double dt = now_sec() - t0;
        if (dt > 0 && bytes / dt > best) best = bytes / dt;
        passes++;
    } while (now_sec() - start < seconds || passes < 3);
    return best;
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
    double best = best_pass(pool, read_task, &t, &t.read_nt, (double)KW_BW_BYTES, seconds);
    kw_mem_free(buf);
    kw_pool_destroy(own);
    return best;
}

typedef struct {
    const kw_mem_span *s;
    int n;
    uint64_t (*read_nt)(const void *p, size_t bytes);
    unsigned long long sink[64];
} span_task;

size_t kw_span_slice(kw_mem_span s, int ith, int nth, const char **p) {
    uintptr_t base = (uintptr_t)s.p, end = base + s.bytes;
    uintptr_t a0 = (base + 63) & ~(uintptr_t)63;
    if (!s.p || nth < 1 || ith < 0 || ith >= nth || end < a0 + 256) return 0;
    size_t units = (size_t)(end - a0) / 256, per = (units + (size_t)nth - 1) / (size_t)nth;
    size_t u0 = per * (size_t)ith, u1 = u0 + per < units ? u0 + per : units;
    if (u1 <= u0) return 0;
    *p = (const char *)(a0 + 256 * u0);
    return 256 * (u1 - u0);
}

/* Thread ith reads its slice of every span (kw_span_slice). */
static void span_read_task(void *v, int ith, int nth) {
    span_task *t = v;
    uint64_t sum = 0;
    for (int i = 0; i < t->n; i++) {
        const char *p = NULL;
        size_t n = kw_span_slice(t->s[i], ith, nth, &p);
        if (n) sum += t->read_nt ? t->read_nt(p, n) : plain_sum(p, n);
    }
    t->sink[ith % 64] = sum;
}

double kw_measure_spans_bandwidth(kw_pool *pool, const kw_mem_span *spans, int n, double seconds) {
    if (!pool || !spans || n <= 0) return 0;
    const int nth = kw_pool_size(pool);
    uint64_t total = 0;   /* what a pass reads: the threads' slices */
    for (int i = 0; i < n; i++)
        for (int ith = 0; ith < nth; ith++) {
            const char *p;
            total += kw_span_slice(spans[i], ith, nth, &p);
        }
    if (total == 0) return 0;
    span_task t;
    memset(&t, 0, sizeof t);
    t.s = spans;
    t.n = n;
    kw_pool_run(pool, span_read_task, &t);      /* warm-up pass */
    return best_pass(pool, span_read_task, &t, &t.read_nt, (double)total, seconds);
}
