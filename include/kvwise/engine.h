/* kvwise/engine.h - the engine: what runs the model for the scheduler, and
 * what a front-end (the HTTP server, the CLI) may ask of it.
 *
 * An engine owns a model (or a stand-in), its workspace and its KV memory.
 * kw_engine is a small vtable so that the scheduler (sched.h) runs unchanged
 * over the real model (kw_engine_model_create) or over a test engine
 * (tests/lib/engine_stub.h). Memory admission lives in the engine:
 * seq_begin (prefix match + reservation) and seq_end (prompt-cache insert +
 * release), so the prompt cache and the memory ledger plug in there.
 *
 * The boundary is typed: a front-end never reaches into the KV pool or the
 * prompt cache. It asks the kw_engine_* queries below: could a request ever
 * fit, how many positions one sequence can hold, which prompt-cache caps are
 * in force, and the memory figures of /v1/memory and /metrics. Each query
 * is thread-safe (the KV memory takes its own lock) and answers for an
 * engine without KV memory too (everything fits, no cache, no figures). */
#ifndef KVWISE_ENGINE_H
#define KVWISE_ENGINE_H
#include "kvwise/common.h"
#include "kvwise/model.h"

/* seq_begin's answers besides a cached-prefix length (>= 0) */
#define KW_ENGINE_WAIT (-1)     /* does not fit now: keep it queued */
#define KW_ENGINE_NEVER (-2)    /* can never fit: refuse it */
#define KW_ENGINE_NOMEM (-3)    /* there was room, but taking it failed: refuse it, retry later */

struct cJSON;
struct kw_kvmem;
struct kw_ledger;

typedef struct kw_engine kw_engine;
struct kw_engine {
    void *impl;
    char model_id[128];
    int32_t n_vocab;
    int32_t n_ctx;              /* positions per sequence */
    int32_t n_slots;            /* sequences that may be live at once */
    int32_t max_batch;          /* tokens per forward call */
    const char *chat_template;  /* model's tokenizer.chat_template or NULL */
    const char *bos_text;       /* text of BOS for templates ("" if none) */
    const char *eos_text;
    /* The most text bytes one token stands for (kw_tokenizer_max_text): a
     * text of len bytes makes at least len / max_token_text tokens. 0 = no
     * bound known. */
    size_t max_token_text;
    /* Thread-safe (read-only tokenizer). *ids malloc'd. parse_special as
     * kw_tokenize's: 0, 1 or KW_SPECIAL_TEMPLATE. */
    int (*tokenize)(kw_engine *e, const char *text, size_t len, bool add_special,
                    int parse_special, int32_t **ids, size_t *n_ids, kw_err *err);
    /* Marks the control tokens' text in message content so that tokenize
     * with KW_SPECIAL_TEMPLATE reads it as plain text (kw_tokenizer_defuse:
     * 0 = nothing to mark, 1 = *out malloc'd, -1 = out of memory). NULL
     * when the engine has no control tokens to guard. */
    int (*defuse)(kw_engine *e, const char *s, size_t len, char **out, size_t *out_len);
    /* Bytes of a token (special tokens render as nothing unless render_special). */
    size_t (*piece)(kw_engine *e, int32_t id, char *buf, size_t cap, bool render_special);
    bool (*is_eog)(kw_engine *e, int32_t id);
    /* Admission of a sequence into slot: may map a cached prefix (returns
     * the number of prompt tokens already in the KV, 0..n-1) and must
     * reserve what the sequence can need (n_reserve positions). Returns
     * KW_ENGINE_WAIT when it cannot fit now, KW_ENGINE_NEVER when it never
     * can, KW_ENGINE_NOMEM when taking the memory failed. */
    int32_t (*seq_begin)(kw_engine *e, int32_t slot, const int32_t *prompt, int32_t n, int32_t n_reserve);
    /* Makes slot's KV cover n_positions. -1 if memory ran out. */
    int (*seq_ensure)(kw_engine *e, int32_t slot, int32_t n_positions);
    /* The sequence tokens[0..n) whose KV is complete ends; keep = offer it
     * to the prompt cache. Releases the slot's blocks. */
    void (*seq_end)(kw_engine *e, int32_t slot, const int32_t *tokens, int32_t n, bool keep);
    /* One batched step; one row of n_vocab logits per want[i] (batch order). */
    int (*forward)(kw_engine *e, int32_t n, const int32_t *tokens, const int32_t *pos,
                   const int32_t *slot, const bool *want, float *logits, kw_err *err);
    /* One line describing the KV pool / memory (startup report). */
    void (*describe)(kw_engine *e, char *buf, size_t cap);
    void (*destroy)(kw_engine *e);
    /* The KV pool + prompt cache behind seq_begin/ensure/end (kvmem.h), or
     * NULL when the engine keeps no KV. Set by the engine's constructor;
     * everyone else reads it through the kw_engine_* queries. */
    struct kw_kvmem *kvmem;
    /* The model it runs, for the memory report (kw_engine_memory_json's
     * "experts"), or NULL for a stand-in. */
    const struct kw_model *model;
};

