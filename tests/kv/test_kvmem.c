/* test_kvmem.c - unit tests of the KV admission layer (kvmem.h): prefix
 * reuse through begin/end, reservation of prompt + max_tokens, eviction of
 * cache leaves under pool pressure, wait vs never, the ledger's KV lines
 * following the pool (and the ledger as a second wall), and the outward
 * views (log line, JSON, Prometheus text). */
#include "testutil.h"
#include "kvwise/kvmem.h"
#include "kvwise/ledger.h"
#include <cjson/cJSON.h>
#include <string.h>

#define BT 4

static kw_kv_pool *make_pool(int32_t n_blocks) {
    kw_kv_layout lay = {.n_layer = 2, .n_head_kv = 1, .head_dim_k = 4, .head_dim_v = 4,
                        .type = 0 /* f32 */, .block_tokens = BT};
    kw_err err;
    kw_kv_pool *p = kw_kv_pool_create(&lay, n_blocks, &err);
    if (!p) { fprintf(stderr, "pool: %s\n", err.msg); exit(1); }
    return p;
}

static void fill(int32_t *t, int32_t n, int32_t start) {
    for (int32_t i = 0; i < n; i++) t[i] = start + i;
}

static void test_reuse_and_reserve(void) {
    kw_kv_pool *p = make_pool(16);
    kw_ledger *led = kw_ledger_create(0);
    kw_kvmem_opts o = {.n_slots = 2, .n_ctx = 64, .cache_max_seqs = 4, .cache_max_bytes = 1u << 30, .ledger = led};
    kw_err err;
    kw_kvmem *m = kw_kvmem_create(p, &o, &err);
    KW_CHECK(m != NULL);
    int32_t t[30]; fill(t, 30, 10);
    const uint64_t bb = p->block_bytes;
    /* turn 1: 10 prompt tokens + up to 8 generated: 18 positions = 5 blocks reserved */
    KW_CHECK_EQ_INT(kw_kvmem_begin(m, 0, t, 10, 18), 0);
    KW_CHECK_EQ_INT(kw_kvmem_table(m, 0)->n, 5);
    KW_CHECK_EQ_INT(p->n_free, 11);
    KW_CHECK_EQ_INT(kw_ledger_line(led, KW_LEDGER_KV_LIVE), 5 * bb);
    KW_CHECK_EQ_INT(kw_kvmem_ensure(m, 0, 18), 0);          /* inside the reservation */
    KW_CHECK_EQ_INT(p->n_free, 11);
    kw_kvmem_end(m, 0, t, 15, true);                         /* 15 tokens done: 4 blocks cached */
    KW_CHECK_EQ_INT(p->n_free, 12);
    KW_CHECK_EQ_INT(kw_ledger_line(led, KW_LEDGER_KV_LIVE), 0);
    KW_CHECK_EQ_INT(kw_ledger_line(led, KW_LEDGER_KV_CACHED), 4 * bb);
    /* turn 2 extends turn 1: 15 tokens come from the cache */
    KW_CHECK_EQ_INT(kw_kvmem_begin(m, 1, t, 25, 30), 15);
    kw_kvmem_stats s = kw_kvmem_get_stats(m);
    KW_CHECK_EQ_INT(s.adm.cached_tokens_served, 15);
    KW_CHECK_EQ_INT(s.live_seqs, 1);
    KW_CHECK_EQ_INT(kw_kvmem_table(m, 1)->n, 8);
    /* 3 shared full blocks + a private copy of the 4th + 4 fresh = 8 live, 1 cached-only */
    KW_CHECK_EQ_INT(s.live_blocks, 8);
    KW_CHECK_EQ_INT(s.cached_only_blocks, 1);
    KW_CHECK_EQ_INT(kw_ledger_line(led, KW_LEDGER_KV_LIVE) + kw_ledger_line(led, KW_LEDGER_KV_CACHED),
                    (uint64_t)(16 - p->n_free) * bb);
    kw_kvmem_end(m, 1, t, 30, true);
    s = kw_kvmem_get_stats(m);
    KW_CHECK_EQ_INT(s.cache.n_seqs, 1);                      /* the conversation is one sequence */
    KW_CHECK_EQ_INT(s.cache.tokens, 30);
    KW_CHECK_EQ_INT(s.live_blocks, 0);

    char line[128];
    kw_kvmem_cache_line(m, line, sizeof line);
    KW_CHECK_MSG(strstr(line, "Prompt cache: 1 seq, ") == line, "%s", line);
    KW_CHECK_MSG(strstr(line, "latest 30 tokens, hit rate 50%") != NULL, "%s", line);

    kw_kvmem_destroy(m);
    KW_CHECK_EQ_INT(p->n_free, 16);
    KW_CHECK_EQ_INT(kw_ledger_line(led, KW_LEDGER_KV_LIVE), 0);
    KW_CHECK_EQ_INT(kw_ledger_line(led, KW_LEDGER_KV_CACHED), 0);
    kw_ledger_destroy(led);
    kw_kv_pool_destroy(p);
}

