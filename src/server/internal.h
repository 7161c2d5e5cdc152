/* internal.h - what the server's files share (server-internal): the job
 * that travels between an HTTP connection and the scheduler, the client API
 * table (kw_api: how each API writes its answers), the chat path every API
 * uses (chat.c: canonical chat request -> prompt tokens -> kw_sched_req,
 * events -> content / reasoning / tool calls), and each API's entry points:
 * openai.c (chat + completions), anthropic.c (Messages), responses.c
 * (Responses), ollama.c (Ollama's /api). server.c is the HTTP plumbing. */
#ifndef KW_SERVER_INTERNAL_H
#define KW_SERVER_INTERNAL_H
#include <pthread.h>
#include <cjson/cJSON.h>
#include "kvwise/sched.h"
#include "kvwise/server.h"
#include "chat_template.h"
#include "sbuf.h"

struct MHD_Connection;
struct kw_tc_event;
typedef struct kw_job kw_job;

/* An HTTP-level error: status + OpenAI error fields. */
typedef struct kw_http_error {
    int status;
    char message[512];
    const char *type;       /* "invalid_request_error", "server_error", ... */
    const char *param;      /* or NULL */
    const char *code;       /* or NULL */
    int32_t n_prompt, n_ctx;/* context_length_exceeded details */
    bool stream_failure;    /* the request asked for a stream and its API reports this error
                               inside one (kw_api.stream_error): Responses' response.failed */
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
/* The same as a kw_api.reason_error (OpenAI, Responses and Ollama share the statuses). */
void kw_openai_reason_error(kw_finish f, kw_reject_reason why, const char *msg, kw_http_error *e);

/* A client API: how its answers are written. The request side is the API's
 * parse function (below); both share the job and the chat path. Stream
 * hooks run on the engine thread with j->mu held and append to j->out. */
typedef struct kw_api {
    const char *name;           /* request log and /metrics label ("chat", "messages", ...) */
    int index;                  /* KW_API_* */
    const char *stream_type;    /* Content-Type of a stream */
    void (*open)(kw_job *j);                                   /* stream: the request got a slot */
    void (*progress)(kw_job *j, int32_t done, int32_t total);  /* stream: a prefill chunk (NULL: nothing) */
    void (*raw)(kw_job *j, const kw_sched_event *ev);          /* a delta when no parser runs (NULL: content) */
    void (*piece)(kw_job *j, const struct kw_tc_event *ev);    /* stream: content, reasoning, call pieces */
    void (*close)(kw_job *j, const kw_sched_event *ev);        /* stream: the last bytes (ok, error or cancel) */
    char *(*final_json)(kw_job *j);                            /* non-stream: the body */
    char *(*error_json)(const kw_http_error *e);               /* an error body in the API's shape */
    char *(*stream_error)(const kw_http_error *e);             /* a whole stream reporting e (NULL: none) */
    /* the status and body fields of a request that ended without an answer */
    void (*reason_error)(kw_finish f, kw_reject_reason why, const char *msg, kw_http_error *e);
} kw_api;

enum { KW_API_CHAT = 0, KW_API_COMPLETION, KW_API_MESSAGES, KW_API_COUNT_TOKENS, KW_API_RESPONSES,
       KW_API_OLLAMA_CHAT, KW_API_OLLAMA_GENERATE, KW_API_COUNT };

extern const kw_api kw_api_openai_chat, kw_api_openai_completion, kw_api_anthropic, kw_api_responses,
    kw_api_ollama_chat, kw_api_ollama_generate;

/* A streamed answer as blocks (Anthropic content blocks, Responses output
 * items): which one is open and where its text starts in j->text / j->reasoning. */
typedef struct kw_blocks {
    int index;                  /* of the open block; the next one gets index + 1 */
    int open;                   /* KW_BLK_* of the open block */
    size_t text_from;           /* where the open block's text starts */
    int seq;                    /* Responses: sequence_number of the next event */
    char item_id[48];           /* Responses: the open item's id */
    cJSON *output;              /* Responses: the finished items, in order */
} kw_blocks;
enum { KW_BLK_NONE = 0, KW_BLK_TEXT, KW_BLK_THINKING, KW_BLK_CALL };

struct kw_job {
    pthread_mutex_t mu;
    int refs;                   /* HTTP side + scheduler side */
    kw_sched_req req;
    struct kw_server *srv;
    struct MHD_Connection *mc;
    const kw_api *api;          /* how answers are written */
    bool chat, stream, include_usage;
    bool logprobs;              /* any logprobs wanted */
    int32_t top_logprobs;
    bool suspended, admitted, finished, http_gone, sent_role;
    kw_sbuf out;                /* SSE bytes not yet handed to MHD */
    size_t out_off;
    kw_sbuf text;               /* the answer's content (streamed or not) */
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
    kw_sbuf reasoning;          /* the answer's reasoning */
    cJSON *tool_calls;          /* the calls made: [{id, type, function: {name, arguments}}] */
    kw_sbuf call_args;          /* the arguments of the call being written */
    bool prefilling;            /* tool_choice prefill being fed to the parser: no output */
    bool single_call;           /* parallel_tool_calls: false -> only the first call is reported */
#ifdef KW_TESTCTL
    int32_t *replay_ids;        /* --test-replay: the scripted output's tokens */
    int32_t n_replay;
    bool replaying;             /* its output is replay_ids (replay_testctl.c) */
#endif
    char log_note[96];          /* chat: " msgs=N last=ROLE tools=N calls=N" for the request log line */
    char route_note[224];       /* " session=HEADER:VALUE cache_key=KEY": the routing keys, logged after it */
    char cache_key[72];         /* the request's prompt_cache_key (sanitised), or "" */
    /* API specifics */
    kw_blocks blk;              /* Anthropic / Responses stream state */
    cJSON *custom_tools;        /* Responses: names of the custom (freeform) tools */
    bool thinking_hidden;       /* Anthropic thinking.display "omitted": thinking blocks carry no text */
    int32_t stop_index;         /* the stop string that ended the answer (-1: none; Anthropic stop_sequence) */
    int32_t reasoning_tokens;   /* deltas that went to the reasoning (kw_job_reasoning_tokens) */
    double t_start;             /* Ollama durations: when the job was made (monotonic s) */
    double t_admitted, t_first; /* ... when it got a slot, when the first token came */
    struct gc_entry *gent;      /* structured outputs: the cached grammar req.grammar runs on (grammar_req.c) */
    const char *gparam;         /* the request field that asked for it (errors name it) */
};


/* ---- the chat path (chat.c) ------------------------------------------------ */

/* A new job for api: id "PREFIX-...", model id, engine. NULL when out of memory. */
kw_job *kw_job_new(struct kw_server *srv, kw_engine *eng, const kw_api *api, const char *id_prefix,
                   const char *model_id);
void kw_job_free(kw_job *j);
/* Scheduler callback body: bookkeeping, the parser, the API's hooks. Called with j->mu held. */
void kw_job_on_event(kw_job *j, const kw_sched_event *ev);
/* true when the answer ended with tool calls */
bool kw_job_has_calls(const kw_job *j);
/* The canonical chat request (OpenAI chat shape: messages, tools, tool_choice,
 * parallel_tool_calls, chat_template_kwargs, test_replay) -> j->req.prompt:
 * tool_choice, the template, the tool_choice prefill, tokens, the output
 * parser. -1 + e on failure. */
int kw_chat_tokenize(kw_job *j, cJSON *root, const kw_chat_template *tpl, kw_engine *eng, kw_http_error *e);
/* Before the work: a text of bytes that makes at least the context's tokens
 * (the engine's max_token_text bound), or a chat whose messages (one token
 * each at least) or whose user/system/tool text cannot fit, is refused
 * with 400 context_length_exceeded (prompt_bound.c). 0 or -1 + e. */
int kw_prompt_bytes_check(const kw_engine *eng, size_t bytes, const char *param, kw_http_error *e);
int kw_chat_messages_check(const kw_engine *eng, const cJSON *root, kw_http_error *e);
/* An upper bound of the bytes a cJSON tree of this body holds (prompt_bound.c). */
uint64_t kw_json_tree_bound(const char *body, size_t len);
/* After the prompt is set: the test replay, then empty / context / memory checks
 * (param names the prompt's field in errors). -1 + e. */
int kw_job_check(kw_job *j, const cJSON *root, kw_engine *eng, const char *param, kw_http_error *e);
/* Request fields shared by the APIs: 0 absent, 1 set, -1 + e on a bad type or range. */
int kw_json_number(const cJSON *obj, const char *key, double lo, double hi, double *out, kw_http_error *e);
int kw_json_int(const cJSON *obj, const char *key, double lo, double hi, int64_t *out, kw_http_error *e);
int kw_json_bool(const cJSON *obj, const char *key, bool *out, kw_http_error *e);
/* A number field stored as a float into *out when present (left as it is when absent). */
int kw_json_float(const cJSON *obj, const char *key, double lo, double hi, float *out, kw_http_error *e);
/* Stop strings from v (a string or a list of strings; param names it). -1 + e. */
int kw_job_set_stop(kw_job *j, const cJSON *v, const char *param, kw_http_error *e);
/* The request body as a JSON object, or NULL + a 400 (not JSON / not an object). */
cJSON *kw_json_body(const char *body, size_t len, kw_http_error *e);
/* A parser's end: frees root and canon (either may be NULL); j on ok, else j freed and NULL. */
kw_job *kw_parse_end(kw_job *j, cJSON *root, cJSON *canon, bool ok);
/* `model` (a string if given), temperature (0..temp_max, default 1) and top_p (default 1). -1 + e. */
int kw_parse_model_sampling(const cJSON *root, kw_job *j, double temp_max, kw_http_error *e);
/* A canonical tool call {id, type: "function", function: {name, arguments}} (args NULL: none yet). */
cJSON *kw_canon_call(const char *id, const char *name, const char *args);
/* o printed compactly (malloc'd) and deleted. */
char *kw_json_take(cJSON *o);
/* A string from s[0..n) (NULL when out of memory). */
cJSON *kw_json_string_n(const char *s, size_t n);
/* Output tokens spent reasoning: the deltas whose text went to the reasoning
 * (a delta is one generated token, or a few when text was held back). */
int32_t kw_job_reasoning_tokens(const kw_job *j);
/* Messages' text parts joined ("text" / "input_text" / "output_text" parts). -1 + e on other shapes. */
int kw_openai_message_text(const cJSON *msg, int idx, kw_sbuf *out, kw_http_error *e);
/* A step that failed with msg: 503 out_of_memory when memory was the cause, else 400 naming param. -1. */
int kw_openai_error_400_or_oom(kw_http_error *e, const char *param, const char *msg);
/* An SSE event "event: NAME\ndata: JSON\n\n" (name NULL: data only) from obj (taken). */
void kw_sse_event(kw_job *j, const char *name, cJSON *obj);

/* ---- the APIs' entry points --------------------------------------------------- */

/* Parses the body of /v1/chat/completions (chat=true) or /v1/completions
 * into a new job (tokenized, context-checked). NULL + e on failure. */
kw_job *kw_openai_parse(struct kw_server *srv, kw_engine *eng, const kw_chat_template *tpl,
                        bool chat, const char *body, size_t len, const char *model_id, kw_http_error *e);
/* finish_reason as the client sees it ("tool_calls" when the answer ended with calls). */
const char *kw_openai_finish_reason(kw_job *j);
/* GET /v1/models body. */
char *kw_openai_models_json(const char *model_id, long created);
/* POST /v1/messages (count=false) or /v1/messages/count_tokens (count=true:
 * the job is only rendered and tokenized; kw_anthropic_count_json answers). */
kw_job *kw_anthropic_parse(struct kw_server *srv, kw_engine *eng, const kw_chat_template *tpl, bool count,
                           const char *body, size_t len, const char *model_id, kw_http_error *e);
char *kw_anthropic_count_json(const kw_job *j);
/* POST /v1/responses. */
kw_job *kw_responses_parse(struct kw_server *srv, kw_engine *eng, const kw_chat_template *tpl,
                           const char *body, size_t len, const char *model_id, kw_http_error *e);
/* POST /api/chat (chat=true) and /api/generate. *loaded (generate with no
 * prompt: Ollama's "load the model" request) gets a body to answer at once. */
kw_job *kw_ollama_parse(struct kw_server *srv, kw_engine *eng, const kw_chat_template *tpl, bool chat,
                        const char *body, size_t len, const char *model_id, char **loaded, kw_http_error *e);
/* Ollama's GET /api/version, GET /api/tags, POST /api/show bodies. model_path may be NULL. */
char *kw_ollama_version_json(void);
char *kw_ollama_tags_json(const char *model_id, const char *model_path, long created);
char *kw_ollama_show_json(const char *model_id, const char *model_path, const char *chat_template,
                          int32_t n_ctx, const char *body, size_t len, kw_http_error *e);

/* ---- structured outputs (grammar_req.c) ------------------------------------- */

/* The server's cache of compiled grammars and their vocab indexes (one per
 * engine), memory on the ledger's grammar line. */
typedef struct kw_gcache kw_gcache;
typedef struct kw_gcache_stats {
    uint64_t compiles, hits, refused, evictions;
    double compile_seconds;     /* compiling and indexing, all compiles */
    int entries;
    uint64_t bytes;             /* vocab + entries, as reserved */
} kw_gcache_stats;
kw_gcache *kw_gcache_new(kw_engine *eng, struct kw_ledger *led);
void kw_gcache_free(kw_gcache *c);
kw_gcache_stats kw_gcache_get_stats(kw_gcache *c);
struct gc_entry;
void kw_gcache_release(kw_gcache *c, struct gc_entry *e);
/* The server's grammar cache (NULL before an engine is attached). */
kw_gcache *kw_server_gcache(struct kw_server *s);

enum { KW_GK_JSON_SCHEMA = 0, KW_GK_JSON_OBJECT, KW_GK_GBNF, KW_GK_REGEX, KW_GK_LARK, KW_GK_TOOLS };
/* Constrains j's answer by a grammar of kind KW_GK_* compiled from text
 * (cached): j->req.grammar gets a fresh matcher. param names the request
 * field in errors: 400 with the compiler's message (which names the
 * unsupported feature or the limit hit), 503 out_of_memory when the budget
 * has no room. 0 or -1 + e. */
int kw_job_set_grammar(kw_job *j, int kind, const char *text, size_t len, bool strict, const char *param,
                       kw_http_error *e);
/* The same from a JSON Schema (cJSON; NULL: any JSON value) and an optional strict flag. */
int kw_job_set_schema(kw_job *j, const cJSON *schema, const cJSON *strict, const char *param, kw_http_error *e);
/* The canonical request's `response_format` ({type: text | json_object |
 * json_schema, json_schema: {schema, strict}}) or `grammar` (GBNF text). 0
 * when neither asks for a grammar. */
int kw_job_parse_format(kw_job *j, const cJSON *root, kw_http_error *e);
/* A forced tool call (tool_choice naming a function or "required"): the
 * answer is one call, in the call format f (open / close text, arguments
 * key, or the arguments alone), to one of tools (an OpenAI-shaped array,
 * {type: function, function: {name, parameters, strict}}; when only is
 * set, just that function), its arguments under the function's parameters
 * schema (strict when the tool says strict: true). Compiled and cached as
 * KW_GK_TOOLS. param names the field for errors. */
int kw_job_set_tool_grammar(kw_job *j, const cJSON *tools, const char *only, const char *open, const char *close,
                            const char *args_key, bool args_only, const char *param, kw_http_error *e);
/* Frees the matcher and drops the cache reference (kw_job_free). */
void kw_job_grammar_free(kw_job *j);

#ifdef KW_TESTCTL
/* serve --test-replay (replay_testctl.c): sets j's scripted output from the
 * request's "test_replay" or the script's rules (nothing when replay is off). */
int kw_replay_setup(kw_job *j, const cJSON *root, kw_engine *eng, kw_http_error *e);
/* Plugs the replay sampler into the scheduler (on) or unplugs it. */
void kw_replay_plug(bool on);
#endif

#endif
