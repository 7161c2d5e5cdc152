/* chat.c - the path every client API shares, from a canonical chat request
 * to a scheduler request and from scheduler events back to an answer.
 *
 * Request side: each API (openai.c, anthropic.c, responses.c, ollama.c)
 * turns its body into a canonical chat request (OpenAI chat shape: messages
 * with tool_calls / tool results, tools, tool_choice, parallel_tool_calls,
 * chat_template_kwargs) and sets the sampling fields; kw_chat_tokenize
 * renders it with the chat template, adds the tool_choice prefill, tokenizes
 * and starts the output parser; kw_job_check runs the test replay hook and
 * refuses what can never run (empty, longer than the context, more KV than
 * the memory can ever hold).
 *
 * Answer side: kw_job_on_event keeps the job's bookkeeping, feeds generated
 * text to the tool-call / reasoning parser (toolcall.h), accumulates the
 * answer (content, reasoning, calls: every API's final body and stream
 * items read them) and calls the API's stream hooks (kw_api). Owns the job's
 * lifetime (kw_job_new / kw_job_free) and the request-field helpers. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "internal.h"
#include "kvwise/toolcall.h"

/* ---- errors and fields -------------------------------------------------- */

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
    kw_utf8_sanitize(e->message);       /* and valid UTF-8, so the error body is valid JSON */
    return -1;
}

/* A step that failed with `msg`: when the cause is memory (tokenizer or
 * template could not allocate) it is the server's problem, not the
 * request's: 503 out_of_memory (Retry-After), else 400 naming param. */
int kw_openai_error_400_or_oom(kw_http_error *e, const char *param, const char *msg) {
    if (strstr(msg, "out of memory")) return kw_http_error_set(e, 503, NULL, "out_of_memory", "%s", msg);
    return kw_http_error_set(e, 400, param, NULL, "%s", msg);
}

int kw_json_number(const cJSON *root, const char *key, double lo, double hi, double *out, kw_http_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v)) return kw_http_error_set(e, 400, key, "invalid_type", "'%s' must be a number", key);
    if (v->valuedouble < lo || v->valuedouble > hi || isnan(v->valuedouble))
        return kw_http_error_set(e, 400, key, "invalid_value", "'%s' must be between %g and %g", key, lo, hi);
    *out = v->valuedouble;
    return 1;
}

int kw_json_int(const cJSON *root, const char *key, double lo, double hi, int64_t *out, kw_http_error *e) {
    double d;
    int rc = kw_json_number(root, key, lo, hi, &d, e);
    if (rc <= 0) return rc;
    if (d != floor(d)) return kw_http_error_set(e, 400, key, "invalid_type", "'%s' must be an integer", key);
    *out = (int64_t)d;
    return 1;
}

int kw_json_float(const cJSON *root, const char *key, double lo, double hi, float *out, kw_http_error *e) {
    double d;
    int rc = kw_json_number(root, key, lo, hi, &d, e);
    if (rc > 0) *out = (float)d;
    return rc;
}

int kw_json_bool(const cJSON *root, const char *key, bool *out, kw_http_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) return kw_http_error_set(e, 400, key, "invalid_type", "'%s' must be a boolean", key);
    *out = cJSON_IsTrue(v);
    return 1;
}

