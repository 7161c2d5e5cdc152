/* load.c - kw_tokenizer_load/free and the accessors (tokenizer.h).
 *
 * Reads tokenizer.ggml.* metadata: model, pre, tokens, scores, token_type,
 * merges, the special ids and the add_* flags, with llama.cpp's defaults per
 * model type (facts from llama-vocab.cpp b4748):
 *   llama (SPM): BOS 1, EOS 2, UNK 0, add_bos true, add_space_prefix true
 *   gpt2 (BPE):  BOS 11, EOS 11, add_bos false except for pre-tokenizers
 *                that set it (llama3, tekken, chameleon); merges required
 * Keys override defaults; ids out of range are ignored. EOT/EOM/FIM and the
 * end-of-generation set are also found by token text (<|eot_id|>,
 * <|im_end|>, <|endoftext|>, ...), and such tokens are made control tokens.
 * Tables (token records, string pools, hash maps) come from kw_mem_alloc
 * (KW_MEM_TOKENIZER). Malformed metadata gives a one-line error, never a
 * crash: every array type and length is checked before use. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tok_internal.h"
#include "kvwise/memory.h"

/* ---- metadata access with type checks ---- */

static const kw_gguf_kv *find_array(const kw_gguf *g, const char *key, kw_gguf_vtype want1, kw_gguf_vtype want2,
                                    bool *bad, kw_err *err) {
    const kw_gguf_kv *kv = kw_gguf_find(g, key);
    *bad = false;
    if (!kv) return NULL;
    if (kv->type != KW_GGUF_ARRAY || (kv->arr_type != want1 && kv->arr_type != want2)) {
        *bad = true;
        kw_err_set(err, "%s: expected an array of %s, got %s%s%s", key, kw_gguf_vtype_name(want1),
                   kv->type == KW_GGUF_ARRAY ? "an array of " : "", kw_gguf_vtype_name(kv->type == KW_GGUF_ARRAY ? kv->arr_type : kv->type),
                   "");
        return NULL;
    }
    return kv;
}

static int32_t read_i32(const void *base, uint64_t i) {
    int32_t v;
    memcpy(&v, (const char *)base + i * 4, 4);
    return v;
}

static float read_f32(const void *base, uint64_t i) {
    float v;
    memcpy(&v, (const char *)base + i * 4, 4);
    return v;
}

/* An id key: present, integer, in range -> *id. Out-of-range values keep the default. */
static void read_id_key(const kw_gguf *g, const char *key, int32_t n_vocab, int32_t *id) {
    int64_t v;
    if (kw_gguf_get_int(g, key, &v) && v >= 0 && v < n_vocab) *id = (int32_t)v;
}

/* ---- building the token tables ---- */

static uint32_t attr_from_type(int32_t type) {
    switch (type) {
    case 1: return TK_ATTR_NORMAL;
    case 2: return TK_ATTR_UNKNOWN;
    case 3: return TK_ATTR_CONTROL;
    case 4: return TK_ATTR_USER_DEFINED;
    case 5: return TK_ATTR_UNUSED;
    case 6: return TK_ATTR_BYTE;
    default: return 0; /* undefined */
    }
}

static const char *tok_text(const kw_tokenizer *t, int32_t id) { return t->text_pool + t->tok[id].text_off; }

static int copy_token_texts(kw_tokenizer *t, const kw_gguf_kv *tokens, kw_err *err) {
    uint64_t total = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        uint64_t len = tokens->arr_str[i].len;
        total += (len ? len : 24) + 1;
    }
    if (total > UINT32_MAX) return kw_err_set(err, "tokenizer.ggml.tokens: %llu bytes of text is too much", (unsigned long long)total);
    t->text_pool = kw_mem_alloc(KW_MEM_TOKENIZER, total ? total : 1);
    if (!t->text_pool) return kw_err_set(err, "tokenizer: out of memory for %llu bytes of token text", (unsigned long long)total);
    uint32_t off = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        const kw_str *s = &tokens->arr_str[i];
        tk_token *k = &t->tok[i];
        k->text_off = off;
        if (s->len == 0) { /* llama.cpp names empty tokens [EMPTY_i] */
            int w = snprintf(t->text_pool + off, 25, "[EMPTY_%d]", (int)i);
            k->text_len = (uint32_t)w;
        } else {
            memcpy(t->text_pool + off, s->s, s->len);
            k->text_len = (uint32_t)s->len;
        }
        t->text_pool[off + k->text_len] = '\0';
        off += k->text_len + 1;
    }
    return 0;
}

