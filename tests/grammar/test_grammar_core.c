/* test_grammar_core.c - the grammar engine on hand-written grammars: GBNF
 * and regex acceptance, the token mask checked token by token against
 * accept_token (small vocab with multi-byte and cross-rule tokens),
 * rollback and clone, EOG and special tokens. */
#include "testutil.h"
#include "gtest_util.h"
#include <string.h>

static kw_grammar *gbnf(const char *s) {
    kw_err e;
    kw_grammar *g = kw_grammar_from_gbnf(s, strlen(s), NULL, &e);
    if (!g) fprintf(stderr, "GBNF error: %s\n", e.msg);
    return g;
}

static const char *k_extra[] = {"12", "+3", "(1", "1)", "))", "\"a", "a\"", "\",", "\":", "ab", "abc\"", "\"}",
                                "é", "\xc3", "\xa9", "aé\"", " ", "  ", "\n", "\n  ", "true", "tr", "ue,",
                                "{\"", "\"x\"", "x\":", "[1", ",2", "2]", "1,", NULL};

static void check_exact_along(const kw_grammar *g, const kw_grammar_vocab *v, const char *path) {
    kw_err e;
    kw_grammar_index *ix = kw_grammar_index_new(g, v, NULL, &e);
    KW_CHECK_MSG(ix != NULL, "index: %s", ix ? "" : e.msg);
    if (!ix) return;
    kw_grammar_matcher *m = kw_grammar_matcher_new(g, ix, &e);
    KW_CHECK(m != NULL);
    size_t n = strlen(path);
    KW_CHECK_EQ_INT(gt_check_mask_exact(m, v), 0);
    for (size_t i = 0; i < n; i++) {
        KW_CHECK_MSG(kw_grammar_accept_bytes(m, path + i, 1, &e) == 0, "byte %zu of '%s': %s", i, path, e.msg);
        int bad = gt_check_mask_exact(m, v);
        KW_CHECK_MSG(bad == 0, "after '%.*s': %d tokens disagree", (int)i + 1, path, bad);
    }
    kw_grammar_matcher_free(m);
    kw_grammar_index_free(ix);
}

static void test_gbnf_arith(void) {
    kw_grammar *g = gbnf("root ::= expr\n"
                         "expr ::= term ((\"+\" | \"-\") term)*\n"
                         "term ::= num | \"(\" expr \")\"\n"
                         "num  ::= [0-9]+  # digits\n");
    KW_CHECK(g != NULL);
    if (!g) return;
    const char *ok[] = {"1", "1+2", "(1+2)-3", "((4))", "12+(3-4)", NULL};
    const char *bad[] = {"", "+", "1+", "(1", "1)", "a", "1 + 2", NULL};
    for (int i = 0; ok[i]; i++) KW_CHECK_MSG(gt_accepts(g, ok[i], strlen(ok[i])), "should accept '%s'", ok[i]);
    for (int i = 0; bad[i]; i++) KW_CHECK_MSG(!gt_accepts(g, bad[i], strlen(bad[i])), "should reject '%s'", bad[i]);
    kw_grammar_vocab *v = gt_vocab_small(k_extra, 1);
    check_exact_along(g, v, "(12+3)-((1))");
    kw_grammar_vocab_free(v);
    kw_grammar_free(g);
}

static void test_gbnf_syntax(void) {
    /* classes, negation, escapes, repetition bounds, alternatives on new lines, comments */
    kw_grammar *g = gbnf("# a comment\n"
                         "root ::= greet \" \" name{1,3} tail?\n"
                         "greet ::= \"hi\" |\n  \"hello\"\n"
                         "   | \"\\u00e9t\\xe9\"\n"
                         "name ::= [A-Z] [a-z\\-]{0,4}\n"
                         "tail ::= [^\\n.]* \".\"\n");
    KW_CHECK(g != NULL);
    if (!g) return;
    KW_CHECK(gt_accepts(g, "hi Bob", 6));
    KW_CHECK(gt_accepts(g, "hello AnnBo", 11));
    KW_CHECK(gt_accepts(g, "\xc3\xa9t\xc3\xa9 Xx-y yo.", strlen("\xc3\xa9t\xc3\xa9 Xx-y yo.")));
    KW_CHECK(!gt_accepts(g, "hi bob", 6));
    KW_CHECK(!gt_accepts(g, "hi Abcdef", 9));     /* name part over 5 chars -> needs another capital */
    KW_CHECK(!gt_accepts(g, "hi AaAaAaAa", 11));  /* 4 names > {1,3} */
    KW_CHECK(!gt_accepts(g, "hi Bob x\n.", 10));
    kw_grammar_free(g);
    /* a rule body may start on the line after "::=", as in llama.cpp's own grammars */
    g = gbnf("root ::=\n  \"[\" ws (\n    item\n    (\",\" ws item)*\n  )? \"]\"\n"
             "item ::= [a-z]+ ws\nws ::= ([ \\t\\n] ws)?\n");
    KW_CHECK(g != NULL);
    KW_CHECK(g && gt_accepts(g, "[ab, c ,d]", 10));
    KW_CHECK(g && !gt_accepts(g, "[ab,]", 5));
    kw_grammar_free(g);
}

