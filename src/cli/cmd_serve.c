/* cmd_serve.c - `kvwise serve`: parses the settings (mlx_lm.server names),
 * prints the startup report (every effective setting; the same JSON is
 * served at GET /v1/config), starts listening (GET /health is 503 while the
 * model loads), loads the engine, starts the scheduler and runs until
 * SIGTERM/SIGINT, then shuts down gracefully and exits 0. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "cli.h"
#include "kvwise/sched.h"
#include "kvwise/server.h"
#include "kvwise/tensor.h"

typedef struct serve_opts {
    const char *model, *host, *api_key, *origins, *chat_template, *alias, *kv_type;
    int port, ctx_size, decode_conc, prompt_conc, prefill_step, kv_blocks, kv_block_tokens;
    int timeout_s, http_threads, max_queue, stub_step_us, threads;
    uint64_t max_body;
    bool mlock, stub, quiet_progress;
} serve_opts;

static void usage(FILE *f) {
    fprintf(f,
        "usage: kvwise serve -m MODEL.gguf [options]\n\n"
        "An OpenAI-compatible server (POST /v1/chat/completions, /v1/completions; GET /v1/models,\n"
        "/health, /v1/config) with continuous batching and chunked prefill.\n\n"
        "network:\n"
        "  --host ADDR              listen address (default 127.0.0.1; 0.0.0.0 exposes it to the network)\n"
        "  --port N                 TCP port (default 8080; 0 = any free port, printed at startup)\n"
        "  --api-key KEY            require 'Authorization: Bearer KEY' (401 otherwise; /health is open)\n"
        "  --allowed-origins LIST   CORS: comma-separated origins allowed to call from a browser, or '*'\n"
        "  --max-body BYTES         largest request body (default 16MiB; 413 above)\n"
        "  --timeout S              idle connection timeout in seconds (default 600)\n"
        "  --http-threads N         HTTP I/O threads (default 2)\n"
        "model and context:\n"
        "  -m, --model PATH         GGUF model file\n"
        "  --alias NAME             model id reported by /v1/models and in responses\n"
        "  --ctx-size N             positions per sequence: prompt + answer (default: the model's, at most 4096)\n"
        "  --chat-template NAME|FILE  chatml|llama3|llama2|mistral|gemma|phi3, or a file with template text\n"
        "  --mlock                  lock the weights in RAM\n"
        "  -t, --threads N          compute threads (default: physical cores)\n"
        "scheduling (continuous batching):\n"
        "  --decode-concurrency N   sequences decoding together in one batched step (default 8)\n"
        "  --prompt-concurrency N   prompts prefilled in the same step (default 1)\n"
        "  --prefill-step-size N    prompt tokens per prompt per step (default 512); long prompts are\n"
        "                           read in chunks interleaved with decode steps, with progress logged\n"
        "  --max-queue N            requests waiting for a slot before 503 (default 64)\n"
        "KV cache:\n"
        "  --kv-type f16|q8_0       KV element type (q8_0 halves decode memory, not the prefill peak)\n"
        "  --kv-blocks N            KV pool size in blocks (default: ctx-size x decode-concurrency)\n"
        "  --kv-block-size N        positions per KV block (default 32)\n");
}

static int parse_int(const char *flag, const char *v, int lo, int hi, int *out) {
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || x < lo || x > hi) {
        fprintf(stderr, "kvwise serve: %s needs an integer in [%d, %d]\n", flag, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

static int parse_args(int argc, char **argv, serve_opts *o) {
    *o = (serve_opts){.host = "127.0.0.1", .port = 8080, .decode_conc = 8, .prompt_conc = 1,
                      .prefill_step = 512, .kv_type = "f16", .kv_block_tokens = 32, .timeout_s = 600,
                      .http_threads = 2, .max_queue = 64, .max_body = 16u << 20};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = 0;
#define TAKES_VALUE() do { if (!v) { fprintf(stderr, "kvwise serve: %s needs a value\n", a); return -1; } i++; } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); exit(0); }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { TAKES_VALUE(); o->model = v; }
        else if (!strcmp(a, "--host")) { TAKES_VALUE(); o->host = v; }
        else if (!strcmp(a, "--port")) { TAKES_VALUE(); rc = parse_int(a, v, 0, 65535, &o->port); }
        else if (!strcmp(a, "--api-key")) { TAKES_VALUE(); o->api_key = v; }
        else if (!strcmp(a, "--allowed-origins")) { TAKES_VALUE(); o->origins = v; }
        else if (!strcmp(a, "--chat-template")) { TAKES_VALUE(); o->chat_template = v; }
        else if (!strcmp(a, "--alias")) { TAKES_VALUE(); o->alias = v; }
        else if (!strcmp(a, "--ctx-size") || !strcmp(a, "-c")) { TAKES_VALUE(); rc = parse_int(a, v, 0, 1 << 24, &o->ctx_size); }
        else if (!strcmp(a, "--decode-concurrency")) { TAKES_VALUE(); rc = parse_int(a, v, 1, 1024, &o->decode_conc); }
        else if (!strcmp(a, "--prompt-concurrency")) { TAKES_VALUE(); rc = parse_int(a, v, 1, 64, &o->prompt_conc); }
        else if (!strcmp(a, "--prefill-step-size")) { TAKES_VALUE(); rc = parse_int(a, v, 1, 1 << 16, &o->prefill_step); }
        else if (!strcmp(a, "--max-queue")) { TAKES_VALUE(); rc = parse_int(a, v, 0, 1 << 20, &o->max_queue); }
        else if (!strcmp(a, "--kv-type")) {
            TAKES_VALUE(); o->kv_type = v;
            if (strcmp(v, "f16") && strcmp(v, "q8_0")) { fprintf(stderr, "kvwise serve: --kv-type must be f16 or q8_0\n"); return -1; }
        }
        else if (!strcmp(a, "--kv-blocks")) { TAKES_VALUE(); rc = parse_int(a, v, 0, 1 << 24, &o->kv_blocks); }
        else if (!strcmp(a, "--kv-block-size")) { TAKES_VALUE(); rc = parse_int(a, v, 1, 4096, &o->kv_block_tokens); }
        else if (!strcmp(a, "--timeout")) { TAKES_VALUE(); rc = parse_int(a, v, 1, 86400, &o->timeout_s); }
        else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) { TAKES_VALUE(); rc = parse_int(a, v, 0, 1024, &o->threads); }
        else if (!strcmp(a, "--http-threads")) { TAKES_VALUE(); rc = parse_int(a, v, 1, 64, &o->http_threads); }
        else if (!strcmp(a, "--max-body")) {
            TAKES_VALUE();
            kw_err err = {{0}};
            if (kw_parse_bytes(v, &o->max_body, &err) < 0 || o->max_body == 0) { fprintf(stderr, "kvwise serve: --max-body: %s\n", err.msg[0] ? err.msg : "must be > 0"); return -1; }
        }
        else if (!strcmp(a, "--mlock")) o->mlock = true;
        else if (!strcmp(a, "--stub-engine")) o->stub = true;   /* tests/benchmarks only: no model */
        else if (!strcmp(a, "--stub-step-us")) { TAKES_VALUE(); rc = parse_int(a, v, 0, 10000000, &o->stub_step_us); }
        else { fprintf(stderr, "kvwise serve: unknown option '%s' (see --help)\n", a); return -1; }
        if (rc < 0) return -1;
