/* match.c - the parse-stack stepper and the byte-level matcher.
 *
 * A parse state is a set of heads (DFA state, loop count, parent frame,
 * depth); parent frames live in an append-only arena (g_stepper.nodes) and
 * are shared by every head above them, so the set of stacks is a graph.
 * The closure expands calls (push a return frame, start the callee) and
 * returns (a head in an accepting state continues as its parent frame);
 * it keeps only heads that can read a byte. Within one closure, heads and
 * return frames are deduplicated by (state, count, parent), which makes
 * the closure finite: left recursion is rejected at compile time, so every
 * chain of calls without reading a byte is shorter than the rule count.
 *
 * The matcher keeps its current heads, a history of the last
 * KW_GRAMMAR_HISTORY states for rollback, and compacts the frame arena
 * when most of it is garbage. */
#include "gram_internal.h"
#include "grammar_index.h"

/* ---------- hash of (state, count, parent, kind) ---------- */

typedef struct hent { uint32_t st, cnt, par, gen, val; } hent;

static uint64_t hmix(uint32_t st, uint32_t cnt, uint32_t par, uint32_t kind) {
    uint64_t h = ((uint64_t)st << 32 | cnt) * 0x9E3779B97F4A7C15ull;
    h ^= ((uint64_t)par << 1 | kind) * 0xC2B2AE3D27D4EB4Full;
    return h ^ (h >> 29);
}

int g_stepper_init(g_stepper *s, const kw_grammar *g) {
    memset(s, 0, sizeof *s);
    s->g = g;
    s->hcap = 256;
    s->hkey = kw_mem_calloc(KW_MEM_OTHER, (size_t)s->hcap * sizeof(hent));
    s->gen = 1;
    return s->hkey ? 0 : -1;
}

void g_stepper_free(g_stepper *s) {
    kw_mem_free(s->nodes);
    kw_mem_free(s->hkey);
    kw_mem_free(s->work);
    memset(s, 0, sizeof *s);
}

static int h_grow(g_stepper *s) {
    hent *old = (hent *)s->hkey;
    uint32_t oc = s->hcap, nc = oc * 2;
    hent *nt = kw_mem_calloc(KW_MEM_OTHER, (size_t)nc * sizeof *nt);
    if (!nt) return -1;
    for (uint32_t i = 0; i < oc; i++) {
        if (old[i].gen != s->gen) continue;
        uint32_t kind = old[i].val >> 31;
        uint32_t j = (uint32_t)hmix(old[i].st, old[i].cnt, old[i].par, kind) & (nc - 1);
        while (nt[j].gen == s->gen) j = (j + 1) & (nc - 1);
        nt[j] = old[i];
    }
    kw_mem_free(old);
    s->hkey = (uint64_t *)nt;
    s->hcap = nc;
    return 0;
}

/* Looks up (st,cnt,par,kind); inserts with value val when absent. Returns
   the stored value (with kind in bit 31), or G_NONE on out of memory. *found tells. */
static uint32_t h_get(g_stepper *s, uint32_t *count, uint32_t st, uint32_t cnt, uint32_t par, uint32_t kind,
                      uint32_t val, int *found) {
    if ((*count + 1) * 2 > s->hcap && h_grow(s)) return G_NONE;
    hent *t = (hent *)s->hkey;
    uint32_t m = s->hcap - 1;
    uint32_t j = (uint32_t)hmix(st, cnt, par, kind) & m;
    while (t[j].gen == s->gen) {
        if (t[j].st == st && t[j].cnt == cnt && t[j].par == par && (t[j].val >> 31) == kind) {
            *found = 1;
            return t[j].val & 0x7FFFFFFFu;
        }
        j = (j + 1) & m;
    }
    t[j] = (hent){st, cnt, par, s->gen, val | (kind << 31)};
    (*count)++;
    *found = 0;
    return val;
}

static void h_clear(g_stepper *s) {
    if (++s->gen == 0) {   /* wrapped: wipe the stamps */
        memset(s->hkey, 0, (size_t)s->hcap * sizeof(hent));
        s->gen = 1;
    }
}

/* ---------- closure ---------- */

static int push_work(g_stepper *s, g_head h) { return G_PUSH(s->work, s->n_work, s->cap_work, h); }

