/* tokenize.c - kw_tokenize: special-token partition, BOS/EOS, dispatch to
 * the SPM or byte-level BPE encoder.
 *
 * Partition (as llama.cpp's tokenizer_st_partition): the text starts as one
 * raw fragment. Special tokens are taken longest text first; each one splits
 * every raw fragment at each of its occurrences into left text, the token,
 * and right text. User-defined tokens are always split out; control and
 * unknown ones only with parse_special. Tokens flagged lstrip/rstrip eat the
 * ASCII whitespace beside them. A bitmap of the byte pairs present in the
 * text skips the many special tokens that cannot occur in it.
 *
 * SPM puts a space in front of a text fragment that starts the text or
 * follows a special token (when add_space_prefix).
 *
 * KW_SPECIAL_TEMPLATE (rendered chat prompts): as parse_special, except that
 * a special token's text right after the byte KW_SPECIAL_DEFUSE (0xFF, which
 * valid UTF-8 never holds) stays plain text, and every 0xFF byte is dropped
 * before encoding. kw_tokenizer_defuse writes that byte in front of each
 * control token's text in message content, so a client's "<|im_end|>" is
 * read as the words it spells, never as the control token. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include "tok_internal.h"
#include "kvwise/memory.h"

typedef struct frag { int32_t token; size_t off, len; } frag; /* token -1: raw text */

typedef struct frag_list { frag *v; size_t n, cap; } frag_list;

typedef struct kw_sbuf_lite { char *p; size_t n, cap; } kw_sbuf_lite;  /* kw_tokenizer_defuse's output */

static int lite_add(kw_sbuf_lite *b, const char *s, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

static int frag_push(frag_list *l, int32_t token, size_t off, size_t len) {
    if (l->n == l->cap) {
        frag *nv = tk_scratch_grow(l->v, &l->cap, l->n + 1, sizeof *nv);
        if (!nv) return -1;
        l->v = nv;
    }
    l->v[l->n++] = (frag){token, off, len};
    return 0;
}

/* 65536-bit set of the adjacent byte pairs in the text */
static uint64_t *pair_bitmap(const char *text, size_t n) {
    uint64_t *bm = kw_mem_calloc(KW_MEM_TOKENIZER, 65536 / 8);
    if (!bm) return NULL;
    for (size_t i = 0; i + 1 < n; i++) {
        unsigned p = ((unsigned)(unsigned char)text[i] << 8) | (unsigned char)text[i + 1];
        bm[p >> 6] |= 1ull << (p & 63);
    }
    return bm;
}

static bool may_occur(const uint64_t *bm, const char *text, size_t n, const char *s, size_t len) {
    if (len > n) return false;
    if (len == 1) return memchr(text, s[0], n) != NULL;
    for (size_t i = 0; i + 1 < len; i++) {
        unsigned p = ((unsigned)(unsigned char)s[i] << 8) | (unsigned char)s[i + 1];
        if (!(bm[p >> 6] & (1ull << (p & 63)))) return false;
    }
    return true;
}

/* Splits every raw fragment of `in` on token id; result in `out`. */
static int split_on_token(const kw_tokenizer *t, const char *text, int32_t id, bool marked, const frag_list *in,
                          frag_list *out) {
    const tk_token *k = &t->tok[id];
    const char *s = t->text_pool + k->text_off;
    size_t len = k->text_len;
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        frag f = in->v[i];
        if (f.token >= 0) {
            if (frag_push(out, f.token, 0, 0) != 0) return -1;
            continue;
        }
        size_t off = f.off, rem = f.len, scan = f.off;   /* scan: where the next match may start */
        for (;;) {
            size_t srem = off + rem - scan;
            const char *m = srem >= len ? memmem(text + scan, srem, s, len) : NULL;
            if (m && marked && m > text + off && (unsigned char)m[-1] == KW_SPECIAL_DEFUSE) {
                scan = (size_t)(m - text) + 1;     /* defused: plain text, the fragment goes on */
                continue;
            }
            if (!m) {
                if (rem && frag_push(out, -1, off, rem) != 0) return -1;
                break;
            }
            size_t mo = (size_t)(m - text), left = mo - off;
            if (k->attr & TK_ATTR_LSTRIP)
                while (left > 0 && isspace((unsigned char)text[off + left - 1])) left--;
            if (left && frag_push(out, -1, off, left) != 0) return -1;
            if (frag_push(out, id, 0, 0) != 0) return -1;
            size_t end = mo + len;
            rem = f.off + f.len - end;
            off = end;
            if (k->attr & TK_ATTR_RSTRIP)
                while (rem > 0 && isspace((unsigned char)text[off])) { off++; rem--; }
            scan = off;
            if (rem == 0) break;
        }
    }
    return 0;
}