#undef TAKES_VALUE
    }
    if (!o->model && !o->stub) { fprintf(stderr, "kvwise serve: -m MODEL.gguf is required (see --help)\n"); return -1; }
    return 0;
}

/* Every effective setting, as served by GET /v1/config and printed at startup. */
static cJSON *config_json(const serve_opts *o, const kw_engine *e, const char *tpl_desc) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "version", KW_VERSION);
    cJSON_AddStringToObject(c, "model", o->stub ? "(stub engine)" : o->model);
    cJSON_AddStringToObject(c, "model_id", o->alias ? o->alias : e->model_id);
    cJSON_AddStringToObject(c, "host", o->host);
    cJSON_AddNumberToObject(c, "port", o->port);
    cJSON_AddBoolToObject(c, "api_key_set", o->api_key != NULL);
    cJSON_AddStringToObject(c, "allowed_origins", o->origins ? o->origins : "");
    cJSON_AddNumberToObject(c, "max_body_bytes", (double)o->max_body);
    cJSON_AddNumberToObject(c, "timeout_s", o->timeout_s);
    cJSON_AddNumberToObject(c, "http_threads", o->http_threads);
    cJSON_AddNumberToObject(c, "ctx_size", e->n_ctx);
    cJSON_AddNumberToObject(c, "decode_concurrency", o->decode_conc < e->n_slots ? o->decode_conc : e->n_slots);
    cJSON_AddNumberToObject(c, "prompt_concurrency", o->prompt_conc);
    cJSON_AddNumberToObject(c, "prefill_step_size", o->prefill_step);
    cJSON_AddNumberToObject(c, "max_batch_tokens", e->max_batch);
    cJSON_AddNumberToObject(c, "max_queue", o->max_queue);
    cJSON_AddStringToObject(c, "kv_type", o->kv_type);
    cJSON_AddNumberToObject(c, "kv_block_size", o->kv_block_tokens);
    cJSON_AddNumberToObject(c, "kv_blocks_requested", o->kv_blocks);
    char kv[256];
    e->describe((kw_engine *)e, kv, sizeof kv);
    cJSON_AddStringToObject(c, "kv_pool", kv);
    cJSON_AddStringToObject(c, "chat_template", tpl_desc);
    cJSON_AddBoolToObject(c, "mlock", o->mlock);
    cJSON_AddNumberToObject(c, "threads", o->threads);
    return c;
}

