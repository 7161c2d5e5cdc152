/* merge_heap.c - the merge loop shared by the SPM and byte-level BPE
 * encoders (tok_internal.h) and its priority queue of candidate merges. A
 * binary heap of tk_pair: the highest key pops first, ties go to the
 * leftmost pair. SPM keys are token scores; BPE keys are -rank (exact in a
 * float for ranks < 2^24). */
#include "tok_internal.h"

static bool pair_before(const tk_pair *a, const tk_pair *b) {
    return a->key > b->key || (a->key == b->key && a->left < b->left);
}

int tk_heap_push(tk_heap *h, tk_pair p) {
    if (h->n == h->cap) {
        tk_pair *na = tk_scratch_grow(h->a, &h->cap, h->n + 1, sizeof *na);
        if (!na) return -1;
        h->a = na;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!pair_before(&p, &h->a[parent])) break;
        h->a[i] = h->a[parent];
        i = parent;
    }
    h->a[i] = p;
    return 0;
}

tk_pair tk_heap_pop(tk_heap *h) {
    tk_pair top = h->a[0];
    tk_pair last = h->a[--h->n];
    size_t i = 0, n = h->n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && pair_before(&h->a[c + 1], &h->a[c])) c++;
        if (!pair_before(&h->a[c], &last)) break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (n) h->a[i] = last;
    return top;
}

typedef struct merge_run {
    const kw_tokenizer *t;
    const char *text;
    tk_sym *sym;
    tk_merge_key_fn key_of;
    tk_heap *h;
} merge_run;

static int offer_pair(const merge_run *m, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return 0;
    const tk_sym *l = &m->sym[left], *r = &m->sym[right];
    float key;
    if (!m->key_of(m->t, m->text, l, r, &key)) return 0;
    tk_pair p = {key, left, right, l->n + r->n};
    return tk_heap_push(m->h, p);
}

int tk_merge_symbols(const kw_tokenizer *t, const char *text, tk_sym *sym, size_t a, size_t b, tk_merge_key_fn key_of,
                     tk_heap *h) {
    const merge_run m = {t, text, sym, key_of, h};
    h->n = 0;
    for (size_t i = a + 1; i < b; i++)
        if (offer_pair(&m, (int32_t)i - 1, (int32_t)i) != 0) return -1;
    while (h->n) {
        tk_pair p = tk_heap_pop(h);
        tk_sym *l = &sym[p.left], *r = &sym[p.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != p.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = p.left;
        if (offer_pair(&m, l->prev, p.left) != 0 || offer_pair(&m, p.left, l->next) != 0) return -1;
    }
    return 0;
}
