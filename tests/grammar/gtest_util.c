/* gtest_util.c - see gtest_util.h. */
#include "gtest_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rnd(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

kw_grammar_vocab *gt_vocab_small(const char *const *extra, int n_eog) {
    int n_extra = 0;
    while (extra && extra[n_extra]) n_extra++;
    int n = 256 + n_extra + n_eog + 1;
    const char **b = calloc((size_t)n, sizeof *b);
    uint32_t *l = calloc((size_t)n, sizeof *l);
    uint8_t *k = calloc((size_t)n, 1);
    static char bytes[256];
    for (int i = 0; i < 256; i++) { bytes[i] = (char)i; b[i] = &bytes[i]; l[i] = 1; }
    for (int i = 0; i < n_extra; i++) { b[256 + i] = extra[i]; l[256 + i] = (uint32_t)strlen(extra[i]); }
    for (int i = 0; i < n_eog; i++) { b[256 + n_extra + i] = "<eos>"; l[256 + n_extra + i] = 5; k[256 + n_extra + i] = KW_GTOK_EOG; }
    b[n - 1] = "<special>"; l[n - 1] = 9; k[n - 1] = KW_GTOK_SPECIAL;
    kw_err e;
    kw_grammar_vocab *v = kw_grammar_vocab_new(n, b, l, k, &e);
    if (!v) fprintf(stderr, "vocab: %s\n", e.msg);
    free(b); free(l); free(k);
    return v;
}

