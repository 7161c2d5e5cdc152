/* compile.c - IR -> automaton (struct kw_grammar).
 *
 * Steps: (1) every rule's expression becomes a Thompson NFA over byte
 * ranges (code point classes are split into UTF-8 byte-range sequences)
 * with call edges; a bounded repetition is unrolled when it is small and
 * narrow, otherwise its body becomes a LOOP rule of its own; (2) the byte
 * boundaries of all NFAs give the byte classes; (3) each rule is
 * determinized (subset construction; call edges are letters like bytes);
 * (4) LOOP rules are rewired (the body's ends go back to its start, which
 * counts iterations); (5) states that can never complete and states that
 * cannot be reached are dropped; the root must be able to complete;
 * (6) nullable rules, left recursion (rejected: the stepper would push
 * forever), the bytes that may follow each rule's end; (7) rules with
 * identical automata share index slots.
 *
 * Every size is bounded by kw_grammar_limits; exceeding one is an error
 * naming it. */
#include "gram_internal.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

enum { E_EPS = 0, E_BYTE = 1, E_REF = 2 };
typedef struct nedge { uint32_t next, to, rule; uint8_t kind, lo, hi; } nedge;

typedef struct cc {
    gram_ir *ir;
    kw_err *err;
    /* NFA */
    uint32_t *nfirst; uint32_t n_ns, cap_ns;
    nedge *edges; uint32_t n_edges, cap_edges;
    uint32_t *r_nstart, *r_nend;   /* per IR rule */
    uint32_t cap_r;
    uint8_t bound[257];            /* byte class boundaries */
    /* DFA (global) */
    kw_grammar *g;
    uint32_t cap_st;
    int32_t *trans;
    uint32_t *st_rule; uint8_t *st_flags;
    uint32_t *sref_off, *sref_n;   /* refs per state in tmp list */
    g_ref *refs; uint32_t n_refs, cap_refs;
    uint8_t *dead;
    uint32_t n_st;
    uint32_t depth;
    uint64_t work;                 /* determinization steps, against max_compile_steps */
} cc;

static int cfail(cc *c, const char *fmt, ...) KW_PRINTF(2, 3);
static int cfail(cc *c, const char *fmt, ...) {
    if (!c->ir->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err->msg, sizeof c->err->msg, fmt, ap);
        va_end(ap);
        c->ir->failed = 1;
    }
    return -1;
}

/* ---------- NFA ---------- */

static uint32_t nstate(cc *c) {
    if (c->n_ns >= c->ir->lim.max_nfa_states) {
        cfail(c, "grammar too large: more than %u NFA states (limit max_nfa_states)", c->ir->lim.max_nfa_states);
        return G_NONE;
    }
    if (G_PUSH(c->nfirst, c->n_ns, c->cap_ns, G_NONE)) {
        cfail(c, "grammar: out of memory");
        return G_NONE;
    }
    return c->n_ns - 1;
}

static int nedge_add(cc *c, uint32_t from, uint32_t to, uint8_t kind, uint8_t lo, uint8_t hi, uint32_t rule) {
    if (from == G_NONE || to == G_NONE) return -1;
    nedge e = {c->nfirst[from], to, rule, kind, lo, hi};
    if (G_PUSH(c->edges, c->n_edges, c->cap_edges, e)) return cfail(c, "grammar: out of memory");
    c->nfirst[from] = c->n_edges - 1;
    if (kind == E_BYTE) {
        c->bound[lo] = 1;
        c->bound[hi + 1] = 1;
    }
    return 0;
}

/* One UTF-8 byte-range sequence from -> to. */
static int add_seq(cc *c, uint32_t from, uint32_t to, const uint8_t *lo, const uint8_t *hi, int n) {
    uint32_t cur = from;
    for (int i = 0; i < n; i++) {
        uint32_t nx = i == n - 1 ? to : nstate(c);
        if (nx == G_NONE || nedge_add(c, cur, nx, E_BYTE, lo[i], hi[i], 0)) return -1;
        cur = nx;
    }
    return 0;
}

/* Code points a..b that all encode to n bytes, as byte-range sequences. */
static int utf8_split(cc *c, uint32_t from, uint32_t to, uint32_t a, uint32_t b, int n) {
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((a & ~m) != (b & ~m)) {
            if ((a & m) != 0) {
                if (utf8_split(c, from, to, a, a | m, n)) return -1;
                return utf8_split(c, from, to, (a | m) + 1, b, n);
            }
            if ((b & m) != m) {
                if (utf8_split(c, from, to, a, (b & ~m) - 1, n)) return -1;
                return utf8_split(c, from, to, b & ~m, b, n);
            }
        }
    }
    uint8_t ea[4], eb[4];
    g_utf8_encode(a, ea);
    g_utf8_encode(b, eb);
    return add_seq(c, from, to, ea, eb, n);
}

static int add_cp_range(cc *c, uint32_t from, uint32_t to, uint32_t lo, uint32_t hi) {
    static const uint32_t lim[4][2] = {{0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xFFFF}, {0x10000, 0x10FFFF}};
    for (int n = 0; n < 4; n++) {
        uint32_t a = lo > lim[n][0] ? lo : lim[n][0], b = hi < lim[n][1] ? hi : lim[n][1];
        if (a > b) continue;
        if (n == 2 && a <= 0xDFFF && b >= 0xD800) {   /* never inside a class, but be safe */
            if (a < 0xD800 && utf8_split(c, from, to, a, 0xD7FF, 3)) return -1;
            if (b > 0xDFFF && utf8_split(c, from, to, 0xE000, b, 3)) return -1;
            continue;
        }
        if (utf8_split(c, from, to, a, b, n + 1)) return -1;
    }
    return 0;
}

static uint32_t build(cc *c, uint32_t node, uint32_t from);

static bool rep_unrolls(const gram_ir *ir, const ir_node *nd);

/* Rough NFA size of an expression as build() will make it (to bound unrolling). */
static uint64_t est_size(const gram_ir *ir, uint32_t id, int depth) {
    const ir_node *nd = &ir->nodes[id];
    if (depth > 200) return 1u << 30;
    switch (nd->kind) {
    case IR_LIT: return nd->n + 1;
    case IR_CLASS: return (uint64_t)nd->n * 4 + 2;
    case IR_SEQ:
    case IR_ALT: {
        uint64_t s = 2;
        for (uint32_t i = 0; i < nd->n && s < (1u << 30); i++) s += est_size(ir, ir->kids[nd->a + i], depth + 1);
        return s;
    }
    case IR_REP: {
        if (!rep_unrolls(ir, nd)) return 4;   /* a call of a LOOP rule */
        uint64_t b = est_size(ir, nd->a, depth + 1);
        uint64_t k = nd->max == G_INF ? (uint64_t)nd->min + 1 : nd->max;
        return b * k + 4;
    }
    default: return 2;
    }
}

/* A repetition whose body is narrow (a short literal or a small class) is
   unrolled; anything else bounded becomes a LOOP rule. */
static bool rep_unrolls(const gram_ir *ir, const ir_node *nd) {
    const ir_node *body = &ir->nodes[nd->a];
    uint32_t k = nd->max == G_INF ? nd->min : nd->max;
    if (nd->max == 1 || (nd->max == G_INF && nd->min <= 1)) return true;
    if (k > 32) return false;
    if (body->kind == IR_LIT) return body->n <= 8;
    if (body->kind == IR_CLASS) {
        /* a class that many tokens read (letters, any char) makes every unrolled
           state a wide one, each a walk of the whole vocab: a loop shares one */
        uint64_t cps = 0;
        for (uint32_t i = 0; i < body->n; i++) cps += ir->ranges[body->a + i].hi - ir->ranges[body->a + i].lo + 1;
        return cps <= 24 || k <= 3;
    }
    if (body->kind == IR_REF) return false;
    return k <= 3 && est_size(ir, nd->a, 0) * k <= 256;
}