static uint32_t inc_count(const kw_grammar *g, uint32_t r, uint32_t cnt, bool bottom, bool *ok) {
    *ok = true;
    if (bottom) return cnt < 0xFFFF ? cnt + 1 : cnt;
    uint32_t max = g->rule_max[r];
    if (max != G_INF) {
        if (cnt >= max) { *ok = false; return cnt; }
        return cnt + 1;
    }
    return cnt < g->rule_min[r] ? cnt + 1 : cnt;   /* unbounded: only "reached min" matters */
}

int g_closure(g_stepper *s, const g_head *in, uint32_t n_in, g_head **out, uint32_t *n_out, uint32_t *cap_out) {
    const kw_grammar *g = s->g;
    uint32_t count = 0;
    h_clear(s);
    s->can_end = 0;
    s->bottom_pop = 0;
    s->n_bottom_c = 0;
    s->n_work = 0;
    for (uint32_t i = n_in; i-- > 0;)
        if (push_work(s, in[i])) return -1;
    while (s->n_work) {
        g_head h = s->work[--s->n_work];
        int found;
        if (h_get(s, &count, h.st, h.cnt, h.par, 0, 0, &found) == G_NONE) return -1;
        if (found) continue;
        uint8_t fl = g->st_flags[h.st];
        uint32_t r = g->st_rule[h.st];
        bool bottom = h.par == G_BOTTOM;
        if (fl & ST_BYTES) {
            if (*n_out >= g->lim.max_heads) { s->overflow = 1; return -1; }
            if (G_PUSH(*out, *n_out, *cap_out, h)) return -1;
        }
        uint32_t nref = g->st_ref_n[h.st];
        if (nref && h.dep + 1 < g->lim.max_stack_depth) {
            uint32_t cnt = h.cnt;
            bool ok = true;
            if (fl & ST_ITER) cnt = inc_count(g, r, cnt, bottom, &ok);
            if (ok) {
                for (uint32_t i = 0; i < nref; i++) {
                    const g_ref *rf = &g->refs[g->st_ref_off[h.st] + i];
                    uint8_t tf = g->st_flags[rf->to];
                    if ((tf & ST_ACCEPT) && !(tf & ST_BYTES) && !g->st_ref_n[rf->to] && !g->rule_loop[g->st_rule[rf->to]] &&
                        !bottom) {
                        /* a tail call: returning would only end this frame, so the callee replaces it */
                        g_head callee = {g->rule_start[rf->rule], 0, h.par, h.dep};
                        if (push_work(s, callee)) return -1;
                        continue;
                    }
                    uint32_t nid = s->n_nodes;
                    uint32_t got = h_get(s, &count, rf->to, cnt, h.par, 1, nid, &found);
                    if (got == G_NONE) return -1;
                    if (!found) {
                        g_head node = {rf->to, cnt, h.par, h.dep};
                        if (G_PUSH(s->nodes, s->n_nodes, s->cap_nodes, node)) return -1;
                    }
                    g_head callee = {g->rule_start[rf->rule], 0, got, h.dep + 1};
                    if (push_work(s, callee)) return -1;
                }
            }
        }
        if (fl & ST_ACCEPT) {
            if (h.par == G_ROOT) {
                if (g_exit_ok(g, r, h.cnt)) s->can_end = 1;
            } else if (bottom) {
                s->bottom_pop = 1;
                int k;
                for (k = 0; k < s->n_bottom_c && s->bottom_c[k] != h.cnt; k++) {}
                if (k == s->n_bottom_c && k < 4) s->bottom_c[s->n_bottom_c++] = h.cnt;
            } else if (g_exit_ok(g, r, h.cnt)) {
                if (push_work(s, s->nodes[h.par])) return -1;
            }
        }
    }
    return 0;
}

int g_step(g_stepper *s, const g_head *in, uint32_t n_in, uint8_t byte, g_head **out, uint32_t *n_out,
           uint32_t *cap_out) {
    const kw_grammar *g = s->g;
    g_head buf[16];
    g_head *tmp = n_in <= 16 ? buf : kw_mem_alloc(KW_MEM_OTHER, (size_t)n_in * sizeof *tmp);
    if (!tmp) return -1;
    uint32_t n = 0;
    for (uint32_t i = 0; i < n_in; i++) {
        const g_head *h = &in[i];
        int32_t t = g_next(g, h->st, byte);
        if (t < 0) continue;
        g_head nh = {(uint32_t)t, h->cnt, h->par, h->dep};
        if (g->st_flags[h->st] & ST_ITER) {
            bool ok;
            nh.cnt = inc_count(g, g->st_rule[h->st], h->cnt, h->par == G_BOTTOM, &ok);
            if (!ok) continue;
        }
        tmp[n++] = nh;
    }
    int rc = 0;
    if (n) rc = g_closure(s, tmp, n, out, n_out, cap_out);
    else {
        s->can_end = 0;
        s->bottom_pop = 0;
        s->n_bottom_c = 0;
    }
    if (tmp != buf) kw_mem_free(tmp);
    return rc;
}

