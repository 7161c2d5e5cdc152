/* bandwidth.c - a short memory read-bandwidth probe for the decode ceiling
 * (plan.h: kw_plan_probe_bandwidth). TEMPORARY home: tensor.h is to gain
 * kw_measure_read_bandwidth(); the planner switches to it when it lands.
 *
 * Method: a 128 MiB buffer (far beyond any cache), touched once, then read
 * end to end by n threads at once, each summing its slice with 8 independent
 * accumulators; the best of several passes counts (other load on a shared
 * host only ever makes a pass slower). Bytes are decimal GB/s like the
 * seeds' 273 GB/s. */
#include "kvwise/plan.h"
#include "kvwise/memory.h"
#include <pthread.h>
#include <string.h>
#include <time.h>

#define PROBE_BYTES (128u << 20)
#define PROBE_PASSES 6
#define PROBE_MAX_THREADS 64

typedef struct { const uint64_t *p; size_t n; uint64_t sum; } slice;

static void *read_slice(void *arg) {
    slice *s = arg;
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
    const uint64_t *p = s->p;
    size_t n = s->n & ~(size_t)7;
    for (size_t i = 0; i < n; i += 8) {
        a0 += p[i]; a1 += p[i + 1]; a2 += p[i + 2]; a3 += p[i + 3];
        a4 += p[i + 4]; a5 += p[i + 5]; a6 += p[i + 6]; a7 += p[i + 7];
    }
    s->sum = a0 ^ a1 ^ a2 ^ a3 ^ a4 ^ a5 ^ a6 ^ a7;
    return NULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double kw_plan_probe_bandwidth(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    if (n_threads > PROBE_MAX_THREADS) n_threads = PROBE_MAX_THREADS;
    uint64_t *buf = kw_mem_alloc(KW_MEM_SCRATCH, PROBE_BYTES);
    if (!buf) return 0;
    memset(buf, 1, PROBE_BYTES);
    size_t words = PROBE_BYTES / sizeof(uint64_t), per = words / (size_t)n_threads;
    slice sl[PROBE_MAX_THREADS];
    pthread_t th[PROBE_MAX_THREADS];
    double best = 0;
    volatile uint64_t sink = 0;
    for (int pass = 0; pass < PROBE_PASSES; pass++) {
        bool spawned[PROBE_MAX_THREADS] = {false};
        double t0 = now_s();
        for (int i = 1; i < n_threads; i++) {
            sl[i] = (slice){buf + (size_t)i * per, per, 0};
            spawned[i] = pthread_create(&th[i], NULL, read_slice, &sl[i]) == 0;
        }
        sl[0] = (slice){buf, per, 0};
        read_slice(&sl[0]);
        for (int i = 1; i < n_threads; i++) {
            if (spawned[i]) pthread_join(th[i], NULL);
            else read_slice(&sl[i]);        /* no thread: read it here (slower, still correct) */
        }
        double dt = now_s() - t0;
        for (int i = 0; i < n_threads; i++) sink ^= sl[i].sum;
        double bw = dt > 0 ? (double)(per * (size_t)n_threads * sizeof(uint64_t)) / dt : 0;
        if (bw > best) best = bw;
    }
    (void)sink;
    kw_mem_free(buf);
    return best;
}
