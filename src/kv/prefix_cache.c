/* prefix_cache.c - the prompt cache (prefix_cache.h): a radix tree over KV blocks.
 *
 * Owns: the tree of cached token blocks, their references on pool blocks,
 * the two caps (sequences = leaves, bytes = referenced blocks x block bytes),
 * LRU eviction over leaves, the cache statistics, and kw_block_table_cow_last.
 *
 * Shape: every node below the root stands for one KV block and holds the
 * tokens of that block (block_tokens of them, or fewer for a partial block,
 * which is always a leaf). A path from the root spells a cached token
 * prefix. Children are found by the XXH3 hash of a full block and confirmed
 * by comparing the tokens; a partial match inside a block is found by the
 * longest common token prefix. Invariant: no child's tokens are a prefix of
 * a sibling's (insert upgrades a partial leaf instead of adding a sibling).
 *
 * LRU: a logical clock stamps every node on a matched or inserted path with
 * the same value, so an interior node (a shared system prompt) is always at
 * least as recent as any leaf below it; eviction removes the leaf with the
 * oldest stamp, one block at a time, so a whole conversation goes back to
 * its branching point before a more recently used one is touched, and the
 * shared prefix goes last. The number of leaves is bounded by the sequence
 * cap, so finding the LRU leaf is a scan over a short list. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "kvwise/prefix_cache.h"
#include "kvwise/memory.h"
#include <string.h>

typedef struct pc_node {
    struct pc_node *parent;
    struct pc_node **kids;
    int32_t n_kids, cap_kids;
    struct pc_node *leaf_prev, *leaf_next;  /* in the leaf list while a leaf */
    uint64_t hash;                          /* XXH3 of tokens[0..n_tok) */
    uint64_t stamp;                         /* LRU clock at last use */
    double used_s;                          /* monotonic seconds at last use (what /v1/memory shows) */
    uint64_t hits;                          /* lookups whose match ended in this node */
    int32_t block;                          /* pool block id (-1 for the root) */
    int32_t n_tok;                          /* 1..block_tokens */
    int32_t tokens[];                       /* block_tokens slots */
} pc_node;

struct kw_prefix_cache {
    kw_kv_pool *pool;
    int32_t bt;                             /* tokens per block */
    int32_t max_seqs;
    uint64_t max_bytes;
    pc_node root;                           /* no tokens, no block */
    pc_node *leaves;                        /* head of the leaf list */
    int32_t n_leaves;
    int32_t n_nodes;                        /* = blocks referenced */
    int64_t n_tokens;
    uint64_t clock;
    double now_s;                           /* monotonic seconds of the operation in progress */
    uint64_t meta_bytes;                    /* node bookkeeping (accounted) */
    kw_prefix_cache_stats st;
};

/* ---- small helpers ---------------------------------------------------- */


static void stamp_node(kw_prefix_cache *c, pc_node *n, uint64_t stamp) {
    n->stamp = stamp;
    n->used_s = c->now_s;
}

static uint64_t hash_tokens(const int32_t *t, int32_t n) {
    return XXH3_64bits(t, (size_t)n * sizeof(int32_t));
}

