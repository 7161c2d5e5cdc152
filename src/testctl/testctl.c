/* testctl.c - the test hooks besides fault injection (testctl.h; compiled
 * only with KW_TESTCTL): the sampler plugged into the scheduler's sampling
 * step, serve's replay settings, and the matmul test order. Each is one
 * atomic word, read with a relaxed load where the library asks. */
#include <stdatomic.h>
#include "kvwise/testctl.h"

static _Atomic(kw_test_sampler) g_sampler;  /* plugged in before requests run (set: ctx, then fn) */
static void *_Atomic g_sampler_ctx;
static _Atomic bool g_replay;
static const char *_Atomic g_replay_script;
static _Atomic bool g_help_first;

void kw_testctl_set_sampler(kw_test_sampler fn, void *ctx) {
    atomic_store(&g_sampler_ctx, ctx);
    atomic_store(&g_sampler, fn);
}

int32_t kw_testctl_sample(const struct kw_sched_req *r, int32_t n_gen, bool *last) {
    kw_test_sampler fn = atomic_load_explicit(&g_sampler, memory_order_acquire);
    *last = false;
    return fn ? fn(atomic_load_explicit(&g_sampler_ctx, memory_order_relaxed), r, n_gen, last) : KW_TEST_SAMPLE_PASS;
}

void kw_testctl_set_replay(bool on, const char *script) {
    atomic_store(&g_replay_script, on ? script : NULL);
    atomic_store(&g_replay, on);
}

bool kw_testctl_replay(const char **script) {
    if (script) *script = atomic_load(&g_replay_script);
    return atomic_load(&g_replay);
}

void kw_matmul_test_help_first(bool on) { atomic_store(&g_help_first, on); }
bool kw_testctl_matmul_help_first(void) { return atomic_load_explicit(&g_help_first, memory_order_relaxed); }