typedef struct kw_engine_model_opts {
    const char *model_path;
    int32_t n_ctx;              /* positions per sequence (> 0; `kvwise serve`: kw_plan_serve_ctx) */
    int32_t n_slots;
    int32_t max_batch;
    int32_t kv_blocks;          /* the KV pool in blocks (> 0; `kvwise serve`: the plan's, kw_plan_serve_sizing);
                                   fewer when the budget has less room once the model is loaded */
    int32_t kv_block_tokens;    /* 0 = 32 */
    uint32_t kv_type;           /* KW_TYPE_F16, KW_TYPE_KV_I16, KW_TYPE_KV_I8, KW_TYPE_Q8_0 or KW_KV_TYPE_AUTO */
    bool mlock;
    kw_experts_mode experts;    /* mixture of experts: first use (default), load or mapped (model.h) */
    int n_threads;              /* 0 = physical cores */
    int32_t cache_max_seqs;     /* prompt cache caps (kvmem.h); 0 = no prompt cache */
    uint64_t cache_max_bytes;   /* as given (kw_plan_serve_sizing decides serve's default) */
    struct kw_ledger *ledger;   /* the memory budget: KV reservations count against it (or NULL) */
    double cache_log_interval_s;/* "Prompt cache: ..." log line at most this often (0 = never) */
    int32_t checkpoint_interval;/* hybrid models: prefill tokens between mid-prompt checkpoints of the
                                   recurrent state (0 = only at the end of the prompt and of the sequence) */
    struct kw_progress *progress; /* NULL, or where loading (repacking) reports its progress (progress.h) */
} kw_engine_model_opts;

/* The real model engine. NULL + err on failure. */
kw_engine *kw_engine_model_create(const kw_engine_model_opts *o, kw_err *err);

/* ---- typed queries -------------------------------------------------------- */

/* Would a sequence of n_positions fit if nothing else were running? */
bool kw_engine_could_ever_fit(const kw_engine *e, int32_t n_positions);
/* Most positions one sequence can ever hold: min(n_ctx, the whole pool). */
int32_t kw_engine_max_positions(const kw_engine *e);
/* The prompt-cache caps in force. false (and 0, 0) when the engine keeps no KV. */
bool kw_engine_cache_caps(const kw_engine *e, int32_t *max_seqs, uint64_t *max_bytes);
/* Sets the prompt-cache caps (a running server's SIGHUP): a lower cap
 * evicts at once, LRU first. Returns the sequences evicted now, or -1 when
 * the engine keeps no KV. */
int32_t kw_engine_set_cache_caps(kw_engine *e, int32_t max_seqs, uint64_t max_bytes);
/* Would the prompt cache keep a finished sequence now? */
bool kw_engine_caching(const kw_engine *e);
/* Prompt tokens seq_begin would find cached right now (0..n-1); changes nothing. */
int32_t kw_engine_cached_prefix(const kw_engine *e, const int32_t *prompt, int32_t n);
/* Adds the "prompt_cache" and "kv_pool" objects of /v1/memory to obj (nothing without KV),
 * and for a mixture-of-experts model "experts": mapped_bytes (every expert
 * tensor, in the file mapping), used_bytes (the experts some token has
 * chosen), resident_bytes (what the kernel has resident of them now; null
 * if it cannot say), experts, experts_used, mlock. */
void kw_engine_memory_json(const kw_engine *e, struct cJSON *obj);
/* Appends the Prometheus text of the KV pool and prompt cache (kvwise_kv_*,
 * kvwise_prompt_cache_*) to the malloc'd buffer *buf of length *len. 0 or -1 (out of memory). */
int kw_engine_memory_metrics(const kw_engine *e, char **buf, size_t *len);

#endif
