/* spm.c - SentencePiece-style BPE ("llama" vocabs): merges by token score.
 *
 * The text (with an optional leading space) has every ' ' replaced by U+2581
 * and is cut into UTF-8 characters (lengths from the lead byte only, as
 * llama.cpp does, so invalid input is still cut somewhere). Every adjacent
 * pair whose concatenation is a vocab token goes into a max-heap keyed by
 * that token's score (ties: the leftmost pair first). Popping a pair that is
 * still intact merges it and offers the new neighbours. Symbols that end up
 * not being tokens are emitted as byte tokens <0xNN>. O(n log n); when the
 * vocab allows it (see spm_run) each word gets its own heap, which keeps the
 * heap small and in cache for long texts. */
#include <string.h>
#include "tok_internal.h"

typedef struct spm_work {
    char *text; size_t text_cap;
    tk_sym *sym; size_t sym_cap;
    tk_heap heap;
} spm_work;

/* Key of a pair: the score of the token the two spell together. */
static bool token_score_key(const kw_tokenizer *t, const char *text, const tk_sym *l, const tk_sym *r, float *key) {
    int32_t id = tk_map_get(&t->text_map, text + l->off, l->n + r->n, 0);
    if (id < 0) return false;
    *key = t->tok[id].score;
    return true;
}

/* " " -> U+2581 (E2 96 81), with an optional leading one. */
static int escape_text(spm_work *w, const char *text, size_t n, bool space_prefix, size_t *out_n) {
    size_t spaces = space_prefix ? 1 : 0;
    for (size_t i = 0; i < n; i++) spaces += text[i] == ' ';
    size_t need = n + 2 * spaces + (space_prefix ? 1 : 0) + 1;
    char *nt = tk_scratch_grow(w->text, &w->text_cap, need, 1);
    if (!nt) return -1;
    w->text = nt;
    size_t o = 0;
    if (space_prefix) { memcpy(nt + o, "\xE2\x96\x81", 3); o += 3; }
    for (size_t i = 0; i < n; i++) {
        if (text[i] == ' ') { memcpy(nt + o, "\xE2\x96\x81", 3); o += 3; }
        else nt[o++] = text[i];
    }
    *out_n = o;
    return 0;
}

static int split_chars(spm_work *w, size_t n, size_t *n_sym) {
    tk_sym *ns = tk_scratch_grow(w->sym, &w->sym_cap, n + 1, sizeof *ns);
    if (!ns) return -1;
    w->sym = ns;
    size_t k = 0;
    for (size_t off = 0; off < n; k++) {
        size_t len = tk_utf8_len_lead((unsigned char)w->text[off]);
        if (len > n - off) len = n - off;
        ns[k].off = (uint32_t)off;
        ns[k].n = (uint32_t)len;
        ns[k].prev = (int32_t)k - 1;
        off += len;
        ns[k].next = off == n ? -1 : (int32_t)k + 1;
    }
    *n_sym = k;
    return 0;
}

static int emit_symbol(const kw_tokenizer *t, const spm_work *w, const tk_sym *s, tk_ids *out) {
    int32_t id = tk_map_get(&t->text_map, w->text + s->off, s->n, 0);
    if (id >= 0) return tk_ids_push(out, id);
    for (uint32_t j = 0; j < s->n; j++) { /* byte fallback */
        int32_t b = t->byte_tok[(unsigned char)w->text[s->off + j]];
        if (b < 0) b = t->unk;
        if (b >= 0 && tk_ids_push(out, b) != 0) return -1;
    }
    return 0;
}

static bool sym_is_lower_block(const spm_work *w, const tk_sym *s) {
    return s->n == 3 && memcmp(w->text + s->off, "\xE2\x96\x81", 3) == 0;
}

static int spm_run(const kw_tokenizer *t, spm_work *w, const char *text, size_t n, bool space_prefix, tk_ids *out) {
    size_t tn = 0, n_sym = 0;
    if (escape_text(w, text, n, space_prefix, &tn) != 0) return -1;
    if (tn > UINT32_MAX / 2) return -1;
    if (split_chars(w, tn, &n_sym) != 0) return -1;
    /* Words: when no token joins another character to a following U+2581,
     * no pair across such a boundary can ever merge, so each word can run
     * on its own small heap with the very same result. */
    size_t start = 0;
    for (size_t i = 1; t->spm_words && i < n_sym; i++) {
        if (sym_is_lower_block(w, &w->sym[i]) && !sym_is_lower_block(w, &w->sym[i - 1])) {
            if (tk_merge_symbols(t, w->text, w->sym, start, i, token_score_key, &w->heap) != 0) return -1;
            start = i;
        }
    }
    if (tk_merge_symbols(t, w->text, w->sym, start, n_sym, token_score_key, &w->heap) != 0) return -1;
    for (int32_t i = n_sym ? 0 : -1; i != -1; i = w->sym[i].next)
        if (emit_symbol(t, w, &w->sym[i], out) != 0) return -1;
    return 0;
}

int tk_spm_encode(const kw_tokenizer *t, const char *text, size_t n, bool space_prefix, tk_ids *out, kw_err *err) {
    spm_work w = {0};
    int rc = spm_run(t, &w, text, n, space_prefix, out);
    tk_scratch_free(w.text);
    tk_scratch_free(w.sym);
    tk_scratch_free(w.heap.a);
    if (rc != 0) return kw_err_set(err, "tokenize: out of memory (text of %zu bytes)", n);
    return 0;
}
