/* openai.c - the OpenAI API mapping: validates and parses chat/completion
 * request bodies into scheduler requests (template, tokens, sampling,
 * stop strings, context check with max_tokens clamping), and turns
 * scheduler events into SSE chunks or the final JSON (choices, usage with
 * cached_tokens, logprobs), plus the OpenAI error shape. Unknown fields are
 * ignored; tools/tool_choice are accepted (tool calling: issue 8). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "internal.h"
#include "kvwise/toolcall.h"

/* ---- errors ------------------------------------------------------------- */

int kw_http_error_set(kw_http_error *e, int status, const char *param, const char *code,
                      const char *fmt, ...) {
    e->status = status;
    e->param = param;
    e->code = code;
    e->type = status >= 500 ? "server_error" : "invalid_request_error";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    /* Messages may quote request text (a role, a field): keep them one line. */
    for (char *p = e->message; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = ' ';
    return -1;
}

void kw_openai_reason_status(kw_finish f, kw_reject_reason why, int *status, const char **code) {
    static const struct { int status; const char *code; } refused[KW_REJECT_REASON_COUNT] = {
        [KW_REJECT_NONE] = {503, "busy"},
        [KW_REJECT_QUEUE_FULL] = {503, "queue_full"},
        [KW_REJECT_QUEUE_TIMEOUT] = {503, "queue_timeout"},
        [KW_REJECT_NEVER_FITS] = {400, "request_exceeds_memory"},
        [KW_REJECT_CONTEXT] = {400, "context_length_exceeded"},
        [KW_REJECT_NOMEM] = {503, "out_of_memory"},
        [KW_REJECT_SHUTTING_DOWN] = {503, "shutting_down"},
    };
    unsigned r = (unsigned)why < KW_REJECT_REASON_COUNT ? (unsigned)why : KW_REJECT_NONE;
    if (f == KW_FINISH_REJECTED) {
        *status = refused[r].status;
        *code = refused[r].code;
    } else if (f == KW_FINISH_ERROR && r != KW_REJECT_NONE) {
        *status = refused[r].status;       /* memory ran out mid-request: 503 out_of_memory, retry */
        *code = refused[r].code;
    } else if (f == KW_FINISH_ERROR) {
        *status = 500;
        *code = "internal_error";
    } else {
        *status = 503;                     /* cancelled: the server is stopping or the client left */
        *code = "unavailable";
    }
}

char *kw_http_error_json(const kw_http_error *e) {
    cJSON *root = cJSON_CreateObject(), *o = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(o, "message", e->message);
    cJSON_AddStringToObject(o, "type", e->type ? e->type : "invalid_request_error");
    if (e->param) cJSON_AddStringToObject(o, "param", e->param); else cJSON_AddNullToObject(o, "param");
    if (e->code) cJSON_AddStringToObject(o, "code", e->code); else cJSON_AddNullToObject(o, "code");
    if (e->code && !strcmp(e->code, "context_length_exceeded")) {
        cJSON_AddNumberToObject(o, "n_prompt_tokens", e->n_prompt);
        cJSON_AddNumberToObject(o, "n_ctx", e->n_ctx);
    }
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

/* A step that failed with `msg`: when the cause is memory (tokenizer or
 * template could not allocate) it is the server's problem, not the
 * request's: 503 out_of_memory (Retry-After), else 400 naming param. */
int kw_openai_error_400_or_oom(kw_http_error *e, const char *param, const char *msg) {
    if (strstr(msg, "out of memory")) return kw_http_error_set(e, 503, NULL, "out_of_memory", "%s", msg);
    return kw_http_error_set(e, 400, param, NULL, "%s", msg);
}

/* ---- jobs --------------------------------------------------------------- */

void kw_job_free(kw_job *j) {
    if (!j) return;
    free(j->req.prompt);
    for (int i = 0; i < KW_SCHED_MAX_STOP; i++) free(j->stop_store[i]);
    kw_sbuf_free(&j->out);
    kw_sbuf_free(&j->text);
    cJSON_Delete(j->lp);
    if (j->tp) { kw_toolparse_free(j->tp); free(j->tp); }
    kw_sbuf_free(&j->reasoning);
    cJSON_Delete(j->tool_calls);
    kw_sbuf_free(&j->call_args);
#ifdef KW_TESTCTL
    free(j->replay_ids);
#endif
    pthread_mutex_destroy(&j->mu);
    free(j);
}

static void make_id(char *buf, size_t cap, const char *prefix) {
    static unsigned long counter;
    unsigned long c = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(buf, cap, "%s-%lx%05lx", prefix, (unsigned long)ts.tv_sec, c & 0xfffff);
}

/* ---- request parsing ---------------------------------------------------- */

/* Optional number field in [lo, hi]; returns -1 with e set on a bad type/range. */
static int get_number(const cJSON *root, const char *key, double lo, double hi, double *out, kw_http_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v)) return kw_http_error_set(e, 400, key, "invalid_type", "'%s' must be a number", key);
    if (v->valuedouble < lo || v->valuedouble > hi || isnan(v->valuedouble))
        return kw_http_error_set(e, 400, key, "invalid_value", "'%s' must be between %g and %g", key, lo, hi);
    *out = v->valuedouble;
    return 1;
}

static int get_int(const cJSON *root, const char *key, double lo, double hi, int64_t *out, kw_http_error *e) {
    double d;
    int rc = get_number(root, key, lo, hi, &d, e);
    if (rc <= 0) return rc;
    if (d != floor(d)) return kw_http_error_set(e, 400, key, "invalid_type", "'%s' must be an integer", key);
    *out = (int64_t)d;
    return 1;
}

