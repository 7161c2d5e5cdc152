/* test_memview.c - the /v1/memory JSON and /metrics text (memview.h): every
 * section present, figures equal to their sources, Prometheus lines well
 * formed (name, optional labels, a number). The KV part comes through the
 * engine's queries (engine.h), here over a kvmem of its own. */
#include "testutil.h"
#include "kvwise/memview.h"
#include "kvwise/kvmem.h"
#include "kvwise/ledger.h"
#include <cjson/cJSON.h>
#include <ctype.h>
#include <string.h>

/* Every non-comment line is `name{labels} value` or `name value`. */
static int bad_prom_lines(const char *txt) {
    int bad = 0;
    const char *p = txt;
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char line[600];
        snprintf(line, sizeof line, "%.*s", (int)(n < 599 ? n : 599), p);
        if (line[0] && line[0] != '#') {
            const char *q = line;
            if (strncmp(q, "kvwise_", 7) != 0) bad++;
            while (*q && (isalnum((unsigned char)*q) || *q == '_')) q++;
            if (*q == '{') { q = strchr(q, '}'); if (!q) { bad++; goto next; } q++; }
            if (*q != ' ') bad++;
            else { char *end; strtod(q + 1, &end); if (*end) bad++; }
        }
    next:
        p += n + (e ? 1 : 0);
    }
    return bad;
}

/* GET /v1/requests: a decoding, a prefilling and a queued request. */
static void test_requests_json(void) {
    kw_sched_req_info r[3] = {
        {.id = 7, .tag = "chat", .state = KW_REQ_DECODE, .n_prompt = 100, .cached = 40, .prompt_done = 100, .n_gen = 11,
         .max_gen = 50, .t_submit = 10.0, .t_admit = 10.5, .t_first = 11.0, .t_last = 12.0},
        {.id = 8, .tag = "messages", .state = KW_REQ_PREFILL, .n_prompt = 900, .prompt_done = 300, .max_gen = 20,
         .t_submit = 11.0, .t_admit = 11.0},
        {.id = 9, .tag = NULL, .state = KW_REQ_QUEUED, .n_prompt = 5, .t_submit = 12.5}};
    char *s = kw_memview_requests_json(r, 3, 13.0);
    cJSON *o = s ? cJSON_Parse(s) : NULL;
    const cJSON *run = cJSON_GetObjectItem(o, "running"), *q = cJSON_GetObjectItem(o, "queued");
    KW_CHECK(cJSON_GetArraySize(run) == 2 && cJSON_GetArraySize(q) == 1);
    const cJSON *a = cJSON_GetArrayItem(run, 0), *b = cJSON_GetArrayItem(run, 1), *c = cJSON_GetArrayItem(q, 0);
    KW_CHECK(!strcmp(cJSON_GetObjectItem(a, "state")->valuestring, "decode") && !strcmp(cJSON_GetObjectItem(a, "api")->valuestring, "chat"));
    KW_CHECK_NEAR(cJSON_GetObjectItem(a, "ttft_ms")->valuedouble, 1000, 1e-6);
    KW_CHECK_NEAR(cJSON_GetObjectItem(a, "tok_s")->valuedouble, 10, 1e-9);          /* 10 tokens after the first in 1 s */
    KW_CHECK_NEAR(cJSON_GetObjectItem(a, "age_s")->valuedouble, 3, 1e-9);
    KW_CHECK_EQ_INT(cJSON_GetObjectItem(cJSON_GetObjectItem(b, "prefill"), "done")->valueint, 300);
    KW_CHECK_EQ_INT(cJSON_GetObjectItem(cJSON_GetObjectItem(b, "prefill"), "total")->valueint, 900);
    KW_CHECK(cJSON_IsNull(cJSON_GetObjectItem(b, "ttft_ms")) && cJSON_IsNull(cJSON_GetObjectItem(b, "tok_s")));
    KW_CHECK(!strcmp(cJSON_GetObjectItem(c, "state")->valuestring, "queued") && !cJSON_GetObjectItem(c, "prefill"));
    KW_CHECK_NEAR(cJSON_GetObjectItem(c, "age_s")->valuedouble, 0.5, 1e-9);
    cJSON_Delete(o);
    free(s);
}

