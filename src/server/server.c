/* server.c - HTTP plumbing on libmicrohttpd: daemon lifecycle, routing of
 * every client API (OpenAI, Anthropic Messages, Responses, Ollama) to its
 * parser, auth (Bearer or x-api-key, constant-time), CORS, request bodies
 * (the shared allowance, 413 answered at once and drained, 408), the
 * connection limit over guard.c's connection table (Host / Origin / JSON
 * checks and deadlines are there), signals, suspend/resume of connections
 * waiting on the engine, streamed callback responses, the routing keys of
 * each request in the request log, health, per-API request counters and
 * graceful shutdown. The API mappings are in openai.c, anthropic.c,
 * responses.c and ollama.c over chat.c. Owns kw_server_* (server.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <netdb.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <microhttpd.h>
#include "guard.h"
#include "history.h"
#include "internal.h"
#include "ui.h"
#include "kvwise/footprint.h"
#include "kvwise/memory.h"
#include "kvwise/ledger.h"
#include "kvwise/memview.h"
#include "kvwise/testctl.h"

struct kw_server {
    kw_server_opts o;
    char host[256];
    char *api_key, *origins, *config_json, *alias, *allowed_hosts;
    struct MHD_Daemon *d;
    int port;
    pthread_rwlock_t lk;          /* guards engine/sched/stopping against shutdown */
    kw_engine *engine;
    kw_sched *sched;
    bool stopping;
    kw_chat_template tpl;
    char tpl_desc[128];
    int n_jobs;                   /* live jobs (atomic) */
    uint64_t n_requests, n_ok;    /* generation requests received / answered 200 (atomic) */
    uint64_t n_api[KW_API_COUNT]; /* requests received per client API (atomic) */
    uint64_t n_rej_ctx, n_rej_never;  /* 400s decided at parse time (atomic) */
    int n_conns;                  /* open HTTP connections, at most o.max_connections (atomic) */
    kw_conntab tab;               /* every open connection: state, deadlines, shedding (guard.h) */
    uint64_t n_conns_refused;     /* connections closed at accept for being over it (atomic) */
    uint64_t body_bytes;          /* request-body buffers held, at most o.max_body_bytes (atomic) */
    long started;
    kw_history *hist;             /* the budget over time (GET /v1/memory/history), or NULL */
    kw_gcache *gcache;            /* compiled grammars for structured outputs (set with the engine) */
    void (*on_reload)(void *ctx); /* SIGHUP: kw_server_on_reload (run by kw_server_wait) */
    void *reload_ctx;
#ifdef KW_TESTCTL
    bool replay;                  /* the replay sampler is plugged in (serve --test-replay) */
#endif
};

typedef enum {
    R_NONE = 0, R_HEALTH, R_MODELS, R_CONFIG, R_MEMORY, R_METRICS, R_HISTORY, R_REQUESTS,
    R_UI,                       /* the memory page's static files: no data, no key needed */
    R_OLLAMA_VERSION, R_OLLAMA_TAGS,
    R_OLLAMA_SHOW,              /* POST, answered at once */
    R_CHAT, R_COMPLETIONS, R_MESSAGES, R_COUNT_TOKENS, R_RESPONSES, R_OLLAMA_CHAT, R_OLLAMA_GENERATE  /* generation */
} route;

typedef struct conn {
    route rt;
    kw_sbuf body;
    bool no_room;                 /* the body did not fit the memory budget: 503 */
    bool draining;                /* answered 413 already: the rest of the body is read and dropped */
    uint64_t drained;             /* body bytes dropped so far */
    size_t body_reserved;         /* bytes of the ledger's connections line held for the body */
    uint64_t req_mem_peak;        /* most bytes its handling held in the thread's budget (the request log) */
    int phase;                    /* 0 reading, 1 waiting for the engine, 2 answered */
    kw_job *j;
    double t0;
} conn;

static int sig_pipe[2] = {-1, -1};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- small helpers ------------------------------------------------------ */

static void job_unref(kw_job *j) {
    kw_server *srv = j->srv;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left == 0) {
        kw_job_free(j);
        __atomic_sub_fetch(&srv->n_jobs, 1, __ATOMIC_ACQ_REL);
    }
}

static bool origin_allowed(const kw_server *s, const char *origin) {
    return s->origins && origin && kw_guard_origin_listed(s->origins, origin);
}

static void add_cors(kw_server *s, struct MHD_Connection *mc, struct MHD_Response *r) {
    const char *origin = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Origin");
    if (!origin_allowed(s, origin)) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", !strcmp(s->origins, "*") ? "*" : origin);
    MHD_add_response_header(r, "Vary", "Origin");
}

static enum MHD_Result send_body(kw_server *s, struct MHD_Connection *mc, unsigned status,
                                 const char *ctype, char *body) {
    const char *b = body ? body : "";
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(b), (void *)b, MHD_RESPMEM_MUST_COPY);
    free(body);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", ctype);
    add_cors(s, mc, r);
    enum MHD_Result rc = MHD_queue_response(mc, status, r);
    MHD_destroy_response(r);
    return rc;
}

/* The API whose shape a route's answers (and errors) take. */
static const kw_api *route_api(route rt) {
    switch (rt) {
    case R_MESSAGES: case R_COUNT_TOKENS: return &kw_api_anthropic;
    case R_RESPONSES: return &kw_api_responses;
    case R_OLLAMA_CHAT: case R_OLLAMA_VERSION: case R_OLLAMA_TAGS: case R_OLLAMA_SHOW: return &kw_api_ollama_chat;
    case R_OLLAMA_GENERATE: return &kw_api_ollama_generate;
    case R_COMPLETIONS: return &kw_api_openai_completion;
    default: return &kw_api_openai_chat;
    }
}