static int get_bool(const cJSON *root, const char *key, bool *out, kw_http_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) return kw_http_error_set(e, 400, key, "invalid_type", "'%s' must be a boolean", key);
    *out = cJSON_IsTrue(v);
    return 1;
}

static int parse_sampling(const cJSON *root, kw_job *j, kw_http_error *e) {
    kw_sampling *sp = &j->req.sp;
    double d;
    int64_t i;
    int rc;
    sp->temperature = 1.0f;
    sp->top_p = 1.0f;
    if ((rc = get_number(root, "temperature", 0, 2, &d, e)) < 0) return -1;
    if (rc) sp->temperature = (float)d;
    if ((rc = get_number(root, "top_p", 0, 1, &d, e)) < 0) return -1;
    if (rc) sp->top_p = (float)d;
    if ((rc = get_number(root, "min_p", 0, 1, &d, e)) < 0) return -1;
    if (rc) sp->min_p = (float)d;
    if ((rc = get_int(root, "top_k", -1e9, 1e9, &i, e)) < 0) return -1;
    if (rc) sp->top_k = i > 0 ? (int32_t)i : 0;          /* <= 0 (vLLM's -1): off */
    if ((rc = get_number(root, "presence_penalty", -2, 2, &d, e)) < 0) return -1;
    if (rc) sp->presence_penalty = (float)d;
    if ((rc = get_number(root, "frequency_penalty", -2, 2, &d, e)) < 0) return -1;
    if (rc) sp->frequency_penalty = (float)d;
    if ((rc = get_int(root, "seed", -9.2e18, 9.2e18, &i, e)) < 0) return -1;
    if (rc) { sp->seed = (uint64_t)i; sp->has_seed = true; }
    if ((rc = get_int(root, "n", 1, 1e9, &i, e)) < 0) return -1;
    if (rc && i != 1) return kw_http_error_set(e, 400, "n", "invalid_value", "only n = 1 is supported");
    return 0;
}

static int parse_stop(const cJSON *root, kw_job *j, kw_http_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "stop");
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsString(v)) {
        if (!*v->valuestring) return 0;
        j->stop_store[0] = strdup(v->valuestring);
        j->req.n_stop = 1;
    } else if (cJSON_IsArray(v)) {
        int n = cJSON_GetArraySize(v);
        if (n > KW_SCHED_MAX_STOP)
            return kw_http_error_set(e, 400, "stop", "invalid_value", "at most %d stop sequences", KW_SCHED_MAX_STOP);
        const cJSON *it;
        cJSON_ArrayForEach(it, v) {
            if (!cJSON_IsString(it)) return kw_http_error_set(e, 400, "stop", "invalid_type", "'stop' must be a string or a list of strings");
            if (!*it->valuestring) continue;
            j->stop_store[j->req.n_stop++] = strdup(it->valuestring);
        }
    } else {
        return kw_http_error_set(e, 400, "stop", "invalid_type", "'stop' must be a string or a list of strings");
    }
    for (int i = 0; i < j->req.n_stop; i++) {
        if (!j->stop_store[i]) return kw_http_error_set(e, 500, NULL, NULL, "out of memory");
        j->req.stop[i] = j->stop_store[i];
    }
    return 0;
}

int kw_openai_message_text(const cJSON *msg, int idx, kw_sbuf *out, kw_http_error *e) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(msg, "content");
    if (!c || cJSON_IsNull(c)) return 0;
    if (cJSON_IsString(c)) return kw_sbuf_puts(out, c->valuestring);
    if (!cJSON_IsArray(c))
        return kw_http_error_set(e, 400, "messages", "invalid_type", "messages[%d].content must be a string or a list of parts", idx);
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type))
            return kw_http_error_set(e, 400, "messages", "invalid_type", "messages[%d].content parts must be objects with a 'type'", idx);
        if (strcmp(type->valuestring, "text") && strcmp(type->valuestring, "input_text"))
            return kw_http_error_set(e, 400, "messages", "invalid_value", "messages[%d]: content part type '%s' is not supported (text only)", idx, type->valuestring);
        if (!cJSON_IsString(text))
            return kw_http_error_set(e, 400, "messages", "invalid_type", "messages[%d]: a text part needs a string 'text'", idx);
        kw_sbuf_puts(out, text->valuestring);
    }
    return 0;
}

static char *render_chat(const cJSON *root, const kw_chat_template *tpl, kw_http_error *e) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!msgs) { kw_http_error_set(e, 400, "messages", "missing_required_parameter", "'messages' is required"); return NULL; }
    if (!cJSON_IsArray(msgs)) { kw_http_error_set(e, 400, "messages", "invalid_type", "'messages' must be an array"); return NULL; }
    int n = cJSON_GetArraySize(msgs);
    if (n == 0) { kw_http_error_set(e, 400, "messages", "invalid_value", "'messages' must not be empty"); return NULL; }
    kw_chat_msg *m = calloc((size_t)n, sizeof *m);
    kw_sbuf *texts = calloc((size_t)n, sizeof *texts);
    char *out = NULL;
    if (!m || !texts) { kw_http_error_set(e, 500, NULL, NULL, "out of memory"); goto done; }
    int i = 0;
    const cJSON *msg;
    cJSON_ArrayForEach(msg, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
        if (!cJSON_IsObject(msg) || !cJSON_IsString(role)) {
            kw_http_error_set(e, 400, "messages", "invalid_type", "messages[%d] must be an object with a string 'role'", i);
            goto done;
        }
        if (!kw_chat_role_valid(role->valuestring)) {
            kw_http_error_set(e, 400, "messages", "invalid_value", "messages[%d]: unknown role '%s'", i, role->valuestring);
            goto done;
        }
        if (kw_openai_message_text(msg, i, &texts[i], e) < 0) goto done;
        if (kw_sbuf_add(&texts[i], "", 0) < 0) { kw_http_error_set(e, 500, NULL, NULL, "out of memory"); goto done; }
        m[i].role = role->valuestring;
        m[i].content = texts[i].p;
        i++;
    }
    kw_err err = {{0}};
    out = kw_chat_apply(tpl, m, n, root, &err);
    if (!out) kw_openai_error_400_or_oom(e, "messages", err.msg);
