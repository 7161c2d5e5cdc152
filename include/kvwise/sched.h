/* kvwise/sched.h - the scheduler: continuous batching with chunked prefill.
 *
 * One engine thread owns the model, its workspace and the KV pool. HTTP
 * threads tokenize a request, fill a kw_sched_req and submit it; the
 * engine thread admits it into a sequence slot, prefills its prompt in
 * chunks of prefill_step tokens (at most prompt_concurrency prompts per
 * step) interleaved with one decode token for every running sequence
 * (at most decode_concurrency), samples, detokenizes, matches stop strings
 * and reports back through the request's on_event callback (called on the
 * engine thread; it must not block).
 *
 * The engine behind the scheduler is a small vtable (kw_engine) so that the
 * scheduler runs unchanged over the real model (kw_engine_model_create) or
 * over a deterministic stub used by tests and the overhead benchmark
 * (kw_engine_stub_create). Memory admission hooks live in the engine:
 * seq_begin (prefix match + reservation), seq_end (prompt-cache insert +
 * release), so the prompt cache and the memory ledger plug in there.
 *
 * Request lifetime: after submit the scheduler owns the request until it
 * delivers exactly one KW_EV_FINISH event; after that it never touches it.
 * kw_sched_cancel() may be called from any thread at any time before the
 * caller has seen FINISH. */
#ifndef KVWISE_SCHED_H
#define KVWISE_SCHED_H
#include "kvwise/common.h"
#include "kvwise/kv.h"
#include "kvwise/sampler.h"

/* ---- the engine vtable -------------------------------------------------- */

#define KW_ENGINE_WAIT (-1)
#define KW_ENGINE_NEVER (-2)
#define KW_ENGINE_NOMEM (-3)

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
    /* Thread-safe (read-only tokenizer). *ids malloc'd. */
    int (*tokenize)(kw_engine *e, const char *text, size_t len, bool add_special,
                    bool parse_special, int32_t **ids, size_t *n_ids, kw_err *err);
    /* Bytes of a token (special tokens render as nothing unless render_special). */
    size_t (*piece)(kw_engine *e, int32_t id, char *buf, size_t cap, bool render_special);
    bool (*is_eog)(kw_engine *e, int32_t id);
    /* Admission of a sequence into slot: may map a cached prefix (returns
     * the number of prompt tokens already in the KV, 0..n-1) and must
     * reserve what the sequence can need (n_reserve positions). Returns
     * KW_ENGINE_WAIT (-1) when it cannot fit now (the scheduler keeps it
     * queued), KW_ENGINE_NEVER (-2) when it never can (rejected, 400) or
     * KW_ENGINE_NOMEM (-3) when taking the memory failed (rejected, 503). */
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
     * NULL when the engine keeps no KV: the server reads its state for
     * /v1/memory and /metrics and asks it whether a request could ever fit. */
    struct kw_kvmem *kvmem;
};

typedef struct kw_engine_model_opts {
    const char *model_path;
    int32_t n_ctx;              /* 0 = min(model's n_ctx_train, 4096) */
    int32_t n_slots;
    int32_t max_batch;
    int32_t kv_blocks;          /* 0 = derived: n_ctx x n_slots */
    int32_t kv_block_tokens;    /* 0 = 32 */
    uint32_t kv_type;           /* KW_TYPE_F16, KW_TYPE_KV_I16, KW_TYPE_KV_I8, KW_TYPE_Q8_0 or KW_KV_TYPE_AUTO */
    bool mlock;
    int n_threads;              /* 0 = physical cores */
    int32_t cache_max_seqs;     /* prompt cache caps (kvmem.h); 0 = no prompt cache */
    uint64_t cache_max_bytes;
    struct kw_ledger *ledger;   /* the memory budget: KV reservations count against it (or NULL) */
    double cache_log_interval_s;/* "Prompt cache: ..." log line at most this often (0 = never) */
} kw_engine_model_opts;

