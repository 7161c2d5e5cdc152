/* cmd_serve.c - `kvwise serve`: parses the settings (mlx_lm.server names),
 * prints the startup report (every effective setting; the same JSON is
 * served at GET /v1/config), starts listening (GET /health says "loading"
 * while the model loads), loads the engine, starts the scheduler and runs until
 * SIGTERM/SIGINT, then shuts down gracefully and exits 0. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "cli.h"
#include "kvwise/engine.h"
#include "kvwise/kvmem.h"
#include "kvwise/footprint.h"
#include "kvwise/gguf.h"
#include "kvwise/kv.h"
#include "kvwise/ledger.h"
#include "kvwise/plan.h"
#include "kvwise/progress.h"
#include "kvwise/sched.h"
#include "kvwise/server.h"
#include "kvwise/tensor.h"
#include "serve_notify.h"
#include "serve_opts.h"
#ifdef KW_TESTCTL
#include "engine_stub.h"
#endif


/* Does this server run the test stub instead of a model (test builds only)? */
static bool serve_uses_stub(const serve_opts *o) {
#ifdef KW_TESTCTL
    return o->test.stub;
#else
    (void)o;
    return false;
#endif
}

static void usage(FILE *f) {
    fprintf(f,
        "usage: kvwise serve -m MODEL.gguf [options]\n\n"
        "An OpenAI-compatible server (POST /v1/chat/completions, /v1/completions; GET /v1/models,\n"
        "/health, /v1/config, /v1/memory) with continuous batching and chunked prefill. GET / is a\n"
        "live memory page for a browser (docs/SERVER.md).\n\n"
        "configuration (docs/SERVICE.md):\n"
        "  --config FILE            read settings from FILE: one per line, named as these flags without the\n"
        "                           dashes, same units (`prompt-cache-bytes = 4GiB`, `mlock`; '#' comments).\n"
        "                           A flag given here wins over the file, the file over the default;\n"
        "                           GET /v1/config says the source of every value. SIGHUP re-reads FILE:\n"
        "                           --prompt-cache-size, --prompt-cache-bytes (a lower cap evicts at once),\n"
        "                           --max-queue and --queue-timeout apply live; any other change is logged\n"
        "                           as needing a restart and shown in /v1/config (restart_needed)\n"
        "network:\n"
        "  --host ADDR              listen address (default 127.0.0.1; 0.0.0.0 exposes it to the network)\n"
        "  --port N                 TCP port (default 8080; 0 = any free port, printed at startup)\n"
        "  --api-key KEY            require 'Authorization: Bearer KEY' (refused otherwise; /health is open)\n"
        "  --allowed-origins LIST   CORS: comma-separated origins allowed to call from a browser, or '*'.\n"
        "                           A POST from a browser page of another origin is refused (403)\n"
        "  --allowed-hosts LIST     without --api-key, the Host names requests may carry besides IP\n"
        "                           addresses, localhost, *.localhost and --host: comma-separated names,\n"
        "                           '.example.com' for a domain and its subdomains, '*' for any. Others\n"
        "                           get 403 (a web page reaching this port through DNS rebinding)\n"
        "  --max-body BYTES         largest request body (default 16MiB; a larger one is refused). Bodies\n"
        "                           being read or parsed share this many bytes in all (one that does not\n"
        "                           fit beside the others is told to retry: Retry-After); counted in\n"
        "                           --memory-limit\n"
        "  --timeout S              idle connection timeout in seconds (default 600)\n"
        "  --header-timeout S       a new connection must have sent its request headers within S seconds,\n"
        "                           else it is closed (default 10)\n"
        "  --body-timeout S         a request body must have arrived within S seconds of its headers, else\n"
        "                           408 and the connection is closed (default 60)\n"
        "  --max-client-connections N  open connections one client address may hold; more are closed at\n"
        "                           once (default: unlimited on loopback, where every local tool shares\n"
        "                           127.0.0.1; 64 when listening elsewhere; 0 = unlimited)\n"
        "  --max-connections N      open HTTP connections in all, idle keep-alive ones included; more are\n"
        "                           closed at once (default 128: every decode slot + a full queue + some\n"
        "                           idle keep-alive). Each may hold 68 KiB (its 64 KiB buffer pool), so\n"
        "                           N x 68 KiB + --max-body is a line of --memory-limit (\"HTTP connections\")\n"
        "  --http-threads N         HTTP I/O threads (default 2); each parses, renders and tokenizes the\n"
        "                           requests it reads\n"
        "  --request-memory B       what one HTTP thread may hold handling a request: its JSON tree, the\n"
        "                           chat template's context and output, the tokenizer's tables (default\n"
        "                           16MiB; more gets 413 request_too_large). --http-threads x B is part\n"
        "                           of the \"HTTP connections\" line of --memory-limit\n"
        "model and context:\n"
        "  -m, --model PATH         GGUF model file\n"
        "  --alias NAME             model id reported by /v1/models and in responses\n"
        "  --ctx-size N             positions per sequence: prompt + answer (default: the model's, at most\n"
        "                           4096). Set it to the longest real input + answer\n"
        "  --chat-template NAME|FILE  chatml|llama3|llama2|mistral|gemma|phi3, or a file with template text\n"
        "  --mlock                  lock the weights in RAM (mixture-of-experts files: experts stay mapped)\n"
        "  --experts MODE           mixture of experts: first-use (default: an expert is packed for the\n"
        "                           CPU's kernels the first time a token picks it, its mapped pages let go;\n"
        "                           unused experts never become resident), load (every expert packed at\n"
        "                           startup: no first-use pauses, all resident) or mapped (read in place\n"
        "                           from the file: least memory, slower prefill)\n"
        "  -t, --threads N          compute threads (default: physical cores)\n"
        "scheduling (continuous batching):\n"
        "  --decode-concurrency N   sequences decoding together in one batched step (default 8)\n"
        "  --prompt-concurrency N   prompts prefilled in the same step (default 1)\n"
        "  --prefill-step-size N    prompt tokens per prompt per step (default 512); long prompts are\n"
        "                           read in chunks interleaved with decode steps, with progress logged.\n"
        "                           With --prompt-concurrency it sizes the prefill workspace: the\n"
        "                           transient memory a long prompt needs, counted in --memory-limit\n"
        "  --max-queue N            requests waiting for a slot or for memory; one more is told to retry\n"
        "                           later (default 64)\n"
        "  --queue-timeout S        a request waiting longer than S seconds is told to retry later, with\n"
        "                           Retry-After (default 30)\n"
        "memory (one wall: docs/MEMORY.md; GET /v1/config and /v1/memory show what applied):\n"
        "  --memory-limit B         the whole server's budget: resident weights (the mapped file counted\n"
        "                           in full) + live KV + prompt cache + prefill workspace + scratch +\n"
        "                           fixed overhead + HTTP connections (e.g. 24GiB, 512MB, bytes). The kernel-measured peak\n"
        "                           (VmHWM) stays under it. Default: MemAvailable at start minus a\n"
        "                           reserve for the OS (10%%, at least 256 MiB); better: measure what the\n"
        "                           OS and your other apps need at idle and give the server the rest.\n"
        "                           Requests are admitted only when their KV (prompt + max_tokens) fits:\n"
        "                           evict the cache, then queue, then retry later (Retry-After); a request\n"
        "                           that can never fit is refused at once as invalid (docs/SERVER.md has\n"
        "                           the HTTP statuses). The server refuses to start when the\n"
        "                           weights and one full-context sequence do not fit, and says which\n"
        "                           limit would work.\n"
        "  --prompt-cache-size N    COUNT cap: finished sequences kept for prefix reuse (default 4; 0 = no\n"
        "                           cache). A conversation that grew over many turns is 1 sequence. 10\n"
        "                           suits 10 people chatting; a batch pipeline with one shared system\n"
        "                           prompt needs 1 or 2.\n"
        "  --prompt-cache-bytes B   BYTES cap on the same cache: the KV of the cached tokens (`kvwise plan`\n"
        "                           prints bytes per token). Default: what `kvwise plan` recommends for\n"
        "                           these settings, --prompt-cache-size conversations at full context as\n"
        "                           far as the budget left after every slot at full context holds them\n"
        "                           (half the KV pool when not every slot fits). Size it at about one\n"
        "                           longest reused conversation. Both caps hold at every insert,\n"
        "                           whichever binds first; eviction is LRU over conversations and\n"
        "                           keeps a shared system prompt longest. Eviction costs time, never\n"
        "                           quality: an evicted prefix is prefilled again when next used, and\n"
        "                           the model sees the same tokens (no context text is ever cut).\n"
        "  --checkpoint-interval N  Hybrid models (qwen35: recurrent delta-net layers): a cached prefix is\n"
        "                           reusable only up to a saved copy of the recurrent state (a\n"
        "                           checkpoint). One is saved at the end of every prompt and of every\n"
        "                           cached sequence, and one every N prompt tokens of a long prefill\n"
        "                           (default %d; 0 = only the ends). Checkpoints count in both cache caps\n"
        "                           (at most half the bytes, %d per cached sequence); docs/MEMORY.md.\n"
        "KV cache:\n"
        "  --kv-type T              KV element type: auto (default) is i16 where its kernels run (AVX-512\n"
        "                           VNNI or AVX2) and the head dims fit, else f16. i16 (int16 + a scale\n"
        "                           per row) is closer to F32 than f16 and its attention about twice as\n"
        "                           fast, for 3%% more KV bytes. i8 (int8 + a scale per row) about halves\n"
        "                           KV memory (live and cached), not the prefill workspace, with\n"
        "                           q8_0's precision and attention faster than i16 at long context\n"
        "                           (same kernels); q8_0 halves it too, on any CPU, with slow attention\n"
        "                           (measured logit effects: docs/MODEL.md)\n"
        "  --kv-blocks N            KV pool size in blocks, live sequences and prompt cache together\n"
        "                           (default: the plan's, every slot at full context + the cache's\n"
        "                           bytes; at most what --memory-limit leaves after the fixed lines)\n"
        "  --kv-block-size N        positions per KV block (default 32)\n",
        KW_KVMEM_CHECKPOINT_INTERVAL, KW_KVMEM_CHECKPOINTS_PER_SEQ);
#ifdef KW_TESTCTL
    serve_test_usage(f);
#endif
}

