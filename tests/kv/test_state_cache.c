/* test_state_cache.c - saved recurrent states (state_cache.h): found only by
 * a prompt that starts with exactly their tokens, the longest one within a
 * bound, restored byte for byte, both caps held at every save with the
 * least recently used entry evicted first, and the accounted bytes. */
#include "testutil.h"
#include "kvwise/memory.h"
#include "kvwise/state_cache.h"
#include <string.h>

#define SB 256   /* bytes of one state */

static void fill_state(float *s, float v) {
    for (int i = 0; i < SB / 4; i++) s[i] = v + (float)i;
}

static void test_match_and_restore(void) {
    kw_state_cache *c = kw_state_cache_create(SB, 8, 1 << 20);
    KW_CHECK(c != NULL);
    int32_t t[40];
    for (int i = 0; i < 40; i++) t[i] = 100 + i;
    float a[SB / 4], b[SB / 4], got[SB / 4];
    fill_state(a, 1.0f);
    fill_state(b, 2.0f);
    uint64_t kv0 = kw_mem_current(KW_MEM_KV);
    KW_CHECK_EQ_INT(kw_state_cache_save(c, t, 10, a, false), 0);
    KW_CHECK_EQ_INT(kw_state_cache_save(c, t, 25, b, false), 0);
    KW_CHECK_EQ_INT(kw_mem_current(KW_MEM_KV) - kv0, 2 * SB);    /* the states are accounted memory */
    kw_state_cache_stats s = kw_state_cache_get_stats(c);
    KW_CHECK_EQ_INT(s.entries, 2);
    KW_CHECK_EQ_INT(s.bytes, 2 * SB + 35 * 4);                   /* states + token copies */
    KW_CHECK_EQ_INT(s.longest, 25);
    KW_CHECK_EQ_INT(kw_state_cache_longest(c, t, 40), 25);
    KW_CHECK_EQ_INT(kw_state_cache_longest(c, t, 24), 10);      /* within the bound */
    KW_CHECK_EQ_INT(kw_state_cache_longest(c, t, 9), 0);
    int32_t other[40];
    memcpy(other, t, sizeof other);
    other[12] = 7;                                              /* branches at 12: only the 10-token entry is a prefix */
    KW_CHECK_EQ_INT(kw_state_cache_longest(c, other, 40), 10);
    other[3] = 7;
    KW_CHECK_EQ_INT(kw_state_cache_longest(c, other, 40), 0);
    KW_CHECK_EQ_INT(kw_state_cache_restore(c, t, 25, got), 0);
    KW_CHECK(memcmp(got, b, SB) == 0);
    KW_CHECK_EQ_INT(kw_state_cache_restore(c, t, 24, got), -1); /* no entry at exactly 24 */
    KW_CHECK_EQ_INT(kw_state_cache_restore(c, other, 10, got), -1);
    KW_CHECK_EQ_INT(kw_state_cache_save(c, t, 10, b, false), 0);         /* same tokens: refreshed, not added */
    s = kw_state_cache_get_stats(c);
    KW_CHECK_EQ_INT(s.entries, 2);
    KW_CHECK_EQ_INT(kw_state_cache_restore(c, t, 10, got), 0);
    KW_CHECK(memcmp(got, b, SB) == 0);
    KW_CHECK_EQ_INT(s.hits, 1);
    kw_state_cache_destroy(c);
    KW_CHECK_EQ_INT(kw_mem_current(KW_MEM_KV), kv0);
}

