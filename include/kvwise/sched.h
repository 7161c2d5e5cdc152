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
 * The engine behind the scheduler is the vtable of engine.h: the real model
 * or a test engine; memory admission (seq_begin / seq_end) lives there.
 *
 * The scheduler speaks no protocol: a request it refuses or ends for lack
 * of memory carries a kw_reject_reason, and each front-end maps reasons to
 * its own answers (src/server: HTTP statuses and OpenAI error codes).
 *
 * Request lifetime: after submit the scheduler owns the request until it
 * delivers exactly one KW_EV_FINISH event; after that it never touches it.
 * kw_sched_cancel() may be called from any thread at any time before the
 * caller has seen FINISH. */
#ifndef KVWISE_SCHED_H
#define KVWISE_SCHED_H
#include "kvwise/common.h"
#include "kvwise/engine.h"
#include "kvwise/sampler.h"

/* ---- requests ----------------------------------------------------------- */

#define KW_SCHED_MAX_STOP 8
#define KW_SCHED_MAX_TOP_LOGPROBS KW_MAX_TOP_LOGPROBS   /* sampler.h */

/* A request's sampling parameters (OpenAI names); the scheduler samples
 * with kw_sample() (sampler.h), the one sampler, over the tokens generated
 * so far, with a per-request RNG seeded by seed (or the clock). In builds
 * with the test hooks a test may plug in a sampler that chooses the tokens
 * of the requests it claims instead (testctl.h: the replay). */
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
    KW_FINISH_REJECTED          /* never admitted: the event's reason says why */
} kw_finish;
const char *kw_finish_name(kw_finish f);   /* "stop", "length", "cancelled", "error", "rejected" */

/* Why a request got no answer: FINISH with KW_FINISH_REJECTED (never
 * admitted), or with KW_FINISH_ERROR when memory ran out; KW_REJECT_NONE on
 * any other end. Retrying later can help for every reason but NEVER_FITS
 * and CONTEXT, which need a smaller request. */
typedef enum kw_reject_reason {
    KW_REJECT_NONE = 0,
    KW_REJECT_QUEUE_FULL,       /* the wait queue was full at submit (max_queue) */
    KW_REJECT_QUEUE_TIMEOUT,    /* waited longer than queue_timeout_s for a slot or for memory */
    KW_REJECT_NEVER_FITS,       /* needs more KV than the memory can ever hold */
    KW_REJECT_CONTEXT,          /* longer than the context (front-ends refuse it before submitting) */
    KW_REJECT_NOMEM,            /* taking memory failed: at admission, or a running sequence's KV */
    KW_REJECT_SHUTTING_DOWN,    /* the scheduler is stopping */
    KW_REJECT_REASON_COUNT
} kw_reject_reason;

typedef struct kw_sched_event {
    kw_sched_ev_type type;
    int32_t done, total;                /* PROGRESS */
    const char *text; size_t len;       /* DELTA */
    const kw_tok_logprob *lp; int32_t n_lp; /* DELTA with logprobs: tokens released with this text */
    kw_finish finish;                   /* FINISH */
    const char *error;                  /* FINISH with KW_FINISH_ERROR */
    int32_t prompt_tokens, completion_tokens, cached_tokens;
    kw_reject_reason reason;            /* FINISH REJECTED, or ERROR when memory ran out (else NONE) */
    int32_t stop_index;                 /* FINISH STOP by a stop string: its index in stop[] (else -1) */
} kw_sched_event;

