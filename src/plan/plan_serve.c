/* plan_serve.c - how `kvwise serve` sizes its memory with the plan (plan.h):
 * its default context, the KV pool and the prompt-cache caps it runs with,
 * taken from the same kw_plan that `kvwise plan` prints, and the one
 * "--memory-limit is too small; a limit of at least N would work" message
 * every startup check of the server gives. */
#include "plan_internal.h"
#include <stdio.h>

int32_t kw_plan_serve_ctx(const kw_plan_model *m, int32_t ctx) {
    if (ctx > 0) return ctx;
    int32_t t = m->hp.n_ctx_train;
    return t > 0 && t < KW_PLAN_SERVE_CTX ? t : KW_PLAN_SERVE_CTX;
}

uint64_t kw_plan_suggest_limit(uint64_t want) {
    const uint64_t mib = 1024 * 1024;
    if (want > UINT64_MAX / 2) return UINT64_MAX;
    uint64_t s = want + want / 50 + 16 * mib;
    return (s + mib - 1) / mib * mib;
}

int kw_plan_limit_error(kw_err *err, uint64_t limit, const char *taken_what, uint64_t taken,
                        const char *need_what, uint64_t need) {
    char l[32], t[32], n[32], w[32];
    uint64_t want = taken > UINT64_MAX - need ? UINT64_MAX : taken + need;
    unsigned long long sug = (unsigned long long)(kw_plan_suggest_limit(want) / (1024 * 1024));
    kw_format_bytes(limit, l, sizeof l);
    kw_format_bytes(need, n, sizeof n);
    kw_format_bytes(want, w, sizeof w);
    if (!taken_what)
        return kw_err_set(err, "--memory-limit %s is too small: %s needs %s; --memory-limit %lluMiB would work "
                          "(%s with a margin for what is measured at start)", l, need_what, n, sug, w);
    return kw_err_set(err, "--memory-limit %s is too small: %s is taken by %s and %s needs %s; --memory-limit %lluMiB "
                      "would work (%s in all, with a margin for what is measured at start)",
                      l, kw_format_bytes(taken, t, sizeof t), taken_what, need_what, n, sug, w);
}

/* Blocks the budget leaves for KV after the fixed lines. */
static int64_t room_blocks(const kw_plan *p) {
    if (p->kv_block_bytes == 0) return 0;
    uint64_t room = p->memory_limit > p->fixed ? p->memory_limit - p->fixed : 0;
    uint64_t b = room / p->kv_block_bytes;
    return b > INT32_MAX ? INT32_MAX : (int64_t)b;
}

int kw_plan_serve_sizing(const kw_plan *p, const kw_plan_serve_opts *f, kw_plan_serve *out, kw_err *err) {
    const kw_plan_opts *o = &p->o;
    int64_t seq_blocks = ((int64_t)o->ctx + o->block_tokens - 1) / o->block_tokens;
    int64_t room = room_blocks(p);
    if (room < seq_blocks) {
        char what[160];
        snprintf(what, sizeof what, "one sequence of --ctx-size %d (%lld KV blocks of %llu bytes)", o->ctx,
                 (long long)seq_blocks, (unsigned long long)p->kv_block_bytes);
        return kw_plan_limit_error(err, p->memory_limit, "the weights, prefill workspace, tokenizer, overhead and "
                                   "HTTP connections", p->fixed, what, (uint64_t)seq_blocks * p->kv_block_bytes);
    }
    bool cache = f->cache_seqs > 0, given = f->cache_bytes != UINT64_MAX;
    uint64_t bytes = given ? f->cache_bytes : !cache ? 0 : p->fits ? p->prompt_cache_bytes : 0;
    int64_t live = (int64_t)o->concurrency * seq_blocks, want;
    if (f->kv_blocks > 0) want = f->kv_blocks;
    else if (!p->fits) want = room;
    else if (!cache) want = live;
    else if (!given) want = p->kv_pool_blocks;
    else want = live + (int64_t)(bytes / p->kv_block_bytes);
    if (want > room) want = room;
    if (want > KW_PLAN_SERVE_MAX_BLOCKS) want = KW_PLAN_SERVE_MAX_BLOCKS;
    out->kv_blocks = (int32_t)want;
    out->cache_max_seqs = f->cache_seqs;
    /* not every slot fits at full context: no plan recommendation; the cache may hold half the pool */
    if (!given && cache && !p->fits) bytes = (uint64_t)want * p->kv_block_bytes / 2;
    out->cache_max_bytes = bytes;
    return 0;
}
