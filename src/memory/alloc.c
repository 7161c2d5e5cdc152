/* alloc.c - the accounted allocator (memory.h).
 *
 * Each block carries a 64-byte header in front of the user pointer with its
 * size, kind and how it was obtained. Big blocks come from mmap so that
 * kw_mem_free() gives the pages back to the kernel immediately; huge blocks
 * (kw_mem_alloc_huge) come from a mapping trimmed so that the user pointer
 * is 2 MiB aligned, advised for transparent huge pages. In builds with the
 * test hooks, the alloc rules of a fault spec make an allocation fail on
 * purpose (testctl.h: `serve --test-fail-alloc`, kw_mem_fail_nth). A thread
 * budget (memory.h), when open, charges every block allocated on its thread. */
#include "kvwise/memory.h"
#include "kvwise/testctl.h"
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define KW_MEM_HDR 64
#define KW_MEM_MMAP_MIN (256u * 1024u)
#define KW_MEM_MAGIC 0x6b776d656d6d656dULL
#define KW_MEM_HUGE ((size_t)2 << 20)

typedef struct {
    uint64_t magic;
    uint64_t size;      /* user bytes */
    uint64_t total;     /* bytes obtained from the system (header included) */
    uint32_t kind;
    uint32_t mmapped;
    uint64_t map_off;   /* bytes from the start of the mapping to the header (huge blocks) */
    uint64_t budget;    /* the thread budget it was charged to (0: none) */
} kw_mem_hdr;

/* This thread's budget (memory.h): gen 0 = none open. */
static _Thread_local struct { uint64_t gen, cap, used, peak; bool exceeded; } t_budget;
static _Atomic uint64_t g_budget_gen;

void kw_mem_budget_open(uint64_t cap) {
    t_budget.gen = atomic_fetch_add(&g_budget_gen, 1) + 1;
    t_budget.cap = cap;
    t_budget.used = t_budget.peak = 0;
    t_budget.exceeded = false;
}

void kw_mem_budget_close(kw_mem_budget_stats *out) {
    if (out) *out = (kw_mem_budget_stats){t_budget.cap, t_budget.peak, t_budget.exceeded};
    t_budget.gen = 0;
}

int kw_mem_budget_take(size_t bytes, uint64_t *gen) {
    *gen = t_budget.gen;
    if (!t_budget.gen) return 0;
    if (bytes > t_budget.cap - t_budget.used) { t_budget.exceeded = true; *gen = 0; return -1; }
    t_budget.used += bytes;
    if (t_budget.used > t_budget.peak) t_budget.peak = t_budget.used;
    return 0;
}

void kw_mem_budget_give(size_t bytes, uint64_t gen) {
    if (!gen || gen != t_budget.gen) return;
    t_budget.used = bytes < t_budget.used ? t_budget.used - bytes : 0;
}

static _Atomic uint64_t g_cur[KW_MEM_KIND_COUNT];
static _Atomic uint64_t g_peak[KW_MEM_KIND_COUNT];
static _Atomic uint64_t g_total, g_total_peak;

static void bump_peak(_Atomic uint64_t *peak, uint64_t v) {
    uint64_t p = atomic_load(peak);
    while (v > p && !atomic_compare_exchange_weak(peak, &p, v)) {}
}

static void account(kw_mem_kind kind, int64_t delta) {
    uint64_t cur = atomic_fetch_add(&g_cur[kind], (uint64_t)delta) + (uint64_t)delta;
    uint64_t tot = atomic_fetch_add(&g_total, (uint64_t)delta) + (uint64_t)delta;
    if (delta > 0) { bump_peak(&g_peak[kind], cur); bump_peak(&g_total_peak, tot); }
}

/* The header of a new block at base (map_off bytes into its mapping); returns
 * the user pointer. gen: the thread budget the bytes were taken from. */
static void *start_block(void *base, uint64_t map_off, size_t bytes, size_t total, kw_mem_kind kind, int mm,
                         uint64_t gen) {
    kw_mem_hdr *h = base;
    h->budget = gen;
    h->magic = KW_MEM_MAGIC;
    h->size = bytes;
    h->total = total;
    h->kind = (uint32_t)kind;
    h->mmapped = (uint32_t)mm;
    h->map_off = map_off;
    account(kind, (int64_t)bytes);
    return (char *)base + KW_MEM_HDR;
}

/* The checks every allocation passes first: a valid kind (else OTHER), a
 * sane size, the test hooks, this thread's budget (*gen: what it took). */
static bool may_allocate(kw_mem_kind *kind, size_t bytes, uint64_t *gen) {
    if ((unsigned)*kind >= KW_MEM_KIND_COUNT) *kind = KW_MEM_OTHER;
    return bytes <= ((size_t)1 << 46) && !kw_fault_hit(KW_FAULT_ALLOC, (int)*kind) &&
           kw_mem_budget_take(bytes, gen) == 0;
}

