/* test_fault.c - test-only fault injection (testctl.h): spec parsing, the
 * once / every / from-N rules, kind filters and arming; then the real
 * failure paths it drives: kw_mem_alloc returns NULL, kw_kv_alloc -1,
 * kw_ledger_reserve -1 with the ledger unchanged, and a KV admission
 * (kw_kvmem_begin) that fails half-way gives back every block and every
 * ledger byte (KW_KVMEM_NOMEM), then admits normally. */
#include "testutil.h"
#include "kvwise/testctl.h"
#include "kvwise/kvmem.h"
#include "kvwise/ledger.h"
#include "kvwise/memory.h"
#include "kvwise/tensor.h"
#include <string.h>

static void test_parse(void) {
    kw_err err = {{0}};
    KW_CHECK(kw_fault_configure("kv_block=3", &err) == 0);
    KW_CHECK(kw_fault_configured());
    KW_CHECK(kw_fault_configure("alloc.workspace=%2,ledger=1+,kv_ensure=4@start,alloc=7", &err) == 0);
    const char *bad[] = {"kv_blok=1", "kv_block=0", "kv_block", "kv_block=%0", "alloc.nothing=1", "ledger=1@later",
                         "ledger=x", "ledger=%3+", "ledger=1,", "a=1,b=2,c=3"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err.msg[0] = 0;
        KW_CHECK_MSG(kw_fault_configure(bad[i], &err) < 0 && strstr(err.msg, "fault spec"), "spec '%s' accepted", bad[i]);
        KW_CHECK(!kw_fault_configured());
    }
    KW_CHECK(kw_fault_configure("", &err) == 0 && !kw_fault_configured());
    KW_CHECK(kw_fault_configure(NULL, &err) == 0 && !kw_fault_configured());
}

/* Which of the next n calls at site fail, as a bit mask (call 1 = bit 0). */
static unsigned pattern(kw_fault_site site, int kind, int n) {
    unsigned m = 0;
    for (int i = 0; i < n; i++) if (kw_fault_hit(site, kind)) m |= 1u << i;
    return m;
}

static void test_rules(void) {
    KW_CHECK(kw_fault_configure("ledger=3", NULL) == 0);
    KW_CHECK_EQ_INT(pattern(KW_FAULT_LEDGER, -1, 8), 0);            /* not armed: nothing counts */
    kw_fault_arm();
    KW_CHECK_EQ_INT(pattern(KW_FAULT_LEDGER, -1, 8), 0x04);         /* the 3rd only */
    KW_CHECK_EQ_INT(pattern(KW_FAULT_KV_BLOCK, -1, 8), 0);          /* other sites untouched */
    KW_CHECK_EQ_INT(kw_fault_injected(), 1);

    KW_CHECK(kw_fault_configure("kv_block=%3@start", NULL) == 0);   /* counts before arming */
    KW_CHECK_EQ_INT(pattern(KW_FAULT_KV_BLOCK, -1, 9), 0x124);      /* 3rd, 6th, 9th */
    KW_CHECK(kw_fault_configure("kv_ensure=4+@start", NULL) == 0);
    KW_CHECK_EQ_INT(pattern(KW_FAULT_KV_ENSURE, -1, 6), 0x38);      /* 4th and later */

    KW_CHECK(kw_fault_configure("alloc.server=1+@start", NULL) == 0);
    KW_CHECK_EQ_INT(pattern(KW_FAULT_ALLOC, KW_MEM_KV, 4), 0);
    KW_CHECK_EQ_INT(pattern(KW_FAULT_ALLOC, KW_MEM_SERVER, 2), 0x3);
    KW_CHECK(kw_mem_alloc(KW_MEM_SERVER, 100) == NULL);             /* the real allocator says no */
    void *p = kw_mem_alloc(KW_MEM_OTHER, 100);
    KW_CHECK(p != NULL);
    kw_mem_free(p);
    KW_CHECK(kw_fault_configure(NULL, NULL) == 0);
}