static void test_pressure_wait_never(void) {
    kw_kv_pool *p = make_pool(16);                           /* 64 positions in all */
    kw_kvmem_opts o = {.n_slots = 2, .n_ctx = 128, .cache_max_seqs = 8, .cache_max_bytes = 1u << 30};
    kw_kvmem *m = kw_kvmem_create(p, &o, NULL);
    int32_t a[40], b[40]; fill(a, 40, 100); fill(b, 40, 5000);
    /* two finished requests fill 10 blocks of cache */
    KW_CHECK_EQ_INT(kw_kvmem_begin(m, 0, a, 20, 20), 0);
    kw_kvmem_end(m, 0, a, 20, true);
    KW_CHECK_EQ_INT(kw_kvmem_begin(m, 0, b, 20, 20), 0);
    kw_kvmem_end(m, 0, b, 20, true);
    KW_CHECK_EQ_INT(p->n_free, 6);
    /* a request needing 12 blocks: the cache gives way (LRU: `a` first) */
    int32_t c[48]; fill(c, 48, 9000);
    KW_CHECK_EQ_INT(kw_kvmem_begin(m, 0, c, 30, 48), 0);
    kw_kvmem_stats s = kw_kvmem_get_stats(m);
    KW_CHECK_EQ_INT(s.cache.n_seqs, 1);
    KW_CHECK(s.adm.evicted_for_admission >= 5);
    /* a second one cannot fit beside it now: wait (not never) */
    int32_t cached_before = kw_kvmem_get_stats(m).cache.n_blocks;
    KW_CHECK_EQ_INT(kw_kvmem_begin(m, 1, b, 20, 40), KW_KVMEM_WAIT);
    KW_CHECK_EQ_INT(kw_kvmem_table(m, 1)->n, 0);             /* nothing held while waiting */
    /* evicting could not have made room: the cache was left alone */
    KW_CHECK_EQ_INT(kw_kvmem_get_stats(m).cache.n_blocks, cached_before);
    kw_kvmem_end(m, 0, c, 30, false);                        /* cancelled: not cached */
    /* `a` went whole, `b` only lost its last block (LRU, one block at a time) */
    KW_CHECK_EQ_INT(kw_kvmem_begin(m, 1, b, 20, 40), 16);
    kw_kvmem_end(m, 1, b, 20, true);
    /* longer than the whole pool or than the context: never */
    KW_CHECK_EQ_INT(kw_kvmem_max_positions(m), 64);
    KW_CHECK_EQ_INT(kw_kvmem_begin(m, 0, a, 20, 65), KW_KVMEM_NEVER);
    KW_CHECK(!kw_kvmem_could_ever_fit(m, 65));
    KW_CHECK(kw_kvmem_could_ever_fit(m, 64));
    KW_CHECK_EQ_INT(kw_kvmem_begin(m, 0, a, 20, 64), 0);     /* the whole pool: all cache evicted */
    KW_CHECK_EQ_INT(p->n_free, 0);
    kw_kvmem_end(m, 0, a, 64, false);
    s = kw_kvmem_get_stats(m);
    KW_CHECK_EQ_INT(s.adm.never, 1);
    KW_CHECK_EQ_INT(s.adm.waited, 1);
    /* bad input */
    KW_CHECK_EQ_INT(kw_kvmem_begin(m, 7, a, 20, 20), KW_KVMEM_NEVER);
    KW_CHECK_EQ_INT(kw_kvmem_begin(m, 0, NULL, 20, 20), KW_KVMEM_NEVER);
    KW_CHECK_EQ_INT(kw_kvmem_ensure(m, -1, 4), -1);
    kw_kvmem_end(m, 9, a, 4, true);
    kw_kvmem_destroy(m);
    KW_CHECK_EQ_INT(p->n_free, 16);
    kw_kv_pool_destroy(p);
}

