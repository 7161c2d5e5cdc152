/* ledger.c - one memory budget and its lines (ledger.h).
 *
 * Owns: the arithmetic of the budget (lines, total, peak, reservations that
 * fail instead of overshooting the limit), the startup table and the JSON
 * export. All sums saturate instead of wrapping, so a huge request can
 * never "fit" by overflowing. One mutex guards every field. */
#include "kvwise/testctl.h"
#include "kvwise/ledger.h"
#include "kvwise/memory.h"
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct kw_ledger {
    pthread_mutex_t mu;
    uint64_t limit;
    uint64_t line[KW_LEDGER_KIND_COUNT];
    uint64_t line_peak[KW_LEDGER_KIND_COUNT];
    uint64_t used, peak;
    uint64_t reserve_ok, reserve_failed;
};

static uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

static bool valid_kind(kw_ledger_kind k) { return (unsigned)k < KW_LEDGER_KIND_COUNT; }

static void lock(const kw_ledger *l) { pthread_mutex_lock(&((kw_ledger *)l)->mu); }
static void unlock(const kw_ledger *l) { pthread_mutex_unlock(&((kw_ledger *)l)->mu); }

/* Sets a line and keeps used/peaks in step (caller holds the lock). */
static void put_line(kw_ledger *l, kw_ledger_kind k, uint64_t bytes) {
    l->used = l->used - l->line[k] + bytes;
    l->line[k] = bytes;
    if (bytes > l->line_peak[k]) l->line_peak[k] = bytes;
    if (l->used > l->peak) l->peak = l->used;
}

kw_ledger *kw_ledger_create(uint64_t limit) {
    kw_ledger *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    pthread_mutex_init(&l->mu, NULL);
    l->limit = limit ? limit : UINT64_MAX;
    return l;
}

void kw_ledger_destroy(kw_ledger *l) {
    if (!l) return;
    pthread_mutex_destroy(&l->mu);
    free(l);
}

uint64_t kw_ledger_limit(const kw_ledger *l) { return l->limit; }

int kw_ledger_set(kw_ledger *l, kw_ledger_kind kind, uint64_t bytes, kw_err *err) {
    if (!valid_kind(kind)) return kw_err_set(err, "ledger: unknown line %d", (int)kind);
    lock(l);
    uint64_t others = l->used - l->line[kind];
    uint64_t total = sat_add(others, bytes);
    if (total > l->limit) {
        uint64_t limit = l->limit;
        unlock(l);
        char a[32], b[32], c[32], d[32];
        return kw_err_set(err, "%s needs %s but only %s of the %s memory limit is left; "
                          "a limit of at least %s would work", kw_ledger_kind_label(kind),
                          kw_format_bytes(bytes, a, sizeof a),
                          kw_format_bytes(limit > others ? limit - others : 0, b, sizeof b),
                          kw_format_bytes(limit, c, sizeof c), kw_format_bytes(total, d, sizeof d));
    }
    put_line(l, kind, bytes);
    unlock(l);
    return 0;
}

int kw_ledger_reserve(kw_ledger *l, kw_ledger_kind kind, uint64_t bytes) {
    if (!valid_kind(kind)) return -1;
    lock(l);
    uint64_t total = sat_add(l->used, bytes);
    if (total > l->limit || sat_add(l->line[kind], bytes) == UINT64_MAX ||
        kw_fault_hit(KW_FAULT_LEDGER, -1)) {              /* (a test-only injected refusal: testctl.h) */
        l->reserve_failed++;
        unlock(l);
        return -1;
    }
    put_line(l, kind, l->line[kind] + bytes);
    l->reserve_ok++;
    unlock(l);
    return 0;
}

int kw_ledger_release(kw_ledger *l, kw_ledger_kind kind, uint64_t bytes) {
    if (!valid_kind(kind)) return -1;
    lock(l);
    int rc = 0;
    uint64_t cur = l->line[kind];
    if (bytes > cur) { bytes = cur; rc = -1; }
    put_line(l, kind, cur - bytes);
    unlock(l);
    return rc;
}

int kw_ledger_move(kw_ledger *l, kw_ledger_kind from, kw_ledger_kind to, uint64_t bytes) {
    if (!valid_kind(from) || !valid_kind(to)) return -1;
    lock(l);
    if (l->line[from] < bytes) { unlock(l); return -1; }
    put_line(l, from, l->line[from] - bytes);
    put_line(l, to, l->line[to] + bytes);
    unlock(l);
    return 0;
}

bool kw_ledger_fits(const kw_ledger *l, uint64_t bytes) {
    lock(l);
    bool ok = sat_add(l->used, bytes) <= l->limit;
    unlock(l);
    return ok;
}

uint64_t kw_ledger_line(const kw_ledger *l, kw_ledger_kind kind) {
    if (!valid_kind(kind)) return 0;
    lock(l);
    uint64_t v = l->line[kind];
    unlock(l);
    return v;
}

uint64_t kw_ledger_used(const kw_ledger *l) {
    lock(l);
    uint64_t v = l->used;
    unlock(l);
    return v;
}

uint64_t kw_ledger_available(const kw_ledger *l) {
    lock(l);
    uint64_t v = l->used < l->limit ? l->limit - l->used : 0;
    unlock(l);
    return v;
}