int g_pop(g_stepper *s, const g_head *h, g_head **out, uint32_t *n_out, uint32_t *cap_out) {
    if (h->par == G_ROOT || h->par == G_BOTTOM) {
        s->can_end = h->par == G_ROOT;
        s->bottom_pop = 0;
        return 0;
    }
    g_head p = s->nodes[h->par];
    return g_closure(s, &p, 1, out, n_out, cap_out);
}

/* ---------- matcher ---------- */

typedef struct snap { g_head *heads; uint32_t n; int can_end, done; } snap;

struct kw_grammar_matcher {
    const kw_grammar *g;
    const kw_grammar_index *ix;
    g_stepper st;
    g_head *heads; uint32_t n_heads, cap_heads;
    g_head *nxt; uint32_t n_nxt, cap_nxt;
    g_head *cur; uint32_t n_cur, cap_cur;
    int can_end, done;
    snap hist[KW_GRAMMAR_HISTORY];
    uint32_t hist_head, hist_n;
    uint32_t live_after_gc;
    gm_scratch scr;
};

static int set_start(kw_grammar_matcher *m) {
    g_head h0 = {m->g->rule_start[m->g->root], 0, G_ROOT, 0};
    m->st.n_nodes = 0;
    m->n_heads = 0;
    if (g_closure(&m->st, &h0, 1, &m->heads, &m->n_heads, &m->cap_heads)) return -1;
    m->can_end = m->st.can_end;
    m->done = 0;
    return 0;
}

static void hist_clear(kw_grammar_matcher *m) {
    for (uint32_t i = 0; i < KW_GRAMMAR_HISTORY; i++) {
        kw_mem_free(m->hist[i].heads);
        m->hist[i].heads = NULL;
    }
    m->hist_head = m->hist_n = 0;
}

kw_grammar_matcher *kw_grammar_matcher_new(const kw_grammar *g, const kw_grammar_index *ix, kw_err *err) {
    kw_grammar_matcher *m = kw_mem_calloc(KW_MEM_OTHER, sizeof *m);
    if (!m || g_stepper_init(&m->st, g)) {
        if (m) kw_mem_free(m);
        kw_err_set(err, "grammar: out of memory");
        return NULL;
    }
    m->g = g;
    m->ix = ix;
    if (set_start(m)) {
        kw_err_set(err, m->st.overflow ? "grammar: too ambiguous (more than %u parse stacks; limit max_heads)"
                                       : "grammar: out of memory", g->lim.max_heads);
        kw_grammar_matcher_free(m);
        return NULL;
    }
    return m;
}

void kw_grammar_matcher_free(kw_grammar_matcher *m) {
    if (!m) return;
    hist_clear(m);
    g_stepper_free(&m->st);
    kw_mem_free(m->heads);
    kw_mem_free(m->nxt);
    kw_mem_free(m->cur);
    gm_scratch_free(&m->scr);
    kw_mem_free(m);
}

void kw_grammar_matcher_reset(kw_grammar_matcher *m) {
    hist_clear(m);
    set_start(m);
}

