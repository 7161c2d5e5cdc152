/* test_textout.c - stop strings across token boundaries never leak; UTF-8
 * is released only whole. (The sampler's tests: tests/sample/test_sampler.c.) */
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

int main(void) {
    test_stop_across_tokens();
    test_partial_prefix_released_when_not_a_stop();
    test_holdback_amount();
    test_earliest_stop_wins();
    test_utf8_split();
    test_invalid_utf8_becomes_replacement();
    return kw_test_finish();
}