int kw_job_set_stop(kw_job *j, const cJSON *v, const char *param, kw_http_error *e) {
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsString(v)) {
        if (!*v->valuestring) return 0;
        j->stop_store[0] = strdup(v->valuestring);
        j->req.n_stop = 1;
    } else if (cJSON_IsArray(v)) {
        int n = cJSON_GetArraySize(v);
        if (n > KW_SCHED_MAX_STOP)
            return kw_http_error_set(e, 400, param, "invalid_value", "at most %d stop sequences ('%s')", KW_SCHED_MAX_STOP, param);
        const cJSON *it;
        cJSON_ArrayForEach(it, v) {
            if (!cJSON_IsString(it)) return kw_http_error_set(e, 400, param, "invalid_type", "'%s' must be a string or a list of strings", param);
            if (!*it->valuestring) continue;
            j->stop_store[j->req.n_stop++] = strdup(it->valuestring);
        }
    } else {
        return kw_http_error_set(e, 400, param, "invalid_type", "'%s' must be a string or a list of strings", param);
    }
    for (int i = 0; i < j->req.n_stop; i++) {
        if (!j->stop_store[i]) return kw_http_error_set(e, 500, NULL, NULL, "out of memory");
        j->req.stop[i] = j->stop_store[i];
    }
    return 0;
}

cJSON *kw_json_string_n(const char *s, size_t n) {
    char *tmp = malloc(n + 1);
    if (!tmp) return NULL;
    if (n) memcpy(tmp, s, n);
    tmp[n] = 0;
    cJSON *v = cJSON_CreateString(tmp);
    free(tmp);
    return v;
}

int kw_parse_model_sampling(const cJSON *root, kw_job *j, double temp_max, kw_http_error *e) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (model && !cJSON_IsNull(model) && !cJSON_IsString(model))
        return kw_http_error_set(e, 400, "model", "invalid_type", "'model' must be a string");
    j->req.sp.temperature = 1.0f;
    j->req.sp.top_p = 1.0f;
    if (kw_json_float(root, "temperature", 0, temp_max, &j->req.sp.temperature, e) < 0) return -1;
    return kw_json_float(root, "top_p", 0, 1, &j->req.sp.top_p, e) < 0 ? -1 : 0;
}

cJSON *kw_canon_call(const char *id, const char *name, const char *args) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "id", id);
    cJSON_AddStringToObject(c, "type", "function");
    cJSON *f = cJSON_AddObjectToObject(c, "function");
    cJSON_AddStringToObject(f, "name", name);
    if (args) cJSON_AddStringToObject(f, "arguments", args);
    return c;
}

char *kw_json_take(cJSON *o) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

