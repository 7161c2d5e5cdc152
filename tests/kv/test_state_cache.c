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
    KW_CHECK_EQ_INT(kw_state_cache_save(c, t, 10, a), 0);
    KW_CHECK_EQ_INT(kw_state_cache_save(c, t, 25, b), 0);
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
    KW_CHECK_EQ_INT(kw_state_cache_save(c, t, 10, b), 0);         /* same tokens: refreshed, not added */
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
    for (int k = 0; k < 3; k++) KW_CHECK_EQ_INT(kw_state_cache_save(c, t[k], 8, st), 0);
    float got[SB / 4];
    KW_CHECK_EQ_INT(kw_state_cache_restore(c, t[0], 8, got), 0);  /* 0 is used again: 1 is now the oldest */
    KW_CHECK_EQ_INT(kw_state_cache_save(c, t[3], 8, st), 0);      /* the count cap (3) evicts one */
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
        KW_CHECK_EQ_INT(kw_state_cache_save(c, t[k], 8, st), 0);
        s = kw_state_cache_get_stats(c);
        KW_CHECK(s.bytes <= 2 * per && s.entries <= 8);
    }
    KW_CHECK_EQ_INT(kw_state_cache_save(c, t[0], 3 * 1024, st), -1);   /* one entry above the byte cap: kept out */
    kw_state_cache_set_caps(c, 0, 1 << 20);                    /* no entries allowed: all go, nothing is saved */
    KW_CHECK_EQ_INT(kw_state_cache_get_stats(c).entries, 0);
    KW_CHECK_EQ_INT(kw_state_cache_save(c, t[1], 8, st), -1);
    KW_CHECK(kw_state_cache_evict_oldest(c) == false);
    kw_state_cache_destroy(c);
    KW_CHECK(kw_state_cache_create(0, 4, 1024) == NULL);
}

int main(void) {
    test_match_and_restore();
    test_caps_and_lru();
    return kw_test_finish();
}