static int build_text_map(kw_tokenizer *t, kw_err *err) {
    if (tk_map_init(&t->text_map, (uint32_t)t->n_vocab, t->text_pool) != 0)
        return kw_err_set(err, "tokenizer: out of memory for the vocab map");
    for (int32_t i = 0; i < t->n_vocab; i++) /* a duplicate text: the later id wins (as llama.cpp b4748) */
        if (tk_map_put(&t->text_map, t->tok[i].text_off, t->tok[i].text_len, 0, i, true) != 0)
            return kw_err_set(err, "tokenizer: vocab map overflow");
    return 0;
}

/* Maps GPT-2 byte-level text back to raw bytes; false if some character is
 * not one of the 256 byte characters. out must hold len bytes. */
static bool byte_level_decode(const char *s, size_t len, char *out, size_t *out_n) {
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t k = tk_utf8_decode((const unsigned char *)s + i, len - i, &cp);
        int b = (k > 1 || (unsigned char)s[i] < 0x80) ? tk_unicode_byte(cp) : -1;
        if (b < 0) return false;
        out[o++] = (char)b;
        i += k;
    }
    *out_n = o;
    return true;
}

static int build_raw_tables(kw_tokenizer *t, kw_err *err) {
    uint64_t total = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) total += t->tok[i].text_len;
    t->raw_pool = kw_mem_alloc(KW_MEM_TOKENIZER, total ? total : 1);
    if (!t->raw_pool || tk_map_init(&t->raw_map, (uint32_t)t->n_vocab, t->raw_pool) != 0)
        return kw_err_set(err, "tokenizer: out of memory for the byte-level tables");
    uint32_t off = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        size_t n = 0;
        if (!byte_level_decode(tok_text(t, i), t->tok[i].text_len, t->raw_pool + off, &n)) continue;
        if (tk_map_put(&t->raw_map, off, (uint32_t)n, 0, i, true) != 0) return kw_err_set(err, "tokenizer: raw map overflow");
        off += (uint32_t)n;
    }
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        t->byte_tok[b] = tk_map_get(&t->raw_map, &c, 1, 0);
    }
    return 0;
}

/* Merges are "left right" in byte-level text; stored as raw left|right with
 * the split at len(left). The first occurrence of a pair keeps its rank. */
static int build_merges(kw_tokenizer *t, const kw_gguf_kv *merges, kw_err *err) {
    uint64_t total = 0;
    for (uint64_t i = 0; i < merges->arr_n; i++) total += merges->arr_str[i].len;
    /* ranks become float heap keys (merge_heap.c): exact below 2^24 */
    if (total > UINT32_MAX || merges->arr_n > (1u << 24))
        return kw_err_set(err, "tokenizer.ggml.merges: too large (%llu merges)", (unsigned long long)merges->arr_n);
    t->merge_pool = kw_mem_alloc(KW_MEM_TOKENIZER, total ? total : 1);
    if (!t->merge_pool || tk_map_init(&t->merge_map, (uint32_t)merges->arr_n, t->merge_pool) != 0)
        return kw_err_set(err, "tokenizer: out of memory for %llu merges", (unsigned long long)merges->arr_n);
    uint32_t off = 0;
    for (uint64_t i = 0; i < merges->arr_n; i++) {
        const kw_str *m = &merges->arr_str[i];
        const char *sp = m->len > 1 ? memchr(m->s + 1, ' ', m->len - 1) : NULL;
        if (!sp) continue; /* not a pair: never matches anything */
        size_t ln = (size_t)(sp - m->s), rn = m->len - ln - 1, a = 0, b = 0;
        if (!byte_level_decode(m->s, ln, t->merge_pool + off, &a)) continue;
        if (!byte_level_decode(sp + 1, rn, t->merge_pool + off + a, &b)) continue;
        if (a == 0 || b == 0) continue;
        if (tk_map_put(&t->merge_map, off, (uint32_t)(a + b), (uint32_t)a, (int32_t)i, false) != 0)
            return kw_err_set(err, "tokenizer: merge map overflow");
        off += (uint32_t)(a + b);
    }
    t->n_merges = (int32_t)merges->arr_n;
    return 0;
}