static enum MHD_Result send_error_as(kw_server *s, struct MHD_Connection *mc, const kw_api *api, const kw_http_error *e) {
    struct MHD_Response *r;
    char *body = api->error_json(e);
    const char *b = body ? body : "{}";
    r = MHD_create_response_from_buffer(strlen(b), (void *)b, MHD_RESPMEM_MUST_COPY);
    free(body);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "application/json");
    if (e->status == 405) MHD_add_response_header(r, "Allow", "GET, POST, OPTIONS");
    if (e->status == 503 || e->status == 529)
        MHD_add_response_header(r, "Retry-After", "1");   /* seconds: a slot frees within a few steps */
    if (e->status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    add_cors(s, mc, r);
    enum MHD_Result rc = MHD_queue_response(mc, (unsigned)e->status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result send_err_as(kw_server *s, struct MHD_Connection *mc, const kw_api *api, int status,
                                   const char *code, const char *msg) {
    kw_http_error e = {0};
    kw_http_error_set(&e, status, NULL, code, "%s", msg);
    return send_error_as(s, mc, api, &e);
}

static enum MHD_Result send_err(kw_server *s, struct MHD_Connection *mc, int status, const char *code,
                                const char *msg) {
    return send_err_as(s, mc, &kw_api_openai_chat, status, code, msg);
}

/* Constant-time comparison of the key a client sends (Authorization:
 * Bearer KEY, or x-api-key: KEY as Anthropic clients send it) with ours. */
static bool key_matches(const kw_server *s, const char *tok) {
    size_t a = strlen(tok), b = strlen(s->api_key), n = a > b ? a : b;
    unsigned char diff = (unsigned char)(a != b);
    for (size_t i = 0; i < n; i++) {
        unsigned char x = i < a ? (unsigned char)tok[i] : 0, y = i < b ? (unsigned char)s->api_key[i] : 0;
        diff |= (unsigned char)(x ^ y);
    }
    return diff == 0;
}

static bool auth_ok(const kw_server *s, struct MHD_Connection *mc) {
    if (!s->api_key) return true;
    const char *h = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Authorization");
    if (h && !strncasecmp(h, "Bearer ", 7) && key_matches(s, h + 7)) return true;
    const char *x = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "x-api-key");
    return x && key_matches(s, x);
}

static route route_of(const char *url, bool *post) {
    static const struct { const char *path; route r; bool post; } table[] = {
        {"/health", R_HEALTH, false}, {"/v1/health", R_HEALTH, false},
        {"/v1/models", R_MODELS, false}, {"/models", R_MODELS, false},
        {"/v1/config", R_CONFIG, false},
        {"/v1/memory", R_MEMORY, false}, {"/metrics", R_METRICS, false},
        {"/v1/memory/history", R_HISTORY, false}, {"/v1/requests", R_REQUESTS, false},
        {"/v1/chat/completions", R_CHAT, true}, {"/chat/completions", R_CHAT, true},
        {"/v1/completions", R_COMPLETIONS, true}, {"/completions", R_COMPLETIONS, true},
        {"/v1/messages", R_MESSAGES, true}, {"/v1/messages/count_tokens", R_COUNT_TOKENS, true},
        {"/v1/responses", R_RESPONSES, true}, {"/responses", R_RESPONSES, true},
        {"/api/chat", R_OLLAMA_CHAT, true}, {"/api/generate", R_OLLAMA_GENERATE, true},
        {"/api/show", R_OLLAMA_SHOW, true}, {"/api/version", R_OLLAMA_VERSION, false},
        {"/api/tags", R_OLLAMA_TAGS, false},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(url, table[i].path)) { *post = table[i].post; return table[i].r; }
    if (kw_ui_find(url)) { *post = false; return R_UI; }
    return R_NONE;
}

/* ---- the engine side ---------------------------------------------------- */

static void job_on_event(kw_sched_req *r, const kw_sched_event *ev) {
    kw_job *j = (kw_job *)((char *)r - offsetof(kw_job, req));
    pthread_mutex_lock(&j->mu);
    kw_job_on_event(j, ev);
    bool wake = j->suspended && (ev->type == KW_EV_FINISH ||
                                 (j->stream && (ev->type == KW_EV_ADMITTED || j->out.len > j->out_off)));
    if (wake) j->suspended = false;
    pthread_mutex_unlock(&j->mu);
    if (wake) MHD_resume_connection(j->mc);
    if (ev->type == KW_EV_FINISH) job_unref(j);      /* the scheduler's reference */
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    kw_job *j = cls;
    pthread_mutex_lock(&j->mu);
    size_t avail = j->out.len - j->out_off;
    if (avail) {
        size_t n = avail < max ? avail : max;
        memcpy(buf, j->out.p + j->out_off, n);
        j->out_off += n;
        if (j->out_off == j->out.len) j->out.len = j->out_off = 0;
        pthread_mutex_unlock(&j->mu);
        return (ssize_t)n;
    }
    if (j->finished) { pthread_mutex_unlock(&j->mu); return MHD_CONTENT_READER_END_OF_STREAM; }
    j->suspended = true;
    MHD_suspend_connection(j->mc);
    pthread_mutex_unlock(&j->mu);
    return 0;
}

/* ---- request bodies in the budget ----------------------------------------
 * A body is buffered whole on top of its connection's fixed bytes. All
 * bodies being read or parsed share one allowance of --max-body bytes (part
 * of the ledger's connections line, kw_plan_connections_bytes). A buffer
 * takes from it only as the bytes arrive: it doubles as it fills, never past
 * the declared Content-Length or --max-body, and takes each new capacity
 * from the allowance before it grows (so a Content-Length that is never
 * sent holds nothing). It gives it all back once the body is parsed into a
 * job, or when the request ends. A body that does not fit beside the others
 * now gets 503 + Retry-After; one over --max-body gets 413. */

static uint64_t content_length(struct MHD_Connection *mc) {
    const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Content-Length");
    return cl ? strtoull(cl, NULL, 10) : 0;
}

/* Takes data capacity `cap` (the buffer minus its NUL) from the allowance. */
static bool body_take(kw_server *s, conn *c, size_t cap) {
    if (cap <= c->body_reserved) return true;
    uint64_t more = cap - c->body_reserved;
    if (__atomic_add_fetch(&s->body_bytes, more, __ATOMIC_ACQ_REL) > s->o.max_body_bytes) {
        __atomic_sub_fetch(&s->body_bytes, more, __ATOMIC_ACQ_REL);
        return false;
    }
    c->body_reserved = cap;
    return true;
}

/* Appends n body bytes (the caller checked that the body stays within
 * --max-body). -1: no room in the allowance now (503). */
static int body_append(kw_server *s, conn *c, const char *data, size_t n, uint64_t declared) {
    size_t need = c->body.len + n;
    if (need + 1 > c->body.cap) {
        uint64_t lim = declared && declared < s->o.max_body_bytes ? declared : s->o.max_body_bytes;
        size_t cap = c->body.cap ? c->body.cap - 1 : 4096;
        while (cap < need) cap *= 2;
        if (cap > lim) cap = (size_t)lim;
        if (cap < need) cap = need;
        if (!body_take(s, c, cap)) return -1;
        char *p = realloc(c->body.p, cap + 1);
        if (!p) return -1;                          /* out of memory: retry later */
        c->body.p = p;
        c->body.cap = cap + 1;
    }
    memcpy(c->body.p + c->body.len, data, n);
    c->body.len = need;
    c->body.p[need] = 0;
    return 0;
}

static void body_release(kw_server *s, conn *c) {
    kw_sbuf_free(&c->body);
    if (c->body_reserved) __atomic_sub_fetch(&s->body_bytes, (uint64_t)c->body_reserved, __ATOMIC_ACQ_REL);
    c->body_reserved = 0;
}

/* ---- generation requests ------------------------------------------------ */

/* The routing keys a client sends with a request (the session an agent's
 * turns belong to: what a router would keep on one server for its prompt
 * cache), for the request log: " session=HEADER:VALUE", " cache_key=KEY". */
static void note_routing_keys(struct MHD_Connection *mc, kw_job *j) {
    static const char *const hdrs[] = {"X-Claude-Code-Session-Id", "session_id", "session-id", "x-session-affinity"};
    size_t used = 0;
    for (size_t i = 0; i < sizeof hdrs / sizeof hdrs[0]; i++) {
        const char *v = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, hdrs[i]);
        if (!v || !*v) continue;
        char clean[72];
        size_t o = 0;
        for (const char *p = v; *p && o + 1 < sizeof clean; p++)
            clean[o++] = (unsigned char)*p > 0x20 && (unsigned char)*p < 0x7f ? *p : '_';
        clean[o] = 0;
        snprintf(j->route_note, sizeof j->route_note, " session=%s:%s", hdrs[i], clean);
        used = strlen(j->route_note);
        break;
    }
    if (j->cache_key[0]) snprintf(j->route_note + used, sizeof j->route_note - used, " cache_key=%s", j->cache_key);
}

