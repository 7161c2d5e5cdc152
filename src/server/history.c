/* history.c - the memory budget over time (history.h): the sampling
 * thread, the ring of samples and the body of GET /v1/memory/history.
 *
 * A sample is the ledger at one moment (limit, used, every line) beside
 * what the kernel says at the same moment (RSS, PSS, VmHWM, anonymous and
 * file-backed resident bytes), stamped in Unix milliseconds. The ring is
 * one accounted block (KW_MEM_SERVER) allocated at start. */
#include "history.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "kvwise/footprint.h"
#include "kvwise/ledger.h"
#include "kvwise/memory.h"
#include "sbuf.h"

enum { COL_T = 0, COL_LIMIT, COL_USED, COL_RSS, COL_PSS, COL_HWM, COL_ANON, COL_FILE, COL_LINES };
#define N_COLS (COL_LINES + KW_LEDGER_KIND_COUNT)

typedef struct sample { double v[N_COLS]; } sample;

struct kw_history {
    struct kw_ledger *l;
    double interval_s;
    int cap, n, head;           /* ring: the oldest sample is at (head - n) mod cap */
    sample *ring;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    pthread_t th;
};

static double unix_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec * 1e3 + (double)(ts.tv_nsec / 1000000);
}

static void take_sample(kw_history *h) {
    sample s;
    memset(&s, 0, sizeof s);
    kw_ledger_snapshot ls = kw_ledger_get_snapshot(h->l);
    kw_footprint f;
    bool have = kw_footprint_read(&f, NULL) == 0;
    s.v[COL_T] = unix_ms();
    s.v[COL_LIMIT] = ls.limit == UINT64_MAX ? 0 : (double)ls.limit;
    s.v[COL_USED] = (double)ls.used;
    if (have) {
        s.v[COL_RSS] = (double)(f.rss ? f.rss : f.vm_rss);
        s.v[COL_PSS] = (double)f.pss;
        s.v[COL_HWM] = (double)f.vm_hwm;
        s.v[COL_ANON] = (double)f.rss_anon;
        s.v[COL_FILE] = (double)f.rss_file;
    }
    for (int k = 0; k < KW_LEDGER_KIND_COUNT; k++) s.v[COL_LINES + k] = (double)ls.line[k];
    pthread_mutex_lock(&h->mu);
    h->ring[h->head] = s;
    h->head = (h->head + 1) % h->cap;
    if (h->n < h->cap) h->n++;
    pthread_mutex_unlock(&h->mu);
}

static void *sampler(void *arg) {
    kw_history *h = arg;
    pthread_mutex_lock(&h->mu);
    while (!h->stop) {
        struct timespec until = kw_deadline_after(CLOCK_MONOTONIC, h->interval_s);
        while (!h->stop && pthread_cond_timedwait(&h->cv, &h->mu, &until) == 0) {}
        if (h->stop) break;
        pthread_mutex_unlock(&h->mu);
        take_sample(h);
        pthread_mutex_lock(&h->mu);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

kw_history *kw_history_start(struct kw_ledger *l, double interval_s, int capacity) {
    if (!l || capacity < 1 || !(interval_s > 0)) return NULL;
    kw_history *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->ring = kw_mem_alloc(KW_MEM_SERVER, sizeof(sample) * (size_t)capacity);
    if (!h->ring) { free(h); return NULL; }
    h->l = l;
    h->interval_s = interval_s;
    h->cap = capacity;
    pthread_mutex_init(&h->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cv, &ca);
    pthread_condattr_destroy(&ca);
    take_sample(h);
    if (pthread_create(&h->th, NULL, sampler, h) != 0) {
        pthread_cond_destroy(&h->cv);
        pthread_mutex_destroy(&h->mu);
        kw_mem_free(h->ring);
        free(h);
        return NULL;
    }
    return h;
}

void kw_history_stop(kw_history *h) {
    if (!h) return;
    kw_thread_stop(&h->mu, &h->cv, &h->stop, h->th, true);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    kw_mem_free(h->ring);
    free(h);
}

char *kw_history_json(kw_history *h, double since_ms) {
    kw_sbuf b = {0};
    static const char *const fixed[COL_LINES] = {"t_ms", "limit", "used", "rss", "pss", "hwm", "rss_anon", "rss_file"};
    kw_sbuf_printf(&b, "{\"interval_s\":%g,\"capacity\":%d,\"columns\":[", h->interval_s, h->cap);
    for (int c = 0; c < N_COLS; c++)
        kw_sbuf_printf(&b, "%s\"%s\"", c ? "," : "",
                       c < COL_LINES ? fixed[c] : kw_ledger_kind_name((kw_ledger_kind)(c - COL_LINES)));
    kw_sbuf_puts(&b, "],\"samples\":[");
    pthread_mutex_lock(&h->mu);
    bool first = true;
    for (int i = 0; i < h->n; i++) {
        const sample *s = &h->ring[(h->head - h->n + i + h->cap) % h->cap];
        if (s->v[COL_T] <= since_ms) continue;
        kw_sbuf_puts(&b, first ? "[" : ",[");
        first = false;
        for (int c = 0; c < N_COLS; c++) kw_sbuf_printf(&b, "%s%.0f", c ? "," : "", s->v[c]);
        kw_sbuf_puts(&b, "]");
    }
    pthread_mutex_unlock(&h->mu);
    kw_sbuf_puts(&b, "]}");
    return kw_sbuf_take(&b);
}