static void test_gbnf_errors(void) {
    struct { const char *src, *want; } cases[] = {
        {"root ::= foo\n", "never defined"},
        {"rot ::= \"a\"\n", "no 'root'"},
        {"root ::= \"a\" <think>\n", "token references"},
        {"root ::= root \"a\" | \"b\"\n", "left recursion"},
        {"root ::= \"a\" root\n", "never complete"},
        {"root ::= [a-\n", "class"},
        {"root ::= \"abc\n", "string literal"},
        {"root ::= (\"a\"\n", "')'"},
        {"root ::= \"\\q\"\n", "escape"},
        {"root ::= \"a\"\nroot ::= \"b\"\n", "defined twice"},
        {NULL, NULL}};
    for (int i = 0; cases[i].src; i++) {
        kw_err e = {{0}};
        kw_grammar *g = kw_grammar_from_gbnf(cases[i].src, strlen(cases[i].src), NULL, &e);
        KW_CHECK_MSG(g == NULL, "should fail: %s", cases[i].src);
        KW_CHECK_MSG(strstr(e.msg, cases[i].want) != NULL, "error '%s' should mention '%s'", e.msg, cases[i].want);
        kw_grammar_free(g);
    }
}

static void test_regex(void) {
    struct { const char *re, *yes, *no; } c[] = {
        {"[a-z]+@[a-z]+\\.com", "bob@site.com", "bob@site.org"},
        {"^(\\d{3})-\\d{4}$", "555-1234", "5551234"},
        {"colou?r|gr[ae]y", "gray", "grey!"},
        {"(?:ab){2,3}c", "ababc", "abc"},
        {"[^\\s,]{2,}", "x\xc3\xa9", "x y"},
        {"\\u00e9+\\x41", "\xc3\xa9\xc3\xa9" "A", "A"},
        {".{3}", "a\xe4\xb8\xad" "b", "ab"},
        {NULL, NULL, NULL}};
    for (int i = 0; c[i].re; i++) {
        kw_err e;
        kw_grammar *g = kw_grammar_from_regex(c[i].re, strlen(c[i].re), NULL, &e);
        KW_CHECK_MSG(g != NULL, "regex %s: %s", c[i].re, g ? "" : e.msg);
        if (!g) continue;
        KW_CHECK_MSG(gt_accepts(g, c[i].yes, strlen(c[i].yes)), "%s should match '%s'", c[i].re, c[i].yes);
        KW_CHECK_MSG(!gt_accepts(g, c[i].no, strlen(c[i].no)), "%s should not match '%s'", c[i].re, c[i].no);
        kw_grammar_free(g);
    }
    const char *bad[][2] = {{"a(?=b)", "lookaround"}, {"(a)\\1", "backreference"}, {"\\bword", "word boundary"},
                            {"\\p{L}+", "Unicode property"}, {"a^b", "'^'"}, {"(ab", "')'"}, {"*a", "quantifier"},
                            {NULL, NULL}};
    for (int i = 0; bad[i][0]; i++) {
        kw_err e = {{0}};
        kw_grammar *g = kw_grammar_from_regex(bad[i][0], strlen(bad[i][0]), NULL, &e);
        KW_CHECK_MSG(g == NULL && strstr(e.msg, bad[i][1]), "regex %s: want error with '%s', got '%s'", bad[i][0],
                     bad[i][1], e.msg);
        kw_grammar_free(g);
    }
}

static void test_mask_strings(void) {
    /* tokens that cross rule ends: "abc\"" ends the string and '",' continues in the caller */
    kw_grammar *g = gbnf("root ::= \"{\" pair (\",\" pair)* \"}\"\n"
                         "pair ::= str \":\" val\n"
                         "str  ::= \"\\\"\" [a-zé]* \"\\\"\"\n"
                         "val  ::= str | \"true\" | [0-9]{1,2}\n");
    KW_CHECK(g != NULL);
    if (!g) return;
    kw_grammar_vocab *v = gt_vocab_small(k_extra, 2);
    check_exact_along(g, v, "{\"abé\":\"x\",\"a\":true,\"b\":12}");
    /* again on the same vocab: the walks of the self-contained "str" rule now come from the vocab's cache */
    check_exact_along(g, v, "{\"abé\":\"x\",\"a\":true,\"b\":12}");
    kw_grammar_vocab_free(v);
    kw_grammar_free(g);
}

