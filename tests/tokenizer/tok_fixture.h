/* tok_fixture.h - tiny vocab GGUFs for the tokenizer's unit tests and its
 * fuzz target (header-only: fuzz/fuzz_tokenizer.c includes it too).
 *
 * SPM ("llama"): <unk> <s> </s>, the 256 byte tokens <0xNN>, a few pieces
 * scored so that "▁hello" and "▁world" form, <|im_start|> and
 * <|im_end|> (control), <tool> (user-defined).
 * BPE ("gpt2", pre gpt-2): the 256 GPT-2 byte characters, merges that build
 * "hello", "Ġhello", "world", "Ġworld", "é" and the two halves of "🙂"
 * (F0 9F | 99 82, never the whole emoji), <|endoftext|> (control, BOS/EOS),
 * <|im_start|> <|im_end|> (control), user-defined "ab" and "abc".
 * Flags corrupt the metadata for the malformed-vocab tests. */
#ifndef KW_TOK_FIXTURE_H
#define KW_TOK_FIXTURE_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kvwise/gguf.h"

enum {
    FX_NO_MODEL = 1 << 0,     /* no tokenizer.ggml.model */
    FX_MODEL_BERT = 1 << 1,   /* an unsupported model */
    FX_TOKENS_U32 = 1 << 2,   /* tokens as an array of u32 */
    FX_SHORT_SCORES = 1 << 3, /* fewer scores than tokens */
    FX_TYPES_F32 = 1 << 4,    /* token_type as floats */
    FX_NO_MERGES = 1 << 5,    /* gpt2 without merges */
    FX_BAD_PRE = 1 << 6,      /* unknown pre-tokenizer */
    FX_TOKENS_SCALAR = 1 << 7,/* tokens as one string */
    FX_NO_TOKENS = 1 << 8,    /* no tokens key */
    FX_BAD_IDS = 1 << 9,      /* bos/eos ids far out of range (ignored, not fatal) */
    FX_MERGES_U8 = 1 << 10,   /* merges as bytes */
    FX_DUP_TOKENS = 1 << 11,  /* a duplicated token text (later id wins) */
    FX_MODEL_CTRL = 1 << 12,  /* a model name with a newline and a control byte */
};

typedef struct fx_list { char **s; float *score; int32_t *type; int n, cap; } fx_list;

static void fx_add(fx_list *l, const char *s, float score, int32_t type) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 512;
        l->s = realloc(l->s, (size_t)l->cap * sizeof *l->s);
        l->score = realloc(l->score, (size_t)l->cap * sizeof *l->score);
        l->type = realloc(l->type, (size_t)l->cap * sizeof *l->type);
    }
    l->s[l->n] = strdup(s);
    l->score[l->n] = score;
    l->type[l->n] = type;
    l->n++;
}

static void fx_free(fx_list *l) {
    for (int i = 0; i < l->n; i++) free(l->s[i]);
    free(l->s);
    free(l->score);
    free(l->type);
    memset(l, 0, sizeof *l);
}

/* GPT-2 byte -> its printable character, as UTF-8 */
static void fx_byte_char(unsigned b, char *out) {
    unsigned cp;
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) cp = b;
    else if (b <= 32) cp = 256 + b;
    else if (b >= 127 && b <= 160) cp = 289 + (b - 127);
    else cp = 323;
    if (cp < 0x80) { out[0] = (char)cp; out[1] = 0; }
    else { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); out[2] = 0; }
}

static void fx_put_tokens(kw_gguf_writer *w, const fx_list *l, int flags, bool scores) {
    if (flags & FX_NO_TOKENS) return;
    if (flags & FX_TOKENS_SCALAR) { kw_gguf_writer_set_str(w, "tokenizer.ggml.tokens", "hello"); return; }
    if (flags & FX_TOKENS_U32) {
        uint32_t *v = calloc((size_t)l->n, sizeof *v);
        kw_gguf_writer_set_arr(w, "tokenizer.ggml.tokens", KW_GGUF_UINT32, v, (uint64_t)l->n);
        free(v);
    } else {
        kw_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)l->s, (uint64_t)l->n);
    }
    if (scores)
        kw_gguf_writer_set_arr(w, "tokenizer.ggml.scores", KW_GGUF_FLOAT32, l->score,
                               (uint64_t)((flags & FX_SHORT_SCORES) ? l->n / 2 : l->n));
    if (flags & FX_TYPES_F32) kw_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", KW_GGUF_FLOAT32, l->score, (uint64_t)l->n);
    else kw_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", KW_GGUF_INT32, l->type, (uint64_t)l->n);
}

static void fx_put_model(kw_gguf_writer *w, const char *model, int flags) {
    kw_gguf_writer_set_str(w, "general.architecture", "llama");
    if (flags & FX_NO_MODEL) return;
    if (flags & FX_MODEL_CTRL) model = "ll\nama\x01";
    kw_gguf_writer_set_str(w, "tokenizer.ggml.model", (flags & FX_MODEL_BERT) ? "bert" : model);
}