/* The route's parser: a job, or NULL + e; *now (a body to answer at once
 * with 200: count_tokens, Ollama's load request) with a NULL job. */
static kw_job *parse_route(kw_server *s, conn *c, char **now, kw_http_error *e) {
    const char *body = c->body.p ? c->body.p : "";
    size_t len = c->body.len;
    const char *model = s->alias ? s->alias : s->engine->model_id;
    switch (c->rt) {
    case R_MESSAGES: return kw_anthropic_parse(s, s->engine, &s->tpl, false, body, len, model, e);
    case R_COUNT_TOKENS: {
        kw_job *j = kw_anthropic_parse(s, s->engine, &s->tpl, true, body, len, model, e);
        if (j) { *now = kw_anthropic_count_json(j); kw_job_free(j); }
        if (j && !*now) kw_http_error_set(e, 500, NULL, NULL, "out of memory");
        return NULL;
    }
    case R_RESPONSES: return kw_responses_parse(s, s->engine, &s->tpl, body, len, model, e);
    case R_OLLAMA_CHAT: case R_OLLAMA_GENERATE:
        return kw_ollama_parse(s, s->engine, &s->tpl, c->rt == R_OLLAMA_CHAT, body, len, model, now, e);
    default: return kw_openai_parse(s, s->engine, &s->tpl, c->rt == R_CHAT, body, len, model, e);
    }
}

/* parse_route under this thread's request budget (--request-memory, memory.h):
 * the JSON tree (its bound charged up front, kw_json_tree_bound), the
 * template's arena and the tokenizer's tables count against it, so one
 * request's handling never holds more than the ledger reserved for its
 * thread. Past it: 413 naming the setting. */
static kw_job *parse_in_budget(kw_server *s, conn *c, char **now, kw_http_error *e) {
    kw_mem_budget_open(s->o.request_memory_bytes);
    uint64_t tree = kw_json_tree_bound(c->body.p ? c->body.p : "", c->body.len), gen;
    kw_job *j = kw_mem_budget_take(tree, &gen) == 0 ? parse_route(s, c, now, e) : NULL;
    kw_mem_budget_stats st;
    kw_mem_budget_close(&st);
    c->req_mem_peak = st.peak ? st.peak : tree;
    if (!j && !*now && st.exceeded) {
        char cap[32], need[32];
        *e = (kw_http_error){0};
        kw_http_error_set(e, 413, NULL, "request_too_large",
                          "handling this request needs more than the %s one HTTP thread may use for it (--request-memory; "
                          "its JSON alone takes about %s): send a smaller body, or raise --request-memory",
                          kw_format_bytes(st.cap, cap, sizeof cap), kw_format_bytes(tree, need, sizeof need));
    }
    return j;
}

static enum MHD_Result start_generation(kw_server *s, struct MHD_Connection *mc, conn *c) {
    kw_http_error e = {0};
    const kw_api *api = route_api(c->rt);
    pthread_rwlock_rdlock(&s->lk);
    if (s->stopping || !s->engine) {
        pthread_rwlock_unlock(&s->lk);
        return send_err_as(s, mc, api, 503, s->stopping ? "shutting_down" : "model_loading",
                           s->stopping ? "the server is shutting down" : "the model is still loading");
    }
    __atomic_add_fetch(&s->n_requests, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->n_api[c->rt == R_COUNT_TOKENS ? KW_API_COUNT_TOKENS : api->index], 1, __ATOMIC_RELAXED);
    char *now = NULL;
    kw_job *j = parse_in_budget(s, c, &now, &e);
    body_release(s, c);               /* parsed or refused: its bytes go back to the bodies' allowance now,
                                       * not when MHD reports the request done (the client may send its
                                       * next body first) */
    if (!j) {
        pthread_rwlock_unlock(&s->lk);
        if (now) {
            __atomic_add_fetch(&s->n_ok, 1, __ATOMIC_RELAXED);
            return send_body(s, mc, 200, "application/json", now);
        }
        if (e.code && !strcmp(e.code, "context_length_exceeded")) __atomic_add_fetch(&s->n_rej_ctx, 1, __ATOMIC_RELAXED);
        if (e.code && !strcmp(e.code, "request_exceeds_memory")) __atomic_add_fetch(&s->n_rej_never, 1, __ATOMIC_RELAXED);
        if (e.stream_failure && api->stream_error) {
            c->phase = 2;
            return send_body(s, mc, 200, api->stream_type, api->stream_error(&e));
        }
        return send_error_as(s, mc, api, &e);
    }
    note_routing_keys(mc, j);
    j->mc = mc;
    j->req.tag = j->api->name;        /* shown by GET /v1/requests */
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->req.client_fd = ci ? ci->connect_fd : -1;
    j->req.on_event = job_on_event;
    j->refs = 2;
    j->suspended = true;              /* suspended below, before the engine can wake it */
    __atomic_add_fetch(&s->n_jobs, 1, __ATOMIC_ACQ_REL);
    c->j = j;
    c->phase = 1;
    pthread_mutex_lock(&j->mu);
    MHD_suspend_connection(mc);
    kw_err err = {{0}};
    int rc = kw_sched_submit(s->sched, &j->req, &err);
    pthread_mutex_unlock(&j->mu);
    pthread_rwlock_unlock(&s->lk);
    if (rc != 0) {
        /* never reached the scheduler: finish it here so the resume path answers (503) */
        pthread_mutex_lock(&j->mu);
        j->finished = true;
        j->finish = KW_FINISH_REJECTED;
        j->reason = (kw_reject_reason)rc;
        snprintf(j->error, sizeof j->error, "%s", err.msg);
        j->suspended = false;
        pthread_mutex_unlock(&j->mu);
        MHD_resume_connection(mc);
        job_unref(j);
    }
    return MHD_YES;
}

