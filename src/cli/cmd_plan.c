/* cmd_plan.c - `kvwise plan`: the memory budget and the speed ceiling of a
 * model on this machine, from metadata only (plan.h). Parses the options,
 * builds a kw_plan_model from a GGUF file or a Hugging Face config.json,
 * measures what was not given (MemAvailable, read bandwidth, the process
 * baseline) and prints the plan (or --json, schema in docs/PLAN.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <cjson/cJSON.h>
#include "cli.h"
#include "kvwise/footprint.h"
#include "kvwise/gguf.h"
#include "kvwise/kv.h"
#include "kvwise/plan.h"
#include "kvwise/tensor.h"

/* How long the bandwidth probe runs: long enough for a stable best pass
 * over a buffer far beyond the caches, short enough to feel instant. */
#define KW_PLAN_PROBE_SECONDS 0.25
/* Prefill length of --probe (capped by --prefill-step-size): one chunk. */
#define KW_PLAN_PROBE_TOKENS 256

static void usage(FILE *f) {
    fprintf(f,
        "usage: kvwise plan -m MODEL.gguf [options]\n"
        "       kvwise plan --hf-config config.json --weights-bytes 20GB [options]\n\n"
        "Computes, before anything is loaded, where the memory goes and how fast decode can be:\n"
        "KV bytes per token, per-sequence KV, prefill workspace, the budget, prompt-cache caps,\n"
        "the largest context that fits, the decode ceiling, and a `kvwise serve` line.\n\n"
        "  -m, --model FILE           GGUF model (only metadata and tensor headers are read)\n"
        "  --hf-config FILE           a Hugging Face config.json instead of a GGUF\n"
        "  --weights-bytes B          weight size for --hf-config (e.g. 20GB, 18.6GiB)\n"
        "  --ram B                    RAM to plan for (default: MemAvailable measured now)\n"
        "  --reserve B                left to the OS and other apps (default: min(6GiB, RAM/4) with\n"
        "                             --ram; max(256MiB, MemAvailable/10) when measured)\n"
        "  --memory-limit B           use this budget instead of RAM - reserve\n"
        "  --ctx N                    context per sequence (also --ctx-size; default min(trained, 8192))\n"
        "  --concurrency N            sequences decoding at once at full ctx (also --decode-concurrency; 1)\n"
        "  --prompt-concurrency N     prompts prefilling at once (1)\n"
        "  --prefill-step-size N      tokens per prefill chunk (512)\n"
        "  --kv-type T                KV element type: auto (default: i16 where its kernels run, else\n"
        "                             f16), i16, i8, f16, q8_0 or f32\n"
        "  --prompt-cache-size N      conversations the prompt cache should hold (concurrency + 1)\n"
        "  -t, --threads N            threads (sizes per-thread scratch; default: physical cores, as serve)\n"
        "  --bandwidth GB/s           memory bandwidth for the decode ceiling (default: a short probe)\n"
        "  --no-bandwidth-probe       do not measure bandwidth (the ceiling is then not shown)\n"
        "  --probe                    load the model and time a short prefill and decode: prints the\n"
        "                             measured decode speed and the expected time to first token\n"
        "  --prompt-tokens N          prompt length for that time to first token (default: --ctx)\n"
        "  --overhead B               fixed process overhead (default: measured baseline + 16MiB)\n"
        "  --max-connections N        serve's open HTTP connections, each 68 KiB of the budget (default 128)\n"
        "  --max-body B               serve's request-body allowance, also in the budget (default 16MiB)\n"
        "  --http-threads N           serve's HTTP threads (default 2); each may hold --request-memory\n"
        "  --request-memory B         what serve lets one HTTP thread hold while it parses, renders and\n"
        "                             tokenizes a request, in the budget per thread (default 16MiB)\n"
        "  --json                     machine-readable output (schema kvwise.plan/1, docs/PLAN.md)\n"
        "Sizes accept 4GiB, 512MB, 1.5G or plain bytes.\n");
}

static int parse_int(const char *s, const char *flag, int32_t lo, int32_t hi, int32_t *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "kvwise plan: %s must be an integer in %d..%d (got '%s')\n", flag, lo, hi, s);
        return -1;
    }
    *out = (int32_t)v;
    return 0;
}

static int parse_size(const char *s, const char *flag, uint64_t *out) {
    kw_err err;
    if (kw_parse_bytes(s, out, &err) != 0) {
        fprintf(stderr, "kvwise plan: %s: %s\n", flag, err.msg);
        return -1;
    }
    return 0;
}

