/* kvwise/memview.h - what the server says about memory: the bodies of
 * GET /v1/memory (JSON) and GET /metrics (Prometheus text), and the reasons
 * a request can be refused for lack of memory.
 *
 * /v1/memory = {"budget": ledger (limit, used, lines, peak, reservations),
 *               "measured": the kernel's figures (footprint.h),
 *               "prompt_cache": {...}, "kv_pool": {...} (the engine's, engine.h),
 *               "requests": counters, queue depth, rejections by reason,
 *                           requests by client API}
 * /metrics   = the same figures as kvwise_memory_*_bytes (ledger lines,
 *              limit, used, peak; measured rss/pss/anon/file/hwm),
 *              kvwise_prompt_cache_*, kvwise_kv_*, kvwise_requests_*,
 *              kvwise_requests_rejected_total{reason=...},
 *              kvwise_requests_by_api_total{api=...}, token counters
 *              and kvwise_queue_depth.
 * Every input may be NULL (that part is left out). */
#ifndef KVWISE_MEMVIEW_H
#define KVWISE_MEMVIEW_H
#include "kvwise/common.h"
#include "kvwise/engine.h"
#include "kvwise/footprint.h"
#include "kvwise/sched.h"

struct kw_ledger;

/* The refusals counted in the "rejected" figures, by their label:
 * "queue_full" (the wait queue is full), "queue_timeout" (waited
 * --queue-timeout seconds for memory), "never_fits" (more KV than the pool /
 * budget can ever hold), "context_length" (longer than --ctx-size). Other
 * reasons have no label ("other") and are not shown. */
const char *kw_reject_reason_name(kw_reject_reason r);

/* Counters the server keeps (thread-safe increments are the caller's);
 * rejected[] is indexed by the scheduler's reasons (sched.h). */
typedef struct kw_memview_counters {
    uint64_t requests_total, requests_ok;
    uint64_t rejected[KW_REJECT_REASON_COUNT];
    uint64_t prompt_tokens, cached_tokens, completion_tokens;
    int32_t queue_depth, active;
    /* requests received per client API ("chat", "messages", ...), n_api of them (0: none shown) */
    const char *const *api_names;
    const uint64_t *api_requests;
    int n_api;
} kw_memview_counters;

/* GET /v1/requests: {"running": [...], "queued": [...]} from the
 * scheduler's list (sched.h) at monotonic time now: per request its id,
 * API, state ("prefill", "decode", "queued"), prompt tokens, cached and
 * prefilled so far ("prefill": {"done", "total"}), generated tokens and
 * the most it may generate, age, queue wait, TTFT and decode tok/s once
 * known (null before). */
char *kw_memview_requests_json(const kw_sched_req_info *r, int n, double now);

/* malloc'd NUL-terminated bodies (free()); NULL when out of memory. */
char *kw_memview_json(const kw_engine *e, struct kw_ledger *l, const kw_footprint *measured,
                      const kw_memview_counters *c);
char *kw_memview_metrics(const kw_engine *e, struct kw_ledger *l, const kw_footprint *measured,
                         const kw_memview_counters *c);

#endif
