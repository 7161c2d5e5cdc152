/* merge_heap.c - the priority queue of candidate merges shared by the SPM
 * and byte-level BPE encoders (tok_internal.h). A binary heap of tk_pair:
 * the highest key pops first, ties go to the leftmost pair. SPM keys are
 * token scores; BPE keys are -rank (exact in a float for ranks < 2^24). */
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