static int partition(const kw_tokenizer *t, const char *text, size_t n, int parse_special, frag_list *frags) {
    frags->n = 0;
    if (n == 0) return 0;
    if (frag_push(frags, -1, 0, n) != 0) return -1;
    uint64_t *bm = pair_bitmap(text, n);
    if (!bm) return -1;
    frag_list tmp = {0};
    int rc = 0;
    for (int32_t i = 0; i < t->n_special && rc == 0; i++) {
        int32_t id = t->special[i];
        const tk_token *k = &t->tok[id];
        if (!parse_special && (k->attr & (TK_ATTR_CONTROL | TK_ATTR_UNKNOWN))) continue;
        if (k->text_len == 0 || !may_occur(bm, text, n, t->text_pool + k->text_off, k->text_len)) continue;
        if (!memmem(text, n, t->text_pool + k->text_off, k->text_len)) continue;
        rc = split_on_token(t, text, id, parse_special == KW_SPECIAL_TEMPLATE, frags, &tmp);
        frag_list sw = *frags;
        *frags = tmp;
        tmp = sw;
    }
    tk_scratch_free(tmp.v);
    kw_mem_free(bm);
    return rc;
}

/* Encodes one raw fragment; marked: without its KW_SPECIAL_DEFUSE bytes. */
static int encode_raw(const kw_tokenizer *t, const char *p, size_t n, bool space_prefix, bool marked, tk_ids *out,
                      kw_err *err) {
    char *clean = NULL;
    if (marked && memchr(p, KW_SPECIAL_DEFUSE, n)) {
        if (!(clean = malloc(n))) return kw_err_set(err, "tokenize: out of memory");
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)p[i] != KW_SPECIAL_DEFUSE) clean[k++] = p[i];
        p = clean;
        n = k;
    }
    int rc = n == 0 ? 0
             : t->type == TK_SPM ? tk_spm_encode(t, p, n, t->add_space_prefix && space_prefix, out, err)
                                 : tk_bpe_encode(t, p, n, out, err);
    free(clean);
    return rc;
}

static int encode_fragments(const kw_tokenizer *t, const char *text, const frag_list *frags, bool add_special,
                            bool marked, tk_ids *out, kw_err *err) {
    if (add_special && t->add_bos && t->bos >= 0 && tk_ids_push(out, t->bos) != 0) goto oom;
    bool prev_special = true; /* SPM: a space goes in front of the first text */
    for (size_t i = 0; i < frags->n; i++) {
        const frag *f = &frags->v[i];
        if (f->token >= 0) {
            if (tk_ids_push(out, f->token) != 0) goto oom;
            prev_special = true;
            continue;
        }
        if (encode_raw(t, text + f->off, f->len, prev_special, marked, out, err) != 0) return -1;
        prev_special = false;
    }
    if (add_special && t->add_eos && t->eos >= 0 && tk_ids_push(out, t->eos) != 0) goto oom;
    return 0;
oom:
    return kw_err_set(err, "tokenize: out of memory");
}

int kw_tokenize(const kw_tokenizer *t, const char *text, size_t len, bool add_special, int parse_special,
                int32_t **ids, size_t *n_ids, kw_err *err) {
    if (ids) *ids = NULL;
    if (n_ids) *n_ids = 0;
    if (!t || !ids || !n_ids || (!text && len)) return kw_err_set(err, "tokenize: bad arguments");
    frag_list frags = {0};
    tk_ids out = {0};
    if (partition(t, text, len, parse_special, &frags) != 0) {
        tk_scratch_free(frags.v);
        return kw_err_set(err, "tokenize: out of memory (text of %zu bytes)", len);
    }
    int rc = encode_fragments(t, text, &frags, add_special, parse_special == KW_SPECIAL_TEMPLATE, &out, err);
    tk_scratch_free(frags.v);
    if (rc != 0) {
        free(out.v);
        return -1;
    }
    if (!out.v) out.v = malloc(sizeof(int32_t)); /* a valid pointer even for zero ids */
    if (!out.v) return kw_err_set(err, "tokenize: out of memory");
    *ids = out.v;
    *n_ids = out.n;
    return 0;
}

/* The control (and unknown) tokens: what only parse_special reads from text. */
static bool is_control(const kw_tokenizer *t, int32_t id) {
    return (t->tok[id].attr & (TK_ATTR_CONTROL | TK_ATTR_UNKNOWN)) && t->tok[id].text_len > 0;
}

int kw_tokenizer_defuse(const kw_tokenizer *t, const char *s, size_t len, char **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    uint64_t first[4] = {0};        /* the first bytes of control tokens' texts */
    for (int32_t i = 0; i < t->n_special; i++)
        if (is_control(t, t->special[i])) {
            unsigned char c = (unsigned char)t->text_pool[t->tok[t->special[i]].text_off];
            first[c >> 6] |= 1ull << (c & 63);
        }
    kw_sbuf_lite b = {0};
    size_t done = 0;                /* s[0..done) is in b (once b is in use) */
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!(first[c >> 6] & (1ull << (c & 63)))) continue;
        size_t hit = 0;
        for (int32_t k = 0; k < t->n_special && !hit; k++) {      /* longest text first */
            const tk_token *tk = &t->tok[t->special[k]];
            if (is_control(t, t->special[k]) && tk->text_len <= len - i &&
                !memcmp(s + i, t->text_pool + tk->text_off, tk->text_len))
                hit = tk->text_len;
        }
        if (!hit) continue;
        if (lite_add(&b, s + done, i - done) != 0 || lite_add(&b, "\xff", 1) != 0) { free(b.p); return -1; }
        done = i;
        i += hit - 1;
    }
    if (!b.p) return 0;
    if (lite_add(&b, s + done, len - done) != 0 || lite_add(&b, "", 1) != 0) { free(b.p); return -1; }
    *out = b.p;
    *out_len = b.n - 1;
    return 1;
}