static char *read_text_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 > cap) {
            if (cap > ((size_t)64 << 20)) { free(buf); fclose(f); errno = EFBIG; return NULL; }
            cap = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, cap);
            if (!nb) { free(buf); fclose(f); return NULL; }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) { free(buf); return NULL; }
    buf[n] = 0;
    *len = n;
    return buf;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

typedef struct plan_args {
    const char *model, *hf_config;
    uint64_t weights_bytes;
    bool json, no_probe, probe;
    int32_t prompt_tokens;
    kw_plan_opts o;
} plan_args;

static int parse_args(int argc, char **argv, plan_args *a) {
    memset(a, 0, sizeof *a);
    kw_plan_opts_default(&a->o);
    int cores = kw_cpu_physical_cores();
    if (cores > 0) a->o.n_threads = cores;      /* as `kvwise serve` defaults */
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        #define NEED() do { if (!v) { fprintf(stderr, "kvwise plan: %s needs a value\n", f); return 2; } i++; } while (0)
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) { usage(stdout); return 1; }
        else if (!strcmp(f, "-m") || !strcmp(f, "--model")) { NEED(); a->model = v; }
        else if (!strcmp(f, "--hf-config")) { NEED(); a->hf_config = v; }
        else if (!strcmp(f, "--weights-bytes")) { NEED(); if (parse_size(v, f, &a->weights_bytes)) return 2; }
        else if (!strcmp(f, "--ram")) { NEED(); if (parse_size(v, f, &a->o.ram)) return 2; if (!a->o.ram) { fprintf(stderr, "kvwise plan: --ram must be > 0\n"); return 2; } }
        else if (!strcmp(f, "--reserve")) { NEED(); if (parse_size(v, f, &a->o.reserve)) return 2; }
        else if (!strcmp(f, "--memory-limit")) { NEED(); if (parse_size(v, f, &a->o.memory_limit)) return 2; }
        else if (!strcmp(f, "--overhead")) { NEED(); if (parse_size(v, f, &a->o.overhead)) return 2; }
        else if (!strcmp(f, "--ctx") || !strcmp(f, "--ctx-size") || !strcmp(f, "-c")) { NEED(); if (parse_int(v, f, 1, 1 << 24, &a->o.ctx)) return 2; }
        else if (!strcmp(f, "--max-body")) { NEED(); if (parse_size(v, f, &a->o.max_body)) return 2; if (!a->o.max_body) { fprintf(stderr, "kvwise plan: --max-body must be > 0\n"); return 2; } }
        else if (!strcmp(f, "--request-memory")) { NEED(); if (parse_size(v, f, &a->o.request_memory)) return 2; if (!a->o.request_memory) { fprintf(stderr, "kvwise plan: --request-memory must be > 0\n"); return 2; } }
        else if (!strcmp(f, "--http-threads")) { NEED(); if (parse_int(v, f, 1, 64, &a->o.http_threads)) return 2; }
        else if (!strcmp(f, "--max-connections")) { NEED(); if (parse_int(v, f, 1, 100000, &a->o.max_connections)) return 2; }
        else if (!strcmp(f, "--concurrency") || !strcmp(f, "--decode-concurrency")) { NEED(); if (parse_int(v, f, 1, 4096, &a->o.concurrency)) return 2; }
        else if (!strcmp(f, "--prompt-concurrency")) { NEED(); if (parse_int(v, f, 1, 256, &a->o.prompt_concurrency)) return 2; }
        else if (!strcmp(f, "--prefill-step-size")) { NEED(); if (parse_int(v, f, 1, 65536, &a->o.prefill_step)) return 2; }
        else if (!strcmp(f, "--prompt-cache-size")) { NEED(); if (parse_int(v, f, 0, 1 << 20, &a->o.cache_seqs)) return 2; }
        else if (!strcmp(f, "-t") || !strcmp(f, "--threads")) { NEED(); if (parse_int(v, f, 1, 1024, &a->o.n_threads)) return 2; }
        else if (!strcmp(f, "--kv-type")) {
            NEED();
            int t = kw_kv_type_from_name(v);
            if (t < 0) { fprintf(stderr, "kvwise plan: --kv-type must be " KW_KV_TYPE_NAMES " (got '%s')\n", v); return 2; }
            a->o.kv_type = (uint32_t)t;
        }
        else if (!strcmp(f, "--bandwidth")) {
            NEED();
            char *end;
            double gbs = strtod(v, &end);
            if (end == v || !(gbs > 0 && gbs < 1e6) || (*end && strcasecmp(end, "GB/s") && strcasecmp(end, "GB"))) {
                fprintf(stderr, "kvwise plan: --bandwidth must be GB/s > 0 (got '%s')\n", v);
                return 2;
            }
            a->o.bandwidth = gbs * 1e9;
        }
        else if (!strcmp(f, "--no-bandwidth-probe")) a->no_probe = true;
        else if (!strcmp(f, "--probe")) a->probe = true;
        else if (!strcmp(f, "--prompt-tokens")) { NEED(); if (parse_int(v, f, 1, 1 << 24, &a->prompt_tokens)) return 2; }
        else if (!strcmp(f, "--json")) a->json = true;
        else { fprintf(stderr, "kvwise plan: unknown option '%s' (see kvwise plan --help)\n", f); return 2; }
        #undef NEED
    }
    if (!a->model == !a->hf_config) {
        fprintf(stderr, "kvwise plan: give exactly one of -m MODEL.gguf or --hf-config config.json\n");
        return 2;
    }
    if (a->probe && !a->model) {
        fprintf(stderr, "kvwise plan: --probe needs -m MODEL.gguf (it runs the model)\n");
        return 2;
    }
    if (a->hf_config && !a->weights_bytes) {
        fprintf(stderr, "kvwise plan: --hf-config needs --weights-bytes (the size of the weights you will download)\n");
        return 2;
    }
    return 0;
}