cJSON *kw_json_body(const char *body, size_t len, kw_http_error *e) {
    size_t ok = kw_utf8_valid_prefix(body, len);
    if (ok < len) {
        kw_http_error_set(e, 400, NULL, "invalid_json", "request body is not valid UTF-8 (byte 0x%02x at offset %zu); "
                          "JSON text must be UTF-8", (unsigned char)body[ok], ok);
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (!root) { kw_http_error_set(e, 400, NULL, "invalid_json", "request body is not valid JSON"); return NULL; }
    size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : len;
    while (at < len && (body[at] == ' ' || body[at] == '\t' || body[at] == '\n' || body[at] == '\r')) at++;
    if (at < len) {
        cJSON_Delete(root);
        kw_http_error_set(e, 400, NULL, "invalid_json", "request body has bytes after its JSON value (at offset %zu)", at);
        return NULL;
    }
    if (cJSON_IsObject(root)) return root;
    cJSON_Delete(root);
    kw_http_error_set(e, 400, NULL, "invalid_json", "request body must be a JSON object");
    return NULL;
}

kw_job *kw_parse_end(kw_job *j, cJSON *root, cJSON *canon, bool ok) {
    cJSON_Delete(root);
    cJSON_Delete(canon);
    if (ok) return j;
    kw_job_free(j);
    return NULL;
}

void kw_sse_event(kw_job *j, const char *name, cJSON *obj) {
    char *s = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    if (!s) return;
    if (name) kw_sbuf_printf(&j->out, "event: %s\n", name);
    kw_sbuf_puts(&j->out, "data: ");
    kw_sbuf_puts(&j->out, s);
    kw_sbuf_puts(&j->out, "\n\n");
    free(s);
}

/* ---- jobs --------------------------------------------------------------- */

static double mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void make_id(char *buf, size_t cap, const char *prefix) {
    static unsigned long counter;
    unsigned long c = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(buf, cap, "%s%lx%05lx", prefix, (unsigned long)ts.tv_sec, c & 0xfffff);
}

kw_job *kw_job_new(struct kw_server *srv, kw_engine *eng, const kw_api *api, const char *id_prefix,
                   const char *model_id) {
    kw_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    j->srv = srv;
    j->api = api;
    j->req.client_fd = -1;
    j->req.think_tok = -1;
    j->req.user = eng;
    j->created = (long)time(NULL);
    j->t_start = mono_now();
    j->stop_index = -1;
    make_id(j->id, sizeof j->id, id_prefix);
    snprintf(j->model, sizeof j->model, "%s", model_id);
    return j;
}

void kw_job_free(kw_job *j) {
    if (!j) return;
    free(j->req.prompt);
    kw_job_grammar_free(j);
    for (int i = 0; i < KW_SCHED_MAX_STOP; i++) free(j->stop_store[i]);
    kw_sbuf_free(&j->out);
    kw_sbuf_free(&j->text);
    cJSON_Delete(j->lp);
    if (j->tp) { kw_toolparse_free(j->tp); free(j->tp); }
    kw_sbuf_free(&j->reasoning);
    cJSON_Delete(j->tool_calls);
    kw_sbuf_free(&j->call_args);
    cJSON_Delete(j->blk.output);
    cJSON_Delete(j->custom_tools);
#ifdef KW_TESTCTL
    free(j->replay_ids);
#endif
    pthread_mutex_destroy(&j->mu);
    free(j);
}

bool kw_job_has_calls(const kw_job *j) { return j->tp && j->tp->n_calls > 0; }

int32_t kw_job_reasoning_tokens(const kw_job *j) {
    return j->reasoning_tokens < j->completion_tokens ? j->reasoning_tokens : j->completion_tokens;
}

/* ---- the prompt ----------------------------------------------------------- */

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
        if (strcmp(type->valuestring, "text") && strcmp(type->valuestring, "input_text") && strcmp(type->valuestring, "output_text"))
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
    if (!out && !strstr(err.msg, "out of memory") && !strncmp(err.msg, "chat template", 13))
        kw_http_error_set(e, 500, "messages", "template_error", "%s", err.msg);   /* the template's fault, not the request's */
    else if (!out)
        kw_openai_error_400_or_oom(e, "messages", err.msg);
done:
    for (int k = 0; texts && k < n; k++) kw_sbuf_free(&texts[k]);
    free(texts);
    free(m);
    return out;
}

/* ---- tool_choice and the prefill ----------------------------------------- */

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

/* tool_choice "required" / a named function: the answer must be one call
 * to the function (or to one of the tools), its arguments generated under
 * the function's parameters schema. The grammar covers the whole call text
 * in the format the prompt was rendered for, so the model writes it as it
 * was trained to and the output parser reads it as any call:
 *   Hermes      <tool_call>\n{"name": N, "arguments": A}\n</tool_call>
 *   Llama 3     {"name": N, "parameters": A}
 *   Mistral     [TOOL_CALLS] prefilled (a special token), then [{"name": N, "arguments": A}]
 *   Mistral v11 [TOOL_CALLS]N[ARGS] prefilled (special tokens), then A alone
 *   other       {"name": N, "arguments": A}, read as a bare JSON call
 * A think block comes first where the model may write one (as for
 * response_format); a prefill closes one the prompt left open. */
typedef struct forced_call {
    bool on;
    int fmt;
    char *prefill;              /* malloc'd, "" when none */
    const char *open, *close, *key;
    bool args_only;
} forced_call;