/* ---- special tokens ---- */

static void mark_control(kw_tokenizer *t, int32_t id) { t->tok[id].attr |= TK_ATTR_CONTROL; }

/* Finds the first token (by id) whose text is one of names; -1 if none. */
static int32_t find_by_text(const kw_tokenizer *t, const char *const *names) {
    for (int k = 0; names[k]; k++) {
        int32_t id = tk_map_get(&t->text_map, names[k], strlen(names[k]), 0);
        if (id >= 0) return id;
    }
    return -1;
}

static void detect_by_text(kw_tokenizer *t, int32_t *slot, const char *const *names) {
    if (*slot >= 0) return;
    int32_t best = -1;
    for (int k = 0; names[k]; k++) { /* lowest id among all matching texts */
        int32_t id = tk_map_get(&t->text_map, names[k], strlen(names[k]), 0);
        if (id >= 0 && (best < 0 || id < best)) best = id;
    }
    if (best >= 0) { *slot = best; mark_control(t, best); }
}

static void detect_special_tokens(kw_tokenizer *t) {
    static const char *const eot[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                      "<|end_of_text|>", "<EOT>", "_<EOT>", "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>", NULL};
    static const char *const eom[] = {"<|eom_id|>", NULL};
    static const char *const fim_pre[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>", "<PRE>", "\xE2\x96\x81<PRE>", NULL};
    static const char *const fim_suf[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "hole\xEF\xBD\x9C>", "<SUF>", "\xE2\x96\x81<SUF>", NULL};
    static const char *const fim_mid[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>", "<MID>", "\xE2\x96\x81<MID>", NULL};
    static const char *const fim_pad[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", NULL};
    static const char *const fim_rep[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL};
    static const char *const fim_sep[] = {"<|file_sep|>", NULL};
    static const char *const eog[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                      "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<|return|>", "<|call|>", NULL};
    detect_by_text(t, &t->eot, eot);
    detect_by_text(t, &t->eom, eom);
    detect_by_text(t, &t->fim_pre, fim_pre);
    detect_by_text(t, &t->fim_suf, fim_suf);
    detect_by_text(t, &t->fim_mid, fim_mid);
    detect_by_text(t, &t->fim_pad, fim_pad);
    detect_by_text(t, &t->fim_rep, fim_rep);
    detect_by_text(t, &t->fim_sep, fim_sep);

    /* control tokens named "unused..." are unused */
    for (int32_t i = 0; i < t->n_vocab; i++)
        if ((t->tok[i].attr & TK_ATTR_CONTROL) && strstr(tok_text(t, i), "unused")) t->tok[i].attr |= TK_ATTR_UNUSED;

    /* end of generation */
    for (int k = 0; eog[k]; k++) {
        int32_t id = tk_map_get(&t->text_map, eog[k], strlen(eog[k]), 0);
        if (id >= 0) { t->tok[id].attr |= TK_ATTR_EOG; mark_control(t, id); }
    }
    int32_t ids[] = {t->fim_pad, t->fim_rep, t->fim_sep, t->eos, t->eot, t->eom};
    for (size_t k = 0; k < sizeof ids / sizeof ids[0]; k++)
        if (ids[k] >= 0) t->tok[ids[k]].attr |= TK_ATTR_EOG;
    /* gpt-oss style vocabs: <|end|> ends a message, not the generation */
    static const char *const ret[] = {"<|return|>", NULL}, *const call[] = {"<|call|>", NULL}, *const end[] = {"<|end|>", NULL};
    int32_t end_id = find_by_text(t, end);
    if (find_by_text(t, ret) >= 0 && find_by_text(t, call) >= 0 && end_id >= 0 && end_id != t->eos) {
        t->tok[end_id].attr &= ~(uint32_t)TK_ATTR_EOG;
        t->tok[end_id].attr = TK_ATTR_USER_DEFINED;
    }
}

static int cmp_special(const void *a, const void *b, void *ctx) {
    const kw_tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = t->tok[x].text_len, ly = t->tok[y].text_len;
    if (lx != ly) return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static int build_special_list(kw_tokenizer *t, kw_err *err) {
    int32_t n = 0;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (t->tok[i].attr & (TK_ATTR_CONTROL | TK_ATTR_USER_DEFINED | TK_ATTR_UNKNOWN)) n++;
    t->special = kw_mem_alloc(KW_MEM_TOKENIZER, (size_t)(n ? n : 1) * sizeof *t->special);
    if (!t->special) return kw_err_set(err, "tokenizer: out of memory");
    n = 0;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (t->tok[i].attr & (TK_ATTR_CONTROL | TK_ATTR_USER_DEFINED | TK_ATTR_UNKNOWN)) t->special[n++] = i;
    t->n_special = n;
    qsort_r(t->special, (size_t)n, sizeof *t->special, cmp_special, t);
    return 0;
}

/* llama.cpp strips whitespace to the right of Phi-3's special tokens. */
static void apply_model_quirks(kw_tokenizer *t, const kw_gguf *g) {
    const char *name = kw_gguf_get_str(g, "general.name");
    if (!name) return;
    char low[128];
    size_t n = 0;
    for (; name[n] && n + 1 < sizeof low; n++) low[n] = (char)tolower((unsigned char)name[n]);
    low[n] = '\0';
    if (!strstr(low, "phi-3") && !strstr(low, "phi3")) return;
    for (int32_t i = 0; i < t->n_special; i++) t->tok[t->special[i]].attr |= TK_ATTR_RSTRIP;
    static const char *const on[] = {"</s>", NULL}, *const off[] = {"<unk>", "<s>", "<|endoftext|>", NULL};
    for (int k = 0; on[k]; k++) {
        const char *const one[] = {on[k], NULL};
        int32_t id = find_by_text(t, one);
        if (id >= 0) t->tok[id].attr |= TK_ATTR_RSTRIP;
    }
    for (int k = 0; off[k]; k++) {
        const char *const one[] = {off[k], NULL};
        int32_t id = find_by_text(t, one);
        if (id >= 0) t->tok[id].attr &= ~(uint32_t)TK_ATTR_RSTRIP;
    }
}

/* ---- pieces: what each token renders to (special text included) ---- */

static int parse_byte_token(const char *s, uint32_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>' || !isxdigit((unsigned char)s[3]) || !isxdigit((unsigned char)s[4]))
        return -1;
    char hex[3] = {s[3], s[4], 0};
    return (int)strtol(hex, NULL, 16);
}

/* Writes the piece of token id into out (capacity >= text_len); returns its length. */
static uint32_t render_piece(const kw_tokenizer *t, int32_t id, char *out) {
    const tk_token *k = &t->tok[id];
    const char *s = tok_text(t, id);
    if (k->attr & (TK_ATTR_UNKNOWN | TK_ATTR_CONTROL | TK_ATTR_USER_DEFINED)) {
        memcpy(out, s, k->text_len);
        return k->text_len;
    }
    if (k->attr & TK_ATTR_NORMAL) {
        uint32_t o = 0;
        if (t->type == TK_SPM) { /* U+2581 -> ' ' */
            for (uint32_t i = 0; i < k->text_len; i++) {
                if (i + 2 < k->text_len && memcmp(s + i, "\xE2\x96\x81", 3) == 0) { out[o++] = ' '; i += 2; }
                else out[o++] = s[i];
            }
            return o;
        }
        for (uint32_t i = 0; i < k->text_len;) { /* byte-level chars -> bytes; others stay as they are */
            uint32_t cp;
            size_t len = tk_utf8_decode((const unsigned char *)s + i, k->text_len - i, &cp);
            int b = (len > 1 || (unsigned char)s[i] < 0x80) ? tk_unicode_byte(cp) : -1;
            if (b >= 0) out[o++] = (char)b;
            else { memcpy(out + o, s + i, len); o += (uint32_t)len; }
            i += (uint32_t)len;
        }
        return o;
    }
    if (k->attr & TK_ATTR_BYTE) {
        int b = parse_byte_token(s, k->text_len);
        if (b < 0) { memcpy(out, s, k->text_len); return k->text_len; }
        out[0] = (char)b;
        return 1;
    }
    return 0; /* unused / undefined render as nothing */
}

static int build_pieces(kw_tokenizer *t, kw_err *err) {
    uint64_t total = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) total += t->tok[i].text_len;
    t->piece_pool = kw_mem_alloc(KW_MEM_TOKENIZER, total ? total : 1);
    if (!t->piece_pool) return kw_err_set(err, "tokenizer: out of memory for token pieces");
    uint32_t off = 0;
    t->max_piece = 0;
    t->max_text = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        uint32_t n = render_piece(t, i, t->piece_pool + off);
        t->tok[i].piece_off = off;
        t->tok[i].piece_len = n;
        off += n;
        if (n > t->max_piece) t->max_piece = n;
        if (n > t->max_text) t->max_text = n;
        if (t->tok[i].text_len > t->max_text) t->max_text = t->tok[i].text_len;
        if (t->tok[i].attr & (TK_ATTR_LSTRIP | TK_ATTR_RSTRIP)) t->strips = true;
    }
    return 0;
}

/* True if every token is valid UTF-8 and none has U+2581 right after a
 * character that is not U+2581 (then no merge can cross such a spot). */
static bool spm_can_split_words(const kw_tokenizer *t) {
    for (int32_t i = 0; i < t->n_vocab; i++) {
        const char *s = tok_text(t, i);
        uint32_t n = t->tok[i].text_len;
        for (uint32_t k = 0; k < n;) {
            uint32_t cp;
            size_t len = tk_utf8_decode((const unsigned char *)s + k, n - k, &cp);
            if (cp == 0xFFFD && len == 1) return false;
            k += (uint32_t)len;
        }
        for (uint32_t k = 1; k + 3 <= n; k++) {
            if (memcmp(s + k, "\xE2\x96\x81", 3) != 0) continue;
            if (k < 3 || memcmp(s + k - 3, "\xE2\x96\x81", 3) != 0) return false;
        }
    }
    return true;
}

static void build_spm_byte_tokens(kw_tokenizer *t) {
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; b++) {
        char name[7] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0};
        int32_t id = tk_map_get(&t->text_map, name, 6, 0);
        if (id < 0) { char c = (char)b; id = tk_map_get(&t->text_map, &c, 1, 0); }
        t->byte_tok[b] = id;
    }
}