static int32_t common_prefix(const int32_t *a, const int32_t *b, int32_t n) {
    int32_t i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

static size_t node_size(const kw_prefix_cache *c) {
    return sizeof(pc_node) + (size_t)c->bt * sizeof(int32_t);
}

static bool is_leaf(const pc_node *n) { return n->n_kids == 0; }

static void leaf_link(kw_prefix_cache *c, pc_node *n) {
    n->leaf_prev = NULL;
    n->leaf_next = c->leaves;
    if (c->leaves) c->leaves->leaf_prev = n;
    c->leaves = n;
    c->n_leaves++;
}

static void leaf_unlink(kw_prefix_cache *c, pc_node *n) {
    if (n->leaf_prev) n->leaf_prev->leaf_next = n->leaf_next;
    else c->leaves = n->leaf_next;
    if (n->leaf_next) n->leaf_next->leaf_prev = n->leaf_prev;
    n->leaf_prev = n->leaf_next = NULL;
    c->n_leaves--;
}

static uint64_t cache_bytes(const kw_prefix_cache *c) {
    return (uint64_t)c->n_nodes * (uint64_t)c->pool->block_bytes;
}

static bool over_caps(const kw_prefix_cache *c) {
    return c->n_leaves > c->max_seqs || cache_bytes(c) > c->max_bytes;
}

static bool cache_enabled(const kw_prefix_cache *c) {
    return c->max_seqs > 0 && c->max_bytes >= (uint64_t)c->pool->block_bytes;
}

bool kw_prefix_cache_enabled(const kw_prefix_cache *c) { return c && cache_enabled(c); }

/* ---- node lifetime ---------------------------------------------------- */

/* Adds a child holding `block` (the cache takes its own reference).
 * Returns NULL when bookkeeping memory is short (the cache keeps what it has). */
static pc_node *add_child(kw_prefix_cache *c, pc_node *parent, const int32_t *tok, int32_t n_tok, int32_t block) {
    if (parent->n_kids == parent->cap_kids) {
        int32_t cap = parent->cap_kids ? parent->cap_kids * 2 : 4;
        pc_node **k = kw_mem_alloc(KW_MEM_OTHER, (size_t)cap * sizeof *k);
        if (!k) return NULL;
        if (parent->n_kids) memcpy(k, parent->kids, (size_t)parent->n_kids * sizeof *k);
        c->meta_bytes += (uint64_t)(cap - parent->cap_kids) * sizeof *k;
        kw_mem_free(parent->kids);
        parent->kids = k;
        parent->cap_kids = cap;
    }
    pc_node *n = kw_mem_calloc(KW_MEM_OTHER, node_size(c));
    if (!n) return NULL;
    c->meta_bytes += node_size(c);
    n->parent = parent;
    n->block = block;
    n->n_tok = n_tok;
    memcpy(n->tokens, tok, (size_t)n_tok * sizeof(int32_t));
    n->hash = hash_tokens(tok, n_tok);
    stamp_node(c, n, c->clock);
    kw_kv_ref(c->pool, block);
    if (parent != &c->root && is_leaf(parent)) leaf_unlink(c, parent);
    parent->kids[parent->n_kids++] = n;
    leaf_link(c, n);
    c->n_nodes++;
    c->n_tokens += n_tok;
    return n;
}

/* Replaces a partial leaf's block and tokens by a longer version of them. */
static void upgrade_leaf(kw_prefix_cache *c, pc_node *n, const int32_t *tok, int32_t n_tok, int32_t block) {
    kw_kv_ref(c->pool, block);
    kw_kv_unref(c->pool, n->block);
    n->block = block;
    c->n_tokens += n_tok - n->n_tok;
    n->n_tok = n_tok;
    memcpy(n->tokens, tok, (size_t)n_tok * sizeof(int32_t));
    n->hash = hash_tokens(tok, n_tok);
}

/* Removes a leaf and drops its block reference. Returns 1 if the block went
 * back to the pool's free list. */
static int remove_leaf(kw_prefix_cache *c, pc_node *n) {
    pc_node *p = n->parent;
    for (int32_t i = 0; i < p->n_kids; i++) {
        if (p->kids[i] == n) { p->kids[i] = p->kids[--p->n_kids]; break; }
    }
    leaf_unlink(c, n);
    int freed = c->pool->refs[n->block] == 1;
    kw_kv_unref(c->pool, n->block);
    c->n_nodes--;
    c->n_tokens -= n->n_tok;
    c->st.evicted_blocks++;
    if (p != &c->root && is_leaf(p)) leaf_link(c, p);  /* parent keeps its own stamp */
    else c->st.evicted_seqs++;                         /* a whole branch is gone */
    if (p->n_kids == 0 && p->kids) {
        c->meta_bytes -= (uint64_t)p->cap_kids * sizeof(pc_node *);
        kw_mem_free(p->kids);
        p->kids = NULL;
        p->cap_kids = 0;
    }
    c->meta_bytes -= node_size(c);
    kw_mem_free(n);
    return freed;
}

/* The least recently used leaf; with `only_exclusive`, only leaves whose
 * block is held by the cache alone (evicting one frees a pool block now). */
static pc_node *lru_leaf(const kw_prefix_cache *c, bool only_exclusive) {
    pc_node *best = NULL;
    for (pc_node *n = c->leaves; n; n = n->leaf_next) {
        if (only_exclusive && c->pool->refs[n->block] != 1) continue;
        if (!best || n->stamp < best->stamp) best = n;
    }
    return best;
}

static void enforce_caps(kw_prefix_cache *c) {
    while (c->n_leaves > 0 && over_caps(c)) remove_leaf(c, lru_leaf(c, false));
}

/* ---- public API ------------------------------------------------------- */

kw_prefix_cache *kw_prefix_cache_create(kw_kv_pool *pool, int32_t max_seqs, uint64_t max_bytes) {
    if (!pool || pool->lay.block_tokens <= 0) return NULL;
    kw_prefix_cache *c = kw_mem_calloc(KW_MEM_OTHER, sizeof *c);
    if (!c) return NULL;
    c->pool = pool;
    c->bt = pool->lay.block_tokens;
    c->max_seqs = max_seqs < 0 ? 0 : max_seqs;
    c->max_bytes = max_bytes;
    c->root.block = -1;
    c->meta_bytes = sizeof *c;
    return c;
}

void kw_prefix_cache_clear(kw_prefix_cache *c) {
    if (!c) return;
    while (c->leaves) {
        uint64_t es = c->st.evicted_seqs, eb = c->st.evicted_blocks;
        remove_leaf(c, c->leaves);
        c->st.evicted_seqs = es;       /* clearing is not eviction */
        c->st.evicted_blocks = eb;
    }
}

void kw_prefix_cache_destroy(kw_prefix_cache *c) {
    if (!c) return;
    kw_prefix_cache_clear(c);
    kw_mem_free(c->root.kids);
    kw_mem_free(c);
}

/* The child of node matching the most of q[0..r) (r <= block tokens): a
 * full block found by its hash, else the longest common prefix. *got = the
 * tokens it matches (0 and NULL if none). */
static pc_node *best_child(const kw_prefix_cache *c, const pc_node *node, const int32_t *q, int32_t r, int32_t *got) {
    pc_node *best = NULL;
    int32_t best_len = 0;
    uint64_t h = r == c->bt ? hash_tokens(q, r) : 0;
    for (int32_t i = 0; i < node->n_kids; i++) {
        pc_node *k = node->kids[i];
        if (r == c->bt && k->n_tok == c->bt && k->hash == h &&
            memcmp(k->tokens, q, (size_t)r * sizeof(int32_t)) == 0) { *got = r; return k; }
        int32_t l = common_prefix(k->tokens, q, r < k->n_tok ? r : k->n_tok);
        if (l > best_len) { best_len = l; best = k; }
    }
    *got = best_len;
    return best;
}

int32_t kw_prefix_cache_match(kw_prefix_cache *c, const int32_t *tokens, int32_t n,
                              int32_t max_match, kw_block_table *out) {
    if (!c || !tokens || !out || n <= 0) return 0;
    c->st.lookups++;
    c->st.tokens_looked_up += (uint64_t)n;
    int32_t limit = max_match < n ? max_match : n;
    if (limit <= 0 || c->n_nodes == 0) return 0;
    uint64_t stamp = ++c->clock;
    c->now_s = kw_mono_s();
    pc_node *node = &c->root, *last = NULL;
    int32_t matched = 0;
    while (matched < limit && node->n_kids > 0) {
        int32_t r = limit - matched < c->bt ? limit - matched : c->bt, got = 0;
        pc_node *k = best_child(c, node, tokens + matched, r, &got);
        if (!k || got == 0) break;
        if (kw_block_table_push(out, k->block) != 0) break;
        kw_kv_ref(c->pool, k->block);
        stamp_node(c, k, stamp);
        last = k;
        matched += got;
        if (got < c->bt) break;   /* ended inside this block */
        node = k;
    }
    for (pc_node *p = node; p != &c->root; p = p->parent) stamp_node(c, p, stamp);
    if (matched > 0) {
        last->hits++;
        c->st.hits++;
        c->st.tokens_matched += (uint64_t)matched;
    }
    return matched;
}

int32_t kw_prefix_cache_peek(const kw_prefix_cache *c, const int32_t *tokens, int32_t n, int32_t max_match) {
    if (!c || !tokens || n <= 0) return 0;
    int32_t limit = max_match < n ? max_match : n, matched = 0;
    const pc_node *node = &c->root;
    while (matched < limit && node->n_kids > 0) {
        int32_t r = limit - matched < c->bt ? limit - matched : c->bt, got = 0;
        const pc_node *k = best_child(c, node, tokens + matched, r, &got);
        if (!k || got == 0) break;
        matched += got;
        if (got < c->bt) break;
        node = k;
    }
    return matched;
}

void kw_prefix_cache_insert(kw_prefix_cache *c, const int32_t *tokens, int32_t n, const kw_block_table *t) {
    if (!c || !tokens || !t || n <= 0) return;
    if (!cache_enabled(c)) { enforce_caps(c); return; }
    /* Never take more blocks than the byte cap allows: the tail of a
     * sequence longer than the cache is dropped at once (KV is trimmable). */
    uint64_t cap_blocks = c->max_bytes / (uint64_t)c->pool->block_bytes;
    int32_t n_blocks = (n + c->bt - 1) / c->bt;
    if (n_blocks > t->n) n_blocks = t->n;
    if ((uint64_t)n_blocks > cap_blocks) n_blocks = (int32_t)cap_blocks;
    if (n > n_blocks * c->bt) n = n_blocks * c->bt;
    c->clock++;
    c->now_s = kw_mono_s();
    pc_node *node = &c->root;
    for (int32_t b = 0; b < n_blocks; b++) {
        const int32_t *q = tokens + (size_t)b * c->bt;
        int32_t r = n - b * c->bt < c->bt ? n - b * c->bt : c->bt;
        int32_t id = t->ids[b];
        if (id < 0 || id >= c->pool->n_blocks || c->pool->refs[id] <= 0) break;  /* not a live block */
        uint64_t h = hash_tokens(q, r);
        pc_node *next = NULL;
        for (int32_t i = 0; i < node->n_kids && !next; i++) {
            pc_node *k = node->kids[i];
            if (k->n_tok == r && k->hash == h && memcmp(k->tokens, q, (size_t)r * sizeof(int32_t)) == 0)
                next = k;                                            /* same block: dedup */
            else if (k->n_tok > r && common_prefix(k->tokens, q, r) == r)
                next = k;                                            /* already covered */
            else if (k->n_tok < r && common_prefix(k->tokens, q, k->n_tok) == k->n_tok) {
                upgrade_leaf(c, k, q, r, id);                        /* extends a partial leaf */
                next = k;
            }
        }
        if (!next) next = add_child(c, node, q, r, id);
        if (!next) break;
        stamp_node(c, next, c->clock);
        if (next->n_tok < c->bt) break;
        node = next;
    }
    c->st.latest_tokens = n;
    enforce_caps(c);
}

int32_t kw_prefix_cache_evict(kw_prefix_cache *c, int32_t free_blocks_wanted) {
    if (!c) return 0;
    int32_t freed = 0;
    while (c->pool->n_free < free_blocks_wanted) {
        pc_node *n = lru_leaf(c, true);
        if (!n) break;
        freed += remove_leaf(c, n);
    }
    return freed;
}

void kw_prefix_cache_set_caps(kw_prefix_cache *c, int32_t max_seqs, uint64_t max_bytes) {
    if (!c) return;
    c->max_seqs = max_seqs < 0 ? 0 : max_seqs;
    c->max_bytes = max_bytes;
    enforce_caps(c);
}

static uint64_t exclusive_blocks(const kw_prefix_cache *c, const pc_node *n) {
    uint64_t b = n->block >= 0 && c->pool->refs[n->block] == 1;
    for (int32_t i = 0; i < n->n_kids; i++) b += exclusive_blocks(c, n->kids[i]);
    return b;
}

kw_prefix_cache_stats kw_prefix_cache_get_stats(const kw_prefix_cache *c) {
    kw_prefix_cache_stats s;
    memset(&s, 0, sizeof s);
    if (!c) return s;
    s = c->st;
    s.n_seqs = c->n_leaves;
    s.n_blocks = c->n_nodes;
    s.bytes = cache_bytes(c);
    s.tokens = c->n_tokens;
    s.max_seqs = c->max_seqs;
    s.max_bytes = c->max_bytes;
    s.exclusive_bytes = exclusive_blocks(c, &c->root) * (uint64_t)c->pool->block_bytes;
    s.meta_bytes = c->meta_bytes;
    return s;
}

/* One leaf's entry: its path's tokens and blocks, the blocks only it holds
 * (below the last branching point), the hits of its path. */
static kw_prefix_cache_entry leaf_entry(const kw_prefix_cache *c, const pc_node *leaf, double now) {
    kw_prefix_cache_entry e = {0};
    bool shared = false;
    for (const pc_node *p = leaf; p != &c->root; p = p->parent) {
        if (p != leaf && p->n_kids > 1) shared = true;
        e.tokens += p->n_tok;
        e.blocks++;
        e.exclusive_blocks += !shared;
        e.hits += p->hits;
    }
    e.idle_s = now > leaf->used_s ? now - leaf->used_s : 0;
    return e;
}

int32_t kw_prefix_cache_entries(const kw_prefix_cache *c, kw_prefix_cache_entry *out, int32_t max) {
    if (!c || max <= 0) return 0;
    double now = kw_mono_s();
    int32_t n = 0;
    for (const pc_node *l = c->leaves; l; l = l->leaf_next) {
        kw_prefix_cache_entry e = leaf_entry(c, l, now);
        int32_t at = n;                    /* most recently used first: insertion into the top max */
        while (at > 0 && out[at - 1].idle_s > e.idle_s) at--;
        if (at >= max) continue;
        int32_t keep = n < max ? n : max - 1;
        memmove(out + at + 1, out + at, sizeof *out * (size_t)(keep - at));
        out[at] = e;
        if (n < max) n++;
    }
    return n;
}

int kw_block_table_cow_last(kw_block_table *t, kw_kv_pool *p) {
    if (!t || !p || t->n <= 0) return 0;
    int32_t id = t->ids[t->n - 1];
    if (p->refs[id] <= 1) return 0;
    int32_t fresh = kw_kv_alloc(p);
    if (fresh < 0) return -1;
    kw_kv_block_copy(p, fresh, id);
    kw_kv_unref(p, id);
    t->ids[t->n - 1] = fresh;
    return 0;
}
