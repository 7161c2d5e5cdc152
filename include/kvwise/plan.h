/* kvwise/plan.h - the memory budget and the speed ceiling, computed before
 * anything is loaded (`kvwise plan`), and the server's startup ledger.
 *
 * A kw_plan_model is the shape of a model as far as memory goes: read from
 * a GGUF file's metadata and tensor descriptors (no weight data is touched)
 * or from a Hugging Face config.json plus a weight size. kw_plan_compute()
 * turns it and a few settings (RAM, reserve, context, concurrency, prefill
 * step, KV type, bandwidth) into a kw_plan: KV bytes per token (only layers
 * that keep KV), fixed per-sequence state of linear-attention layers, the
 * prefill workspace (kw_ctx_workspace_bytes, model.h), the budget lines,
 * what remains for the prompt cache (-> --prompt-cache-bytes/-size), the
 * largest context that fits, warnings with what to change, the decode
 * ceiling = bandwidth / bytes read per token (bandwidth given, or measured
 * by kw_measure_read_bandwidth, tensor.h), and a `kvwise serve` line.
 * kw_plan_fill_ledger() puts the same figures into a ledger (ledger.h), so
 * the planner and the server's startup table are one computation.
 * The formulas are documented in docs/PLAN.md. */
#ifndef KVWISE_PLAN_H
#define KVWISE_PLAN_H
#include <stdio.h>
#include "kvwise/common.h"
#include "kvwise/gguf.h"
#include "kvwise/ledger.h"
#include "kvwise/model.h"

struct cJSON;

typedef struct kw_plan_model {
    char source[16];                /* "gguf" or "hf-config" */
    kw_hparams hp;                  /* shape; hp.n_kv_layers = layers that keep a KV cache */
    /* linear-attention / recurrent layers (hybrid models): a fixed-size state per sequence */
    int32_t n_linear_layers;
    uint64_t linear_state_bytes;    /* per sequence, all linear layers together */
    char linear_formula[192];       /* how linear_state_bytes was computed ("" if none) */
    bool kv_layers_sliding_as_full; /* sliding-window layers counted as full (upper bound) */
    int32_t n_experts, n_experts_used; /* mixture of experts (config.json or the GGUF's keys); 0 if dense */
    uint64_t expert_bytes;          /* GGUF: all expert tensors (read_bytes_per_token holds k/n of them);
                                       0 when unknown (--hf-config) or dense */
    /* weights */
    uint64_t weight_bytes;          /* exact tensor bytes (GGUF) or --weights-bytes */
    uint64_t resident_bytes;        /* budget line: the mapped file + repack_bytes - released_bytes
                                       + expert_pack_bytes (GGUF), or weight_bytes */
    uint64_t repack_bytes;          /* heap copies made at load for this CPU's kernels (GGUF; 0 if none) */
    uint64_t released_bytes;        /* mapped pages dropped at load because a packed copy serves them */
    uint64_t expert_pack_bytes;     /* the most packing every expert at first use can add
                                       (kw_experts_pack_growth over the expert tensors; 0 if none) */
    uint64_t read_bytes_per_token;  /* weight bytes one decode step reads (MoE: the active bytes) */
    uint32_t main_type;             /* tensor type holding the most bytes (GGUF), else KW_TYPE_COUNT */
    uint64_t tokenizer_bytes;       /* heap of the tokenizer tables */
    bool tokenizer_measured;        /* built and measured (GGUF), else an estimate */
} kw_plan_model;

/* From an opened GGUF (metadata + tensor descriptors only). */
int kw_plan_model_from_gguf(const kw_gguf *g, kw_plan_model *m, kw_err *err);
/* From the text of a Hugging Face config.json and the weight size in bytes. */
int kw_plan_model_from_hf_config(const char *json, size_t len, uint64_t weight_bytes,
                                 kw_plan_model *m, kw_err *err);

typedef struct kw_plan_opts {
    uint64_t ram;               /* machine RAM to plan for; 0 = measure MemAvailable now */
    uint64_t reserve;           /* left to the OS and other apps; UINT64_MAX = default */
    uint64_t memory_limit;      /* 0 = ram - reserve; else used as is */
    uint64_t mem_available;     /* measured MemAvailable (used when ram == 0) */
    int32_t ctx;                /* context per sequence; 0 = min(n_ctx_train, 8192) */
    int32_t concurrency;        /* sequences decoding at once at full ctx (default 1) */
    int32_t prompt_concurrency; /* prompts prefilling at once (default 1) */
    int32_t prefill_step;       /* tokens per prefill chunk (default 512) */
    uint32_t kv_type;           /* KW_KV_TYPE_AUTO (default; the plan holds what it resolved to), F16, KV_I16, KV_I8, Q8_0, F32 */
    int32_t block_tokens;       /* KV block size (default 32) */
    int32_t n_threads;          /* for the workspace's per-thread scratch (default 2) */
    int32_t cache_seqs;         /* wanted cached sequences; 0 = concurrency + 1 */
    double bandwidth;           /* bytes/s for the decode ceiling; 0 = unknown */
    bool bandwidth_measured;    /* bandwidth came from a probe (else given) */
    uint64_t overhead;          /* fixed process overhead; UINT64_MAX = default estimate */
    int32_t max_connections;    /* serve --max-connections; 0 = KW_SERVER_DEFAULT_MAX_CONNECTIONS */
    uint64_t max_body;          /* serve --max-body; 0 = KW_SERVER_DEFAULT_MAX_BODY */
    int32_t http_threads;       /* serve --http-threads; 0 = KW_SERVER_DEFAULT_HTTP_THREADS */
    uint64_t request_memory;    /* serve --request-memory (per HTTP thread); 0 = KW_SERVER_DEFAULT_REQUEST_MEMORY */
} kw_plan_opts;

