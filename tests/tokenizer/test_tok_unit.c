/* test_tok_unit.c - tokenizer unit tests on tiny self-made vocabs
 * (tok_fixture.h): SPM merges and byte fallback, byte-level BPE merges,
 * special-token parsing (longest first, user-defined always, control only
 * with parse_special), EOG/BOS/EOS facts, streaming detok over split UTF-8,
 * round trips on random bytes, malformed metadata, accounted memory. */
#include <string.h>
#include "testutil.h"
#include "kvwise/memory.h"
#include "kvwise/tokenizer.h"
#include "tok_fixture.h"
#include "tokenizer/tok_internal.h"

static kw_tokenizer *load_fixture(kw_gguf_writer *w, const char *name, kw_gguf **g, kw_err *err) {
    *g = fx_open(w, kw_test_path(kw_test_tmpdir(), name), err);
    return *g ? kw_tokenizer_load(*g, err) : NULL;
}

static int32_t id_of(const kw_tokenizer *t, const char *s) { return kw_token_lookup(t, s, strlen(s)); }

/* tokenizes and compares with a -1-terminated expected list */
static bool encodes_to(const kw_tokenizer *t, const char *text, bool add_special, int parse_special,
                       const int32_t *want) {
    int32_t *ids = NULL;
    size_t n = 0, nw = 0;
    kw_err err = {{0}};
    while (want[nw] != -2) nw++;
    bool ok = kw_tokenize(t, text, strlen(text), add_special, parse_special, &ids, &n, &err) == 0 && n == nw &&
              (n == 0 || memcmp(ids, want, n * sizeof *ids) == 0);
    if (!ok) {
        fprintf(stderr, "'%s' ->", text);
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, " (want");
        for (size_t i = 0; i < nw; i++) fprintf(stderr, " %d", want[i]);
        fprintf(stderr, ") %s\n", err.msg);
    }
    free(ids);
    return ok;
}
#define END (-2)

/* concatenated pieces of ids (render_special) into buf; returns length */
static size_t decode_all(const kw_tokenizer *t, const int32_t *ids, size_t n, char *buf, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k = kw_token_to_piece(t, ids[i], buf + o, cap - o, true);
        o += k < cap - o ? k : cap - o;
    }
    return o;
}

static bool valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t L = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        if (!L || i + L > n) return false;
        for (size_t k = 1; k < L; k++)
            if (((unsigned char)s[i + k] & 0xC0) != 0x80) return false;
        if (c == 0xE0 && (unsigned char)s[i + 1] < 0xA0) return false;
        if (c == 0xED && (unsigned char)s[i + 1] > 0x9F) return false;
        if (c == 0xF0 && (unsigned char)s[i + 1] < 0x90) return false;
        if (c == 0xF4 && (unsigned char)s[i + 1] > 0x8F) return false;
        i += L;
    }
    return true;
}

static bool is_broken_utf8(const char *p) { return !valid_utf8(p, strlen(p)); }

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* random bytes drawn from letters, spaces, punctuation, UTF-8 pieces and junk */
/* spm: valid UTF-8 only, no U+2581 and no user-defined <tool>. (SPM cuts
 * characters by their lead byte alone, as llama.cpp does, so a stray lead
 * byte swallows the next bytes, e.g. an escaped space, into byte tokens.) */
static size_t random_text(char *buf, size_t max, bool spm) {
    static const char *const parts[] = {"h", "e", "l", "o", "w", "r", "d", "a", "b", "c", " ", "  ", "\n", "\t",
                                        "hello", " world", "'s", "42", "!", "\xC3\xA9", "\xF0\x9F\x99\x82", "\xE4\xB8\x96",
                                        "\xF0", "\x9F", "\x80", "\xFF", "\xC3", "<|im_end|>", "<tool>", "abc", "\xE2\x96", NULL};
    int np = 0;
    while (parts[np]) np++;
    size_t n = 0, want = rnd() % max;
    while (n < want) {
        const char *p = parts[rnd() % (unsigned)np];
        if (spm && (!strcmp(p, "<tool>") || is_broken_utf8(p))) continue;
        size_t l = strlen(p);
        if (n + l > max) break;
        memcpy(buf + n, p, l);
        n += l;
        if (spm && n >= 3 && memcmp(buf + n - 3, "\xE2\x96\x81", 3) == 0) n -= 3;
    }
    return n;
}

