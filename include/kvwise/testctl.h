/* kvwise/testctl.h - the test hooks, behind one switch.
 *
 * Everything a test uses to steer the library from outside lives here and is
 * compiled only when the build defines KW_TESTCTL (CMake option KW_TESTCTL:
 * ON in the test builds of scripts/build.sh release|asan, OFF in the
 * production build scripts/run.sh serves from). In a build without it the
 * setters do not exist, and each check the library makes on a hot path is an
 * inline constant (no fault, no plugged-in sampler, no matmul test order), so
 * a production binary carries no test code and `kvwise serve` has no test
 * flag (they are refused as unknown options).
 *
 * The hooks:
 *  - fault injection: chosen calls of the accounted allocator (memory.h), the
 *    ledger (ledger.h) and the paged KV pool (kv.h, kvmem.h) fail exactly as
 *    if memory had run out, so the real failure paths run in tests (an
 *    admission refused for lack of memory, a sequence ended mid-prefill with
 *    its reservation returned, the prompt cache keeping what it has, a
 *    startup error). Nothing is simulated: the call returns its failure value
 *    and its caller handles it. `kvwise serve --test-fail-alloc SPEC` sets a
 *    spec (loopback only, with a WARNING at startup); kw_mem_fail_nth is the
 *    unit tests' shorthand for one allocation rule.
 *  - a sampler plugged into the scheduler's sampling step (sched.h): for the
 *    requests it claims it chooses the tokens instead of kw_sample. The
 *    server's replay (`serve --test-replay`: a request's "test_replay" text,
 *    or --test-replay-script rules, become the model's output) is one.
 *  - the matmul test order: every thread of a streaming split helps the
 *    others before its own part, so the helping path runs on every call.
 *
 * Fault SPEC is one or more comma-separated rules SITE=WHEN[@start]:
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
 * Thread-safe (atomic counters and pointers); configure before other
 * threads run. */
#ifndef KVWISE_TESTCTL_H
#define KVWISE_TESTCTL_H
#include "kvwise/common.h"

struct kw_sched_req;

typedef enum kw_fault_site {
    KW_FAULT_ALLOC = 0,
    KW_FAULT_KV_BLOCK,
    KW_FAULT_LEDGER,
    KW_FAULT_KV_ENSURE,
    KW_FAULT_SITE_COUNT
} kw_fault_site;

/* A plugged-in sampler's answers besides a token id (>= 0). */
#define KW_TEST_SAMPLE_PASS (-1)    /* not this request: kw_sample chooses */
#define KW_TEST_SAMPLE_END (-2)     /* nothing (more) to emit: the request ends "stop" now */

/* Asked on the engine thread for the token at generation step n_gen
 * (0-based) of request r: a token id (*last = true when it is the final one:
 * the request then ends "stop" after it), KW_TEST_SAMPLE_END or
 * KW_TEST_SAMPLE_PASS. */
typedef int32_t (*kw_test_sampler)(void *ctx, const struct kw_sched_req *r, int32_t n_gen, bool *last);

#ifdef KW_TESTCTL

/* ---- fault injection ---- */
/* Replaces the rules by SPEC (NULL or "" clears them). -1 + err on a bad
 * spec (the rules are then cleared). */
int kw_fault_configure(const char *spec, kw_err *err);
/* Rules without @start start counting now. */
void kw_fault_arm(void);
/* Called at each site: true = fail this call. kind: the kw_mem_kind of an
 * allocation (KW_FAULT_ALLOC), ignored elsewhere. With no rule it costs one
 * relaxed atomic load. */
bool kw_fault_hit(kw_fault_site site, int kind);
/* Calls failed on purpose so far. */
uint64_t kw_fault_injected(void);
/* Are any rules configured? */
bool kw_fault_configured(void);
/* The n-th accounted allocation from now fails, once (n = 1: the next one);
 * n = 0 clears. The same as the spec "alloc=N", armed at once: it replaces
 * the rules. */
void kw_mem_fail_nth(long n);

/* ---- the sampling step ---- */
/* Plugs fn (with ctx) into every scheduler's sampling step; NULL unplugs.
 * Plug in before requests run (a request sampled while it changes may see
 * the new fn with the old ctx). */
void kw_testctl_set_sampler(kw_test_sampler fn, void *ctx);
/* The scheduler's question at each sampled token (KW_TEST_SAMPLE_PASS when nothing is plugged in). */
int32_t kw_testctl_sample(const struct kw_sched_req *r, int32_t n_gen, bool *last);

/* serve's replay (--test-replay, --test-replay-script FILE): on, and the
 * script or NULL. Read by the server's request parser. */
void kw_testctl_set_replay(bool on, const char *script);
bool kw_testctl_replay(const char **script);

/* ---- the matmul test order ---- */
/* with on, every thread of a streaming (decode) split first takes pieces from
 * the back of the other threads' parts and only then its own, so the helping
 * path runs on every call (it otherwise runs only when a thread finishes
 * early). Results must not change. */
void kw_matmul_test_help_first(bool on);
bool kw_testctl_matmul_help_first(void);

#else   /* production: the checks are constants */

static inline bool kw_fault_hit(kw_fault_site site, int kind) { (void)site; (void)kind; return false; }
static inline int32_t kw_testctl_sample(const struct kw_sched_req *r, int32_t n_gen, bool *last) {
    (void)r; (void)n_gen; (void)last;
    return KW_TEST_SAMPLE_PASS;
}
static inline bool kw_testctl_matmul_help_first(void) { return false; }

#endif
#endif