void kw_plan_opts_default(kw_plan_opts *o);

#define KW_PLAN_STEP_ROWS 6
#define KW_PLAN_MAX_WARNINGS 8

typedef struct kw_plan {
    kw_plan_opts o;                 /* effective settings (defaults filled in) */
    /* budget */
    uint64_t ram, reserve, memory_limit;
    bool ram_measured;              /* ram = MemAvailable at plan time */
    /* KV */
    uint64_t kv_bytes_per_token;    /* at o.kv_type */
    uint64_t kv_bytes_per_token_f16;
    uint64_t kv_block_bytes;
    uint64_t seq_kv_bytes;          /* one sequence at o.ctx, rounded up to whole blocks */
    uint64_t seq_state_bytes;       /* linear-attention state of one sequence */
    uint64_t seq_bytes;             /* seq_kv_bytes + seq_state_bytes */
    /* prefill workspace */
    uint64_t workspace_bytes;       /* for prefill_step x prompt_concurrency tokens at o.ctx */
    int32_t ws_step[KW_PLAN_STEP_ROWS];
    uint64_t ws_bytes[KW_PLAN_STEP_ROWS];
    /* the budget lines */
    uint64_t weights, tokenizer, overhead, live_kv;
    uint64_t connections;           /* max_connections x KW_SERVER_CONN_BYTES + max_body
                                       + http_threads x request_memory (server.h) */
    uint64_t fixed;                 /* weights + workspace + tokenizer + overhead + connections */
    uint64_t needed;                /* fixed + live_kv */
    bool fits;
    uint64_t remainder;             /* memory_limit - needed (0 if it does not fit) */
    uint64_t shortfall;             /* needed - memory_limit (0 if it fits) */
    uint64_t prompt_cache_bytes;    /* recommended --prompt-cache-bytes */
    int32_t prompt_cache_size;      /* recommended --prompt-cache-size */
    int32_t kv_pool_blocks;         /* recommended --kv-blocks: live sequences + cache, in blocks */
    uint64_t headroom;              /* remainder - prompt_cache_bytes */
    int32_t max_ctx;                /* largest ctx that fits at o.concurrency (no cache) */
    int32_t max_ctx_q8;             /* the same with q8_0 KV */
    int32_t max_concurrency;        /* most sequences at o.ctx that fit (no cache) */
    /* speed */
    uint64_t bytes_per_token;       /* weight bytes read per decoded token */
    double decode_tok_s;            /* bandwidth / bytes_per_token (0 if bandwidth unknown) */
    double decode_tok_s_full_ctx;   /* one sequence with o.ctx tokens of KV also read */
    double decode_aggregate_tok_s;  /* o.concurrency sequences at o.ctx, weights read once per step
                                       (MoE: the experts the step's tokens use, kw_plan_step_weight_bytes) */
    double prefill_tok_s;           /* measured by kw_plan_probe (caller fills); 0 if not */
    double decode_measured_tok_s;   /* measured by kw_plan_probe (caller fills); 0 if not */
    int32_t probe_tokens;           /* prefill length of the probe */
    int32_t ttft_tokens;            /* prompt length the time to first token is given for */
    /* advice */
    int n_warnings;
    char warnings[KW_PLAN_MAX_WARNINGS][320];
} kw_plan;

int kw_plan_compute(const kw_plan_model *m, const kw_plan_opts *o, kw_plan *p, kw_err *err);

/* The arithmetic pieces (exposed for tests and the server). */
/* Weight bytes one decode step of n sequences reads: the dense weights once
 * and, of a mixture of experts, the experts some token of the step picks,
 * expected over uniform routing: expert_bytes x (1 - (1 - k/n_experts)^n).
 * n = 1 gives read_bytes_per_token. */
double kw_plan_step_weight_bytes(const kw_plan_model *m, int32_t n);
uint64_t kw_plan_kv_bytes_per_token(const kw_plan_model *m, uint32_t kv_type);
/* The prefill workspace (0 for a model without an embedding, n_embd 0: a KV
 * layout only, such as the test stub engine, has no forward pass). */
uint64_t kw_plan_workspace_bytes(const kw_plan_model *m, int32_t tokens, int32_t ctx, int n_threads);
/* Default memory limit: (ram - reserve) with reserve = min(6 GiB, ram/4)
 * when ram is given; from MemAvailable with reserve = max(256 MiB,
 * MemAvailable/10) when it is measured. `reserve` = UINT64_MAX picks the
 * default; the reserve used is stored in *reserve_out. */