static void test_spm(void) {
    kw_gguf *g = NULL;
    kw_err err = {{0}};
    kw_tokenizer *t = load_fixture(fx_spm_writer(0), "spm.gguf", &g, &err);
    KW_CHECK_MSG(t != NULL, "%s", err.msg);
    if (!t) { kw_gguf_close(g); return; }
    KW_CHECK(strcmp(kw_tokenizer_model_name(t), "llama") == 0);
    KW_CHECK_EQ_INT(kw_token_bos(t), 1);
    KW_CHECK_EQ_INT(kw_token_eos(t), 2);
    KW_CHECK(kw_tokenizer_adds_bos(t)); /* SPM default: no add_bos key in the file */
    KW_CHECK(kw_token_is_eog(t, 2) && kw_token_is_eog(t, id_of(t, "<|im_end|>")));
    KW_CHECK(!kw_token_is_eog(t, id_of(t, "\xE2\x96\x81hello")));
    KW_CHECK(kw_token_is_special(t, id_of(t, "<|im_start|>")) && kw_token_is_special(t, id_of(t, "<tool>")));
    int32_t hello = id_of(t, "\xE2\x96\x81hello"), world = id_of(t, "\xE2\x96\x81world"), sp = id_of(t, "\xE2\x96\x81");
    int32_t ims = id_of(t, "<|im_start|>"), ime = id_of(t, "<|im_end|>"), tool = id_of(t, "<tool>");
    KW_CHECK(hello > 0 && world > 0 && sp > 0 && ims > 0 && ime > 0 && tool > 0);

    KW_CHECK(encodes_to(t, "hello world", true, false, (int32_t[]){1, hello, world, END}));
    KW_CHECK(encodes_to(t, "hello world", false, false, (int32_t[]){hello, world, END}));
    KW_CHECK(encodes_to(t, "", true, false, (int32_t[]){1, END}));
    KW_CHECK(encodes_to(t, "", false, false, (int32_t[]){END}));
    /* byte fallback: the emoji is no token -> <0xF0><0x9F><0x99><0x82> (ids 3 + byte) */
    KW_CHECK(encodes_to(t, "\xF0\x9F\x99\x82", false, false, (int32_t[]){sp, 3 + 0xF0, 3 + 0x9F, 3 + 0x99, 3 + 0x82, END}));
    /* specials: control only with parse_special; a space goes in front of text after a special */
    KW_CHECK(encodes_to(t, "<|im_start|>hello<|im_end|>", true, true, (int32_t[]){1, ims, hello, ime, END}));
    int32_t *ids = NULL;
    size_t n = 0;
    KW_CHECK(kw_tokenize(t, "<|im_start|>hello", 17, false, false, &ids, &n, &err) == 0);
    bool has_ims = false;
    for (size_t i = 0; i < n; i++) has_ims |= ids[i] == ims;
    KW_CHECK(!has_ims && n > 3);
    free(ids);
    /* user-defined tokens are split out even without parse_special */
    KW_CHECK(encodes_to(t, "hello<tool>world", false, false, (int32_t[]){hello, tool, world, END}));

    /* pieces: "▁" -> ' ', byte tokens -> the byte, control only when asked */
    char buf[64];
    KW_CHECK(kw_token_to_piece(t, hello, buf, sizeof buf, false) == 6 && memcmp(buf, " hello", 6) == 0);
    KW_CHECK(kw_token_to_piece(t, 3 + 0x41, buf, sizeof buf, false) == 1 && buf[0] == 'A');
    KW_CHECK(kw_token_to_piece(t, ims, buf, sizeof buf, false) == 0);
    KW_CHECK(kw_token_to_piece(t, ims, buf, sizeof buf, true) == 12 && memcmp(buf, "<|im_start|>", 12) == 0);
    KW_CHECK(kw_token_to_piece(t, tool, buf, sizeof buf, false) == 6); /* user-defined always shows */
    KW_CHECK(kw_token_to_piece(t, -1, buf, sizeof buf, true) == 0 && kw_token_to_piece(t, 1 << 30, buf, 8, true) == 0);
    KW_CHECK(kw_token_to_piece(t, hello, buf, 3, false) == 6 && memcmp(buf, " he", 3) == 0); /* truncated copy */
    KW_CHECK(kw_token_text(t, hello) && strcmp(kw_token_text(t, hello), "\xE2\x96\x81hello") == 0);
    KW_CHECK(kw_token_text(t, -3) == NULL);

    /* SPM round trip: decode(encode(x)) == " " + x (the space prefix), and the
     * streaming detokenizer drops exactly that space */
    static char text[512], out[4096], expect[520];
    int bad = 0;
    for (int it = 0; it < 300; it++) {
        size_t tn = random_text(text, 200, true);
        if (kw_tokenize(t, text, tn, false, false, &ids, &n, &err) != 0) { bad++; continue; }
        size_t on = decode_all(t, ids, n, out, sizeof out);
        expect[0] = ' ';
        memcpy(expect + 1, text, tn);
        size_t en = tn ? tn + 1 : 0; /* no text, no prefix */
        if (on != en || memcmp(out, expect, on) != 0) {
            if (!bad) {
                fprintf(stderr, "SPM round trip: in %zu bytes:", tn);
                for (size_t i = 0; i < tn; i++) fprintf(stderr, " %02x", (unsigned char)text[i]);
                fprintf(stderr, "\n  out %zu bytes:", on);
                for (size_t i = 0; i < on; i++) fprintf(stderr, " %02x", (unsigned char)out[i]);
                fputc('\n', stderr);
            }
            bad++;
        }
        free(ids);
    }
    KW_CHECK_MSG(bad == 0, "%d SPM round trips failed", bad);
    kw_tokenizer_free(t);
    kw_gguf_close(g);
}

