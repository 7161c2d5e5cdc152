/* kvwise/fault.h - TEST-ONLY fault injection into the memory paths.
 *
 * A spec makes chosen calls of the accounted allocator (memory.h), the
 * ledger (ledger.h) and the paged KV pool (kv.h, kvmem.h) fail exactly as if
 * memory had run out, so that the real failure paths run in tests: an
 * admission refused for lack of memory, a sequence ended mid-prefill with its
 * reservation returned, the prompt cache keeping what it has, a startup
 * error. Nothing is simulated: the call returns its failure value and its
 * caller handles it. `kvwise serve --test-fail-alloc SPEC` sets a spec
 * (loopback only, with a WARNING at startup); it is never a setting.
 *
 * SPEC is one or more comma-separated rules SITE=WHEN[@start]:
 *   SITE  alloc          every kw_mem_alloc / kw_mem_calloc
 *         alloc.KIND     only that kind: weights kv workspace scratch
 *                        tokenizer server other (kw_mem_kind_name)
 *         kv_block       kw_kv_alloc: one block taken from the KV pool
 *         ledger         kw_ledger_reserve: one reservation on the budget
 *         kv_ensure      kw_kvmem_ensure: the per-step check that a
 *                        sequence's KV covers the positions it is about to
 *                        write (prefill chunks and decode tokens)
 *   WHEN  N              the N-th call (1 = the first) fails, once
 *         %N             every N-th call fails
 *         N+             the N-th call and every later one fail
 *   @start               count from kw_fault_configure (startup included);
 *                        without it counting starts at kw_fault_arm(), which
 *                        `kvwise serve` calls once it is ready.
 * Example: "kv_block=%7,alloc.other=3" fails every 7th KV block and the
 * third bookkeeping allocation after the server is ready.
 *
 * Thread-safe (atomic counters); configure before other threads run. */
#ifndef KVWISE_FAULT_H
#define KVWISE_FAULT_H
#include "kvwise/common.h"

typedef enum kw_fault_site {
    KW_FAULT_ALLOC = 0,
    KW_FAULT_KV_BLOCK,
    KW_FAULT_LEDGER,
    KW_FAULT_KV_ENSURE,
    KW_FAULT_SITE_COUNT
} kw_fault_site;

/* Replaces the rules by SPEC (NULL or "" clears them). -1 + err on a bad
 * spec (the rules are then cleared). */
int kw_fault_configure(const char *spec, kw_err *err);
/* Rules without @start start counting now. */
void kw_fault_arm(void);
/* Called at each site: true = fail this call. kind: the kw_mem_kind of an
 * allocation (KW_FAULT_ALLOC), ignored elsewhere. */
bool kw_fault_hit(kw_fault_site site, int kind);
/* Calls failed on purpose so far. */
uint64_t kw_fault_injected(void);
/* Are any rules configured? */
bool kw_fault_configured(void);

#endif