done:
    for (int k = 0; texts && k < n; k++) kw_sbuf_free(&texts[k]);
    free(texts);
    free(m);
    return out;
}

/* ---- tool calls and reasoning (toolcall.h) ------------------------------ */

static void on_toolparse_event(void *user, const kw_tc_event *ev);

/* tool_choice: "auto" (default), "none", "required" or {"type":"function","function":{"name":N}}. */
enum { TC_AUTO = 0, TC_NONE, TC_REQUIRED, TC_NAMED };

static bool tool_listed(const cJSON *tools, const char *name) {
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (cJSON_IsString(nm) && !strcmp(nm->valuestring, name)) return true;
    }
    return false;
}

static int parse_tool_choice(const cJSON *root, int *mode, const char **named, kw_http_error *e) {
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    bool have_tools = cJSON_IsArray(tools) && cJSON_GetArraySize(tools) > 0;
    *mode = TC_AUTO;
    *named = NULL;
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsString(v)) {
        if (!strcmp(v->valuestring, "auto")) *mode = TC_AUTO;
        else if (!strcmp(v->valuestring, "none")) *mode = TC_NONE;
        else if (!strcmp(v->valuestring, "required")) *mode = TC_REQUIRED;
        else return kw_http_error_set(e, 400, "tool_choice", "invalid_value",
                                      "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}, not \"%.64s\"", v->valuestring);
    } else if (cJSON_IsObject(v)) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(v, "type");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(v, "function");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsString(nm) || !nm->valuestring[0])
            return kw_http_error_set(e, 400, "tool_choice", "invalid_value",
                                     "a 'tool_choice' object must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
        *mode = TC_NAMED;
        *named = nm->valuestring;
    } else {
        return kw_http_error_set(e, 400, "tool_choice", "invalid_type", "'tool_choice' must be a string or an object");
    }
    if ((*mode == TC_REQUIRED || *mode == TC_NAMED) && !have_tools)
        return kw_http_error_set(e, 400, "tool_choice", "invalid_value", "'tool_choice' %s needs 'tools'",
                                 *mode == TC_REQUIRED ? "\"required\"" : "naming a function");
    if (*mode == TC_NAMED && !tool_listed(tools, *named))
        return kw_http_error_set(e, 400, "tool_choice", "invalid_value", "'tool_choice' names \"%.64s\", which is not in 'tools'", *named);
    return 0;
}

/* The call format the model is prompted with, judged from the rendered prompt. */
enum { FMT_NONE = 0, FMT_HERMES, FMT_LLAMA3, FMT_MISTRAL, FMT_MISTRAL_ARGS };

/* FMT_MISTRAL_ARGS (tokenizer v11+, `[TOOL_CALLS]NAME[ARGS]{..}`): the
 * prompt or the model's own template text writes calls with [ARGS]. */
static int call_format(const char *prompt, const kw_chat_template *tpl, const char *model_tpl) {
    if (strstr(prompt, "<tool_call>")) return FMT_HERMES;
    if (strstr(prompt, "[AVAILABLE_TOOLS]"))
        return strstr(prompt, "[ARGS]") || (model_tpl && strstr(model_tpl, "[ARGS]")) ? FMT_MISTRAL_ARGS : FMT_MISTRAL;
    if (tpl->family == KW_TPL_LLAMA3) return FMT_LLAMA3;
    return FMT_NONE;
}

/* tool_choice required / named, without constrained decoding: the assistant
 * turn is prefilled with the format's call opener (and, for a named function,
 * the call's name) so the model continues inside a call. Only when the
 * template rendered the tools (their name is in the prompt) and the format is
 * known; else "" (the model may still answer without a call). A prompt that
 * left <think> open gets it closed first. Mistral v11+: `[TOOL_CALLS]`, and
 * `NAME[ARGS]` after it for a named function. malloc'd. */
static char *tool_prefill(int mode, const char *named, const cJSON *tools, const char *prompt, const kw_chat_template *tpl,
                          const char *model_tpl) {
    kw_sbuf b = {0};
    if (mode == TC_REQUIRED || mode == TC_NAMED) {
        const char *probe = named;
        if (!probe) {
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(tools, 0), "function");
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn, "name");
            probe = cJSON_IsString(nm) ? nm->valuestring : NULL;
        }
        int fmt = call_format(prompt, tpl, model_tpl);
        if (probe && fmt != FMT_NONE && strstr(prompt, probe)) {
            if (kw_toolparse_prompt_opens_think(prompt)) kw_sbuf_puts(&b, "\n</think>\n\n");
            if (fmt == FMT_HERMES) kw_sbuf_puts(&b, "<tool_call>\n");
            else if (fmt == FMT_MISTRAL || fmt == FMT_MISTRAL_ARGS) kw_sbuf_puts(&b, "[TOOL_CALLS]");
            if (fmt == FMT_MISTRAL_ARGS) {
                if (mode == TC_NAMED && kw_toolparse_mistral_name(named)) kw_sbuf_printf(&b, "%s[ARGS]", named);
            } else if (mode == TC_NAMED) {
                cJSON *s = cJSON_CreateString(named);
                char *q = s ? cJSON_PrintUnformatted(s) : NULL;
                if (q) kw_sbuf_printf(&b, "%s{\"name\": %s, \"%s\":", fmt == FMT_MISTRAL ? "[" : "", q,
                                      fmt == FMT_LLAMA3 ? "parameters" : "arguments");
                free(q);
                cJSON_Delete(s);
            } else if (fmt == FMT_LLAMA3) {
                kw_sbuf_puts(&b, "{\"name\":");
            }
        }
    }
    kw_sbuf_add(&b, "", 0);
    return kw_sbuf_take(&b);
}

