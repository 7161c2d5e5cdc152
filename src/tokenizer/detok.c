/* detok.c - token -> bytes: kw_token_to_piece and the streaming detokenizer.
 *
 * Pieces are rendered once at load (load.c): SPM "▁" -> ' ', <0xNN> -> the
 * byte, byte-level characters -> their bytes, control/unknown tokens -> their
 * text (shown only when render_special). The streaming detokenizer keeps an
 * incomplete UTF-8 sequence at the end of what it has seen until the next
 * token completes it, so callers only ever receive whole characters; bytes
 * that can never become valid UTF-8 come out as U+FFFD at once.
 * kw_detokenize does a whole sequence the way llama_detokenize does. */
#include <stdlib.h>
#include <string.h>
#include "tok_internal.h"

size_t kw_token_to_piece(const kw_tokenizer *t, int32_t id, char *buf, size_t cap, bool render_special) {
    if (!t || id < 0 || id >= t->n_vocab) return 0;
    const tk_token *k = &t->tok[id];
    if (!render_special && (k->attr & (TK_ATTR_CONTROL | TK_ATTR_UNKNOWN))) return 0;
    size_t n = k->piece_len;
    if (buf && cap) memcpy(buf, t->piece_pool + k->piece_off, n < cap ? n : cap);
    return n;
}

size_t kw_tokenizer_max_piece(const kw_tokenizer *t) { return t ? t->max_piece : 0; }
size_t kw_tokenizer_max_text(const kw_tokenizer *t) { return t && !t->strips ? t->max_text : 0; }

void kw_detok_init(kw_detok *d) { memset(d, 0, sizeof *d); }

void kw_detok_init_continuation(kw_detok *d) {
    kw_detok_init(d);
    d->started = true;
}

/* Is s[1..k) a valid continuation so far for lead s[0]? (k <= its sequence length) */
static bool prefix_ok(const unsigned char *s, int k) {
    for (int i = 1; i < k; i++)
        if (!kw_utf8_cont_ok(s[0], i, s[i])) return false;
    return true;
}

typedef struct sink { char *out; size_t cap, n; } sink;

static void put(sink *s, const void *p, size_t n) {
    size_t room = s->cap > s->n ? s->cap - s->n : 0;
    if (n > room) n = room;
    if (n) memcpy(s->out + s->n, p, n);
    s->n += n;
}

static void put_replacement(sink *s) { put(s, "\xEF\xBF\xBD", 3); }

/* Feeds bytes through the pending buffer: emits complete characters, U+FFFD
 * for impossible bytes, and keeps a trailing incomplete sequence. */
static void feed(kw_detok *d, sink *s, const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        if (d->n_pend == 0) {
            int L = kw_utf8_seq_len(c);
            if (L == 1) { put(s, &c, 1); continue; }
            if (L == 0) { put_replacement(s); continue; }
            d->pend[d->n_pend++] = (char)c;
            continue;
        }
        d->pend[d->n_pend++] = (char)c;
        int L = kw_utf8_seq_len((unsigned char)d->pend[0]);
        if (!prefix_ok((const unsigned char *)d->pend, d->n_pend)) {
            /* the held sequence is broken: replace it and reconsider this byte */
            put_replacement(s);
            d->n_pend = 0;
            i--;
            continue;
        }
        if (d->n_pend == L) {
            put(s, d->pend, (size_t)L);
            d->n_pend = 0;
        }
    }
}

size_t kw_detok_push(const kw_tokenizer *t, kw_detok *d, int32_t id, bool render_special, char *out, size_t cap) {
    sink s = {out, cap, 0};
    if (!t || id < 0 || id >= t->n_vocab) return 0;
    const tk_token *k = &t->tok[id];
    bool shown = render_special || !(k->attr & (TK_ATTR_CONTROL | TK_ATTR_UNKNOWN));
    const unsigned char *p = (const unsigned char *)t->piece_pool + k->piece_off;
    size_t n = shown ? k->piece_len : 0;
    if (!d->started) { /* the SentencePiece space added in front of the text */
        d->started = true;
        if (t->add_space_prefix && n && p[0] == ' ') { p++; n--; }
    }
    feed(d, &s, p, n);
    return s.n < cap ? s.n : cap;
}

size_t kw_detok_flush(kw_detok *d, char *out, size_t cap) {
    sink s = {out, cap, 0};
    if (d->n_pend) put_replacement(&s);
    d->n_pend = 0;
    return s.n < cap ? s.n : cap;
}

/* ---- whole sequences ---- */

/* llama.cpp's clean_up_tokenization_spaces, three passes in place:
 * " ?" " !" " ." " ," lose the space; " ' " loses both spaces; " 's" " 'm"
 * " 're" " 've" lose the space. Returns the new length. */
static size_t clean_spaces(char *s, size_t n) {
    size_t o = n ? 1 : 0;
    for (size_t i = 1; i < n; i++) {
        char x = s[i];
        if (s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) o--;
        s[o++] = x;
    }
    n = o;
    o = n ? 1 : 0;
    for (size_t i = 1; i < n; i++) {
        char x = s[i];
        if (x == '\'' && i + 1 < n && s[i - 1] == ' ' && s[i + 1] == ' ') {
            o--;
            s[++i] = '\0'; /* the space after is dropped (its slot is skipped) */
        }
        s[o++] = x;
    }
    n = o;
    o = n ? 1 : 0;
    for (size_t i = 1; i < n; i++) {
        char x = s[i];
        if (s[i - 1] == ' ' && x == '\'' && i + 1 < n) {
            char x1 = s[i + 1];
            if (x1 == 's' || x1 == 'm') o--;
            else if (i + 2 < n && ((x1 == 'r' && s[i + 2] == 'e') || (x1 == 'v' && s[i + 2] == 'e'))) o--;
        }
        s[o++] = x;
    }
    return o;
}

int kw_detokenize(const kw_tokenizer *t, const int32_t *ids, size_t n, bool render_special, char **out, size_t *len,
                  kw_err *err) {
    if (out) *out = NULL;
    if (len) *len = 0;
    if (!t || !out || !len || (!ids && n)) return kw_err_set(err, "detokenize: bad arguments");
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += kw_token_to_piece(t, ids[i], NULL, 0, render_special);
    char *buf = malloc(total + 1);
    if (!buf) return kw_err_set(err, "detokenize: out of memory for %zu bytes", total);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k = kw_token_to_piece(t, ids[i], buf + o, total - o, render_special);
        if (i == 0 && t->add_space_prefix && k && buf[o] == ' ') { /* the SentencePiece prefix space */
            memmove(buf + o, buf + o + 1, k - 1);
            k--;
        }
        o += k;
    }
    if (t->clean_spaces) o = clean_spaces(buf, o);
    buf[o] = '\0';
    *out = buf;
    *len = o;
    return 0;
}