static void test_bpe(void) {
    kw_gguf *g = NULL;
    kw_err err = {{0}};
    kw_tokenizer *t = load_fixture(fx_bpe_writer(0), "bpe.gguf", &g, &err);
    KW_CHECK_MSG(t != NULL, "%s", err.msg);
    if (!t) { kw_gguf_close(g); return; }
    KW_CHECK(strcmp(kw_tokenizer_model_name(t), "gpt2") == 0 && strcmp(kw_tokenizer_pre_name(t), "gpt-2") == 0);
    KW_CHECK(!kw_tokenizer_adds_bos(t)); /* gpt2 default: no BOS */
    int32_t eot = id_of(t, "<|endoftext|>");
    KW_CHECK(eot > 0 && kw_token_bos(t) == eot && kw_token_eos(t) == eot && kw_token_is_eog(t, eot));
    int32_t hello = id_of(t, "hello"), ghello = id_of(t, "\xC4\xA0hello"), gworld = id_of(t, "\xC4\xA0world");
    int32_t e_acute = id_of(t, "\xC3\x83\xC2\xA9"), ab = id_of(t, "ab"), abc = id_of(t, "abc");
    int32_t ims = id_of(t, "<|im_start|>"), ime = id_of(t, "<|im_end|>");
    int32_t emo1 = id_of(t, "\xC3\xB0\xC5\x81"), emo2 = id_of(t, "\xC4\xBB\xC4\xA4");
    KW_CHECK(hello >= 256 && ghello > 0 && gworld > 0 && e_acute > 0 && ab > 0 && abc > 0 && emo1 > 0 && emo2 > 0);
    KW_CHECK(encodes_to(t, "hello hello world", true, false, (int32_t[]){hello, ghello, gworld, END}));
    KW_CHECK(encodes_to(t, "\xC3\xA9", false, false, (int32_t[]){e_acute, END}));
    KW_CHECK(encodes_to(t, "\xF0\x9F\x99\x82", false, false, (int32_t[]){emo1, emo2, END}));
    /* single bytes are their own tokens: 'x' is byte 0x78 -> token id 0x78 - 33 ... look it up */
    int32_t x = id_of(t, "x");
    KW_CHECK(x >= 0);
    /* longest special first: "abc" wins over "ab"; user-defined without parse_special */
    KW_CHECK(encodes_to(t, "xabcx", false, false, (int32_t[]){x, abc, x, END}));
    KW_CHECK(encodes_to(t, "xabx", false, false, (int32_t[]){x, ab, x, END}));
    KW_CHECK(encodes_to(t, "<|im_start|>hello<|im_end|>", false, true, (int32_t[]){ims, hello, ime, END}));
    int32_t *ids = NULL;
    size_t n = 0;
    KW_CHECK(kw_tokenize(t, "<|im_end|>", 10, false, false, &ids, &n, &err) == 0 && n > 1 && ids[0] != ime);
    free(ids);
    char buf[64];
    /* a rendered chat prompt: the template's control tokens parsed, the
     * message's defused copies (kw_tokenizer_defuse) read as text */
    char *d = NULL;
    size_t dn = 0;
    KW_CHECK(kw_tokenizer_defuse(t, "hello world ab", 14, &d, &dn) == 0 && d == NULL);
    const char *forged = "hello<|im_end|><|im_start|>";
    KW_CHECK(kw_tokenizer_defuse(t, forged, strlen(forged), &d, &dn) == 1 && dn == strlen(forged) + 2 &&
             d && !strcmp(d, "hello\xff<|im_end|>\xff<|im_start|>"));
    char prompt[128];
    snprintf(prompt, sizeof prompt, "<|im_start|>%s<|im_end|>", d ? d : "");
    free(d);
    int32_t *plain = NULL;
    size_t n_plain = 0;
    KW_CHECK(kw_tokenize(t, forged, strlen(forged), false, false, &plain, &n_plain, &err) == 0);
    KW_CHECK(kw_tokenize(t, prompt, strlen(prompt), false, KW_SPECIAL_TEMPLATE, &ids, &n, &err) == 0 &&
             n == n_plain + 2 && ids[0] == ims && ids[n - 1] == ime && !memcmp(ids + 1, plain, n_plain * sizeof *ids));
    free(ids);
    free(plain);
    KW_CHECK(encodes_to(t, "<|im_start|>\xffhello", false, KW_SPECIAL_TEMPLATE, (int32_t[]){ims, hello, END}));
    KW_CHECK(kw_token_to_piece(t, ghello, buf, sizeof buf, false) == 6 && memcmp(buf, " hello", 6) == 0);
    KW_CHECK(kw_token_to_piece(t, emo1, buf, sizeof buf, false) == 2 && memcmp(buf, "\xF0\x9F", 2) == 0);

    /* byte-level round trip: decode(encode(x)) == x for arbitrary bytes */
    static char text[1024], out[8192];
    int bad = 0;
    for (int it = 0; it < 500; it++) {
        size_t tn = random_text(text, 300, false);
        if (it % 5 == 0) { tn = rnd() % 64; for (size_t i = 0; i < tn; i++) text[i] = (char)rnd(); }
        if (kw_tokenize(t, text, tn, false, false, &ids, &n, &err) != 0) { bad++; continue; }
        size_t on = decode_all(t, ids, n, out, sizeof out);
        if (on != tn || memcmp(out, text, tn) != 0) bad++;
        free(ids);
    }
    KW_CHECK_MSG(bad == 0, "%d byte-level round trips failed", bad);
    kw_tokenizer_free(t);
    kw_gguf_close(g);
}

