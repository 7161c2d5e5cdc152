/* test_prefix_cache.c - unit tests of the prompt cache (prefix_cache.h):
 * radix match/insert on shared and divergent prefixes, partial blocks,
 * copy-on-write of the last block, refcounts back to zero after clear and
 * destroy, both caps under random insert sequences (fixed seed), eviction
 * order (leaf before shared prefix, LRU), evict() accounting, max_match. */
#include "testutil.h"
#include "kvwise/prefix_cache.h"
#include <string.h>

#define BT 4          /* tokens per block: small so partial blocks are common */
#define POOL_BLOCKS 256

static kw_kv_pool *make_pool(int32_t n_blocks) {
    kw_kv_layout lay = {.n_layer = 1, .n_head_kv = 1, .head_dim_k = 4, .head_dim_v = 4,
                        .type = 0 /* f32 */, .block_tokens = BT};
    kw_err err;
    kw_kv_pool *p = kw_kv_pool_create(&lay, n_blocks, &err);
    if (!p) { fprintf(stderr, "pool: %s\n", err.msg); exit(1); }
    return p;
}

/* A block's K and V regions of every layer and head (kv.h: not one run of bytes). */
static void fill_block(kw_kv_pool *p, int32_t id, int byte) {
    size_t kb = (size_t)BT * p->k_row_bytes, vb = (size_t)BT * p->v_row_bytes;
    for (int32_t l = 0; l < p->lay.n_layer; l++)
        for (int32_t h = 0; h < p->lay.n_head_kv; h++) {
            memset(kw_kv_k(p, id, l, h, 0), byte, kb);
            memset(kw_kv_v(p, id, l, h, 0), byte, vb);
        }
}
static bool same_block(kw_kv_pool *p, int32_t a, int32_t b) {
    size_t kb = (size_t)BT * p->k_row_bytes, vb = (size_t)BT * p->v_row_bytes;
    bool same = true;
    for (int32_t l = 0; l < p->lay.n_layer; l++)
        for (int32_t h = 0; h < p->lay.n_head_kv; h++) {
            same &= memcmp(kw_kv_k(p, a, l, h, 0), kw_kv_k(p, b, l, h, 0), kb) == 0;
            same &= memcmp(kw_kv_v(p, a, l, h, 0), kw_kv_v(p, b, l, h, 0), vb) == 0;
        }
    return same;
}

/* A live sequence the way the scheduler would run it: match the cache,
 * copy the shared last block if the match ended inside it, allocate the
 * rest, "compute" KV (a byte pattern per block), and later insert it. */
typedef struct { int32_t *tok; int32_t n; kw_block_table t; int32_t cached; } seq;

static int seq_run(seq *s, kw_prefix_cache *c, kw_kv_pool *p, const int32_t *tok, int32_t n) {
    memset(s, 0, sizeof *s);
    s->tok = malloc((size_t)n * sizeof(int32_t));
    memcpy(s->tok, tok, (size_t)n * sizeof(int32_t));
    s->n = n;
    s->cached = c ? kw_prefix_cache_match(c, tok, n, n - 1, &s->t) : 0;
    if (s->cached % BT != 0 && kw_block_table_cow_last(&s->t, p) != 0) return -1;
    if (kw_block_table_ensure(&s->t, p, n) != 0) return -1;
    for (int32_t b = s->cached / BT; b < s->t.n; b++)
        fill_block(p, s->t.ids[b], (int)(tok[b * BT] & 0x7f));
    return 0;
}

static void seq_done(seq *s, kw_kv_pool *p) {
    kw_block_table_release(&s->t, p);
    kw_block_table_free(&s->t);
    free(s->tok);
}

static void fill(int32_t *t, int32_t n, int32_t start) {
    for (int32_t i = 0; i < n; i++) t[i] = start + i;
}

static int32_t pool_refs_total(const kw_kv_pool *p) {
    int32_t s = 0;
    for (int32_t i = 0; i < p->n_blocks; i++) s += p->refs[i];
    return s;
}