static uint32_t build_rep(cc *c, const ir_node *nd, uint32_t from) {
    gram_ir *ir = c->ir;
    uint32_t body = nd->a, min = nd->min, max = nd->max;
    if (!rep_unrolls(ir, nd)) {
        /* a LOOP rule of its own */
        uint32_t r = ir_rule_new(ir, "loop");
        uint32_t rb = ir_rule_new(ir, "loop-body");
        if (r == G_NONE || rb == G_NONE) return G_NONE;
        ir->rules[r].expr = body;
        ir->rules[r].is_loop = 1;
        ir->rules[r].loop_min = min;
        ir->rules[r].loop_max = max;
        ir->rules[r].loop_body = rb;
        ir->rules[rb].expr = body;
        uint32_t to = nstate(c);
        if (to == G_NONE || nedge_add(c, from, to, E_REF, 0, 0, r)) return G_NONE;
        return to;
    }
    uint32_t cur = from;
    for (uint32_t i = 0; i < min; i++)
        if ((cur = build(c, body, cur)) == G_NONE) return G_NONE;
    if (max == G_INF) {
        uint32_t L = nstate(c);
        if (L == G_NONE || nedge_add(c, cur, L, E_EPS, 0, 0, 0)) return G_NONE;
        uint32_t in = nstate(c);
        if (in == G_NONE || nedge_add(c, L, in, E_EPS, 0, 0, 0)) return G_NONE;
        uint32_t e = build(c, body, in);
        if (e == G_NONE || nedge_add(c, e, L, E_EPS, 0, 0, 0)) return G_NONE;
        uint32_t out = nstate(c);
        if (out == G_NONE || nedge_add(c, L, out, E_EPS, 0, 0, 0)) return G_NONE;
        return out;
    }
    uint32_t out = nstate(c);
    if (out == G_NONE || nedge_add(c, cur, out, E_EPS, 0, 0, 0)) return G_NONE;
    for (uint32_t i = min; i < max; i++) {
        uint32_t in = nstate(c);
        if (in == G_NONE || nedge_add(c, cur, in, E_EPS, 0, 0, 0)) return G_NONE;
        if ((cur = build(c, body, in)) == G_NONE) return G_NONE;
        if (nedge_add(c, cur, out, E_EPS, 0, 0, 0)) return G_NONE;
    }
    return out;
}

/* Thompson construction: the NFA of node starting at from; returns its end. */
static uint32_t build(cc *c, uint32_t id, uint32_t from) {
    gram_ir *ir = c->ir;
    if (from == G_NONE || id == G_NONE || ir->failed) return G_NONE;
    if (++c->depth > 4 * ir->lim.max_depth + 64) {
        cfail(c, "grammar nested too deeply (over %u levels)", 4 * ir->lim.max_depth + 64);
        return G_NONE;
    }
    const ir_node nd = ir->nodes[id];
    uint32_t end = G_NONE;
    switch (nd.kind) {
    case IR_EMPTY: end = from; break;
    case IR_LIT: {
        uint32_t cur = from;
        for (uint32_t i = 0; i < nd.n && cur != G_NONE; i++) {
            uint32_t nx = nstate(c);
            uint8_t b = ir->bytes[nd.a + i];
            if (nx == G_NONE || nedge_add(c, cur, nx, E_BYTE, b, b, 0)) cur = G_NONE;
            else cur = nx;
        }
        end = cur;
        break;
    }
    case IR_CLASS: {
        end = nstate(c);
        for (uint32_t i = 0; i < nd.n && end != G_NONE; i++)
            if (add_cp_range(c, from, end, ir->ranges[nd.a + i].lo, ir->ranges[nd.a + i].hi)) end = G_NONE;
        if (nd.n == 0 && end != G_NONE) {
            /* an empty class matches nothing: leave end unreachable */
        }
        break;
    }
    case IR_SEQ: {
        uint32_t cur = from;
        for (uint32_t i = 0; i < nd.n && cur != G_NONE; i++) cur = build(c, ir->kids[nd.a + i], cur);
        end = cur;
        break;
    }
    case IR_ALT: {
        end = nstate(c);
        for (uint32_t i = 0; i < nd.n && end != G_NONE; i++) {
            uint32_t in = nstate(c);
            if (in == G_NONE || nedge_add(c, from, in, E_EPS, 0, 0, 0)) { end = G_NONE; break; }
            uint32_t e = build(c, ir->kids[nd.a + i], in);
            if (e == G_NONE || nedge_add(c, e, end, E_EPS, 0, 0, 0)) end = G_NONE;
        }
        break;
    }
    case IR_REP: end = build_rep(c, &nd, from); break;
    case IR_REF: {
        if (ir->rules[nd.a].expr == G_NONE) {
            cfail(c, "grammar: rule '%s' is used but never defined", ir_rule_name(ir, nd.a));
            break;
        }
        end = nstate(c);
        if (end != G_NONE && nedge_add(c, from, end, E_REF, 0, 0, nd.a)) end = G_NONE;
        break;
    }
    }
    c->depth--;
    return end;
}

/* ---------- DFA ---------- */