static void test_loops(void) {
    /* a counted repetition too big to unroll: a LOOP rule with bounds checked per head */
    kw_grammar *g = gbnf("root ::= \"<\" ( [a-zé] | \"\\\\\" [nt] ){2,7} \">\" [0-9]{0,40}\n");
    KW_CHECK(g != NULL);
    if (!g) return;
    KW_CHECK(gt_accepts(g, "<ab>", 4));
    KW_CHECK(gt_accepts(g, "<a\\nbcdef>1", 11));
    KW_CHECK(!gt_accepts(g, "<a>", 3));
    KW_CHECK(!gt_accepts(g, "<abcdefgh>", 10));
    kw_grammar_vocab *v = gt_vocab_small(k_extra, 1);
    check_exact_along(g, v, "<abé\\nab>12");
    kw_grammar_vocab_free(v);
    kw_grammar_free(g);
    /* a body that is not prefix-free ("a" is a prefix of "ab"): the loop calls it as a rule */
    g = gbnf("root ::= (\"a\" | \"ab\" | \"b(\" [0-9]* \")\"){2,40} \"!\"\n");
    KW_CHECK(g != NULL);
    if (!g) return;
    KW_CHECK(gt_accepts(g, "aab!", 4));
    KW_CHECK(gt_accepts(g, "abb(12)a!", 9));
    KW_CHECK(!gt_accepts(g, "a!", 2));
    KW_CHECK(!gt_accepts(g, "b(1!", 4));
    v = gt_vocab_small(k_extra, 1);
    check_exact_along(g, v, "ab(12)aab!");
    kw_grammar_vocab_free(v);
    kw_grammar_free(g);
}

static void test_rollback_clone_eog(void) {
    kw_grammar *g = gbnf("root ::= \"ab\" | \"abc\"\n");
    kw_grammar_vocab *v = gt_vocab_small(k_extra, 1);
    kw_err e;
    kw_grammar_index *ix = kw_grammar_index_new(g, v, NULL, &e);
    kw_grammar_matcher *m = kw_grammar_matcher_new(g, ix, &e);
    int32_t eog = 256;
    while (kw_grammar_vocab_kind(v, eog) != KW_GTOK_EOG) eog++;
    uint32_t mask[16];
    KW_CHECK(!kw_grammar_can_end(m));
    KW_CHECK_EQ_INT(kw_grammar_accept_token(m, eog, &e), -1);   /* not complete yet */
    KW_CHECK_EQ_INT(kw_grammar_accept_token(m, 'a', &e), 0);
    KW_CHECK_EQ_INT(kw_grammar_accept_token(m, 'b', &e), 0);
    KW_CHECK(kw_grammar_can_end(m));
    KW_CHECK(!kw_grammar_is_complete(m));
    kw_grammar_mask(m, mask, &e);
    KW_CHECK(kw_grammar_mask_test(mask, eog));
    KW_CHECK(kw_grammar_mask_test(mask, 'c'));
    KW_CHECK(!kw_grammar_mask_test(mask, kw_grammar_vocab_size(v) - 1));   /* the special token */
    kw_grammar_matcher *c = kw_grammar_matcher_clone(m);
    KW_CHECK_EQ_INT(kw_grammar_accept_token(c, 'c', &e), 0);
    KW_CHECK(kw_grammar_is_complete(c));
    KW_CHECK_EQ_INT(kw_grammar_mask(c, mask, &e), 1);   /* only EOG */
    KW_CHECK_EQ_INT(kw_grammar_rollback(c, 2), 0);
    KW_CHECK(!kw_grammar_can_end(c));
    KW_CHECK_EQ_INT(kw_grammar_accept_token(c, 'x', &e), -1);
    KW_CHECK_EQ_INT(kw_grammar_accept_token(c, 'b', &e), 0);
    KW_CHECK(kw_grammar_can_end(c));
    KW_CHECK_EQ_INT(kw_grammar_rollback(c, 40), -1);
    KW_CHECK_EQ_INT(kw_grammar_accept_token(m, eog, &e), 0);
    KW_CHECK(kw_grammar_is_complete(m));
    KW_CHECK_EQ_INT(kw_grammar_mask(m, mask, &e), 0);
    float logits[300];
    for (int i = 0; i < 300; i++) logits[i] = 1.0f;
    uint32_t m2[10] = {0};
    m2[0] = 1u << 3;
    kw_grammar_mask_apply(m2, logits, 300);
    KW_CHECK(logits[3] == 1.0f && isinf(logits[4]) && isinf(logits[299]));
    kw_grammar_matcher_free(c);
    kw_grammar_matcher_free(m);
    kw_grammar_index_free(ix);
    kw_grammar_vocab_free(v);
    kw_grammar_free(g);
}