/* The real model engine. NULL + err on failure. */
kw_engine *kw_engine_model_create(const kw_engine_model_opts *o, kw_err *err);

/* A deterministic stand-in for tests/benchmarks: byte-level vocabulary
 * (ids 0..255 are bytes) plus <|im_start|> <|im_end|> <|endoftext|>, a
 * ChatML template, logits a hash of (previous token, position). step_us
 * simulates the cost of a forward call. */
kw_engine *kw_engine_stub_create(int32_t n_ctx, int32_t n_slots, int32_t max_batch, int32_t step_us);

/* Gives the stub real KV memory: a paged pool of a fixed toy layout
 * (kw_engine_stub_kv_layout: 4 KiB per token) with a prompt cache and
 * admission (kvmem.h), so the memory wall can be tested without a model. */
typedef struct kw_engine_stub_kv_opts {
    int32_t kv_blocks;          /* 0 = n_ctx x n_slots positions */
    int32_t block_tokens;       /* 0 = 32 */
    int32_t cache_max_seqs;
    uint64_t cache_max_bytes;
    struct kw_ledger *ledger;
    double log_interval_s;
} kw_engine_stub_kv_opts;
int kw_engine_stub_enable_kv(kw_engine *e, const kw_engine_stub_kv_opts *o, kw_err *err);
kw_kv_layout kw_engine_stub_kv_layout(int32_t block_tokens);

/* ---- requests ----------------------------------------------------------- */

#define KW_SCHED_MAX_STOP 8
#define KW_SCHED_MAX_TOP_LOGPROBS KW_MAX_TOP_LOGPROBS   /* sampler.h */

/* A request's sampling parameters (OpenAI names); the scheduler samples
 * with kw_sample() (sampler.h), the one sampler, over the tokens generated
 * so far, with a per-request RNG seeded by seed (or the clock). */
typedef struct kw_sampling {
    float temperature;          /* 0 = greedy */
    float top_p;                /* 1 = off */
    int32_t top_k;              /* 0 = off */
    float min_p;                /* 0 = off */
    float presence_penalty;
    float frequency_penalty;
    uint64_t seed;
    bool has_seed;
} kw_sampling;

typedef enum kw_sched_ev_type {
    KW_EV_ADMITTED = 0,         /* got a slot; cached_tokens known */
    KW_EV_PROGRESS,             /* a prefill chunk finished: done/total */
    KW_EV_DELTA,                /* new text (never part of a stop string) */
    KW_EV_FINISH                /* last event */
} kw_sched_ev_type;

typedef enum kw_finish {
    KW_FINISH_NONE = 0, KW_FINISH_STOP, KW_FINISH_LENGTH, KW_FINISH_CANCELLED, KW_FINISH_ERROR,
    KW_FINISH_REJECTED          /* never admitted: the event's http_status/code say why (400 never fits, 503 busy) */
} kw_finish;
const char *kw_finish_name(kw_finish f);   /* "stop", "length", "cancelled", "error", "rejected" */

typedef struct kw_sched_event {
    kw_sched_ev_type type;
    int32_t done, total;                /* PROGRESS */
    const char *text; size_t len;       /* DELTA */
    const kw_tok_logprob *lp; int32_t n_lp; /* DELTA with logprobs: tokens released with this text */
    kw_finish finish;                   /* FINISH */
    const char *error;                  /* FINISH with KW_FINISH_ERROR */
    int32_t prompt_tokens, completion_tokens, cached_tokens;
    int32_t http_status;                /* FINISH with KW_FINISH_REJECTED: 400 or 503; with KW_FINISH_ERROR:
                                           503 when memory ran out (0 = unspecified, 500) */
    const char *code;                   /* ... and its error code ("request_exceeds_memory", "queue_timeout",
                                           "out_of_memory") */
} kw_sched_event;