static uint64_t set_hash(const uint32_t *s, uint32_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (uint32_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
    }
    return h;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* eps-closure of set (in place extension), sorted and unique */
static int eps_closure(cc *c, uint32_t **set, uint32_t *n, uint32_t *cap, uint8_t *mark) {
    for (uint32_t i = 0; i < *n; i++) mark[(*set)[i]] = 1;
    for (uint32_t i = 0; i < *n; i++) {
        for (uint32_t e = c->nfirst[(*set)[i]]; e != G_NONE; e = c->edges[e].next) {
            if (c->edges[e].kind != E_EPS || mark[c->edges[e].to]) continue;
            mark[c->edges[e].to] = 1;
            if (G_PUSH(*set, *n, *cap, c->edges[e].to)) return -1;
        }
    }
    for (uint32_t i = 0; i < *n; i++) mark[(*set)[i]] = 0;
    if (*n > 1) qsort(*set, *n, sizeof **set, cmp_u32);
    return 0;
}

static int grow_states(cc *c, uint32_t need) {
    if (need <= c->cap_st) return 0;
    uint32_t nc = c->cap_st ? c->cap_st : 64;
    while (nc < need) nc *= 2;
    uint32_t ncls = c->g->n_cls;
    int32_t *t = kw_mem_alloc(KW_MEM_OTHER, (size_t)nc * ncls * sizeof *t);
    uint32_t *r = kw_mem_alloc(KW_MEM_OTHER, (size_t)nc * sizeof *r);
    uint8_t *f = kw_mem_alloc(KW_MEM_OTHER, nc);
    uint32_t *ro = kw_mem_alloc(KW_MEM_OTHER, (size_t)nc * sizeof *ro);
    uint32_t *rn = kw_mem_alloc(KW_MEM_OTHER, (size_t)nc * sizeof *rn);
    if (!t || !r || !f || !ro || !rn) {
        kw_mem_free(t); kw_mem_free(r); kw_mem_free(f); kw_mem_free(ro); kw_mem_free(rn);
        return -1;
    }
    if (c->cap_st) {
        memcpy(t, c->trans, (size_t)c->n_st * ncls * sizeof *t);
        memcpy(r, c->st_rule, c->n_st * sizeof *r);
        memcpy(f, c->st_flags, c->n_st);
        memcpy(ro, c->sref_off, c->n_st * sizeof *ro);
        memcpy(rn, c->sref_n, c->n_st * sizeof *rn);
    }
    kw_mem_free(c->trans); kw_mem_free(c->st_rule); kw_mem_free(c->st_flags);
    kw_mem_free(c->sref_off); kw_mem_free(c->sref_n);
    c->trans = t; c->st_rule = r; c->st_flags = f; c->sref_off = ro; c->sref_n = rn;
    c->cap_st = nc;
    return 0;
}

static uint32_t new_dstate(cc *c, uint32_t rule) {
    if (c->n_st >= c->ir->lim.max_dfa_states) {
        cfail(c, "grammar too large: more than %u automaton states (limit max_dfa_states)",
              c->ir->lim.max_dfa_states);
        return G_NONE;
    }
    if (grow_states(c, c->n_st + 1)) {
        cfail(c, "grammar: out of memory");
        return G_NONE;
    }
    uint32_t s = c->n_st++;
    for (uint32_t k = 0; k < c->g->n_cls; k++) c->trans[(size_t)s * c->g->n_cls + k] = -1;
    c->st_rule[s] = rule;
    c->st_flags[s] = 0;
    c->sref_off[s] = 0;
    c->sref_n[s] = 0;
    return s;
}

/* A pool of interned uint32 vectors (sorted NFA sets while determinizing,
 * state signatures while minimizing): ids dense from 0 in insertion order,
 * the vectors concatenated in v, an open-addressing table of id + 1. */
typedef struct vpool {
    uint32_t *v; uint32_t n, cap;
    uint32_t *off, *len; uint32_t cap_off, cap_len, count;
    uint32_t *ht; uint32_t hcap;
} vpool;

static void vp_reset(vpool *p) {
    p->n = p->count = 0;
    if (p->ht) memset(p->ht, 0, (size_t)p->hcap * sizeof *p->ht);
}

static void vp_free(vpool *p) {
    kw_mem_free(p->v); kw_mem_free(p->off); kw_mem_free(p->len); kw_mem_free(p->ht);
}

/* The id of x[0..n), or G_NONE when it is not in the pool; *slot gets the
 * table slot it would take (G_NONE: out of memory growing the table). */
static uint32_t vp_find(vpool *p, const uint32_t *x, uint32_t n, uint32_t *slot) {
    *slot = G_NONE;
    if ((p->count + 1) * 2 > p->hcap) {
        uint32_t nh = p->hcap ? p->hcap * 2 : 256;
        uint32_t *ht = kw_mem_calloc(KW_MEM_OTHER, (size_t)nh * sizeof *ht);
        if (!ht) return G_NONE;
        for (uint32_t k = 0; k < p->count; k++) {
            uint32_t j = (uint32_t)set_hash(p->v + p->off[k], p->len[k]) & (nh - 1);
            while (ht[j]) j = (j + 1) & (nh - 1);
            ht[j] = k + 1;
        }
        kw_mem_free(p->ht);
        p->ht = ht;
        p->hcap = nh;
    }
    uint32_t j = (uint32_t)set_hash(x, n) & (p->hcap - 1);
    while (p->ht[j]) {
        uint32_t k = p->ht[j] - 1;
        if (p->len[k] == n && !memcmp(p->v + p->off[k], x, n * sizeof *x)) return k;
        j = (j + 1) & (p->hcap - 1);
    }
    *slot = j;
    return G_NONE;
}

/* Appends x[0..n) as the next id, at the slot vp_find gave; G_NONE on out of memory. */
static uint32_t vp_add(vpool *p, const uint32_t *x, uint32_t n, uint32_t slot) {
    uint32_t k = p->count;
    if (g_reserve((void **)&p->v, &p->cap, (uint64_t)p->n + n + 1, sizeof(uint32_t)) ||
        g_reserve((void **)&p->off, &p->cap_off, (uint64_t)k + 1, sizeof(uint32_t)) ||
        g_reserve((void **)&p->len, &p->cap_len, (uint64_t)k + 1, sizeof(uint32_t)))
        return G_NONE;
    g_copy(p->v + p->n, x, n * sizeof *x);
    p->off[k] = p->n;
    p->len[k] = n;
    p->n += n;
    p->count++;
    p->ht[slot] = k + 1;
    return k;
}

/* id of vector x[0..n) (new ids are dense from 0); G_NONE on out of memory */
static uint32_t vp_intern(vpool *p, const uint32_t *x, uint32_t n) {
    uint32_t slot, k = vp_find(p, x, n, &slot);
    return k != G_NONE || slot == G_NONE ? k : vp_add(p, x, n, slot);
}

/* Interns set -> global DFA state of rule (a new set gets a new state, base + its id). */
static uint32_t intern_set(cc *c, vpool *sp, const uint32_t *s, uint32_t n, uint32_t rule, uint32_t base) {
    uint32_t slot, k = vp_find(sp, s, n, &slot);
    if (k != G_NONE) return base + k;
    if (slot == G_NONE) return G_NONE;
    uint32_t st = new_dstate(c, rule);
    if (st == G_NONE || vp_add(sp, s, n, slot) == G_NONE) return G_NONE;
    return st;
}

typedef struct mv { uint32_t key, to; } mv;   /* key: class, or rule | 0x80000000 */
static int cmp_mv(const void *a, const void *b) {
    const mv *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->to < y->to ? -1 : x->to > y->to;
}

static int determinize(cc *c, uint32_t rule, uint8_t *mark) {
    vpool sp = {0};
    uint32_t *set = NULL, n = 0, cap = 0;
    mv *moves = NULL;
    uint32_t n_mv = 0, cap_mv = 0;
    int rc = -1;
    uint32_t base = c->n_st;
    uint32_t accept = c->r_nend[rule];
    if (G_PUSH(set, n, cap, c->r_nstart[rule]) || eps_closure(c, &set, &n, &cap, mark)) goto out;
    uint32_t s0 = intern_set(c, &sp, set, n, rule, base);
    if (s0 == G_NONE) goto out;
    for (uint32_t k = 0; k < sp.count; k++) {
        uint32_t st = base + k;
        n_mv = 0;
        c->work += sp.len[k];
        if (c->work > c->ir->lim.max_compile_steps) {
            cfail(c, "grammar too complex: determinization over %llu steps (limit max_compile_steps)",
                  (unsigned long long)c->ir->lim.max_compile_steps);
            goto out;
        }
        for (uint32_t i = 0; i < sp.len[k]; i++) {
            uint32_t ns = sp.v[sp.off[k] + i];
            if (ns == accept) c->st_flags[st] |= ST_ACCEPT;
            for (uint32_t e = c->nfirst[ns]; e != G_NONE; e = c->edges[e].next) {
                const nedge *ed = &c->edges[e];
                if (ed->kind == E_BYTE) {
                    c->work += (uint64_t)c->g->cls_of[ed->hi] - c->g->cls_of[ed->lo] + 1;
                    for (uint32_t cl = c->g->cls_of[ed->lo]; cl <= c->g->cls_of[ed->hi]; cl++)
                        if (G_PUSH(moves, n_mv, cap_mv, ((mv){cl, ed->to}))) goto out;
                } else if (ed->kind == E_REF) {
                    if (G_PUSH(moves, n_mv, cap_mv, ((mv){ed->rule | 0x80000000u, ed->to}))) goto out;
                }
            }
        }
        if (n_mv > 1) qsort(moves, n_mv, sizeof *moves, cmp_mv);
        for (uint32_t i = 0; i < n_mv;) {
            uint32_t j = i;
            n = 0;
            while (j < n_mv && moves[j].key == moves[i].key) {
                if (!n || set[n - 1] != moves[j].to)
                    if (G_PUSH(set, n, cap, moves[j].to)) goto out;
                j++;
            }
            if (eps_closure(c, &set, &n, &cap, mark)) goto out;
            uint32_t t = intern_set(c, &sp, set, n, rule, base);
            if (t == G_NONE) goto out;
            if (moves[i].key & 0x80000000u) {
                g_ref r = {moves[i].key & 0x7FFFFFFFu, t};
                if (!c->sref_n[st]) c->sref_off[st] = c->n_refs;
                else if (c->sref_off[st] + c->sref_n[st] != c->n_refs) goto out;   /* refs of a state are contiguous */
                if (G_PUSH(c->refs, c->n_refs, c->cap_refs, r)) goto out;
                c->sref_n[st]++;
            } else {
                c->trans[(size_t)st * c->g->n_cls + moves[i].key] = (int32_t)t;
            }
            i = j;
        }
    }
    c->g->rule_start[rule] = s0;
    rc = 0;
out:
    if (rc && !c->ir->failed) cfail(c, "grammar: out of memory");
    vp_free(&sp);
    kw_mem_free(set);
    kw_mem_free(moves);
    return rc;
}

/* LOOP rule: the body's accepting states are folded into the start, which
   becomes the iteration boundary (ITER: leaving it starts an iteration;
   ACCEPT: the loop may end there when the count allows). */
static int make_loop(cc *c, uint32_t r, uint32_t first, uint32_t last) {
    kw_grammar *g = c->g;
    uint32_t s0 = g->rule_start[r];
    bool nullable = c->st_flags[s0] & ST_ACCEPT;
    if (nullable) {          /* empty iterations pad any count: drop them, the minimum becomes 0 */
        c->st_flags[s0] &= (uint8_t)~ST_ACCEPT;
        g->rule_min[r] = 0;
    }
    bool prefix_free = true;
    for (uint32_t s = first; s < last && prefix_free; s++) {
        if (!(c->st_flags[s] & ST_ACCEPT)) continue;
        bool out = c->sref_n[s] != 0;
        for (uint32_t k = 0; k < g->n_cls && !out; k++) out = c->trans[(size_t)s * g->n_cls + k] >= 0;
        if (out) prefix_free = false;
    }
    if (!prefix_free) {
        /* one repetition may be a prefix of another: the loop calls the body
           as a rule of its own, whose ends the parse stacks keep apart */
        uint32_t rb = c->ir->rules[r].loop_body;
        if (nullable || rb == G_NONE)
            return cfail(c, "grammar: a bounded repetition {%u,...} of an expression that can be empty and is "
                            "not prefix-free is not supported", g->rule_min[r]);
        for (uint32_t s = first; s < last; s++) {
            if (s != s0) c->dead[s] = 1;
            for (uint32_t k = 0; k < g->n_cls; k++) c->trans[(size_t)s * g->n_cls + k] = -1;
        }
        g_ref call = {rb, s0};
        c->sref_off[s0] = c->n_refs;
        c->sref_n[s0] = 1;
        if (G_PUSH(c->refs, c->n_refs, c->cap_refs, call)) return cfail(c, "grammar: out of memory");
        c->st_flags[s0] = ST_ACCEPT | ST_ITER;
        return 0;
    }
    for (uint32_t s = first; s < last; s++) {
        for (uint32_t k = 0; k < g->n_cls; k++) {
            int32_t t = c->trans[(size_t)s * g->n_cls + k];
            if (t >= 0 && (c->st_flags[t] & ST_ACCEPT)) c->trans[(size_t)s * g->n_cls + k] = (int32_t)s0;
        }
        for (uint32_t i = 0; i < c->sref_n[s]; i++) {
            g_ref *rf = &c->refs[c->sref_off[s] + i];
            if (c->st_flags[rf->to] & ST_ACCEPT) rf->to = s0;
        }
    }
    for (uint32_t s = first; s < last; s++)
        if (c->st_flags[s] & ST_ACCEPT) c->dead[s] = 1;
    c->st_flags[s0] |= ST_ACCEPT | ST_ITER;
    return 0;
}

/* ---------- analyses ---------- */

/* Drops states that can never complete their rule (through rules that can
   complete). Worklist over reverse edges. */
static int trim_unproductive(cc *c) {
    kw_grammar *g = c->g;
    uint32_t ns = c->n_st, ncls = g->n_cls;
    uint8_t *prod = kw_mem_calloc(KW_MEM_OTHER, ns);
    uint8_t *rprod = kw_mem_calloc(KW_MEM_OTHER, g->n_rules);
    uint32_t *pred_off = kw_mem_calloc(KW_MEM_OTHER, ((size_t)ns + 1) * sizeof(uint32_t));
    uint32_t *rref_off = kw_mem_calloc(KW_MEM_OTHER, ((size_t)g->n_rules + 1) * sizeof(uint32_t));
    uint32_t *tref_off = kw_mem_calloc(KW_MEM_OTHER, ((size_t)ns + 1) * sizeof(uint32_t));
    uint32_t *pred = NULL, *rref = NULL, *tref = NULL, *q = NULL;
    uint32_t n_edges = 0;
    int rc = -1;
    if (!prod || !rprod || !pred_off || !rref_off || !tref_off) goto out;
    for (uint32_t s = 0; s < ns; s++)
        for (uint32_t k = 0; k < ncls; k++) {
            int32_t t = c->trans[(size_t)s * ncls + k];
            if (t >= 0) { pred_off[t + 1]++; n_edges++; }
        }
    for (uint32_t i = 0; i < c->n_refs; i++) {
        rref_off[c->refs[i].rule + 1]++;
        tref_off[c->refs[i].to + 1]++;
    }
    for (uint32_t s = 0; s < ns; s++) { pred_off[s + 1] += pred_off[s]; tref_off[s + 1] += tref_off[s]; }
    for (uint32_t r = 0; r < g->n_rules; r++) rref_off[r + 1] += rref_off[r];
    pred = kw_mem_alloc(KW_MEM_OTHER, ((size_t)n_edges + 1) * sizeof *pred);
    rref = kw_mem_alloc(KW_MEM_OTHER, ((size_t)c->n_refs + 1) * sizeof *rref);
    tref = kw_mem_alloc(KW_MEM_OTHER, ((size_t)c->n_refs + 1) * sizeof *tref);
    q = kw_mem_alloc(KW_MEM_OTHER, ((size_t)ns + 1) * sizeof *q);
    uint32_t *fill = kw_mem_calloc(KW_MEM_OTHER, ((size_t)ns + g->n_rules + 1) * sizeof *fill);
    uint32_t *rowner = kw_mem_alloc(KW_MEM_OTHER, ((size_t)c->n_refs + 1) * sizeof *rowner);
    if (!pred || !rref || !tref || !q || !fill || !rowner) { kw_mem_free(fill); kw_mem_free(rowner); goto out; }
    for (uint32_t s = 0; s < ns; s++) {
        for (uint32_t k = 0; k < ncls; k++) {
            int32_t t = c->trans[(size_t)s * ncls + k];
            if (t >= 0) pred[pred_off[t] + fill[t]++] = s;
        }
        for (uint32_t i = 0; i < c->sref_n[s]; i++) rowner[c->sref_off[s] + i] = s;
    }
    memset(fill, 0, ((size_t)ns + g->n_rules + 1) * sizeof *fill);
    for (uint32_t i = 0; i < c->n_refs; i++) {
        uint32_t r = c->refs[i].rule, t = c->refs[i].to;
        rref[rref_off[r] + fill[ns + r]++] = i;
        tref[tref_off[t] + fill[t]++] = i;
    }
    kw_mem_free(fill);
    uint32_t qh = 0, qt = 0;
    for (uint32_t s = 0; s < ns; s++)
        if (!c->dead[s] && (c->st_flags[s] & ST_ACCEPT)) { prod[s] = 1; q[qt++] = s; }
    while (qh < qt) {
        uint32_t t = q[qh++];
        for (uint32_t i = pred_off[t]; i < pred_off[t + 1]; i++) {
            uint32_t s = pred[i];
            if (!prod[s] && !c->dead[s]) { prod[s] = 1; q[qt++] = s; }
        }
        for (uint32_t i = tref_off[t]; i < tref_off[t + 1]; i++) {
            uint32_t e = tref[i], s = rowner[e];
            if (!prod[s] && !c->dead[s] && rprod[c->refs[e].rule]) { prod[s] = 1; q[qt++] = s; }
        }
        uint32_t r = c->st_rule[t];
        if (g->rule_start[r] == t && !rprod[r]) {
            rprod[r] = 1;
            for (uint32_t i = rref_off[r]; i < rref_off[r + 1]; i++) {
                uint32_t e = rref[i], s = rowner[e];
                if (!prod[s] && !c->dead[s] && prod[c->refs[e].to]) { prod[s] = 1; q[qt++] = s; }
            }
        }
    }
    kw_mem_free(rowner);
    if (!rprod[g->root]) {
        rc = cfail(c, "grammar: the start rule '%s' can never complete (every path recurses forever)",
                   c->ir->names + c->ir->rules[g->root].name);
        goto out;
    }
    for (uint32_t s = 0; s < ns; s++) {
        if (!prod[s]) { c->dead[s] = 1; continue; }
        for (uint32_t k = 0; k < ncls; k++) {
            int32_t t = c->trans[(size_t)s * ncls + k];
            if (t >= 0 && !prod[t]) c->trans[(size_t)s * ncls + k] = -1;
        }
        for (uint32_t i = 0; i < c->sref_n[s]; i++) {
            g_ref *rf = &c->refs[c->sref_off[s] + i];
            if (!prod[rf->to] || !rprod[rf->rule]) rf->rule = G_NONE;   /* removed below */
        }
    }
    rc = 0;
out:
    if (rc && !c->ir->failed) cfail(c, "grammar: out of memory");
    kw_mem_free(prod); kw_mem_free(rprod); kw_mem_free(pred_off); kw_mem_free(rref_off); kw_mem_free(tref_off);
    kw_mem_free(pred); kw_mem_free(rref); kw_mem_free(tref); kw_mem_free(q);
    return rc;
}

/* Marks states not reachable from the root as dead. */
static int mark_unreachable(cc *c) {
    kw_grammar *g = c->g;
    uint8_t *seen = kw_mem_calloc(KW_MEM_OTHER, c->n_st);
    uint32_t *stack = kw_mem_alloc(KW_MEM_OTHER, ((size_t)c->n_st + 1) * sizeof *stack);
    uint8_t *rseen = kw_mem_calloc(KW_MEM_OTHER, g->n_rules);
    if (!seen || !stack || !rseen) {
        kw_mem_free(seen); kw_mem_free(stack); kw_mem_free(rseen);
        return cfail(c, "grammar: out of memory");
    }
    uint32_t sp = 0;
    stack[sp++] = g->rule_start[g->root];
    seen[g->rule_start[g->root]] = 1;
    rseen[g->root] = 1;
    while (sp) {
        uint32_t s = stack[--sp];
        for (uint32_t k = 0; k < g->n_cls; k++) {
            int32_t t = c->trans[(size_t)s * g->n_cls + k];
            if (t >= 0 && !seen[t]) { seen[t] = 1; stack[sp++] = (uint32_t)t; }
        }
        for (uint32_t i = 0; i < c->sref_n[s]; i++) {
            const g_ref *rf = &c->refs[c->sref_off[s] + i];
            if (rf->rule == G_NONE) continue;
            if (!seen[rf->to]) { seen[rf->to] = 1; stack[sp++] = rf->to; }
            uint32_t st = g->rule_start[rf->rule];
            if (!seen[st]) { seen[st] = 1; stack[sp++] = st; }
            rseen[rf->rule] = 1;
        }
    }
    for (uint32_t s = 0; s < c->n_st; s++)
        if (!seen[s]) c->dead[s] = 1;
    kw_mem_free(seen); kw_mem_free(stack); kw_mem_free(rseen);
    return 0;
}

/* Refs of live states, compacted (dropped refs removed). */
static int compact_refs(cc *c) {
    kw_grammar *g = c->g;
    g->st_ref_off = kw_mem_alloc(KW_MEM_OTHER, ((size_t)c->n_st + 1) * sizeof(uint32_t));
    g->st_ref_n = kw_mem_calloc(KW_MEM_OTHER, ((size_t)c->n_st + 1) * sizeof(uint32_t));
    g->refs = kw_mem_alloc(KW_MEM_OTHER, ((size_t)c->n_refs + 1) * sizeof(g_ref));
    if (!g->st_ref_off || !g->st_ref_n || !g->refs) return cfail(c, "grammar: out of memory");
    uint32_t n = 0;
    for (uint32_t s = 0; s < c->n_st; s++) {
        g->st_ref_off[s] = n;
        if (c->dead[s]) continue;
        for (uint32_t i = 0; i < c->sref_n[s]; i++) {
            g_ref rf = c->refs[c->sref_off[s] + i];
            if (rf.rule == G_NONE || c->dead[rf.to]) continue;
            g->refs[n++] = rf;
            g->st_ref_n[s]++;
        }
    }
    g->n_refs = n;
    return 0;
}

/* nullable rules (fixed point), then left recursion: an edge R -> S when
   R can call S before reading a byte; a cycle is an error. */
static int nullable_and_left_recursion(cc *c) {
    kw_grammar *g = c->g;
    uint32_t nr = g->n_rules;
    uint32_t *stack = kw_mem_alloc(KW_MEM_OTHER, ((size_t)c->n_st + 1) * sizeof *stack);
    uint32_t *seen = kw_mem_calloc(KW_MEM_OTHER, ((size_t)c->n_st + 1) * sizeof *seen);
    uint32_t stamp = 0;
    if (!stack || !seen) {
        kw_mem_free(stack); kw_mem_free(seen);
        return cfail(c, "grammar: out of memory");
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t r = 0; r < nr; r++) {
            if (g->rule_nullable[r] || g->rule_start[r] == G_NONE) continue;
            uint32_t sp = 0;
            stamp++;
            stack[sp++] = g->rule_start[r];
            seen[g->rule_start[r]] = stamp;
            while (sp && !g->rule_nullable[r]) {
                uint32_t s = stack[--sp];
                if (g->st_flags[s] & ST_ACCEPT) { g->rule_nullable[r] = 1; changed = true; break; }
                for (uint32_t i = 0; i < g->st_ref_n[s]; i++) {
                    const g_ref *rf = &g->refs[g->st_ref_off[s] + i];
                    if (g->rule_nullable[rf->rule] && seen[rf->to] != stamp) { seen[rf->to] = stamp; stack[sp++] = rf->to; }
                }
            }
        }
    }
    /* left-call graph, DFS with colors */
    uint8_t *color = kw_mem_calloc(KW_MEM_OTHER, nr);
    uint32_t *rstack = kw_mem_alloc(KW_MEM_OTHER, ((size_t)nr + 1) * 2 * sizeof *rstack);
    uint32_t *lc_off = kw_mem_calloc(KW_MEM_OTHER, ((size_t)nr + 1) * sizeof *lc_off);
    uint32_t *lc = NULL, n_lc = 0, cap_lc = 0;
    int rc = -1;
    if (!color || !rstack || !lc_off) goto out;
    for (uint32_t r = 0; r < nr; r++) {
        lc_off[r] = n_lc;
        if (g->rule_start[r] == G_NONE) continue;
        uint32_t sp = 0;
        stamp++;
        stack[sp++] = g->rule_start[r];
        seen[g->rule_start[r]] = stamp;
        while (sp) {
            uint32_t s = stack[--sp];
            for (uint32_t i = 0; i < g->st_ref_n[s]; i++) {
                const g_ref *rf = &g->refs[g->st_ref_off[s] + i];
                if (G_PUSH(lc, n_lc, cap_lc, rf->rule)) goto out;
                if (g->rule_nullable[rf->rule] && seen[rf->to] != stamp) { seen[rf->to] = stamp; stack[sp++] = rf->to; }
            }
        }
    }
    lc_off[nr] = n_lc;
    for (uint32_t r0 = 0; r0 < nr; r0++) {
        if (color[r0]) continue;
        uint32_t sp = 0;
        rstack[sp++] = r0; rstack[sp++] = lc_off[r0];
        color[r0] = 1;
        while (sp) {
            uint32_t r = rstack[sp - 2], i = rstack[sp - 1];
            if (i < lc_off[r + 1]) {
                rstack[sp - 1]++;
                uint32_t t = lc[i];
                if (color[t] == 1) {
                    rc = cfail(c, "grammar: left recursion through rule '%s' (a rule reaches itself before reading "
                                  "any character)", c->ir->names + c->ir->rules[t].name);
                    goto out;
                }
                if (!color[t]) { color[t] = 1; rstack[sp++] = t; rstack[sp++] = lc_off[t]; }
            } else {
                color[r] = 2;
                sp -= 2;
            }
        }
    }
    rc = 0;
out:
    if (rc && !c->ir->failed) cfail(c, "grammar: out of memory");
    kw_mem_free(stack); kw_mem_free(seen); kw_mem_free(color); kw_mem_free(rstack); kw_mem_free(lc_off);
    kw_mem_free(lc);
    return rc;
}

