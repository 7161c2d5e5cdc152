/* guard.c - the checks a request passes before it is read (Host, Origin,
 * media type) and the connection table with its deadlines and shedding
 * (guard.h). The table is the server's only view of connections that have
 * not sent a request yet: libmicrohttpd calls the access handler only once
 * a request's headers are complete, so a connection that never completes
 * them is seen here alone. */
#include "guard.h"
#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include "kvwise/server.h"

/* A connection is shed to make room only once it has been idle or without
 * complete headers this long (s). */
#define KW_SHED_MIN_AGE 1.0

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- who may send a request ------------------------------------------------ */

/* The host part of a Host header or an origin's authority, without the port
 * and the brackets of an IPv6 literal, lower-cased, into buf. */
static void host_name(const char *h, size_t n, char *buf, size_t cap) {
    size_t o = 0;
    const char *close = n && h[0] == '[' ? memchr(h, ']', n) : NULL;
    if (close && (close + 1 == h + n || close[1] == ':')) {  /* [v6] or [v6]:port */
        size_t end = (size_t)(close - h);
        for (size_t i = 1; i < end && o + 1 < cap; i++) buf[o++] = (char)tolower((unsigned char)h[i]);
    } else if (n && h[0] == '[') {                           /* not a bracketed address: never an IP */
        buf[o++] = '!';
    } else {
        const char *colon = memchr(h, ':', n);
        size_t end = colon ? (size_t)(colon - h) : n;
        for (size_t i = 0; i < end && o + 1 < cap; i++) buf[o++] = (char)tolower((unsigned char)h[i]);
    }
    while (o && buf[o - 1] == '.') o--;                      /* "localhost." is localhost */
    buf[o] = 0;
}