static time_t serve_started;        /* when this process started serving (GET /v1/config) */

/* Every effective setting, as served by GET /v1/config and printed at startup. */
static cJSON *config_json(const serve_opts *o, const kw_engine *e, const char *tpl_desc) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "version", KW_VERSION);
    cJSON_AddNumberToObject(c, "pid", (double)getpid());              /* which process answers: a restart changes it */
    cJSON_AddNumberToObject(c, "started_unix", (double)serve_started);
    cJSON_AddStringToObject(c, "model", serve_uses_stub(o) ? "(stub engine)" : o->model);
    cJSON_AddStringToObject(c, "model_id", o->alias ? o->alias : e->model_id);
    cJSON_AddStringToObject(c, "host", o->host);
    cJSON_AddNumberToObject(c, "port", o->port);
    cJSON_AddBoolToObject(c, "api_key_set", o->api_key != NULL);
    cJSON_AddStringToObject(c, "allowed_origins", o->origins ? o->origins : "");
    cJSON_AddNumberToObject(c, "max_body_bytes", (double)o->max_body);
    cJSON_AddNumberToObject(c, "timeout_s", o->timeout_s);
    cJSON_AddNumberToObject(c, "header_timeout_s", o->header_timeout_s);
    cJSON_AddNumberToObject(c, "body_timeout_s", o->body_timeout_s);
    cJSON_AddStringToObject(c, "allowed_hosts", o->allowed_hosts ? o->allowed_hosts : "");
    kw_json_add_nums(c, (kw_json_num[]){
        {"max_client_connections", o->max_client_conns}, {"max_connections", o->max_conns},
        {"connection_bytes", (double)KW_SERVER_CONN_BYTES}, {"connection_shed_margin", KW_SERVER_SHED_MARGIN},
        {"http_threads", o->http_threads}, {"request_memory_bytes", (double)o->request_memory},
        {"ctx_size", e->n_ctx},
        {"decode_concurrency", o->decode_conc < e->n_slots ? o->decode_conc : e->n_slots},
        {"prompt_concurrency", o->prompt_conc}, {"prefill_step_size", o->prefill_step},
        {"max_batch_tokens", e->max_batch}, {"max_queue", o->max_queue}, {NULL, 0}});
    cJSON_AddStringToObject(c, "kv_type", o->kv_type);
    cJSON_AddNumberToObject(c, "kv_block_size", o->kv_block_tokens);
    cJSON_AddNumberToObject(c, "kv_blocks_requested", o->kv_blocks);
    char kv[256];
    e->describe((kw_engine *)e, kv, sizeof kv);
    cJSON_AddStringToObject(c, "kv_pool", kv);
    cJSON_AddStringToObject(c, "chat_template", tpl_desc);
    cJSON_AddBoolToObject(c, "mlock", o->mlock);
    cJSON_AddStringToObject(c, "experts", o->experts);
    cJSON_AddNumberToObject(c, "threads", o->threads);
    cJSON_AddNumberToObject(c, "memory_limit", (double)o->memory_limit);
    cJSON_AddNumberToObject(c, "queue_timeout_s", o->queue_timeout);