static bool or32(uint8_t *d, const uint8_t *s) {
    bool ch = false;
    for (int i = 0; i < 32; i++) {
        uint8_t v = d[i] | s[i];
        if (v != d[i]) { d[i] = v; ch = true; }
    }
    return ch;
}

/* FIRST sets of states (bytes that can be read next, through calls) and
   FOLLOW sets of rules (bytes that can come right after the rule ends). */
static int follow_sets(cc *c) {
    kw_grammar *g = c->g;
    uint32_t ns = c->n_st;
    uint8_t *first = kw_mem_calloc(KW_MEM_OTHER, (size_t)ns * 32);
    uint8_t *eps_end = kw_mem_calloc(KW_MEM_OTHER, ns);
    g->rule_follow = kw_mem_calloc(KW_MEM_OTHER, (size_t)g->n_rules * 32 + 32);
    if (!first || !eps_end || !g->rule_follow) {
        kw_mem_free(first); kw_mem_free(eps_end);
        return cfail(c, "grammar: out of memory");
    }
    for (uint32_t s = 0; s < ns; s++) {
        if (c->dead[s]) continue;
        for (int b = 0; b < 256; b++)
            if (g_next(g, s, (uint8_t)b) >= 0) first[(size_t)s * 32 + (b >> 3)] |= (uint8_t)(1u << (b & 7));
        if (g->st_flags[s] & ST_ACCEPT) eps_end[s] = 1;
    }
    for (bool ch = true; ch;) {
        ch = false;
        for (uint32_t s0 = ns; s0-- > 0;) {
            if (c->dead[s0]) continue;
            for (uint32_t i = 0; i < g->st_ref_n[s0]; i++) {
                const g_ref *rf = &g->refs[g->st_ref_off[s0] + i];
                if (or32(first + (size_t)s0 * 32, first + (size_t)g->rule_start[rf->rule] * 32)) ch = true;
                if (g->rule_nullable[rf->rule]) {
                    if (or32(first + (size_t)s0 * 32, first + (size_t)rf->to * 32)) ch = true;
                    if (eps_end[rf->to] && !eps_end[s0]) { eps_end[s0] = 1; ch = true; }
                }
            }
        }
    }
    for (bool ch = true; ch;) {
        ch = false;
        for (uint32_t s = 0; s < ns; s++) {
            if (c->dead[s]) continue;
            for (uint32_t i = 0; i < g->st_ref_n[s]; i++) {
                const g_ref *rf = &g->refs[g->st_ref_off[s] + i];
                uint8_t *f = g->rule_follow + (size_t)rf->rule * 32;
                if (or32(f, first + (size_t)rf->to * 32)) ch = true;
                if (eps_end[rf->to] && or32(f, g->rule_follow + (size_t)g->st_rule[s] * 32)) ch = true;
            }
        }
    }
    kw_mem_free(first);
    kw_mem_free(eps_end);
    return 0;
}

