/* test_ledger.c - ledger.h arithmetic: fixed lines, reservations that fail
 * at the limit and change nothing, release/move, peaks, saturation, the
 * table and the JSON export, and concurrent reserve/release from threads. */
#include "testutil.h"
#include "kvwise/ledger.h"
#include <cjson/cJSON.h>
#include <pthread.h>
#include <string.h>

#define MiB (1024ULL * 1024ULL)
#define GiB (1024ULL * MiB)

static void test_fixed_lines(void) {
    kw_ledger *l = kw_ledger_create(10 * GiB);
    kw_err err = {{0}};
    KW_CHECK_EQ_INT(kw_ledger_limit(l), 10 * GiB);
    KW_CHECK_EQ_INT(kw_ledger_set(l, KW_LEDGER_WEIGHTS, 6 * GiB, &err), 0);
    KW_CHECK_EQ_INT(kw_ledger_set(l, KW_LEDGER_WORKSPACE, 512 * MiB, &err), 0);
    KW_CHECK_EQ_INT(kw_ledger_set(l, KW_LEDGER_OVERHEAD, 100 * MiB, &err), 0);
    KW_CHECK_EQ_INT(kw_ledger_used(l), 6 * GiB + 612 * MiB);
    KW_CHECK_EQ_INT(kw_ledger_available(l), 4 * GiB - 612 * MiB);
    /* re-setting a line replaces it, it does not add */
    KW_CHECK_EQ_INT(kw_ledger_set(l, KW_LEDGER_WORKSPACE, 256 * MiB, &err), 0);
    KW_CHECK_EQ_INT(kw_ledger_used(l), 6 * GiB + 356 * MiB);
    /* too big: fails, says what would work, leaves the ledger unchanged */
    KW_CHECK_EQ_INT(kw_ledger_set(l, KW_LEDGER_WEIGHTS, 10 * GiB, &err), -1);
    KW_CHECK_MSG(strstr(err.msg, "limit of at least 10.35 GiB") != NULL, "%s", err.msg);
    KW_CHECK_EQ_INT(kw_ledger_line(l, KW_LEDGER_WEIGHTS), 6 * GiB);
    KW_CHECK_EQ_INT(kw_ledger_set(l, (kw_ledger_kind)99, 1, &err), -1);
    kw_ledger_snapshot s = kw_ledger_get_snapshot(l);
    KW_CHECK_EQ_INT(s.line_peak[KW_LEDGER_WORKSPACE], 512 * MiB);
    KW_CHECK_EQ_INT(s.peak, 6 * GiB + 612 * MiB);
    kw_ledger_destroy(l);
}

static void test_reservations(void) {
    kw_ledger *l = kw_ledger_create(1000);
    kw_err err;
    KW_CHECK_EQ_INT(kw_ledger_set(l, KW_LEDGER_WEIGHTS, 600, &err), 0);
    KW_CHECK(kw_ledger_fits(l, 400));
    KW_CHECK(!kw_ledger_fits(l, 401));
    KW_CHECK_EQ_INT(kw_ledger_reserve(l, KW_LEDGER_KV_LIVE, 300), 0);
    KW_CHECK_EQ_INT(kw_ledger_reserve(l, KW_LEDGER_KV_LIVE, 101), -1);   /* 1001 > 1000 */
    KW_CHECK_EQ_INT(kw_ledger_line(l, KW_LEDGER_KV_LIVE), 300);         /* unchanged */
    KW_CHECK_EQ_INT(kw_ledger_reserve(l, KW_LEDGER_KV_LIVE, 100), 0);    /* exactly the limit */
    KW_CHECK_EQ_INT(kw_ledger_available(l), 0);
    KW_CHECK_EQ_INT(kw_ledger_reserve(l, KW_LEDGER_SCRATCH, 1), -1);
    /* a request finishes: its 150 bytes of KV go to the prompt cache */
    KW_CHECK_EQ_INT(kw_ledger_move(l, KW_LEDGER_KV_LIVE, KW_LEDGER_KV_CACHED, 150), 0);
    KW_CHECK_EQ_INT(kw_ledger_line(l, KW_LEDGER_KV_LIVE), 250);
    KW_CHECK_EQ_INT(kw_ledger_line(l, KW_LEDGER_KV_CACHED), 150);
    KW_CHECK_EQ_INT(kw_ledger_used(l), 1000);
    KW_CHECK_EQ_INT(kw_ledger_move(l, KW_LEDGER_KV_LIVE, KW_LEDGER_KV_CACHED, 251), -1);
    KW_CHECK_EQ_INT(kw_ledger_line(l, KW_LEDGER_KV_LIVE), 250);
    /* eviction releases cached bytes, then a new request fits */
    KW_CHECK_EQ_INT(kw_ledger_release(l, KW_LEDGER_KV_CACHED, 150), 0);
    KW_CHECK_EQ_INT(kw_ledger_reserve(l, KW_LEDGER_KV_LIVE, 150), 0);
    /* over-release clamps and reports */
    KW_CHECK_EQ_INT(kw_ledger_release(l, KW_LEDGER_KV_LIVE, 10000), -1);
    KW_CHECK_EQ_INT(kw_ledger_line(l, KW_LEDGER_KV_LIVE), 0);
    KW_CHECK_EQ_INT(kw_ledger_used(l), 600);
    /* saturation: a request of ~2^64 bytes never fits by wrapping */
    KW_CHECK_EQ_INT(kw_ledger_reserve(l, KW_LEDGER_KV_LIVE, UINT64_MAX - 100), -1);
    KW_CHECK_EQ_INT(kw_ledger_used(l), 600);
    kw_ledger_snapshot s = kw_ledger_get_snapshot(l);
    KW_CHECK_EQ_INT(s.peak, 1000);
    KW_CHECK_EQ_INT(s.line_peak[KW_LEDGER_KV_LIVE], 400);
    KW_CHECK_EQ_INT(s.reserve_ok, 3);
    KW_CHECK_EQ_INT(s.reserve_failed, 3);
    kw_ledger_destroy(l);

    /* limit 0 = no limit */
    l = kw_ledger_create(0);
    KW_CHECK_EQ_INT(kw_ledger_reserve(l, KW_LEDGER_KV_LIVE, 1ULL << 50), 0);
    KW_CHECK_EQ_INT(kw_ledger_used(l), 1ULL << 50);
    kw_ledger_destroy(l);
}

