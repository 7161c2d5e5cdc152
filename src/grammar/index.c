/* index.c - the grammar x vocab index (grammar_index.h) and the token
 * mask computed from it.
 *
 * Build: for every slot, one walk of the vocab trie from the slot's state
 * with a "bottom" frame under it (nothing known about the callers). A
 * prefix the grammar rejects cuts its whole subtree. Tokens read with the
 * bottom frame still alive go to acc; where the bottom frame ends and the
 * next byte may follow its rule, the tokens below are recorded with the
 * offset of the end, and their remaining bytes (suffixes) go into a small
 * trie per slot.
 *
 * Mask: for each head of the matcher, OR the slot's acc (for a LOOP
 * frame, minus the tokens that would start more iterations than its bound
 * leaves), then walk the slot's suffix trie from the head's real parent
 * frames. No step walks the whole vocab: the cost is a few bitmask ORs
 * plus the suffixes that survive the first byte after the rule ends.
 *
 * Slot cache: a rule that calls no other rule (JSON string bodies, most
 * regexes) gives the same walk in every grammar that has it, so the walks
 * of such rules are kept per vocab (gv_cache), keyed by the rule's
 * automaton in a canonical numbering, the slot's state in it, the loop
 * flag and the follow set; a later grammar copies them instead of walking.
 * The cache is bounded (GV_CACHE_BYTES) and locked; it never changes a
 * result, only how fast it is made. */
#include "grammar_index.h"
#include <pthread.h>
#include <stdlib.h>

struct kw_grammar_index {
    const kw_grammar *g;
    const kw_grammar_vocab *v;
    gi_slot *slots;
    uint32_t *pool; uint32_t n_pool, cap_pool;
    gi_ent *ents; uint32_t n_ents, cap_ents;
    gi_sfx *sfx; uint32_t n_sfx, cap_sfx;
    uint32_t n_words;
};

const kw_grammar_vocab *gi_vocab(const kw_grammar_index *ix) { return ix->v; }

void kw_grammar_index_free(kw_grammar_index *ix) {
    if (!ix) return;
    kw_mem_free(ix->slots);
    kw_mem_free(ix->pool);
    kw_mem_free(ix->ents);
    kw_mem_free(ix->sfx);
    kw_mem_free(ix);
}

size_t kw_grammar_index_bytes(const kw_grammar_index *ix) {
    return (size_t)ix->g->n_slots * sizeof(gi_slot) + (size_t)ix->cap_pool * 4 + (size_t)ix->cap_ents * sizeof(gi_ent) +
           (size_t)ix->cap_sfx * sizeof(gi_sfx);
}

/* ---------- per-vocab slot cache ---------- */

#define GV_CACHE_BYTES KW_GRAMMAR_VOCAB_CACHE_BYTES

typedef struct ce {
    uint64_t h;
    uint8_t *key; uint32_t klen;
    gi_slot s;                       /* offsets relative to the arrays below */
    uint32_t *pool; uint32_t n_pool;
    gi_ent *ents; uint32_t n_ents;
    gi_sfx *sfx; uint32_t n_sfx;
    struct ce *next;
} ce;

struct gv_cache {
    pthread_mutex_t mu;
    ce *bucket[1024];
    size_t bytes;
};

void gv_cache_free(struct gv_cache *c) {
    if (!c) return;
    for (int i = 0; i < 1024; i++)
        for (ce *e = c->bucket[i], *n; e; e = n) {
            n = e->next;
            kw_mem_free(e->key); kw_mem_free(e->pool); kw_mem_free(e->ents); kw_mem_free(e->sfx);
            kw_mem_free(e);
        }
    pthread_mutex_destroy(&c->mu);
    kw_mem_free(c);
}

static pthread_mutex_t g_cache_create = PTHREAD_MUTEX_INITIALIZER;

static struct gv_cache *cache_of(const kw_grammar_vocab *cv) {
    kw_grammar_vocab *v = (kw_grammar_vocab *)cv;   /* the cache is the vocab's one mutable, locked part */
    pthread_mutex_lock(&g_cache_create);
    if (!v->cache) {
        struct gv_cache *c = kw_mem_calloc(KW_MEM_OTHER, sizeof *c);
        if (c && pthread_mutex_init(&c->mu, NULL)) { kw_mem_free(c); c = NULL; }
        v->cache = c;
    }
    pthread_mutex_unlock(&g_cache_create);
    return v->cache;
}

static uint64_t key_hash(const uint8_t *k, uint32_t n) {
    uint64_t h = 1469598103934665603ull;
    for (uint32_t i = 0; i < n; i++) h = (h ^ k[i]) * 1099511628211ull;
    return h;
}