/* Index slots: each live state that reads bytes gets one; rules whose
   automata are identical (same shape, flags, calls) share them. */
static int assign_slots(cc *c) {
    kw_grammar *g = c->g;
    uint32_t nr = g->n_rules, ns = c->n_st;
    g->st_slot = kw_mem_alloc(KW_MEM_OTHER, ((size_t)ns + 1) * sizeof(uint32_t));
    uint32_t *order = kw_mem_alloc(KW_MEM_OTHER, ((size_t)ns + 1) * sizeof *order);
    uint32_t *canon = kw_mem_alloc(KW_MEM_OTHER, ((size_t)ns + 1) * sizeof *canon);
    uint32_t *rep = kw_mem_alloc(KW_MEM_OTHER, ((size_t)nr + 1) * sizeof *rep);
    uint64_t *hash = kw_mem_alloc(KW_MEM_OTHER, ((size_t)nr + 1) * sizeof *hash);
    uint32_t *r_first = kw_mem_alloc(KW_MEM_OTHER, ((size_t)nr + 1) * sizeof *r_first);
    uint32_t *r_n = kw_mem_calloc(KW_MEM_OTHER, ((size_t)nr + 1) * sizeof *r_n);
    int rc = -1;
    if (!g->st_slot || !order || !canon || !rep || !hash || !r_first || !r_n) goto out;
    for (uint32_t s = 0; s < ns; s++) { g->st_slot[s] = G_NONE; canon[s] = G_NONE; }
    /* BFS numbering of each rule's states from its start (own transitions and return edges) */
    uint32_t pos = 0;
    for (uint32_t r = 0; r < nr; r++) {
        r_first[r] = pos;
        hash[r] = 0;
        rep[r] = r;
        uint32_t s0 = g->rule_start[r];
        if (s0 == G_NONE || c->dead[s0]) continue;
        uint32_t head = pos;
        order[pos] = s0; canon[s0] = 0; pos++;
        while (head < pos) {
            uint32_t s = order[head++];
            for (uint32_t k = 0; k < g->n_cls; k++) {
                int32_t t = g->trans[(size_t)s * g->n_cls + k];
                if (t >= 0 && canon[t] == G_NONE) { canon[t] = pos - r_first[r]; order[pos++] = (uint32_t)t; }
            }
            for (uint32_t i = 0; i < g->st_ref_n[s]; i++) {
                uint32_t t = g->refs[g->st_ref_off[s] + i].to;
                if (canon[t] == G_NONE) { canon[t] = pos - r_first[r]; order[pos++] = t; }
            }
        }
        r_n[r] = pos - r_first[r];
        uint64_t h = 1469598103934665603ull ^ r_n[r] ^ ((uint64_t)g->rule_loop[r] << 40);
        for (uint32_t i = 0; i < r_n[r]; i++) {
            uint32_t s = order[r_first[r] + i];
            h = (h ^ g->st_flags[s]) * 1099511628211ull;
            for (uint32_t k = 0; k < g->n_cls; k++) {
                int32_t t = g->trans[(size_t)s * g->n_cls + k];
                h = (h ^ (t >= 0 ? canon[t] : 0xFFFFFFu)) * 1099511628211ull;
            }
            for (uint32_t j = 0; j < g->st_ref_n[s]; j++) {
                const g_ref *rf = &g->refs[g->st_ref_off[s] + j];
                h = (h ^ rf->rule ^ ((uint64_t)canon[rf->to] << 32)) * 1099511628211ull;
            }
        }
        hash[r] = h;
    }
    /* group rules with equal hash and equal automata (checked state by state) */
    for (uint32_t r = 0; r < nr; r++) {
        if (!r_n[r]) continue;
        for (uint32_t q = 0; q < r; q++) {
            if (rep[q] != q || hash[q] != hash[r] || r_n[q] != r_n[r] || g->rule_loop[q] != g->rule_loop[r]) continue;
            bool same = true;
            for (uint32_t i = 0; i < r_n[r] && same; i++) {
                uint32_t a = order[r_first[r] + i], b = order[r_first[q] + i];
                if (g->st_flags[a] != g->st_flags[b] || g->st_ref_n[a] != g->st_ref_n[b]) { same = false; break; }
                for (uint32_t k = 0; k < g->n_cls && same; k++) {
                    int32_t ta = g->trans[(size_t)a * g->n_cls + k], tb = g->trans[(size_t)b * g->n_cls + k];
                    if ((ta < 0) != (tb < 0) || (ta >= 0 && canon[ta] != canon[tb])) same = false;
                }
                for (uint32_t j = 0; j < g->st_ref_n[a] && same; j++) {
                    const g_ref *x = &g->refs[g->st_ref_off[a] + j], *y = &g->refs[g->st_ref_off[b] + j];
                    if (x->rule != y->rule || canon[x->to] != canon[y->to]) same = false;
                }
            }
            if (same) { rep[r] = q; break; }
        }
    }
    uint32_t n_slots = 0;
    for (uint32_t r = 0; r < nr; r++) {
        if (!r_n[r]) continue;
        uint32_t q = rep[r];
        for (uint32_t i = 0; i < r_n[r]; i++) {
            uint32_t s = order[r_first[r] + i];
            if (!(g->st_flags[s] & ST_BYTES)) continue;
            if (q == r) g->st_slot[s] = n_slots++;
            else g->st_slot[s] = g->st_slot[order[r_first[q] + i]];
        }
        if (q != r) or32(g->rule_follow + (size_t)q * 32, g->rule_follow + (size_t)r * 32);
    }
    /* a shared slot is computed with its representative rule: give it the union of the follow sets */
    for (uint32_t r = 0; r < nr; r++)
        if (r_n[r] && rep[r] != r) memcpy(g->rule_follow + (size_t)r * 32, g->rule_follow + (size_t)rep[r] * 32, 32);
    g->n_slots = n_slots;
    rc = 0;
out:
    if (rc) cfail(c, "grammar: out of memory");
    kw_mem_free(order); kw_mem_free(canon); kw_mem_free(rep); kw_mem_free(hash); kw_mem_free(r_first);
    kw_mem_free(r_n);
    return rc;
}