/* ---- load ---- */

static int read_model_type(kw_tokenizer *t, const kw_gguf *g, kw_err *err) {
    const char *model = kw_gguf_get_str(g, "tokenizer.ggml.model");
    if (!model) return kw_err_set(err, "tokenizer.ggml.model is missing (the file has no tokenizer)");
    snprintf(t->model, sizeof t->model, "%s", model);
    const char *pre = kw_gguf_get_str(g, "tokenizer.ggml.pre");
    snprintf(t->pre, sizeof t->pre, "%s", pre && *pre ? pre : "default");
    if (!strcmp(model, "llama")) {
        t->type = TK_SPM;
        t->bos = 1; t->eos = 2; t->unk = 0;
        t->add_bos = true; t->add_space_prefix = true;
    } else if (!strcmp(model, "gpt2")) {
        t->type = TK_BPE;
        t->pre_info = tk_pre_lookup(pre);
        if (!t->pre_info) return kw_err_set(err, "unknown pre-tokenizer '%s' (tokenizer.ggml.pre)", pre);
        t->bos = t->pre_info->bos_null ? -1 : 11;
        t->eos = 11;
        t->add_bos = t->pre_info->add_bos_default;
        t->ignore_merges = t->pre_info->ignore_merges;
        t->clean_spaces = !t->pre_info->keep_spaces;
    } else {
        return kw_err_set(err, "unsupported tokenizer model '%s' (supported: llama, gpt2)", model);
    }
    bool b;
    if (kw_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b)) t->add_space_prefix = b;
    return 0;
}

