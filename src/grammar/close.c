/* close.c - budget-aware closing: how far the output is from a complete
 * sentence of the grammar, and the tokens that close it by a shortest way.
 *
 * A grammar does not know the token budget: a random or looping model can
 * stay inside an unbounded string until max_tokens cuts the answer. The
 * scheduler asks, before each token, how many bytes at least complete the
 * output (kw_grammar_distance); once the tokens left only just cover that
 * (one token per byte, plus the end of generation), it masks with
 * kw_grammar_mask_closing, which allows only tokens that follow one
 * shortest completion, so the answer ends valid within the budget.
 *
 * The compiled grammar carries, per DFA state, the fewest bytes from that
 * state to its rule's end (st_dist), per rule the fewest bytes of a whole
 * match (rule_minlen) and, for LOOP rules, of one iteration (rule_iter).
 * They are a shortest-derivation fixpoint: a byte edge costs 1, a call
 * edge the callee's minimum; relaxation passes run states in reverse order
 * (a rule's states are numbered from its start, so one pass carries most
 * distances back to it) until nothing changes or the pass budget is spent.
 * A value the budget did not reach stays G_INF ("far": no closing there).
 *
 * A head's distance is its frame's distance to the end of its rule (a LOOP
 * frame with count c < min adds min - c iterations) plus that of every
 * parent frame up to the root. */
#include "gram_internal.h"
#include "grammar_index.h"

#define CLOSE_MAX_PASSES 256       /* relaxation passes over all states */
#define CLOSE_MAX_BYTES 512        /* the longest completion prefix that is spelled out */
#define CLOSE_MAX_FRAMES 256       /* call frames a completion walk may open */

static uint32_t sat_add(uint32_t a, uint32_t b) { return a >= G_INF - b ? G_INF : a + b; }
static uint32_t sat_mul(uint32_t a, uint32_t b) {
    if (!a || !b) return 0;
    return a > (G_INF - 1) / b ? G_INF : a * b;
}

/* Distance of a frame at state st with loop count cnt to its rule's end. */
static uint32_t frame_dist(const kw_grammar *g, uint32_t st, uint32_t cnt) {
    uint32_t d = g->st_dist[st];
    uint32_t r = g->st_rule[st];
    if (g->rule_loop[r] && cnt < g->rule_min[r]) d = sat_add(d, sat_mul(g->rule_min[r] - cnt, g->rule_iter[r]));
    return d;
}

/* The cheapest way out of st: cost of its best edge (bytes + rest of the
   rule); *best_cls / *best_ref say which (one is G_NONE). */
static uint32_t best_edge(const kw_grammar *g, uint32_t st, uint32_t cnt, uint32_t *best_cls, uint32_t *best_ref) {
    uint32_t r = g->st_rule[st], best = G_INF;
    uint32_t ncnt = cnt;
    if ((g->st_flags[st] & ST_ITER) && (g->rule_max[r] != G_INF || cnt < g->rule_min[r])) ncnt = cnt + 1;
    *best_cls = *best_ref = G_NONE;
    for (uint32_t k = 0; k < g->n_cls; k++) {
        int32_t t = g->trans[(size_t)st * g->n_cls + k];
        if (t < 0) continue;
        uint32_t c = sat_add(1, frame_dist(g, (uint32_t)t, ncnt));
        if (c < best) { best = c; *best_cls = k; }
    }
    for (uint32_t i = 0; i < g->st_ref_n[st]; i++) {
        const g_ref *rf = &g->refs[g->st_ref_off[st] + i];
        uint32_t c = sat_add(g->rule_minlen[rf->rule], frame_dist(g, rf->to, ncnt));
        /* a zero-cost call back into the same state would spin the walk */
        if (c < best && !(rf->to == st && g->rule_minlen[rf->rule] == 0)) { best = c; *best_ref = i; *best_cls = G_NONE; }
    }
    return best;
}

/* The fixpoint's step: the cheapest edge out of s with the current values
   (a byte edge 1 + the target's distance, a call the callee's minimum +
   the return state's), loop counts aside. */
static uint32_t cheapest_edge(const kw_grammar *g, uint32_t s) {
    uint32_t d = G_INF;
    for (uint32_t k = 0; k < g->n_cls; k++) {
        int32_t t = g->trans[(size_t)s * g->n_cls + k];
        if (t >= 0) { uint32_t c = sat_add(1, g->st_dist[t]); if (c < d) d = c; }
    }
    for (uint32_t i = 0; i < g->st_ref_n[s]; i++) {
        const g_ref *rf = &g->refs[g->st_ref_off[s] + i];
        uint32_t c = sat_add(g->rule_minlen[rf->rule], g->st_dist[rf->to]);
        if (c < d) d = c;
    }
    return d;
}