#ifdef KW_TESTCTL
    serve_test_config(&o->test, c);
#endif
    int32_t cache_seqs;
    uint64_t cache_bytes;
    if (kw_engine_cache_caps(e, &cache_seqs, &cache_bytes)) {     /* the caps in force, as the cache reports them */
        cJSON_AddNumberToObject(c, "prompt_cache_size", cache_seqs);
        cJSON_AddNumberToObject(c, "prompt_cache_bytes", (double)cache_bytes);
    } else {
        cJSON_AddStringToObject(c, "prompt_cache", "none (this engine keeps no KV)");
    }
    return c;
}

/* The startup report: every value, and where it came from when it is a setting. */
static void print_report(const cJSON *c) {
    fprintf(stderr, "kvwise serve: effective settings\n");
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(c, "sources"), *it;
    cJSON_ArrayForEach(it, c) {
        char v[160];
        if (cJSON_IsString(it)) snprintf(v, sizeof v, "%s", it->valuestring);
        else if (cJSON_IsBool(it)) snprintf(v, sizeof v, "%s", cJSON_IsTrue(it) ? "true" : "false");
        else if (cJSON_IsNumber(it) && it->valuedouble == (double)(int64_t)it->valuedouble)
            snprintf(v, sizeof v, "%lld", (long long)it->valuedouble);
        else if (cJSON_IsNumber(it)) snprintf(v, sizeof v, "%g", it->valuedouble);
        else continue;
        const cJSON *from = cJSON_GetObjectItemCaseSensitive(src, it->string);
        if (cJSON_IsString(from)) fprintf(stderr, "  %-22s %s  (%s)\n", it->string, v, from->valuestring);
        else fprintf(stderr, "  %-22s %s\n", it->string, v);
    }
}

