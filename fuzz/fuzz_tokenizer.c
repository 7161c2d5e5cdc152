/* fuzz_tokenizer.c - libFuzzer target for the tokenizer.
 *
 * The first input byte picks the mode, the rest is the data:
 *   bit 7 set: the data is a GGUF file; load its tokenizer (must either
 *              work or fail with a one-line message), then tokenize and
 *              detokenize a fixed text with it.
 *   otherwise: the data is text, tokenized with the small SPM (bit 2 set)
 *              or byte-level BPE vocab of tests/tokenizer/tok_fixture.h;
 *              bit 0 = add_special, bit 1 = parse_special.
 * Checked: every id is in range; byte-level BPE gives the input back
 * exactly (decode(encode(x)) == x); the streaming detokenizer only ever
 * emits valid UTF-8; kw_detokenize of the ids works. Built and run by scripts/fuzz.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "kvwise/gguf.h"
#include "kvwise/tokenizer.h"
#include "../tests/tokenizer/tok_fixture.h"

static kw_tokenizer *g_spm, *g_bpe;

static kw_tokenizer *load_fixture(kw_gguf_writer *w, const char *dir, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    kw_err err = {{0}};
    kw_gguf *g = fx_open(w, path, &err);
    kw_tokenizer *t = g ? kw_tokenizer_load(g, &err) : NULL;
    if (!t) { fprintf(stderr, "fuzz_tokenizer: fixture %s: %s\n", name, err.msg); abort(); }
    kw_gguf_close(g); /* the tokenizer keeps its own copies */
    unlink(path);
    return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    char dir[] = "/tmp/kwfuzztok.XXXXXX";
    if (!mkdtemp(dir)) abort();
    g_spm = load_fixture(fx_spm_writer(0), dir, "spm.gguf");
    g_bpe = load_fixture(fx_bpe_writer(0), dir, "bpe.gguf");
    rmdir(dir);
    return 0;
}

static bool valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        size_t L = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        if (!L || i + L > n) return false;
        for (size_t k = 1; k < L; k++)
            if ((s[i + k] & 0xC0) != 0x80) return false;
        if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] > 0x9F) || (c == 0xF0 && s[i + 1] < 0x90) ||
            (c == 0xF4 && s[i + 1] > 0x8F))
            return false;
        i += L;
    }
    return true;
}

/* Streams ids through kw_detok; aborts if any output is not valid UTF-8. */
static void check_detok(const kw_tokenizer *t, const int32_t *ids, size_t n) {
    size_t cap = 3 * kw_tokenizer_max_piece(t) + 16;
    unsigned char *out = malloc(cap);
    if (!out) return;
    kw_detok d;
    kw_detok_init(&d);
    for (size_t i = 0; i < n; i++) {
        size_t k = kw_detok_push(t, &d, ids[i], (i & 1) != 0, (char *)out, cap);
        if (k > cap || !valid_utf8(out, k)) { fprintf(stderr, "detok emitted broken UTF-8\n"); abort(); }
    }
    size_t k = kw_detok_flush(&d, (char *)out, cap);
    if (!valid_utf8(out, k)) { fprintf(stderr, "detok flush emitted broken UTF-8\n"); abort(); }
    free(out);
}

static void check_ids(const kw_tokenizer *t, const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= kw_tokenizer_n_vocab(t)) { fprintf(stderr, "id %d out of range\n", ids[i]); abort(); }
}

static void check_round_trip(const kw_tokenizer *t, const int32_t *ids, size_t n, const uint8_t *text, size_t len) {
    size_t cap = len + 64, o = 0;
    char *buf = malloc(cap);
    if (!buf) return;
    for (size_t i = 0; i < n && o <= cap; i++) o += kw_token_to_piece(t, ids[i], buf + o, o < cap ? cap - o : 0, true);
    if (o != len || memcmp(buf, text, len) != 0) { fprintf(stderr, "byte-level round trip failed\n"); abort(); }
    free(buf);
}

static void fuzz_text(const kw_tokenizer *t, bool byte_level, const uint8_t *text, size_t len, bool add_special,
                      bool parse_special) {
    int32_t *ids = NULL;
    size_t n = 0;
    kw_err err = {{0}};
    if (kw_tokenize(t, (const char *)text, len, add_special, parse_special, &ids, &n, &err) != 0) {
        if (!err.msg[0]) abort();
        return;
    }
    check_ids(t, ids, n);
    if (byte_level && !add_special) check_round_trip(t, ids, n, text, len);
    check_detok(t, ids, n);
    char *whole = NULL;
    size_t whole_n = 0;
    if (kw_detokenize(t, ids, n, parse_special, &whole, &whole_n, &err) != 0 || whole[whole_n] != '\0') abort();
    free(whole);
    free(ids);
}

static void fuzz_vocab(const uint8_t *data, size_t size) {
    kw_err err = {{0}};
    kw_gguf *g = kw_gguf_open_mem(data, size, &err);
    if (!g) return;
    kw_tokenizer *t = kw_tokenizer_load(g, &err);
    if (!t) {
        if (!err.msg[0] || strchr(err.msg, '\n')) { fprintf(stderr, "load failed without a one-line message\n"); abort(); }
    } else {
        static const char text[] = "Hello world! \xF0\x9F\x99\x82 <|im_end|> <s>\n\t  x";
        fuzz_text(t, false, (const uint8_t *)text, sizeof text - 1, true, true);
        char piece[64];
        for (int32_t id = -1; id < 300; id++) kw_token_to_piece(t, id, piece, sizeof piece, true);
        (void)kw_token_is_eog(t, kw_token_eos(t));
        kw_tokenizer_free(t);
    }
    kw_gguf_close(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    uint8_t mode = data[0];
    if (mode & 0x80) {
        fuzz_vocab(data + 1, size - 1);
        return 0;
    }
    const kw_tokenizer *t = (mode & 4) ? g_spm : g_bpe;
    fuzz_text(t, !(mode & 4), data + 1, size - 1, mode & 1, (mode & 2) != 0);
    return 0;
}
