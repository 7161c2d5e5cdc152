/* memview.c - bodies of GET /v1/memory and GET /metrics (memview.h).
 *
 * Owns: how the budget (ledger), the kernel's figures (footprint), the KV
 * pool and prompt cache (the engine's queries) and the server's request counters are put
 * into one JSON document and into Prometheus text. Reads only snapshots:
 * safe to call from HTTP threads while the engine runs. */
#include "kvwise/memview.h"
#include "kvwise/ledger.h"
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The counted reasons, in the order they are shown. */
static const kw_reject_reason shown[] = {KW_REJECT_QUEUE_FULL, KW_REJECT_QUEUE_TIMEOUT, KW_REJECT_NEVER_FITS,
                                         KW_REJECT_CONTEXT};
#define N_SHOWN (int)(sizeof shown / sizeof shown[0])

const char *kw_reject_reason_name(kw_reject_reason r) {
    static const char *names[KW_REJECT_REASON_COUNT] = {
        [KW_REJECT_QUEUE_FULL] = "queue_full", [KW_REJECT_QUEUE_TIMEOUT] = "queue_timeout",
        [KW_REJECT_NEVER_FITS] = "never_fits", [KW_REJECT_CONTEXT] = "context_length"};
    return (unsigned)r < KW_REJECT_REASON_COUNT && names[r] ? names[r] : "other";
}

static void add_counters_json(cJSON *o, const kw_memview_counters *c) {
    cJSON *r = cJSON_AddObjectToObject(o, "requests");
    if (!r) return;
    cJSON_AddNumberToObject(r, "total", (double)c->requests_total);
    cJSON_AddNumberToObject(r, "ok", (double)c->requests_ok);
    cJSON_AddNumberToObject(r, "active", c->active);
    cJSON_AddNumberToObject(r, "queue_depth", c->queue_depth);
    cJSON_AddNumberToObject(r, "prompt_tokens", (double)c->prompt_tokens);
    cJSON_AddNumberToObject(r, "cached_tokens", (double)c->cached_tokens);
    cJSON_AddNumberToObject(r, "completion_tokens", (double)c->completion_tokens);
    cJSON *rej = cJSON_AddObjectToObject(r, "rejected");
    for (int i = 0; rej && i < N_SHOWN; i++)
        cJSON_AddNumberToObject(rej, kw_reject_reason_name(shown[i]), (double)c->rejected[shown[i]]);
    cJSON *api = c->n_api ? cJSON_AddObjectToObject(r, "by_api") : NULL;
    for (int i = 0; api && i < c->n_api; i++) cJSON_AddNumberToObject(api, c->api_names[i], (double)c->api_requests[i]);
}

char *kw_memview_json(const kw_engine *e, struct kw_ledger *l, const kw_footprint *measured,
                      const kw_memview_counters *c) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    if (l) {
        cJSON *b = kw_ledger_to_cjson(l, NULL);
        if (b) cJSON_AddItemToObject(o, "budget", b);
    }
    if (measured) {
        cJSON *f = cJSON_AddObjectToObject(o, "measured");
        if (f) kw_footprint_add_json(measured, f);
    }
    if (e) kw_engine_memory_json(e, o);
    if (c) add_counters_json(o, c);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static cJSON *request_json(const kw_sched_req_info *r, double now) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    static const char *const states[] = {"queued", "prefill", "decode"};
    cJSON_AddNumberToObject(o, "id", (double)r->id);
    cJSON_AddStringToObject(o, "api", r->tag ? r->tag : "");
    cJSON_AddStringToObject(o, "state", states[r->state]);
    cJSON_AddNumberToObject(o, "prompt_tokens", r->n_prompt);
    cJSON_AddNumberToObject(o, "age_s", now - r->t_submit);
    if (r->state == KW_REQ_QUEUED) return o;
    cJSON_AddNumberToObject(o, "cached_tokens", r->cached);
    cJSON *p = cJSON_AddObjectToObject(o, "prefill");
    if (p) {
        cJSON_AddNumberToObject(p, "done", r->prompt_done);
        cJSON_AddNumberToObject(p, "total", r->n_prompt);
    }
    cJSON_AddNumberToObject(o, "generated", r->n_gen);
    cJSON_AddNumberToObject(o, "max_tokens", r->max_gen);
    cJSON_AddNumberToObject(o, "queued_s", r->t_admit - r->t_submit);
    if (r->t_first > 0) cJSON_AddNumberToObject(o, "ttft_ms", (r->t_first - r->t_submit) * 1e3);
    else cJSON_AddNullToObject(o, "ttft_ms");
    if (r->n_gen > 1 && r->t_last > r->t_first)
        cJSON_AddNumberToObject(o, "tok_s", (double)(r->n_gen - 1) / (r->t_last - r->t_first));
    else cJSON_AddNullToObject(o, "tok_s");
    return o;
}