/* Called again after the engine resumed the connection. */
static enum MHD_Result continue_generation(kw_server *s, struct MHD_Connection *mc, conn *c) {
    kw_job *j = c->j;
    pthread_mutex_lock(&j->mu);
    if (j->stream && j->admitted) {
        pthread_mutex_unlock(&j->mu);
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, j, NULL);
        if (!r) return MHD_NO;
        MHD_add_response_header(r, "Content-Type", j->api->stream_type);
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        MHD_add_response_header(r, "X-Accel-Buffering", "no");
        add_cors(s, mc, r);
        enum MHD_Result rc = MHD_queue_response(mc, 200, r);
        MHD_destroy_response(r);
        c->phase = 2;
        return rc;
    }
    if (!j->finished) {               /* spurious wake-up: wait again */
        j->suspended = true;
        MHD_suspend_connection(mc);
        pthread_mutex_unlock(&j->mu);
        return MHD_YES;
    }
    kw_finish f = j->finish;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", j->error[0] ? j->error : "request cancelled");
    pthread_mutex_unlock(&j->mu);
    c->phase = 2;
    if (f == KW_FINISH_ERROR || f == KW_FINISH_CANCELLED || f == KW_FINISH_REJECTED) {
        kw_http_error e = {0};
        j->api->reason_error(f, j->reason, msg, &e);
        return send_error_as(s, mc, j->api, &e);
    }
    return send_body(s, mc, 200, "application/json", j->api->final_json(j));
}

/* ---- the access handler ------------------------------------------------- */

/* The model file's path (GET /v1/config's "model"), "" when unknown or the
 * stub engine serves. Call with s->lk held. */
static void model_path(kw_server *s, char *buf, size_t cap) {
    buf[0] = 0;
    cJSON *cfg = s->config_json ? cJSON_Parse(s->config_json) : NULL;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(cfg, "model");
    if (cJSON_IsString(m) && m->valuestring[0] != '(') snprintf(buf, cap, "%s", m->valuestring);
    cJSON_Delete(cfg);
}

/* GET /v1/memory (JSON) and GET /metrics (Prometheus text): the budget, the
 * kernel's figures, the KV pool and prompt cache, request counters. */
static enum MHD_Result send_memory(kw_server *s, struct MHD_Connection *mc, route rt, const kw_sched_stats *st) {
    kw_memview_counters c = {0};
    c.requests_total = __atomic_load_n(&s->n_requests, __ATOMIC_RELAXED);
    c.requests_ok = __atomic_load_n(&s->n_ok, __ATOMIC_RELAXED);
    for (int k = 0; k < KW_REJECT_REASON_COUNT; k++) c.rejected[k] = st->rejected[k];
    c.rejected[KW_REJECT_NEVER_FITS] += __atomic_load_n(&s->n_rej_never, __ATOMIC_RELAXED);
    c.rejected[KW_REJECT_CONTEXT] += __atomic_load_n(&s->n_rej_ctx, __ATOMIC_RELAXED);
    c.prompt_tokens = st->prompt_tokens;
    c.cached_tokens = st->cached_tokens;
    c.completion_tokens = st->tokens_generated;
    c.queue_depth = st->waiting;
    c.active = st->active;
    static const char *const api_names[KW_API_COUNT] = {"chat", "completion", "messages", "count_tokens", "responses",
                                                        "ollama_chat", "ollama_generate"};
    uint64_t api_requests[KW_API_COUNT];
    for (int k = 0; k < KW_API_COUNT; k++) api_requests[k] = __atomic_load_n(&s->n_api[k], __ATOMIC_RELAXED);
    c.api_names = api_names;
    c.api_requests = api_requests;
    c.n_api = KW_API_COUNT;
    kw_footprint f;
    bool have_f = kw_footprint_read(&f, NULL) == 0;
    pthread_rwlock_rdlock(&s->lk);
    const kw_engine *eng = !s->stopping ? s->engine : NULL;
    char *body = rt == R_MEMORY ? kw_memview_json(eng, s->o.ledger, have_f ? &f : NULL, &c)
                                : kw_memview_metrics(eng, s->o.ledger, have_f ? &f : NULL, &c);
    pthread_rwlock_unlock(&s->lk);
    if (!body) return send_err(s, mc, 500, "internal_error", "out of memory");
    return send_body(s, mc, 200, rt == R_MEMORY ? "application/json" : "text/plain; version=0.0.4", body);
}

/* GET /v1/requests: the scheduler's running and waiting requests. */
static enum MHD_Result send_requests(kw_server *s, struct MHD_Connection *mc) {
    enum { MAX_SHOWN = 256 };
    kw_sched_req_info *r = malloc(sizeof *r * MAX_SHOWN);
    if (!r) return send_err(s, mc, 500, "internal_error", "out of memory");
    pthread_rwlock_rdlock(&s->lk);
    int n = s->sched && !s->stopping ? kw_sched_list(s->sched, r, MAX_SHOWN) : 0;
    pthread_rwlock_unlock(&s->lk);
    char *b = kw_memview_requests_json(r, n, now_s());
    free(r);
    if (!b) return send_err(s, mc, 500, "internal_error", "out of memory");
    return send_body(s, mc, 200, "application/json", b);
}

/* The memory page's files. The page holds no data (it reads the API with
 * the key the user types), so it needs no key; the headers keep it to its
 * own files (no inline script, no other origin, no framing). */