int gram_close_analyse(kw_grammar *g) {
    uint32_t ns = g->n_states, nr = g->n_rules;
    g->st_dist = kw_mem_alloc(KW_MEM_OTHER, ((size_t)ns + 1) * sizeof(uint32_t));
    g->rule_minlen = kw_mem_alloc(KW_MEM_OTHER, ((size_t)nr + 1) * sizeof(uint32_t));
    g->rule_iter = kw_mem_alloc(KW_MEM_OTHER, ((size_t)nr + 1) * sizeof(uint32_t));
    if (!g->st_dist || !g->rule_minlen || !g->rule_iter) return -1;
    for (uint32_t s = 0; s < ns; s++) g->st_dist[s] = (g->st_flags[s] & ST_ACCEPT) ? 0 : G_INF;
    for (uint32_t r = 0; r < nr; r++) g->rule_minlen[r] = g->rule_iter[r] = G_INF;
    bool changed = true;
    for (uint32_t pass = 0; changed && pass < CLOSE_MAX_PASSES; pass++) {
        changed = false;
        for (uint32_t r = 0; r < nr; r++) {
            uint32_t s0 = g->rule_start[r];
            if (s0 == G_NONE) continue;
            uint32_t ml;
            if (g->rule_loop[r]) {
                /* one iteration: the cheapest way from the boundary back to it */
                uint32_t it = cheapest_edge(g, s0);
                if (it < g->rule_iter[r]) { g->rule_iter[r] = it; changed = true; }
                ml = g->rule_min[r] ? sat_mul(g->rule_min[r], g->rule_iter[r]) : 0;
            } else {
                ml = g->st_dist[s0];
            }
            if (ml < g->rule_minlen[r]) { g->rule_minlen[r] = ml; changed = true; }
        }
        for (uint32_t s = ns; s-- > 0;) {
            if (g->st_flags[s] & ST_ACCEPT) continue;
            uint32_t d = cheapest_edge(g, s);
            if (d < g->st_dist[s]) { g->st_dist[s] = d; changed = true; }
        }
    }
    return 0;
}

/* Distance of parent frame p (and everything below it) to the end. */
static uint32_t stack_dist(const kw_grammar *g, const g_head *nodes, uint32_t p) {
    uint32_t d = 0;
    for (uint32_t depth = 0; p != G_ROOT && p != G_BOTTOM && d != G_INF; depth++) {
        if (depth > g->lim.max_stack_depth) return G_INF;
        d = sat_add(d, frame_dist(g, nodes[p].st, nodes[p].cnt));
        p = nodes[p].par;
    }
    return d;
}

/* The head with the shortest completion and its distance (G_INF: none known). */
static uint32_t best_head(kw_grammar_matcher *m, const g_head **out) {
    const kw_grammar *g = gm_grammar(m);
    const g_head *nodes = gm_stepper(m)->nodes;
    uint32_t n, best = G_INF;
    const g_head *h = gm_heads(m, &n);
    *out = NULL;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t d = sat_add(frame_dist(g, h[i].st, h[i].cnt), stack_dist(g, nodes, h[i].par));
        if (d < best) { best = d; *out = &h[i]; }
    }
    return best;
}

uint32_t kw_grammar_distance(kw_grammar_matcher *m) {
    if (kw_grammar_can_end(m)) return 0;
    const g_head *h;
    uint32_t d = best_head(m, &h);
    return d == G_INF ? KW_GRAMMAR_FAR : d;
}

/* A byte of class k, printable ASCII where the class has one. */
static uint8_t class_byte(const kw_grammar *g, uint32_t k) {
    int any = -1;
    for (int b = 0; b < 256; b++) {
        if (g->cls_of[b] != k) continue;
        if (b >= 0x21 && b < 0x7F) return (uint8_t)b;
        if (any < 0 || (b == ' ' && any < 0x20)) any = b;
    }
    return (uint8_t)(any < 0 ? 0 : any);
}

/* Spells the first bytes (at most cap) of a shortest completion from head h
   into out; returns how many. Every byte lies on a cheapest path, so any
   prefix of the result leaves the rest of that path as short as claimed. */
