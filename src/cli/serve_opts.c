/* serve_opts.c - the option table of `kvwise serve` (serve_opts.h): every
 * setting's flag name (= its config-file key), /v1/config key, kind and
 * range, whether SIGHUP applies it live; parsing the command line and the
 * config file through the same table, with the source of every value;
 * comparing, copying and printing one option. */
#include "serve_opts.h"
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "kvwise/kv.h"
#include "kvwise/kvmem.h"
#include "kvwise/model.h"
#include "kvwise/server.h"

typedef enum { K_INT, K_BYTES, K_SECS, K_STR, K_SWITCH, K_KVTYPE, K_EXPERTS } opt_kind;

typedef struct opt {
    serve_opt_desc d;
    opt_kind kind;
    size_t off;
    double lo, hi;
} opt;

#define OFF(f) offsetof(serve_opts, f)
static const opt table[] = {
    {{"model", "-m", "model", false}, K_STR, OFF(model), 0, 0},
    {{"host", NULL, "host", false}, K_STR, OFF(host), 0, 0},
    {{"port", NULL, "port", false}, K_INT, OFF(port), 0, 65535},
    {{"api-key", NULL, "api_key_set", false}, K_STR, OFF(api_key), 0, 0},
    {{"allowed-origins", NULL, "allowed_origins", false}, K_STR, OFF(origins), 0, 0},
    {{"max-body", NULL, "max_body_bytes", false}, K_BYTES, OFF(max_body), 1, 0},
    {{"allowed-hosts", NULL, "allowed_hosts", false}, K_STR, OFF(allowed_hosts), 0, 0},
    {{"timeout", NULL, "timeout_s", false}, K_INT, OFF(timeout_s), 1, 86400},
    {{"header-timeout", NULL, "header_timeout_s", false}, K_INT, OFF(header_timeout_s), 1, 86400},
    {{"body-timeout", NULL, "body_timeout_s", false}, K_INT, OFF(body_timeout_s), 1, 86400},
    {{"max-client-connections", NULL, "max_client_connections", false}, K_INT, OFF(max_client_conns), 0, 100000},
    {{"max-connections", NULL, "max_connections", false}, K_INT, OFF(max_conns), 1, 100000},
    {{"http-threads", NULL, "http_threads", false}, K_INT, OFF(http_threads), 1, 64},
    {{"request-memory", NULL, "request_memory_bytes", false}, K_BYTES, OFF(request_memory), 1, 0},
    {{"alias", NULL, "model_id", false}, K_STR, OFF(alias), 0, 0},
    {{"ctx-size", "-c", "ctx_size", false}, K_INT, OFF(ctx_size), 0, 1 << 24},
    {{"chat-template", NULL, "chat_template", false}, K_STR, OFF(chat_template), 0, 0},
    {{"mlock", NULL, "mlock", false}, K_SWITCH, OFF(mlock), 0, 0},
    {{"experts", NULL, "experts", false}, K_EXPERTS, OFF(experts), 0, 0},
    {{"threads", "-t", "threads", false}, K_INT, OFF(threads), 0, 1024},
    {{"decode-concurrency", NULL, "decode_concurrency", false}, K_INT, OFF(decode_conc), 1, 1024},
    {{"prompt-concurrency", NULL, "prompt_concurrency", false}, K_INT, OFF(prompt_conc), 1, 64},
    {{"prefill-step-size", NULL, "prefill_step_size", false}, K_INT, OFF(prefill_step), 1, 1 << 16},
    {{"max-queue", NULL, "max_queue", true}, K_INT, OFF(max_queue), 0, 1 << 20},
    {{"queue-timeout", NULL, "queue_timeout_s", true}, K_SECS, OFF(queue_timeout), 0, 86400},
    {{"memory-limit", NULL, "memory_limit", false}, K_BYTES, OFF(memory_limit), 1, 0},
    {{"prompt-cache-size", NULL, "prompt_cache_size", true}, K_INT, OFF(cache_size), 0, 1 << 20},
    {{"prompt-cache-bytes", NULL, "prompt_cache_bytes", true}, K_BYTES, OFF(cache_bytes), 0, 0},
    {{"checkpoint-interval", NULL, "checkpoint_interval", false}, K_INT, OFF(checkpoint_interval), 0, 1 << 24},
    {{"kv-type", NULL, "kv_type", false}, K_KVTYPE, OFF(kv_type), 0, 0},
    {{"kv-blocks", NULL, "kv_blocks_requested", false}, K_INT, OFF(kv_blocks), 0, 1 << 24},
    {{"kv-block-size", NULL, "kv_block_size", false}, K_INT, OFF(kv_block_tokens), 1, 4096},
};
#define N_OPTS (int)(sizeof table / sizeof table[0])
_Static_assert(N_OPTS <= 64, "serve_settings.src has room for 64 options");

