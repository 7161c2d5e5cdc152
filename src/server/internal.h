/* internal.h - what server.c (HTTP plumbing) and openai.c (the OpenAI
 * request/response mapping) share: the job that travels between an HTTP
 * connection and the scheduler. Server-internal. */
#ifndef KW_SERVER_INTERNAL_H
#define KW_SERVER_INTERNAL_H
#include <pthread.h>
#include <cjson/cJSON.h>
#include "kvwise/sched.h"
#include "kvwise/server.h"
#include "chat_template.h"
#include "sbuf.h"

struct MHD_Connection;

/* An HTTP-level error: status + OpenAI error fields. */
typedef struct kw_http_error {
    int status;
    char message[512];
    const char *type;       /* "invalid_request_error", "server_error", ... */
    const char *param;      /* or NULL */
    const char *code;       /* or NULL */
    int32_t n_prompt, n_ctx;/* context_length_exceeded details */
} kw_http_error;

int kw_http_error_set(kw_http_error *e, int status, const char *param, const char *code,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* {"error":{...}} as a malloc'd string. */
char *kw_http_error_json(const kw_http_error *e);
/* The HTTP status and OpenAI error code of a request that ended without an
 * answer (finish ERROR, CANCELLED or REJECTED) for the scheduler's reason:
 * the one place scheduler reasons become HTTP (400 for a request that can
 * never run as is, 503 + Retry-After for a retry later, 500 otherwise). */
void kw_openai_reason_status(kw_finish f, kw_reject_reason why, int *status, const char **code);

typedef struct kw_job {
    pthread_mutex_t mu;
    int refs;                   /* HTTP side + scheduler side */
    kw_sched_req req;
    struct kw_server *srv;
    struct MHD_Connection *mc;
    bool chat, stream, include_usage;
    bool logprobs;              /* any logprobs wanted */
    int32_t top_logprobs;
    bool suspended, admitted, finished, http_gone, sent_role;
    kw_sbuf out;                /* SSE bytes not yet handed to MHD */
    size_t out_off;
    kw_sbuf text;               /* non-stream: the whole answer */
    cJSON *lp;                  /* non-stream logprobs accumulator */
    size_t text_offset;         /* completions logprobs text_offset */
    kw_finish finish;
    kw_reject_reason reason;    /* why a REJECTED or ERROR end got no answer (the event's) */
    int32_t prompt_tokens, completion_tokens, cached_tokens;
    char error[512];
    char id[48];
    long created;
    char model[128];
    char *stop_store[KW_SCHED_MAX_STOP];
    /* tool calls / reasoning (toolcall.h): the parser over the generated text, or NULL */
    struct kw_toolparse *tp;
    kw_sbuf reasoning;          /* non-stream reasoning_content */
    cJSON *tool_calls;          /* non-stream message.tool_calls */
    kw_sbuf call_args;          /* non-stream: the arguments of the call being written */
    bool prefilling;            /* tool_choice prefill being fed to the parser: no output */
    bool single_call;           /* parallel_tool_calls: false -> only the first call is reported */
#ifdef KW_TESTCTL
    int32_t *replay_ids;        /* --test-replay: the scripted output's tokens */
    int32_t n_replay;
    bool replaying;             /* its output is replay_ids (replay_testctl.c) */
#endif
    char log_note[96];          /* chat: " msgs=N last=ROLE tools=N calls=N" for the request log line */
} kw_job;


/* Parses the body of /v1/chat/completions (chat=true) or /v1/completions
 * into a new job (tokenized, context-checked). NULL + e on failure. */
kw_job *kw_openai_parse(struct kw_server *srv, kw_engine *eng, const kw_chat_template *tpl,
                        bool chat, const char *body, size_t len, const char *model_id, kw_http_error *e);
void kw_job_free(kw_job *j);
/* Scheduler callback: turns events into SSE bytes / accumulated text. Called with j->mu held. */
void kw_openai_on_event(kw_job *j, const kw_sched_event *ev);
/* finish_reason as the client sees it ("tool_calls" when the answer ended with calls). */
const char *kw_openai_finish_reason(kw_job *j);
/* The non-stream response body. */
char *kw_openai_final_json(kw_job *j);
/* GET /v1/models body. */
char *kw_openai_models_json(const char *model_id, long created);
/* A message's content (a string, null, or a list of text parts) appended to out; -1 + e on a bad shape. */
int kw_openai_message_text(const cJSON *msg, int idx, kw_sbuf *out, kw_http_error *e);
/* A step that failed with msg: 503 out_of_memory when memory was the cause, else 400 naming param. -1. */
int kw_openai_error_400_or_oom(kw_http_error *e, const char *param, const char *msg);

#ifdef KW_TESTCTL
/* serve --test-replay (replay_testctl.c): sets j's scripted output from the
 * request's "test_replay" or the script's rules (nothing when replay is off). */
int kw_replay_setup(kw_job *j, const cJSON *root, kw_engine *eng, kw_http_error *e);
/* Plugs the replay sampler into the scheduler (on) or unplugs it. */
void kw_replay_plug(bool on);
#endif

#endif