typedef struct kw_sched_req kw_sched_req;
typedef void (*kw_sched_cb)(kw_sched_req *r, const kw_sched_event *ev);

struct kw_sched_req {
    /* inputs */
    int32_t *prompt;            /* malloc'd; freed by the submitter after FINISH */
    int32_t n_prompt;
    int32_t max_tokens;         /* <= 0: up to the context; clamped to what fits */
    kw_sampling sp;
    char *stop[KW_SCHED_MAX_STOP];   /* borrowed, NUL-terminated, non-empty */
    int32_t n_stop;
    bool logprobs;
    int32_t top_logprobs;       /* 0..KW_SCHED_MAX_TOP_LOGPROBS */
    bool ignore_eos;            /* keep generating past end-of-generation tokens (benchmarks) */
    int client_fd;              /* polled for hang-up each step (-1 = none) */
    const int32_t *replay;      /* TESTS ONLY (replay sampler): emit these tokens instead of sampling, then stop */
    int32_t n_replay;
    kw_sched_cb on_event;
    void *user;
    /* set by the scheduler */
    volatile int cancel;        /* set via kw_sched_cancel */
    kw_sched_req *next;         /* queue link */
    uint64_t id;
    double t_submit;            /* monotonic seconds at submit (queue timeout) */
};

typedef struct kw_sched_opts {
    int32_t decode_concurrency; /* live sequences */
    int32_t prompt_concurrency; /* prompts prefilling in one step */
    int32_t prefill_step;       /* prompt tokens per prompt per step */
    int32_t max_queue;          /* waiting requests before submit refuses (0 = unbounded) */
    bool log_progress;          /* "Prompt processing progress: a/b" lines */
    double queue_timeout_s;     /* a request waiting longer (for a slot or for memory) gets 503; 0 = no limit */
} kw_sched_opts;

typedef struct kw_sched kw_sched;

typedef struct kw_sched_stats {
    uint64_t steps, tokens_prefilled, tokens_generated, requests_done;
    int32_t active, waiting;
    double forward_seconds, step_seconds;   /* time inside forward, and whole steps */
    uint64_t rejected_queue_full, rejected_queue_timeout, rejected_never;  /* refusals by reason */
    uint64_t prompt_tokens, cached_tokens;  /* of admitted requests: all prompt tokens, and those from the cache */
} kw_sched_stats;

/* Starts the engine thread. The engine stays owned by the caller. */
kw_sched *kw_sched_start(kw_engine *e, const kw_sched_opts *o, kw_err *err);
/* Queues r. Returns -1 (err) when the queue is full or the scheduler stops. */
int kw_sched_submit(kw_sched *s, kw_sched_req *r, kw_err *err);
void kw_sched_cancel(kw_sched *s, kw_sched_req *r);
/* Cancels everything (FINISH cancelled is delivered to each) and joins. */
void kw_sched_stop(kw_sched *s);
kw_sched_stats kw_sched_get_stats(kw_sched *s);

/* ---- pieces exposed for unit tests -------------------------------------- */

/* Stop-string/UTF-8 holdback over generated text. */
typedef struct kw_textout {
    char *buf; size_t len, cap;     /* text not yet released */
    const char *const *stop; int32_t n_stop;
} kw_textout;
void kw_textout_init(kw_textout *t, const char *const *stop, int32_t n_stop);
void kw_textout_free(kw_textout *t);
/* Appends bytes; sets *n_release to the count of leading bytes of t->buf
 * that are safe to emit; returns true if a stop string matched (then
 * *n_release covers exactly the text before it). Call kw_textout_consume
 * after emitting. */
bool kw_textout_push(kw_textout *t, const char *s, size_t n, size_t *n_release);
void kw_textout_consume(kw_textout *t, size_t n);
/* At the end: everything left, with invalid UTF-8 replaced by U+FFFD. Returns bytes in out. */
size_t kw_textout_flush(kw_textout *t, char *out, size_t cap);

#endif
