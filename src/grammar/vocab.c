/* vocab.c - a model's tokens as raw bytes for the grammar engine, and
 * their trie (preorder arrays, root excluded) that index walks follow:
 * one walk visits every token prefix once and skips a whole subtree as
 * soon as the grammar rejects its prefix.
 *
 * Only text tokens with at least one byte enter the trie; EOG tokens are
 * listed apart (allowed when the grammar can end); other specials are
 * never allowed. Tokens with identical bytes share a trie node and are
 * chained through same_next. */
#include "gram_internal.h"
#include "kvwise/tokenizer.h"
#include <stdlib.h>

void kw_grammar_vocab_free(kw_grammar_vocab *v) {
    if (!v) return;
    kw_mem_free(v->kind); kw_mem_free(v->off); kw_mem_free(v->len); kw_mem_free(v->bytes);
    kw_mem_free(v->tb); kw_mem_free(v->td); kw_mem_free(v->te); kw_mem_free(v->tt);
    kw_mem_free(v->same_next); kw_mem_free(v->eog);
    gv_cache_free(v->cache);
    kw_mem_free(v);
}

int32_t kw_grammar_vocab_size(const kw_grammar_vocab *v) { return v->n; }

size_t kw_grammar_vocab_bytes(const kw_grammar_vocab *v) {
    const void *parts[] = {v, v->kind, v->off, v->len, v->bytes, v->tb, v->td, v->te, v->tt, v->same_next, v->eog};
    size_t n = KW_GRAMMAR_VOCAB_CACHE_BYTES;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) n += kw_mem_size(parts[i]);
    return n;
}

const char *kw_grammar_vocab_token(const kw_grammar_vocab *v, int32_t id, uint32_t *len) {
    if (id < 0 || id >= v->n) { *len = 0; return ""; }
    *len = v->len[id];
    return (const char *)v->bytes + v->off[id];
}

int kw_grammar_vocab_kind(const kw_grammar_vocab *v, int32_t id) {
    return id >= 0 && id < v->n ? v->kind[id] : KW_GTOK_SPECIAL;
}

static int cmp_tok(const void *a, const void *b, void *ctx) {
    const kw_grammar_vocab *v = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = v->len[x], ly = v->len[y];
    int c = memcmp(v->bytes + v->off[x], v->bytes + v->off[y], lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* Builds the trie from the sorted text tokens. */
static int build_trie(kw_grammar_vocab *v, int32_t *ids, uint32_t n) {
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) total += v->len[ids[i]];
    uint64_t cap = total + 1;
    v->tb = kw_mem_alloc(KW_MEM_TOKENIZER, cap);
    v->td = kw_mem_alloc(KW_MEM_TOKENIZER, cap * sizeof *v->td);
    v->te = kw_mem_alloc(KW_MEM_TOKENIZER, cap * sizeof *v->te);
    v->tt = kw_mem_alloc(KW_MEM_TOKENIZER, cap * sizeof *v->tt);
    uint32_t *open = kw_mem_alloc(KW_MEM_TOKENIZER, 65537 * sizeof *open);   /* node index per depth */
    if (!v->tb || !v->td || !v->te || !v->tt || !open) {
        kw_mem_free(open);
        return -1;
    }
    uint32_t nn = 0, depth = 0;
    const uint8_t *prev = NULL;
    uint32_t prev_len = 0;
    for (uint32_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        const uint8_t *s = v->bytes + v->off[id];
        uint32_t len = v->len[id];
        uint32_t lcp = 0;
        while (lcp < len && lcp < prev_len && s[lcp] == prev[lcp]) lcp++;
        while (depth > lcp) v->te[open[--depth]] = nn;   /* close deeper nodes */
        for (uint32_t d = lcp; d < len; d++) {
            v->tb[nn] = s[d];
            v->td[nn] = (uint16_t)(d + 1);
            v->tt[nn] = -1;
            open[depth++] = nn++;
        }
        uint32_t node = open[len - 1];
        if (v->tt[node] < 0) v->tt[node] = id;
        else {   /* same bytes as an earlier token: append to its chain */
            int32_t t = v->tt[node];
            while (v->same_next[t] >= 0) t = v->same_next[t];
            v->same_next[t] = id;
        }
        prev = s;
        prev_len = len;
    }
    while (depth > 0) v->te[open[--depth]] = nn;
    v->n_nodes = nn;
    kw_mem_free(open);
    return 0;
}

kw_grammar_vocab *kw_grammar_vocab_new(int32_t n, const char *const *bytes, const uint32_t *lens,
                                       const uint8_t *kinds, kw_err *err) {
    if (n <= 0) {
        kw_err_set(err, "grammar vocab: no tokens");
        return NULL;
    }
    kw_grammar_vocab *v = kw_mem_calloc(KW_MEM_TOKENIZER, sizeof *v);
    int32_t *ids = NULL;
    if (!v) goto oom;
    v->n = n;
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        if (lens[i] > 65535) {
            kw_err_set(err, "grammar vocab: token %d is longer than 65535 bytes", i);
            goto fail;
        }
        total += lens[i];
    }
    v->kind = kw_mem_alloc(KW_MEM_TOKENIZER, (size_t)n);
    v->off = kw_mem_alloc(KW_MEM_TOKENIZER, (size_t)n * sizeof *v->off);
    v->len = kw_mem_alloc(KW_MEM_TOKENIZER, (size_t)n * sizeof *v->len);
    v->bytes = kw_mem_alloc(KW_MEM_TOKENIZER, total + 1);
    v->same_next = kw_mem_alloc(KW_MEM_TOKENIZER, (size_t)n * sizeof *v->same_next);
    v->eog = kw_mem_alloc(KW_MEM_TOKENIZER, (size_t)n * sizeof *v->eog);
    ids = kw_mem_alloc(KW_MEM_TOKENIZER, (size_t)n * sizeof *ids);
    if (!v->kind || !v->off || !v->len || !v->bytes || !v->same_next || !v->eog || !ids) goto oom;
    uint64_t o = 0;
    uint32_t n_text = 0;
    for (int32_t i = 0; i < n; i++) {
        v->kind[i] = kinds ? kinds[i] : KW_GTOK_TEXT;
        if (v->kind[i] > KW_GTOK_SPECIAL) v->kind[i] = KW_GTOK_SPECIAL;
        v->off[i] = (uint32_t)o;
        v->len[i] = lens[i];
        if (lens[i]) memcpy(v->bytes + o, bytes[i], lens[i]);
        o += lens[i];
        v->same_next[i] = -1;
        if (v->kind[i] == KW_GTOK_EOG) v->eog[v->n_eog++] = i;
        if (v->kind[i] == KW_GTOK_TEXT && lens[i] > 0) {
            ids[n_text++] = i;
            if (lens[i] > v->max_len) v->max_len = lens[i];
        }
    }
    if (o > 0xFFFFFFF0u) {
        kw_err_set(err, "grammar vocab: tokens total more than 4 GiB");
        goto fail;
    }
    qsort_r(ids, n_text, sizeof *ids, cmp_tok, v);
    if (n_text && build_trie(v, ids, n_text)) goto oom;
    kw_mem_free(ids);
    return v;
oom:
    kw_err_set(err, "grammar vocab: out of memory");
fail:
    kw_mem_free(ids);
    kw_grammar_vocab_free(v);
    return NULL;
}

