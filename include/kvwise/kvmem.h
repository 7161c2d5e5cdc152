/* kvwise/kvmem.h - the KV side of admission control: per-slot block tables
 * over the paged pool, the prompt cache in front of it, and the ledger's KV
 * lines kept in step with both.
 *
 * An engine (engine.h) delegates its seq_begin / seq_ensure / seq_end hooks
 * here:
 *   begin   longest cached prefix of the prompt (mapped, no copy), private
 *           copy of a shared last block, then a reservation of every block
 *           the sequence can need (prompt + max_tokens positions), taken
 *           from the pool now so that no later step can run out. If the
 *           pool is short, LRU cache leaves are evicted first; if it is
 *           still short the sequence must wait (KW_KVMEM_WAIT); if it could
 *           never fit (more positions than the context or than the whole
 *           pool) the answer is KW_KVMEM_NEVER (refused as it is).
 *   ensure  grows a table past its reservation (evicting cache if needed).
 *   end     offers the finished sequence to the prompt cache (caps are
 *           enforced inside insert) and releases the slot's blocks.
 * Every call takes one mutex, so HTTP threads may read stats, the JSON
 * state and the Prometheus text while the engine thread admits. */
#ifndef KVWISE_KVMEM_H
#define KVWISE_KVMEM_H
#include "kvwise/common.h"
#include "kvwise/kv.h"
#include "kvwise/prefix_cache.h"
#include "kvwise/state_cache.h"

struct cJSON;
struct kw_ledger;

#define KW_KVMEM_WAIT  (-1)   /* does not fit now: queue and retry */
#define KW_KVMEM_NEVER (-2)   /* can never fit: reject at once */
#define KW_KVMEM_NOMEM (-3)   /* there was room, but taking it failed (allocation failure): refuse, retry later */

typedef struct kw_kvmem_opts {
    int32_t n_slots;            /* sequences that may be live at once */
    int32_t n_ctx;              /* positions per sequence */
    int32_t cache_max_seqs;     /* --prompt-cache-size (0 = no cache) */
    uint64_t cache_max_bytes;   /* --prompt-cache-bytes (0 = no cache); serve's default is the plan's (plan.h) */
    struct kw_ledger *ledger;   /* optional: kv_live / kv_cached lines follow the pool */
    double log_interval_s;      /* > 0: after a cache insert, print the "Prompt cache: ..."
                                   line to stderr if at least this long since the last one */
    /* Models with a recurrent state (hybrids): the bytes of one sequence's
     * state (0 = none). A cached prefix is then reusable only up to a
     * position where a checkpoint of the whole state was saved
     * (kw_kvmem_checkpoint, state_cache.h). Checkpoints share the byte cap
     * with the cached KV blocks: they take at most half of it and at most
     * KW_KVMEM_CHECKPOINTS_PER_SEQ per cached sequence of the count cap,
     * and the KV blocks' cap is what they leave, so the sum never exceeds
     * cache_max_bytes. */
    uint64_t state_bytes;
    int32_t checkpoint_interval;/* prefill tokens between mid-prompt checkpoints (0 = only at the ends) */
} kw_kvmem_opts;

#define KW_KVMEM_CHECKPOINTS_PER_SEQ 4
#define KW_KVMEM_CHECKPOINT_INTERVAL 4096   /* serve's --checkpoint-interval default */

/* Admission counters since create. */
typedef struct kw_kvmem_admissions {
    uint64_t admitted, waited, never, evict_calls, evicted_for_admission;
    uint64_t cached_tokens_served;   /* prompt tokens that were not prefilled */
} kw_kvmem_admissions;

typedef struct kw_kvmem_stats {
    int32_t pool_blocks, free_blocks, live_blocks, cached_only_blocks;
    int32_t block_tokens;
    uint64_t block_bytes;
    int32_t live_seqs;
    kw_kvmem_admissions adm;
    kw_prefix_cache_stats cache;     /* its max_bytes: the cap in force for KV and checkpoints together */
    bool has_checkpoints;            /* a recurrent model's kvmem */
    int32_t checkpoint_interval;
    kw_state_cache_stats checkpoints;
} kw_kvmem_stats;