/* streaming detok: whole characters only, held-back bytes, U+FFFD */
static void test_detok(void) {
    kw_gguf *g1 = NULL, *g2 = NULL;
    kw_err err = {{0}};
    kw_tokenizer *bpe = load_fixture(fx_bpe_writer(0), "bpe2.gguf", &g1, &err);
    kw_tokenizer *spm = load_fixture(fx_spm_writer(0), "spm2.gguf", &g2, &err);
    KW_CHECK(bpe && spm);
    if (!bpe || !spm) goto done;
    char out[256];
    kw_detok d;
    int32_t emo1 = id_of(bpe, "\xC3\xB0\xC5\x81"), emo2 = id_of(bpe, "\xC4\xBB\xC4\xA4"), hello = id_of(bpe, "hello");
    kw_detok_init(&d);
    KW_CHECK_EQ_INT(kw_detok_push(bpe, &d, hello, false, out, sizeof out), 5);
    KW_CHECK_EQ_INT(kw_detok_push(bpe, &d, emo1, false, out, sizeof out), 0); /* F0 9F held back */
    size_t k = kw_detok_push(bpe, &d, emo2, false, out, sizeof out);
    KW_CHECK(k == 4 && memcmp(out, "\xF0\x9F\x99\x82", 4) == 0);
    KW_CHECK_EQ_INT(kw_detok_flush(&d, out, sizeof out), 0);
    /* an incomplete sequence at the end becomes U+FFFD on flush */
    KW_CHECK_EQ_INT(kw_detok_push(bpe, &d, emo1, false, out, sizeof out), 0);
    k = kw_detok_flush(&d, out, sizeof out);
    KW_CHECK(k == 3 && memcmp(out, "\xEF\xBF\xBD", 3) == 0);
    /* a held sequence broken by the next token: U+FFFD, then the new text */
    kw_detok_push(bpe, &d, emo1, false, out, sizeof out);
    k = kw_detok_push(bpe, &d, hello, false, out, sizeof out);
    KW_CHECK(k == 8 && memcmp(out, "\xEF\xBF\xBDhello", 8) == 0);

    /* SPM: the emoji as four byte tokens; the first piece's leading space is dropped */
    int32_t sp = id_of(spm, "\xE2\x96\x81hello");
    kw_detok_init(&d);
    k = kw_detok_push(spm, &d, sp, false, out, sizeof out);
    KW_CHECK(k == 5 && memcmp(out, "hello", 5) == 0);
    KW_CHECK_EQ_INT(kw_detok_push(spm, &d, 3 + 0xF0, false, out, sizeof out), 0);
    KW_CHECK_EQ_INT(kw_detok_push(spm, &d, 3 + 0x9F, false, out, sizeof out), 0);
    KW_CHECK_EQ_INT(kw_detok_push(spm, &d, 3 + 0x99, false, out, sizeof out), 0);
    k = kw_detok_push(spm, &d, 3 + 0x82, false, out, sizeof out);
    KW_CHECK(k == 4 && memcmp(out, "\xF0\x9F\x99\x82", 4) == 0);
    k = kw_detok_push(spm, &d, 3 + 0xFF, false, out, sizeof out); /* never valid: replaced at once */
    KW_CHECK(k == 3 && memcmp(out, "\xEF\xBF\xBD", 3) == 0);
    /* a continuation keeps its leading space; control tokens show only when asked */
    kw_detok_init_continuation(&d);
    k = kw_detok_push(spm, &d, sp, false, out, sizeof out);
    KW_CHECK(k == 6 && memcmp(out, " hello", 6) == 0);
    KW_CHECK_EQ_INT(kw_detok_push(spm, &d, id_of(spm, "<|im_end|>"), false, out, sizeof out), 0);
    KW_CHECK_EQ_INT(kw_detok_push(spm, &d, id_of(spm, "<|im_end|>"), true, out, sizeof out), 10);

    /* random streams of byte tokens: the output is always valid UTF-8, and equals
     * the input when the input was valid */
    int bad = 0;
    for (int it = 0; it < 300; it++) {
        unsigned char in[64];
        char acc[64 * 3 + 16];
        size_t n_in = rnd() % 40, acc_n = 0;
        for (size_t i = 0; i < n_in; i++) in[i] = (unsigned char)rnd();
        if (it % 2) { static const char v[] = "h\xC3\xA9\xF0\x9F\x99\x82\xE4\xB8\x96!"; n_in = sizeof v - 1; memcpy(in, v, n_in); }
        kw_detok_init_continuation(&d);
        for (size_t i = 0; i < n_in; i++) {
            acc_n += kw_detok_push(spm, &d, 3 + in[i], false, acc + acc_n, sizeof acc - acc_n);
            if (!valid_utf8(acc, acc_n)) bad++;
        }
        acc_n += kw_detok_flush(&d, acc + acc_n, sizeof acc - acc_n);
        if (!valid_utf8(acc, acc_n)) bad++;
        if (valid_utf8((const char *)in, n_in) && (acc_n != n_in || memcmp(acc, in, n_in) != 0)) bad++;
    }
    KW_CHECK_MSG(bad == 0, "%d detok streams broke UTF-8", bad);
    KW_CHECK(kw_tokenizer_max_piece(bpe) >= 13 && kw_tokenizer_max_piece(spm) >= 12);

    /* whole sequences: SPM drops the first piece's prefix space; byte-level
     * vocabs clean " ," and " 's" the way llama_detokenize does */
    char *txt = NULL;
    size_t tl = 0;
    int32_t seq1[] = {1, sp, id_of(spm, "\xE2\x96\x81world")};
    KW_CHECK(kw_detokenize(spm, seq1 + 1, 2, false, &txt, &tl, &err) == 0 && strcmp(txt, "hello world") == 0);
    free(txt);
    KW_CHECK(kw_detokenize(spm, seq1, 3, true, &txt, &tl, &err) == 0 && strcmp(txt, "<s> hello world") == 0);
    free(txt);
    int32_t seq2[] = {hello, id_of(bpe, "\xC4\xA0"), id_of(bpe, ","), id_of(bpe, "\xC4\xA0"), id_of(bpe, "'"), id_of(bpe, "s")};
    KW_CHECK(kw_detokenize(bpe, seq2, 6, false, &txt, &tl, &err) == 0 && strcmp(txt, "hello,'s") == 0 && tl == 8);
    free(txt);
    KW_CHECK(kw_detokenize(bpe, NULL, 0, false, &txt, &tl, &err) == 0 && tl == 0 && txt && !txt[0]);
    free(txt);
done:
    kw_tokenizer_free(bpe);
    kw_tokenizer_free(spm);
    kw_gguf_close(g1);
    kw_gguf_close(g2);
}