static int read_vocab(kw_tokenizer *t, const kw_gguf *g, kw_err *err) {
    bool bad;
    const kw_gguf_kv *tokens = find_array(g, "tokenizer.ggml.tokens", KW_GGUF_STRING, KW_GGUF_STRING, &bad, err);
    if (bad) return -1;
    if (!tokens) return kw_err_set(err, "tokenizer.ggml.tokens is missing");
    if (tokens->arr_n == 0 || tokens->arr_n >= INT32_MAX)
        return kw_err_set(err, "tokenizer.ggml.tokens: bad token count %llu", (unsigned long long)tokens->arr_n);
    if (!tokens->arr_str) return kw_err_set(err, "tokenizer.ggml.tokens: no strings");
    t->n_vocab = (int32_t)tokens->arr_n;
    const kw_gguf_kv *scores = find_array(g, "tokenizer.ggml.scores", KW_GGUF_FLOAT32, KW_GGUF_INT32, &bad, err);
    if (bad) return -1;
    if (scores && scores->arr_n < tokens->arr_n)
        return kw_err_set(err, "tokenizer.ggml.scores: %llu scores for %d tokens", (unsigned long long)scores->arr_n, t->n_vocab);
    const kw_gguf_kv *types = find_array(g, "tokenizer.ggml.token_type", KW_GGUF_INT32, KW_GGUF_UINT32, &bad, err);
    if (bad) return -1;
    if (types && types->arr_n < tokens->arr_n)
        return kw_err_set(err, "tokenizer.ggml.token_type: %llu types for %d tokens", (unsigned long long)types->arr_n, t->n_vocab);
    t->tok = kw_mem_calloc(KW_MEM_TOKENIZER, (size_t)t->n_vocab * sizeof *t->tok);
    if (!t->tok) return kw_err_set(err, "tokenizer: out of memory for %d tokens", t->n_vocab);
    for (int32_t i = 0; i < t->n_vocab; i++) {
        tk_token *k = &t->tok[i];
        k->score = !scores ? 0.0f : scores->arr_type == KW_GGUF_FLOAT32 ? read_f32(scores->arr_data, (uint64_t)i)
                                                                          : (float)read_i32(scores->arr_data, (uint64_t)i);
        k->attr = types ? attr_from_type(read_i32(types->arr_data, (uint64_t)i)) : TK_ATTR_NORMAL;
    }
    return copy_token_texts(t, tokens, err);
}

