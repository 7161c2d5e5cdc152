/* kvwise/state_cache.h - saved recurrent states: the checkpoints that let a
 * hybrid model (gated delta net layers, model.h kw_rec_state) resume from
 * the prompt cache.
 *
 * A recurrent state cannot be cut back to an earlier position, so the KV
 * blocks of a cached prefix are of use only up to a position where the
 * whole recurrent state was saved. This store keeps such states, each with
 * the exact tokens it has taken in: an entry for tokens[0..n) is found only
 * by a prompt that starts with those n tokens (compared token by token, no
 * hash to collide). Entries are evicted least recently used first, to keep
 * both caps (entries, bytes) at every insert; a state's bytes are one
 * accounted block (KW_MEM_KV) and its tokens are counted in the bytes too.
 * The caller (kvmem.c) serialises the calls. */
#ifndef KVWISE_STATE_CACHE_H
#define KVWISE_STATE_CACHE_H
#include "kvwise/common.h"

typedef struct kw_state_cache kw_state_cache;

typedef struct kw_state_cache_stats {
    int32_t entries, max_entries;
    uint64_t bytes, max_bytes;      /* states + their token copies */
    uint64_t saves, hits, evicted;
    int32_t longest;                /* tokens of the longest entry */
} kw_state_cache_stats;

/* state_bytes: one state (kw_hparams.rec_state_bytes). */
kw_state_cache *kw_state_cache_create(size_t state_bytes, int32_t max_entries, uint64_t max_bytes);
void kw_state_cache_destroy(kw_state_cache *c);
/* What one entry of n tokens costs. */
uint64_t kw_state_cache_entry_bytes(const kw_state_cache *c, int32_t n);
/* Saves a copy of state, which has taken in tokens[0..n) (an entry with the
 * same tokens is refreshed instead). interior: an interval mark inside a
 * prompt, superseded (evicted before any other entry) once a later save
 * extends it. Evicts to keep the caps: superseded entries first, then the
 * least recently used; returns 0, or -1 when it keeps nothing (caps too
 * small for one entry, or out of memory). */
int kw_state_cache_save(kw_state_cache *c, const int32_t *tokens, int32_t n, const float *state, bool interior);
/* The longest entry whose tokens are prompt[0..n) with n <= max_n (0: none). */
int32_t kw_state_cache_longest(const kw_state_cache *c, const int32_t *prompt, int32_t max_n);
/* Copies the entry for prompt[0..n) into dst and marks it used: 0, or -1 if
 * there is none. */
int kw_state_cache_restore(kw_state_cache *c, const int32_t *prompt, int32_t n, float *dst);
/* Evicts the entry that goes first (superseded, else least recently used);
 * false when there is none. */
bool kw_state_cache_evict_oldest(kw_state_cache *c);
/* New caps; evicts LRU entries down to them. */
void kw_state_cache_set_caps(kw_state_cache *c, int32_t max_entries, uint64_t max_bytes);
kw_state_cache_stats kw_state_cache_get_stats(const kw_state_cache *c);

#endif