char *kw_memview_requests_json(const kw_sched_req_info *r, int n, double now) {
    cJSON *o = cJSON_CreateObject();
    cJSON *run = cJSON_AddArrayToObject(o, "running"), *q = cJSON_AddArrayToObject(o, "queued");
    if (!run || !q) { cJSON_Delete(o); return NULL; }
    for (int i = 0; i < n; i++) {
        cJSON *it = request_json(&r[i], now);
        if (it) cJSON_AddItemToArray(r[i].state == KW_REQ_QUEUED ? q : run, it);
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

typedef struct { char *buf; size_t len; int oom; } tbuf;

static void put(tbuf *t, const char *fmt, ...) KW_PRINTF(2, 3);
static void put(tbuf *t, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || t->oom) return;
    if ((size_t)n >= sizeof tmp) n = (int)sizeof tmp - 1;
    char *nb = realloc(t->buf, t->len + (size_t)n + 1);
    if (!nb) { t->oom = 1; return; }
    memcpy(nb + t->len, tmp, (size_t)n + 1);
    t->buf = nb;
    t->len += (size_t)n;
}

static void gauge(tbuf *t, const char *name, const char *help, uint64_t v) {
    put(t, "# HELP %s %s\n# TYPE %s gauge\n%s %llu\n", name, help, name, name, (unsigned long long)v);
}

static void counter(tbuf *t, const char *name, const char *help, uint64_t v) {
    put(t, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, (unsigned long long)v);
}

static void ledger_metrics(tbuf *t, struct kw_ledger *l) {
    kw_ledger_snapshot s = kw_ledger_get_snapshot(l);
    gauge(t, "kvwise_memory_limit_bytes", "The memory budget (--memory-limit); 0 = none.",
          s.limit == UINT64_MAX ? 0 : s.limit);
    gauge(t, "kvwise_memory_used_bytes", "Sum of the budget's lines.", s.used);
    gauge(t, "kvwise_memory_peak_bytes", "Highest sum of the budget's lines.", s.peak);
    gauge(t, "kvwise_memory_available_bytes", "Budget left.", s.limit == UINT64_MAX ? 0 : s.available);
    put(t, "# HELP kvwise_memory_line_bytes Bytes of each budget line.\n# TYPE kvwise_memory_line_bytes gauge\n");
    for (int k = 0; k < KW_LEDGER_KIND_COUNT; k++)
        put(t, "kvwise_memory_line_bytes{line=\"%s\"} %llu\n", kw_ledger_kind_name((kw_ledger_kind)k),
            (unsigned long long)s.line[k]);
    for (int k = 0; k < KW_LEDGER_KIND_COUNT; k++) {
        char name[96];
        snprintf(name, sizeof name, "kvwise_memory_%s_bytes", kw_ledger_kind_name((kw_ledger_kind)k));
        gauge(t, name, kw_ledger_kind_label((kw_ledger_kind)k), s.line[k]);
    }
    counter(t, "kvwise_memory_reservations_failed_total", "Budget reservations refused.", s.reserve_failed);
}

static void measured_metrics(tbuf *t, const kw_footprint *f) {
    gauge(t, "kvwise_memory_rss_bytes", "Resident set size (kernel).", f->rss ? f->rss : f->vm_rss);
    gauge(t, "kvwise_memory_pss_bytes", "Proportional set size (kernel, smaps_rollup).", f->pss);
    gauge(t, "kvwise_memory_anon_bytes", "Anonymous resident memory (heap, KV, workspace).", f->rss_anon);
    gauge(t, "kvwise_memory_file_bytes", "File-backed resident memory (mmap'd weights, libraries).", f->rss_file);
    gauge(t, "kvwise_memory_hwm_bytes", "Peak resident set size (VmHWM).", f->vm_hwm);
    gauge(t, "kvwise_memory_swap_bytes", "Swapped-out memory of this process.", f->vm_swap);
    gauge(t, "kvwise_memory_vm_size_bytes", "Virtual address space (reservations, not use).", f->vm_size);
    gauge(t, "kvwise_machine_mem_available_bytes", "MemAvailable of the machine.", f->mem_available);
}

static void counter_metrics(tbuf *t, const kw_memview_counters *c) {
    counter(t, "kvwise_requests_total", "Completion requests received.", c->requests_total);
    counter(t, "kvwise_requests_ok_total", "Completion requests answered 200.", c->requests_ok);
    put(t, "# HELP kvwise_requests_rejected_total Requests refused, by reason.\n"
           "# TYPE kvwise_requests_rejected_total counter\n");
    for (int i = 0; i < N_SHOWN; i++)
        put(t, "kvwise_requests_rejected_total{reason=\"%s\"} %llu\n", kw_reject_reason_name(shown[i]),
            (unsigned long long)c->rejected[shown[i]]);
    if (c->n_api)
        put(t, "# HELP kvwise_requests_by_api_total Generation requests received, by client API.\n"
               "# TYPE kvwise_requests_by_api_total counter\n");
    for (int i = 0; i < c->n_api; i++)
        put(t, "kvwise_requests_by_api_total{api=\"%s\"} %llu\n", c->api_names[i], (unsigned long long)c->api_requests[i]);
    counter(t, "kvwise_prompt_tokens_total", "Prompt tokens of finished requests.", c->prompt_tokens);
    counter(t, "kvwise_cached_tokens_total", "Prompt tokens served from the prompt cache.", c->cached_tokens);
    counter(t, "kvwise_completion_tokens_total", "Generated tokens.", c->completion_tokens);
    gauge(t, "kvwise_queue_depth", "Requests waiting for a slot or for memory.", (uint64_t)(c->queue_depth > 0 ? c->queue_depth : 0));
    gauge(t, "kvwise_requests_active", "Requests running.", (uint64_t)(c->active > 0 ? c->active : 0));
}

char *kw_memview_metrics(const kw_engine *e, struct kw_ledger *l, const kw_footprint *measured,
                         const kw_memview_counters *c) {
    tbuf t = {0};
    put(&t, "%s", "");
    if (l) ledger_metrics(&t, l);
    if (measured) measured_metrics(&t, measured);
    if (c) counter_metrics(&t, c);
    if (e && !t.oom) {
        if (kw_engine_memory_metrics(e, &t.buf, &t.len) != 0) t.oom = 1;
    }
    if (t.oom) { free(t.buf); return NULL; }
    return t.buf;
}