/* Compute threads: --threads, else the physical cores (the workspace's
 * per-thread scratch depends on it, so the plan and the engine use the same). */
static int serve_threads(const serve_opts *o) {
    int n = o->threads > 0 ? o->threads : kw_cpu_physical_cores();
    return n > 0 ? n : 1;
}

/* The shape the plan sizes: the model's metadata and tensor headers (no
 * weight is loaded), or the stub's KV layout in test builds. */
static int read_plan_model(const serve_opts *o, kw_plan_model *m, kw_err *err) {
#ifdef KW_TESTCTL
    if (o->test.stub) { kw_engine_stub_plan_model(m); return 0; }
#endif
    kw_gguf *g = kw_gguf_open(o->model, err);
    if (!g) return -1;
    int rc = kw_plan_model_from_gguf(g, m, err);
    kw_gguf_close(g);
    return rc;
}

/* One plan with the settings serve runs with (plan.h): its context, the
 * decode slots as the plan's concurrency, --prompt-cache-size as the wanted
 * cache, the ledger's measured overhead; then the pool and cache caps the
 * engine gets (kw_plan_serve_sizing), or the startup refusal. */
static int plan_memory(const serve_opts *o, const kw_ledger *led, kw_plan *p, kw_plan_serve *sz, kw_err *err) {
    kw_plan_model m;
    if (read_plan_model(o, &m, err) < 0) return -1;
    kw_plan_opts po;
    kw_plan_opts_default(&po);
    po.memory_limit = o->memory_limit;
    po.ctx = kw_plan_serve_ctx(&m, o->ctx_size);
    po.concurrency = o->decode_conc;
    po.prompt_concurrency = o->prompt_conc;
    po.prefill_step = o->prefill_step;
    po.kv_type = (uint32_t)kw_kv_type_from_name(o->kv_type);
#ifdef KW_TESTCTL
    if (o->test.stub) po.kv_type = kw_engine_stub_kv_layout(o->kv_block_tokens).type;    /* the stub's own */
#endif
    po.block_tokens = o->kv_block_tokens;
    po.n_threads = serve_threads(o);
    po.cache_seqs = o->cache_size;
    po.overhead = kw_ledger_line(led, KW_LEDGER_OVERHEAD);
    po.max_connections = o->max_conns;
    po.max_body = o->max_body;
    po.http_threads = o->http_threads;
    po.request_memory = o->request_memory;
    if (kw_plan_compute(&m, &po, p, err) < 0) return -1;
    kw_plan_serve_opts f = {.kv_blocks = o->kv_blocks, .cache_seqs = o->cache_size, .cache_bytes = o->cache_bytes};
    return kw_plan_serve_sizing(p, &f, sz, err);
}

