/* bpe_train.c - the byte-level BPE vocabulary of mkmodel's models.
 *
 * Owns: the GPT-2 byte-to-unicode mapping, a GPT-2-like pre-split of the
 * training text (contractions, [space]letters, [space]digits,
 * [space]punctuation, whitespace), a small deterministic BPE training
 * (most frequent adjacent pair first, ties to the lowest ids) over the
 * embedded corpus (corpus.c), and the final token list: 256 byte tokens
 * (id = byte value), the learned tokens, <|endoftext|>, <|im_start|>,
 * <|im_end|>, then <|reserved_N|> control tokens up to the vocab size.
 * The vocabulary does not depend on the model seed. */
#include "mkmodel.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOKEN_NORMAL 1
#define TOKEN_CONTROL 3
#define N_SPECIAL 3

const char kw_mk_chatml_template[] =
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/* ---- GPT-2 byte <-> unicode ---- */

static void byte_to_codepoint(uint32_t map[256]) {
    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; b++) {
        bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        map[b] = printable ? b : 256 + n++;
    }
}

static size_t put_utf8(char *out, uint32_t cp) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    out[0] = (char)(0xc0 | (cp >> 6));          /* all mapped code points are < 0x800 */
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

/* Raw bytes -> the vocab string (each byte as its mapped code point). */
static char *encode_bytes(const uint8_t *raw, size_t len, const uint32_t map[256]) {
    char *s = malloc(len * 2 + 1);
    if (!s) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) o += put_utf8(s + o, map[raw[i]]);
    s[o] = 0;
    return s;
}

/* ---- pre-split of the training text ---- */

static bool is_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static bool is_letter(uint8_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80; }
static bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
static int char_class(uint8_t c) { return is_space(c) ? 0 : is_letter(c) ? 1 : is_digit(c) ? 2 : 3; }

/* End of the piece starting at i. */
static size_t next_piece(const uint8_t *s, size_t n, size_t i) {
    static const char *contractions[] = {"'s", "'t", "'m", "'d", "'re", "'ve", "'ll"};
    if (s[i] == '\'')
        for (size_t k = 0; k < sizeof contractions / sizeof contractions[0]; k++) {
            size_t l = strlen(contractions[k]);
            if (i + l <= n && !memcmp(s + i, contractions[k], l)) return i + l;
        }
    size_t j = i;
    if (s[j] == ' ' && j + 1 < n && !is_space(s[j + 1])) j++;
    int cls = char_class(s[j]);
    if (cls != 0) {
        while (j < n && char_class(s[j]) == cls) j++;
        return j;
    }
    while (j < n && is_space(s[j])) j++;
    if (j < n && j - i > 1 && s[j - 1] == ' ') j--;   /* the last space goes with the next word */
    return j;
}

/* ---- training ---- */

typedef struct word { int32_t *sym; int32_t n; int32_t count; } word;

typedef struct trainer {
    uint8_t **raw;          /* token bytes */
    int32_t *raw_len;
    int32_t n_tokens, cap_tokens;
    word *words;
    int32_t n_words;
    int32_t (*merges)[2];
    int32_t n_merges, cap_merges;
    uint64_t *pair_key;     /* open-addressing pair counts */
    int64_t *pair_count;
    size_t pair_cap;
} trainer;

static int add_token(trainer *t, const uint8_t *bytes, int32_t len) {
    if (t->n_tokens == t->cap_tokens) {
        int32_t cap = t->cap_tokens ? t->cap_tokens * 2 : 512;
        uint8_t **r = realloc(t->raw, (size_t)cap * sizeof *r);
        if (!r) return -1;
        t->raw = r;
        int32_t *l = realloc(t->raw_len, (size_t)cap * sizeof *l);
        if (!l) return -1;
        t->raw_len = l;
        t->cap_tokens = cap;
    }
    uint8_t *c = malloc((size_t)len + 1);
    if (!c) return -1;
    memcpy(c, bytes, (size_t)len);
    t->raw[t->n_tokens] = c;
    t->raw_len[t->n_tokens] = len;
    return t->n_tokens++;
}

static int32_t find_token(const trainer *t, const uint8_t *bytes, int32_t len) {
    for (int32_t i = 0; i < t->n_tokens; i++)
        if (t->raw_len[i] == len && !memcmp(t->raw[i], bytes, (size_t)len)) return i;
    return -1;
}