/* The ledger is a wall of its own: a pool larger than the budget still
 * cannot take the process past the limit. */
static void test_ledger_wall(void) {
    kw_kv_pool *p = make_pool(32);
    const uint64_t bb = p->block_bytes;
    kw_ledger *led = kw_ledger_create(10 * bb);
    KW_CHECK(kw_ledger_set(led, KW_LEDGER_WEIGHTS, 4 * bb, NULL) == 0);   /* 6 blocks left for KV */
    kw_kvmem_opts o = {.n_slots = 2, .n_ctx = 128, .cache_max_seqs = 8, .cache_max_bytes = 1u << 30, .ledger = led};
    kw_kvmem *m = kw_kvmem_create(p, &o, NULL);
    int32_t a[40]; fill(a, 40, 1);
    KW_CHECK(!kw_kvmem_could_ever_fit(m, 25));
    KW_CHECK_EQ_INT(kw_kvmem_begin(m, 0, a, 10, 25), KW_KVMEM_NEVER);
    KW_CHECK_EQ_INT(kw_kvmem_begin(m, 0, a, 10, 16), 0);     /* 4 blocks */
    KW_CHECK_EQ_INT(kw_kvmem_begin(m, 1, a + 20, 10, 12), KW_KVMEM_WAIT);   /* 3 more: over budget */
    KW_CHECK(p->n_free >= 3);                                /* the pool alone would have said yes */
    KW_CHECK(kw_ledger_used(led) <= kw_ledger_limit(led));
    kw_kvmem_end(m, 0, a, 16, true);                         /* 4 blocks now cached-only */
    KW_CHECK_EQ_INT(kw_kvmem_begin(m, 1, a + 20, 10, 12), 0);/* the cache gives way to the budget */
    KW_CHECK(kw_ledger_used(led) <= kw_ledger_limit(led));
    kw_ledger_snapshot sn = kw_ledger_get_snapshot(led);
    KW_CHECK(sn.peak <= 10 * bb);
    kw_kvmem_end(m, 1, a + 20, 12, false);

    cJSON *j = cJSON_CreateObject();
    kw_kvmem_add_json(m, j);
    cJSON *pc = cJSON_GetObjectItem(j, "prompt_cache");
    KW_CHECK(pc && cJSON_IsNumber(cJSON_GetObjectItem(pc, "max_sequences")));
    KW_CHECK(pc && cJSON_GetObjectItem(pc, "max_sequences")->valuedouble == 8);
    KW_CHECK(cJSON_GetObjectItem(j, "kv_pool") != NULL);
    cJSON_Delete(j);
    char *txt = NULL; size_t len = 0;
    KW_CHECK(kw_kvmem_metrics(m, &txt, &len) == 0);
    KW_CHECK(txt && strstr(txt, "\nkvwise_prompt_cache_bytes ") != NULL);
    KW_CHECK(txt && strstr(txt, "# TYPE kvwise_prompt_cache_hits_total counter") != NULL);
    KW_CHECK(txt && strlen(txt) == len);
    free(txt);
    kw_kvmem_destroy(m);
    KW_CHECK_EQ_INT(kw_ledger_used(led), 4 * bb);
    kw_ledger_destroy(led);
    kw_kv_pool_destroy(p);
}

/* A recurrent model's kvmem: a cached prefix is reused only as far as a
 * checkpoint reaches (and that state is handed back), the checkpoints'
 * bytes plus the cached KV never pass the byte cap, and they have their own
 * ledger line. */
