/* test_textout.c - stop strings across token boundaries never leak; UTF-8
 * is released only whole; the sampler's greedy/seeded/penalty behaviour. */
#include <string.h>
#include "kvwise/sched.h"
#include "testutil.h"

/* Feeds pieces one by one, collecting what gets released; returns whether a stop hit. */
static bool feed(const char *const *stop, int n_stop, const char *const *pieces, int n, char *out) {
    kw_textout t;
    kw_textout_init(&t, stop, n_stop);
    out[0] = 0;
    bool hit = false;
    for (int i = 0; i < n && !hit; i++) {
        size_t rel;
        hit = kw_textout_push(&t, pieces[i], strlen(pieces[i]), &rel);
        strncat(out, t.buf, rel);
        kw_textout_consume(&t, rel);
    }
    if (!hit) { char tail[64]; size_t m = kw_textout_flush(&t, tail, sizeof tail - 1); tail[m] = 0; strcat(out, tail); }
    kw_textout_free(&t);
    return hit;
}

static void test_stop_across_tokens(void) {
    const char *stop[] = {"</end>"};
    const char *pieces[] = {"Hello ", "wor", "ld<", "/e", "nd>", " more"};
    char out[256];
    KW_CHECK(feed(stop, 1, pieces, 6, out));
    KW_CHECK(!strcmp(out, "Hello world"));
}

static void test_partial_prefix_released_when_not_a_stop(void) {
    const char *stop[] = {"STOP"};
    const char *pieces[] = {"a S", "T", "x b"};
    char out[256];
    KW_CHECK(!feed(stop, 1, pieces, 3, out));
    KW_CHECK(!strcmp(out, "a STx b"));
}

static void test_holdback_amount(void) {
    const char *stop[] = {"abc", "xy"};
    kw_textout t;
    kw_textout_init(&t, stop, 2);
    size_t rel;
    KW_CHECK(!kw_textout_push(&t, "hello ab", 8, &rel));
    KW_CHECK_EQ_INT(rel, 6);          /* "ab" could still become "abc" */
    kw_textout_consume(&t, rel);
    KW_CHECK(!kw_textout_push(&t, "d", 1, &rel));
    KW_CHECK_EQ_INT(rel, 3);          /* "abd" cannot */
    kw_textout_consume(&t, rel);
    KW_CHECK(kw_textout_push(&t, "zzxy!", 5, &rel));
    KW_CHECK_EQ_INT(rel, 2);          /* "zz" precedes the stop */
    kw_textout_free(&t);
}

static void test_earliest_stop_wins(void) {
    const char *stop[] = {"late", "ear"};
    const char *pieces[] = {"one ear then late"};
    char out[64];
    KW_CHECK(feed(stop, 2, pieces, 1, out));
    KW_CHECK(!strcmp(out, "one "));
}

static void test_utf8_split(void) {
    /* "é" = C3 A9 split across two tokens, then a 4-byte emoji in three pieces */
    const char *pieces[] = {"caf\xC3", "\xA9 ", "\xF0\x9F", "\x98", "\x80!"};
    kw_textout t;
    kw_textout_init(&t, NULL, 0);
    size_t rel;
    kw_textout_push(&t, pieces[0], strlen(pieces[0]), &rel);
    KW_CHECK_EQ_INT(rel, 3);
    kw_textout_consume(&t, rel);
    kw_textout_push(&t, pieces[1], strlen(pieces[1]), &rel);
    KW_CHECK_EQ_INT(rel, 3);
    kw_textout_consume(&t, rel);
    kw_textout_push(&t, pieces[2], 2, &rel);
    KW_CHECK_EQ_INT(rel, 0);
    kw_textout_push(&t, pieces[3], 1, &rel);
    KW_CHECK_EQ_INT(rel, 0);
    kw_textout_push(&t, pieces[4], 2, &rel);
    KW_CHECK_EQ_INT(rel, 5);
    kw_textout_consume(&t, rel);
    /* a dangling lead byte at the end becomes U+FFFD */
    kw_textout_push(&t, "\xE2\x82", 2, &rel);
    char out[16];
    size_t m = kw_textout_flush(&t, out, sizeof out);
    KW_CHECK_EQ_INT(m, 6);
    KW_CHECK(!memcmp(out, "\xEF\xBF\xBD\xEF\xBF\xBD", 6));
    kw_textout_free(&t);
}