int serve_opt_count(void) { return N_OPTS; }
const serve_opt_desc *serve_opt_at(int i) { return i >= 0 && i < N_OPTS ? &table[i].d : NULL; }

const char *serve_src_name(serve_src s) {
    return s == SERVE_SRC_FLAG ? "flag" : s == SERVE_SRC_CONFIG ? "config" : "default";
}

static void *field(serve_opts *o, int i) { return (char *)o + table[i].off; }
static const void *cfield(const serve_opts *o, int i) { return (const char *)o + table[i].off; }

static void set_defaults(serve_opts *o) {
    *o = (serve_opts){.host = "127.0.0.1", .port = 8080, .decode_conc = 8, .prompt_conc = 1,
                      .prefill_step = 512, .kv_type = "auto", .experts = "first-use", .kv_block_tokens = 32, .timeout_s = 600,
                      .header_timeout_s = KW_SERVER_DEFAULT_HEADER_TIMEOUT, .body_timeout_s = KW_SERVER_DEFAULT_BODY_TIMEOUT,
                      .max_client_conns = -1, .max_conns = KW_SERVER_DEFAULT_MAX_CONNECTIONS,
                      .http_threads = KW_SERVER_DEFAULT_HTTP_THREADS, .max_queue = 64, .max_body = KW_SERVER_DEFAULT_MAX_BODY,
                      .request_memory = KW_SERVER_DEFAULT_REQUEST_MEMORY,
                      .cache_bytes = UINT64_MAX, .cache_size = 4, .queue_timeout = 30,
                      .checkpoint_interval = KW_KVMEM_CHECKPOINT_INTERVAL};
}

/* "kvwise serve: --name" (a flag) or "FILE:LINE: name" (the config file). */
typedef struct origin { const char *file; int line; } origin;

static void say(const origin *w, const opt *p, const char *fmt, const char *detail) {
    if (w->file) fprintf(stderr, "kvwise serve: %s:%d: %s", w->file, w->line, p->d.name);
    else fprintf(stderr, "kvwise serve: --%s", p->d.name);
    fprintf(stderr, fmt, detail);
    fputc('\n', stderr);
}

static int parse_switch(const char *v, bool *out) {
    static const char *const yes[] = {"true", "yes", "on", "1"}, *const no[] = {"false", "no", "off", "0"};
    if (!v) { *out = true; return 0; }
    for (int k = 0; k < 4; k++) {
        if (!strcasecmp(v, yes[k])) { *out = true; return 0; }
        if (!strcasecmp(v, no[k])) { *out = false; return 0; }
    }
    return -1;
}

/* Sets option i from text v (NULL: a switch alone). -1 after a message. */
static int set_value(serve_opts *o, int i, const char *v, const origin *w) {
    const opt *p = &table[i];
    if (p->kind != K_SWITCH && !v) { say(w, p, " needs a value%s", ""); return -1; }
    switch (p->kind) {
    case K_INT: {
        char *end, range[64];
        long x = strtol(v, &end, 10);
        if (!*v || *end || x < (long)p->lo || x > (long)p->hi) {
            snprintf(range, sizeof range, "[%ld, %ld]", (long)p->lo, (long)p->hi);
            say(w, p, " needs an integer in %s", range);
            return -1;
        }
        *(int *)field(o, i) = (int)x;
        return 0;
    }
    case K_BYTES: {
        kw_err err = {{0}};
        uint64_t b = 0;
        if (kw_parse_bytes(v, &b, &err) < 0) { say(w, p, ": %s", err.msg); return -1; }
        if (b < (uint64_t)p->lo) { say(w, p, " must be > 0%s", ""); return -1; }
        *(uint64_t *)field(o, i) = b;
        return 0;
    }
    case K_SECS: {
        char *end, range[64];
        double t = strtod(v, &end);
        if (!*v || *end || !(t >= p->lo && t <= p->hi)) {
            snprintf(range, sizeof range, "[%g, %g]", p->lo, p->hi);
            say(w, p, " needs seconds in %s", range);
            return -1;
        }
        *(double *)field(o, i) = t;
        return 0;
    }
    case K_SWITCH:
        if (parse_switch(v, (bool *)field(o, i)) < 0) { say(w, p, " is a switch: true or false, not '%s'", v); return -1; }
        return 0;
    case K_KVTYPE:
        if (kw_kv_type_from_name(v) < 0 || !strcmp(v, "f32")) { say(w, p, " must be auto, i16, i8, f16 or q8_0%s", ""); return -1; }
        *(const char **)field(o, i) = v;
        return 0;
    case K_EXPERTS:
        if (kw_experts_mode_from_name(v) < 0) { say(w, p, " must be first-use, load or mapped, not '%s'", v); return -1; }
        *(const char **)field(o, i) = v;
        return 0;
    case K_STR:
        *(const char **)field(o, i) = v;
        return 0;
    }
    return -1;
}

