/* bpe.c - byte-level BPE ("gpt2" vocabs): merges by rank.
 *
 * The pre-tokenizer (pretok.c) cuts the text into words. GPT-2 maps every
 * byte to a printable character before merging; we work on the raw bytes
 * instead, against tables whose keys were mapped back to raw bytes at load
 * time (the map is a bijection, so this is the same computation). Each word
 * starts as one symbol per byte; adjacent pairs found in the merge table go
 * into the merge heap keyed by -rank (merge_heap.c; ties: leftmost first); popping a pair that is
 * still intact merges it and offers the new neighbours. O(n log n) per word.
 * With ignore_merges (llama3 and others) a word that is itself a token is
 * emitted whole. */
#include <string.h>
#include "tok_internal.h"

typedef struct bpe_work {
    tk_sym *sym; size_t sym_cap;
    tk_heap heap;
} bpe_work;

/* Key of a pair: -(its rank in the merge table). */
static bool merge_rank_key(const kw_tokenizer *t, const char *word, const tk_sym *l, const tk_sym *r, float *key) {
    int32_t rank = tk_map_get(&t->merge_map, word + l->off, l->n + r->n, l->n);
    if (rank < 0) return false;
    *key = -(float)rank;
    return true;
}

/* A final symbol that is no token: llama.cpp then looks up each byte of its
 * GPT-2-mapped text as a one-byte string, which only ever finds something
 * for the bytes that map to themselves in one byte (33..126). */
static int emit_symbol(const kw_tokenizer *t, const char *s, uint32_t n, tk_ids *out) {
    int32_t id = tk_map_get(&t->raw_map, s, n, 0);
    if (id >= 0) return tk_ids_push(out, id);
    for (uint32_t j = 0; j < n; j++) {
        unsigned char b = (unsigned char)s[j];
        if (b < 33 || b > 126) continue;
        int32_t bid = t->byte_tok[b];
        if (bid >= 0 && tk_ids_push(out, bid) != 0) return -1;
    }
    return 0;
}

static int bpe_word(const kw_tokenizer *t, bpe_work *w, const char *word, size_t n, tk_ids *out) {
    if (t->ignore_merges) {
        int32_t id = tk_map_get(&t->raw_map, word, n, 0);
        if (id >= 0) return tk_ids_push(out, id);
    }
    tk_sym *ns = tk_scratch_grow(w->sym, &w->sym_cap, n, sizeof *ns);
    if (!ns) return -1;
    w->sym = ns;
    for (size_t i = 0; i < n; i++) {
        ns[i].off = (uint32_t)i;
        ns[i].n = 1;
        ns[i].prev = (int32_t)i - 1;
        ns[i].next = i + 1 == n ? -1 : (int32_t)i + 1;
    }
    if (tk_merge_symbols(t, word, ns, 0, n, merge_rank_key, &w->heap) != 0) return -1;
    for (int32_t i = 0; i != -1; i = w->sym[i].next)
        if (emit_symbol(t, word + w->sym[i].off, w->sym[i].n, out) != 0) return -1;
    return 0;
}

int tk_bpe_encode(const kw_tokenizer *t, const char *text, size_t n, tk_ids *out, kw_err *err) {
    if (n == 0) return 0;
    if (n > UINT32_MAX / 2) return kw_err_set(err, "tokenize: text of %zu bytes is too long", n);
    tk_seglist segs = {0};
    if (tk_pretok_split(&t->pretok, text, n, &segs, err) != 0) {
        tk_seglist_free(&segs);
        return -1;
    }
    bpe_work w = {0};
    int rc = 0;
    size_t pos = 0;
    for (size_t i = 0; i < segs.n && rc == 0; i++) {
        if (segs.len[i]) rc = bpe_word(t, &w, text + pos, segs.len[i], out);
        pos += segs.len[i];
    }
    tk_scratch_free(w.sym);
    tk_scratch_free(w.heap.a);
    tk_seglist_free(&segs);
    if (rc != 0) return kw_err_set(err, "tokenize: out of memory (text of %zu bytes)", n);
    return 0;
}