static int load_model(const plan_args *a, kw_plan_model *m, double *read_ms) {
    kw_err err = {{0}};
    if (a->hf_config) {
        size_t len = 0;
        char *text = read_text_file(a->hf_config, &len);
        if (!text) {
            fprintf(stderr, "kvwise plan: cannot read %s: %s\n", a->hf_config, strerror(errno));
            return 2;
        }
        int rc = kw_plan_model_from_hf_config(text, len, a->weights_bytes, m, &err);
        free(text);
        if (rc) { fprintf(stderr, "kvwise plan: %s: %s\n", a->hf_config, err.msg); return 2; }
        return 0;
    }
    double t0 = now_ms();
    kw_gguf *g = kw_gguf_open(a->model, &err);
    if (!g) { fprintf(stderr, "kvwise plan: %s: %s\n", a->model, err.msg); return 2; }
    int rc = kw_plan_model_from_gguf(g, m, &err);
    kw_gguf_close(g);
    if (rc) { fprintf(stderr, "kvwise plan: %s: %s\n", a->model, err.msg); return 2; }
    *read_ms = now_ms() - t0;
    return 0;
}

int cmd_plan(int argc, char **argv) {
    plan_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc == 1 ? 0 : rc;
    if (a.o.overhead == UINT64_MAX) a.o.overhead = kw_plan_measured_overhead();
    kw_plan_model m;
    double read_ms = 0;
    if ((rc = load_model(&a, &m, &read_ms)) != 0) return rc;
    if (!a.o.ram && !a.o.memory_limit) {
        kw_err err;
        if (kw_meminfo_read(NULL, &a.o.mem_available, &err) != 0) {
            fprintf(stderr, "kvwise plan: %s; pass --ram\n", err.msg);
            return 1;
        }
    }
    if (a.o.bandwidth <= 0 && !a.no_probe) {
        kw_pool *pool = kw_pool_create(a.o.n_threads);
        a.o.bandwidth = kw_measure_read_bandwidth(pool, KW_PLAN_PROBE_SECONDS);
        kw_pool_destroy(pool);
        a.o.bandwidth_measured = a.o.bandwidth > 0;
    }
    kw_plan p;
    kw_err err = {{0}};
    if (kw_plan_compute(&m, &a.o, &p, &err) != 0) {
        fprintf(stderr, "kvwise plan: %s\n", err.msg);
        return 2;
    }
    p.ttft_tokens = a.prompt_tokens ? a.prompt_tokens : p.o.ctx;
    if (a.probe) {
        p.probe_tokens = p.o.prefill_step < KW_PLAN_PROBE_TOKENS ? p.o.prefill_step : KW_PLAN_PROBE_TOKENS;
        if (kw_plan_probe(a.model, p.probe_tokens, p.o.kv_type, p.o.n_threads, &p.prefill_tok_s,
                          &p.decode_measured_tok_s, &err) != 0) {
            fprintf(stderr, "kvwise plan: --probe: %s\n", err.msg);
            return 1;
        }
    }
    if (a.json) {
        cJSON *j = kw_plan_to_cjson(&m, &p, a.model);
        char *s = j ? cJSON_Print(j) : NULL;
        cJSON_Delete(j);
        if (!s) { fprintf(stderr, "kvwise plan: out of memory\n"); return 1; }
        printf("%s\n", s);
        free(s);
    } else {
        kw_plan_print(&m, &p, a.model, stdout);
        if (a.model) printf("\n(metadata and tensor headers read in %.1f ms; no weight was loaded)\n", read_ms);
    }
    return 0;
}