kw_ledger_snapshot kw_ledger_get_snapshot(const kw_ledger *l) {
    kw_ledger_snapshot s;
    memset(&s, 0, sizeof s);
    lock(l);
    s.limit = l->limit;
    memcpy(s.line, l->line, sizeof s.line);
    memcpy(s.line_peak, l->line_peak, sizeof s.line_peak);
    s.used = l->used;
    s.peak = l->peak;
    s.available = l->used < l->limit ? l->limit - l->used : 0;
    s.reserve_ok = l->reserve_ok;
    s.reserve_failed = l->reserve_failed;
    unlock(l);
    return s;
}

const char *kw_ledger_kind_name(kw_ledger_kind kind) {
    static const char *names[KW_LEDGER_KIND_COUNT] = {
        "weights", "kv_live", "kv_cached", "workspace", "scratch", "tokenizer", "overhead", "connections", "grammar",
        "rec_state", "rec_checkpoints"};
    return valid_kind(kind) ? names[kind] : "?";
}

const char *kw_ledger_kind_label(kw_ledger_kind kind) {
    static const char *labels[KW_LEDGER_KIND_COUNT] = {
        "weights (mmap'd file + repacks)", "KV live (running sequences)", "KV cached (prompt cache)",
        "prefill workspace", "thread scratch", "tokenizer", "fixed overhead (process, libraries, server)",
        "HTTP connections (max x 68 KiB + bodies + requests)", "grammars (vocab, compiled, indexes)",
        "recurrent state (running sequences)", "recurrent checkpoints (prompt cache)"};
    return valid_kind(kind) ? labels[kind] : "?";
}

uint64_t kw_ledger_baseline_bytes(void) {
    kw_footprint f;
    if (kw_footprint_read(&f, NULL) != 0) return 0;
    uint64_t rss = f.rss ? f.rss : f.vm_rss;
    uint64_t accounted = kw_mem_total();
    return rss > accounted ? rss - accounted : 0;
}

static double share(uint64_t part, uint64_t whole) {
    return whole && whole != UINT64_MAX ? 100.0 * (double)part / (double)whole : 0.0;
}

void kw_ledger_print(const kw_ledger *l, const kw_footprint *measured, FILE *out) {
    kw_ledger_snapshot s = kw_ledger_get_snapshot(l);
    char a[32], b[32];
    bool unlimited = s.limit == UINT64_MAX;
    fprintf(out, "Memory budget: %s\n", unlimited ? "no limit" : kw_format_bytes(s.limit, a, sizeof a));
    fprintf(out, "  %-46s %12s %7s %12s\n", "line", "bytes", "share", "peak");
    for (int k = 0; k < KW_LEDGER_KIND_COUNT; k++)
        fprintf(out, "  %-46s %12s %6.1f%% %12s\n", kw_ledger_kind_label((kw_ledger_kind)k),
                kw_format_bytes(s.line[k], a, sizeof a), share(s.line[k], s.limit),
                kw_format_bytes(s.line_peak[k], b, sizeof b));
    fprintf(out, "  %-46s %12s %6.1f%% %12s\n", "total", kw_format_bytes(s.used, a, sizeof a),
            share(s.used, s.limit), kw_format_bytes(s.peak, b, sizeof b));
    if (!unlimited)
        fprintf(out, "  %-46s %12s %6.1f%%\n", "left", kw_format_bytes(s.available, a, sizeof a),
                share(s.available, s.limit));
    if (measured) {
        fprintf(out, "Measured by the kernel:\n");
        kw_footprint_print(measured, "  ", out);
    }
}

cJSON *kw_ledger_to_cjson(const kw_ledger *l, const kw_footprint *measured) {
    kw_ledger_snapshot s = kw_ledger_get_snapshot(l);
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    /* no limit is exported as 0 (JSON numbers are doubles: UINT64_MAX would be lossy) */
    cJSON_AddNumberToObject(o, "limit", s.limit == UINT64_MAX ? 0.0 : (double)s.limit);
    cJSON_AddNumberToObject(o, "used", (double)s.used);
    cJSON_AddNumberToObject(o, "available", s.limit == UINT64_MAX ? 0.0 : (double)s.available);
    cJSON_AddNumberToObject(o, "peak", (double)s.peak);
    cJSON *lines = cJSON_AddObjectToObject(o, "lines");
    for (int k = 0; lines && k < KW_LEDGER_KIND_COUNT; k++) {
        cJSON *line = cJSON_AddObjectToObject(lines, kw_ledger_kind_name((kw_ledger_kind)k));
        if (!line) continue;
        cJSON_AddNumberToObject(line, "bytes", (double)s.line[k]);
        cJSON_AddNumberToObject(line, "peak", (double)s.line_peak[k]);
        cJSON_AddStringToObject(line, "label", kw_ledger_kind_label((kw_ledger_kind)k));
    }
    cJSON *res = cJSON_AddObjectToObject(o, "reservations");
    if (res) {
        cJSON_AddNumberToObject(res, "ok", (double)s.reserve_ok);
        cJSON_AddNumberToObject(res, "failed", (double)s.reserve_failed);
    }
    if (measured) {
        cJSON *m = cJSON_AddObjectToObject(o, "measured");
        if (m) kw_footprint_add_json(measured, m);
    }
    return o;
}

char *kw_ledger_json(const kw_ledger *l, const kw_footprint *measured) {
    cJSON *o = kw_ledger_to_cjson(l, measured);
    if (!o) return NULL;
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}