void *kw_mem_alloc(kw_mem_kind kind, size_t bytes) {
    uint64_t gen;
    if (!may_allocate(&kind, bytes, &gen)) return NULL;
    size_t total = bytes + KW_MEM_HDR;
    void *base;
    int mm = 0;
    if (total >= KW_MEM_MMAP_MIN) {
        total = (total + 4095) & ~(size_t)4095;
        base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (base == MAP_FAILED) { kw_mem_budget_give(bytes, gen); return NULL; }
        mm = 1;
    } else if (posix_memalign(&base, 64, total) != 0) {
        kw_mem_budget_give(bytes, gen);
        return NULL;
    }
    return start_block(base, 0, bytes, total, kind, mm, gen);
}

/* Maps bytes + 2 MiB, then unmaps the head and tail around [user - header
 * page, user + bytes rounded to a page) where user is the first 2 MiB
 * boundary with room for the header before it. Only whole 2 MiB ranges can
 * be huge pages, so the interior [user, user + bytes rounded down to 2 MiB)
 * is advised; the last partial 2 MiB stays in small pages (no physical
 * memory beyond the request). */
void *kw_mem_alloc_huge(kw_mem_kind kind, size_t bytes) {
    if (bytes < KW_MEM_HUGE) return kw_mem_calloc(kind, bytes);
    uint64_t gen;
    if (!may_allocate(&kind, bytes, &gen)) return NULL;
    const uintptr_t page = 4096;
    size_t span = bytes + KW_MEM_HUGE + page;
    char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) { kw_mem_budget_give(bytes, gen); return NULL; }
    uintptr_t user = ((uintptr_t)raw + KW_MEM_HDR + KW_MEM_HUGE - 1) & ~(uintptr_t)(KW_MEM_HUGE - 1);
    uintptr_t head = (user - KW_MEM_HDR) & ~(page - 1), end = (user + bytes + page - 1) & ~(page - 1);
    if (head > (uintptr_t)raw) munmap(raw, head - (uintptr_t)raw);
    if ((uintptr_t)raw + span > end) munmap((void *)end, (uintptr_t)raw + span - end);
#ifdef MADV_HUGEPAGE
    (void)madvise((void *)user, bytes & ~(KW_MEM_HUGE - 1), MADV_HUGEPAGE);   /* advice: "never" mode ignores it */
#endif
    return start_block((void *)(user - KW_MEM_HDR), user - KW_MEM_HDR - head, bytes, end - head, kind, 1, gen);
}

void *kw_mem_calloc(kw_mem_kind kind, size_t bytes) {
    void *p = kw_mem_alloc(kind, bytes);
    if (p) {
        kw_mem_hdr *h = (kw_mem_hdr *)((char *)p - KW_MEM_HDR);
        if (!h->mmapped) memset(p, 0, bytes); /* fresh anonymous mappings are already zero */
    }
    return p;
}

void kw_mem_free(void *p) {
    if (!p) return;
    kw_mem_hdr *h = (kw_mem_hdr *)((char *)p - KW_MEM_HDR);
    if (h->magic != KW_MEM_MAGIC) abort(); /* not ours, or a double free */
    h->magic = 0;
    account((kw_mem_kind)h->kind, -(int64_t)h->size);
    kw_mem_budget_give(h->size, h->budget);
    if (h->mmapped) munmap((char *)h - h->map_off, h->total);
    else free(h);
}

size_t kw_mem_size(const void *p) {
    if (!p) return 0;
    const kw_mem_hdr *h = (const kw_mem_hdr *)((const char *)p - KW_MEM_HDR);
    return h->size;
}

void kw_mem_note_mapped(kw_mem_kind kind, int64_t delta) {
    if ((unsigned)kind >= KW_MEM_KIND_COUNT) kind = KW_MEM_OTHER;
    account(kind, delta);
}

uint64_t kw_mem_current(kw_mem_kind kind) { return (unsigned)kind < KW_MEM_KIND_COUNT ? atomic_load(&g_cur[kind]) : 0; }
uint64_t kw_mem_peak(kw_mem_kind kind) { return (unsigned)kind < KW_MEM_KIND_COUNT ? atomic_load(&g_peak[kind]) : 0; }
uint64_t kw_mem_total(void) { return atomic_load(&g_total); }
uint64_t kw_mem_total_peak(void) { return atomic_load(&g_total_peak); }

const char *kw_mem_kind_name(kw_mem_kind kind) {
    static const char *names[KW_MEM_KIND_COUNT] = {
        "weights", "kv", "workspace", "scratch", "tokenizer", "server", "other"};
    return (unsigned)kind < KW_MEM_KIND_COUNT ? names[kind] : "?";
}