static kw_engine *make_engine(const serve_opts *o, kw_ledger *led, const kw_plan *p, const kw_plan_serve *sz,
                              kw_err *err) {
    int32_t max_batch = o->decode_conc + o->prompt_conc * o->prefill_step;
#ifdef KW_TESTCTL
    if (o->test.stub) {
        serve_test_engine_opts so = {.n_ctx = p->o.ctx, .n_slots = o->decode_conc, .max_batch = max_batch,
                                     .kv_blocks = sz->kv_blocks, .block_tokens = o->kv_block_tokens,
                                     .cache_max_seqs = sz->cache_max_seqs, .cache_max_bytes = sz->cache_max_bytes,
                                     .ledger = led};
        return serve_test_engine(&o->test, &so, err);
    }
#endif
    kw_engine_model_opts mo = {.model_path = o->model, .n_ctx = p->o.ctx, .n_slots = o->decode_conc,
                               .max_batch = max_batch, .kv_blocks = sz->kv_blocks, .kv_block_tokens = o->kv_block_tokens,
                               .kv_type = p->o.kv_type, .mlock = o->mlock,
                               .experts = (kw_experts_mode)kw_experts_mode_from_name(o->experts), .n_threads = serve_threads(o),
                               .cache_max_seqs = sz->cache_max_seqs, .cache_max_bytes = sz->cache_max_bytes,
                               .ledger = led, .cache_log_interval_s = 10, .checkpoint_interval = o->checkpoint_interval};
    kw_progress prog;
    kw_progress_begin(&prog, stderr, KW_PROGRESS_AUTO, "kvwise serve: loading model", 0, KW_PROGRESS_ITEMS, "layers");
    mo.progress = &prog;
    kw_engine *e = kw_engine_model_create(&mo, err);
    kw_progress_end(&prog, e != NULL);
    return e;
}

/* The budget: --memory-limit or MemAvailable minus a reserve; the fixed
 * overhead of this process (measured now) is its first line, the HTTP
 * connections (--max-connections x KW_SERVER_CONN_BYTES) its second. */
static kw_ledger *make_ledger(serve_opts *o, kw_err *err) {
    if (!o->memory_limit) {
        uint64_t total = 0, avail = 0, reserve = 0;
        if (kw_meminfo_read(&total, &avail, err) < 0 || !avail) {
            kw_err_set(err, "cannot read MemAvailable for the default --memory-limit; pass --memory-limit");
            return NULL;
        }
        o->memory_limit = kw_plan_default_memory_limit(avail, true, UINT64_MAX, &reserve);
    }
    kw_ledger *led = kw_ledger_create(o->memory_limit);
    if (!led) { kw_err_set(err, "out of memory"); return NULL; }
    uint64_t overhead = kw_plan_measured_overhead(), conns = kw_plan_connections_bytes(o->max_conns, o->max_body, o->http_threads,
                                                                                         o->request_memory);
    if (kw_ledger_set(led, KW_LEDGER_OVERHEAD, overhead, NULL) < 0) {
        kw_plan_limit_error(err, o->memory_limit, NULL, 0, "the fixed overhead (process, libraries, server)", overhead);
        kw_ledger_destroy(led);
        return NULL;
    }
    if (kw_ledger_set(led, KW_LEDGER_CONNECTIONS, conns, NULL) < 0) {
        char what[200], body[32], rq[32];
        snprintf(what, sizeof what, "the HTTP connections (--max-connections %d x %llu bytes + --max-body %s + "
                 "--http-threads %d x --request-memory %s)", o->max_conns, (unsigned long long)KW_SERVER_CONN_BYTES,
                 kw_format_bytes(o->max_body, body, sizeof body), o->http_threads,
                 kw_format_bytes(o->request_memory, rq, sizeof rq));
        kw_plan_limit_error(err, o->memory_limit, "the fixed overhead", overhead, what, conns);
        kw_ledger_destroy(led);
        return NULL;
    }
    return led;
}

/* 127.0.0.0/8, ::1 and localhost: reachable from this machine only. */
static bool host_is_loopback(const char *h) {
    return !strncmp(h, "127.", 4) || !strcmp(h, "::1") || !strcmp(h, "[::1]") || !strcmp(h, "localhost");
}

/* The weights are mmap'd: if the file is truncated on disk while served, the
 * next access to a page past its new end raises SIGBUS. Say why in one line,
 * then die of the signal (no silent garbage; docs/RELIABILITY.md). */
static void on_sigbus(int sig) {
    static const char msg[] = "kvwise serve: fatal SIGBUS: a memory-mapped file (the model) was truncated or "
                              "changed in place on disk; replace model files by renaming a new file over them\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    signal(sig, SIG_DFL);
    raise(sig);
}

/* ---- the running server's settings and SIGHUP --------------------------- */