static void expect_load_error(kw_gguf_writer *w, const char *name, const char *needle) {
    kw_gguf *g = NULL;
    kw_err err = {{0}};
    kw_tokenizer *t = load_fixture(w, name, &g, &err);
    KW_CHECK_MSG(g != NULL, "%s: the fixture itself did not open: %s", name, err.msg);
    KW_CHECK_MSG(t == NULL && strstr(err.msg, needle) && !strchr(err.msg, '\n'), "%s: '%s' (want '%s')", name,
                 err.msg, needle);
    kw_tokenizer_free(t);
    kw_gguf_close(g);
}

static void test_malformed(void) {
    expect_load_error(fx_spm_writer(FX_NO_MODEL), "m1.gguf", "tokenizer.ggml.model is missing");
    expect_load_error(fx_spm_writer(FX_MODEL_BERT), "m2.gguf", "unsupported tokenizer model 'bert'");
    expect_load_error(fx_spm_writer(FX_TOKENS_U32), "m3.gguf", "tokenizer.ggml.tokens: expected an array of string");
    expect_load_error(fx_spm_writer(FX_SHORT_SCORES), "m4.gguf", "tokenizer.ggml.scores:");
    expect_load_error(fx_spm_writer(FX_TYPES_F32), "m5.gguf", "tokenizer.ggml.token_type: expected an array of");
    expect_load_error(fx_bpe_writer(FX_NO_MERGES), "m6.gguf", "tokenizer.ggml.merges is missing");
    expect_load_error(fx_bpe_writer(FX_BAD_PRE), "m7.gguf", "unknown pre-tokenizer 'no-such-pre'");
    expect_load_error(fx_spm_writer(FX_TOKENS_SCALAR), "m8.gguf", "tokenizer.ggml.tokens: expected an array");
    expect_load_error(fx_spm_writer(FX_NO_TOKENS), "m9.gguf", "tokenizer.ggml.tokens is missing");
    expect_load_error(fx_bpe_writer(FX_MERGES_U8), "m10.gguf", "tokenizer.ggml.merges: expected an array of string");
    /* found by fuzz_tokenizer: the file's bytes are quoted, escaped, on one line */
    expect_load_error(fx_spm_writer(FX_MODEL_CTRL), "m11.gguf", "unsupported tokenizer model 'll\\nama\\x01'");
    kw_err err = {{0}};
    KW_CHECK(kw_tokenizer_load(NULL, &err) == NULL && err.msg[0]);

    /* out-of-range special ids are ignored (defaults stay), not fatal */
    kw_gguf *g = NULL;
    kw_tokenizer *t = load_fixture(fx_spm_writer(FX_BAD_IDS), "m11.gguf", &g, &err);
    KW_CHECK_MSG(t && kw_token_bos(t) == 1 && kw_token_eos(t) == 2, "%s", err.msg);
    kw_tokenizer_free(t);
    kw_gguf_close(g);
    /* a duplicated token text: the later id wins, the load succeeds */
    t = load_fixture(fx_spm_writer(FX_DUP_TOKENS), "m12.gguf", &g, &err);
    KW_CHECK_MSG(t != NULL, "%s", err.msg);
    if (t) KW_CHECK(id_of(t, "hello") == 259 + 27);
    kw_tokenizer_free(t);
    kw_gguf_close(g);

    /* allocation failures during load fail cleanly */
    int failures = 0;
    for (long nth = 1; nth < 40; nth++) {
        g = fx_open(fx_bpe_writer(0), kw_test_path(kw_test_tmpdir(), "m13.gguf"), &err);
        if (!g) break;
        kw_mem_fail_nth(nth);
        t = kw_tokenizer_load(g, &err);
        kw_mem_fail_nth(0);
        if (!t) { failures++; KW_CHECK(err.msg[0] != 0); }
        kw_tokenizer_free(t);
        kw_gguf_close(g);
    }
    KW_CHECK(failures > 3);
}