enum { KW_GTHINK_NONE = 0, KW_GTHINK_OPEN = 1, KW_GTHINK_MAYBE = 2 };

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
    const char *tag;            /* a static label shown in kw_sched_list (the client API), or NULL */
    /* Constrained decoding (grammar.h): the sequence's matcher, borrowed
     * (the submitter frees it after FINISH), or NULL. Every sampled token is
     * chosen under its mask and accepted into it; when the grammar is
     * complete the answer ends (FINISH stop) without sampling an EOG; a
     * stuck grammar ends it with an error. grammar_think says where the
     * grammar starts: KW_GTHINK_NONE at the first token; KW_GTHINK_OPEN the
     * prompt opened a think block: unconstrained until the text "</think>"
     * (bytes of that token after it go to the matcher, blanks skipped);
     * KW_GTHINK_MAYBE the answer may open one: the first token may also be
     * think_tok (the "<think>" token), which makes it KW_GTHINK_OPEN. */
    struct kw_grammar_matcher *grammar;
    int grammar_think;
    int32_t think_tok;
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
    double queue_timeout_s;     /* a request waiting longer (for a slot or for memory) is refused
                                   (KW_REJECT_QUEUE_TIMEOUT); 0 = no limit */
} kw_sched_opts;

typedef struct kw_sched kw_sched;

typedef struct kw_sched_stats {
    uint64_t steps, tokens_prefilled, tokens_generated, requests_done;
    int32_t active, waiting;
    double forward_seconds, step_seconds;   /* time inside forward, and whole steps */
    uint64_t rejected[KW_REJECT_REASON_COUNT];  /* refusals by reason */
    uint64_t prompt_tokens, cached_tokens;  /* of admitted requests: all prompt tokens, and those from the cache */
    uint64_t grammar_tokens;                /* tokens sampled under a grammar mask */
    uint64_t grammar_closing_tokens;        /* of those, under the closing mask (the budget ran short) */
    double grammar_seconds;                 /* time in computing and applying those masks and accepting the tokens */
} kw_sched_stats;

/* Starts the engine thread. The engine stays owned by the caller. */
kw_sched *kw_sched_start(kw_engine *e, const kw_sched_opts *o, kw_err *err);
/* Queues r: 0, or the reason it is refused (KW_REJECT_QUEUE_FULL,
 * KW_REJECT_SHUTTING_DOWN) with err set; a refused r gets no event. */
int kw_sched_submit(kw_sched *s, kw_sched_req *r, kw_err *err);
void kw_sched_cancel(kw_sched *s, kw_sched_req *r);
/* Cancels everything (FINISH cancelled is delivered to each) and joins. */
void kw_sched_stop(kw_sched *s);
kw_sched_stats kw_sched_get_stats(kw_sched *s);
/* A request as kw_sched_list shows it (GET /v1/requests, the memory page). */
typedef enum { KW_REQ_QUEUED = 0, KW_REQ_PREFILL, KW_REQ_DECODE } kw_req_state;
typedef struct kw_sched_req_info {
    uint64_t id;
    const char *tag;            /* the request's tag (static) or NULL */
    kw_req_state state;
    int32_t n_prompt;           /* prompt tokens */
    int32_t cached;             /* of them, taken from the prompt cache */
    int32_t prompt_done;        /* of them, in the KV now (cached + prefilled) */
    int32_t n_gen, max_gen;     /* generated so far, and the most it may generate */
    double t_submit, t_admit;   /* monotonic seconds (CLOCK_MONOTONIC); t_admit 0 while queued */
    double t_first, t_last;     /* first and latest generated token (0: none yet) */
} kw_sched_req_info;
/* Running requests (as of the last step) then waiting ones (queue order):
 * fills at most max, returns how many. */
int kw_sched_list(kw_sched *s, kw_sched_req_info *out, int max);

/* Changes the queue limits of a running scheduler (a server's SIGHUP): a
 * smaller max_queue refuses new submissions until the queue is shorter (the
 * waiting ones stay); a new queue_timeout_s applies to every waiting request. */
void kw_sched_set_queue_limits(kw_sched *s, int32_t max_queue, double queue_timeout_s);

/* ---- pieces exposed for unit tests -------------------------------------- */

/* Stop-string/UTF-8 holdback over generated text. */
typedef struct kw_textout {
    char *buf; size_t len, cap;     /* text not yet released */
    const char *const *stop; int32_t n_stop;
    int32_t hit;                    /* the stop string the last push matched (-1: none) */
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
