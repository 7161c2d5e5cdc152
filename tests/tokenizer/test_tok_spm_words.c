/* test_tok_spm_words.c - SPM word-by-word merging (spm.c) gives exactly the
 * ids of merging the whole text at once, on the real SPM vocabs in
 * shared/conformance (llama-spm, phi-3, baichuan, tok512) over random mixes
 * of the conformance prompts with extra spaces, newlines, digits, CJK,
 * emoji and stray bytes. Also reports which vocabs allow it. */
#include <string.h>
#include "testutil.h"
#include "kvwise/gguf.h"
#include "kvwise/tokenizer.h"
#include "tokenizer/tok_internal.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 20); }

static size_t make_text(char *buf, size_t cap, const char *src, size_t src_n) {
    static const char *const extra[] = {" ", "  ", "   ", "\n", "\n\n", "\t", " 1234", "\xE4\xB8\x96\xE7\x95\x8C",
                                        "\xF0\x9F\x99\x82", "\xC3\xA9", "\xFF", "\xE2\x96\x81", "__", "  x", NULL};
    int ne = 0;
    while (extra[ne]) ne++;
    size_t n = 0;
    while (n + 64 < cap && rnd() % 40) {
        if (rnd() % 3 == 0) {
            const char *e = extra[rnd() % (unsigned)ne];
            memcpy(buf + n, e, strlen(e));
            n += strlen(e);
        } else if (src_n) {
            size_t a = rnd() % src_n, l = 1 + rnd() % 40;
            if (a + l > src_n) l = src_n - a;
            memcpy(buf + n, src + a, l);
            n += l;
        }
    }
    return n;
}

static void check_vocab(const char *path, const char *src, size_t src_n) {
    kw_err err = {{0}};
    kw_gguf *g = kw_gguf_open(path, &err);
    kw_tokenizer *t = g ? kw_tokenizer_load(g, &err) : NULL;
    KW_CHECK_MSG(t != NULL, "%s: %s", path, err.msg);
    if (!t) { kw_gguf_close(g); return; }
    printf("%s: word-by-word merging %s\n", path, t->spm_words ? "on" : "off (the vocab joins U+2581 to other text)");
    static char text[4096];
    int diff = 0;
    for (int it = 0; it < 200; it++) {
        size_t n = make_text(text, sizeof text, src, src_n);
        int32_t *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        bool words = t->spm_words;
        int ra = kw_tokenize(t, text, n, true, false, &a, &na, &err);
        t->spm_words = false;
        int rb = kw_tokenize(t, text, n, true, false, &b, &nb, &err);
        t->spm_words = words;
        if (ra || rb || na != nb || memcmp(a, b, na * sizeof *a) != 0) diff++;
        free(a);
        free(b);
    }
    KW_CHECK_MSG(diff == 0, "%s: %d texts differ between word-by-word and whole-text merging", path, diff);
    kw_tokenizer_free(t);
    kw_gguf_close(g);
}

int main(void) {
    const char *shared = kw_test_shared_dir();
    char src[8192];
    size_t src_n = 0;
    static const char *const prompts[] = {"v2_fox.txt", "v3_cfunc.txt", "v4_unicode.txt", "v5_whitespace.txt",
                                          "v6_paragraph.txt", NULL};
    for (int i = 0; prompts[i]; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "conformance/prompts/%s", prompts[i]);
        size_t l = 0;
        char *p = kw_test_read_file(kw_test_path(shared, rel), &l);
        if (p && src_n + l < sizeof src) { memcpy(src + src_n, p, l); src_n += l; }
        free(p);
    }
    KW_CHECK(src_n > 1000);
    static const char *const vocabs[] = {"conformance/tokenizer/ggml-vocab-llama-spm.gguf",
                                         "conformance/tokenizer/ggml-vocab-phi-3.gguf",
                                         "conformance/tokenizer/ggml-vocab-baichuan.gguf",
                                         "conformance/models/stories260K.gguf", NULL};
    for (int i = 0; vocabs[i]; i++) check_vocab(kw_test_path(shared, vocabs[i]), src, src_n);
    return kw_test_finish();
}