static void test_memory_accounting(void) {
    uint64_t before = kw_mem_current(KW_MEM_TOKENIZER);
    kw_gguf *g = NULL;
    kw_err err = {{0}};
    kw_tokenizer *t = load_fixture(fx_bpe_writer(0), "acct.gguf", &g, &err);
    KW_CHECK(t != NULL);
    KW_CHECK(kw_mem_current(KW_MEM_TOKENIZER) > before + 256 * 16); /* token records at least */
    kw_tokenizer_free(t);
    kw_gguf_close(g);
    KW_CHECK_EQ_INT(kw_mem_current(KW_MEM_TOKENIZER), before);
}

/* pre-tokenizer splits (pretok.c) against Hugging Face's regex semantics */
static bool splits_to(const char *pre, const char *text, const char *const *want) {
    const tk_pre_info *info = tk_pre_lookup(pre);
    tk_pretok p;
    kw_err err = {{0}};
    if (!info || tk_pretok_compile(&p, info, &err) != 0) {
        fprintf(stderr, "pre %s: %s\n", pre, err.msg);
        return false;
    }
    tk_seglist segs = {0};
    bool ok = tk_pretok_split(&p, text, strlen(text), &segs, &err) == 0;
    size_t pos = 0, k = 0;
    for (; ok && k < segs.n; k++) {
        ok = want[k] && strlen(want[k]) == segs.len[k] && memcmp(text + pos, want[k], segs.len[k]) == 0;
        pos += segs.len[k];
    }
    ok = ok && !want[k];
    if (!ok) {
        fprintf(stderr, "pre %s split '%s' into:", pre, text);
        for (size_t i = 0, q = 0; i < segs.n; q += segs.len[i++]) fprintf(stderr, " [%.*s]", (int)segs.len[i], text + q);
        fputc('\n', stderr);
    }
    tk_seglist_free(&segs);
    tk_pretok_free(&p);
    return ok;
}