static void test_caps_and_lru(void) {
    uint64_t per = SB + 8 * 4;                                  /* an entry of 8 tokens */
    kw_state_cache *c = kw_state_cache_create(SB, 3, 10 * per);
    int32_t t[8][8];
    float st[SB / 4];
    fill_state(st, 0.0f);
    for (int k = 0; k < 8; k++)
        for (int i = 0; i < 8; i++) t[k][i] = k * 1000 + i;
    for (int k = 0; k < 3; k++) KW_CHECK_EQ_INT(kw_state_cache_save(c, t[k], 8, st, false), 0);
    float got[SB / 4];
    KW_CHECK_EQ_INT(kw_state_cache_restore(c, t[0], 8, got), 0);  /* 0 is used again: 1 is now the oldest */
    KW_CHECK_EQ_INT(kw_state_cache_save(c, t[3], 8, st, false), 0);      /* the count cap (3) evicts one */
    kw_state_cache_stats s = kw_state_cache_get_stats(c);
    KW_CHECK_EQ_INT(s.entries, 3);
    KW_CHECK_EQ_INT(s.evicted, 1);
    KW_CHECK_EQ_INT(kw_state_cache_longest(c, t[1], 8), 0);
    KW_CHECK_EQ_INT(kw_state_cache_longest(c, t[0], 8), 8);
    kw_state_cache_set_caps(c, 8, 2 * per);                     /* a lower byte cap evicts at once, LRU first */
    s = kw_state_cache_get_stats(c);
    KW_CHECK_EQ_INT(s.entries, 2);
    KW_CHECK(s.bytes <= 2 * per);
    KW_CHECK_EQ_INT(kw_state_cache_longest(c, t[2], 8), 0);
    for (int k = 4; k < 8; k++) {                               /* every save keeps both caps */
        KW_CHECK_EQ_INT(kw_state_cache_save(c, t[k], 8, st, false), 0);
        s = kw_state_cache_get_stats(c);
        KW_CHECK(s.bytes <= 2 * per && s.entries <= 8);
    }
    KW_CHECK_EQ_INT(kw_state_cache_save(c, t[0], 3 * 1024, st, false), -1);   /* one entry above the byte cap: kept out */
    kw_state_cache_set_caps(c, 0, 1 << 20);                    /* no entries allowed: all go, nothing is saved */
    KW_CHECK_EQ_INT(kw_state_cache_get_stats(c).entries, 0);
    KW_CHECK_EQ_INT(kw_state_cache_save(c, t[1], 8, st, false), -1);
    KW_CHECK(kw_state_cache_evict_oldest(c) == false);
    kw_state_cache_destroy(c);
    KW_CHECK(kw_state_cache_create(0, 4, 1024) == NULL);
}

/* Interval marks of a prompt whose end was saved go first: two conversations
 * of 3 entries each (mark at 8, prompt end at 16, sequence end at 20) in a
 * cache of 4 keep both ends of both; a restore makes a superseded mark
 * current again; a mark nothing extends stays in LRU order. */
static void test_superseded_marks_go_first(void) {
    kw_state_cache *c = kw_state_cache_create(SB, 4, 1 << 20);
    int32_t a[20], b[20], d[4] = {900, 901, 902, 903};
    float st[SB / 4], got[SB / 4];
    fill_state(st, 0.0f);
    for (int i = 0; i < 20; i++) { a[i] = 100 + i; b[i] = 500 + i; }
    KW_CHECK_EQ_INT(kw_state_cache_save(c, a, 8, st, true), 0);
    KW_CHECK_EQ_INT(kw_state_cache_save(c, a, 16, st, false), 0);
    KW_CHECK_EQ_INT(kw_state_cache_save(c, a, 20, st, false), 0);
    KW_CHECK_EQ_INT(kw_state_cache_save(c, b, 8, st, true), 0);
    KW_CHECK_EQ_INT(kw_state_cache_save(c, b, 16, st, false), 0);   /* evicts a's mark, not a's prompt end */
    KW_CHECK_EQ_INT(kw_state_cache_longest(c, a, 15), 0);
    KW_CHECK_EQ_INT(kw_state_cache_longest(c, a, 16), 16);
    KW_CHECK_EQ_INT(kw_state_cache_save(c, b, 20, st, false), 0);   /* evicts b's mark */
    KW_CHECK_EQ_INT(kw_state_cache_longest(c, b, 15), 0);
    KW_CHECK_EQ_INT(kw_state_cache_longest(c, a, 20), 20);
    KW_CHECK_EQ_INT(kw_state_cache_longest(c, b, 20), 20);
    KW_CHECK_EQ_INT(kw_state_cache_get_stats(c).evicted, 2);
    kw_state_cache_set_caps(c, 8, 1 << 20);
    KW_CHECK_EQ_INT(kw_state_cache_save(c, a, 8, st, true), 0);
    KW_CHECK_EQ_INT(kw_state_cache_save(c, a, 12, st, true), 0);    /* supersedes the mark at 8 */
    KW_CHECK_EQ_INT(kw_state_cache_restore(c, a, 8, got), 0);       /* ...which a branch at 8..11 now uses */
    KW_CHECK_EQ_INT(kw_state_cache_save(c, d, 4, st, true), 0);     /* a mark that nothing extends */
    kw_state_cache_set_caps(c, 6, 1 << 20);                         /* one goes: a's 12 (superseded by 16, 20) */
    KW_CHECK_EQ_INT(kw_state_cache_longest(c, a, 15), 8);
    KW_CHECK_EQ_INT(kw_state_cache_longest(c, d, 4), 4);
    kw_state_cache_set_caps(c, 5, 1 << 20);                         /* then plain LRU: a's 16 is the oldest */
    KW_CHECK_EQ_INT(kw_state_cache_longest(c, a, 16), 8);
    KW_CHECK_EQ_INT(kw_state_cache_longest(c, a, 20), 20);
    kw_state_cache_destroy(c);
}

int main(void) {
    test_match_and_restore();
    test_caps_and_lru();
    test_superseded_marks_go_first();
    return kw_test_finish();
}