static enum MHD_Result send_ui(kw_server *s, struct MHD_Connection *mc, const char *url) {
    const kw_ui_asset *a = kw_ui_find(url);
    if (!a) return send_err(s, mc, 404, "not_found", "not found");
    struct MHD_Response *r = MHD_create_response_from_buffer(a->len, (void *)a->data, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", kw_ui_type(a));
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                            "img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    enum MHD_Result rc = MHD_queue_response(mc, 200, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result handle_get(kw_server *s, struct MHD_Connection *mc, route rt) {
    pthread_rwlock_rdlock(&s->lk);
    bool ready = s->engine && !s->stopping;
    char *cfg = strdup(s->config_json ? s->config_json : "{}");
    kw_sched_stats st = {0};
    if (ready && s->sched) st = kw_sched_get_stats(s->sched);
    char model[160];
    snprintf(model, sizeof model, "%s", s->alias ? s->alias : s->engine ? s->engine->model_id : "loading");
    char path[1024] = "";
    if (rt == R_OLLAMA_TAGS) model_path(s, path, sizeof path);
    pthread_rwlock_unlock(&s->lk);
    if (rt != R_CONFIG) free(cfg);
    switch (rt) {
    case R_HEALTH: {
        kw_sbuf b = {0};
        if (ready)
            kw_sbuf_printf(&b, "{\"status\":\"ok\",\"slots_active\":%d,\"queued\":%d,\"requests_done\":%llu,"
                           "\"steps\":%llu,\"tokens_generated\":%llu,\"tokens_prefilled\":%llu,"
                           "\"grammar_tokens\":%llu,\"grammar_closing_tokens\":%llu,"
                           "\"forward_seconds\":%.3f,\"step_seconds\":%.3f,\"connections_open\":%d,"
                           "\"connections_refused\":%llu}",
                           st.active, st.waiting, (unsigned long long)st.requests_done, (unsigned long long)st.steps,
                           (unsigned long long)st.tokens_generated, (unsigned long long)st.tokens_prefilled,
                           (unsigned long long)st.grammar_tokens, (unsigned long long)st.grammar_closing_tokens,
                           st.forward_seconds, st.step_seconds, __atomic_load_n(&s->n_conns, __ATOMIC_ACQUIRE),
                           (unsigned long long)__atomic_load_n(&s->n_conns_refused, __ATOMIC_RELAXED));
        else
            kw_sbuf_puts(&b, s->stopping ? "{\"status\":\"stopping\"}" : "{\"status\":\"loading\"}");
        return send_body(s, mc, ready ? 200 : 503, "application/json", kw_sbuf_take(&b));
    }
    case R_MODELS:
        if (!ready) return send_err(s, mc, 503, "model_loading", "the model is still loading");
        return send_body(s, mc, 200, "application/json", kw_openai_models_json(model, s->started));
    case R_CONFIG:
        return send_body(s, mc, 200, "application/json", cfg);
    case R_OLLAMA_VERSION:
        return send_body(s, mc, 200, "application/json", kw_ollama_version_json());
    case R_OLLAMA_TAGS: {
        if (!ready) return send_err_as(s, mc, &kw_api_ollama_chat, 503, "model_loading", "the model is still loading");
        return send_body(s, mc, 200, "application/json", kw_ollama_tags_json(model, path[0] ? path : NULL, s->started));
    }
    case R_MEMORY:
    case R_METRICS:
        return send_memory(s, mc, rt, &st);
    case R_HISTORY: {
        const char *since = MHD_lookup_connection_value(mc, MHD_GET_ARGUMENT_KIND, "since");
        if (!s->hist) return send_err(s, mc, 503, "no_history", "no memory budget to sample");
        char *b = kw_history_json(s->hist, since ? strtod(since, NULL) : 0);
        if (!b) return send_err(s, mc, 500, "internal_error", "out of memory");
        return send_body(s, mc, 200, "application/json", b);
    }
    case R_REQUESTS:
        return send_requests(s, mc);
    default:
        return send_err(s, mc, 404, "not_found", "not found");
    }
}

/* POST /api/show: the model's details for Ollama clients. */
static enum MHD_Result handle_show(kw_server *s, struct MHD_Connection *mc, conn *c) {
    kw_http_error e = {0};
    pthread_rwlock_rdlock(&s->lk);
    if (s->stopping || !s->engine) {
        pthread_rwlock_unlock(&s->lk);
        body_release(s, c);
        return send_err_as(s, mc, &kw_api_ollama_chat, 503, "model_loading", "the model is still loading");
    }
    char path[1024];
    model_path(s, path, sizeof path);
    char *body = kw_ollama_show_json(s->alias ? s->alias : s->engine->model_id, path[0] ? path : NULL,
                                     s->engine->chat_template, s->engine->n_ctx, c->body.p ? c->body.p : "",
                                     c->body.len, &e);
    pthread_rwlock_unlock(&s->lk);
    body_release(s, c);
    if (!body) return send_error_as(s, mc, &kw_api_ollama_chat, &e);
    return send_body(s, mc, 200, "application/json", body);
}

static enum MHD_Result preflight(kw_server *s, struct MHD_Connection *mc) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    add_cors(s, mc, r);
    const char *origin = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Origin");
    if (origin_allowed(s, origin)) {
        const char *want = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(r, "Access-Control-Allow-Headers", want ? want : "Authorization, Content-Type");
        MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    }
    MHD_add_response_header(r, "Allow", "GET, POST, OPTIONS");
    enum MHD_Result rc = MHD_queue_response(mc, 204, r);
    MHD_destroy_response(r);
    return rc;
}

/* The connection's slot in the table (guard.h), or NULL. */
static kw_conn_slot *conn_slot(kw_server *s, struct MHD_Connection *mc) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci && ci->socket_context != (void *)s ? (kw_conn_slot *)ci->socket_context : NULL;
}

/* A body over --max-body: 413, answered at once and followed by a bounded
 * drain. libmicrohttpd can only answer once it has read a request, so the
 * 413 is written to the socket here, ahead of it (nothing else has been
 * written on this connection yet), with Connection: close; then the rest of
 * the body is read and dropped, up to KW_SERVER_DRAIN_FACTOR x --max-body
 * bytes or the body deadline, so a client still writing its body (most
 * write it all before they read) does not meet a reset, and the connection
 * is closed. A client that asked for "Expect: 100-continue" has not sent
 * its body: it gets the 413 through libmicrohttpd and sends nothing. */