/* Starts the output parser when the request has tools (tool_choice not
 * "none") or the template / prompt uses <think>; plain requests (and
 * tool-less ones asking for logprobs) keep the text path as it was. The
 * prefill (already in the prompt) is fed to the parser first: it produces
 * no output of its own, it puts the parser inside the call. */
static int toolparse_setup(kw_job *j, const cJSON *root, const kw_chat_template *tpl, kw_engine *eng,
                           const char *prompt, int choice, const char *prefill) {
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    bool use_tools = cJSON_IsArray(tools) && cJSON_GetArraySize(tools) > 0 && choice != TC_NONE;
    bool opens_think = kw_toolparse_prompt_opens_think(prompt);
    bool thinks = opens_think || strstr(prompt, "<think>") ||
                  (eng->chat_template && strstr(eng->chat_template, "<think>"));
    if (!use_tools && (!thinks || j->logprobs)) return 0;
    unsigned flags = (use_tools ? KW_TC_TOOLS : 0) | (opens_think ? KW_TC_START_IN_THINK : 0) |
                     (use_tools && tpl->family == KW_TPL_LLAMA3 ? KW_TC_BARE_JSON : 0);
    j->tp = malloc(sizeof *j->tp);
    if (!j->tp) return -1;
    kw_toolparse_init(j->tp, flags, on_toolparse_event, j);
    const cJSON *par = cJSON_GetObjectItemCaseSensitive(root, "parallel_tool_calls");
    j->single_call = cJSON_IsFalse(par);
    if (!j->stream) {
        j->tool_calls = cJSON_CreateArray();
        if (!j->tool_calls) return -1;
    }
    if (prefill && *prefill) {
        j->prefilling = true;
        kw_toolparse_feed(j->tp, prefill, strlen(prefill));
        j->prefilling = false;
    }
    return 0;
}

/* " msgs=N last=ROLE tools=N" for the request log line: an agent's tool round
 * trip shows as a request whose last message is a tool result. */
static void set_log_note(kw_job *j, const cJSON *root) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    const cJSON *last = cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1);
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(last, "role");
    snprintf(j->log_note, sizeof j->log_note, " msgs=%d last=%.16s tools=%d", cJSON_GetArraySize(msgs),
             cJSON_IsString(role) ? role->valuestring : "?", cJSON_IsArray(tools) ? cJSON_GetArraySize(tools) : 0);
}

/* Completions prompt: a string, [string], or [token ids]. */
static int completion_prompt(const cJSON *root, kw_engine *eng, int32_t **ids, size_t *n, kw_http_error *e) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (!p) return kw_http_error_set(e, 400, "prompt", "missing_required_parameter", "'prompt' is required");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(cJSON_GetArrayItem(p, 0)))
        p = cJSON_GetArrayItem(p, 0);
    if (cJSON_IsString(p)) {
        kw_err err = {{0}};
        if (eng->tokenize(eng, p->valuestring, strlen(p->valuestring), true, true, ids, n, &err) < 0)
            return kw_openai_error_400_or_oom(e, "prompt", err.msg);
        return 0;
    }
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) > 0 && cJSON_IsNumber(cJSON_GetArrayItem(p, 0))) {
        int cnt = cJSON_GetArraySize(p);
        *ids = malloc(sizeof(int32_t) * (size_t)cnt);
        if (!*ids) return kw_http_error_set(e, 500, NULL, NULL, "out of memory");
        const cJSON *it;
        size_t k = 0;
        cJSON_ArrayForEach(it, p) {
            if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= eng->n_vocab || it->valuedouble != floor(it->valuedouble)) {
                free(*ids); *ids = NULL;
                return kw_http_error_set(e, 400, "prompt", "invalid_value", "prompt token ids must be integers in [0, %d)", eng->n_vocab);
            }
            (*ids)[k++] = (int32_t)it->valuedouble;
        }
        *n = k;
        return 0;
    }
    if (cJSON_IsArray(p)) return kw_http_error_set(e, 400, "prompt", "invalid_value", "'prompt' must be one string or one list of token ids (batches are not supported)");
    return kw_http_error_set(e, 400, "prompt", "invalid_type", "'prompt' must be a string or a list of token ids");
}

static int parse_logprobs(const cJSON *root, kw_job *j, kw_http_error *e) {
    int64_t i;
    int rc;
    if (j->chat) {
        bool lp = false;
        if (get_bool(root, "logprobs", &lp, e) < 0) return -1;
        if ((rc = get_int(root, "top_logprobs", 0, KW_SCHED_MAX_TOP_LOGPROBS, &i, e)) < 0) return -1;
        if (rc) j->top_logprobs = (int32_t)i;
        j->logprobs = lp;
    } else {
        if ((rc = get_int(root, "logprobs", 0, 5, &i, e)) < 0) return -1;
        if (rc) { j->logprobs = true; j->top_logprobs = (int32_t)i; }
    }
    if (!j->logprobs) j->top_logprobs = 0;
    j->req.logprobs = j->logprobs;
    j->req.top_logprobs = j->top_logprobs;
    return 0;
}