static void test_table_and_json(void) {
    kw_ledger *l = kw_ledger_create(8 * GiB);
    kw_err err;
    kw_ledger_set(l, KW_LEDGER_WEIGHTS, 4 * GiB, &err);
    kw_ledger_set(l, KW_LEDGER_TOKENIZER, 3 * MiB, &err);
    kw_ledger_reserve(l, KW_LEDGER_KV_LIVE, 1 * GiB);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    kw_footprint m;
    memset(&m, 0, sizeof m);
    m.rss = 5 * GiB;
    m.vm_hwm = 6 * GiB;
    kw_ledger_print(l, &m, f);
    fclose(f);
    KW_CHECK_MSG(strstr(buf, "Memory budget: 8.00 GiB") != NULL, "%s", buf);
    KW_CHECK_MSG(strstr(buf, "4.00 GiB") != NULL && strstr(buf, "50.0%") != NULL, "%s", buf);
    KW_CHECK_MSG(strstr(buf, "left") != NULL && strstr(buf, "3.00 GiB") != NULL, "%s", buf);
    KW_CHECK_MSG(strstr(buf, "VmHWM") != NULL, "%s", buf);
    free(buf);

    char *js = kw_ledger_json(l, &m);
    KW_CHECK(js != NULL);
    cJSON *o = cJSON_Parse(js);
    KW_CHECK(o != NULL);
    KW_CHECK_EQ_INT(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "limit")), 8 * GiB);
    KW_CHECK_EQ_INT(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "used")), 5 * GiB + 3 * MiB);
    KW_CHECK_EQ_INT(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "available")), 3 * GiB - 3 * MiB);
    cJSON *lines = cJSON_GetObjectItem(o, "lines");
    KW_CHECK_EQ_INT(cJSON_GetArraySize(lines), KW_LEDGER_KIND_COUNT);
    KW_CHECK_EQ_INT(cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(lines, "kv_live"), "bytes")), 1 * GiB);
    KW_CHECK_EQ_INT(cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(lines, "tokenizer"), "bytes")), 3 * MiB);
    KW_CHECK_EQ_INT(cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "measured"), "vm_hwm")), 6 * GiB);
    KW_CHECK_EQ_INT(cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "reservations"), "ok")), 1);
    cJSON_Delete(o);
    free(js);
    /* without measurement there is no "measured" member */
    js = kw_ledger_json(l, NULL);
    o = cJSON_Parse(js);
    KW_CHECK(o && cJSON_GetObjectItem(o, "measured") == NULL);
    cJSON_Delete(o);
    free(js);
    KW_CHECK(kw_ledger_baseline_bytes() > 0);
    kw_ledger_destroy(l);
}

/* Threads reserve and release concurrently; the total never passes the
 * limit and everything balances at the end. */
#define N_THREADS 4
#define N_ITERS 20000
static kw_ledger *g_l;
static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < N_ITERS; i++) {
        if (kw_ledger_reserve(g_l, KW_LEDGER_KV_LIVE, 7) == 0) {
            if (kw_ledger_used(g_l) > kw_ledger_limit(g_l)) abort();
            kw_ledger_release(g_l, KW_LEDGER_KV_LIVE, 7);
        }
    }
    return NULL;
}

static void test_threads(void) {
    g_l = kw_ledger_create(20);     /* room for two reservations of 7 at a time */
    pthread_t t[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < N_THREADS; i++) pthread_join(t[i], NULL);
    kw_ledger_snapshot s = kw_ledger_get_snapshot(g_l);
    KW_CHECK_EQ_INT(s.used, 0);
    KW_CHECK(s.peak <= 20);
    KW_CHECK_EQ_INT(s.reserve_ok + s.reserve_failed, (uint64_t)N_THREADS * N_ITERS);
    kw_ledger_destroy(g_l);
}

int main(void) {
    test_fixed_lines();
    test_reservations();
    test_table_and_json();
    test_threads();
    return kw_test_finish();
}