static enum MHD_Result send_413(kw_server *s, struct MHD_Connection *mc, conn *c, const char *declared) {
    kw_http_error e = {0};
    c->phase = 2;
    if (declared)
        kw_http_error_set(&e, 413, NULL, "request_too_large", "request body of %s bytes exceeds the limit of %llu bytes "
                          "(--max-body)", declared, (unsigned long long)s->o.max_body_bytes);
    else
        kw_http_error_set(&e, 413, NULL, "request_too_large", "request body exceeds the limit of %llu bytes (--max-body)",
                          (unsigned long long)s->o.max_body_bytes);
    const char *expect = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Expect");
    if (expect && !strcasecmp(expect, "100-continue")) return send_error_as(s, mc, route_api(c->rt), &e);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    char *body = route_api(c->rt)->error_json(&e);
    const char *origin = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Origin");
    kw_sbuf r = {0};
    kw_sbuf_printf(&r, "HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                   "Connection: close\r\n", body ? strlen(body) : 2);
    if (origin_allowed(s, origin))
        kw_sbuf_printf(&r, "Access-Control-Allow-Origin: %s\r\nVary: Origin\r\n", !strcmp(s->origins, "*") ? "*" : origin);
    kw_sbuf_printf(&r, "\r\n%s", body ? body : "{}");
    free(body);
    ssize_t w = ci && !r.oom ? send(ci->connect_fd, r.p, r.len, MSG_NOSIGNAL) : -1;
    bool sent = w == (ssize_t)r.len;
    kw_sbuf_free(&r);
    uint64_t cl = content_length(mc);
    if (!sent) return send_error_as(s, mc, route_api(c->rt), &e);  /* could not write ahead: the plain way */
    if (declared && cl > s->o.max_body_bytes * KW_SERVER_DRAIN_FACTOR) return MHD_NO;   /* too much to drain: close */
    c->draining = true;
    return MHD_YES;
}

/* The rest of a body after its 413: dropped; the connection closes at its
 * end, at the drain bound or at the body deadline. */
static enum MHD_Result drain(kw_server *s, struct MHD_Connection *mc, conn *c, size_t n) {
    c->drained += n;
    if (!n || c->drained > s->o.max_body_bytes * KW_SERVER_DRAIN_FACTOR) return MHD_NO;
    return kw_conntab_body_late(&s->tab, conn_slot(s, mc)) ? MHD_NO : MHD_YES;
}

/* What a request must pass before anything is read (guard.h): the Host it
 * names when no key is set (DNS rebinding), and for a POST a JSON body and
 * no foreign browser Origin (any_host: /health, which says nothing a page
 * could use, answers any Host). true + *rc when it is refused. */
static bool refuse_early(kw_server *s, struct MHD_Connection *mc, conn *c, bool is_post, bool any_host,
                         enum MHD_Result *rc) {
    const char *host = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Host");
    const kw_api *api = route_api(c->rt);
    if (!s->api_key && !any_host && !kw_guard_host_ok(host, s->host, s->allowed_hosts)) {
        c->phase = 2;
        *rc = send_err_as(s, mc, api, 403, "host_not_allowed", "this server answers only requests naming it by an IP "
                          "address, localhost or its --host (or --allowed-hosts) when it has no --api-key");
        return true;
    }
    if (!is_post) return false;
    const char *origin = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Origin");
    if (!kw_guard_origin_ok(origin, host, s->origins)) {
        c->phase = 2;
        *rc = send_err_as(s, mc, api, 403, "origin_not_allowed", "a POST from a web page of another origin is refused "
                          "(list it in --allowed-origins)");
        return true;
    }
    if (!kw_guard_is_json(MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Content-Type"))) {
        c->phase = 2;
        *rc = send_err_as(s, mc, api, 415, "unsupported_media_type",
                          "the request body must be JSON, sent with 'Content-Type: application/json'");
        return true;
    }
    return false;
}

/* Body bytes: kept within --max-body and the bodies' allowance, and within
 * the body deadline; a body over the limit is answered 413 at once. */
static enum MHD_Result on_upload(kw_server *s, struct MHD_Connection *mc, conn *c, const char *upload, size_t *upload_size) {
    size_t n = *upload_size;
    *upload_size = 0;
    if (c->no_room) return MHD_YES;                 /* drained and dropped: 503 at the end */
    if (c->body.len + n > s->o.max_body_bytes) {
        body_release(s, c);
        return send_413(s, mc, c, NULL);
    }
    if (kw_conntab_body_late(&s->tab, conn_slot(s, mc))) {
        body_release(s, c);
        c->phase = 2;
        return send_err_as(s, mc, route_api(c->rt), 408, "request_timeout", "the request body did not arrive within "
                           "--body-timeout");
    }
    if (body_append(s, c, upload, n, content_length(mc)) < 0) {
        c->no_room = true;
        body_release(s, c);
    }
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    kw_server *s = cls;
    conn *c = *con_cls;
    if (!c) {                                        /* first call: headers only */
        c = calloc(1, sizeof *c);
        if (!c) return MHD_NO;
        c->t0 = now_s();
        *con_cls = c;
        bool want_post = false, is_post = !strcmp(method, "POST");
        c->rt = route_of(url, &want_post);
        kw_conntab_set(&s->tab, conn_slot(s, mc), is_post ? KW_CONN_BODY : KW_CONN_BUSY);
        enum MHD_Result rc;
        if (refuse_early(s, mc, c, is_post && want_post, c->rt == R_HEALTH, &rc)) return rc;
        if (!strcmp(method, "OPTIONS")) { c->phase = 2; return preflight(s, mc); }
        if (c->rt != R_HEALTH && c->rt != R_UI && !auth_ok(s, mc)) {
            c->phase = 2;
            return send_err_as(s, mc, route_api(c->rt), 401, "invalid_api_key",
                               "invalid or missing API key (Authorization: Bearer ... or x-api-key: ...)");
        }
        if (c->rt == R_NONE) { c->phase = 2; return send_err(s, mc, 404, "not_found", "no such endpoint"); }
        if (is_post != want_post || (!is_post && strcmp(method, "GET") && strcmp(method, "HEAD"))) {
            c->phase = 2;
            return send_err_as(s, mc, route_api(c->rt), 405, "method_not_allowed", "method not allowed on this endpoint");
        }
        const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->o.max_body_bytes) return send_413(s, mc, c, cl);
        return MHD_YES;
    }
    if (c->draining) { size_t n = *upload_size; *upload_size = 0; return drain(s, mc, c, n); }
    if (c->phase == 2) { *upload_size = 0; return MHD_YES; }
    if (*upload_size) return on_upload(s, mc, c, upload, upload_size);
    kw_conntab_set(&s->tab, conn_slot(s, mc), KW_CONN_BUSY);
    if (c->phase == 1) return continue_generation(s, mc, c);
    if (c->no_room) {
        c->phase = 2;
        return send_err(s, mc, 503, "out_of_memory", "no room in --memory-limit for this request body now; retry later");
    }
    if (c->rt >= R_CHAT) return start_generation(s, mc, c);
    c->phase = 2;
    if (c->rt == R_OLLAMA_SHOW) return handle_show(s, mc, c);
    if (c->rt == R_UI) return send_ui(s, mc, url);
    return handle_get(s, mc, c->rt);
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls, enum MHD_RequestTerminationCode toe) {
    kw_server *s = cls;
    conn *c = *con_cls;
    kw_conntab_set(&s->tab, conn_slot(s, mc), KW_CONN_IDLE);    /* keep-alive until its next request */
    if (!c) return;
    if (c->j) {
        kw_job *j = c->j;
        pthread_mutex_lock(&j->mu);
        j->http_gone = true;
        bool cancel = !j->finished;
        pthread_mutex_unlock(&j->mu);
        if (cancel) {
            pthread_rwlock_rdlock(&s->lk);
            if (!s->stopping && s->sched) kw_sched_cancel(s->sched, &j->req);
            pthread_rwlock_unlock(&s->lk);
        }
        if (!cancel && (j->finish == KW_FINISH_STOP || j->finish == KW_FINISH_LENGTH))
            __atomic_add_fetch(&s->n_ok, 1, __ATOMIC_RELAXED);
        fprintf(stderr, "%s %s prompt=%d cached=%d completion=%d finish=%s%s req_mem=%.0fKiB%s%s %.0f ms\n",
                j->api->name, j->stream ? "stream" : "json", j->prompt_tokens,
                j->cached_tokens, j->completion_tokens, cancel ? "cancelled" : kw_openai_finish_reason(j),
                j->log_note, (double)c->req_mem_peak / 1024.0, j->route_note, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (client gone)", (now_s() - c->t0) * 1e3);
        job_unref(j);
    }
    body_release(s, c);
    free(c);
    *con_cls = NULL;
}

/* ---- connection limit ---------------------------------------------------
 * --max-connections is a memory line (ledger "connections"), so it is exact
 * across MHD's worker threads: a connection takes a place when accepted
 * (accept policy: one atomic add) and gives it back when MHD reports it
 * closed. When the table is full, the oldest connection that holds no
 * request (idle keep-alive, or headers still coming) is shut down to make
 * room (guard.h: at most KW_SERVER_SHED_MARGIN such places are lent at once,
 * and the connections line counts them); only when every connection carries
 * a request is the new one closed at accept. MHD's own limit is set above
 * ours so a full server closes new connections at once instead of leaving
 * them in the kernel's accept queue. (If MHD failed to set up an accepted
 * connection, out of memory, its place would stay taken.) */

static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen) {
    (void)addr; (void)addrlen;
    kw_server *s = cls;
    int n = __atomic_add_fetch(&s->n_conns, 1, __ATOMIC_ACQ_REL);
    if (n <= s->o.max_connections || kw_conntab_make_room(&s->tab, n - 1, s->o.max_connections)) return MHD_YES;
    __atomic_sub_fetch(&s->n_conns, 1, __ATOMIC_ACQ_REL);
    __atomic_add_fetch(&s->n_conns_refused, 1, __ATOMIC_RELAXED);
    return MHD_NO;
}

/* TCP keepalive on a client socket: a peer that vanished (its socket closed
 * and gone, its machine down) makes the socket fail within a minute or so,
 * which cancels its request (the scheduler polls for POLLERR / POLLHUP); a
 * peer that only half-closed keeps answering the probes. */
static void set_keepalive(int fd) {
    int on = 1, idle = 15, intvl = 5, cnt = 3;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
}

/* socket_ctx: the connection's slot in the table; s when it holds a place
 * but has no slot (cannot happen: the table is as large as MHD's limit). */
static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_ctx, enum MHD_ConnectionNotificationCode code) {
    kw_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        int fd = ci ? ci->connect_fd : -1;
        kw_conn_slot *slot = fd >= 0 ? kw_conntab_add(&s->tab, fd) : NULL;
        if (fd >= 0) set_keepalive(fd);
        *socket_ctx = slot ? (void *)slot : (void *)s;                  /* holds a place */
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED && *socket_ctx) {
        if (*socket_ctx != s) kw_conntab_remove(&s->tab, *socket_ctx);  /* before MHD closes the fd */
        *socket_ctx = NULL;
        __atomic_sub_fetch(&s->n_conns, 1, __ATOMIC_ACQ_REL);
    }
}