static void print_report(const cJSON *c) {
    fprintf(stderr, "kvwise serve: effective settings\n");
    const cJSON *it;
    cJSON_ArrayForEach(it, c) {
        if (cJSON_IsString(it)) fprintf(stderr, "  %-20s %s\n", it->string, it->valuestring);
        else if (cJSON_IsBool(it)) fprintf(stderr, "  %-20s %s\n", it->string, cJSON_IsTrue(it) ? "true" : "false");
        else if (cJSON_IsNumber(it)) fprintf(stderr, "  %-20s %.0f\n", it->string, it->valuedouble);
    }
}

static kw_engine *make_engine(const serve_opts *o, kw_err *err) {
    int32_t max_batch = o->decode_conc + o->prompt_conc * o->prefill_step;
    if (o->stub) return kw_engine_stub_create(o->ctx_size ? o->ctx_size : 4096, o->decode_conc, max_batch, o->stub_step_us);
    kw_engine_model_opts mo = {.model_path = o->model, .n_ctx = o->ctx_size, .n_slots = o->decode_conc,
                               .max_batch = max_batch, .kv_blocks = o->kv_blocks, .kv_block_tokens = o->kv_block_tokens,
                               .kv_type = !strcmp(o->kv_type, "q8_0") ? KW_TYPE_Q8_0 : KW_TYPE_F16, .mlock = o->mlock,
                               .n_threads = o->threads};
    return kw_engine_model_create(&mo, err);
}

int cmd_serve(int argc, char **argv) {
    serve_opts o;
    if (parse_args(argc, argv, &o) < 0) return 2;
    kw_err err = {{0}};
    kw_server_opts so = {.host = o.host, .port = o.port, .api_key = o.api_key, .allowed_origins = o.origins,
                         .max_body_bytes = o.max_body, .timeout_s = o.timeout_s, .http_threads = o.http_threads,
                         .chat_template = o.chat_template, .model_alias = o.alias};
    /* Listen first so /health answers 503 "loading" while the model loads. */
    kw_server *srv = kw_server_start(&so, &err);
    if (!srv) { fprintf(stderr, "kvwise serve: %s\n", err.msg); return 1; }
    o.port = kw_server_port(srv);
    fprintf(stderr, "kvwise serve: listening on http://%s:%d (loading model)\n", o.host, o.port);
    kw_engine *e = make_engine(&o, &err);
    if (!e) { fprintf(stderr, "kvwise serve: %s\n", err.msg[0] ? err.msg : "cannot create the engine"); kw_server_stop(srv); return 1; }
    kw_sched_opts sco = {.decode_concurrency = o.decode_conc, .prompt_concurrency = o.prompt_conc,
                         .prefill_step = o.prefill_step, .max_queue = o.max_queue, .log_progress = true};
    kw_sched *sched = kw_sched_start(e, &sco, &err);
    if (!sched) { fprintf(stderr, "kvwise serve: %s\n", err.msg); e->destroy(e); kw_server_stop(srv); return 1; }
    char note[256];
    if (kw_server_set_engine(srv, e, sched, note, sizeof note, &err) < 0) {
        fprintf(stderr, "kvwise serve: %s\n", err.msg);
        kw_server_stop(srv);
        e->destroy(e);
        return 2;
    }
    cJSON *cfg = config_json(&o, e, kw_server_template_desc(srv));
    char *cfg_s = cJSON_PrintUnformatted(cfg);
    print_report(cfg);
    cJSON_Delete(cfg);
    if (note[0]) fprintf(stderr, "kvwise serve: note: %s\n", note);
    /* The config endpoint is answered from the server's copy. */
    kw_server_set_config(srv, cfg_s);
    free(cfg_s);
    fprintf(stderr, "kvwise serve: ready on http://%s:%d\n", o.host, o.port);
    kw_server_wait(srv);
    fprintf(stderr, "kvwise serve: shutting down (finishing in-flight requests)\n");
    kw_server_stop(srv);
    e->destroy(e);
    fprintf(stderr, "kvwise serve: stopped\n");
    return 0;
}