kw_job *kw_openai_parse(struct kw_server *srv, kw_engine *eng, const kw_chat_template *tpl,
                        bool chat, const char *body, size_t len, const char *model_id, kw_http_error *e) {
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root) { kw_http_error_set(e, 400, NULL, "invalid_json", "request body is not valid JSON"); return NULL; }
    kw_job *j = NULL;
    if (!cJSON_IsObject(root)) { kw_http_error_set(e, 400, NULL, "invalid_json", "request body must be a JSON object"); goto fail; }
    j = calloc(1, sizeof *j);
    if (!j) { kw_http_error_set(e, 500, NULL, NULL, "out of memory"); goto fail; }
    pthread_mutex_init(&j->mu, NULL);
    j->srv = srv;
    j->chat = chat;
    j->req.client_fd = -1;
    j->req.user = eng;
    j->created = (long)time(NULL);
    make_id(j->id, sizeof j->id, chat ? "chatcmpl" : "cmpl");
    snprintf(j->model, sizeof j->model, "%s", model_id);

    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (model && !cJSON_IsNull(model) && !cJSON_IsString(model)) { kw_http_error_set(e, 400, "model", "invalid_type", "'model' must be a string"); goto fail; }
    if (get_bool(root, "stream", &j->stream, e) < 0) goto fail;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) { kw_http_error_set(e, 400, "stream_options", "invalid_type", "'stream_options' must be an object"); goto fail; }
        if (get_bool(so, "include_usage", &j->include_usage, e) < 0) goto fail;
    }
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools)) { kw_http_error_set(e, 400, "tools", "invalid_type", "'tools' must be an array"); goto fail; }
    if (get_bool(root, "ignore_eos", &j->req.ignore_eos, e) < 0) goto fail;
    if (parse_sampling(root, j, e) < 0 || parse_stop(root, j, e) < 0 || parse_logprobs(root, j, e) < 0) goto fail;
    int64_t mt = 0, mct = 0;
    int rc1 = get_int(root, "max_tokens", 1, 1e12, &mt, e);
    if (rc1 < 0) goto fail;
    int rc2 = get_int(root, "max_completion_tokens", 1, 1e12, &mct, e);
    if (rc2 < 0) goto fail;
    int64_t max_tokens = rc2 ? mct : rc1 ? mt : 0;
    j->req.max_tokens = max_tokens > 0x7fffffff ? 0x7fffffff : (int32_t)max_tokens;
    if (!chat && !rc1 && !rc2) j->req.max_tokens = 16;   /* the completions API default */

    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (chat) {
        int choice;
        const char *named;
        if (parse_tool_choice(root, &choice, &named, e) < 0) goto fail;
        set_log_note(j, root);
        /* tool_choice "none": the tools are not rendered (the model is not offered them) */
        cJSON *hidden = choice == TC_NONE ? cJSON_DetachItemFromObjectCaseSensitive(root, "tools") : NULL;
        char *text = render_chat(root, tpl, e);
        if (hidden) cJSON_AddItemToObject(root, "tools", hidden);
        if (!text) goto fail;
        char *prefill = tool_prefill(choice, named, cJSON_GetObjectItemCaseSensitive(root, "tools"), text, tpl,
                                     eng->chat_template);
        if (!prefill) { kw_http_error_set(e, 500, NULL, NULL, "out of memory"); free(text); goto fail; }
        kw_sbuf full = {0};      /* the prompt the model reads: text + prefill */
        kw_sbuf_puts(&full, text);
        kw_sbuf_puts(&full, prefill);
        if (full.oom) { kw_http_error_set(e, 500, NULL, NULL, "out of memory"); free(text); free(prefill); kw_sbuf_free(&full); goto fail; }
        kw_err err = {{0}};
        /* BOS: written by the template (then not added again) or added as the vocab says */
        bool has_bos = (tpl->bos_token[0] && !strncmp(text, tpl->bos_token, strlen(tpl->bos_token))) ||
                       (tpl->bos[0] && !strncmp(text, tpl->bos, strlen(tpl->bos)));
        int rc = eng->tokenize(eng, full.p, full.len, !has_bos, true, &ids, &n_ids, &err);
        kw_sbuf_free(&full);
        if (rc == 0 && toolparse_setup(j, root, tpl, eng, text, choice, prefill) < 0) {
            kw_http_error_set(e, 500, NULL, NULL, "out of memory");
            free(text); free(prefill); free(ids); goto fail;
        }
        free(text);
        free(prefill);
        if (rc < 0) { kw_openai_error_400_or_oom(e, "messages", err.msg); goto fail; }
    } else if (completion_prompt(root, eng, &ids, &n_ids, e) < 0) {
        goto fail;
    }
    j->req.prompt = ids;
    j->req.n_prompt = (int32_t)n_ids;
#ifdef KW_TESTCTL
    if (kw_replay_setup(j, root, eng, e) < 0) goto fail;     /* serve --test-replay (test builds) */