static void test_invalid_utf8_becomes_replacement(void) {
    kw_textout t;
    kw_textout_init(&t, NULL, 0);
    size_t rel;
    kw_textout_push(&t, "ab\xED", 3, &rel);      /* 0xED could still start a 3-byte char */
    KW_CHECK_EQ_INT(rel, 2);
    kw_textout_push(&t, " c", 2, &rel);           /* ...it does not: U+FFFD, like the detokenizer */
    KW_CHECK_EQ_INT(rel, 7);
    KW_CHECK(!memcmp(t.buf, "ab\xEF\xBF\xBD c", 7));
    kw_textout_consume(&t, rel);
    kw_textout_push(&t, "\xED\xA0\x80x", 4, &rel); /* an encoded surrogate is not UTF-8 */
    KW_CHECK_EQ_INT(rel, 10);
    KW_CHECK(!memcmp(t.buf, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBDx", 10));
    kw_textout_consume(&t, rel);
    kw_textout_push(&t, "\xC0\xAF\xF0\x9F\x98\x80", 6, &rel); /* overlong '/' then a valid emoji */
    KW_CHECK_EQ_INT(rel, 10);
    KW_CHECK(!memcmp(t.buf, "\xEF\xBF\xBD\xEF\xBF\xBD\xF0\x9F\x98\x80", 10));
    kw_textout_free(&t);
}

static void test_sampler(void) {
    float logits[8] = {0.1f, 2.0f, 0.5f, 2.0f, -1.0f, 0.0f, 1.9f, 0.3f};
    float tmp[8];
    kw_sampling greedy = {.temperature = 0.0f, .top_p = 1.0f};
    uint64_t rng = 1;
    memcpy(tmp, logits, sizeof tmp);
    KW_CHECK_EQ_INT(kw_sched_sample(tmp, 8, &greedy, NULL, 0, &rng, 0, NULL), 1);   /* first of the tied maxima */
    /* top_k = 2 at any temperature only ever picks ids 1 or 3 */
    kw_sampling k2 = {.temperature = 1.5f, .top_p = 1.0f, .top_k = 2};
    int bad = 0;
    for (int i = 0; i < 200; i++) {
        memcpy(tmp, logits, sizeof tmp);
        int32_t id = kw_sched_sample(tmp, 8, &k2, NULL, 0, &rng, 0, NULL);
        bad += id != 1 && id != 3;
    }
    KW_CHECK_EQ_INT(bad, 0);
    /* no top-k/top-p: the O(vocab) path; min_p = 0.5 keeps only ids 1, 3, 6 (p >= 0.5 p_max) */
    kw_sampling mp = {.temperature = 1.0f, .top_p = 1.0f, .min_p = 0.5f};
    bad = 0;
    int seen6 = 0;
    for (int i = 0; i < 300; i++) {
        memcpy(tmp, logits, sizeof tmp);
        int32_t id = kw_sched_sample(tmp, 8, &mp, NULL, 0, &rng, 0, NULL);
        bad += id != 1 && id != 3 && id != 6;
        seen6 += id == 6;
    }
    KW_CHECK_EQ_INT(bad, 0);
    KW_CHECK(seen6 > 0);          /* p(6) ~ 0.31 of the kept mass: 300 draws all missing it ~ 1e-48 */
    /* top_k above 256 on a larger vocabulary (the sorted path) stays within the top k */
    enum { V = 1000 };
    static float big[V], bt[V];
    for (int i = 0; i < V; i++) big[i] = (float)((i * 7919) % V) / 100.0f;   /* a permutation of 0..9.99 */
    kw_sampling k300 = {.temperature = 2.0f, .top_p = 0.99f, .top_k = 300};
    bad = 0;
    for (int i = 0; i < 100; i++) {
        memcpy(bt, big, sizeof bt);
        int32_t id = kw_sched_sample(bt, V, &k300, NULL, 0, &rng, 0, NULL);
        bad += big[id] < 7.0f;    /* the top 300 of the permutation are the values >= 7.00 */
    }
    KW_CHECK_EQ_INT(bad, 0);
    /* same seed -> same sequence */
    kw_sampling t1 = {.temperature = 1.0f, .top_p = 0.95f};
    uint64_t r1 = 42, r2 = 42;
    int same = 1;
    for (int i = 0; i < 50; i++) {
        float a[8], b[8];
        memcpy(a, logits, sizeof a); memcpy(b, logits, sizeof b);
        same &= kw_sched_sample(a, 8, &t1, NULL, 0, &r1, 0, NULL) == kw_sched_sample(b, 8, &t1, NULL, 0, &r2, 0, NULL);
    }
    KW_CHECK(same);
    /* presence penalty moves greedy off a token already generated */
    kw_sampling pen = {.temperature = 0.0f, .top_p = 1.0f, .presence_penalty = 1.0f};
    int32_t hist[] = {1, 3};
    memcpy(tmp, logits, sizeof tmp);
    KW_CHECK_EQ_INT(kw_sched_sample(tmp, 8, &pen, hist, 2, &rng, 0, NULL), 6);
    /* logprobs: the chosen token's logprob equals the top entry and is <= 0 */
    kw_tok_logprob lp;
    memcpy(tmp, logits, sizeof tmp);
    kw_sched_sample(tmp, 8, &greedy, NULL, 0, &rng, 3, &lp);
    KW_CHECK_EQ_INT(lp.n_top, 3);
    KW_CHECK(lp.logprob <= 0.0f);
    KW_CHECK_NEAR(lp.logprob, lp.top_logprob[0], 1e-6);   /* same number, same computation */
}

int main(void) {
    test_stop_across_tokens();
    test_partial_prefix_released_when_not_a_stop();
    test_holdback_amount();
    test_earliest_stop_wins();
    test_utf8_split();
    test_invalid_utf8_becomes_replacement();
    test_sampler();
    return kw_test_finish();
}