static void test_shared_and_divergent(void) {
    kw_kv_pool *p = make_pool(POOL_BLOCKS);
    kw_prefix_cache *c = kw_prefix_cache_create(p, 8, (uint64_t)1 << 30);
    int32_t a[10]; fill(a, 10, 100);
    seq s;
    KW_CHECK(seq_run(&s, c, p, a, 10) == 0);
    KW_CHECK_EQ_INT(s.cached, 0);
    kw_prefix_cache_insert(c, s.tok, s.n, &s.t);
    kw_prefix_cache_stats st = kw_prefix_cache_get_stats(c);
    KW_CHECK_EQ_INT(st.n_seqs, 1);
    KW_CHECK_EQ_INT(st.n_blocks, 3);           /* 4 + 4 + 2 (partial leaf) */
    KW_CHECK_EQ_INT(st.tokens, 10);
    KW_CHECK_EQ_INT(st.latest_tokens, 10);
    KW_CHECK_EQ_INT(st.bytes, 3 * p->block_bytes);
    int32_t ids_a[3]; memcpy(ids_a, s.t.ids, sizeof ids_a);
    KW_CHECK_EQ_INT(p->refs[ids_a[0]], 2);     /* the live table + the cache: no copy */
    seq_done(&s, p);
    KW_CHECK_EQ_INT(p->refs[ids_a[0]], 1);
    KW_CHECK_EQ_INT(kw_prefix_cache_get_stats(c).exclusive_bytes, 3 * p->block_bytes);

    /* The same prompt again: full hit except the last token, same blocks. */
    kw_block_table out = {0};
    KW_CHECK_EQ_INT(kw_prefix_cache_match(c, a, 10, 9, &out), 9);
    KW_CHECK_EQ_INT(out.n, 3);
    KW_CHECK(out.n == 3 && out.ids[0] == ids_a[0] && out.ids[1] == ids_a[1] && out.ids[2] == ids_a[2]);
    KW_CHECK_EQ_INT(p->refs[ids_a[0]], 2);
    kw_block_table_release(&out, p);
    KW_CHECK_EQ_INT(kw_prefix_cache_match(c, a, 10, 10, &out), 10);
    kw_block_table_release(&out, p);

    /* Divergent at token 6 (inside block 1): token-level match of 6. */
    int32_t b[12]; fill(b, 12, 100); for (int i = 6; i < 12; i++) b[i] = 900 + i;
    KW_CHECK(seq_run(&s, c, p, b, 12) == 0);
    KW_CHECK_EQ_INT(s.cached, 6);
    KW_CHECK_EQ_INT(s.t.ids[0], ids_a[0]);     /* block 0 shared */
    KW_CHECK(s.t.ids[1] != ids_a[1]);          /* block 1 copied before writing */
    KW_CHECK_EQ_INT(p->refs[ids_a[1]], 1);     /* the copy dropped its shared reference */
    KW_CHECK(same_block(p, s.t.ids[1], ids_a[1]));
    kw_prefix_cache_insert(c, s.tok, s.n, &s.t);
    st = kw_prefix_cache_get_stats(c);
    KW_CHECK_EQ_INT(st.n_seqs, 2);
    KW_CHECK_EQ_INT(st.n_blocks, 5);           /* shared block 0, then 2 + 2 on each branch */
    KW_CHECK_EQ_INT(st.tokens, 4 + 6 + 8);
    KW_CHECK_EQ_INT(p->refs[ids_a[0]], 2);     /* one reference for the cache, however many paths */
    seq_done(&s, p);

    KW_CHECK_EQ_INT(kw_prefix_cache_match(c, b, 12, 11, &out), 11);
    kw_block_table_release(&out, p);
    KW_CHECK_EQ_INT(kw_prefix_cache_match(c, a, 10, 9, &out), 9);
    kw_block_table_release(&out, p);
    int32_t z[5] = {1, 2, 3, 4, 5};
    KW_CHECK_EQ_INT(kw_prefix_cache_match(c, z, 5, 4, &out), 0);
    KW_CHECK_EQ_INT(out.n, 0);
    st = kw_prefix_cache_get_stats(c);
    KW_CHECK_EQ_INT(st.lookups, 7);            /* two in seq_run, five here */
    KW_CHECK_EQ_INT(st.hits, 5);
    kw_block_table_free(&out);

    /* The entries /v1/memory shows: a (used last) first; block 0 is shared;
     * a's path holds the hits that ended in it (three on its leaf, b's first
     * lookup inside its block 1), b's the one on its leaf. */
    kw_prefix_cache_entry ent[4];
    KW_CHECK_EQ_INT(kw_prefix_cache_entries(c, ent, 4), 2);
    KW_CHECK(ent[0].tokens == 10 && ent[0].blocks == 3 && ent[0].exclusive_blocks == 2 && ent[0].hits == 4);
    KW_CHECK(ent[1].tokens == 12 && ent[1].blocks == 3 && ent[1].exclusive_blocks == 2 && ent[1].hits == 1);
    KW_CHECK(ent[0].idle_s <= ent[1].idle_s && ent[0].idle_s >= 0);
    KW_CHECK_EQ_INT(kw_prefix_cache_entries(c, ent, 1), 1);    /* only the most recent fits */
    KW_CHECK_EQ_INT(ent[0].tokens, 10);

    kw_prefix_cache_destroy(c);
    KW_CHECK_EQ_INT(p->n_free, POOL_BLOCKS);
    KW_CHECK_EQ_INT(pool_refs_total(p), 0);
    kw_kv_pool_destroy(p);
}