static void test_checkpoints(void) {
    enum { SBYTES = 1024 };
    kw_kv_pool *p = make_pool(32);
    kw_ledger *led = kw_ledger_create(0);
    const uint64_t bb = p->block_bytes;
    uint64_t cap = 8 * bb + 4 * (SBYTES + 40 * 4);          /* half of it holds two checkpoints */
    kw_kvmem_opts o = {.n_slots = 2, .n_ctx = 64, .cache_max_seqs = 4, .cache_max_bytes = cap, .ledger = led,
                       .state_bytes = SBYTES, .checkpoint_interval = 8};
    kw_err err;
    kw_kvmem *m = kw_kvmem_create(p, &o, &err);
    KW_CHECK(m != NULL);
    KW_CHECK_EQ_INT(kw_kvmem_checkpoint_interval(m), 8);
    int32_t t[40]; fill(t, 40, 10);
    float st[SBYTES / 4], got[SBYTES / 4];
    for (int i = 0; i < SBYTES / 4; i++) st[i] = (float)i;
    int32_t kvp = -1;
    KW_CHECK_EQ_INT(kw_kvmem_begin_state(m, 0, t, 20, 24, got, &kvp), 0);
    KW_CHECK_EQ_INT(kvp, 0);
    kw_kvmem_end(m, 0, t, 24, true);                          /* KV cached for 24 tokens, no checkpoint yet */
    KW_CHECK_EQ_INT(kw_kvmem_cached_prefix(m, t, 30), 0);     /* KV alone is not enough */
    KW_CHECK_EQ_INT(kw_kvmem_begin_state(m, 0, t, 30, 34, got, &kvp), 0);
    KW_CHECK_EQ_INT(kvp, 24);                                 /* where it left what is cached */
    kw_kvmem_checkpoint(m, t, 12, st, false);
    kw_kvmem_checkpoint(m, t, 24, st, false);
    KW_CHECK_EQ_INT(kw_ledger_line(led, KW_LEDGER_REC_CHECKPOINTS), 2 * SBYTES + 36 * 4);
    kw_kvmem_end(m, 0, t, 30, true);
    KW_CHECK_EQ_INT(kw_kvmem_cached_prefix(m, t, 30), 24);
    KW_CHECK_EQ_INT(kw_kvmem_cached_prefix(m, t, 20), 12);    /* the nearest checkpoint at or before 19 */
    int32_t b[40]; fill(b, 40, 10);
    b[17] = 5;                                                /* branches at 17: resumes from 12 */
    memset(got, 0, sizeof got);
    KW_CHECK_EQ_INT(kw_kvmem_begin_state(m, 1, b, 30, 34, got, &kvp), 12);
    KW_CHECK_EQ_INT(kvp, 17);
    KW_CHECK(memcmp(got, st, SBYTES) == 0);
    KW_CHECK_EQ_INT(kw_kvmem_begin_state(m, 0, t, 30, 34, NULL, NULL), 0);   /* no state to restore into: no reuse */
    kw_kvmem_end(m, 0, t, 0, false);
    kw_kvmem_end(m, 1, b, 0, false);
    /* many checkpoints: KV + checkpoint bytes stay within the cap at every insert */
    for (int k = 0; k < 12; k++) {
        int32_t u[24]; fill(u, 24, 1000 * (k + 1));
        KW_CHECK(kw_kvmem_begin_state(m, 0, u, 20, 24, got, NULL) >= 0);
        kw_kvmem_checkpoint(m, u, 20, st, false);
        kw_kvmem_end(m, 0, u, 24, true);
        kw_kvmem_stats s = kw_kvmem_get_stats(m);
        KW_CHECK_MSG(s.cache.bytes + s.checkpoints.bytes <= cap, "insert %d: KV %llu + checkpoints %llu > %llu", k,
                     (unsigned long long)s.cache.bytes, (unsigned long long)s.checkpoints.bytes, (unsigned long long)cap);
        KW_CHECK(s.checkpoints.bytes <= cap / 2 && s.checkpoints.entries <= 4 * KW_KVMEM_CHECKPOINTS_PER_SEQ);
        KW_CHECK_EQ_INT(s.cache.max_bytes, cap);              /* the cap in force is reported as set */
        KW_CHECK_EQ_INT(kw_ledger_line(led, KW_LEDGER_REC_CHECKPOINTS), s.checkpoints.bytes);
    }
    cJSON *j = cJSON_CreateObject();
    kw_kvmem_add_json(m, j);
    const cJSON *ck = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "prompt_cache"), "checkpoints");
    KW_CHECK(ck && cJSON_GetObjectItem(ck, "entries") && cJSON_GetObjectItem(ck, "interval")->valueint == 8);
    cJSON_Delete(j);
    kw_kvmem_set_cache_caps(m, 0, 0);                          /* cache off: checkpoints go too */
    KW_CHECK_EQ_INT(kw_kvmem_get_stats(m).checkpoints.entries, 0);
    KW_CHECK_EQ_INT(kw_ledger_line(led, KW_LEDGER_REC_CHECKPOINTS), 0);
    kw_kvmem_checkpoint(m, t, 12, st, false);
    KW_CHECK_EQ_INT(kw_kvmem_get_stats(m).checkpoints.entries, 0);
    kw_kvmem_destroy(m);
    KW_CHECK_EQ_INT(kw_ledger_used(led), 0);
    kw_ledger_destroy(led);
    kw_kv_pool_destroy(p);
}