static kw_gguf_writer *fx_spm_writer(int flags) {
    fx_list l = {0};
    fx_add(&l, "<unk>", 0, 2);
    fx_add(&l, "<s>", 0, 3);
    fx_add(&l, "</s>", 0, 3);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        fx_add(&l, name, 0, 6);
    }
    /* scores chosen so that the merge path to "▁hello" / "▁world" exists */
    static const struct { const char *s; float score; } pieces[] = {
        {"\xE2\x96\x81", 0}, {"a", 0}, {"b", 0}, {"c", 0}, {"d", 0}, {"e", 0}, {"h", 0}, {"l", 0}, {"o", 0},
        {"r", 0}, {"w", 0}, {"\xE2\x96\x81h", 1}, {"he", 10}, {"ll", 9}, {"llo", 2}, {"hell", 8}, {"hello", 7},
        {"\xE2\x96\x81hello", 6}, {"\xE2\x96\x81w", 1}, {"or", 10}, {"orl", 9}, {"orld", 8}, {"world", 7},
        {"\xE2\x96\x81world", 6}, {"ab", 5}, {"\xE2\x96\x81" "a", 4}, {"\xC3\xA9", 0}, {NULL, 0}};
    for (int i = 0; pieces[i].s; i++) fx_add(&l, pieces[i].s, pieces[i].score, 1);
    if (flags & FX_DUP_TOKENS) fx_add(&l, "hello", 0.5f, 1);
    fx_add(&l, "<|im_start|>", 0, 3);
    fx_add(&l, "<|im_end|>", 0, 3);
    fx_add(&l, "<tool>", 0, 4);
    kw_gguf_writer *w = kw_gguf_writer_create();
    fx_put_model(w, "llama", flags);
    kw_gguf_writer_set_str(w, "tokenizer.ggml.pre", "default");
    fx_put_tokens(w, &l, flags, true);
    kw_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (flags & FX_BAD_IDS) ? 1000000 : 1);
    kw_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (flags & FX_BAD_IDS) ? 4000000000u : 2);
    kw_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    fx_free(&l);
    return w;
}

static kw_gguf_writer *fx_bpe_writer(int flags) {
    fx_list l = {0};
    for (int b = 0; b < 256; b++) {
        char c[4];
        fx_byte_char((unsigned)b, c);
        fx_add(&l, c, 0, 1);
    }
    /* merges and the tokens they make (rank = order) */
    static const char *const merges[] = {"h e", "l l", "he ll", "hell o", "\xC4\xA0 hello", "o r", "or l", "orl d",
                                         "w orld", "\xC4\xA0 world", "\xC3\x83 \xC2\xA9", "\xC3\xB0 \xC5\x81",
                                         "\xC4\xBB \xC4\xA4", NULL};
    static const char *const made[] = {"he", "ll", "hell", "hello", "\xC4\xA0hello", "or", "orl", "orld", "world",
                                       "\xC4\xA0world", "\xC3\x83\xC2\xA9", "\xC3\xB0\xC5\x81", "\xC4\xBB\xC4\xA4", NULL};
    for (int i = 0; made[i]; i++) fx_add(&l, made[i], 0, 1);
    fx_add(&l, "<|endoftext|>", 0, 3);
    fx_add(&l, "<|im_start|>", 0, 3);
    fx_add(&l, "<|im_end|>", 0, 3);
    fx_add(&l, "ab", 0, 4);
    fx_add(&l, "abc", 0, 4);
    kw_gguf_writer *w = kw_gguf_writer_create();
    fx_put_model(w, "gpt2", flags);
    kw_gguf_writer_set_str(w, "tokenizer.ggml.pre", (flags & FX_BAD_PRE) ? "no-such-pre" : "gpt-2");
    fx_put_tokens(w, &l, flags, false);
    int n_merges = 0;
    while (merges[n_merges]) n_merges++;
    if (flags & FX_MERGES_U8) kw_gguf_writer_set_arr(w, "tokenizer.ggml.merges", KW_GGUF_UINT8, "abcdef", 6);
    else if (!(flags & FX_NO_MERGES))
        kw_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, (uint64_t)n_merges);
    uint32_t eot = (uint32_t)(256 + n_merges); /* <|endoftext|> */
    kw_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", eot);
    kw_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", eot);
    fx_free(&l);
    return w;
}

/* Writes the vocab to path and opens it (NULL + err on failure). */
static kw_gguf *fx_open(kw_gguf_writer *w, const char *path, kw_err *err) {
    int rc = kw_gguf_writer_write(w, path, err);
    kw_gguf_writer_destroy(w);
    return rc == 0 ? kw_gguf_open(path, err) : NULL;
}

#endif