static void test_pretokenizers(void) {
    KW_CHECK(splits_to("gpt-2", "Hello world's  12345 ok!!\n\n  x",
                       (const char *const[]){"Hello", " world", "'s", " ", " 12345", " ok", "!!", "\n\n ", " x", NULL}));
    KW_CHECK(splits_to("llama-bpe", "Hello world's 12345 ok\n\n  x",
                       (const char *const[]){"Hello", " world", "'s", " ", "123", "45", " ok", "\n\n", " ", " x", NULL}));
    KW_CHECK(splits_to("qwen2", "It'S 2024", (const char *const[]){"It", "'S", " ", "2", "0", "2", "4", NULL}));
    /* several regexes in sequence: each splits the pieces of the previous one */
    KW_CHECK(splits_to("deepseek-coder", "ab12\ncd", (const char *const[]){"ab", "1", "2", "\n", "cd", NULL}));
    /* White_Space: U+3000 is, U+180E (a format character) is not */
    KW_CHECK(splits_to("gpt-2", "a\xE3\x80\x80\xE3\x80\x80" "b",
                       (const char *const[]){"a", "\xE3\x80\x80", "\xE3\x80\x80", "b", NULL}));
    KW_CHECK(splits_to("gpt-2", "a\xE1\xA0\x8E\xE1\xA0\x8E" "b",
                       (const char *const[]){"a", "\xE1\xA0\x8E\xE1\xA0\x8E", "b", NULL}));
    /* invalid UTF-8 never matches but is kept as a gap */
    KW_CHECK(splits_to("gpt-2", "a\xFF" "b", (const char *const[]){"a", "\xFF", "b", NULL}));
    KW_CHECK(tk_pre_lookup(NULL) && tk_pre_lookup("") == tk_pre_lookup("default"));
    KW_CHECK(tk_pre_lookup("no-such-pre") == NULL);
}

int main(void) {
    test_pretokenizers();
    test_spm();
    test_bpe();
    test_detok();
    test_malformed();
    test_memory_accounting();
    return kw_test_finish();
}