static void read_special_ids(kw_tokenizer *t, const kw_gguf *g) {
    int32_t *defaults[] = {&t->bos, &t->eos, &t->unk};
    for (size_t i = 0; i < 3; i++)
        if (*defaults[i] >= t->n_vocab) *defaults[i] = -1;
    static const struct { const char *key; size_t off; } keys[] = {
        {"tokenizer.ggml.bos_token_id", offsetof(kw_tokenizer, bos)},
        {"tokenizer.ggml.eos_token_id", offsetof(kw_tokenizer, eos)},
        {"tokenizer.ggml.eot_token_id", offsetof(kw_tokenizer, eot)},
        {"tokenizer.ggml.eom_token_id", offsetof(kw_tokenizer, eom)},
        {"tokenizer.ggml.unknown_token_id", offsetof(kw_tokenizer, unk)},
        {"tokenizer.ggml.seperator_token_id", offsetof(kw_tokenizer, sep)},
        {"tokenizer.ggml.padding_token_id", offsetof(kw_tokenizer, pad)},
        {"tokenizer.ggml.fim_pre_token_id", offsetof(kw_tokenizer, fim_pre)},
        {"tokenizer.ggml.fim_suf_token_id", offsetof(kw_tokenizer, fim_suf)},
        {"tokenizer.ggml.fim_mid_token_id", offsetof(kw_tokenizer, fim_mid)},
        {"tokenizer.ggml.fim_pad_token_id", offsetof(kw_tokenizer, fim_pad)},
        {"tokenizer.ggml.fim_rep_token_id", offsetof(kw_tokenizer, fim_rep)},
        {"tokenizer.ggml.fim_sep_token_id", offsetof(kw_tokenizer, fim_sep)},
        {"tokenizer.ggml.prefix_token_id", offsetof(kw_tokenizer, fim_pre)},
        {"tokenizer.ggml.suffix_token_id", offsetof(kw_tokenizer, fim_suf)},
        {"tokenizer.ggml.middle_token_id", offsetof(kw_tokenizer, fim_mid)},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        read_id_key(g, keys[i].key, t->n_vocab, (int32_t *)((char *)t + keys[i].off));
    bool b;
    if (kw_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b)) t->add_bos = b;
    if (kw_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b)) t->add_eos = b;
}