/* Distance after each prefix, then walks under a budget of exactly the
   start distance + 1 tokens: each ends with a sentence of the grammar. */
static void check_distances(const char *src, const char *path, const uint32_t *want) {
    kw_grammar *g = gbnf(src);
    KW_CHECK(g != NULL);
    if (!g) return;
    kw_grammar_vocab *v = gt_vocab_small(k_extra, 1);
    kw_err e;
    kw_grammar_index *ix = kw_grammar_index_new(g, v, NULL, &e);
    kw_grammar_matcher *m = kw_grammar_matcher_new(g, ix, &e);
    size_t n = strlen(path);
    for (size_t i = 0; i <= n; i++) {
        uint32_t d = kw_grammar_distance(m);
        KW_CHECK_MSG(d == want[i], "%s after '%.*s': distance %u, want %u", src, (int)i, path, d, want[i]);
        if (i < n) KW_CHECK_EQ_INT(kw_grammar_accept_bytes(m, path + i, 1, &e), 0);
    }
    int closing_steps = 0;
    for (uint32_t seed = 1; seed <= 20; seed++) {
        char out[256], why[256] = "";
        int nc = 0;
        int rc = gt_budget_walk(g, ix, v, seed, (int)want[0] + 1 + (int)(seed % 4) * 3, out, sizeof out, &nc, why, sizeof why);
        KW_CHECK_MSG(rc == 1, "%s seed %u: %s (rc %d) '%s'", src, seed, why, rc, out);
        KW_CHECK_MSG(rc != 1 || gt_accepts(g, out, strlen(out)), "%s: closed output '%s' not accepted", src, out);
        closing_steps += nc;
    }
    KW_CHECK_MSG(closing_steps > 0, "%s: no walk closed under the budget", src);
    kw_grammar_matcher_free(m);
    kw_grammar_index_free(ix);
    kw_grammar_vocab_free(v);
    kw_grammar_free(g);
}

static void test_closing(void) {
    /* a counted LOOP rule: 2 letters at least, then ">" */
    check_distances("root ::= \"<\" ( [a-z] | \"\\\\\" [nt] ){2,7} \">\" [0-9]*\n", "<a\\nb>1",
                    (const uint32_t[]){4, 3, 2, 2, 1, 1, 0, 0});
    /* a LOOP whose body is not prefix-free: "aa!" */
    check_distances("root ::= (\"a\" | \"ab\" | \"b(\" [0-9]* \")\"){2,40} \"!\"\n", "b(1)a!",
                    (const uint32_t[]){3, 4, 3, 3, 2, 1, 0});
    /* recursion: the open parentheses must be closed */
    check_distances("root ::= \"(\" root \")\" | \"x\" item\nitem ::= \"\" | \"yz\"\n", "((xyz))",
                    (const uint32_t[]){1, 2, 3, 2, 3, 2, 1, 0});
    /* EOG is the one closing token once the output can end */
    kw_grammar *g = gbnf("root ::= \"ab\" [0-9]*\n");
    kw_grammar_vocab *v = gt_vocab_small(k_extra, 1);
    kw_err e;
    kw_grammar_index *ix = kw_grammar_index_new(g, v, NULL, &e);
    kw_grammar_matcher *m = kw_grammar_matcher_new(g, ix, &e);
    uint32_t mask[16];
    KW_CHECK_EQ_INT(kw_grammar_mask_closing(m, mask, &e), 2);   /* "a" and "ab" */
    KW_CHECK(kw_grammar_mask_test(mask, 'a'));
    KW_CHECK(!kw_grammar_mask_test(mask, 'b'));
    KW_CHECK_EQ_INT(kw_grammar_accept_bytes(m, "ab1", 3, &e), 0);
    KW_CHECK_EQ_INT(kw_grammar_mask_closing(m, mask, &e), 1);
    KW_CHECK(!kw_grammar_mask_test(mask, '1'));
    bool closing;
    KW_CHECK(kw_grammar_mask_budget(m, mask, 5, &closing, &e) > 1 && !closing);
    KW_CHECK(kw_grammar_mask_budget(m, mask, 1, &closing, &e) == 1 && closing);
    KW_CHECK(kw_grammar_budget_ok(m, 1));
    kw_grammar_matcher_free(m);
    kw_grammar_index_free(ix);
    kw_grammar_vocab_free(v);
    kw_grammar_free(g);
}

int main(void) {
    test_gbnf_arith();
    test_gbnf_syntax();
    test_gbnf_errors();
    test_regex();
    test_mask_strings();
    test_loops();
    test_rollback_clone_eog();
    test_closing();
    return kw_test_finish();
}