static kw_kv_layout toy_layout(void) {
    kw_kv_layout lay = {.n_layer = 2, .n_head_kv = 2, .head_dim_k = 32, .head_dim_v = 32,
                        .type = KW_TYPE_F16, .block_tokens = 16};
    return lay;
}

static void test_ledger_refusal(void) {
    kw_ledger *l = kw_ledger_create(1 << 20);
    KW_CHECK(kw_fault_configure("ledger=2@start", NULL) == 0);
    KW_CHECK(kw_ledger_reserve(l, KW_LEDGER_KV_LIVE, 1000) == 0);
    KW_CHECK(kw_ledger_reserve(l, KW_LEDGER_KV_LIVE, 1000) < 0);    /* injected: refused, nothing changed */
    KW_CHECK_EQ_INT(kw_ledger_line(l, KW_LEDGER_KV_LIVE), 1000);
    KW_CHECK_EQ_INT(kw_ledger_get_snapshot(l).reserve_failed, 1);
    KW_CHECK(kw_ledger_reserve(l, KW_LEDGER_KV_LIVE, 1000) == 0);
    KW_CHECK_EQ_INT(kw_ledger_line(l, KW_LEDGER_KV_LIVE), 2000);
    kw_fault_configure(NULL, NULL);
    kw_ledger_destroy(l);
}

/* An admission whose 2nd block (or ledger reservation) fails hands
 * everything back; the next admission of the same prompt works. */
static void test_kvmem_nomem(const char *spec) {
    kw_kv_layout lay = toy_layout();
    kw_err err = {{0}};
    kw_kv_pool *pool = kw_kv_pool_create(&lay, 16, &err);
    kw_ledger *l = kw_ledger_create(64u << 20);
    kw_kvmem_opts o = {.n_slots = 2, .n_ctx = 128, .cache_max_seqs = 4, .cache_max_bytes = 1u << 20, .ledger = l};
    kw_kvmem *m = pool && l ? kw_kvmem_create(pool, &o, &err) : NULL;
    KW_CHECK_MSG(m != NULL, "%s", err.msg);
    if (!m) { kw_kv_pool_destroy(pool); kw_ledger_destroy(l); return; }
    int32_t prompt[40];
    for (int i = 0; i < 40; i++) prompt[i] = i + 1;
    KW_CHECK(kw_fault_configure(spec, NULL) == 0);
    kw_fault_arm();
    KW_CHECK_MSG(kw_kvmem_begin(m, 0, prompt, 40, 60) == KW_KVMEM_NOMEM, "spec %s", spec);
    kw_kvmem_stats st = kw_kvmem_get_stats(m);
    KW_CHECK_EQ_INT(st.free_blocks, 16);                            /* every block back in the pool */
    KW_CHECK_EQ_INT(st.live_seqs, 0);
    KW_CHECK_EQ_INT(kw_ledger_line(l, KW_LEDGER_KV_LIVE), 0);       /* and every byte back on the ledger */
    KW_CHECK_EQ_INT(kw_kvmem_begin(m, 0, prompt, 40, 60), 0);       /* the retry is admitted */
    KW_CHECK_EQ_INT(kw_kvmem_get_stats(m).free_blocks, 16 - 4);     /* 60 positions = 4 blocks of 16 */
    KW_CHECK_EQ_INT(kw_ledger_line(l, KW_LEDGER_KV_LIVE), 4 * pool->block_bytes);
    kw_kvmem_end(m, 0, prompt, 40, false);
    KW_CHECK_EQ_INT(kw_kvmem_get_stats(m).free_blocks, 16);
    KW_CHECK_EQ_INT(kw_ledger_line(l, KW_LEDGER_KV_LIVE), 0);
    kw_fault_configure(NULL, NULL);
    kw_kvmem_destroy(m);
    kw_kv_pool_destroy(pool);
    kw_ledger_destroy(l);
}

int main(void) {
    test_parse();
    test_rules();
    test_ledger_refusal();
    test_kvmem_nomem("kv_block=2");
    test_kvmem_nomem("ledger=1");
    return kw_test_finish();
}