typedef struct piece { const uint8_t *p; size_t n; } piece;
static int cmp_piece(const void *a, const void *b) {
    const piece *x = a, *y = b;
    size_t n = x->n < y->n ? x->n : y->n;
    int r = memcmp(x->p, y->p, n);
    return r ? r : (x->n < y->n ? -1 : x->n > y->n);
}

/* Splits the corpus and groups equal pieces into words with counts. */
static int collect_words(trainer *t) {
    size_t len;
    const uint8_t *s = (const uint8_t *)kw_mk_corpus(&len);
    piece *pieces = malloc(len * sizeof *pieces);
    if (!pieces) return -1;
    size_t np = 0;
    for (size_t i = 0; i < len;) {
        size_t e = next_piece(s, len, i);
        pieces[np++] = (piece){s + i, e - i};
        i = e;
    }
    qsort(pieces, np, sizeof *pieces, cmp_piece);
    t->words = calloc(np ? np : 1, sizeof *t->words);
    if (!t->words) { free(pieces); return -1; }
    for (size_t i = 0; i < np;) {
        size_t j = i;
        while (j < np && !cmp_piece(&pieces[i], &pieces[j])) j++;
        word *w = &t->words[t->n_words++];
        w->n = (int32_t)pieces[i].n;
        w->count = (int32_t)(j - i);
        w->sym = malloc((size_t)w->n * sizeof *w->sym);
        if (!w->sym) { free(pieces); return -1; }
        for (int32_t k = 0; k < w->n; k++) w->sym[k] = pieces[i].p[k];
        i = j;
    }
    free(pieces);
    size_t total = len * 2 + 16, cap = 1;
    while (cap < total) cap <<= 1;
    t->pair_cap = cap;
    t->pair_key = malloc(cap * sizeof *t->pair_key);
    t->pair_count = malloc(cap * sizeof *t->pair_count);
    return t->pair_key && t->pair_count ? 0 : -1;
}

static void count_pairs(trainer *t) {
    memset(t->pair_count, 0, t->pair_cap * sizeof *t->pair_count);
    for (int32_t w = 0; w < t->n_words; w++) {
        const word *wd = &t->words[w];
        for (int32_t k = 0; k + 1 < wd->n; k++) {
            uint64_t key = ((uint64_t)(uint32_t)wd->sym[k] << 32) | (uint32_t)wd->sym[k + 1];
            size_t h = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & (t->pair_cap - 1);
            while (t->pair_count[h] && t->pair_key[h] != key) h = (h + 1) & (t->pair_cap - 1);
            t->pair_key[h] = key;
            t->pair_count[h] += wd->count;
        }
    }
}

static bool best_pair(const trainer *t, uint64_t *key) {
    int64_t best = 0;
    for (size_t h = 0; h < t->pair_cap; h++) {
        int64_t c = t->pair_count[h];
        if (c > best || (c == best && c > 0 && t->pair_key[h] < *key)) { best = c; *key = t->pair_key[h]; }
    }
    return best >= 2;
}

static void apply_merge(trainer *t, int32_t a, int32_t b, int32_t id) {
    for (int32_t w = 0; w < t->n_words; w++) {
        word *wd = &t->words[w];
        int32_t o = 0;
        for (int32_t k = 0; k < wd->n; k++) {
            if (k + 1 < wd->n && wd->sym[k] == a && wd->sym[k + 1] == b) { wd->sym[o++] = id; k++; }
            else wd->sym[o++] = wd->sym[k];
        }
        wd->n = o;
    }
}