int main(void) {
    test_requests_json();
    kw_kv_layout lay = {.n_layer = 1, .n_head_kv = 1, .head_dim_k = 4, .head_dim_v = 4, .type = 0, .block_tokens = 4};
    kw_kv_pool *p = kw_kv_pool_create(&lay, 16, NULL);
    kw_ledger *led = kw_ledger_create(1u << 20);
    kw_ledger_set(led, KW_LEDGER_WEIGHTS, 1000, NULL);
    kw_kvmem_opts o = {.n_slots = 1, .n_ctx = 64, .cache_max_seqs = 2, .cache_max_bytes = 1u << 20, .ledger = led};
    kw_kvmem *m = kw_kvmem_create(p, &o, NULL);
    int32_t t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    KW_CHECK_EQ_INT(kw_kvmem_begin(m, 0, t, 8, 8), 0);
    kw_kvmem_end(m, 0, t, 8, true);
    kw_footprint f;
    KW_CHECK(kw_footprint_read(&f, NULL) == 0);
    kw_engine eng = {.n_ctx = 64, .kvmem = m};     /* an engine whose KV memory is m (engine.h queries) */
    kw_memview_counters c = {.requests_total = 5, .requests_ok = 3, .queue_depth = 2};
    c.rejected[KW_REJECT_QUEUE_TIMEOUT] = 2;

    char *js = kw_memview_json(&eng, led, &f, &c);
    cJSON *j = js ? cJSON_Parse(js) : NULL;
    KW_CHECK(j != NULL);
    cJSON *b = cJSON_GetObjectItem(j, "budget");
    KW_CHECK(b && cJSON_GetObjectItem(b, "limit")->valuedouble == (double)(1u << 20));
    cJSON *lines = b ? cJSON_GetObjectItem(b, "lines") : NULL;
    cJSON *kvc = lines ? cJSON_GetObjectItem(lines, "kv_cached") : NULL;
    KW_CHECK(kvc && cJSON_GetObjectItem(kvc, "bytes")->valuedouble == 2.0 * (double)p->block_bytes);
    KW_CHECK(cJSON_GetObjectItem(j, "measured") && cJSON_GetObjectItem(cJSON_GetObjectItem(j, "measured"), "vm_hwm"));
    cJSON *pc = cJSON_GetObjectItem(j, "prompt_cache");
    KW_CHECK(pc && cJSON_GetObjectItem(pc, "sequences")->valueint == 1);
    KW_CHECK(pc && cJSON_GetObjectItem(pc, "bytes")->valuedouble == 2.0 * (double)p->block_bytes);
    cJSON *rq = cJSON_GetObjectItem(j, "requests");
    KW_CHECK(rq && cJSON_GetObjectItem(cJSON_GetObjectItem(rq, "rejected"), "queue_timeout")->valueint == 2);
    cJSON_Delete(j);
    free(js);

    char *txt = kw_memview_metrics(&eng, led, &f, &c);
    KW_CHECK(txt != NULL);
    if (txt) {
        KW_CHECK_EQ_INT(bad_prom_lines(txt), 0);
        KW_CHECK(strstr(txt, "\nkvwise_memory_limit_bytes 1048576\n") != NULL);
        KW_CHECK(strstr(txt, "\nkvwise_memory_weights_bytes 1000\n") != NULL);
        KW_CHECK(strstr(txt, "kvwise_requests_rejected_total{reason=\"queue_timeout\"} 2\n") != NULL);
        KW_CHECK(strstr(txt, "\nkvwise_queue_depth 2\n") != NULL);
        KW_CHECK(strstr(txt, "\nkvwise_prompt_cache_sequences 1\n") != NULL);
        KW_CHECK(strstr(txt, "\nkvwise_memory_hwm_bytes ") != NULL);
    }
    free(txt);
    char *empty = kw_memview_metrics(NULL, NULL, NULL, NULL);
    KW_CHECK(empty && empty[0] == 0);
    free(empty);
    kw_kvmem_destroy(m);
    kw_ledger_destroy(led);
    kw_kv_pool_destroy(p);
    return kw_test_finish();
}
