/* fault.c - fault injection, part of the test hooks (testctl.h; compiled
 * only with KW_TESTCTL).
 *
 * Owns: the parsed rules of a --test-fail-alloc spec (and of
 * kw_mem_fail_nth, one "alloc=N" rule), their per-rule call counters, the
 * arm switch and the decision kw_fault_hit() makes at each site
 * (kw_mem_alloc, kw_kv_alloc, kw_ledger_reserve, kw_kvmem_ensure). With no
 * rules configured a site costs one relaxed atomic load. */
#include "kvwise/memory.h"
#include "kvwise/testctl.h"
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define KW_FAULT_MAX_RULES 8

typedef enum { WHEN_ONCE = 0, WHEN_EVERY, WHEN_FROM } fault_when;

typedef struct fault_rule {
    kw_fault_site site;
    int kind;                   /* kw_mem_kind for alloc.KIND, -1 = any */
    fault_when when;
    uint64_t n;
    bool at_start;
    _Atomic bool live;          /* counting */
    _Atomic uint64_t calls;
} fault_rule;

static fault_rule g_rules[KW_FAULT_MAX_RULES];
static _Atomic int g_n_rules;
static _Atomic uint64_t g_injected;

static const char *site_names[KW_FAULT_SITE_COUNT] = {"alloc", "kv_block", "ledger", "kv_ensure"};

static int parse_site(const char *s, size_t len, fault_rule *r) {
    r->kind = -1;
    for (int i = 0; i < KW_FAULT_SITE_COUNT; i++) {
        if (strlen(site_names[i]) == len && !strncmp(s, site_names[i], len)) { r->site = (kw_fault_site)i; return 0; }
    }
    if (len > 6 && !strncmp(s, "alloc.", 6)) {
        for (int k = 0; k < KW_MEM_KIND_COUNT; k++) {
            const char *name = kw_mem_kind_name((kw_mem_kind)k);
            if (strlen(name) == len - 6 && !strncmp(s + 6, name, len - 6)) {
                r->site = KW_FAULT_ALLOC;
                r->kind = k;
                return 0;
            }
        }
    }
    return -1;
}

/* WHEN: "N", "%N" or "N+", then an optional "@start". */
static int parse_when(const char *s, size_t len, fault_rule *r) {
    char buf[32];
    if (len >= sizeof buf) return -1;
    memcpy(buf, s, len);
    buf[len] = 0;
    char *at = strchr(buf, '@');
    if (at) {
        if (strcmp(at, "@start")) return -1;
        r->at_start = true;
        *at = 0;
    }
    char *p = buf;
    r->when = WHEN_ONCE;
    if (*p == '%') { r->when = WHEN_EVERY; p++; }
    if (*p < '0' || *p > '9') return -1;
    char *end;
    unsigned long long n = strtoull(p, &end, 10);
    if (*end == '+' && r->when == WHEN_ONCE) { r->when = WHEN_FROM; end++; }
    if (*end || n < 1 || n > (1ull << 40)) return -1;
    r->n = n;
    return 0;
}

int kw_fault_configure(const char *spec, kw_err *err) {
    atomic_store(&g_n_rules, 0);
    atomic_store(&g_injected, 0);
    if (!spec || !*spec) return 0;
    int n = 0;
    const char *p = spec;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (n == KW_FAULT_MAX_RULES)
            return kw_err_set(err, "fault spec: more than %d rules", KW_FAULT_MAX_RULES);
        fault_rule *r = &g_rules[n];
        memset(r, 0, sizeof *r);
        if (!eq || (end && !end[1]) || parse_site(p, (size_t)(eq - p), r) < 0 || parse_when(eq + 1, len - (size_t)(eq - p) - 1, r) < 0)
            return kw_err_set(err, "fault spec: bad rule '%.*s' (want SITE=N, SITE=%%N or SITE=N+, optional @start; "
                              "SITE alloc, alloc.KIND, kv_block, ledger, kv_ensure)", (int)(len < 80 ? len : 80), p);
        atomic_store(&r->live, r->at_start);
        n++;
        p = end ? end + 1 : p + len;
    }
    atomic_store(&g_n_rules, n);
    return 0;
}

void kw_fault_arm(void) {
    int n = atomic_load(&g_n_rules);
    for (int i = 0; i < n; i++) atomic_store(&g_rules[i].live, true);
}

static bool rule_fires(fault_rule *r) {
    uint64_t c = atomic_fetch_add(&r->calls, 1) + 1;
    switch (r->when) {
    case WHEN_ONCE: return c == r->n;
    case WHEN_EVERY: return c % r->n == 0;
    default: return c >= r->n;
    }
}

bool kw_fault_hit(kw_fault_site site, int kind) {
    int n = atomic_load_explicit(&g_n_rules, memory_order_acquire);
    if (n == 0) return false;
    bool fail = false;
    for (int i = 0; i < n; i++) {
        fault_rule *r = &g_rules[i];
        if (r->site != site || (site == KW_FAULT_ALLOC && r->kind >= 0 && r->kind != kind)) continue;
        if (!atomic_load(&r->live)) continue;
        if (rule_fires(r)) fail = true;
    }
    if (fail) atomic_fetch_add(&g_injected, 1);
    return fail;
}

uint64_t kw_fault_injected(void) { return atomic_load(&g_injected); }

void kw_mem_fail_nth(long n) {
    atomic_store(&g_n_rules, 0);
    atomic_store(&g_injected, 0);
    if (n <= 0) return;
    fault_rule *r = &g_rules[0];
    memset(r, 0, sizeof *r);
    r->site = KW_FAULT_ALLOC;
    r->kind = -1;
    r->when = WHEN_ONCE;
    r->n = (uint64_t)n;
    atomic_store(&r->live, true);
    atomic_store(&g_n_rules, 1);
}
bool kw_fault_configured(void) { return atomic_load(&g_n_rules) > 0; }
