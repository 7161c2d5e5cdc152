/* fuzz_grammar.c - libFuzzer target for the grammar compilers (GBNF, JSON
 * Schema, regex, Lark) and, when a grammar compiles, for the matcher and
 * the token mask over a small vocab.
 *
 * Input: byte 0 picks the front-end (% 4: GBNF, JSON Schema, regex,
 * Lark), byte 1 is a split point; the rest up to the split is the grammar
 * text, what follows is fed to the matcher as output text. Properties: no
 * crash, sanitizer report or leak; a compile that fails has an error
 * message; the mask bit of every token of the small vocab equals whether
 * accept_token succeeds on a clone of the matcher (checked before and
 * after feeding the text); the closing mask is a subset of it whose
 * tokens each shorten the distance to a complete output by their length. Limits are lowered so that every input runs in
 * milliseconds. Seeds in fuzz/corpus/grammar/; run by scripts/fuzz.sh grammar. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kvwise/grammar.h"

static kw_grammar_vocab *g_vocab;

static void make_vocab(void) {
    static const char *extra[] = {"\"", "\":", "\",", "{\"", "}", "]", "ab", "é", "\xc3", "12", "\n", "  ", "true",
                                  "*** ", "@@", "+x\n", "a\"b", "\\n", "-1", "0.5", "null", ",\"", "xyz", NULL};
    int n_extra = 0;
    while (extra[n_extra]) n_extra++;
    int n = 256 + n_extra + 2;
    const char **b = calloc((size_t)n, sizeof *b);
    uint32_t *l = calloc((size_t)n, sizeof *l);
    uint8_t *k = calloc((size_t)n, 1);
    static char bytes[256];
    for (int i = 0; i < 256; i++) { bytes[i] = (char)i; b[i] = &bytes[i]; l[i] = 1; }
    for (int i = 0; i < n_extra; i++) { b[256 + i] = extra[i]; l[256 + i] = (uint32_t)strlen(extra[i]); }
    b[n - 2] = "<eos>"; l[n - 2] = 5; k[n - 2] = KW_GTOK_EOG;
    b[n - 1] = "<sp>"; l[n - 1] = 4; k[n - 1] = KW_GTOK_SPECIAL;
    g_vocab = kw_grammar_vocab_new(n, b, l, k, NULL);
    free(b); free(l); free(k);
    if (!g_vocab) abort();
}

static void check_mask(kw_grammar_matcher *m) {
    int32_t nv = kw_grammar_vocab_size(g_vocab);
    uint32_t mask[16];
    kw_err e;
    if (kw_grammar_mask(m, mask, &e) < 0) return;   /* an internal limit: allowed, reported */
    for (int32_t i = 0; i < nv; i++) {
        kw_grammar_matcher *c = kw_grammar_matcher_clone(m);
        if (!c) abort();
        int ok = kw_grammar_accept_token(c, i, &e) == 0;
        kw_grammar_matcher_free(c);
        if (ok != kw_grammar_mask_test(mask, i)) {
            fprintf(stderr, "mask bit %d for token %d, accept_token says %d\n", kw_grammar_mask_test(mask, i), i, ok);
            abort();
        }
    }
}

/* The closing mask: a subset of the plain mask, never empty while a
   completion is known (the vocab has every byte), and each of its tokens
   shortens the distance by at least its length. */
static void check_closing(kw_grammar_matcher *m) {
    int32_t nv = kw_grammar_vocab_size(g_vocab);
    uint32_t mask[16], plain[16];
    kw_err e;
    if (kw_grammar_mask(m, plain, &e) < 0) return;
    uint32_t d = kw_grammar_distance(m);
    int32_t n = kw_grammar_mask_closing(m, mask, &e);
    if (d != KW_GRAMMAR_FAR && !kw_grammar_is_complete(m) && n <= 0) {
        fprintf(stderr, "distance %u but no closing token\n", d);
        abort();
    }
    for (int32_t i = 0; i < nv && n > 0; i++) {
        if (!kw_grammar_mask_test(mask, i)) continue;
        if (!kw_grammar_mask_test(plain, i)) { fprintf(stderr, "closing token %d not in the mask\n", i); abort(); }
        if (kw_grammar_vocab_kind(g_vocab, i) != KW_GTOK_TEXT) continue;
        kw_grammar_matcher *c = kw_grammar_matcher_clone(m);
        if (!c) abort();
        uint32_t len;
        kw_grammar_vocab_token(g_vocab, i, &len);
        if (kw_grammar_accept_token(c, i, &e) == 0) {
            uint32_t d2 = kw_grammar_distance(c);
            if (d2 == KW_GRAMMAR_FAR || d2 + len > d) {
                fprintf(stderr, "closing token %d (%u bytes): distance %u -> %u\n", i, len, d, d2);
                abort();
            }
        }
        kw_grammar_matcher_free(c);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    if (!g_vocab) make_vocab();
    kw_grammar_limits lim;
    kw_grammar_limits_default(&lim);
    lim.max_ir_nodes = 20000;
    lim.max_rules = 500;
    lim.max_nfa_states = 20000;
    lim.max_dfa_states = 4000;
    lim.max_compile_steps = 2000000;
    lim.max_repeat = 5000;
    lim.max_index_steps = 2000000;
    lim.max_index_bytes = 16u << 20;
    lim.max_heads = 256;
    lim.max_depth = 32;
    int kind = data[0] % 4;
    size_t split = 2 + (size_t)data[1] * (size - 2) / 255;
    const char *text = (const char *)data + 2;
    size_t len = split - 2;
    kw_err e = {{0}};
    kw_grammar *g = NULL;
    switch (kind) {
    case 0: g = kw_grammar_from_gbnf(text, len, &lim, &e); break;
    case 1: g = kw_grammar_from_json_schema(text, len, NULL, &lim, &e); break;
    case 2: g = kw_grammar_from_regex(text, len, &lim, &e); break;
    default: g = kw_grammar_from_lark(text, len, &lim, &e); break;
    }
    if (!g) {
        if (!e.msg[0]) { fprintf(stderr, "compile failed without a message\n"); abort(); }
        return 0;
    }
    kw_grammar_index *ix = kw_grammar_index_new(g, g_vocab, &lim, &e);
    if (ix) {
        kw_grammar_matcher *m = kw_grammar_matcher_new(g, ix, &e);
        if (m) {
            check_mask(m);
            const char *feed = (const char *)data + split;
            size_t fl = size - split;
            for (size_t i = 0; i < fl && i < 64; i++)
                if (kw_grammar_accept_bytes(m, feed + i, 1, &e)) break;
            check_mask(m);
            check_closing(m);
            kw_grammar_rollback(m, 3);
            check_mask(m);
            check_closing(m);
            kw_grammar_matcher_free(m);
        }
        kw_grammar_index_free(ix);
    }
    kw_grammar_free(g);
    return 0;
}