static void test_partial_blocks(void) {
    kw_kv_pool *p = make_pool(POOL_BLOCKS);
    kw_prefix_cache *c = kw_prefix_cache_create(p, 8, (uint64_t)1 << 30);
    int32_t t[14]; fill(t, 14, 7);
    seq s;
    /* turn 1: 6 tokens (one full block + a 2-token partial leaf) */
    KW_CHECK(seq_run(&s, c, p, t, 6) == 0);
    kw_prefix_cache_insert(c, s.tok, s.n, &s.t);
    seq_done(&s, p);
    KW_CHECK_EQ_INT(kw_prefix_cache_get_stats(c).n_blocks, 2);
    /* turn 2 extends turn 1: matches 6 tokens (ends inside block 1), the
     * partial leaf is upgraded in place, the count stays 1 sequence. */
    KW_CHECK(seq_run(&s, c, p, t, 14) == 0);
    KW_CHECK_EQ_INT(s.cached, 6);
    kw_prefix_cache_insert(c, s.tok, s.n, &s.t);
    kw_prefix_cache_stats st = kw_prefix_cache_get_stats(c);
    KW_CHECK_EQ_INT(st.n_seqs, 1);
    KW_CHECK_EQ_INT(st.n_blocks, 4);
    KW_CHECK_EQ_INT(st.tokens, 14);
    seq_done(&s, p);
    KW_CHECK_EQ_INT(p->n_free, POOL_BLOCKS - 4);   /* the replaced partial block went back */
    /* a prefix of a cached sequence adds nothing */
    KW_CHECK(seq_run(&s, c, p, t, 5) == 0);
    kw_prefix_cache_insert(c, s.tok, s.n, &s.t);
    st = kw_prefix_cache_get_stats(c);
    KW_CHECK_EQ_INT(st.n_seqs, 1);
    KW_CHECK_EQ_INT(st.n_blocks, 4);
    KW_CHECK_EQ_INT(st.latest_tokens, 5);
    seq_done(&s, p);
    /* a sibling partial leaf with different tokens inside the last block */
    int32_t u[6]; fill(u, 6, 7); u[5] = 999;
    KW_CHECK(seq_run(&s, c, p, u, 6) == 0);
    KW_CHECK_EQ_INT(s.cached, 5);
    kw_prefix_cache_insert(c, s.tok, s.n, &s.t);
    KW_CHECK_EQ_INT(kw_prefix_cache_get_stats(c).n_seqs, 2);
    seq_done(&s, p);
    kw_block_table out = {0};
    KW_CHECK_EQ_INT(kw_prefix_cache_match(c, u, 6, 6, &out), 6);
    kw_block_table_release(&out, p);
    kw_block_table_free(&out);

    kw_prefix_cache_clear(c);
    st = kw_prefix_cache_get_stats(c);
    KW_CHECK_EQ_INT(st.n_seqs, 0);
    KW_CHECK_EQ_INT(st.n_blocks, 0);
    KW_CHECK_EQ_INT(st.tokens, 0);
    KW_CHECK_EQ_INT(st.bytes, 0);
    KW_CHECK_EQ_INT(p->n_free, POOL_BLOCKS);
    KW_CHECK_EQ_INT(pool_refs_total(p), 0);
    kw_prefix_cache_destroy(c);
    kw_kv_pool_destroy(p);
}

