/* kvwise/prefix_cache.h - the prompt cache: a radix tree over KV blocks.
 *
 * When a request finishes, the scheduler inserts its tokens and block
 * table; the cache takes a reference on each block (no copy). A new request
 * asks for the longest cached prefix of its prompt: the matched blocks are
 * pushed (with a reference each) into its block table and only the rest is
 * prefilled. A match may end inside a block; the caller then owns a shared,
 * partially valid last block and must copy it before writing
 * (kw_block_table_cow_last). Both caps - number of cached sequences
 * (leaves) and cached bytes (blocks held only by the cache count fully) -
 * are enforced inside insert() itself and by evict(), so no code path can
 * skip them. Eviction is LRU over leaves: a shared system prompt, being an
 * interior node, outlives the conversations built on it.
 *
 * Hybrid models: a cache entry's per-layer state is either trimmable KV
 * blocks (this tree) or a fixed-size recurrent-state snapshot attached to a
 * node at an exact token count (not trimmable); see docs/MEMORY.md. */
#ifndef KVWISE_PREFIX_CACHE_H
#define KVWISE_PREFIX_CACHE_H
#include "kvwise/common.h"
#include "kvwise/kv.h"

typedef struct kw_prefix_cache kw_prefix_cache;

typedef struct kw_prefix_cache_stats {
    int32_t n_seqs;            /* cached sequences (leaves) */
    int32_t n_blocks;          /* blocks referenced by the cache */
    uint64_t bytes;            /* n_blocks * block bytes */
    int64_t tokens;            /* tokens covered */
    int32_t latest_tokens;     /* length of the most recently inserted sequence */
    uint64_t lookups, hits;    /* hits = lookups that matched > 0 tokens */
    uint64_t tokens_looked_up, tokens_matched;
    uint64_t evicted_seqs, evicted_blocks;
    int32_t max_seqs;          /* the caps in force */
    uint64_t max_bytes;
    uint64_t exclusive_bytes;  /* part of `bytes` held by the cache alone: what clear() would free now */
    uint64_t meta_bytes;       /* tree bookkeeping (nodes, token copies), accounted as KW_MEM_OTHER */
} kw_prefix_cache_stats;

/* One cached sequence (a leaf and its path), for /v1/memory. */
typedef struct kw_prefix_cache_entry {
    int32_t tokens;            /* tokens the path covers */
    int32_t blocks;            /* blocks on the path (shared ones included) */
    int32_t exclusive_blocks;  /* blocks below the last branching point: only this entry holds them */
    uint64_t hits;             /* lookups whose match ended on this path (a match of a shared
                                  system prompt counts for every entry built on it) */
    double idle_s;             /* seconds since the entry was last matched or inserted */
} kw_prefix_cache_entry;

/* max_seqs = 0 or max_bytes = 0 disables the cache (insert keeps nothing). */
kw_prefix_cache *kw_prefix_cache_create(kw_kv_pool *pool, int32_t max_seqs, uint64_t max_bytes);
void kw_prefix_cache_destroy(kw_prefix_cache *c);   /* drops every reference */

/* Longest cached prefix of tokens[0..n), capped at max_match (callers pass
 * n - 1 so the last prompt token is always computed). Appends the matched
 * blocks to `out` (an empty table) with a reference each; returns the
 * number of tokens matched (0 if none). */
int32_t kw_prefix_cache_match(kw_prefix_cache *c, const int32_t *tokens, int32_t n,
                              int32_t max_match, kw_block_table *out);
/* The length kw_prefix_cache_match would return, with no side effect (no
 * reference, no LRU stamp, no statistics). */
int32_t kw_prefix_cache_peek(const kw_prefix_cache *c, const int32_t *tokens, int32_t n, int32_t max_match);
/* Caches a finished sequence: tokens[0..n) whose KV is in table t (which
 * still belongs to the caller; the cache takes its own references). Caps
 * are enforced before returning. */
void kw_prefix_cache_insert(kw_prefix_cache *c, const int32_t *tokens, int32_t n, const kw_block_table *t);
/* Evicts LRU leaves until the pool has at least `free_blocks_wanted` free
 * blocks or the cache holds nothing evictable. Returns blocks freed. */
int32_t kw_prefix_cache_evict(kw_prefix_cache *c, int32_t free_blocks_wanted);
void kw_prefix_cache_clear(kw_prefix_cache *c);
void kw_prefix_cache_set_caps(kw_prefix_cache *c, int32_t max_seqs, uint64_t max_bytes);
/* Do the caps allow keeping anything (max_seqs > 0 and max_bytes >= one block)? */
bool kw_prefix_cache_enabled(const kw_prefix_cache *c);
kw_prefix_cache_stats kw_prefix_cache_get_stats(const kw_prefix_cache *c);
/* The cached sequences, most recently used first: fills at most max and
 * returns how many (n_seqs of the stats says how many there are). */
int32_t kw_prefix_cache_entries(const kw_prefix_cache *c, kw_prefix_cache_entry *out, int32_t max);

/* If the last block of t is shared (refs > 1), replace it with a private
 * copy. Returns -1 if the pool has no free block. */
int kw_block_table_cow_last(kw_block_table *t, kw_kv_pool *p);

#endif