static int build_tables(kw_tokenizer *t, const kw_gguf *g, kw_err *err) {
    if (read_model_type(t, g, err) != 0) return -1;
    if (read_vocab(t, g, err) != 0) return -1;
    if (build_text_map(t, err) != 0) return -1;
    if (t->type == TK_BPE) {
        bool bad;
        const kw_gguf_kv *merges = find_array(g, "tokenizer.ggml.merges", KW_GGUF_STRING, KW_GGUF_STRING, &bad, err);
        if (bad) return -1;
        if (!merges) return kw_err_set(err, "tokenizer.ggml.merges is missing (required for gpt2 vocabs)");
        if (merges->arr_n && !merges->arr_str) return kw_err_set(err, "tokenizer.ggml.merges: no strings");
        if (build_raw_tables(t, err) != 0 || build_merges(t, merges, err) != 0) return -1;
        if (tk_pretok_compile(&t->pretok, t->pre_info, err) != 0) return -1;
    } else {
        build_spm_byte_tokens(t);
        t->spm_words = spm_can_split_words(t);
    }
    read_special_ids(t, g);
    detect_special_tokens(t);
    if (build_special_list(t, err) != 0) return -1;
    apply_model_quirks(t, g);
    return build_pieces(t, err);
}

kw_tokenizer *kw_tokenizer_load(const kw_gguf *g, kw_err *err) {
    if (!g) { kw_err_set(err, "tokenizer: no model file"); return NULL; }
    kw_tokenizer *t = kw_mem_calloc(KW_MEM_TOKENIZER, sizeof *t);
    if (!t) { kw_err_set(err, "tokenizer: out of memory"); return NULL; }
    t->bos = t->eos = t->eot = t->eom = t->unk = t->pad = t->sep = t->nl = -1;
    t->fim_pre = t->fim_suf = t->fim_mid = t->fim_pad = t->fim_rep = t->fim_sep = -1;
    for (int b = 0; b < 256; b++) t->byte_tok[b] = -1;
    if (build_tables(t, g, err) != 0) {
        kw_tokenizer_free(t);
        return NULL;
    }
    return t;
}

void kw_tokenizer_free(kw_tokenizer *t) {
    if (!t) return;
    tk_pretok_free(&t->pretok);
    tk_map_free(&t->text_map);
    tk_map_free(&t->raw_map);
    tk_map_free(&t->merge_map);
    kw_mem_free(t->tok);
    kw_mem_free(t->text_pool);
    kw_mem_free(t->piece_pool);
    kw_mem_free(t->raw_pool);
    kw_mem_free(t->merge_pool);
    kw_mem_free(t->special);
    kw_mem_free(t);
}

/* ---- accessors ---- */

int32_t kw_tokenizer_n_vocab(const kw_tokenizer *t) { return t ? t->n_vocab : 0; }
const char *kw_tokenizer_model_name(const kw_tokenizer *t) { return t ? t->model : ""; }
const char *kw_tokenizer_pre_name(const kw_tokenizer *t) { return t ? t->pre : ""; }
int32_t kw_token_bos(const kw_tokenizer *t) { return t ? t->bos : -1; }
int32_t kw_token_eos(const kw_tokenizer *t) { return t ? t->eos : -1; }
int32_t kw_token_eot(const kw_tokenizer *t) { return t ? t->eot : -1; }
bool kw_tokenizer_adds_bos(const kw_tokenizer *t) { return t && t->add_bos && t->bos >= 0; }

static bool valid_id(const kw_tokenizer *t, int32_t id) { return t && id >= 0 && id < t->n_vocab; }

bool kw_token_is_eog(const kw_tokenizer *t, int32_t id) {
    return valid_id(t, id) && (t->tok[id].attr & TK_ATTR_EOG);
}

bool kw_token_is_special(const kw_tokenizer *t, int32_t id) {
    return valid_id(t, id) && (t->tok[id].attr & (TK_ATTR_CONTROL | TK_ATTR_USER_DEFINED | TK_ATTR_UNKNOWN));
}

const char *kw_token_text(const kw_tokenizer *t, int32_t id) { return valid_id(t, id) ? tok_text(t, id) : NULL; }

int32_t kw_token_lookup(const kw_tokenizer *t, const char *text, size_t len) {
    return t && text ? tk_map_get(&t->text_map, text, len, 0) : -1;
}
