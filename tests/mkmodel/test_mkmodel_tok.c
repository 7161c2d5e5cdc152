/* test_mkmodel_tok.c - the tokenizer mkmodel writes works with kvwise's
 * own tokenizer: text round-trips byte for byte (English, code, UTF-8),
 * merges compress the training text, ChatML markers are single control
 * tokens, <|im_end|> ends generation, BOS/EOS are <|endoftext|>. */
#include "testutil.h"
#include <string.h>
#include <stdlib.h>
#include "kvwise/gguf.h"
#include "kvwise/tokenizer.h"
#include "mkmodel/mkmodel.h"

static int round_trip(const kw_tokenizer *t, const char *text, size_t len, size_t *n_tokens) {
    int32_t *ids = NULL;
    size_t n = 0;
    kw_err e = {{0}};
    if (kw_tokenize(t, text, len, false, false, &ids, &n, &e)) { fprintf(stderr, "%s\n", e.msg); return 0; }
    size_t cap = len * 4 + 64, o = 0;
    char *out = malloc(cap);
    kw_detok d;
    kw_detok_init(&d);
    for (size_t i = 0; i < n; i++) o += kw_detok_push(t, &d, ids[i], false, out + o, cap - o);
    o += kw_detok_flush(&d, out + o, cap - o);
    int ok = o == len && !memcmp(out, text, len);
    if (n_tokens) *n_tokens = n;
    free(out);
    free(ids);
    return ok;
}

int main(void) {
    kw_mk_shape s;
    kw_err e = {{0}};
    kw_mk_preset("tiny", &s, &e);
    s.n_layer = 1;
    s.n_embd = 64;
    s.n_head = 2;
    s.n_head_kv = 1;
    s.head_dim = 32;
    s.n_ff = 64;
    const char *path = kw_test_path(kw_test_tmpdir(), "tok.gguf");
    KW_CHECK_MSG(kw_mk_write(&s, 1 /* f16 */, 1, path, &e) == 0, "%s", e.msg);
    kw_gguf *g = kw_gguf_open(path, &e);
    KW_CHECK_MSG(g != NULL, "%s", e.msg);
    if (!g) return kw_test_finish();
    kw_tokenizer *t = kw_tokenizer_load(g, &e);
    KW_CHECK_MSG(t != NULL, "%s", e.msg);
    if (!t) { kw_gguf_close(g); return kw_test_finish(); }
    KW_CHECK_EQ_INT(kw_tokenizer_n_vocab(t), s.n_vocab);
    KW_CHECK(!strcmp(kw_tokenizer_model_name(t), "gpt2"));
    size_t len, n = 0;
    const char *corpus = kw_mk_corpus(&len);
    KW_CHECK(round_trip(t, corpus, len, &n));
    KW_CHECK(n > 0 && n < len / 2);   /* the learned merges compress their own training text */
    const char *utf8 = "h\xc3\xa9llo w\xc3\xb6rld \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82 tabs\t\tand\n\nnewlines  ";
    KW_CHECK(round_trip(t, utf8, strlen(utf8), NULL));
    const char *code = "for (int i = 0; i < n; i++) { sum += x[i] * 0.5f; } // done";
    KW_CHECK(round_trip(t, code, strlen(code), NULL));

    int32_t im_start = kw_token_lookup(t, "<|im_start|>", 12), im_end = kw_token_lookup(t, "<|im_end|>", 10);
    int32_t eot = kw_token_lookup(t, "<|endoftext|>", 13);
    KW_CHECK(im_start >= 256 && im_end == im_start + 1 && eot == im_start - 1);
    KW_CHECK(kw_token_is_special(t, im_start) && kw_token_is_eog(t, im_end) && kw_token_is_eog(t, eot));
    KW_CHECK_EQ_INT(kw_token_bos(t), eot);
    KW_CHECK_EQ_INT(kw_token_eos(t), eot);
    KW_CHECK(!kw_tokenizer_adds_bos(t));
    int32_t *ids = NULL;
    size_t ni = 0;
    const char *chat = "<|im_start|>user\nHi<|im_end|>";
    KW_CHECK(kw_tokenize(t, chat, strlen(chat), true, true, &ids, &ni, &e) == 0);
    KW_CHECK(ni >= 4 && ids[0] == im_start && ids[ni - 1] == im_end);
    free(ids);
    kw_tokenizer_free(t);
    kw_gguf_close(g);
    return kw_test_finish();
}