typedef struct serve_state {
    int argc;
    char **argv;
    serve_settings req;         /* as parsed (defaults, file, flags), with the live changes of reloads */
    serve_opts *o;              /* what runs (defaults resolved: memory limit, client connections) */
    kw_conf conf;               /* the file read at start: string settings point into it */
    kw_ledger *led;
    kw_engine *e;
    kw_sched *sched;
    kw_server *srv;
    int reloads;
    char last_reload[768];      /* one line: what the last SIGHUP did */
    cJSON *restart_needed;      /* {name: {"running": text, "file": text}} */
} serve_state;

/* /v1/config's provenance: where every value came from, which settings a
 * SIGHUP applies, what the last one did and what waits for a restart. */
static void add_provenance(cJSON *c, const serve_state *st) {
    cJSON *src = cJSON_AddObjectToObject(c, "sources");
    for (int i = 0; src && i < serve_opt_count(); i++)
        cJSON_AddStringToObject(src, serve_opt_at(i)->key, serve_src_name(st->req.src[i]));
    cJSON *live = cJSON_AddArrayToObject(c, "live_settings");
    for (int i = 0; live && i < serve_opt_count(); i++)
        if (serve_opt_at(i)->live) cJSON_AddItemToArray(live, cJSON_CreateString(serve_opt_at(i)->key));
    if (st->req.o.config_path) cJSON_AddStringToObject(c, "config_file", st->req.o.config_path);
    else cJSON_AddNullToObject(c, "config_file");
    cJSON *r = cJSON_AddObjectToObject(c, "reload");
    if (r) {
        cJSON_AddNumberToObject(r, "count", st->reloads);
        cJSON_AddStringToObject(r, "last", st->last_reload);
    }
    cJSON_AddItemToObject(c, "restart_needed", st->restart_needed ? cJSON_Duplicate(st->restart_needed, 1)
                                                                  : cJSON_CreateObject());
}

static cJSON *state_config(const serve_state *st) {
    cJSON *c = config_json(st->o, st->e, kw_server_template_desc(st->srv));
    add_provenance(c, st);
    return c;
}

static void publish_config(const serve_state *st) {
    cJSON *c = state_config(st);
    char *s = cJSON_PrintUnformatted(c);
    cJSON_Delete(c);
    kw_server_set_config(st->srv, s);
    free(s);
}

/* The prompt-cache caps for the running server with new cache settings:
 * the plan's default byte cap follows --prompt-cache-size, as at start. */
static int reload_cache_caps(serve_state *st, const serve_opts *n, int32_t *seqs, uint64_t *bytes, kw_err *err) {
    serve_opts t = *st->o;
    t.cache_size = n->cache_size;
    t.cache_bytes = n->cache_bytes;
    kw_plan p;
    kw_plan_serve sz;
    if (plan_memory(&t, st->led, &p, &sz, err) < 0) return -1;
    *seqs = sz.cache_max_seqs;
    *bytes = sz.cache_max_bytes;
    return 0;
}

/* Appends "; " + text to the reload line. */
static void note(serve_state *st, const char *text) {
    size_t u = strlen(st->last_reload);
    snprintf(st->last_reload + u, sizeof st->last_reload - u, "%s%s", u ? "; " : "", text);
}

/* SIGHUP: read --config FILE again, apply what can change live, report
 * what needs a restart; /v1/config shows the result. Runs on the main
 * thread (kw_server_wait), one at a time. */