static void test_max_match_and_cow(void) {
    kw_kv_pool *p = make_pool(8);
    kw_prefix_cache *c = kw_prefix_cache_create(p, 4, (uint64_t)1 << 30);
    int32_t t[16]; fill(t, 16, 1);
    seq s;
    KW_CHECK(seq_run(&s, c, p, t, 16) == 0);
    kw_prefix_cache_insert(c, s.tok, s.n, &s.t);
    seq_done(&s, p);
    KW_CHECK_EQ_INT(p->n_free, 4);
    /* peek: the same lengths as match, with no reference, stamp or statistic */
    kw_prefix_cache_stats st0 = kw_prefix_cache_get_stats(c);
    KW_CHECK_EQ_INT(kw_prefix_cache_peek(c, t, 16, 15), 15);
    KW_CHECK_EQ_INT(kw_prefix_cache_peek(c, t, 16, 5), 5);
    KW_CHECK_EQ_INT(kw_prefix_cache_peek(c, t, 16, 0), 0);
    int32_t other[6]; fill(other, 6, 1); other[5] = 999;
    KW_CHECK_EQ_INT(kw_prefix_cache_peek(c, other, 6, 6), 5);   /* diverges inside block 1 */
    KW_CHECK_EQ_INT(kw_prefix_cache_get_stats(c).lookups, st0.lookups);
    KW_CHECK_EQ_INT(p->n_free, 4);
    for (int32_t b = 0; b < p->n_blocks; b++) KW_CHECK(p->refs[b] <= 1);
    kw_block_table out = {0};
    KW_CHECK_EQ_INT(kw_prefix_cache_match(c, t, 16, 0, &out), 0);
    KW_CHECK_EQ_INT(kw_prefix_cache_match(c, t, 16, -3, &out), 0);
    KW_CHECK_EQ_INT(out.n, 0);
    KW_CHECK_EQ_INT(kw_prefix_cache_match(c, t, 16, 5, &out), 5);
    KW_CHECK_EQ_INT(out.n, 2);                 /* capped inside block 1 */
    int32_t shared = out.ids[1];
    KW_CHECK_EQ_INT(p->refs[shared], 2);
    KW_CHECK(kw_block_table_cow_last(&out, p) == 0);
    KW_CHECK(out.ids[1] != shared);
    KW_CHECK_EQ_INT(p->refs[out.ids[1]], 1);
    KW_CHECK_EQ_INT(p->refs[shared], 1);
    KW_CHECK(same_block(p, out.ids[1], shared));
    int32_t priv = out.ids[1];
    KW_CHECK(kw_block_table_cow_last(&out, p) == 0);   /* private already: no copy */
    KW_CHECK_EQ_INT(out.ids[1], priv);
    KW_CHECK_EQ_INT(p->n_free, 3);
    kw_block_table_release(&out, p);
    KW_CHECK_EQ_INT(kw_prefix_cache_match(c, t, 16, 15, &out), 15);
    KW_CHECK_EQ_INT(out.n, 4);
    /* pool exhausted: the copy fails cleanly and the table is unchanged */
    int32_t hog[4];
    for (int i = 0; i < 4; i++) hog[i] = kw_kv_alloc(p);
    KW_CHECK_EQ_INT(p->n_free, 0);
    int32_t last = out.ids[3];
    KW_CHECK_EQ_INT(kw_block_table_cow_last(&out, p), -1);
    KW_CHECK_EQ_INT(out.ids[3], last);
    for (int i = 0; i < 4; i++) kw_kv_unref(p, hog[i]);
    kw_block_table_release(&out, p);
    kw_block_table_free(&out);
    /* a shorter query than any block still matches token by token */
    KW_CHECK_EQ_INT(kw_prefix_cache_match(c, t, 3, 3, &out), 3);
    kw_block_table_release(&out, p);
    kw_block_table_free(&out);
    kw_prefix_cache_destroy(c);
    KW_CHECK_EQ_INT(p->n_free, 8);
    kw_kv_pool_destroy(p);
}