/* Moore minimization of each rule's DFA: states with the same flags, the
   same calls and equivalent successors are merged (subset construction
   leaves many equivalent states, and every state that reads bytes costs
   one vocab walk in the index). */
static int minimize(cc *c) {
    kw_grammar *g = c->g;
    uint32_t ns = c->n_st, ncls = g->n_cls;
    uint32_t *cls = kw_mem_alloc(KW_MEM_OTHER, ((size_t)ns + 1) * sizeof *cls);
    uint32_t *ncl = kw_mem_alloc(KW_MEM_OTHER, ((size_t)ns + 1) * sizeof *ncl);
    uint32_t *rep = kw_mem_alloc(KW_MEM_OTHER, ((size_t)ns + 1) * sizeof *rep);
    uint32_t *sig = kw_mem_alloc(KW_MEM_OTHER, ((size_t)ncls + 2 + 2 * 64) * sizeof *sig);
    vpool p = {0};
    int rc = -1;
    if (!cls || !ncl || !rep || !sig) goto out;
    for (uint32_t s = 0; s < ns; s++) rep[s] = s;
    for (uint32_t first = 0; first < ns;) {
        uint32_t r = c->st_rule[first], last = first;
        while (last < ns && c->st_rule[last] == r) last++;
        uint32_t n_classes = 0;
        for (int round = 0;; round++) {
            vp_reset(&p);
            for (uint32_t s = first; s < last; s++) {
                if (c->dead[s]) continue;
                uint32_t k = 0;
                sig[k++] = round ? cls[s] : c->st_flags[s];
                if (round) {
                    for (uint32_t x = 0; x < ncls; x++) {
                        int32_t t = c->trans[(size_t)s * ncls + x];
                        sig[k++] = t >= 0 ? cls[t] : G_NONE;
                    }
                }
                uint32_t nref = g->st_ref_n[s] < 64 ? g->st_ref_n[s] : 64;
                for (uint32_t i = 0; i < nref; i++) {
                    const g_ref *rf = &g->refs[g->st_ref_off[s] + i];
                    sig[k++] = rf->rule;
                    sig[k++] = round ? cls[rf->to] : 0;
                }
                if (g->st_ref_n[s] > 64) sig[k++] = s;   /* keep such a state apart */
                c->work += k;
                uint32_t id = vp_intern(&p, sig, k);
                if (id == G_NONE) goto out;
                ncl[s] = id;
            }
            if (c->work > c->ir->lim.max_compile_steps) {
                cfail(c, "grammar too complex: minimization over %llu steps (limit max_compile_steps)",
                      (unsigned long long)c->ir->lim.max_compile_steps);
                goto out;
            }
            for (uint32_t s = first; s < last; s++)
                if (!c->dead[s]) cls[s] = ncl[s];
            if (round && p.count == n_classes) break;
            n_classes = p.count;
        }
        /* the first state of each class represents it */
        uint32_t *first_of = kw_mem_alloc(KW_MEM_OTHER, ((size_t)n_classes + 1) * sizeof *first_of);
        if (!first_of) goto out;
        for (uint32_t k = 0; k < n_classes; k++) first_of[k] = G_NONE;
        for (uint32_t s = first; s < last; s++) {
            if (c->dead[s]) continue;
            if (first_of[cls[s]] == G_NONE) first_of[cls[s]] = s;
            rep[s] = first_of[cls[s]];
        }
        kw_mem_free(first_of);
        first = last;
    }
    for (uint32_t s = 0; s < ns; s++) {
        if (c->dead[s]) continue;
        if (rep[s] != s) {
            c->dead[s] = 1;
            for (uint32_t x = 0; x < ncls; x++) c->trans[(size_t)s * ncls + x] = -1;
            c->st_flags[s] = 0;
            g->st_ref_n[s] = 0;
            continue;
        }
        for (uint32_t x = 0; x < ncls; x++) {
            int32_t t = c->trans[(size_t)s * ncls + x];
            if (t >= 0) c->trans[(size_t)s * ncls + x] = (int32_t)rep[t];
        }
        for (uint32_t i = 0; i < g->st_ref_n[s]; i++) {
            g_ref *rf = &g->refs[g->st_ref_off[s] + i];
            rf->to = rep[rf->to];
        }
    }
    for (uint32_t r = 0; r < g->n_rules; r++)
        if (g->rule_start[r] != G_NONE) g->rule_start[r] = rep[g->rule_start[r]];
    rc = 0;
out:
    if (rc && !c->ir->failed) cfail(c, "grammar: out of memory");
    kw_mem_free(cls); kw_mem_free(ncl); kw_mem_free(rep); kw_mem_free(sig);
    vp_free(&p);
    return rc;
}