/* Copies a cached walk into ix as slot S; 1 hit, 0 miss, -1 out of memory. */
static int cache_get(const kw_grammar_vocab *v, const uint8_t *key, uint32_t klen, kw_grammar_index *ix, gi_slot *S) {
    struct gv_cache *c = cache_of(v);
    if (!c) return 0;
    uint64_t h = key_hash(key, klen);
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    for (ce *e = c->bucket[h & 1023]; e; e = e->next) {
        if (e->h != h || e->klen != klen || memcmp(e->key, key, klen)) continue;
        if (g_reserve((void **)&ix->pool, &ix->cap_pool, (uint64_t)ix->n_pool + e->n_pool + 1, 4) ||
            g_reserve((void **)&ix->ents, &ix->cap_ents, (uint64_t)ix->n_ents + e->n_ents + 1, sizeof(gi_ent)) ||
            g_reserve((void **)&ix->sfx, &ix->cap_sfx, (uint64_t)ix->n_sfx + e->n_sfx + 1, sizeof(gi_sfx))) {
            rc = -1;
            break;
        }
        *S = e->s;
        S->acc_off += ix->n_pool;
        if (S->le_off != G_NONE) S->le_off += ix->n_pool;
        if (S->cf_n) S->cf_off += ix->n_ents;
        S->sfx_off += ix->n_sfx;
        g_copy(ix->pool + ix->n_pool, e->pool, (size_t)e->n_pool * 4);
        g_copy(ix->ents + ix->n_ents, e->ents, (size_t)e->n_ents * sizeof(gi_ent));
        for (uint32_t i = 0; i < e->n_sfx; i++) {
            gi_sfx nd = e->sfx[i];
            nd.end += ix->n_sfx;
            nd.ent_off += ix->n_ents;
            ix->sfx[ix->n_sfx + i] = nd;
        }
        ix->n_pool += e->n_pool;
        ix->n_ents += e->n_ents;
        ix->n_sfx += e->n_sfx;
        rc = 1;
        break;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Keeps the walk just stored in ix (pool/ents/sfx from the given starts) for later grammars. */
static void cache_put(const kw_grammar_vocab *v, const uint8_t *key, uint32_t klen, const kw_grammar_index *ix,
                      const gi_slot *S, uint32_t pool0, uint32_t ents0, uint32_t sfx0) {
    struct gv_cache *c = cache_of(v);
    if (!c) return;
    uint32_t np = ix->n_pool - pool0, ne = ix->n_ents - ents0, nsx = ix->n_sfx - sfx0;
    size_t bytes = sizeof(ce) + klen + (size_t)np * 4 + (size_t)ne * sizeof(gi_ent) + (size_t)nsx * sizeof(gi_sfx);
    pthread_mutex_lock(&c->mu);
    bool room = c->bytes + bytes <= GV_CACHE_BYTES;
    if (room) c->bytes += bytes;
    pthread_mutex_unlock(&c->mu);
    if (!room) return;
    ce *e = kw_mem_calloc(KW_MEM_OTHER, sizeof *e);
    if (!e) goto undo;
    e->key = kw_mem_alloc(KW_MEM_OTHER, klen + 1);
    e->pool = kw_mem_alloc(KW_MEM_OTHER, (size_t)np * 4 + 4);
    e->ents = kw_mem_alloc(KW_MEM_OTHER, (size_t)ne * sizeof(gi_ent) + 8);
    e->sfx = kw_mem_alloc(KW_MEM_OTHER, (size_t)nsx * sizeof(gi_sfx) + 16);
    if (!e->key || !e->pool || !e->ents || !e->sfx) {
        kw_mem_free(e->key); kw_mem_free(e->pool); kw_mem_free(e->ents); kw_mem_free(e->sfx); kw_mem_free(e);
        goto undo;
    }
    e->h = key_hash(key, klen);
    memcpy(e->key, key, klen);
    e->klen = klen;
    e->s = *S;
    e->s.acc_off -= pool0;
    if (e->s.le_off != G_NONE) e->s.le_off -= pool0;
    e->s.cf_off = S->cf_n ? S->cf_off - ents0 : 0;
    e->s.sfx_off -= sfx0;
    if (np) memcpy(e->pool, ix->pool + pool0, (size_t)np * 4);
    if (ne) memcpy(e->ents, ix->ents + ents0, (size_t)ne * sizeof(gi_ent));
    for (uint32_t i = 0; i < nsx; i++) {
        gi_sfx nd = ix->sfx[sfx0 + i];
        nd.end -= sfx0;
        nd.ent_off -= nd.ent_n ? ents0 : nd.ent_off;
        e->sfx[i] = nd;
    }
    e->n_pool = np;
    e->n_ents = ne;
    e->n_sfx = nsx;
    pthread_mutex_lock(&c->mu);
    e->next = c->bucket[e->h & 1023];
    c->bucket[e->h & 1023] = e;
    pthread_mutex_unlock(&c->mu);
    return;
undo:
    pthread_mutex_lock(&c->mu);
    c->bytes -= bytes;
    pthread_mutex_unlock(&c->mu);
}

/* Cache keys: a rule that calls no other rule is described once (loop flag,
   follow set, its states in BFS order with their flags and byte-range
   transitions, canon[] numbering its states); a slot's key is that plus
   the slot state's number. */
typedef struct keys {
    uint8_t *buf; uint32_t n, cap;
    uint32_t *off, *len;     /* per rule: G_NONE = not described yet; len 0 = calls other rules */
    uint32_t *canon;         /* per state: its number in its rule's BFS order */
    uint32_t *order;
} keys;

static int key_put32(keys *K, uint32_t v) {
    if (g_reserve((void **)&K->buf, &K->cap, (uint64_t)K->n + 4, 1)) return -1;
    memcpy(K->buf + K->n, &v, 4);
    K->n += 4;
    return 0;
}

static int describe_rule(const kw_grammar *g, keys *K, uint32_t r) {
    uint32_t s0 = g->rule_start[r], n = 0, head = 0;
    K->off[r] = K->n;
    K->len[r] = 0;
    K->order[n++] = s0;
    K->canon[s0] = 0;
    while (head < n) {
        uint32_t s = K->order[head++];
        if (g->st_ref_n[s]) return 0;   /* calls another rule: no key */
        for (int b = 0; b < 256; b++) {
            int32_t t = g_next(g, s, (uint8_t)b);
            if (t >= 0 && K->canon[t] == G_NONE) { K->canon[t] = n; K->order[n++] = (uint32_t)t; }
        }
    }
    if (key_put32(K, g->rule_loop[r]) || g_reserve((void **)&K->buf, &K->cap, (uint64_t)K->n + 32, 1)) return -1;
    memcpy(K->buf + K->n, g->rule_follow + (size_t)r * 32, 32);
    K->n += 32;
    if (key_put32(K, n)) return -1;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t s = K->order[i];
        if (key_put32(K, g->st_flags[s])) return -1;
        for (int b = 0; b < 256;) {
            int32_t t = g_next(g, s, (uint8_t)b);
            int e = b;
            while (e + 1 < 256 && g_next(g, s, (uint8_t)(e + 1)) == t) e++;
            if (t >= 0 && key_put32(K, (uint32_t)b | (uint32_t)e << 8 | K->canon[t] << 16)) return -1;
            b = e + 1;
        }
        if (key_put32(K, 0xFFFFFFFFu)) return -1;
    }
    K->len[r] = K->n - K->off[r];
    return 0;
}

/* The key of the slot of state s into out (grown as needed); its length, 0
   when the rule calls other rules, or -1 when out of memory. */
static int64_t slot_key(const kw_grammar *g, keys *K, uint32_t s, uint8_t **out, uint32_t *cap) {
    uint32_t r = g->st_rule[s];
    if (K->off[r] == G_NONE && describe_rule(g, K, r)) return -1;
    uint32_t len = K->len[r];
    if (!len) return 0;
    if (g_reserve((void **)out, cap, (uint64_t)len + 4, 1)) return -1;
    memcpy(*out, K->buf + K->off[r], len);
    memcpy(*out + len, &K->canon[s], 4);
    return (int64_t)len + 4;
}

void gm_scratch_free(gm_scratch *s) {
    kw_mem_free(s->tmp); kw_mem_free(s->hb); kw_mem_free(s->doff); kw_mem_free(s->dnodes); kw_mem_free(s->seen);
    memset(s, 0, sizeof *s);
}

/* ---------- build ---------- */

typedef struct ev { uint32_t node, k, c; } ev;
typedef struct se { uint32_t tok, k, c; } se;

typedef struct ib {
    kw_grammar_index *ix;
    const kw_grammar *g;
    const kw_grammar_vocab *v;
    const kw_grammar_limits *lim;
    g_stepper st;
    g_head *hb; uint32_t n_hb, cap_hb;
    uint32_t *doff, *dn, *dnodes;    /* per depth */
    uint8_t *dpop, *dnpc;
    uint32_t *dpc;                   /* 4 per depth */
    gi_ent *acc; uint32_t n_acc, cap_acc;
    ev *evs; uint32_t n_ev, cap_ev;
    se *ses; uint32_t n_se, cap_se;
    uint32_t *open;
    uint64_t steps;
    kw_err *err;
} ib;

static int ib_oom(ib *b) { return kw_err_set(b->err, "grammar index: out of memory"); }

static int check_budget(ib *b) {
    if (b->steps > b->lim->max_index_steps)
        return kw_err_set(b->err, "grammar too complex for this vocab: index precomputation over %llu steps "
                                  "(limit max_index_steps)", (unsigned long long)b->lim->max_index_steps);
    if (kw_grammar_index_bytes(b->ix) > b->lim->max_index_bytes)
        return kw_err_set(b->err, "grammar too complex for this vocab: index over %llu bytes (limit max_index_bytes)",
                          (unsigned long long)b->lim->max_index_bytes);
    return 0;
}

/* Count of the bottom frame under head h (LOOP slots: iterations started). */
static uint32_t bottom_count(const g_stepper *st, g_head h) {
    while (h.par != G_BOTTOM && h.par != G_ROOT) h = st->nodes[h.par];
    return h.cnt;
}

/* One byte from region d-1 into region d; returns heads in region d. */
static int walk_step(ib *b, uint32_t d, uint8_t byte, uint32_t *n_out) {
    const kw_grammar *g = b->g;
    uint32_t p0 = b->doff[d - 1], pn = b->dn[d - 1];
    b->n_hb = p0 + pn;
    b->st.n_nodes = b->dnodes[d - 1];
    b->doff[d] = b->n_hb;
    b->dpop[d] = 0;
    b->dnpc[d] = 0;
    if (pn == 1 && b->hb[p0].par == G_BOTTOM) {   /* fast path: one head on the bottom frame */
        g_head h = b->hb[p0];
        int32_t t = g_next(g, h.st, byte);
        if (t >= 0 && g->st_ref_n[t] == 0) {
            uint32_t cnt = h.cnt;
            if ((g->st_flags[h.st] & ST_ITER) && cnt < 0xFFFF) cnt++;
            uint8_t fl = g->st_flags[t];
            uint32_t n = 0;
            if (fl & ST_BYTES) {
                g_head nh = {(uint32_t)t, cnt, G_BOTTOM, 0};
                if (G_PUSH(b->hb, b->n_hb, b->cap_hb, nh)) return ib_oom(b);
                n = 1;
            }
            if (fl & ST_ACCEPT) {
                b->dpop[d] = 1;
                b->dnpc[d] = 1;
                b->dpc[d * 4] = cnt;
            }
            b->dn[d] = n;
            b->dnodes[d] = b->st.n_nodes;
            *n_out = n;
            return 0;
        }
        if (t < 0) {
            b->dn[d] = 0;
            b->dnodes[d] = b->st.n_nodes;
            *n_out = 0;
            return 0;
        }
    }
    uint32_t before = b->n_hb;
    if (g_step(&b->st, b->hb + p0, pn, byte, &b->hb, &b->n_hb, &b->cap_hb)) {
        if (b->st.overflow)
            return kw_err_set(b->err, "grammar: too ambiguous (more than %u parse stacks; limit max_heads)",
                              g->lim.max_heads);
        return ib_oom(b);
    }
    b->dn[d] = b->n_hb - before;
    b->dnodes[d] = b->st.n_nodes;
    if (b->st.bottom_pop) {
        b->dpop[d] = 1;
        b->dnpc[d] = (uint8_t)b->st.n_bottom_c;
        for (int k = 0; k < b->st.n_bottom_c; k++) b->dpc[d * 4 + k] = b->st.bottom_c[k];
    }
    *n_out = b->dn[d];
    return 0;
}

static int add_events(ib *b, uint32_t node, uint32_t k, uint32_t d) {
    for (int i = 0; i < b->dnpc[d]; i++) {
        ev e = {node, k, b->dpc[d * 4 + i]};
        if (G_PUSH(b->evs, b->n_ev, b->cap_ev, e)) return ib_oom(b);
    }
    return 0;
}

static int cmp_ent_tok(const void *a, const void *b) {
    const gi_ent *x = a, *y = b;
    return x->tok < y->tok ? -1 : x->tok > y->tok;
}
static int cmp_se(const void *a, const void *b, void *ctx) {
    const kw_grammar_vocab *v = ctx;
    const se *x = a, *y = b;
    uint32_t lx = v->len[x->tok] - x->k, ly = v->len[y->tok] - y->k;
    int c = memcmp(v->bytes + v->off[x->tok] + x->k, v->bytes + v->off[y->tok] + y->k, lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    if (x->tok != y->tok) return x->tok < y->tok ? -1 : 1;
    return x->c < y->c ? -1 : x->c > y->c;
}

static int store_acc(ib *b, gi_slot *S, bool loop) {
    kw_grammar_index *ix = b->ix;
    S->n_acc = b->n_acc;
    if ((uint64_t)b->n_acc * 32 > (uint64_t)b->v->n) {   /* many: a bitmask (no sorting needed) */
        S->acc_bits = 1;
        S->acc_off = ix->n_pool;
        S->acc_n = ix->n_words;
        if (g_reserve((void **)&ix->pool, &ix->cap_pool, (uint64_t)ix->n_pool + ix->n_words, 4)) return ib_oom(b);
        memset(ix->pool + ix->n_pool, 0, (size_t)ix->n_words * 4);
        for (uint32_t i = 0; i < b->n_acc; i++) g_bit_set(ix->pool + ix->n_pool, b->acc[i].tok);
        ix->n_pool += ix->n_words;
        S->le_off = G_NONE;
        if (loop) {   /* near a loop's bound most tokens start too many iterations: precomputed masks */
            uint64_t need = (uint64_t)ix->n_pool + (uint64_t)GI_LE * ix->n_words;
            if (g_reserve((void **)&ix->pool, &ix->cap_pool, need, 4)) return ib_oom(b);
            S->le_off = ix->n_pool;
            memset(ix->pool + ix->n_pool, 0, (size_t)GI_LE * ix->n_words * 4);
            for (uint32_t i = 0; i < b->n_acc; i++)
                for (uint32_t k = b->acc[i].c; k < GI_LE; k++)
                    g_bit_set(ix->pool + ix->n_pool + (size_t)k * ix->n_words, b->acc[i].tok);
            ix->n_pool += GI_LE * ix->n_words;
        }
    } else {
        S->le_off = G_NONE;
        if (b->n_acc > 1) qsort(b->acc, b->n_acc, sizeof *b->acc, cmp_ent_tok);
        S->acc_off = ix->n_pool;
        S->acc_n = b->n_acc;
        if (g_reserve((void **)&ix->pool, &ix->cap_pool, (uint64_t)ix->n_pool + b->n_acc + 1, 4)) return ib_oom(b);
        for (uint32_t i = 0; i < b->n_acc; i++) ix->pool[ix->n_pool++] = b->acc[i].tok;
    }
    if (loop) {   /* (token, c >= 1) by c descending: a counting sort (c <= 65535) */
        uint32_t max_c = 0, n = 0;
        for (uint32_t i = 0; i < b->n_acc; i++) {
            if (b->acc[i].c > max_c) max_c = b->acc[i].c;
            n += b->acc[i].c >= 1;
        }
        S->cf_off = ix->n_ents;
        S->cf_n = n;
        S->max_c = max_c;
        if (g_reserve((void **)&ix->ents, &ix->cap_ents, (uint64_t)ix->n_ents + n + 1, sizeof(gi_ent))) return ib_oom(b);
        if (n) {
            uint32_t *start = kw_mem_calloc(KW_MEM_OTHER, ((size_t)max_c + 2) * sizeof *start);
            if (!start) return ib_oom(b);
            for (uint32_t i = 0; i < b->n_acc; i++)
                if (b->acc[i].c >= 1) start[max_c - b->acc[i].c + 1]++;
            for (uint32_t k = 1; k <= max_c + 1; k++) start[k] += start[k - 1];
            gi_ent *dst = ix->ents + ix->n_ents;
            for (uint32_t i = 0; i < b->n_acc; i++)
                if (b->acc[i].c >= 1) dst[start[max_c - b->acc[i].c]++] = b->acc[i];
            kw_mem_free(start);
        }
        ix->n_ents += n;
    }
    return 0;
}

/* The slot's suffix trie from the recorded events. */
static int store_suffixes(ib *b, gi_slot *S) {
    kw_grammar_index *ix = b->ix;
    const kw_grammar_vocab *v = b->v;
    b->n_se = 0;
    for (uint32_t i = 0; i < b->n_ev; i++) {
        const ev *e = &b->evs[i];
        for (uint32_t q = e->node; q < v->te[e->node]; q++) {
            for (int32_t t = v->tt[q]; t >= 0; t = v->same_next[t]) {
                se x = {(uint32_t)t, e->k, e->c};
                if (G_PUSH(b->ses, b->n_se, b->cap_se, x)) return ib_oom(b);
            }
        }
        b->steps += v->te[e->node] - e->node;
    }
    S->sfx_off = ix->n_sfx;
    S->sfx_n = 0;
    if (!b->n_se) return 0;
    qsort_r(b->ses, b->n_se, sizeof *b->ses, cmp_se, (void *)v);
    uint32_t depth = 0;
    const uint8_t *prev = NULL;
    uint32_t prev_len = 0;
    for (uint32_t i = 0; i < b->n_se; i++) {
        const se *x = &b->ses[i];
        const uint8_t *s = v->bytes + v->off[x->tok] + x->k;
        uint32_t len = v->len[x->tok] - x->k;
        uint32_t lcp = 0;
        while (lcp < len && lcp < prev_len && s[lcp] == prev[lcp]) lcp++;
        while (depth > lcp) ix->sfx[b->open[--depth]].end = ix->n_sfx;
        for (uint32_t d = lcp; d < len; d++) {
            gi_sfx nd = {0, 0, 0, (uint16_t)(d + 1), s[d]};
            if (G_PUSH(ix->sfx, ix->n_sfx, ix->cap_sfx, nd)) return ib_oom(b);
            b->open[depth++] = ix->n_sfx - 1;
        }
        gi_sfx *node = &ix->sfx[b->open[len - 1]];
        if (!node->ent_n) node->ent_off = ix->n_ents;
        gi_ent en = {x->tok, x->c};
        if (G_PUSH(ix->ents, ix->n_ents, ix->cap_ents, en)) return ib_oom(b);
        node->ent_n++;
        prev = s;
        prev_len = len;
    }
    while (depth > 0) ix->sfx[b->open[--depth]].end = ix->n_sfx;
    S->sfx_n = ix->n_sfx - S->sfx_off;
    return 0;
}

static int build_slot(ib *b, uint32_t state, gi_slot *S) {
    const kw_grammar *g = b->g;
    const kw_grammar_vocab *v = b->v;
    uint32_t rule = g->st_rule[state];
    bool loop = g->rule_loop[rule];
    const uint8_t *follow = g->rule_follow + (size_t)rule * 32;
    b->n_acc = b->n_ev = 0;
    b->st.n_nodes = 0;
    b->n_hb = 0;
    g_head h0 = {state, 0, G_BOTTOM, 0};
    if (G_PUSH(b->hb, b->n_hb, b->cap_hb, h0)) return ib_oom(b);
    b->doff[0] = 0; b->dn[0] = 1; b->dnodes[0] = 0; b->dpop[0] = 0; b->dnpc[0] = 0;
    uint32_t i = 0;
    while (i < v->n_nodes) {
        uint32_t d = v->td[i];
        if (b->dpop[d - 1] && g_bitset_has(follow, v->tb[i]) && add_events(b, i, d - 1, d - 1)) return -1;
        uint32_t n = 0;
        if (walk_step(b, d, v->tb[i], &n)) return -1;
        b->steps++;
        if ((b->steps & 0xFFFF) == 0 && check_budget(b)) return -1;
        if (v->tt[i] >= 0 && (n > 0 || (b->dpop[d] && !loop))) {
            uint32_t c = 0;
            if (loop && n > 0) {
                c = 0xFFFFFFFFu;
                for (uint32_t k = 0; k < n; k++) {
                    uint32_t bc = bottom_count(&b->st, b->hb[b->doff[d] + k]);
                    if (bc < c) c = bc;
                }
            }
            for (int32_t t = v->tt[i]; t >= 0; t = v->same_next[t]) {
                gi_ent e = {(uint32_t)t, c};
                if (G_PUSH(b->acc, b->n_acc, b->cap_acc, e)) return ib_oom(b);
            }
        }
        if (n == 0) {
            if (b->dpop[d])
                for (uint32_t j = i + 1; j < v->te[i]; j = v->te[j])
                    if (g_bitset_has(follow, v->tb[j]) && add_events(b, j, d, d)) return -1;
            i = v->te[i];
        } else {
            i++;
        }
    }
    if (store_acc(b, S, loop) || store_suffixes(b, S)) return -1;
    return check_budget(b);
}

kw_grammar_index *kw_grammar_index_new(const kw_grammar *g, const kw_grammar_vocab *v, const kw_grammar_limits *lim,
                                       kw_err *err) {
    kw_grammar_limits dl;
    if (!lim) { kw_grammar_limits_default(&dl); lim = &dl; }
    ib b;
    memset(&b, 0, sizeof b);
    b.g = g; b.v = v; b.lim = lim; b.err = err;
    kw_grammar_index *ix = kw_mem_calloc(KW_MEM_OTHER, sizeof *ix);
    if (!ix) { kw_err_set(err, "grammar index: out of memory"); return NULL; }
    b.ix = ix;
    ix->g = g;
    ix->v = v;
    ix->n_words = ((uint32_t)v->n + 31) / 32;
    uint32_t maxd = v->max_len + 2;
    ix->slots = kw_mem_calloc(KW_MEM_OTHER, ((size_t)g->n_slots + 1) * sizeof *ix->slots);
    uint8_t *done = kw_mem_calloc(KW_MEM_OTHER, (size_t)g->n_slots + 1);
    uint8_t *key = NULL;
    uint32_t cap_key = 0;
    keys K = {0};
    b.doff = kw_mem_alloc(KW_MEM_OTHER, (size_t)maxd * sizeof(uint32_t));
    b.dn = kw_mem_alloc(KW_MEM_OTHER, (size_t)maxd * sizeof(uint32_t));
    b.dnodes = kw_mem_alloc(KW_MEM_OTHER, (size_t)maxd * sizeof(uint32_t));
    b.dpop = kw_mem_alloc(KW_MEM_OTHER, maxd);
    b.dnpc = kw_mem_alloc(KW_MEM_OTHER, maxd);
    b.dpc = kw_mem_alloc(KW_MEM_OTHER, (size_t)maxd * 4 * sizeof(uint32_t));
    b.open = kw_mem_alloc(KW_MEM_OTHER, (size_t)maxd * sizeof(uint32_t));
    int rc = -1;
    if (!ix->slots || !done || !b.doff || !b.dn || !b.dnodes || !b.dpop || !b.dnpc || !b.dpc || !b.open ||
        g_stepper_init(&b.st, g)) {
        kw_err_set(err, "grammar index: out of memory");
        goto out;
    }
    K.canon = kw_mem_alloc(KW_MEM_OTHER, ((size_t)g->n_states + 1) * sizeof *K.canon);
    K.order = kw_mem_alloc(KW_MEM_OTHER, ((size_t)g->n_states + 1) * sizeof *K.order);
    K.off = kw_mem_alloc(KW_MEM_OTHER, ((size_t)g->n_rules + 1) * sizeof *K.off);
    K.len = kw_mem_alloc(KW_MEM_OTHER, ((size_t)g->n_rules + 1) * sizeof *K.len);
    if (!K.canon || !K.order || !K.off || !K.len) { kw_err_set(err, "grammar index: out of memory"); goto out; }
    for (uint32_t s = 0; s < g->n_states; s++) K.canon[s] = G_NONE;
    for (uint32_t r = 0; r < g->n_rules; r++) K.off[r] = G_NONE;
    for (uint32_t s = 0; s < g->n_states; s++) {
        uint32_t slot = g->st_slot[s];
        if (slot == G_NONE || done[slot]) continue;
        done[slot] = 1;
        int64_t kl = slot_key(g, &K, s, &key, &cap_key);
        if (kl < 0) { kw_err_set(err, "grammar index: out of memory"); goto out; }
        uint32_t klen = (uint32_t)kl;
        if (klen) {
            int hit = cache_get(v, key, klen, ix, &ix->slots[slot]);
            if (hit < 0) { kw_err_set(err, "grammar index: out of memory"); goto out; }
            if (hit) continue;
        }
        uint32_t pool0 = ix->n_pool, ents0 = ix->n_ents, sfx0 = ix->n_sfx;
        if (build_slot(&b, s, &ix->slots[slot])) goto out;
        if (klen) cache_put(v, key, klen, ix, &ix->slots[slot], pool0, ents0, sfx0);
    }
    rc = 0;
out:
    kw_mem_free(done);
    kw_mem_free(key);
    kw_mem_free(K.buf); kw_mem_free(K.off); kw_mem_free(K.len); kw_mem_free(K.canon); kw_mem_free(K.order);
    kw_mem_free(b.doff); kw_mem_free(b.dn); kw_mem_free(b.dnodes); kw_mem_free(b.dpop); kw_mem_free(b.dnpc);
    kw_mem_free(b.dpc); kw_mem_free(b.open);
    kw_mem_free(b.hb); kw_mem_free(b.acc); kw_mem_free(b.evs); kw_mem_free(b.ses);
    g_stepper_free(&b.st);
    if (rc) {
        kw_grammar_index_free(ix);
        return NULL;
    }
    return ix;
}

/* ---------- mask ---------- */

static int scr_depth(gm_scratch *s, uint32_t need) {
    if (g_reserve((void **)&s->doff, &s->cap_doff, need * 2, sizeof(uint32_t))) return -1;
    if (g_reserve((void **)&s->dnodes, &s->cap_dnodes, need, sizeof(uint32_t))) return -1;
    return 0;
}

static bool seen_once(gm_scratch *s, uint64_t a, uint64_t b) {
    for (uint32_t i = 0; i + 1 < s->n_seen; i += 2)
        if (s->seen[i] == a && s->seen[i + 1] == b) return true;
    if (G_PUSH(s->seen, s->n_seen, s->cap_seen, a) || G_PUSH(s->seen, s->n_seen, s->cap_seen, b)) return false;
    return false;
}

static void or_acc(const kw_grammar_index *ix, const gi_slot *S, uint32_t *dst) {
    const uint32_t *p = ix->pool + S->acc_off;
    if (S->acc_bits)
        for (uint32_t w = 0; w < ix->n_words; w++) dst[w] |= p[w];
    else
        for (uint32_t i = 0; i < S->acc_n; i++) g_bit_set(dst, p[i]);
}

static int apply_acc(const kw_grammar_index *ix, const gi_slot *S, uint32_t limit, uint32_t *mask, gm_scratch *scr) {
    if (!S->n_acc) return 0;
    if (limit == G_INF || limit >= S->max_c) {
        or_acc(ix, S, mask);
        return 0;
    }
    if (limit < GI_LE && S->le_off != G_NONE) {
        const uint32_t *p = ix->pool + S->le_off + (size_t)limit * ix->n_words;
        for (uint32_t w = 0; w < ix->n_words; w++) mask[w] |= p[w];
        return 0;
    }
    if (g_reserve((void **)&scr->tmp, &scr->cap_tmp, ix->n_words, 4)) return -1;
    memset(scr->tmp, 0, (size_t)ix->n_words * 4);
    or_acc(ix, S, scr->tmp);
    const gi_ent *cf = ix->ents + S->cf_off;
    for (uint32_t i = 0; i < S->cf_n && cf[i].c > limit; i++)
        scr->tmp[cf[i].tok >> 5] &= ~(1u << (cf[i].tok & 31));
    for (uint32_t w = 0; w < ix->n_words; w++) mask[w] |= scr->tmp[w];
    return 0;
}

/* Walks slot S's suffix trie from the frames under head h. */
static int walk_suffixes(const kw_grammar_index *ix, const gi_slot *S, const g_head *h, g_stepper *st,
                         gm_scratch *scr, uint32_t *mask) {
    const kw_grammar *g = ix->g;
    uint32_t r = g->st_rule[h->st];
    scr->n_hb = 0;
    if (g_pop(st, h, &scr->hb, &scr->n_hb, &scr->cap_hb)) return -1;
    if (!scr->n_hb) return 0;
    if (scr_depth(scr, ix->v->max_len + 2)) return -1;
    uint32_t *doff = scr->doff, *dn = scr->doff + scr->cap_doff / 2, *dnodes = scr->dnodes;
    doff[0] = 0;
    dn[0] = scr->n_hb;
    dnodes[0] = st->n_nodes;
    uint32_t i = S->sfx_off, end = S->sfx_off + S->sfx_n;
    while (i < end) {
        const gi_sfx *nd = &ix->sfx[i];
        uint32_t d = nd->depth;
        scr->n_hb = doff[d - 1] + dn[d - 1];
        st->n_nodes = dnodes[d - 1];
        doff[d] = scr->n_hb;
        if (g_step(st, scr->hb + doff[d - 1], dn[d - 1], nd->byte, &scr->hb, &scr->n_hb, &scr->cap_hb)) return -1;
        dn[d] = scr->n_hb - doff[d];
        dnodes[d] = st->n_nodes;
        if ((dn[d] || st->can_end) && nd->ent_n) {
            for (uint32_t k = 0; k < nd->ent_n; k++) {
                const gi_ent *e = &ix->ents[nd->ent_off + k];
                uint64_t total = (uint64_t)h->cnt + e->c;
                if (g->rule_loop[r] && (total < g->rule_min[r] || (g->rule_max[r] != G_INF && total > g->rule_max[r])))
                    continue;
                g_bit_set(mask, e->tok);
            }
        }
        i = dn[d] ? i + 1 : nd->end;
    }
    return 0;
}

int32_t kw_grammar_mask(kw_grammar_matcher *m, uint32_t *mask, kw_err *err) {
    const kw_grammar_index *ix = gm_index(m);
    if (!ix) return kw_err_set(err, "grammar: kw_grammar_mask needs a matcher made with an index");
    const kw_grammar *g = ix->g;
    memset(mask, 0, (size_t)ix->n_words * 4);
    if (gm_done(m)) return 0;
    uint32_t nh;
    const g_head *heads = gm_heads(m, &nh);
    gm_scratch *scr = gm_scr(m);
    g_stepper *st = gm_stepper(m);
    uint32_t mark = st->n_nodes;
    scr->n_seen = 0;
    int rc = 0;
    for (uint32_t i = 0; i < nh && !rc; i++) {
        const g_head *h = &heads[i];
        uint32_t slot = g->st_slot[h->st];
        const gi_slot *S = &ix->slots[slot];
        uint32_t r = g->st_rule[h->st];
        uint32_t limit = G_INF;
        if (g->rule_loop[r] && g->rule_max[r] != G_INF) limit = g->rule_max[r] - h->cnt;
        if (!seen_once(scr, (uint64_t)slot << 1, limit)) rc = apply_acc(ix, S, limit, mask, scr);
        if (!rc && S->sfx_n && !seen_once(scr, ((uint64_t)slot << 1) | 1, ((uint64_t)h->par << 32) | h->cnt))
            rc = walk_suffixes(ix, S, h, st, scr, mask);
    }
    st->n_nodes = mark;
    if (rc) return kw_err_set(err, st->overflow ? "grammar: too ambiguous (limit max_heads)" : "grammar: out of memory");
    if (kw_grammar_can_end(m))
        for (uint32_t i = 0; i < ix->v->n_eog; i++) g_bit_set(mask, (uint32_t)ix->v->eog[i]);
    int32_t count = 0;
    for (uint32_t w = 0; w < ix->n_words; w++) count += __builtin_popcount(mask[w]);
    return count;
}

void kw_grammar_mask_apply(const uint32_t *mask, float *logits, int32_t n_vocab) {
    for (int32_t i = 0; i < n_vocab; i++)
        if (!((mask[i >> 5] >> (i & 31)) & 1u)) logits[i] = -__builtin_inff();
}