/* ---- lifecycle ---------------------------------------------------------- */

static int resolve_host(const char *host, int port, struct sockaddr_storage *ss, kw_err *err) {
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc != 0 || !res) return kw_err_set(err, "--host '%s': %s", host, gai_strerror(rc));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return 0;
}

/* The byte a signal writes to the pipe: 'x' stop, 'h' reload, 'm' print the
 * memory table, 'i' ignored (logged). */
static void on_signal(int sig) {
    const char *b = sig == SIGHUP ? "h" : sig == SIGUSR1 ? "m" : sig == SIGUSR2 ? "i" : "x";
    if (sig_pipe[1] >= 0) { ssize_t w = write(sig_pipe[1], b, 1); (void)w; }
}

/* SIGTERM/SIGINT/SIGHUP/SIGUSR1/SIGUSR2 only write a byte to a pipe that
 * kw_server_wait reads (on_signal). None of the signals a user sends by
 * accident kills the server: SIGHUP (a closed ssh session) runs the reload
 * hook, SIGUSR1 prints the memory table, SIGUSR2 is logged and ignored;
 * only SIGTERM and SIGINT stop it, cleanly. Installed when the server
 * starts, so a signal during model loading is remembered (acted on once
 * loading ends). */
static int install_signals(void) {
    if (sig_pipe[0] < 0 && pipe(sig_pipe) < 0) return -1;
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
    return 0;
}

static char *dup_or_null(const char *s) { return s && *s ? strdup(s) : NULL; }

