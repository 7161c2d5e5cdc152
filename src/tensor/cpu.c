/* cpu.c - run-time CPU feature detection and the choice of kernel family.
 *
 * Owns kw_cpu_info_get() (cpuid + xgetbv: an ISA counts only when the OS
 * also saves its registers), kw_kernel_name()/kw_kernel_force(), and the
 * active kernel table that kw_matmul, the attention and the SwiGLU of the
 * forward pass dispatch through (KW_KERNEL forces all of them). The best family
 * the CPU supports is chosen on first use: avx512 (F/BW/VL/DQ + VNNI),
 * else avx2 (AVX2 + FMA + F16C), else scalar. Also the decode prefetch
 * distance (kw_decode_prefetch_bytes), a per-CPU tuning the kernels read
 * when their family is initialised. */
#include "tensor/kernels.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define KW_X86 1
#endif

static kw_cpu_info g_info;
static bool g_avx512dq;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static kw_kernel_set g_sets[KW_KERNEL_FAMILIES];   /* scalar, avx2, avx512 */
static bool g_set_ok[KW_KERNEL_FAMILIES];
static _Atomic(const kw_kernel_set *) g_active;
static size_t g_decode_pf;

#ifdef KW_X86
static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static void detect(void) {
    unsigned a, b, c, d;
    if (__get_cpuid(0, &a, &b, &c, &d)) {
        char vendor[13];
        memcpy(vendor, &b, 4);
        memcpy(vendor + 4, &d, 4);
        memcpy(vendor + 8, &c, 4);
        vendor[12] = 0;
        g_info.intel = strcmp(vendor, "GenuineIntel") == 0;
    }
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    bool osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    bool fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
    uint64_t xcr0 = osxsave ? read_xcr0() : 0;
    bool os_avx = (xcr0 & 0x6) == 0x6;
    bool os_avx512 = (xcr0 & 0xe6) == 0xe6;
    unsigned max_leaf = __get_cpuid_max(0, NULL);
    unsigned b7 = 0, c7 = 0, a71 = 0;
    if (max_leaf >= 7) {
        __cpuid_count(7, 0, a, b7, c7, d);
        __cpuid_count(7, 1, a71, b, c, d);
    }
    g_info.avx2 = os_avx && avx && ((b7 >> 5) & 1);
    g_info.fma = os_avx && fma;
    g_info.f16c = os_avx && f16c;
    g_info.avxvnni = os_avx && ((a71 >> 4) & 1);
    g_info.avx512f = os_avx512 && ((b7 >> 16) & 1);
    g_avx512dq = g_info.avx512f && ((b7 >> 17) & 1);
    g_info.avx512bw = g_info.avx512f && ((b7 >> 30) & 1);
    g_info.avx512vl = g_info.avx512f && ((b7 >> 31) & 1);
    g_info.avx512vnni = g_info.avx512f && ((c7 >> 11) & 1);
    g_info.avx512bf16 = g_info.avx512f && ((a71 >> 5) & 1);
}
#else
static void detect(void) {}
#endif

/* Families a CPU can run. An init function that leaves name NULL means
 * the family has no kernels in this build. */
static bool can_avx2(void) { return g_info.avx2 && g_info.fma && g_info.f16c; }
static bool can_avx512(void) {
    return can_avx2() && g_info.avx512f && g_info.avx512bw && g_info.avx512vl && g_avx512dq && g_info.avx512vnni;
}

/* One-row decode's software prefetch of packed weights, bytes ahead, per
 * CPU vendor: on Intel a core's decode stream stalls without it and L2
 * prefetches 4 KiB ahead keep it going (Q4_0 decode 1.39x on a Xeon of
 * family 6 model 207); on AMD (Zen 5) the hardware prefetcher does better
 * alone and every distance tried lost, so other vendors get none.
 * KW_DECODE_PREFETCH overrides it (docs/PERFORMANCE.md, Decode). */
static size_t decode_prefetch_default(void) { return g_info.intel ? 4096 : 0; }

static size_t decode_prefetch_from_env(size_t dflt) {
    const char *env = getenv("KW_DECODE_PREFETCH");
    if (!env || !*env) return dflt;
    char *end;
    unsigned long v = strtoul(env, &end, 10);
    if (*end || v > 65536 || v % 64) return dflt;   /* not a valid distance: keep the CPU's */
    return (size_t)v;
}