kw_grammar_vocab *kw_grammar_vocab_from_tokenizer(const struct kw_tokenizer *t, kw_err *err) {
    int32_t n = kw_tokenizer_n_vocab(t);
    if (n <= 0) {
        kw_err_set(err, "grammar vocab: the tokenizer has no tokens");
        return NULL;
    }
    size_t maxp = kw_tokenizer_max_piece(t) + 8;
    char **b = kw_mem_calloc(KW_MEM_TOKENIZER, (size_t)n * sizeof *b);
    uint32_t *lens = kw_mem_alloc(KW_MEM_TOKENIZER, (size_t)n * sizeof *lens);
    uint8_t *kinds = kw_mem_alloc(KW_MEM_TOKENIZER, (size_t)n);
    char *pool = kw_mem_alloc(KW_MEM_TOKENIZER, (size_t)n * 8 + maxp * 4 + 64);
    size_t cap_pool = (size_t)n * 8 + maxp * 4 + 64, used = 0;
    kw_grammar_vocab *v = NULL;
    if (!b || !lens || !kinds || !pool) goto out;
    for (int32_t i = 0; i < n; i++) {
        if (kw_token_is_eog(t, i)) kinds[i] = KW_GTOK_EOG;
        else if (kw_token_is_special(t, i)) kinds[i] = KW_GTOK_SPECIAL;
        else kinds[i] = KW_GTOK_TEXT;
        if (used + maxp > cap_pool) {   /* grow the pool, re-pointing what is in it */
            size_t nc = cap_pool * 2 + maxp;
            char *np = kw_mem_alloc(KW_MEM_TOKENIZER, nc);
            if (!np) goto out;
            memcpy(np, pool, used);
            for (int32_t j = 0; j < i; j++) b[j] = np + (b[j] - pool);
            kw_mem_free(pool);
            pool = np;
            cap_pool = nc;
        }
        size_t len = kinds[i] == KW_GTOK_TEXT ? kw_token_to_piece(t, i, pool + used, maxp, false) : 0;
        if (len > maxp) len = maxp;
        b[i] = pool + used;
        lens[i] = (uint32_t)len;
        used += len;
    }
    v = kw_grammar_vocab_new(n, (const char *const *)b, lens, kinds, err);
    kw_mem_free(b); kw_mem_free(lens); kw_mem_free(kinds); kw_mem_free(pool);
    return v;
out:
    kw_err_set(err, "grammar vocab: out of memory");
    kw_mem_free(b); kw_mem_free(lens); kw_mem_free(kinds); kw_mem_free(pool);
    return NULL;
}