kw_grammar_matcher *kw_grammar_matcher_clone(const kw_grammar_matcher *src) {
    kw_grammar_matcher *m = kw_mem_calloc(KW_MEM_OTHER, sizeof *m);
    if (!m || g_stepper_init(&m->st, src->g)) {
        if (m) kw_mem_free(m);
        return NULL;
    }
    m->g = src->g;
    m->ix = src->ix;
    if (g_reserve((void **)&m->st.nodes, &m->st.cap_nodes, src->st.n_nodes + 1, sizeof(g_head)) ||
        g_reserve((void **)&m->heads, &m->cap_heads, src->n_heads + 1, sizeof(g_head))) {
        kw_grammar_matcher_free(m);
        return NULL;
    }
    g_copy(m->st.nodes, src->st.nodes, src->st.n_nodes * sizeof(g_head));
    m->st.n_nodes = src->st.n_nodes;
    g_copy(m->heads, src->heads, src->n_heads * sizeof(g_head));
    m->n_heads = src->n_heads;
    m->can_end = src->can_end;
    m->done = src->done;
    for (uint32_t i = 0; i < KW_GRAMMAR_HISTORY; i++) {
        const snap *s = &src->hist[i];
        if (!s->heads) continue;
        m->hist[i] = *s;
        m->hist[i].heads = kw_mem_alloc(KW_MEM_OTHER, (size_t)(s->n + 1) * sizeof(g_head));
        if (!m->hist[i].heads) { kw_grammar_matcher_free(m); return NULL; }
        g_copy(m->hist[i].heads, s->heads, s->n * sizeof(g_head));
    }
    m->hist_head = src->hist_head;
    m->hist_n = src->hist_n;
    return m;
}

/* Saves the current state as the most recent history entry. */
static int hist_push(kw_grammar_matcher *m) {
    snap *s = &m->hist[m->hist_head];
    kw_mem_free(s->heads);
    s->heads = kw_mem_alloc(KW_MEM_OTHER, (size_t)(m->n_heads + 1) * sizeof(g_head));
    if (!s->heads) return -1;
    g_copy(s->heads, m->heads, m->n_heads * sizeof(g_head));
    s->n = m->n_heads;
    s->can_end = m->can_end;
    s->done = m->done;
    m->hist_head = (m->hist_head + 1) % KW_GRAMMAR_HISTORY;
    if (m->hist_n < KW_GRAMMAR_HISTORY) m->hist_n++;
    return 0;
}

int kw_grammar_rollback(kw_grammar_matcher *m, uint32_t n) {
    if (n > m->hist_n) return -1;
    for (uint32_t i = 0; i < n; i++) {
        m->hist_head = (m->hist_head + KW_GRAMMAR_HISTORY - 1) % KW_GRAMMAR_HISTORY;
        snap *s = &m->hist[m->hist_head];
        if (i == n - 1) {
            if (g_reserve((void **)&m->heads, &m->cap_heads, s->n + 1, sizeof(g_head))) return -1;
            g_copy(m->heads, s->heads, s->n * sizeof(g_head));
            m->n_heads = s->n;
            m->can_end = s->can_end;
            m->done = s->done;
        }
        kw_mem_free(s->heads);
        s->heads = NULL;
        m->hist_n--;
    }
    return 0;
}

/* Compacts the frame arena to the frames reachable from the heads and the
   history (parents have lower ids than their children: one pass up). */
static int gc_nodes(kw_grammar_matcher *m) {
    uint32_t n = m->st.n_nodes;
    uint32_t *map = kw_mem_alloc(KW_MEM_OTHER, ((size_t)n + 1) * sizeof *map);
    if (!map) return -1;
    for (uint32_t i = 0; i < n; i++) map[i] = 0;
    for (uint32_t i = 0; i < m->n_heads; i++)
        if (m->heads[i].par < n) map[m->heads[i].par] = 1;
    for (uint32_t k = 0; k < KW_GRAMMAR_HISTORY; k++)
        for (uint32_t i = 0; m->hist[k].heads && i < m->hist[k].n; i++)
            if (m->hist[k].heads[i].par < n) map[m->hist[k].heads[i].par] = 1;
    for (uint32_t i = n; i-- > 0;)
        if (map[i] && m->st.nodes[i].par < n) map[m->st.nodes[i].par] = 1;
    uint32_t live = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!map[i]) { map[i] = G_NONE; continue; }
        g_head nd = m->st.nodes[i];
        if (nd.par < n) nd.par = map[nd.par];
        m->st.nodes[live] = nd;
        map[i] = live++;
    }
    m->st.n_nodes = live;
    for (uint32_t i = 0; i < m->n_heads; i++)
        if (m->heads[i].par < n) m->heads[i].par = map[m->heads[i].par];
    for (uint32_t k = 0; k < KW_GRAMMAR_HISTORY; k++)
        for (uint32_t i = 0; m->hist[k].heads && i < m->hist[k].n; i++)
            if (m->hist[k].heads[i].par < n) m->hist[k].heads[i].par = map[m->hist[k].heads[i].par];
    m->live_after_gc = live;
    kw_mem_free(map);
    return 0;
}