#endif
    if (n_ids == 0) { kw_http_error_set(e, 400, chat ? "messages" : "prompt", "invalid_value", "the prompt is empty"); goto fail; }
    if ((int64_t)n_ids >= eng->n_ctx) {
        kw_http_error_set(e, 400, chat ? "messages" : "prompt", "context_length_exceeded",
                          "This model's maximum context length is %d tokens. However, your %s resulted in %zu tokens. "
                          "Please reduce the length of the %s.", eng->n_ctx, chat ? "messages" : "prompt", n_ids,
                          chat ? "messages" : "prompt");
        e->n_prompt = (int32_t)n_ids;
        e->n_ctx = eng->n_ctx;
        goto fail;
    }
    /* The scheduler reserves KV for prompt + max_tokens (or up to the
     * context); what could never be reserved is refused now with a 400,
     * never queued and never answered with a 503 the client would retry. */
    int32_t room = eng->n_ctx - (int32_t)n_ids;
    int32_t gen = j->req.max_tokens > 0 && j->req.max_tokens < room ? j->req.max_tokens : room;
    if (!kw_engine_could_ever_fit(eng, (int32_t)n_ids + gen)) {
        kw_http_error_set(e, 400, j->req.max_tokens > 0 ? "max_tokens" : chat ? "messages" : "prompt",
                          "request_exceeds_memory",
                          "This request needs KV memory for %d positions (prompt %zu + up to %d generated), "
                          "more than the server's memory budget can ever hold (at most %d positions). "
                          "Lower max_tokens or shorten the %s.", (int32_t)n_ids + gen, n_ids, gen,
                          kw_engine_max_positions(eng), chat ? "messages" : "prompt");
        goto fail;
    }
    if (!j->stream) {
        j->lp = j->logprobs ? (chat ? cJSON_CreateArray() : cJSON_CreateObject()) : NULL;
        if (j->lp && !chat) {
            cJSON_AddArrayToObject(j->lp, "tokens");
            cJSON_AddArrayToObject(j->lp, "token_logprobs");
            cJSON_AddArrayToObject(j->lp, "top_logprobs");
            cJSON_AddArrayToObject(j->lp, "text_offset");
        }
    }
    cJSON_Delete(root);
    return j;
fail:
    cJSON_Delete(root);
    kw_job_free(j);
    return NULL;
}

/* ---- responses ---------------------------------------------------------- */

static cJSON *bytes_array(const char *s, size_t n) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)s[i]));
    return a;
}

/* A token's text as valid UTF-8 (invalid bytes become U+FFFD). */
static void token_text(kw_job *j, int32_t id, char *raw, size_t *raw_n, char *txt, size_t txt_cap) {
    kw_engine *eng = j->req.user;
    size_t n = eng->piece(eng, id, raw, 64, true);
    if (n > 64) n = 64;
    *raw_n = n;
    kw_textout t;
    kw_textout_init(&t, NULL, 0);
    size_t rel;
    kw_textout_push(&t, raw, n, &rel);
    size_t m = kw_textout_flush(&t, txt, txt_cap - 1);
    txt[m] = 0;
    kw_textout_free(&t);
}

static cJSON *chat_logprob_entry(kw_job *j, const kw_tok_logprob *lp) {
    char raw[64], txt[200];
    size_t rn;
    cJSON *o = cJSON_CreateObject();
    token_text(j, lp->id, raw, &rn, txt, sizeof txt);
    cJSON_AddStringToObject(o, "token", txt);
    cJSON_AddNumberToObject(o, "logprob", lp->logprob);
    cJSON_AddItemToObject(o, "bytes", bytes_array(raw, rn));
    cJSON *top = cJSON_AddArrayToObject(o, "top_logprobs");
    for (int32_t k = 0; k < lp->n_top && k < j->top_logprobs; k++) {
        cJSON *t = cJSON_CreateObject();
        token_text(j, lp->top_id[k], raw, &rn, txt, sizeof txt);
        cJSON_AddStringToObject(t, "token", txt);
        cJSON_AddNumberToObject(t, "logprob", lp->top_logprob[k]);
        cJSON_AddItemToObject(t, "bytes", bytes_array(raw, rn));
        cJSON_AddItemToArray(top, t);
    }
    return o;
}

/* Completions (legacy) logprobs: appends to {tokens, token_logprobs, top_logprobs, text_offset}. */
static void completion_logprobs_add(kw_job *j, cJSON *acc, const kw_tok_logprob *lp, int32_t n) {
    char raw[64], txt[200];
    size_t rn;
    for (int32_t i = 0; i < n; i++) {
        token_text(j, lp[i].id, raw, &rn, txt, sizeof txt);
        cJSON_AddItemToArray(cJSON_GetObjectItem(acc, "tokens"), cJSON_CreateString(txt));
        cJSON_AddItemToArray(cJSON_GetObjectItem(acc, "token_logprobs"), cJSON_CreateNumber(lp[i].logprob));
        cJSON *top = cJSON_CreateObject();
        for (int32_t k = 0; k < lp[i].n_top && k < j->top_logprobs; k++) {
            token_text(j, lp[i].top_id[k], raw, &rn, txt, sizeof txt);
            if (!cJSON_GetObjectItemCaseSensitive(top, txt)) cJSON_AddNumberToObject(top, txt, lp[i].top_logprob[k]);
        }
        cJSON_AddItemToArray(cJSON_GetObjectItem(acc, "top_logprobs"), top);
        cJSON_AddItemToArray(cJSON_GetObjectItem(acc, "text_offset"), cJSON_CreateNumber((double)j->text_offset));
        j->text_offset += rn;
    }
}

static cJSON *usage_json(kw_job *j) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", j->prompt_tokens);
    cJSON_AddNumberToObject(u, "completion_tokens", j->completion_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", j->prompt_tokens + j->completion_tokens);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", j->cached_tokens);
    return u;
}

static cJSON *chunk_base(kw_job *j) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object", j->chat ? "chat.completion.chunk" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", j->model);
    cJSON_AddStringToObject(o, "system_fingerprint", "kvwise-" KW_VERSION);
    return o;
}

static void sse_emit(kw_job *j, cJSON *chunk) {
    char *s = cJSON_PrintUnformatted(chunk);
    cJSON_Delete(chunk);
    if (!s) return;
    kw_sbuf_puts(&j->out, "data: ");
    kw_sbuf_puts(&j->out, s);
    kw_sbuf_puts(&j->out, "\n\n");
    free(s);
}