static bool is_ip_literal(const char *name) {
    unsigned char tmp[16];
    return inet_pton(AF_INET, name, tmp) == 1 || inet_pton(AF_INET6, name, tmp) == 1;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* Does the comma-separated list name `name` ("*", "name", ".domain")? */
static bool listed(const char *list, const char *name) {
    for (const char *p = list; p && *p;) {
        while (*p == ' ' || *p == ',') p++;
        const char *e = p;
        while (*e && *e != ',') e++;
        size_t n = (size_t)(e - p);
        while (n && p[n - 1] == ' ') n--;
        char item[256];
        host_name(p, n, item, sizeof item);
        if (n == 1 && *p == '*') return true;
        if (item[0] == '.' ? (ends_with(name, item) || !strcmp(name, item + 1)) : (item[0] && !strcmp(name, item)))
            return true;
        p = e;
    }
    return false;
}

bool kw_guard_host_ok(const char *host_header, const char *listen_host, const char *allowed) {
    if (!host_header) return true;          /* HTTP/1.0 without Host: not a browser */
    char name[256];
    host_name(host_header, strlen(host_header), name, sizeof name);
    if (!name[0] || is_ip_literal(name)) return true;    /* an address is never a rebound name */
    if (!strcmp(name, "localhost") || ends_with(name, ".localhost")) return true;
    if (listen_host) {
        char lh[256];
        host_name(listen_host, strlen(listen_host), lh, sizeof lh);
        if (lh[0] && !strcmp(name, lh)) return true;
    }
    return allowed && listed(allowed, name);
}

bool kw_guard_origin_listed(const char *allowed_origins, const char *origin) {
    if (!strcmp(allowed_origins, "*")) return true;
    size_t ol = strlen(origin);
    for (const char *p = allowed_origins; *p;) {
        const char *c = strchr(p, ',');
        size_t n = c ? (size_t)(c - p) : strlen(p);
        while (n && *p == ' ') { p++; n--; }
        while (n && p[n - 1] == ' ') n--;
        if (n == ol && !strncmp(p, origin, n)) return true;
        if (!c) break;
        p = c + 1;
    }
    return false;
}

bool kw_guard_origin_ok(const char *origin, const char *host_header, const char *allowed_origins) {
    if (!origin) return true;
    if (allowed_origins && kw_guard_origin_listed(allowed_origins, origin)) return true;
    /* its own origin: scheme://AUTHORITY with AUTHORITY equal to the Host header */
    const char *sep = strstr(origin, "://");
    if (!sep || !host_header) return false;
    return !strcasecmp(sep + 3, host_header);
}

bool kw_guard_is_json(const char *ct) {
    if (!ct) return false;
    while (*ct == ' ') ct++;
    size_t n = strcspn(ct, ";");
    while (n && (ct[n - 1] == ' ' || ct[n - 1] == '\t')) n--;
    char type[128];
    if (n == 0 || n >= sizeof type) return false;
    for (size_t i = 0; i < n; i++) type[i] = (char)tolower((unsigned char)ct[i]);
    type[n] = 0;
    if (!strcmp(type, "application/json")) return true;
    return !strncmp(type, "application/", 12) && ends_with(type, "+json");
}

/* ---- the connection table ------------------------------------------------- */

/* Shuts c's socket down (under t->mu): libmicrohttpd reads the end of the
 * stream and closes the connection in its own thread. */
static void shed(kw_conntab *t, kw_conn_slot *c, uint64_t *why) {
    if (c->shed || c->fd < 0) return;
    shutdown(c->fd, SHUT_RDWR);
    c->shed = true;
    t->n_shedding++;
    (*why)++;
}

static void *reaper_main(void *arg) {
    kw_conntab *t = arg;
    pthread_mutex_lock(&t->mu);
    while (!t->stop) {
        struct timespec ts = kw_deadline_after(CLOCK_REALTIME, 0.25);
        pthread_cond_timedwait(&t->cv, &t->mu, &ts);
        double now = mono_s();
        for (int i = 0; i < t->cap; i++) {
            kw_conn_slot *c = &t->slot[i];
            if (c->fd < 0 || c->shed) continue;
            if (c->state == KW_CONN_NEW && now - c->since > t->header_timeout) shed(t, c, &t->n_shed_header);
            /* a stalled body (a body that still sends is answered 408 by the server) */
            else if (c->state == KW_CONN_BODY && now - c->since > t->body_timeout + 1) shed(t, c, &t->n_shed_body);
        }
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

int kw_conntab_init(kw_conntab *t, int cap, double header_timeout, double body_timeout) {
    memset(t, 0, sizeof *t);
    t->slot = calloc((size_t)cap, sizeof *t->slot);
    if (!t->slot) return -1;
    for (int i = 0; i < cap; i++) t->slot[i].fd = -1;
    t->cap = cap;
    t->header_timeout = header_timeout;
    t->body_timeout = body_timeout;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    t->reaper_on = pthread_create(&t->reaper, NULL, reaper_main, t) == 0;
    return 0;
}

void kw_conntab_free(kw_conntab *t) {
    if (!t->slot) return;
    kw_thread_stop(&t->mu, &t->cv, &t->stop, t->reaper, t->reaper_on);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t->slot);
    t->slot = NULL;
}

bool kw_conntab_make_room(kw_conntab *t, int n_open, int max_open) {
    pthread_mutex_lock(&t->mu);
    bool ok = n_open < max_open + t->n_shedding;
    if (!ok && t->n_shedding < KW_SERVER_SHED_MARGIN) {
        /* the oldest connection that holds no request: idle keep-alive, or headers still coming,
         * for at least KW_SHED_MIN_AGE (in a burst of new connections the young ones are
         * clients whose headers are on their way, not stalled ones) */
        kw_conn_slot *victim = NULL;
        double now = mono_s();
        for (int i = 0; i < t->cap; i++) {
            kw_conn_slot *c = &t->slot[i];
            if (c->fd < 0 || c->shed || (c->state != KW_CONN_NEW && c->state != KW_CONN_IDLE)) continue;
            if (now - c->since < KW_SHED_MIN_AGE) continue;
            if (!victim || c->since < victim->since) victim = c;
        }
        if (victim) { shed(t, victim, &t->n_shed_full); ok = true; }
    }
    pthread_mutex_unlock(&t->mu);
    return ok;
}

kw_conn_slot *kw_conntab_add(kw_conntab *t, int fd) {
    pthread_mutex_lock(&t->mu);
    kw_conn_slot *c = NULL;
    for (int i = 0; i < t->cap && !c; i++)
        if (t->slot[i].fd < 0) c = &t->slot[i];
    if (c) *c = (kw_conn_slot){.fd = fd, .state = KW_CONN_NEW, .since = mono_s()};
    pthread_mutex_unlock(&t->mu);
    return c;
}

void kw_conntab_set(kw_conntab *t, kw_conn_slot *c, kw_conn_state state) {
    if (!c) return;
    pthread_mutex_lock(&t->mu);
    if (c->state != state) { c->state = state; c->since = mono_s(); }
    pthread_mutex_unlock(&t->mu);
}

bool kw_conntab_body_late(kw_conntab *t, const kw_conn_slot *c) {
    if (!c) return false;
    pthread_mutex_lock(&t->mu);
    bool late = c->state == KW_CONN_BODY && mono_s() - c->since > t->body_timeout;
    pthread_mutex_unlock(&t->mu);
    return late;
}

void kw_conntab_remove(kw_conntab *t, kw_conn_slot *c) {
    if (!c) return;
    pthread_mutex_lock(&t->mu);
    if (c->shed) t->n_shedding--;
    c->fd = -1;
    c->shed = false;
    pthread_mutex_unlock(&t->mu);
}