static void serve_reload(void *ctx) {
    serve_state *st = ctx;
    serve_notify("RELOADING=1");
    st->reloads++;
    st->last_reload[0] = 0;
    const char *path = st->req.o.config_path;
    if (!path) {
        note(st, "no --config FILE: nothing to re-read");
        fprintf(stderr, "kvwise serve: SIGHUP: %s\n", st->last_reload);
        publish_config(st);
        serve_notify("READY=1");
        return;
    }
    kw_conf nc;
    kw_err err = {{0}};
    serve_settings ns;
    if (kw_conf_load(path, &nc, &err) < 0 || serve_settings_parse(st->argc, st->argv, &nc, &ns) < 0) {
        if (!err.msg[0]) snprintf(err.msg, sizeof err.msg, "%s: a setting is not valid (logged above)", path);
        if (nc.e) kw_conf_free(&nc);
        char line[600];
        snprintf(line, sizeof line, "failed, every setting kept: %s", err.msg);
        note(st, line);
        fprintf(stderr, "kvwise serve: SIGHUP: re-reading %s %s\n", path, st->last_reload);
        publish_config(st);
        serve_notify("READY=1\nSTATUS=reload failed, every setting kept");
        return;
    }
    cJSON_Delete(st->restart_needed);
    st->restart_needed = cJSON_CreateObject();
    bool cache = false, queue = false;
    int changed = 0;
    for (int i = 0; i < serve_opt_count(); i++) {
        const serve_opt_desc *d = serve_opt_at(i);
        const kw_conf_entry *fe = kw_conf_get(&nc, d->name);
        if (fe && ns.src[i] == SERVE_SRC_FLAG)
            fprintf(stderr, "kvwise serve: SIGHUP: %s is set in %s:%d, but the command line's --%s wins\n",
                    d->name, path, fe->line, d->name);
        if (!serve_opt_differs(&st->req.o, &ns.o, i)) {
            if (d->live) st->req.src[i] = ns.src[i];
            continue;
        }
        char was[96], now[96], line[400];
        serve_opt_value(&st->req.o, i, was, sizeof was);
        serve_opt_value(&ns.o, i, now, sizeof now);
        changed++;
        if (d->live) {
            snprintf(line, sizeof line, "%s %s -> %s (applied)", d->name, was, now);
            serve_opt_copy(&st->req.o, &ns.o, i);
            serve_opt_copy(st->o, &ns.o, i);
            st->req.src[i] = ns.src[i];
            cache |= !strcmp(d->name, "prompt-cache-size") || !strcmp(d->name, "prompt-cache-bytes");
            queue |= !strcmp(d->name, "max-queue") || !strcmp(d->name, "queue-timeout");
        } else {
            snprintf(line, sizeof line, "%s %s -> %s needs a restart (running with %s)", d->name, was, now, was);
            cJSON *pend = cJSON_AddObjectToObject(st->restart_needed, d->name);
            if (pend) {
                cJSON_AddStringToObject(pend, "running", was);
                cJSON_AddStringToObject(pend, "wanted", now);
                cJSON_AddStringToObject(pend, "source", serve_src_name(ns.src[i]));
            }
        }
        note(st, line);
    }
    kw_conf_free(&nc);      /* nothing kept points into it: no string setting is live */
    if (queue && st->sched) kw_sched_set_queue_limits(st->sched, st->o->max_queue, st->o->queue_timeout);
    if (cache) {
        int32_t seqs;
        uint64_t bytes;
        if (reload_cache_caps(st, st->o, &seqs, &bytes, &err) < 0) {
            note(st, err.msg);
        } else {
            int32_t ev = kw_engine_set_cache_caps(st->e, seqs, bytes);
            char line[200], b[32];
            if (ev < 0) snprintf(line, sizeof line, "this engine keeps no prompt cache");
            else snprintf(line, sizeof line, "prompt cache now %d sequences / %s: %d evicted now", seqs,
                          kw_format_bytes(bytes, b, sizeof b), ev);
            note(st, line);
        }
    }
    if (!changed) note(st, "no setting changed");
    fprintf(stderr, "kvwise serve: SIGHUP: re-read %s: %s\n", path, st->last_reload);
    publish_config(st);
    serve_notify("READY=1\nSTATUS=reloaded");
}

/* --help anywhere, the config file, then every setting (serve_opts.h). */
static int parse_args(int argc, char **argv, serve_state *st) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); exit(0); }
    const char *path = serve_config_path(argc, argv);
    kw_err err = {{0}};
    if (path && *path && kw_conf_load(path, &st->conf, &err) < 0) {
        fprintf(stderr, "kvwise serve: --config: %s\n", err.msg);
        return -1;
    }
    if (serve_settings_parse(argc, argv, path ? &st->conf : NULL, &st->req) < 0) return -1;
    if (!st->req.o.model && !serve_uses_stub(&st->req.o)) {
        fprintf(stderr, "kvwise serve: -m MODEL.gguf is required (see --help)\n");
        return -1;
    }
    if (st->req.o.api_key && !st->req.o.api_key[0]) {     /* an empty key would mean no auth at all */
        fprintf(stderr, "kvwise serve: --api-key is empty: give a key (32+ random characters) or leave the "
                "setting out\n");
        return -1;
    }
    return 0;
}

