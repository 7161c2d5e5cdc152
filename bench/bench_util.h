/* bench_util.h - what the bench programs share: a clock that can be the
 * process's CPU time (--cputime: with one thread, a kernel's own speed even
 * when other processes share the cores; memory stalls still count, they are
 * spent on the CPU), a seeded xorshift for synthetic data, and a double
 * comparison for qsort (medians). Static functions: each program compiles
 * its own copy. */
#ifndef KW_BENCH_UTIL_H
#define KW_BENCH_UTIL_H
#include <stdint.h>
#include <time.h>

static int g_cputime;   /* set by --cputime */

static double now_sec(void) {
    struct timespec ts;
    clock_gettime(g_cputime ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t g_rng = 88172645463325252ull;

/* uniform in [-1, 1) */
static inline float frand(void) {   /* inline: a program that does not use it gets no warning */
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * 0x1p-24 * 2.0 - 1.0);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#endif