/* One streamed choice: text (may be empty), finish reason (NULL = none). */
static void sse_choice(kw_job *j, const char *text, size_t len, const kw_tok_logprob *lp, int32_t n_lp,
                       const char *finish) {
    cJSON *o = chunk_base(j);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    char *tmp = NULL;
    if (text) { tmp = malloc(len + 1); if (tmp) { memcpy(tmp, text, len); tmp[len] = 0; } }
    if (j->chat) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (!j->sent_role) { cJSON_AddStringToObject(d, "role", "assistant"); j->sent_role = true; }
        if (tmp) cJSON_AddStringToObject(d, "content", tmp);
        if (n_lp) {
            cJSON *l = cJSON_AddObjectToObject(c, "logprobs"), *arr = cJSON_AddArrayToObject(l, "content");
            for (int32_t i = 0; i < n_lp; i++) cJSON_AddItemToArray(arr, chat_logprob_entry(j, &lp[i]));
        } else {
            cJSON_AddNullToObject(c, "logprobs");
        }
    } else {
        cJSON_AddStringToObject(c, "text", tmp ? tmp : "");
        if (n_lp) {
            cJSON *acc = cJSON_AddObjectToObject(c, "logprobs");
            cJSON_AddArrayToObject(acc, "tokens");
            cJSON_AddArrayToObject(acc, "token_logprobs");
            cJSON_AddArrayToObject(acc, "top_logprobs");
            cJSON_AddArrayToObject(acc, "text_offset");
            completion_logprobs_add(j, acc, lp, n_lp);
        } else {
            cJSON_AddNullToObject(c, "logprobs");
        }
    }
    free(tmp);
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish); else cJSON_AddNullToObject(c, "finish_reason");
    if (j->include_usage) cJSON_AddNullToObject(o, "usage");
    sse_emit(j, o);
}

/* finish_reason: "tool_calls" when the answer ended with calls. */
static const char *finish_reason(kw_job *j, kw_finish f) {
    if (f == KW_FINISH_STOP && j->tp && j->tp->n_calls > 0) return "tool_calls";
    return kw_finish_name(f);
}

/* One streamed chat chunk carrying the given delta (taken). */
static void sse_delta(kw_job *j, cJSON *delta) {
    cJSON *o = chunk_base(j);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    if (!j->sent_role) { cJSON_AddStringToObject(delta, "role", "assistant"); j->sent_role = true; }
    cJSON_AddItemToObject(c, "delta", delta);
    cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddNullToObject(c, "finish_reason");
    if (j->include_usage) cJSON_AddNullToObject(o, "usage");
    sse_emit(j, o);
}

static cJSON *string_n(const char *s, size_t n) {
    char *tmp = malloc(n + 1);
    if (!tmp) return NULL;
    memcpy(tmp, s, n);
    tmp[n] = 0;
    cJSON *v = cJSON_CreateString(tmp);
    free(tmp);
    return v;
}

/* The parser's events: content / reasoning_content / tool_calls, streamed
 * as OpenAI deltas (a call: index, id, type and name first with arguments
 * "", then each arguments fragment as the model writes it) or accumulated
 * for the final message. */
static void tool_call_delta(kw_job *j, const kw_tc_event *ev) {
    cJSON *d = cJSON_CreateObject(), *calls = cJSON_AddArrayToObject(d, "tool_calls"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(calls, c);
    cJSON_AddNumberToObject(c, "index", ev->index);
    if (ev->type == KW_TC_CALL_BEGIN) {
        cJSON_AddStringToObject(c, "id", ev->id);
        cJSON_AddStringToObject(c, "type", "function");
    }
    cJSON *f = cJSON_AddObjectToObject(c, "function");
    if (ev->type == KW_TC_CALL_BEGIN) {
        cJSON_AddStringToObject(f, "name", ev->name);
        cJSON_AddStringToObject(f, "arguments", "");
    } else {
        cJSON_AddItemToObject(f, "arguments", string_n(ev->text, ev->len));
    }
    sse_delta(j, d);
}

static void tool_call_accumulate(kw_job *j, const kw_tc_event *ev) {
    if (!j->tool_calls) return;
    if (ev->type == KW_TC_CALL_BEGIN) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "id", ev->id);
        cJSON_AddStringToObject(c, "type", "function");
        cJSON *f = cJSON_AddObjectToObject(c, "function");
        cJSON_AddStringToObject(f, "name", ev->name);
        cJSON_AddItemToArray(j->tool_calls, c);
        j->call_args.len = 0;
    } else if (ev->type == KW_TC_CALL_ARGS) {
        kw_sbuf_add(&j->call_args, ev->text, ev->len);
    } else {
        cJSON *c = cJSON_GetArrayItem(j->tool_calls, cJSON_GetArraySize(j->tool_calls) - 1);
        cJSON *f = c ? cJSON_GetObjectItemCaseSensitive(c, "function") : NULL;
        if (f) cJSON_AddItemToObject(f, "arguments", string_n(j->call_args.p ? j->call_args.p : "", j->call_args.len));
    }
}

static void on_toolparse_event(void *user, const kw_tc_event *ev) {
    kw_job *j = user;
    if (j->prefilling) return;      /* the prefilled opener is not output */
    if (ev->type == KW_TC_CONTENT) {
        if (j->stream) sse_choice(j, ev->text, ev->len, NULL, 0, NULL);
        else kw_sbuf_add(&j->text, ev->text, ev->len);
    } else if (ev->type == KW_TC_REASONING) {
        if (j->stream) {
            cJSON *d = cJSON_CreateObject();
            cJSON_AddItemToObject(d, "reasoning_content", string_n(ev->text, ev->len));
            sse_delta(j, d);
        } else {
            kw_sbuf_add(&j->reasoning, ev->text, ev->len);
        }
    } else if (j->single_call && ev->index > 0) {
        return;                 /* parallel_tool_calls: false */
    } else if (j->stream) {
        if (ev->type != KW_TC_CALL_END) tool_call_delta(j, ev);
    } else {
        tool_call_accumulate(j, ev);
    }
}