/* Leaves go before the shared prefix they hang from; among leaves, LRU. */
static void test_eviction_order(void) {
    kw_kv_pool *p = make_pool(64);
    kw_prefix_cache *c = kw_prefix_cache_create(p, 16, (uint64_t)1 << 30);
    int32_t sys[8]; fill(sys, 8, 500);               /* system prompt: 2 blocks */
    int32_t conv[3][16];
    for (int k = 0; k < 3; k++) { memcpy(conv[k], sys, sizeof sys); fill(conv[k] + 8, 8, 1000 * (k + 1)); }
    seq s;
    /* The system prompt alone is cached first (oldest insert of all). */
    KW_CHECK(seq_run(&s, c, p, sys, 8) == 0);
    kw_prefix_cache_insert(c, s.tok, s.n, &s.t);
    seq_done(&s, p);
    for (int k = 0; k < 3; k++) {
        KW_CHECK(seq_run(&s, c, p, conv[k], 16) == 0);
        KW_CHECK_EQ_INT(s.cached, 8);
        kw_prefix_cache_insert(c, s.tok, s.n, &s.t);
        seq_done(&s, p);
    }
    kw_prefix_cache_stats st = kw_prefix_cache_get_stats(c);
    KW_CHECK_EQ_INT(st.n_seqs, 3);
    KW_CHECK_EQ_INT(st.n_blocks, 2 + 3 * 2);
    /* conversation 0 is used again: conversation 1 becomes the LRU one */
    kw_block_table out = {0};
    KW_CHECK_EQ_INT(kw_prefix_cache_match(c, conv[0], 16, 15, &out), 15);
    kw_block_table_release(&out, p);

    /* Cap to 2 sequences: conversation 1 goes, not the older system prompt. */
    kw_prefix_cache_set_caps(c, 2, (uint64_t)1 << 30);
    st = kw_prefix_cache_get_stats(c);
    KW_CHECK_EQ_INT(st.n_seqs, 2);
    KW_CHECK_EQ_INT(st.n_blocks, 6);
    KW_CHECK_EQ_INT(st.evicted_seqs, 1);
    KW_CHECK_EQ_INT(st.evicted_blocks, 2);
    KW_CHECK_EQ_INT(kw_prefix_cache_match(c, conv[1], 16, 15, &out), 8);   /* only the prompt */
    kw_block_table_release(&out, p);
    KW_CHECK_EQ_INT(kw_prefix_cache_match(c, conv[0], 16, 15, &out), 15);
    kw_block_table_release(&out, p);

    /* evict() for 2 more free blocks: conversation 2 (LRU now), exactly 2 blocks. */
    int32_t before = p->n_free;
    int32_t freed = kw_prefix_cache_evict(c, before + 2);
    KW_CHECK_EQ_INT(freed, 2);
    KW_CHECK_EQ_INT(p->n_free, before + 2);
    KW_CHECK_EQ_INT(kw_prefix_cache_match(c, conv[2], 16, 15, &out), 8);
    kw_block_table_release(&out, p);
    KW_CHECK_EQ_INT(kw_prefix_cache_match(c, conv[0], 16, 15, &out), 15);
    kw_block_table_release(&out, p);
    /* Next, conversation 0's own blocks go before the system prompt. */
    freed = kw_prefix_cache_evict(c, p->n_free + 2);
    KW_CHECK_EQ_INT(freed, 2);
    KW_CHECK_EQ_INT(kw_prefix_cache_match(c, conv[0], 16, 15, &out), 8);
    kw_block_table_release(&out, p);
    st = kw_prefix_cache_get_stats(c);
    KW_CHECK_EQ_INT(st.n_seqs, 1);
    KW_CHECK_EQ_INT(st.n_blocks, 2);

    /* A block also held by a live sequence frees nothing: evict() skips it
     * and reports only what really went back to the pool. */
    seq live;
    KW_CHECK(seq_run(&live, c, p, sys, 8) == 0);  /* holds block 0 (and a copy of block 1) */
    before = p->n_free;
    freed = kw_prefix_cache_evict(c, p->n_blocks);
    KW_CHECK_EQ_INT(freed, p->n_free - before);
    KW_CHECK_EQ_INT(freed, 1);                    /* block 1 (cache-only); block 0 is live */
    st = kw_prefix_cache_get_stats(c);
    KW_CHECK_EQ_INT(st.n_blocks, 1);
    seq_done(&live, p);
    KW_CHECK_EQ_INT(kw_prefix_cache_evict(c, p->n_blocks), 1);
    KW_CHECK_EQ_INT(kw_prefix_cache_evict(c, p->n_blocks), 0);   /* nothing left */
    KW_CHECK_EQ_INT(p->n_free, p->n_blocks);
    kw_block_table_free(&out);
    kw_prefix_cache_destroy(c);
    kw_kv_pool_destroy(p);
}