typedef struct kw_kvmem kw_kvmem;

/* The pool stays owned by the caller and must outlive the kvmem. */
kw_kvmem *kw_kvmem_create(kw_kv_pool *pool, const kw_kvmem_opts *o, kw_err *err);
void kw_kvmem_destroy(kw_kvmem *m);           /* releases every slot and the cache */

/* Returns the number of prompt tokens already in the KV (0..n-1), or
 * KW_KVMEM_WAIT / KW_KVMEM_NEVER / KW_KVMEM_NOMEM (the slot is left empty,
 * every block and ledger byte given back). */
int32_t kw_kvmem_begin(kw_kvmem *m, int32_t slot, const int32_t *prompt, int32_t n, int32_t n_reserve);
/* The same for a recurrent model: a cached prefix is taken only as far as
 * a checkpoint reaches, and that checkpoint is copied into state (the
 * slot's state, state_bytes). With state NULL nothing cached is reused.
 * *kv_prefix (may be NULL) gets how far the cached KV blocks alone reach:
 * where this prompt branches off what is cached, a checkpoint worth saving. */
int32_t kw_kvmem_begin_state(kw_kvmem *m, int32_t slot, const int32_t *prompt, int32_t n, int32_t n_reserve,
                             float *state, int32_t *kv_prefix);
/* Saves state, which has taken in tokens[0..n), as a checkpoint (a no-op
 * without state_bytes or with the cache off); interior: an interval mark
 * inside a prompt (kw_state_cache_save: evicted first once superseded). */
void kw_kvmem_checkpoint(kw_kvmem *m, const int32_t *tokens, int32_t n, const float *state, bool interior);
int kw_kvmem_ensure(kw_kvmem *m, int32_t slot, int32_t n_positions);
void kw_kvmem_end(kw_kvmem *m, int32_t slot, const int32_t *tokens, int32_t n, bool keep);
/* Prompt tokens kw_kvmem_begin would find cached right now (0..n-1); changes nothing. */
int32_t kw_kvmem_cached_prefix(kw_kvmem *m, const int32_t *prompt, int32_t n);
/* The slot's block table (engine thread only, between begin and end). */
kw_block_table *kw_kvmem_table(kw_kvmem *m, int32_t slot);

/* Prefill tokens between mid-prompt checkpoints (0: none, or not a recurrent model). */
int32_t kw_kvmem_checkpoint_interval(const kw_kvmem *m);
/* Most positions one sequence can ever hold: min(n_ctx, whole pool). */
int32_t kw_kvmem_max_positions(const kw_kvmem *m);
/* Would a sequence of n_positions fit if nothing else were running? */
bool kw_kvmem_could_ever_fit(const kw_kvmem *m, int32_t n_positions);

void kw_kvmem_set_cache_caps(kw_kvmem *m, int32_t max_seqs, uint64_t max_bytes);
/* Would the prompt cache keep anything now (both caps allow at least one block)? */
bool kw_kvmem_caching(kw_kvmem *m);
kw_kvmem_stats kw_kvmem_get_stats(kw_kvmem *m);

/* "Prompt cache: 2 seq, 3.11 GiB, latest 42477 tokens, hit rate 87%" */
const char *kw_kvmem_cache_line(kw_kvmem *m, char *buf, size_t cap);
/* Adds "prompt_cache" (with "entries": the 64 most recently used cached
 * sequences) and "kv_pool" objects to obj (for /v1/memory). */
void kw_kvmem_add_json(kw_kvmem *m, struct cJSON *obj);
/* Appends Prometheus text (kvwise_prompt_cache_*, kvwise_kv_*) to a
 * malloc'd buffer *buf of length *len (grown as needed). Returns 0 or -1. */
int kw_kvmem_metrics(kw_kvmem *m, char **buf, size_t *len);

#endif