void kw_grammar_free(kw_grammar *g) {
    if (!g) return;
    kw_mem_free(g->trans); kw_mem_free(g->st_rule); kw_mem_free(g->st_flags);
    kw_mem_free(g->st_ref_off); kw_mem_free(g->st_ref_n); kw_mem_free(g->refs); kw_mem_free(g->st_slot);
    kw_mem_free(g->rule_start); kw_mem_free(g->rule_min); kw_mem_free(g->rule_max);
    kw_mem_free(g->rule_loop); kw_mem_free(g->rule_nullable); kw_mem_free(g->rule_follow);
    kw_mem_free(g->st_dist); kw_mem_free(g->rule_minlen); kw_mem_free(g->rule_iter);
    kw_mem_free(g->names); kw_mem_free(g->rule_name);
    kw_mem_free(g);
}

size_t kw_grammar_bytes(const kw_grammar *g) {
    const void *parts[] = {g, g->trans, g->st_rule, g->st_flags, g->st_ref_off, g->st_ref_n, g->refs, g->st_slot,
                           g->rule_start, g->rule_min, g->rule_max, g->rule_loop, g->rule_nullable, g->rule_follow,
                           g->st_dist, g->rule_minlen, g->rule_iter, g->names, g->rule_name};
    size_t n = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) n += kw_mem_size(parts[i]);
    return n;
}