static int train(trainer *t, int32_t max_new_tokens) {
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        if (add_token(t, &c, 1) < 0) return -1;
    }
    if (collect_words(t)) return -1;
    int32_t added = 0;
    while (added < max_new_tokens) {
        count_pairs(t);
        uint64_t key = UINT64_MAX;
        if (!best_pair(t, &key)) break;
        int32_t a = (int32_t)(key >> 32), b = (int32_t)(key & 0xffffffffu);
        int32_t len = t->raw_len[a] + t->raw_len[b];
        uint8_t *cat = malloc((size_t)len);
        if (!cat) return -1;
        memcpy(cat, t->raw[a], (size_t)t->raw_len[a]);
        memcpy(cat + t->raw_len[a], t->raw[b], (size_t)t->raw_len[b]);
        int32_t id = find_token(t, cat, len);
        if (id < 0) { id = add_token(t, cat, len); added++; }
        free(cat);
        if (id < 0) return -1;
        if (t->n_merges == t->cap_merges) {
            int32_t cap = t->cap_merges ? t->cap_merges * 2 : 512;
            void *m = realloc(t->merges, (size_t)cap * sizeof *t->merges);
            if (!m) return -1;
            t->merges = m;
            t->cap_merges = cap;
        }
        t->merges[t->n_merges][0] = a;
        t->merges[t->n_merges][1] = b;
        t->n_merges++;
        apply_merge(t, a, b, id);
    }
    return 0;
}

static void trainer_free(trainer *t) {
    for (int32_t i = 0; i < t->n_tokens; i++) free(t->raw[i]);
    for (int32_t i = 0; i < t->n_words; i++) free(t->words[i].sym);
    free(t->raw); free(t->raw_len); free(t->words); free(t->merges);
    free(t->pair_key); free(t->pair_count);
}

/* ---- the vocabulary ---- */

static int fill_vocab(const trainer *t, int32_t n_vocab, kw_mk_vocab *v) {
    uint32_t map[256];
    byte_to_codepoint(map);
    v->tokens = calloc((size_t)n_vocab, sizeof *v->tokens);
    v->types = calloc((size_t)n_vocab, sizeof *v->types);
    v->merges = calloc((size_t)(t->n_merges ? t->n_merges : 1), sizeof *v->merges);
    if (!v->tokens || !v->types || !v->merges) return -1;
    v->n_tokens = n_vocab;
    int32_t id = 0;
    for (; id < t->n_tokens; id++) {
        v->tokens[id] = encode_bytes(t->raw[id], (size_t)t->raw_len[id], map);
        v->types[id] = TOKEN_NORMAL;
        if (!v->tokens[id]) return -1;
    }
    static const char *specials[N_SPECIAL] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    v->eos = id;
    v->im_start = id + 1;
    v->im_end = id + 2;
    for (int k = 0; k < N_SPECIAL; k++, id++) {
        v->tokens[id] = strdup(specials[k]);
        v->types[id] = TOKEN_CONTROL;
        if (!v->tokens[id]) return -1;
    }
    for (int32_t r = 0; id < n_vocab; id++, r++) {
        char buf[32];
        snprintf(buf, sizeof buf, "<|reserved_%d|>", r);
        v->tokens[id] = strdup(buf);
        v->types[id] = TOKEN_CONTROL;
        if (!v->tokens[id]) return -1;
    }
    v->n_merges = t->n_merges;
    for (int32_t m = 0; m < t->n_merges; m++) {
        const int32_t a = t->merges[m][0], b = t->merges[m][1];
        size_t la = strlen(v->tokens[a]), lb = strlen(v->tokens[b]);
        char *s = malloc(la + lb + 2);
        if (!s) return -1;
        memcpy(s, v->tokens[a], la);
        s[la] = ' ';
        memcpy(s + la + 1, v->tokens[b], lb + 1);
        v->merges[m] = s;
    }
    return 0;
}

int kw_mk_vocab_build(int32_t n_vocab, kw_mk_vocab *v, kw_err *err) {
    memset(v, 0, sizeof *v);
    if (n_vocab < 256 + N_SPECIAL)
        return kw_err_set(err, "vocab size %d is too small (at least %d: 256 byte tokens + 3 special tokens)",
                          n_vocab, 256 + N_SPECIAL);
    trainer t = {0};
    int rc = train(&t, n_vocab - 256 - N_SPECIAL);
    if (rc == 0) rc = fill_vocab(&t, n_vocab, v);
    trainer_free(&t);
    if (rc) { kw_mk_vocab_free(v); return kw_err_set(err, "out of memory building the tokenizer"); }
    return 0;
}

void kw_mk_vocab_free(kw_mk_vocab *v) {
    if (!v) return;
    for (int32_t i = 0; v->tokens && i < v->n_tokens; i++) free(v->tokens[i]);
    for (int32_t i = 0; v->merges && i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens); free(v->types); free(v->merges);
    memset(v, 0, sizeof *v);
}