static void stream_finish(kw_job *j, const kw_sched_event *ev) {
    if (ev->finish == KW_FINISH_ERROR || ev->finish == KW_FINISH_CANCELLED) {
        kw_http_error he = {0};
        int status;
        const char *code;
        kw_openai_reason_status(ev->finish, ev->reason, &status, &code);
        kw_http_error_set(&he, status, NULL, ev->finish == KW_FINISH_CANCELLED ? "cancelled" : code, "%s",
                          ev->error ? ev->error : "request cancelled");
        char *s = kw_http_error_json(&he);
        if (s) { kw_sbuf_printf(&j->out, "data: %s\n\n", s); free(s); }
    } else {
        sse_choice(j, j->chat ? NULL : "", 0, NULL, 0, finish_reason(j, ev->finish));
        if (j->include_usage) {
            cJSON *o = chunk_base(j);
            cJSON_AddArrayToObject(o, "choices");
            cJSON_AddItemToObject(o, "usage", usage_json(j));
            sse_emit(j, o);
        }
    }
    kw_sbuf_puts(&j->out, "data: [DONE]\n\n");
}

void kw_openai_on_event(kw_job *j, const kw_sched_event *ev) {
    switch (ev->type) {
    case KW_EV_ADMITTED:
        j->admitted = true;
        j->cached_tokens = ev->cached_tokens;
        j->prompt_tokens = ev->prompt_tokens;
        if (j->stream && j->chat) sse_choice(j, "", 0, NULL, 0, NULL);   /* the role chunk */
        break;
    case KW_EV_PROGRESS:
        if (j->stream && ev->done < ev->total) kw_sbuf_printf(&j->out, ": prompt_progress %d/%d\n\n", ev->done, ev->total);
        break;
    case KW_EV_DELTA:
        if (j->tp) {
            kw_toolparse_feed(j->tp, ev->text ? ev->text : "", ev->len);
        } else if (j->stream) {
            sse_choice(j, ev->text, ev->len, ev->lp, ev->n_lp, NULL);
        } else {
            kw_sbuf_add(&j->text, ev->text ? ev->text : "", ev->len);
            if (j->lp && j->chat) for (int32_t i = 0; i < ev->n_lp; i++) cJSON_AddItemToArray(j->lp, chat_logprob_entry(j, &ev->lp[i]));
            else if (j->lp) completion_logprobs_add(j, j->lp, ev->lp, ev->n_lp);
        }
        break;
    case KW_EV_FINISH:
        j->finish = ev->finish;
        j->prompt_tokens = ev->prompt_tokens;
        j->completion_tokens = ev->completion_tokens;
        j->cached_tokens = ev->cached_tokens;
        j->reason = ev->reason;
        if (ev->error) snprintf(j->error, sizeof j->error, "%s", ev->error);
        if (j->tp && (ev->finish == KW_FINISH_STOP || ev->finish == KW_FINISH_LENGTH)) kw_toolparse_finish(j->tp);
        if (j->tp && j->tp->n_calls) {
            size_t used = strlen(j->log_note);
            snprintf(j->log_note + used, sizeof j->log_note - used, " calls=%d", j->tp->n_calls);
        }
        if (j->stream && j->admitted) stream_finish(j, ev);
        j->finished = true;
        break;
    }
}

const char *kw_openai_finish_reason(kw_job *j) { return finish_reason(j, j->finish); }

char *kw_openai_final_json(kw_job *j) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object", j->chat ? "chat.completion" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", j->model);
    cJSON_AddStringToObject(o, "system_fingerprint", "kvwise-" KW_VERSION);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    kw_sbuf_add(&j->text, "", 0);
    if (j->chat) {
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        bool has_calls = j->tool_calls && cJSON_GetArraySize(j->tool_calls) > 0;
        if (has_calls && !j->text.len) cJSON_AddNullToObject(m, "content");
        else cJSON_AddStringToObject(m, "content", j->text.p);
        if (j->reasoning.len) cJSON_AddItemToObject(m, "reasoning_content", string_n(j->reasoning.p, j->reasoning.len));
        if (has_calls) { cJSON_AddItemToObject(m, "tool_calls", j->tool_calls); j->tool_calls = NULL; }
        if (j->lp) {
            cJSON *l = cJSON_AddObjectToObject(c, "logprobs");
            cJSON_AddItemToObject(l, "content", j->lp);
            j->lp = NULL;
        } else {
            cJSON_AddNullToObject(c, "logprobs");
        }
    } else {
        cJSON_AddStringToObject(c, "text", j->text.p);
        if (j->lp) { cJSON_AddItemToObject(c, "logprobs", j->lp); j->lp = NULL; }
        else cJSON_AddNullToObject(c, "logprobs");
    }
    cJSON_AddStringToObject(c, "finish_reason", finish_reason(j, j->finish));
    cJSON_AddItemToObject(o, "usage", usage_json(j));
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

char *kw_openai_models_json(const char *model_id, long created) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data"), *m = cJSON_CreateObject();
    cJSON_AddItemToArray(data, m);
    cJSON_AddStringToObject(m, "id", model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)created);
    cJSON_AddStringToObject(m, "owned_by", "kvwise");
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}