static bool can_scalar(void) { return true; }

/* The families by index (kernels.h KW_KERNEL_FAMILIES): where each runs,
 * its matmul entries (init), its attention and its SwiGLU. */
static const struct {
    bool (*can)(void);
    void (*init)(kw_kernel_set *k);
    const kw_attn_kernels *attn;
    void (*swiglu)(float *gate, const float *up, int64_t n);
} g_families[KW_KERNEL_FAMILIES] = {
    {can_scalar, kw_kernels_scalar_init, &kw_attn_kernels_scalar, kw_swiglu_scalar},
    {can_avx2, kw_kernels_avx2_init, &kw_attn_kernels_avx2, kw_swiglu_scalar},
    {can_avx512, kw_kernels_avx512_init, &kw_attn_kernels_avx512, kw_swiglu_avx512},
};

/* Each family the CPU can run starts from the best one below it that it
 * has (the scalar one always) and overrides what it implements. */
static void init_families(void) {
    int below = -1;
    for (int i = 0; i < KW_KERNEL_FAMILIES; i++) {
        if (!g_families[i].can()) continue;
        kw_kernel_set *k = &g_sets[i];
        if (below >= 0) *k = g_sets[below];
        k->name = NULL;
        g_families[i].init(k);
        k->attn = *g_families[i].attn;
        k->swiglu = g_families[i].swiglu;
        g_set_ok[i] = k->name != NULL;
        if (g_set_ok[i]) below = i;
    }
}

static void init_once(void) {
    detect();
    g_decode_pf = decode_prefetch_from_env(decode_prefetch_default());
    init_families();
    int best = g_set_ok[2] ? 2 : g_set_ok[1] ? 1 : 0;
    const char *env = getenv("KW_KERNEL");
    if (env) {
        for (int i = 0; i < KW_KERNEL_FAMILIES; i++)
            if (g_set_ok[i] && strcasecmp(env, g_sets[i].name) == 0) best = i;
    }
    atomic_store(&g_active, &g_sets[best]);
}

const kw_cpu_info *kw_cpu_info_raw(void) { return &g_info; }

size_t kw_decode_prefetch_raw(void) { return g_decode_pf; }

size_t kw_decode_prefetch_bytes(void) {
    pthread_once(&g_once, init_once);
    return g_decode_pf;
}

const kw_cpu_info *kw_cpu_info_get(void) {
    pthread_once(&g_once, init_once);
    return &g_info;
}

const kw_kernel_set *kw_kernels_active(void) {
    pthread_once(&g_once, init_once);
    return atomic_load(&g_active);
}

const char *kw_kernel_name(void) { return kw_kernels_active()->name; }

#ifdef KW_TESTCTL
const kw_kernel_set *kw_kernels_family(int i) {
    pthread_once(&g_once, init_once);
    return i >= 0 && i < KW_KERNEL_FAMILIES && g_set_ok[i] ? &g_sets[i] : NULL;
}

void kw_kernels_install(const kw_kernel_set *k) {
    pthread_once(&g_once, init_once);
    atomic_store(&g_active, k);
}
#endif

int kw_kernel_force(const char *name) {
    pthread_once(&g_once, init_once);
    if (!name) return -1;
    for (int i = 0; i < KW_KERNEL_FAMILIES; i++) {
        if (g_set_ok[i] && strcasecmp(name, g_sets[i].name) == 0) {
            atomic_store(&g_active, &g_sets[i]);
            return 0;
        }
    }
    return -1;
}

int kw_cpu_physical_cores(void) {
    /* Count distinct (physical id, core id) pairs; fall back to online CPUs. */
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return online > 0 ? (int)online : 1;
    char line[256];
    int phys = -1, n = 0;
    int seen[256][2];
    while (fgets(line, sizeof line, f)) {
        int v;
        if (sscanf(line, "physical id : %d", &v) == 1) phys = v;
        else if (sscanf(line, "core id : %d", &v) == 1) {
            bool dup = false;
            for (int i = 0; i < n; i++)
                if (seen[i][0] == phys && seen[i][1] == v) dup = true;
            if (!dup && n < 256) { seen[n][0] = phys; seen[n][1] = v; n++; }
        }
    }
    fclose(f);
    if (n <= 0) return online > 0 ? (int)online : 1;
    return n;
}