/* Runs bytes from the current heads; on success the result is in m->cur. */
static int run_bytes(kw_grammar_matcher *m, const uint8_t *b, size_t n, int *can_end) {
    m->n_cur = 0;
    if (g_reserve((void **)&m->cur, &m->cap_cur, m->n_heads + 1, sizeof(g_head))) return -1;
    g_copy(m->cur, m->heads, m->n_heads * sizeof(g_head));
    m->n_cur = m->n_heads;
    *can_end = m->can_end;
    for (size_t i = 0; i < n; i++) {
        m->n_nxt = 0;
        if (g_step(&m->st, m->cur, m->n_cur, b[i], &m->nxt, &m->n_nxt, &m->cap_nxt)) return -1;
        if (!m->n_nxt && !m->st.can_end) return 1;
        g_head *t = m->cur; m->cur = m->nxt; m->nxt = t;
        uint32_t tc = m->cap_cur; m->cap_cur = m->cap_nxt; m->cap_nxt = tc;
        m->n_cur = m->n_nxt;
        *can_end = m->st.can_end;
        if (!m->n_cur && i + 1 < n) return 1;
    }
    return 0;
}

static int commit(kw_grammar_matcher *m, int can_end) {
    if (hist_push(m)) return -1;
    g_head *t = m->heads; m->heads = m->cur; m->cur = t;
    uint32_t tc = m->cap_heads; m->cap_heads = m->cap_cur; m->cap_cur = tc;
    m->n_heads = m->n_cur;
    m->can_end = can_end;
    if (m->st.n_nodes > 4096 && m->st.n_nodes > 2 * m->live_after_gc + 4096) return gc_nodes(m);
    return 0;
}

int kw_grammar_accept_bytes(kw_grammar_matcher *m, const void *bytes, size_t n, kw_err *err) {
    if (m->done) return kw_err_set(err, "grammar: the output is already complete");
    uint32_t mark = m->st.n_nodes;
    int can_end;
    int rc = run_bytes(m, bytes, n, &can_end);
    if (rc) {
        m->st.n_nodes = mark;
        if (rc > 0) return kw_err_set(err, "grammar: the text does not continue a valid output");
        return kw_err_set(err, m->st.overflow ? "grammar: too ambiguous (limit max_heads)" : "grammar: out of memory");
    }
    if (commit(m, can_end)) return kw_err_set(err, "grammar: out of memory");
    return 0;
}

int kw_grammar_accept_token(kw_grammar_matcher *m, int32_t id, kw_err *err) {
    const kw_grammar_vocab *v = m->ix ? gi_vocab(m->ix) : NULL;
    if (!v) return kw_err_set(err, "grammar: accept_token needs a matcher made with an index");
    if (id < 0 || id >= v->n) return kw_err_set(err, "grammar: token %d out of range", id);
    if (m->done) return kw_err_set(err, "grammar: the output is already complete");
    if (v->kind[id] == KW_GTOK_EOG) {
        if (!m->can_end) return kw_err_set(err, "grammar: end of generation before the output is complete");
        if (hist_push(m)) return kw_err_set(err, "grammar: out of memory");
        m->done = 1;
        return 0;
    }
    if (v->kind[id] != KW_GTOK_TEXT || v->len[id] == 0)
        return kw_err_set(err, "grammar: token %d is not allowed by the grammar", id);
    return kw_grammar_accept_bytes(m, v->bytes + v->off[id], v->len[id], err);
}

bool kw_grammar_can_end(const kw_grammar_matcher *m) { return m->can_end || m->done; }
bool kw_grammar_is_complete(const kw_grammar_matcher *m) { return m->done || (m->can_end && m->n_heads == 0); }

/* for the mask (index.c) */
g_stepper *gm_stepper(kw_grammar_matcher *m) { return &m->st; }
const kw_grammar *gm_grammar(const kw_grammar_matcher *m) { return m->g; }
const g_head *gm_heads(const kw_grammar_matcher *m, uint32_t *n) { *n = m->n_heads; return m->heads; }
const kw_grammar_index *gm_index(const kw_grammar_matcher *m) { return m->ix; }
int gm_done(const kw_grammar_matcher *m) { return m->done; }
gm_scratch *gm_scr(kw_grammar_matcher *m) { return &m->scr; }