kw_server *kw_server_start(const kw_server_opts *o, kw_err *err) {
    kw_server *s = calloc(1, sizeof *s);
    if (!s) { kw_err_set(err, "server: out of memory"); return NULL; }
    s->o = *o;
    snprintf(s->host, sizeof s->host, "%s", o->host && *o->host ? o->host : "127.0.0.1");
    s->api_key = dup_or_null(o->api_key);
    s->origins = dup_or_null(o->allowed_origins);
    s->config_json = dup_or_null(o->config_json);
    s->alias = dup_or_null(o->model_alias);
    s->allowed_hosts = dup_or_null(o->allowed_hosts);
    if (!s->o.max_body_bytes) s->o.max_body_bytes = KW_SERVER_DEFAULT_MAX_BODY;
    if (!s->o.request_memory_bytes) s->o.request_memory_bytes = KW_SERVER_DEFAULT_REQUEST_MEMORY;
    if (s->o.http_threads < 1) s->o.http_threads = KW_SERVER_DEFAULT_HTTP_THREADS;
    if (s->o.max_connections < 1) s->o.max_connections = KW_SERVER_DEFAULT_MAX_CONNECTIONS;
    /* MHD splits the limit over its worker threads: each needs at least one */
    if (s->o.max_connections < s->o.http_threads) s->o.http_threads = s->o.max_connections;
    if (s->o.header_timeout_s < 1) s->o.header_timeout_s = KW_SERVER_DEFAULT_HEADER_TIMEOUT;
    if (s->o.body_timeout_s < 1) s->o.body_timeout_s = KW_SERVER_DEFAULT_BODY_TIMEOUT;
    s->started = (long)time(NULL);
    int mhd_limit = s->o.max_connections + KW_SERVER_SHED_MARGIN + s->o.http_threads;
    if (kw_conntab_init(&s->tab, mhd_limit, s->o.header_timeout_s, s->o.body_timeout_s) < 0) {
        kw_err_set(err, "server: out of memory");
        free(s->api_key); free(s->origins); free(s->config_json); free(s->alias); free(s->allowed_hosts);
        free(s);
        return NULL;
    }
    pthread_rwlock_init(&s->lk, NULL);
    if (o->ledger) s->hist = kw_history_start(o->ledger, KW_HISTORY_INTERVAL_S, KW_HISTORY_CAPACITY);
    signal(SIGPIPE, SIG_IGN);
    install_signals();
    struct sockaddr_storage ss;
    if (resolve_host(s->host, o->port, &ss, err) < 0) { kw_server_stop(s); return NULL; }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME;
    if (ss.ss_family == AF_INET6) flags |= MHD_USE_IPv6;
    s->d = MHD_start_daemon(flags, (uint16_t)o->port, on_accept, s, on_request, s,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned)s->o.http_threads,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(o->timeout_s > 0 ? o->timeout_s : 600),
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)mhd_limit,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)(o->max_client_connections > 0 ? o->max_client_connections : 0),
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)KW_SERVER_CONN_POOL_BYTES,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                            MHD_OPTION_END);
    if (!s->d) {
        kw_err_set(err, "cannot listen on %s:%d: %s", s->host, o->port, strerror(errno ? errno : EADDRINUSE));
        kw_server_stop(s);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : o->port;
#ifdef KW_TESTCTL
    s->replay = kw_testctl_replay(NULL);
    if (s->replay) kw_replay_plug(true);          /* serve --test-replay: its sampler (test builds) */
#endif
    return s;
}

int kw_server_port(const kw_server *s) { return s->port; }

/* The chat template's defuse (chat_template.h) over the engine's tokenizer. */
static int engine_defuse(void *ctx, const char *s, size_t len, char **out, size_t *out_len) {
    kw_engine *e = ctx;
    return e->defuse(e, s, len, out, out_len);
}

int kw_server_set_engine(kw_server *s, kw_engine *e, kw_sched *sched, char *note, size_t note_cap, kw_err *err) {
    kw_chat_template t;
    char n[256];
    if (kw_chat_template_choose2(&t, s->o.chat_template, e->chat_template, e->bos_text, e->eos_text,
                                 n, sizeof n, err) < 0) return -1;
    if (e->defuse) { t.defuse = engine_defuse; t.defuse_ctx = e; }   /* no role forgery (SECURITY.md) */
    if (note && note_cap) snprintf(note, note_cap, "%s", n);
    pthread_rwlock_wrlock(&s->lk);
    kw_chat_template_free(&s->tpl);     /* the previous template (if any), then the new one */
    s->tpl = t;
    kw_chat_template_describe(&t, s->tpl_desc, sizeof s->tpl_desc);
    s->engine = e;
    s->sched = sched;
    if (!s->gcache) s->gcache = kw_gcache_new(e, s->o.ledger);   /* set once: the engine is attached once */
    pthread_rwlock_unlock(&s->lk);
    return 0;
}

kw_gcache *kw_server_gcache(kw_server *s) { return s ? s->gcache : NULL; }   /* NULL: a job without a server (fuzz, tests) */

const char *kw_server_template_desc(const kw_server *s) { return s->tpl_desc; }

void kw_server_set_config(kw_server *s, const char *json) {
    char *c = dup_or_null(json);
    pthread_rwlock_wrlock(&s->lk);
    free(s->config_json);
    s->config_json = c;
    pthread_rwlock_unlock(&s->lk);
}

void kw_server_on_reload(kw_server *s, void (*fn)(void *ctx), void *ctx) {
    s->on_reload = fn;
    s->reload_ctx = ctx;
}

void kw_server_wait(kw_server *s) {
    if (install_signals() < 0) return;
    for (;;) {
        char ch;
        ssize_t n = read(sig_pipe[0], &ch, 1);
        if (n < 0 && errno == EINTR) continue;
        if (n == 1 && ch == 'h') {
            if (s->on_reload) s->on_reload(s->reload_ctx);
            else fprintf(stderr, "kvwise serve: SIGHUP: nothing to reload\n");
            continue;
        }
        if (n == 1 && ch == 'm') {          /* SIGUSR1: where the memory is, now */
            kw_footprint f;
            fprintf(stderr, "kvwise serve: SIGUSR1: the memory budget now\n");
            if (s->o.ledger) kw_ledger_print(s->o.ledger, kw_footprint_read(&f, NULL) == 0 ? &f : NULL, stderr);
            continue;
        }
        if (n == 1 && ch == 'i') {
            fprintf(stderr, "kvwise serve: SIGUSR2 ignored (SIGTERM or SIGINT stops the server)\n");
            continue;
        }
        return;
    }
}

void kw_server_stop(kw_server *s) {
    if (!s) return;
    if (s->d) {
        MHD_socket ls = MHD_quiesce_daemon(s->d);        /* no new connections */
        if (ls != MHD_INVALID_SOCKET) close(ls);
    }
    pthread_rwlock_wrlock(&s->lk);
    s->stopping = true;
    kw_sched *sched = s->sched;
    s->sched = NULL;
    pthread_rwlock_unlock(&s->lk);
    kw_sched_stop(sched);                                /* every job gets its FINISH */
#ifdef KW_TESTCTL
    if (s->replay) kw_replay_plug(false);
#endif
    for (int i = 0; i < 500 && __atomic_load_n(&s->n_jobs, __ATOMIC_ACQUIRE) > 0; i++) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);                            /* let streams send their last bytes */
    }
    if (s->d) MHD_stop_daemon(s->d);
    kw_gcache_free(s->gcache);                           /* after every job (and its reference) is gone */
    kw_conntab_free(&s->tab);
    kw_history_stop(s->hist);
    pthread_rwlock_destroy(&s->lk);
    kw_chat_template_free(&s->tpl);
    free(s->api_key);
    free(s->origins);
    free(s->config_json);
    free(s->alias);
    free(s->allowed_hosts);
    free(s);
}