static uint32_t spell_completion(kw_grammar_matcher *m, const g_head *h, uint8_t *out, uint32_t cap) {
    const kw_grammar *g = gm_grammar(m);
    const g_head *nodes = gm_stepper(m)->nodes;
    struct { uint32_t st, cnt; } stk[CLOSE_MAX_FRAMES];
    uint32_t sp = 0, n = 0, st = h->st, cnt = h->cnt, par = h->par;
    for (uint32_t steps = 0; n < cap && steps < 8 * cap + 64; steps++) {
        uint32_t r = g->st_rule[st];
        if (frame_dist(g, st, cnt) == 0 && (g->st_flags[st] & ST_ACCEPT) && g_exit_ok(g, r, cnt)) {
            /* the rule is done: back to the caller, opened here or below the head */
            if (sp) { sp--; st = stk[sp].st; cnt = stk[sp].cnt; continue; }
            if (par == G_ROOT || par == G_BOTTOM) break;
            st = nodes[par].st; cnt = nodes[par].cnt; par = nodes[par].par;
            continue;
        }
        uint32_t k, ri;
        if (best_edge(g, st, cnt, &k, &ri) == G_INF) break;
        uint32_t ncnt = cnt;
        if ((g->st_flags[st] & ST_ITER) && (g->rule_max[r] != G_INF || cnt < g->rule_min[r])) ncnt = cnt + 1;
        if (k != G_NONE) {
            out[n++] = class_byte(g, k);
            st = (uint32_t)g->trans[(size_t)st * g->n_cls + k];
            cnt = ncnt;
        } else {
            if (sp == CLOSE_MAX_FRAMES) break;
            const g_ref *rf = &g->refs[g->st_ref_off[st] + ri];
            stk[sp].st = rf->to; stk[sp].cnt = ncnt; sp++;
            st = g->rule_start[rf->rule]; cnt = 0;
        }
    }
    return n;
}

int32_t kw_grammar_mask_closing(kw_grammar_matcher *m, uint32_t *mask, kw_err *err) {
    const kw_grammar_index *ix = gm_index(m);
    if (!ix) return kw_err_set(err, "grammar: closing needs a matcher made with an index");
    const kw_grammar_vocab *v = gi_vocab(ix);
    memset(mask, 0, sizeof(uint32_t) * (((size_t)v->n + 31) / 32));
    int32_t n_ok = 0;
    if (gm_done(m)) return 0;
    if (kw_grammar_can_end(m)) {
        for (uint32_t i = 0; i < v->n_eog; i++) {
            int32_t id = v->eog[i];
            mask[(uint32_t)id >> 5] |= 1u << ((uint32_t)id & 31);
            n_ok++;
        }
        return n_ok;
    }
    const g_head *h;
    if (best_head(m, &h) == G_INF || !h) return 0;
    uint8_t s[CLOSE_MAX_BYTES];
    uint32_t cap = v->max_len < CLOSE_MAX_BYTES ? v->max_len : CLOSE_MAX_BYTES;
    uint32_t len = spell_completion(m, h, s, cap);
    /* tokens whose bytes are a prefix of s: one path down the trie */
    uint32_t i = 0, end = v->n_nodes;
    for (uint32_t d = 0; d < len && i < end;) {
        while (i < end && v->tb[i] != s[d]) i = v->te[i];   /* siblings at depth d + 1 */
        if (i >= end) break;
        for (int32_t t = v->tt[i]; t >= 0; t = v->same_next[t]) {
            mask[(uint32_t)t >> 5] |= 1u << ((uint32_t)t & 31);
            n_ok++;
        }
        end = v->te[i];
        i++;
        d++;
    }
    return n_ok;
}

int32_t kw_grammar_mask_budget(kw_grammar_matcher *m, uint32_t *mask, int64_t tokens_left, bool *closing,
                               kw_err *err) {
    uint32_t d = kw_grammar_distance(m);
    *closing = false;
    if (d != KW_GRAMMAR_FAR && tokens_left <= (int64_t)d + 1) {
        int32_t n = kw_grammar_mask_closing(m, mask, err);
        if (n != 0) { *closing = n > 0; return n; }
        /* no token of this vocab spells the completion: the plain mask */
    }
    return kw_grammar_mask(m, mask, err);
}

bool kw_grammar_budget_ok(kw_grammar_matcher *m, int64_t tokens_left) {
    if (kw_grammar_is_complete(m)) return true;
    uint32_t d = kw_grammar_distance(m);
    return d == KW_GRAMMAR_FAR || (int64_t)d + 1 <= tokens_left;
}