int cmd_serve(int argc, char **argv) {
    static serve_state st;
    st.argc = argc;
    st.argv = argv;
    if (parse_args(argc, argv, &st) < 0) return 2;
    serve_opts o = st.req.o;
    st.o = &o;
    serve_started = time(NULL);
    signal(SIGBUS, on_sigbus);
    if (o.max_client_conns < 0) o.max_client_conns = host_is_loopback(o.host) ? 0 : 64;
    if (o.http_threads > o.max_conns) o.http_threads = o.max_conns;    /* MHD gives each thread a share */
    kw_err err = {{0}};
#ifdef KW_TESTCTL
    /* the test hooks first: fault rules marked @start count from here (model load included) */
    if (serve_test_start(&o.test, o.host, host_is_loopback(o.host), &err) < 0) { fprintf(stderr, "kvwise serve: %s\n", err.msg); return 2; }
#endif
    kw_ledger *led = make_ledger(&o, &err);
    if (!led) { fprintf(stderr, "kvwise serve: %s\n", err.msg); return 1; }
    kw_server_opts so = {.host = o.host, .port = o.port, .api_key = o.api_key, .allowed_origins = o.origins,
                         .max_body_bytes = o.max_body, .request_memory_bytes = o.request_memory, .timeout_s = o.timeout_s, .http_threads = o.http_threads,
                         .header_timeout_s = o.header_timeout_s, .body_timeout_s = o.body_timeout_s,
                         .allowed_hosts = o.allowed_hosts,
                         .max_client_connections = o.max_client_conns, .max_connections = o.max_conns,
                         .chat_template = o.chat_template, .model_alias = o.alias, .ledger = led};
    if (!host_is_loopback(o.host) && !o.api_key)
        fprintf(stderr, "kvwise serve: WARNING: listening on %s without --api-key: anyone who can reach this "
                "address can use the model (see docs/SECURITY.md)\n", o.host);
    /* Listen first so /health answers "loading" while the model loads. */
    kw_server *srv = kw_server_start(&so, &err);
    if (!srv) { fprintf(stderr, "kvwise serve: %s\n", err.msg); kw_ledger_destroy(led); return 1; }
    o.port = kw_server_port(srv);
    fprintf(stderr, "kvwise serve: listening on http://%s:%d (loading model)\n", o.host, o.port);
    kw_plan plan;
    kw_plan_serve sz;
    kw_engine *e = plan_memory(&o, led, &plan, &sz, &err) < 0 ? NULL : make_engine(&o, led, &plan, &sz, &err);
    if (!e) {
        fprintf(stderr, "kvwise serve: %s\n", err.msg[0] ? err.msg : "cannot create the engine");
        kw_server_stop(srv);
        kw_ledger_destroy(led);
        return 1;
    }
    kw_sched_opts sco = {.decode_concurrency = o.decode_conc, .prompt_concurrency = o.prompt_conc,
                         .prefill_step = o.prefill_step, .max_queue = o.max_queue, .log_progress = true,
                         .queue_timeout_s = o.queue_timeout};
    kw_sched *sched = kw_sched_start(e, &sco, &err);
    if (!sched) { fprintf(stderr, "kvwise serve: %s\n", err.msg); e->destroy(e); kw_server_stop(srv); kw_ledger_destroy(led); return 1; }
    char note[256];
    if (kw_server_set_engine(srv, e, sched, note, sizeof note, &err) < 0) {
        fprintf(stderr, "kvwise serve: %s\n", err.msg);
        kw_server_stop(srv);
        e->destroy(e);
        kw_ledger_destroy(led);
        return 2;
    }
    st.led = led;
    st.e = e;
    st.sched = sched;
    st.srv = srv;
    cJSON *cfg = state_config(&st);
    print_report(cfg);
    cJSON_Delete(cfg);
    if (note[0]) fprintf(stderr, "kvwise serve: note: %s\n", note);
    kw_footprint fp;
    kw_ledger_print(led, kw_footprint_read(&fp, NULL) == 0 ? &fp : NULL, stderr);
    /* The config endpoint is answered from the server's copy; SIGHUP refreshes it. */
    publish_config(&st);
    kw_server_on_reload(srv, serve_reload, &st);
#ifdef KW_TESTCTL
    serve_test_ready(&o.test);  /* --test-fail-alloc rules (without @start) count from here */
#endif
    fprintf(stderr, "kvwise serve: ready on http://%s:%d\n", o.host, o.port);
    char ready[300];
    snprintf(ready, sizeof ready, "READY=1\nSTATUS=serving on http://%s:%d", o.host, o.port);
    if (serve_notify(ready) < 0) fprintf(stderr, "kvwise serve: WARNING: cannot notify $NOTIFY_SOCKET\n");
    kw_server_wait(srv);
    serve_notify("STOPPING=1");
    fprintf(stderr, "kvwise serve: shutting down (finishing in-flight requests)\n");
    kw_server_stop(srv);
    e->destroy(e);
    kw_ledger_destroy(led);
    cJSON_Delete(st.restart_needed);
    kw_conf_free(&st.conf);
    fprintf(stderr, "kvwise serve: stopped\n");
    return 0;
}