uint64_t kw_plan_default_memory_limit(uint64_t ram, bool measured, uint64_t reserve, uint64_t *reserve_out);

/* Output. model_path is used in the serve line ("MODEL.gguf" if NULL). */
void kw_plan_print(const kw_plan_model *m, const kw_plan *p, const char *model_path, FILE *out);
struct cJSON *kw_plan_to_cjson(const kw_plan_model *m, const kw_plan *p, const char *model_path);
/* "kvwise serve -m PATH --memory-limit ... --ctx-size ... " into buf. */
void kw_plan_serve_line(const kw_plan *p, const char *model_path, char *buf, size_t cap);
/* The server's startup ledger from the same figures: weights, workspace,
 * tokenizer, overhead and connections lines are set; KV lines are left to
 * reservations. */
int kw_plan_fill_ledger(const kw_plan *p, kw_ledger *l, kw_err *err);

/* ---- `kvwise serve` sizes its memory with the plan -------------------------
 * serve computes one plan with the settings it runs with (memory limit, its
 * context, decode concurrency as the plan's concurrency, --prompt-cache-size
 * as the wanted cache, its measured overhead line) and takes from it the KV
 * pool and the prompt-cache caps: what `kvwise plan` with the same settings
 * prints. */

/* serve's default context: the model's training context, at most this. */
#define KW_PLAN_SERVE_CTX 4096
/* The context serve runs with: ctx when > 0, else min(n_ctx_train, KW_PLAN_SERVE_CTX). */
int32_t kw_plan_serve_ctx(const kw_plan_model *m, int32_t ctx);

/* serve's memory flags */
typedef struct kw_plan_serve_opts {
    int32_t kv_blocks;          /* --kv-blocks: the pool in blocks; 0 = the plan's */
    int32_t cache_seqs;         /* --prompt-cache-size: the count cap; 0 = no prompt cache */
    uint64_t cache_bytes;       /* --prompt-cache-bytes: the byte cap; UINT64_MAX = the plan's */
} kw_plan_serve_opts;

/* What serve runs with. */
typedef struct kw_plan_serve {
    int32_t kv_blocks;          /* the KV pool, live sequences and prompt cache together */
    int32_t cache_max_seqs;     /* prompt-cache caps */
    uint64_t cache_max_bytes;
} kw_plan_serve;

/* From plan p (computed with serve's settings, p->o.cache_seqs = the count cap):
 *   byte cap  --prompt-cache-bytes; else the plan's prompt_cache_bytes when the
 *             plan fits; else (not every slot can hold a full-context sequence
 *             at once: requests wait for memory) half the pool; 0 without a
 *             cache (count 0);
 *   pool      --kv-blocks; else the plan's: every slot at full context + the
 *             cache's blocks (kv_pool_blocks), or all the budget leaves when the
 *             plan does not fit; never more than the budget leaves after the
 *             fixed lines.
 * -1 + err (kw_plan_limit_error) when one sequence of the context does not
 * fit beside the fixed lines. */
int kw_plan_serve_sizing(const kw_plan *p, const kw_plan_serve_opts *f, kw_plan_serve *out, kw_err *err);

/* The one "--memory-limit is too small" message of the server: `taken` bytes
 * held by what taken_what names (none when taken_what is NULL) and `need`
 * more for what need_what names; it suggests kw_plan_suggest_limit(taken +
 * need) in whole MiB, a value to paste that works on the first try. Sets
 * err, returns -1. */
uint64_t kw_plan_suggest_limit(uint64_t want);  /* want + 2% + 16 MiB, rounded up to a MiB */
int kw_plan_limit_error(kw_err *err, uint64_t limit, const char *taken_what, uint64_t taken,
                        const char *need_what, uint64_t need);

/* Loads the model and times a prefill of `tokens` positions and a few
 * decode steps (tokens/s each). Slow (it loads the weights): for --probe only. */
int kw_plan_probe(const char *model_path, int32_t tokens, uint32_t kv_type, int n_threads,
                  double *prefill_tok_s, double *decode_tok_s, kw_err *err);

/* Fixed overhead of a kvwise process measured now (kw_ledger_baseline_bytes:
 * RSS minus accounted allocations) plus an allowance for the HTTP server's
 * threads and buffers (open connections and bodies: kw_plan_connections_bytes). */
uint64_t kw_plan_measured_overhead(void);
/* The ledger's "connections" line: n open HTTP connections x the bytes one
 * may hold (KW_SERVER_CONN_BYTES, server.h) + the request bodies' shared
 * allowance (--max-body) + what each HTTP thread may hold handling a request
 * (http_threads x --request-memory). n, http_threads <= 0 and max_body,
 * request_memory 0 take the defaults. */
uint64_t kw_plan_connections_bytes(int32_t n, uint64_t max_body, int32_t http_threads, uint64_t request_memory);

#endif