static int forced_call_plan(forced_call *fc, int mode, const char *named, const cJSON *tools, const char *prompt,
                            const kw_chat_template *tpl, const char *model_tpl, kw_http_error *e) {
    kw_sbuf b = {0};
    memset(fc, 0, sizeof *fc);
    fc->on = (mode == TC_REQUIRED || mode == TC_NAMED) && cJSON_IsArray(tools) && cJSON_GetArraySize(tools) > 0;
    fc->fmt = fc->on ? call_format(prompt, tpl, model_tpl) : FMT_NONE;
    if (fc->on) {
        if (fc->fmt == FMT_MISTRAL || fc->fmt == FMT_MISTRAL_ARGS) {
            if (kw_toolparse_prompt_opens_think(prompt)) kw_sbuf_puts(&b, "\n</think>\n\n");
            kw_sbuf_puts(&b, "[TOOL_CALLS]");
        }
        switch (fc->fmt) {
        case FMT_HERMES: fc->open = "<tool_call>\n"; fc->close = "\n</tool_call>"; break;
        case FMT_LLAMA3: fc->key = "parameters"; break;
        case FMT_MISTRAL: fc->open = "["; fc->close = "]"; break;
        case FMT_MISTRAL_ARGS: {
            const char *only = named;
            if (!only && cJSON_GetArraySize(tools) == 1) {
                const cJSON *fn = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(tools, 0), "function");
                only = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fn, "name"));
            }
            if (!only) {
                kw_sbuf_free(&b);
                return kw_http_error_set(e, 400, "tool_choice", "unsupported_value",
                                         "'tool_choice' \"required\" with several tools cannot be enforced in this model's call "
                                         "format ([TOOL_CALLS]NAME[ARGS]: the name is followed by a special token); "
                                         "name the function instead");
            }
            if (!kw_toolparse_mistral_name(only)) {
                kw_sbuf_free(&b);
                return kw_http_error_set(e, 400, "tool_choice", "invalid_value",
                                         "function name \"%.64s\" cannot be written in this model's call format", only);
            }
            kw_sbuf_printf(&b, "%s[ARGS]", only);
            fc->args_only = true;
            break;
        }
        default: break;
        }
    }
    kw_sbuf_add(&b, "", 0);
    fc->prefill = kw_sbuf_take(&b);
    return fc->prefill ? 0 : kw_http_error_set(e, 500, NULL, NULL, "out of memory");
}

/* The forced call's grammar on j (after the prompt is tokenized). */
static int forced_call_grammar(kw_job *j, const forced_call *fc, int mode, const char *named, const cJSON *tools,
                               kw_http_error *e) {
    const char *only = mode == TC_NAMED ? named : NULL;
    if (fc->args_only && !only) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(tools, 0), "function");
        only = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fn, "name"));
    }
    return kw_job_set_tool_grammar(j, tools, only, fc->open, fc->close, fc->key, fc->args_only, "tool_choice", e);
}

/* ---- the output parser ---------------------------------------------------- */

/* Accumulates what the parser reports (every API reads it at the end, and
 * the block-shaped streams read an item's text when it closes). */
static void accumulate(kw_job *j, const kw_tc_event *ev) {
    switch (ev->type) {
    case KW_TC_CONTENT: kw_sbuf_add(&j->text, ev->text, ev->len); break;
    case KW_TC_REASONING: kw_sbuf_add(&j->reasoning, ev->text, ev->len); break;
    case KW_TC_CALL_BEGIN: {
        if (!j->tool_calls) break;
        cJSON_AddItemToArray(j->tool_calls, kw_canon_call(ev->id, ev->name, NULL));
        j->call_args.len = 0;
        break;
    }
    case KW_TC_CALL_ARGS: kw_sbuf_add(&j->call_args, ev->text, ev->len); break;
    case KW_TC_CALL_END: {
        if (!j->tool_calls) break;
        cJSON *c = cJSON_GetArrayItem(j->tool_calls, cJSON_GetArraySize(j->tool_calls) - 1);
        cJSON *f = c ? cJSON_GetObjectItemCaseSensitive(c, "function") : NULL;
        if (f) cJSON_AddItemToObject(f, "arguments", kw_json_string_n(j->call_args.p ? j->call_args.p : "", j->call_args.len));
        break;
    }
    }
}