/* A tiny deterministic PRNG (fixed seed => the same sequence every run). */
static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint32_t rng(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

/* Property: under random inserts (shared system prompts, multi-turn
 * extensions, unrelated prompts) and random cap changes, after every
 * insert n_seqs <= max_seqs and bytes <= max_bytes, and every pool
 * reference is accounted for by the cache or a live table. */
static void test_caps_property(void) {
    kw_kv_pool *p = make_pool(512);
    const uint64_t bb = p->block_bytes;
    int32_t max_seqs = 3;
    uint64_t max_bytes = 10 * bb + bb / 2;   /* not a multiple of the block size */
    kw_prefix_cache *c = kw_prefix_cache_create(p, max_seqs, max_bytes);
    int32_t sys[3][12];
    for (int k = 0; k < 3; k++) fill(sys[k], 12, 10000 * (k + 1));
    int32_t hist[8][64]; int32_t hist_n[8] = {0};
    int violations = 0, hits = 0, bad_refs = 0;
    for (int it = 0; it < 600; it++) {
        int32_t tok[64]; int32_t n;
        int kind = (int)(rng() % 3), h = (int)(rng() % 8);
        if (kind == 0 && hist_n[h] > 0 && hist_n[h] < 56) {          /* next turn */
            n = hist_n[h] + 1 + (int32_t)(rng() % 8);
            memcpy(tok, hist[h], (size_t)hist_n[h] * sizeof(int32_t));
            for (int32_t i = hist_n[h]; i < n; i++) tok[i] = (int32_t)(rng() % 50);
        } else if (kind == 1) {                                          /* shared system prompt */
            n = 13 + (int32_t)(rng() % 40);
            memcpy(tok, sys[rng() % 3], sizeof sys[0]);
            for (int32_t i = 12; i < n; i++) tok[i] = (int32_t)(rng() % 50);
        } else {                                                         /* unrelated */
            n = 1 + (int32_t)(rng() % 60);
            for (int32_t i = 0; i < n; i++) tok[i] = (int32_t)(rng() % 50);
        }
        memcpy(hist[h], tok, (size_t)n * sizeof(int32_t));
        hist_n[h] = n;
        seq s;
        if (seq_run(&s, c, p, tok, n) != 0) { violations++; break; }
        hits += s.cached > 0;
        kw_prefix_cache_insert(c, s.tok, s.n, &s.t);
        kw_prefix_cache_stats st = kw_prefix_cache_get_stats(c);
        if (st.n_seqs > max_seqs || st.bytes > max_bytes) violations++;
        if (pool_refs_total(p) != st.n_blocks + s.t.n) bad_refs++;
        seq_done(&s, p);
        if (it % 97 == 96) {                                   /* caps change at run time */
            max_seqs = 1 + (int32_t)(rng() % 5);
            max_bytes = (uint64_t)(rng() % 20) * bb + (rng() % 2 ? bb / 3 : 0);
            kw_prefix_cache_set_caps(c, max_seqs, max_bytes);
            st = kw_prefix_cache_get_stats(c);
            if (st.n_seqs > max_seqs || st.bytes > max_bytes) violations++;
        }
    }
    KW_CHECK_EQ_INT(violations, 0);
    KW_CHECK_EQ_INT(bad_refs, 0);
    /* the workload is built to share prefixes: a cache that stops matching fails here */
    KW_CHECK_MSG(hits > 60, "only %d of 600 requests hit the cache", hits);
    kw_prefix_cache_stats st = kw_prefix_cache_get_stats(c);
    KW_CHECK(st.evicted_blocks > 0);
    kw_prefix_cache_destroy(c);
    KW_CHECK_EQ_INT(p->n_free, 512);
    KW_CHECK_EQ_INT(pool_refs_total(p), 0);
    kw_kv_pool_destroy(p);
}

/* Property with live sequences: some requests stay running while others
 * finish, insert, and evict() is called for admission. After every step the
 * pool's references are exactly the cache's blocks plus the live tables'
 * entries, evict() reports exactly the blocks that reached the free list,
 * and the caps hold. */
static void test_live_sharing_property(void) {
    kw_kv_pool *p = make_pool(256);
    kw_prefix_cache *c = kw_prefix_cache_create(p, 4, 40 * p->block_bytes);
    seq live[6];
    bool used[6] = {false};
    int32_t sys[10]; fill(sys, 10, 4242);
    int bad_refs = 0, bad_evict = 0, bad_caps = 0, steps = 0;
    for (int it = 0; it < 400; it++) {
        int k = (int)(rng() % 6);
        if (used[k]) {                                   /* finish it: offer to the cache */
            kw_prefix_cache_insert(c, live[k].tok, live[k].n, &live[k].t);
            seq_done(&live[k], p);
            used[k] = false;
        } else {                                         /* start one, sharing the system prompt half the time */
            int32_t tok[48]; int32_t n = 11 + (int32_t)(rng() % 37);
            for (int32_t i = 0; i < n; i++) tok[i] = (int32_t)(rng() % 20);
            if (rng() % 2) memcpy(tok, sys, sizeof sys);
            if (seq_run(&live[k], c, p, tok, n) == 0) used[k] = true;
            else seq_done(&live[k], p);
        }
        if (it % 5 == 0) {
            int32_t before = p->n_free;
            int32_t freed = kw_prefix_cache_evict(c, p->n_free + 1 + (int32_t)(rng() % 6));
            if (freed != p->n_free - before) bad_evict++;
        }
        kw_prefix_cache_stats st = kw_prefix_cache_get_stats(c);
        int32_t live_refs = 0;
        for (int j = 0; j < 6; j++) if (used[j]) live_refs += live[j].t.n;
        if (pool_refs_total(p) != st.n_blocks + live_refs) bad_refs++;
        if (st.n_seqs > 4 || st.bytes > 40 * p->block_bytes) bad_caps++;
        steps++;
    }
    KW_CHECK_EQ_INT(steps, 400);
    KW_CHECK_EQ_INT(bad_refs, 0);
    KW_CHECK_EQ_INT(bad_evict, 0);
    KW_CHECK_EQ_INT(bad_caps, 0);
    for (int j = 0; j < 6; j++) if (used[j]) seq_done(&live[j], p);
    kw_prefix_cache_destroy(c);
    KW_CHECK_EQ_INT(p->n_free, 256);
    KW_CHECK_EQ_INT(pool_refs_total(p), 0);
    kw_kv_pool_destroy(p);
}

static void test_disabled_and_byte_trim(void) {
    kw_kv_pool *p = make_pool(32);
    int32_t t[40]; fill(t, 40, 3);
    seq s;
    /* max_seqs = 0: the cache keeps nothing */
    kw_prefix_cache *c = kw_prefix_cache_create(p, 0, (uint64_t)1 << 30);
    KW_CHECK(seq_run(&s, c, p, t, 40) == 0);
    kw_prefix_cache_insert(c, s.tok, s.n, &s.t);
    KW_CHECK_EQ_INT(kw_prefix_cache_get_stats(c).n_blocks, 0);
    seq_done(&s, p);
    kw_prefix_cache_destroy(c);
    /* a byte cap below one block keeps nothing either */
    c = kw_prefix_cache_create(p, 4, p->block_bytes - 1);
    KW_CHECK(seq_run(&s, c, p, t, 40) == 0);
    kw_prefix_cache_insert(c, s.tok, s.n, &s.t);
    KW_CHECK_EQ_INT(kw_prefix_cache_get_stats(c).bytes, 0);
    seq_done(&s, p);
    kw_prefix_cache_destroy(c);
    KW_CHECK_EQ_INT(p->n_free, 32);
    /* a sequence longer than the byte cap keeps its head (3 blocks) */
    c = kw_prefix_cache_create(p, 4, 3 * p->block_bytes);
    KW_CHECK(seq_run(&s, c, p, t, 40) == 0);
    kw_prefix_cache_insert(c, s.tok, s.n, &s.t);
    kw_prefix_cache_stats st = kw_prefix_cache_get_stats(c);
    KW_CHECK_EQ_INT(st.n_blocks, 3);
    KW_CHECK_EQ_INT(st.tokens, 12);
    seq_done(&s, p);
    kw_block_table out = {0};
    KW_CHECK_EQ_INT(kw_prefix_cache_match(c, t, 40, 39, &out), 12);
    kw_block_table_release(&out, p);
    kw_block_table_free(&out);
    /* bad input never crashes: a table with bogus ids, NULLs, n <= 0 */
    kw_block_table bogus = {0};
    kw_block_table_push(&bogus, 31); kw_block_table_push(&bogus, -5);
    int32_t other[8]; fill(other, 8, 77777);
    kw_prefix_cache_insert(c, other, 8, &bogus);        /* block 31 is free: not a live block */
    kw_prefix_cache_insert(c, NULL, 8, &bogus);
    kw_prefix_cache_insert(c, other, 0, &bogus);
    kw_prefix_cache_insert(c, other, 8, NULL);
    KW_CHECK_EQ_INT(kw_prefix_cache_match(c, NULL, 4, 4, &out), 0);
    KW_CHECK_EQ_INT(kw_prefix_cache_get_stats(c).n_blocks, 3);
    kw_block_table_free(&bogus);
    kw_prefix_cache_destroy(c);
    KW_CHECK_EQ_INT(p->n_free, 32);
    kw_kv_pool_destroy(p);
}

int main(void) {
    test_shared_and_divergent();
    test_partial_blocks();
    test_max_match_and_cow();
    test_eviction_order();
    test_caps_property();
    test_live_sharing_property();
    test_disabled_and_byte_trim();
    return kw_test_finish();
}
