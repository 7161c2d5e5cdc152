/* kvwise/memory.h - the accounted allocation path.
 *
 * Every large allocation in kvwise (KV pool, forward-pass workspace,
 * repacked weights, tokenizer tables, request buffers) goes through
 * kw_mem_alloc(), which counts bytes per kind with a running peak.
 * Allocations of 256 KiB and more are served by mmap so that freeing them
 * returns the memory to the kernel at once (no RSS creep with uptime).
 * Mapped model files are noted with kw_mem_note_mapped().
 *
 * The budget/reservation ledger used for admission control is built on
 * top of these counters (ledger.h); the kernel's own view of the process
 * is read by footprint.h. */
#ifndef KVWISE_MEMORY_H
#define KVWISE_MEMORY_H
#include "kvwise/common.h"

typedef enum kw_mem_kind {
    KW_MEM_WEIGHTS = 0,  /* heap copies / repacks of weights (mmap'd file pages: see note_mapped) */
    KW_MEM_KV,           /* the paged KV pool */
    KW_MEM_WORKSPACE,    /* forward-pass activations: the prefill "workbench" */
    KW_MEM_SCRATCH,      /* per-thread scratch (attention scores, quantized activations) */
    KW_MEM_TOKENIZER,    /* vocab, merges, lookup tables */
    KW_MEM_SERVER,       /* connections, request/response buffers */
    KW_MEM_OTHER,
    KW_MEM_KIND_COUNT
} kw_mem_kind;

/* 64-byte aligned, not zeroed. Returns NULL on failure (or injected fault). */
void *kw_mem_alloc(kw_mem_kind kind, size_t bytes);
/* Same, zero-filled. */
void *kw_mem_calloc(kw_mem_kind kind, size_t bytes);
/* Zero-filled, for a big buffer that is streamed again and again (repacked
 * weights, the KV pool): the pointer is 2 MiB aligned and the range is
 * advised for transparent huge pages, so a pass over it costs one TLB entry
 * per 2 MiB instead of one per 4 KiB (decode reads every weight once per
 * token; Q8_0 1B decode was 6-13% faster with all weights on huge pages).
 * Only whole 2 MiB pieces can be huge: the last partial one stays in small
 * pages, so no memory is used beyond `bytes`. Below 2 MiB it is
 * kw_mem_calloc. Accounted and freed like any other block. */
void *kw_mem_alloc_huge(kw_mem_kind kind, size_t bytes);
/* Frees a pointer from kw_mem_alloc/calloc/alloc_huge; NULL is allowed. */
void kw_mem_free(void *p);
/* Size of an allocation made by kw_mem_alloc. */
size_t kw_mem_size(const void *p);

/* Notes a file mapping (e.g. model weights) of `delta` bytes (negative on unmap). */
void kw_mem_note_mapped(kw_mem_kind kind, int64_t delta);

uint64_t kw_mem_current(kw_mem_kind kind);   /* allocated + mapped bytes now */
uint64_t kw_mem_peak(kw_mem_kind kind);      /* high-water mark of kw_mem_current */
uint64_t kw_mem_total(void);                 /* sum over kinds */
uint64_t kw_mem_total_peak(void);            /* high-water mark of the sum */
const char *kw_mem_kind_name(kw_mem_kind kind);

/* A thread's budget: the bounded work of one request on one thread (an HTTP
 * thread parsing, rendering and tokenizing: docs/MEMORY.md, "Request
 * handling"). While a budget is open on a thread, every kw_mem_alloc made
 * there counts against its cap and fails (NULL) once the cap would be passed;
 * blocks freed on that thread while it is open give their bytes back. Other
 * allocators charge it with kw_mem_budget_take / kw_mem_budget_give (the
 * server's JSON trees). Budgets do not nest: opening one closes the last. */
typedef struct kw_mem_budget_stats {
    uint64_t cap;        /* the cap it was opened with */
    uint64_t peak;       /* most bytes held at once */
    bool exceeded;       /* some allocation was refused */
} kw_mem_budget_stats;
void kw_mem_budget_open(uint64_t cap);
/* Closes this thread's budget (out may be NULL). */
void kw_mem_budget_close(kw_mem_budget_stats *out);
/* Charges `bytes` to this thread's open budget. 0 and *gen = a token for
 * kw_mem_budget_give (0 when no budget is open: nothing charged), or -1 when
 * the cap would be passed (nothing charged; the budget is marked exceeded). */
int kw_mem_budget_take(size_t bytes, uint64_t *gen);
/* Gives back bytes taken under token gen, if that budget is still open on this thread. */
void kw_mem_budget_give(size_t bytes, uint64_t gen);

/* Allocations made to fail on purpose in tests: testctl.h (kw_mem_fail_nth, fault rules). */

#endif