uint32_t kw_grammar_n_rules(const kw_grammar *g) { return g->n_rules; }
uint32_t kw_grammar_n_states(const kw_grammar *g) { return g->n_states; }

static int alloc_rules(cc *c, uint32_t nr) {
    kw_grammar *g = c->g;
    g->rule_start = kw_mem_alloc(KW_MEM_OTHER, ((size_t)nr + 1) * sizeof(uint32_t));
    g->rule_min = kw_mem_alloc(KW_MEM_OTHER, ((size_t)nr + 1) * sizeof(uint32_t));
    g->rule_max = kw_mem_alloc(KW_MEM_OTHER, ((size_t)nr + 1) * sizeof(uint32_t));
    g->rule_loop = kw_mem_calloc(KW_MEM_OTHER, (size_t)nr + 1);
    g->rule_nullable = kw_mem_calloc(KW_MEM_OTHER, (size_t)nr + 1);
    g->rule_name = kw_mem_alloc(KW_MEM_OTHER, ((size_t)nr + 1) * sizeof(uint32_t));
    g->names = kw_mem_alloc(KW_MEM_OTHER, (size_t)c->ir->n_names + 1);
    if (!g->rule_start || !g->rule_min || !g->rule_max || !g->rule_loop || !g->rule_nullable || !g->rule_name ||
        !g->names)
        return -1;
    g_copy(g->names, c->ir->names, c->ir->n_names);
    for (uint32_t r = 0; r < nr; r++) {
        const ir_rule *ir_r = &c->ir->rules[r];
        g->rule_start[r] = G_NONE;
        g->rule_loop[r] = ir_r->is_loop;
        g->rule_min[r] = ir_r->is_loop ? ir_r->loop_min : 0;
        g->rule_max[r] = ir_r->is_loop ? ir_r->loop_max : G_INF;
        g->rule_name[r] = ir_r->name;
    }
    return 0;
}

kw_grammar *gram_compile(gram_ir *ir, kw_err *err) {
    kw_err dummy;
    if (!ir->err) ir->err = err ? err : &dummy;
    if (ir->failed) return NULL;
    if (ir->root == G_NONE || ir->rules[ir->root].expr == G_NONE) {
        ir_fail(ir, "grammar: no start rule");
        return NULL;
    }
    cc c;
    memset(&c, 0, sizeof c);
    c.ir = ir;
    c.err = ir->err;
    uint8_t *mark = NULL;
    uint32_t cap_end = 0;
    kw_grammar *g = kw_mem_calloc(KW_MEM_OTHER, sizeof *g);
    if (!g) { ir_fail(ir, "grammar: out of memory"); return NULL; }
    c.g = g;
    g->lim = ir->lim;
    /* 1. NFAs (the rule list grows while LOOP rules are made) */
    for (uint32_t r = 0; r < ir->n_rules && !ir->failed; r++) {
        if (g_reserve((void **)&c.r_nstart, &c.cap_r, (uint64_t)r + 1, sizeof(uint32_t)) ||
            g_reserve((void **)&c.r_nend, &cap_end, (uint64_t)r + 1, sizeof(uint32_t))) {
            ir_fail(ir, "grammar: out of memory");
            break;
        }
        c.r_nstart[r] = c.r_nend[r] = G_NONE;
        if (ir->rules[r].expr == G_NONE) continue;
        uint32_t s = nstate(&c);
        uint32_t s1 = nstate(&c);   /* a start no edge enters (LOOP rules rely on it) */
        if (s == G_NONE || s1 == G_NONE || nedge_add(&c, s, s1, E_EPS, 0, 0, 0)) break;
        c.r_nstart[r] = s;
        uint32_t e = build(&c, ir->rules[r].expr, s1);
        if (e == G_NONE) break;
        c.r_nend[r] = e;
    }
    if (ir->failed) goto fail;
    /* 2. byte classes: intervals between the boundaries of all byte ranges */
    c.bound[0] = 1;
    uint32_t ncls = 0;
    for (int b = 0; b < 256; b++) {
        if (c.bound[b] && b > 0) ncls++;
        g->cls_of[b] = (uint8_t)ncls;
    }
    g->n_cls = ncls + 1;
    g->n_rules = ir->n_rules;
    g->root = ir->root;
    if (alloc_rules(&c, g->n_rules)) { ir_fail(ir, "grammar: out of memory"); goto fail; }
    /* 3. DFAs, each rule's states contiguous */
    mark = kw_mem_calloc(KW_MEM_OTHER, (size_t)c.n_ns + 1);
    if (!mark) { ir_fail(ir, "grammar: out of memory"); goto fail; }
    for (uint32_t r = 0; r < g->n_rules; r++)
        if (ir->rules[r].expr != G_NONE && determinize(&c, r, mark)) goto fail;
    c.dead = kw_mem_calloc(KW_MEM_OTHER, (size_t)c.n_st + 1);
    if (!c.dead) { ir_fail(ir, "grammar: out of memory"); goto fail; }
    g->trans = c.trans;
    g->st_rule = c.st_rule;
    g->st_flags = c.st_flags;
    g->n_states = c.n_st;
    /* 4. LOOP rules */
    for (uint32_t r = 0; r < g->n_rules; r++) {
        if (!g->rule_loop[r] || g->rule_start[r] == G_NONE) continue;
        uint32_t first = g->rule_start[r], last = first;
        while (last < c.n_st && c.st_rule[last] == r) last++;
        if (make_loop(&c, r, first, last)) goto fail;
    }
    /* 5. trimming */
    if (trim_unproductive(&c) || mark_unreachable(&c) || compact_refs(&c)) goto fail;
    for (uint32_t s = 0; s < c.n_st; s++) {
        if (c.dead[s]) {
            for (uint32_t k = 0; k < g->n_cls; k++) c.trans[(size_t)s * g->n_cls + k] = -1;
            c.st_flags[s] = 0;
            continue;
        }
        for (uint32_t k = 0; k < g->n_cls; k++) {
            int32_t t = c.trans[(size_t)s * g->n_cls + k];
            if (t >= 0 && c.dead[t]) c.trans[(size_t)s * g->n_cls + k] = -1;
            else if (t >= 0) c.st_flags[s] |= ST_BYTES;
        }
    }
    /* 6. minimization, analyses */
    if (minimize(&c) || nullable_and_left_recursion(&c) || follow_sets(&c)) goto fail;
    /* 7. slots, closing distances */
    if (assign_slots(&c) || gram_close_analyse(g)) goto fail;
    kw_mem_free(mark);
    kw_mem_free(c.nfirst); kw_mem_free(c.edges); kw_mem_free(c.r_nstart); kw_mem_free(c.r_nend);
    kw_mem_free(c.sref_off); kw_mem_free(c.sref_n); kw_mem_free(c.refs); kw_mem_free(c.dead);
    return g;
fail:
    if (!ir->failed) ir_fail(ir, "grammar: out of memory");
    kw_mem_free(mark);
    kw_mem_free(c.nfirst); kw_mem_free(c.edges); kw_mem_free(c.r_nstart); kw_mem_free(c.r_nend);
    kw_mem_free(c.sref_off); kw_mem_free(c.sref_n); kw_mem_free(c.refs); kw_mem_free(c.dead);
    g->trans = c.trans; g->st_rule = c.st_rule; g->st_flags = c.st_flags;
    kw_grammar_free(g);
    return NULL;
}