/* Checkpoints are cache: under a tight budget a running sequence's KV takes
 * their bytes. Two checkpoints of 3 blocks' bytes each in a 10-block budget
 * leave 4 blocks; a request for 6 blocks is admitted (it could fit once they
 * go, so it is not "never"), the oldest checkpoint going first. */
static void test_checkpoints_yield_to_live(void) {
    kw_kv_pool *p = make_pool(32);
    const uint64_t bb = p->block_bytes;
    kw_ledger *led = kw_ledger_create(10 * bb);
    const size_t sbytes = (size_t)(3 * bb);
    kw_kvmem_opts o = {.n_slots = 2, .n_ctx = 256, .cache_max_seqs = 4, .cache_max_bytes = 40 * bb, .ledger = led,
                       .state_bytes = sbytes, .checkpoint_interval = 0};
    kw_err err;
    kw_kvmem *m = kw_kvmem_create(p, &o, &err);
    KW_CHECK(m != NULL);
    float *st = calloc(1, sbytes), *got = calloc(1, sbytes);
    int32_t a[8], b[8], c[256];
    fill(a, 8, 100); fill(b, 8, 200); fill(c, 256, 300);
    kw_kvmem_checkpoint(m, a, 8, st, false);
    kw_kvmem_checkpoint(m, b, 8, st, false);
    KW_CHECK_EQ_INT(kw_kvmem_get_stats(m).checkpoints.entries, 2);
    int32_t bt = p->lay.block_tokens, n = 6 * bt;
    KW_CHECK(kw_kvmem_could_ever_fit(m, n));
    KW_CHECK_EQ_INT(kw_kvmem_begin_state(m, 0, c, n, n, got, NULL), 0);
    kw_kvmem_stats s = kw_kvmem_get_stats(m);
    KW_CHECK_EQ_INT(s.checkpoints.entries, 1);
    KW_CHECK_EQ_INT(s.checkpoints.evicted, 1);
    KW_CHECK(kw_ledger_used(led) <= 10 * bb);
    KW_CHECK_EQ_INT(kw_ledger_line(led, KW_LEDGER_REC_CHECKPOINTS), s.checkpoints.bytes);
    kw_kvmem_end(m, 0, c, 0, false);
    kw_kvmem_destroy(m);
    free(st);
    free(got);
    KW_CHECK_EQ_INT(kw_ledger_used(led), 0);
    kw_ledger_destroy(led);
    kw_kv_pool_destroy(p);
}

int main(void) {
    test_reuse_and_reserve();
    test_checkpoints();
    test_checkpoints_yield_to_live();
    test_pressure_wait_never();
    test_ledger_wall();
    return kw_test_finish();
}
