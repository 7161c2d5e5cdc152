/* kvwise/toolcall.h - a streaming parser that splits a model's generated
 * text into content, reasoning (<think>...</think>) and tool calls.
 *
 * Formats understood: Qwen/Hermes `<tool_call>{"name":..,"arguments":..}</tool_call>`,
 * Llama 3 `<|python_tag|>{...}` and a bare JSON object at the start of the
 * output (`{"name":..,"parameters":..}`, only with KW_TC_BARE_JSON), Mistral
 * `[TOOL_CALLS][{...}, ...]` (tokenizer v3-v7) and Mistral v11+
 * `[TOOL_CALLS]NAME[ARGS]{...}` / `[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}`
 * (each call with its own [TOOL_CALLS]; committed at the arguments' `{`).
 * Text is fed as it is generated; anything that could still be the start of
 * a tag is held back (like a stop string).
 *
 * Calls stream: once the text of a call reads `{"name": "NAME", "arguments": {`
 * (whitespace free, "parameters" for "arguments") the call is committed:
 * CALL_BEGIN (index, id, name), then CALL_ARGS fragments of the arguments
 * object as the model writes them (checked byte by byte by a JSON syntax
 * validator), then CALL_END. Before that point, output that is not a call
 * falls back to plain content, verbatim. A call in another shape (keys in
 * another order, arguments as a JSON string) is reported whole when it is
 * complete (BEGIN, one ARGS, END). If committed arguments stop being valid
 * JSON (or the output ends inside them), CALL_END has `broken` set, the
 * arguments stay as written up to that point, and the rest of the call's
 * text (through its closing tag) goes out as content. The parser never fails
 * on model output (only on out-of-memory). */
#ifndef KVWISE_TOOLCALL_H
#define KVWISE_TOOLCALL_H
#include "kvwise/common.h"

typedef enum kw_tc_ev_type {
    KW_TC_CONTENT = 0,      /* text: ordinary answer text */
    KW_TC_REASONING,        /* text: inside <think>...</think> */
    KW_TC_CALL_BEGIN,       /* index, id, name */
    KW_TC_CALL_ARGS,        /* index, text: the next fragment of the arguments (JSON text) */
    KW_TC_CALL_END          /* index, broken */
} kw_tc_ev_type;

typedef struct kw_tc_event {
    kw_tc_ev_type type;
    const char *text; size_t len;     /* CONTENT / REASONING / CALL_ARGS (not NUL-terminated) */
    int32_t index;                    /* CALL_*: 0, 1, ... in output order */
    const char *id, *name;            /* CALL_BEGIN: NUL-terminated */
    bool broken;                      /* CALL_END: the arguments are not complete JSON */
} kw_tc_event;

typedef void (*kw_tc_cb)(void *user, const kw_tc_event *ev);

enum {
    KW_TC_TOOLS = 1,        /* recognise tool calls at all */
    KW_TC_BARE_JSON = 2,    /* a leading `{"name":...}` object is a call (Llama 3 style) */
    KW_TC_START_IN_THINK = 4/* the prompt already opened <think> */
};

typedef struct kw_tc_chan { char *pend; size_t n_pend, cap_pend; bool started; } kw_tc_chan;

/* Incremental JSON syntax validator (one value). */
#define KW_JV_MAX_DEPTH 64
typedef struct kw_jv {
    int state, sub;                   /* where in the grammar; sub: literal/number/\u position */
    const char *lit;                  /* the literal being matched (true/false/null) */
    int depth;
    char stack[KW_JV_MAX_DEPTH];      /* '{' or '[' */
} kw_jv;

typedef struct kw_toolparse {
    unsigned flags;
    int state;
    char *buf; size_t len, cap;       /* text not yet decided */
    const char *marker;               /* the tag that opened the current call (fallback text) */
    int group;                        /* how calls are delimited: <tool_call>, [..] list, ;-list */
    kw_tc_chan content, reasoning;
    bool seen_nonws;                  /* any non-whitespace output yet (bare JSON detection) */
    bool strip_lead;                  /* content starts after reasoning/calls: drop its leading whitespace */
    int32_t n_calls;
    kw_jv jv;                         /* the committed call object being streamed */
    int args_depth;                   /* jv depth inside which the arguments object lives */
    bool in_args;
    uint64_t id_seed;
    int oom;
    kw_tc_cb cb; void *user;
} kw_toolparse;

void kw_toolparse_init(kw_toolparse *p, unsigned flags, kw_tc_cb cb, void *user);
/* Feeds generated text; events are delivered through cb before it returns. -1 on out of memory. */
int kw_toolparse_feed(kw_toolparse *p, const char *s, size_t n);
/* End of output: everything held back is decided and delivered. */
int kw_toolparse_finish(kw_toolparse *p);
void kw_toolparse_free(kw_toolparse *p);

/* true if the rendered prompt leaves a <think> block open at its end
 * (the template started the model's reasoning): use KW_TC_START_IN_THINK. */
bool kw_toolparse_prompt_opens_think(const char *prompt);
/* True when s is a function name the Mistral v11+ header `[TOOL_CALLS]NAME[ARGS]`
 * can carry (the parser's own rule: 1..256 of [A-Za-z0-9_.:-]). */
bool kw_toolparse_mistral_name(const char *s);

/* The JSON syntax validator on its own: init, then feed bytes; returns
 * 1 when the byte completed the value, 0 when more is needed, -1 when
 * the byte cannot continue valid JSON (the validator is then stuck). */
void kw_jv_init(kw_jv *v);
int kw_jv_feed(kw_jv *v, unsigned char c);

#endif