kw_grammar_vocab *gt_vocab_big(int32_t n, uint32_t seed) {
    static const char *pieces[] = {"{", "}", "[", "]", ",", ":", "\"", "\":", "\",", "\"}", "\"]", "\":\"", "{\"",
                                   "[\"", "\n", "\n  ", "\n    ", " ", "  ", "    ", "true", "false", "null", "0",
                                   "1", "12", "3.", ".5", "e+", "-", "\\n", "\\\"", "\\u00", "name", "id", "type",
                                   "value", "items", " the", " a", "ing", "é", "中文", "😀", "\xe4\xb8", "\xad",
                                   "\"\n", "},", "],", "}}", "\"}\n", ", \"", "\": ", "\": \"", "2024-", "-01", "T12",
                                   ":00", "Z", "+", "*** ", "Begin", " Patch", "@@", "\n+", "\n-", "\n ", "File: ",
                                   NULL};
    char **b = calloc((size_t)n, sizeof *b);
    uint32_t *l = calloc((size_t)n, sizeof *l);
    uint8_t *k = calloc((size_t)n, 1);
    int32_t i = 0;
    for (; i < 256 && i < n; i++) { b[i] = malloc(1); b[i][0] = (char)i; l[i] = 1; }
    for (int p = 0; pieces[p] && i < n; p++, i++) { b[i] = strdup(pieces[p]); l[i] = (uint32_t)strlen(pieces[p]); }
    static const char alpha[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-.,:;\"{}[]()/\\\n'!?@#*+=<>";
    for (; i < n - 2; i++) {
        uint32_t len = 1 + rnd(&seed) % 9;
        if (rnd(&seed) % 8 == 0) len += rnd(&seed) % 12;
        b[i] = malloc(len * 4 + 1);
        uint32_t o = 0;
        if (rnd(&seed) % 3 == 0) b[i][o++] = ' ';
        while (o < len) {
            uint32_t r = rnd(&seed) % 100;
            if (r < 85) b[i][o++] = alpha[rnd(&seed) % (sizeof alpha - 1)];
            else if (r < 95) { b[i][o++] = (char)0xc3; b[i][o++] = (char)(0xa0 + rnd(&seed) % 16); }
            else b[i][o++] = (char)(0x80 + rnd(&seed) % 64);   /* a stray continuation byte */
        }
        l[i] = o;
    }
    b[n - 2] = strdup("<eos>"); l[n - 2] = 5; k[n - 2] = KW_GTOK_EOG;
    b[n - 1] = strdup("<sp>"); l[n - 1] = 4; k[n - 1] = KW_GTOK_SPECIAL;
    kw_err e;
    kw_grammar_vocab *v = kw_grammar_vocab_new(n, (const char *const *)b, l, k, &e);
    if (!v) fprintf(stderr, "vocab: %s\n", e.msg);
    for (int32_t j = 0; j < n; j++) free(b[j]);
    free(b); free(l); free(k);
    return v;
}

int gt_random_walk(const kw_grammar *g, const kw_grammar_index *ix, const kw_grammar_vocab *v, uint32_t seed,
                   int max_tokens, double p_end, const char *prefer, char *out, size_t cap, size_t *out_len,
                   char *why, size_t why_cap) {
    kw_err e;
    kw_grammar_matcher *m = kw_grammar_matcher_new(g, ix, &e);
    if (!m) { snprintf(why, why_cap, "matcher: %s", e.msg); return -1; }
    int32_t nv = kw_grammar_vocab_size(v);
    uint32_t *mask = calloc(((size_t)nv + 31) / 32, 4);
    int32_t *allowed = malloc((size_t)nv * sizeof *allowed);
    size_t o = 0;
    int rc = 0;
    out[0] = 0;
    for (int t = 0; t < max_tokens; t++) {
        int32_t n = kw_grammar_mask(m, mask, &e);
        if (n < 0) { snprintf(why, why_cap, "mask: %s", e.msg); rc = -1; break; }
        if (n == 0) {
            if (kw_grammar_is_complete(m)) { rc = 1; break; }
            snprintf(why, why_cap, "stuck: no token allowed after '%s'", out);
            rc = -1;
            break;
        }
        int32_t na = 0, eog = -1;
        bool closing = rnd(&seed) % 2 == 0;   /* half the steps prefer tokens that close something */
        for (int pass = 0; pass < 2 && na == 0; pass++) {
            for (int32_t i = 0; i < nv; i++) {
                if (!kw_grammar_mask_test(mask, i)) continue;
                if (kw_grammar_vocab_kind(v, i) == KW_GTOK_EOG) { eog = i; continue; }
                if (closing && pass == 0) {
                    uint32_t len;
                    const char *tb = kw_grammar_vocab_token(v, i, &len);
                    if (!tb[0] || !strchr(prefer, tb[0]) || len > 2) continue;
                }
                allowed[na++] = i;
            }
        }
        int32_t pick;
        if (eog >= 0 && (na == 0 || (double)(rnd(&seed) % 10000) / 10000.0 < p_end)) pick = eog;
        else pick = allowed[rnd(&seed) % (uint32_t)na];
        if (kw_grammar_accept_token(m, pick, &e)) {
            snprintf(why, why_cap, "accept_token(%d) after mask allowed it: %s (text '%s')", pick, e.msg, out);
            rc = -1;
            break;
        }
        if (pick == eog) { rc = 1; break; }
        uint32_t len;
        const char *tb = kw_grammar_vocab_token(v, pick, &len);
        if (o + len + 1 < cap) { memcpy(out + o, tb, len); o += len; out[o] = 0; }
        if (kw_grammar_is_complete(m)) { rc = 1; break; }
    }
    if (out_len) *out_len = o;
    free(mask);
    free(allowed);
    kw_grammar_matcher_free(m);
    return rc;
}

/* A uniform draw among the tokens of mask (EOG only when alone); -1 when none. */
static int32_t draw(const uint32_t *mask, const kw_grammar_vocab *v, int32_t *allowed, uint32_t *seed) {
    int32_t nv = kw_grammar_vocab_size(v), na = 0, eog = -1;
    for (int32_t i = 0; i < nv; i++) {
        if (!kw_grammar_mask_test(mask, i)) continue;
        if (kw_grammar_vocab_kind(v, i) == KW_GTOK_EOG) eog = i;
        else allowed[na++] = i;
    }
    return na ? allowed[rnd(seed) % (uint32_t)na] : eog;
}

int gt_budget_walk(const kw_grammar *g, const kw_grammar_index *ix, const kw_grammar_vocab *v, uint32_t seed,
                   int max_tokens, char *out, size_t cap, int *n_closing, char *why, size_t why_cap) {
    kw_err e;
    kw_grammar_matcher *m = kw_grammar_matcher_new(g, ix, &e);
    if (!m) { snprintf(why, why_cap, "matcher: %s", e.msg); return -1; }
    int32_t nv = kw_grammar_vocab_size(v);
    size_t words = ((size_t)nv + 31) / 32;
    uint32_t *mask = calloc(words, 4), *plain = calloc(words, 4);
    int32_t *allowed = malloc((size_t)nv * sizeof *allowed);
    size_t o = 0;
    int rc = 0;
    *n_closing = 0;
    out[0] = 0;
    for (int t = 0; t < max_tokens && rc == 0; t++) {
        bool closing;
        int32_t n = kw_grammar_mask_budget(m, mask, max_tokens - t, &closing, &e);
        if (n <= 0) { snprintf(why, why_cap, "mask %d (%s) after '%s'", n, n ? e.msg : "stuck", out); rc = -1; break; }
        int32_t pick = draw(mask, v, allowed, &seed);
        if (kw_grammar_accept_token(m, pick, &e)) {
            snprintf(why, why_cap, "accept_token(%d) after the mask allowed it: %s", pick, e.msg);
            rc = -1;
            break;
        }
        if (!closing && !kw_grammar_budget_ok(m, max_tokens - t - 1)) {
            kw_grammar_rollback(m, 1);
            closing = kw_grammar_mask_closing(m, mask, &e) > 0;
            if (closing) pick = draw(mask, v, allowed, &seed);
            if (kw_grammar_accept_token(m, pick, &e)) { snprintf(why, why_cap, "redraw: %s", e.msg); rc = -1; break; }
        }
        if (closing) {
            (*n_closing)++;
            /* the closing tokens must be tokens the plain mask allows */
            kw_grammar_matcher *c = kw_grammar_matcher_clone(m);
            kw_grammar_rollback(c, 1);
            kw_grammar_mask_closing(c, mask, &e);
            kw_grammar_mask(c, plain, &e);
            for (size_t w = 0; w < words && rc == 0; w++)
                if (mask[w] & ~plain[w]) { snprintf(why, why_cap, "closing mask allows a token the grammar does not"); rc = -1; }
            kw_grammar_matcher_free(c);
        }
        if (kw_grammar_vocab_kind(v, pick) == KW_GTOK_EOG) { rc = rc ? rc : 1; break; }
        uint32_t len;
        const char *tb = kw_grammar_vocab_token(v, pick, &len);
        if (o + len + 1 < cap) { memcpy(out + o, tb, len); o += len; out[o] = 0; }
        if (rc == 0 && kw_grammar_is_complete(m)) rc = 1;
    }
    free(mask);
    free(plain);
    free(allowed);
    kw_grammar_matcher_free(m);
    return rc;
}

int gt_check_mask_exact(kw_grammar_matcher *m, const kw_grammar_vocab *v) {
    int32_t nv = kw_grammar_vocab_size(v);
    uint32_t *mask = calloc(((size_t)nv + 31) / 32, 4);
    kw_err e;
    int bad = 0;
    if (kw_grammar_mask(m, mask, &e) < 0) { fprintf(stderr, "mask: %s\n", e.msg); free(mask); return 1; }
    for (int32_t i = 0; i < nv; i++) {
        kw_grammar_matcher *c = kw_grammar_matcher_clone(m);
        bool ok = kw_grammar_accept_token(c, i, &e) == 0;
        kw_grammar_matcher_free(c);
        if (ok != kw_grammar_mask_test(mask, i)) {
            if (bad < 5) fprintf(stderr, "  mask disagrees on token %d: mask %d accept %d\n", i, kw_grammar_mask_test(mask, i), ok);
            bad++;
        }
    }
    free(mask);
    return bad;
}

int gt_accepts(const kw_grammar *g, const char *s, size_t n) {
    kw_err e;
    kw_grammar_matcher *m = kw_grammar_matcher_new(g, NULL, &e);
    if (!m) return 0;
    int ok = kw_grammar_accept_bytes(m, s, n, &e) == 0 && kw_grammar_can_end(m);
    kw_grammar_matcher_free(m);
    return ok;
}