static void on_piece(void *user, const kw_tc_event *ev) {
    kw_job *j = user;
    if (j->prefilling) return;      /* the prefilled opener is not output */
    if (j->single_call && ev->type >= KW_TC_CALL_BEGIN && ev->index > 0) return;   /* parallel_tool_calls: false */
    accumulate(j, ev);
    if (j->stream) j->api->piece(j, ev);
}

/* Starts the output parser when the request has tools (tool_choice not
 * "none") or the template / prompt uses <think>; plain requests (and
 * tool-less ones asking for logprobs) keep the text path as it was. The
 * prefill (already in the prompt) is fed to the parser first: it produces
 * no output of its own, it puts the parser inside the call. */
static int toolparse_setup(kw_job *j, const cJSON *root, const kw_chat_template *tpl, kw_engine *eng,
                           const char *prompt, int choice, const forced_call *fc) {
    const char *prefill = fc->prefill;
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    bool use_tools = cJSON_IsArray(tools) && cJSON_GetArraySize(tools) > 0 && choice != TC_NONE;
    bool opens_think = kw_toolparse_prompt_opens_think(prompt);
    bool thinks = opens_think || strstr(prompt, "<think>") ||
                  (eng->chat_template && strstr(eng->chat_template, "<think>"));
    if (!use_tools && (!thinks || j->logprobs)) return 0;
    unsigned flags = (use_tools ? KW_TC_TOOLS : 0) | (opens_think ? KW_TC_START_IN_THINK : 0) |
                     (use_tools && (tpl->family == KW_TPL_LLAMA3 || (fc->on && fc->fmt == FMT_NONE)) ? KW_TC_BARE_JSON : 0);
    j->tp = malloc(sizeof *j->tp);
    if (!j->tp) return -1;
    kw_toolparse_init(j->tp, flags, on_piece, j);
    const cJSON *par = cJSON_GetObjectItemCaseSensitive(root, "parallel_tool_calls");
    j->single_call = cJSON_IsFalse(par);
    j->tool_calls = cJSON_CreateArray();
    if (!j->tool_calls) return -1;
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

/* The prompt_cache_key a client sends (OpenAI chat and Responses): kept for
 * the request log, printable characters only. */
static void set_cache_key(kw_job *j, const cJSON *root) {
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(root, "prompt_cache_key");
    if (!cJSON_IsString(k)) return;
    size_t o = 0;
    for (const char *p = k->valuestring; *p && o + 1 < sizeof j->cache_key; p++)
        j->cache_key[o++] = (unsigned char)*p > 0x20 && (unsigned char)*p < 0x7f ? *p : '_';
    j->cache_key[o] = 0;
}

/* The "<think>" token when the vocab has it as one token, else -1. */
static int32_t think_token(kw_engine *eng) {
    int32_t *ids = NULL, id = -1;
    size_t n = 0;
    kw_err err = {{0}};
    if (eng->tokenize(eng, "<think>", 7, false, 1, &ids, &n, &err) == 0 && n == 1) id = ids[0];
    free(ids);
    return id;
}

/* The answer's grammar (response_format / grammar, kw_job_parse_format) and
 * where it starts: after the think block the prompt opened, or after one
 * the answer may open when the template thinks; else at the first token. */
static int output_grammar(kw_job *j, const cJSON *root, kw_engine *eng, const char *prompt, int choice,
                          const char *named, const forced_call *fc, kw_http_error *e) {
    if (kw_job_parse_format(j, root, e) < 0) return -1;
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    if (j->req.grammar && cJSON_IsArray(tools) && cJSON_GetArraySize(tools) > 0 && choice != TC_NONE)
        return kw_http_error_set(e, 400, j->gparam, "unsupported_value",
                                 "an output grammar ('%s') together with tools is not supported; "
                                 "set tool_choice to \"none\" or drop the tools", j->gparam);
    if (fc->on && forced_call_grammar(j, fc, choice, named, tools, e) < 0) return -1;
    if (!j->req.grammar) return 0;
    if (fc->prefill && fc->prefill[0]) {
        j->req.grammar_think = KW_GTHINK_NONE;      /* the prefill is past any think block */
    } else if (kw_toolparse_prompt_opens_think(prompt)) {
        j->req.grammar_think = KW_GTHINK_OPEN;
    } else if (strstr(prompt, "<think>") || (eng->chat_template && strstr(eng->chat_template, "<think>"))) {
        j->req.think_tok = think_token(eng);
        if (j->req.think_tok >= 0) j->req.grammar_think = KW_GTHINK_MAYBE;
    }
    return 0;
}

int kw_chat_tokenize(kw_job *j, cJSON *root, const kw_chat_template *tpl, kw_engine *eng, kw_http_error *e) {
    int choice;
    const char *named;
    j->chat = true;
    if (parse_tool_choice(root, &choice, &named, e) < 0) return -1;
    set_log_note(j, root);
    set_cache_key(j, root);
    /* tool_choice "none": the tools are not rendered (the model is not offered them) */
    if (kw_chat_messages_check(eng, root, e) < 0) return -1;      /* before rendering (prompt_bound.c) */
    cJSON *hidden = choice == TC_NONE ? cJSON_DetachItemFromObjectCaseSensitive(root, "tools") : NULL;
    char *text = render_chat(root, tpl, e);
    if (hidden) cJSON_AddItemToObject(root, "tools", hidden);
    if (!text) return -1;
    forced_call fc;
    if (forced_call_plan(&fc, choice, named, cJSON_GetObjectItemCaseSensitive(root, "tools"), text, tpl,
                         eng->chat_template, e) < 0) {
        free(text);
        return -1;
    }
    char *prefill = fc.prefill;
    kw_sbuf full = {0};      /* the prompt the model reads: text + prefill */
    kw_sbuf_puts(&full, text);
    kw_sbuf_puts(&full, prefill);
    if (full.oom) {
        free(text); free(prefill); kw_sbuf_free(&full);
        return kw_http_error_set(e, 500, NULL, NULL, "out of memory");
    }
    if (kw_prompt_bytes_check(eng, full.len, "messages", e) < 0) {
        free(text); free(prefill); kw_sbuf_free(&full);
        return -1;
    }
    kw_err err = {{0}};
    /* BOS: written by the template (then not added again) or added as the vocab says */
    bool has_bos = (tpl->bos_token[0] && !strncmp(text, tpl->bos_token, strlen(tpl->bos_token))) ||
                   (tpl->bos[0] && !strncmp(text, tpl->bos, strlen(tpl->bos)));
    int32_t *ids = NULL;
    size_t n_ids = 0;
    /* special tokens only where the template wrote them, never in the messages (kw_chat_apply) */
    int rc = eng->tokenize(eng, full.p, full.len, !has_bos, KW_SPECIAL_TEMPLATE, &ids, &n_ids, &err);
    kw_sbuf_free(&full);
    if (rc == 0 && toolparse_setup(j, root, tpl, eng, text, choice, &fc) < 0) {
        free(text); free(prefill); free(ids);
        return kw_http_error_set(e, 500, NULL, NULL, "out of memory");
    }
    if (rc < 0) { free(text); free(prefill); return kw_openai_error_400_or_oom(e, "messages", err.msg); }
    j->req.prompt = ids;
    j->req.n_prompt = (int32_t)n_ids;
    rc = output_grammar(j, root, eng, text, choice, named, &fc, e);
    free(text);
    free(prefill);
    return rc;
}

int kw_job_check(kw_job *j, const cJSON *root, kw_engine *eng, const char *param, kw_http_error *e) {
#ifdef KW_TESTCTL
    if (kw_replay_setup(j, root, eng, e) < 0) return -1;     /* serve --test-replay (test builds) */
#else
    (void)root;
#endif
    int32_t n_ids = j->req.n_prompt;
    if (n_ids == 0) return kw_http_error_set(e, 400, param, "invalid_value", "the prompt is empty");
    if (n_ids >= eng->n_ctx) {
        kw_http_error_set(e, 400, param, "context_length_exceeded",
                          "This model's maximum context length is %d tokens. However, your %s resulted in %d tokens. "
                          "Please reduce the length of the %s.", eng->n_ctx, param, n_ids, param);
        e->n_prompt = n_ids;
        e->n_ctx = eng->n_ctx;
        return -1;
    }
    /* The scheduler reserves KV for prompt + max_tokens (or up to the
     * context); what could never be reserved is refused now with a 400,
     * never queued and never answered with a 503 the client would retry. */
    int32_t room = eng->n_ctx - n_ids;
    int32_t gen = j->req.max_tokens > 0 && j->req.max_tokens < room ? j->req.max_tokens : room;
    if (!kw_engine_could_ever_fit(eng, n_ids + gen))
        return kw_http_error_set(e, 400, j->req.max_tokens > 0 ? "max_tokens" : param, "request_exceeds_memory",
                                 "This request needs KV memory for %d positions (prompt %d + up to %d generated), "
                                 "more than the server's memory budget can ever hold (at most %d positions). "
                                 "Lower max_tokens or shorten the %s.", n_ids + gen, n_ids, gen,
                                 kw_engine_max_positions(eng), param);
    return 0;
}

/* ---- events --------------------------------------------------------------- */

static void on_delta(kw_job *j, const kw_sched_event *ev) {
    if (!j->t_first) j->t_first = mono_now();
    if (j->tp) {
        size_t before = j->reasoning.len;
        kw_toolparse_feed(j->tp, ev->text ? ev->text : "", ev->len);
        if (j->reasoning.len > before) j->reasoning_tokens++;   /* a delta is one generated token (or a few held back) */
    } else if (j->api->raw) {
        j->api->raw(j, ev);
    } else {
        kw_tc_event c = {.type = KW_TC_CONTENT, .text = ev->text ? ev->text : "", .len = ev->len};
        on_piece(j, &c);
    }
}

void kw_job_on_event(kw_job *j, const kw_sched_event *ev) {
    switch (ev->type) {
    case KW_EV_ADMITTED:
        j->admitted = true;
        j->t_admitted = mono_now();
        j->cached_tokens = ev->cached_tokens;
        j->prompt_tokens = ev->prompt_tokens;
        if (j->stream) j->api->open(j);
        break;
    case KW_EV_PROGRESS:
        if (j->stream && j->api->progress && ev->done < ev->total) j->api->progress(j, ev->done, ev->total);
        break;
    case KW_EV_DELTA:
        on_delta(j, ev);
        break;
    case KW_EV_FINISH:
        j->finish = ev->finish;
        j->prompt_tokens = ev->prompt_tokens;
        j->completion_tokens = ev->completion_tokens;
        j->cached_tokens = ev->cached_tokens;
        j->reason = ev->reason;
        j->stop_index = ev->stop_index;
        if (ev->error) snprintf(j->error, sizeof j->error, "%s", ev->error);
        if (j->tp && (ev->finish == KW_FINISH_STOP || ev->finish == KW_FINISH_LENGTH)) kw_toolparse_finish(j->tp);
        if (j->tp && j->tp->n_calls) {
            size_t used = strlen(j->log_note);
            snprintf(j->log_note + used, sizeof j->log_note - used, " calls=%d", j->tp->n_calls);
        }
        if (j->stream && j->admitted) j->api->close(j, ev);
        j->finished = true;
        break;
    }
}