/* The option named by a flag ("--ctx-size", "-c"), or -1. */
static int find_flag(const char *a) {
    for (int i = 0; i < N_OPTS; i++) {
        if (a[0] == '-' && a[1] == '-' && !strcmp(a + 2, table[i].d.name)) return i;
        if (table[i].d.alt && !strcmp(a, table[i].d.alt)) return i;
    }
    return -1;
}

static int find_name(const char *name) {
    for (int i = 0; i < N_OPTS; i++) if (!strcmp(name, table[i].d.name)) return i;
    return -1;
}

const char *serve_config_path(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--config")) return i + 1 < argc ? argv[i + 1] : "";
    return NULL;
}

static int apply_file(const kw_conf *conf, const char *path, serve_settings *s) {
    for (int k = 0; k < conf->n; k++) {
        const kw_conf_entry *e = &conf->e[k];
        origin w = {path, e->line};
        int i = find_name(e->key);
        if (i < 0) {
            fprintf(stderr, "kvwise serve: %s:%d: unknown setting '%s' (the names are serve's flags without "
                    "their dashes, see --help)%s\n", path, e->line, e->key,
                    !strcmp(e->key, "config") ? "; a config file cannot name another" : "");
            return -1;
        }
        if (set_value(&s->o, i, e->value, &w) < 0) return -1;
        s->src[i] = SERVE_SRC_CONFIG;
    }
    return 0;
}

int serve_settings_parse(int argc, char **argv, const kw_conf *conf, serve_settings *s) {
    memset(s, 0, sizeof *s);
    set_defaults(&s->o);
    s->o.config_path = serve_config_path(argc, argv);
    if (conf && apply_file(conf, s->o.config_path ? s->o.config_path : "config", s) < 0) return -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--config")) {
            if (!v || !*v) { fprintf(stderr, "kvwise serve: --config needs a FILE\n"); return -1; }
            i++;
            continue;
        }
        int k = find_flag(a);
        if (k >= 0) {
            origin w = {NULL, 0};
            bool sw = table[k].kind == K_SWITCH;
            if (set_value(&s->o, k, sw ? NULL : v, &w) < 0) return -1;
            if (!sw) i++;
            s->src[k] = SERVE_SRC_FLAG;
            continue;
        }
#ifdef KW_TESTCTL
        int rc = serve_test_parse(argc, argv, &i, &s->o.test);
        if (rc < 0) return -1;
        if (rc > 0) continue;
#endif
        fprintf(stderr, "kvwise serve: unknown option '%s' (see --help)\n", a);
        return -1;
    }
    return 0;
}

const char *serve_opt_value(const serve_opts *o, int i, char *buf, size_t cap) {
    const void *f = cfield(o, i);
    char b[32];
    switch (table[i].kind) {
    case K_INT: snprintf(buf, cap, "%d", *(const int *)f); break;
    case K_BYTES: {
        uint64_t v = *(const uint64_t *)f;
        if (v == UINT64_MAX) snprintf(buf, cap, "default");
        else snprintf(buf, cap, "%s (%llu)", kw_format_bytes(v, b, sizeof b), (unsigned long long)v);
        break;
    }
    case K_SECS: snprintf(buf, cap, "%g s", *(const double *)f); break;
    case K_SWITCH: snprintf(buf, cap, "%s", *(const bool *)f ? "true" : "false"); break;
    case K_STR: case K_KVTYPE: case K_EXPERTS: {
        const char *s = *(const char *const *)f;
        if (!strcmp(table[i].d.name, "api-key")) snprintf(buf, cap, "%s", s ? "(set)" : "(none)");
        else snprintf(buf, cap, "%s", s ? s : "(none)");
        break;
    }
    }
    return buf;
}

bool serve_opt_differs(const serve_opts *a, const serve_opts *b, int i) {
    const void *x = cfield(a, i), *y = cfield(b, i);
    switch (table[i].kind) {
    case K_INT: return *(const int *)x != *(const int *)y;
    case K_BYTES: return *(const uint64_t *)x != *(const uint64_t *)y;
    case K_SECS: return *(const double *)x != *(const double *)y;
    case K_SWITCH: return *(const bool *)x != *(const bool *)y;
    case K_STR: case K_KVTYPE: case K_EXPERTS: {
        const char *s = *(const char *const *)x, *t = *(const char *const *)y;
        return (!s != !t) || (s && strcmp(s, t));
    }
    }
    return false;
}

void serve_opt_copy(serve_opts *a, const serve_opts *b, int i) {
    size_t n = table[i].kind == K_INT ? sizeof(int) : table[i].kind == K_BYTES ? sizeof(uint64_t)
             : table[i].kind == K_SECS ? sizeof(double) : table[i].kind == K_SWITCH ? sizeof(bool) : sizeof(char *);
    memcpy(field(a, i), cfield(b, i), n);
}
