/* test_alloc_huge.c - kw_mem_alloc_huge (memory.h): a block of 2 MiB or
 * more starts on a 2 MiB boundary, is zero-filled and writable end to end,
 * is accounted at exactly its size, and maps exactly the pages from its
 * header to its end (the over-mapping used for alignment is trimmed: the
 * process's VmSize grows by that and drops by it again on free); a smaller
 * one is an ordinary accounted block; an injected failure returns NULL and
 * accounts nothing. Whether the kernel really used huge pages is printed,
 * not asserted: it may fall back to small pages (THP off, fragmented memory). */
#include "testutil.h"
#include "kvwise/memory.h"
#include "kvwise/footprint.h"
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define HUGE_PAGE ((uintptr_t)2 << 20)

/* VmSize in bytes, from /proc/self/status. */
static uint64_t vm_size(void) {
    kw_footprint f;
    kw_err err = {{0}};
    return kw_footprint_read(&f, &err) == 0 ? f.vm_size : 0;
}

/* AnonHugePages (bytes) of the mapping that contains p, or -1 when unknown. */
static long long huge_bytes_at(const void *p) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    bool in = false;
    long long kb = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
            continue;
        }
        if (in && sscanf(line, "AnonHugePages: %lld kB", &kb) == 1) break;
    }
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

static void test_big(size_t bytes) {
    uint64_t kv0 = kw_mem_current(KW_MEM_KV), vm0 = vm_size();
    uint8_t *p = kw_mem_alloc_huge(KW_MEM_KV, bytes);
    uint64_t vm1 = vm_size();
    KW_CHECK(p != NULL);
    if (!p) return;
    KW_CHECK_EQ_INT((uintptr_t)p % HUGE_PAGE, 0);
    KW_CHECK_EQ_INT(kw_mem_size(p), bytes);
    KW_CHECK_EQ_INT(kw_mem_current(KW_MEM_KV) - kv0, bytes);
    /* mapped: the header's page before p, then p .. p + bytes rounded up to a page */
    uint64_t want = 4096 + ((bytes + 4095) & ~(uint64_t)4095);
    KW_CHECK_MSG(vm1 - vm0 == want, "%zu bytes: VmSize grew by %llu, want %llu", bytes,
                 (unsigned long long)(vm1 - vm0), (unsigned long long)want);
    size_t nonzero = 0;
    for (size_t i = 0; i < bytes; i++) nonzero += p[i] != 0;
    KW_CHECK_EQ_INT(nonzero, 0);
    memset(p, 0xa5, bytes);
    KW_CHECK(p[0] == 0xa5 && p[bytes - 1] == 0xa5);
    printf("%zu bytes at %p: %lld bytes on huge pages\n", bytes, (void *)p, huge_bytes_at(p));
    kw_mem_free(p);
    KW_CHECK_EQ_INT(kw_mem_current(KW_MEM_KV), kv0);
    KW_CHECK_EQ_INT(vm_size(), vm0);
}

static void test_small(void) {
    uint64_t w0 = kw_mem_current(KW_MEM_WEIGHTS);
    uint8_t *p = kw_mem_alloc_huge(KW_MEM_WEIGHTS, 300000);
    KW_CHECK(p != NULL);
    if (!p) return;
    KW_CHECK_EQ_INT((uintptr_t)p % 64, 0);
    KW_CHECK_EQ_INT(kw_mem_current(KW_MEM_WEIGHTS) - w0, 300000);
    size_t nonzero = 0;
    for (size_t i = 0; i < 300000; i++) nonzero += p[i] != 0;
    KW_CHECK_EQ_INT(nonzero, 0);
    kw_mem_free(p);
    KW_CHECK_EQ_INT(kw_mem_current(KW_MEM_WEIGHTS), w0);
}

static void test_injected_failure(void) {
    uint64_t t0 = kw_mem_total(), vm0 = vm_size();
    kw_mem_fail_nth(1);
    KW_CHECK(kw_mem_alloc_huge(KW_MEM_KV, 8u << 20) == NULL);
    KW_CHECK_EQ_INT(kw_mem_total(), t0);
    KW_CHECK_EQ_INT(vm_size(), vm0);
    KW_CHECK(kw_mem_alloc_huge(KW_MEM_KV, (size_t)1 << 50) == NULL);   /* absurd size: refused, not mapped */
    KW_CHECK_EQ_INT(kw_mem_total(), t0);
}

int main(void) {
    (void)vm_size();   /* the first /proc read grows the C heap (stdio buffers): not part of any measurement */
    (void)huge_bytes_at(NULL);
    test_big(2u << 20);                  /* exactly one huge page */
    test_big((5u << 20) + 123);          /* a partial page at the end */
    test_big((64u << 20) - 64);
    test_small();
    test_injected_failure();
    return kw_test_finish();
}
