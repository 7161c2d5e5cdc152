/* openai.c - the OpenAI API mapping: /v1/chat/completions and
 * /v1/completions. Parses their request bodies (sampling, stop strings,
 * logprobs, max_tokens, tools; chat through the shared chat path of chat.c,
 * completions from a prompt string or token ids) and writes the answers:
 * SSE chunks (content, reasoning_content and tool_calls deltas, usage with
 * cached_tokens) or the final JSON, errors as {"error":{...}}, the
 * scheduler's refusal reasons as HTTP statuses (kw_openai_reason_status).
 * response_format and grammar constrain the answer (grammar_req.c), chat
 * and completions alike. Unknown fields are ignored. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "internal.h"
#include "kvwise/toolcall.h"

/* ---- errors ------------------------------------------------------------- */

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

/* ---- request parsing ---------------------------------------------------- */

static int parse_sampling(const cJSON *root, kw_job *j, kw_http_error *e) {
    kw_sampling *sp = &j->req.sp;
    int64_t i;
    int rc;
    sp->temperature = 1.0f;
    sp->top_p = 1.0f;
    if (kw_json_float(root, "temperature", 0, 2, &sp->temperature, e) < 0) return -1;
    if (kw_json_float(root, "top_p", 0, 1, &sp->top_p, e) < 0) return -1;
    if (kw_json_float(root, "min_p", 0, 1, &sp->min_p, e) < 0) return -1;
    if ((rc = kw_json_int(root, "top_k", -1e9, 1e9, &i, e)) < 0) return -1;
    if (rc) sp->top_k = i > 0 ? (int32_t)i : 0;          /* <= 0 (vLLM's -1): off */
    if (kw_json_float(root, "presence_penalty", -2, 2, &sp->presence_penalty, e) < 0) return -1;
    if (kw_json_float(root, "frequency_penalty", -2, 2, &sp->frequency_penalty, e) < 0) return -1;
    if ((rc = kw_json_int(root, "seed", -9.2e18, 9.2e18, &i, e)) < 0) return -1;
    if (rc) { sp->seed = (uint64_t)i; sp->has_seed = true; }
    if ((rc = kw_json_int(root, "n", 1, 1e9, &i, e)) < 0) return -1;
    if (rc && i != 1) return kw_http_error_set(e, 400, "n", "invalid_value", "only n = 1 is supported");
    return 0;
}

/* Completions prompt: a string, [string], or [token ids]. */
static int completion_prompt(const cJSON *root, kw_engine *eng, int32_t **ids, size_t *n, kw_http_error *e) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (!p) return kw_http_error_set(e, 400, "prompt", "missing_required_parameter", "'prompt' is required");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(cJSON_GetArrayItem(p, 0)))
        p = cJSON_GetArrayItem(p, 0);
    if (cJSON_IsString(p)) {
        kw_err err = {{0}};
        if (kw_prompt_bytes_check(eng, strlen(p->valuestring), "prompt", e) < 0) return -1;
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
        if (kw_json_bool(root, "logprobs", &lp, e) < 0) return -1;
        if ((rc = kw_json_int(root, "top_logprobs", 0, KW_SCHED_MAX_TOP_LOGPROBS, &i, e)) < 0) return -1;
        if (rc) j->top_logprobs = (int32_t)i;
        j->logprobs = lp;
    } else {
        if ((rc = kw_json_int(root, "logprobs", 0, 5, &i, e)) < 0) return -1;
        if (rc) { j->logprobs = true; j->top_logprobs = (int32_t)i; }
    }
    if (!j->logprobs) j->top_logprobs = 0;
    j->req.logprobs = j->logprobs;
    j->req.top_logprobs = j->top_logprobs;
    return 0;
}

kw_job *kw_openai_parse(struct kw_server *srv, kw_engine *eng, const kw_chat_template *tpl,
                        bool chat, const char *body, size_t len, const char *model_id, kw_http_error *e) {
    cJSON *root = kw_json_body(body, len, e);
    if (!root) return NULL;
    kw_job *j = kw_job_new(srv, eng, chat ? &kw_api_openai_chat : &kw_api_openai_completion, chat ? "chatcmpl-" : "cmpl-", model_id);
    if (!j) { kw_http_error_set(e, 500, NULL, NULL, "out of memory"); goto fail; }
    j->chat = chat;

    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (model && !cJSON_IsNull(model) && !cJSON_IsString(model)) { kw_http_error_set(e, 400, "model", "invalid_type", "'model' must be a string"); goto fail; }
    if (kw_json_bool(root, "stream", &j->stream, e) < 0) goto fail;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) { kw_http_error_set(e, 400, "stream_options", "invalid_type", "'stream_options' must be an object"); goto fail; }
        if (kw_json_bool(so, "include_usage", &j->include_usage, e) < 0) goto fail;
    }
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools)) { kw_http_error_set(e, 400, "tools", "invalid_type", "'tools' must be an array"); goto fail; }
    if (kw_json_bool(root, "ignore_eos", &j->req.ignore_eos, e) < 0) goto fail;
    if (parse_sampling(root, j, e) < 0 || kw_job_set_stop(j, cJSON_GetObjectItemCaseSensitive(root, "stop"), "stop", e) < 0 ||
        parse_logprobs(root, j, e) < 0) goto fail;
    int64_t mt = 0, mct = 0;
    int rc1 = kw_json_int(root, "max_tokens", 1, 1e12, &mt, e);
    if (rc1 < 0) goto fail;
    int rc2 = kw_json_int(root, "max_completion_tokens", 1, 1e12, &mct, e);
    if (rc2 < 0) goto fail;
    int64_t max_tokens = rc2 ? mct : rc1 ? mt : 0;
    j->req.max_tokens = max_tokens > 0x7fffffff ? 0x7fffffff : (int32_t)max_tokens;
    if (!chat && !rc1 && !rc2) j->req.max_tokens = 16;   /* the completions API default */

    if (chat) {
        if (kw_chat_tokenize(j, root, tpl, eng, e) < 0) goto fail;
    } else {
        int32_t *ids = NULL;
        size_t n_ids = 0;
        if (completion_prompt(root, eng, &ids, &n_ids, e) < 0) goto fail;
        j->req.prompt = ids;
        j->req.n_prompt = (int32_t)n_ids;
        if (kw_job_parse_format(j, root, e) < 0) goto fail;
    }
    if (kw_job_check(j, root, eng, chat ? "messages" : "prompt", e) < 0) goto fail;
    if (!j->stream) {
        j->lp = j->logprobs ? (chat ? cJSON_CreateArray() : cJSON_CreateObject()) : NULL;
        if (j->lp && !chat) {
            cJSON_AddArrayToObject(j->lp, "tokens");
            cJSON_AddArrayToObject(j->lp, "token_logprobs");
            cJSON_AddArrayToObject(j->lp, "top_logprobs");
            cJSON_AddArrayToObject(j->lp, "text_offset");
        }
    }
    return kw_parse_end(j, root, NULL, true);
fail:
    return kw_parse_end(j, root, NULL, false);
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

/* The fields every OpenAI response object opens with; `object` names its kind. */
static cJSON *response_head(kw_job *j, const char *object) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", j->model);
    cJSON_AddStringToObject(o, "system_fingerprint", "kvwise-" KW_VERSION);
    return o;
}

static cJSON *chunk_base(kw_job *j) { return response_head(j, j->chat ? "chat.completion.chunk" : "text_completion"); }

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
    if (f == KW_FINISH_STOP && kw_job_has_calls(j)) return "tool_calls";
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

/* The parser's events streamed as OpenAI deltas: content, reasoning_content,
 * tool_calls (a call: index, id, type and name first with arguments "",
 * then each arguments fragment as the model writes it). */
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
        cJSON_AddItemToObject(f, "arguments", kw_json_string_n(ev->text, ev->len));
    }
    sse_delta(j, d);
}

static void openai_piece(kw_job *j, const kw_tc_event *ev) {
    if (ev->type == KW_TC_CONTENT) {
        sse_choice(j, ev->text, ev->len, NULL, 0, NULL);
    } else if (ev->type == KW_TC_REASONING) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddItemToObject(d, "reasoning_content", kw_json_string_n(ev->text, ev->len));
        sse_delta(j, d);
    } else if (ev->type != KW_TC_CALL_END) {
        tool_call_delta(j, ev);
    }
}

/* A delta without the parser: the text with its logprobs, streamed or kept. */
static void openai_raw(kw_job *j, const kw_sched_event *ev) {
    if (j->stream) {
        sse_choice(j, ev->text, ev->len, ev->lp, ev->n_lp, NULL);
        return;
    }
    kw_sbuf_add(&j->text, ev->text ? ev->text : "", ev->len);
    if (j->lp && j->chat) for (int32_t i = 0; i < ev->n_lp; i++) cJSON_AddItemToArray(j->lp, chat_logprob_entry(j, &ev->lp[i]));
    else if (j->lp) completion_logprobs_add(j, j->lp, ev->lp, ev->n_lp);
}

static void openai_open(kw_job *j) {
    if (j->chat) sse_choice(j, "", 0, NULL, 0, NULL);   /* the role chunk */
}

static void openai_progress(kw_job *j, int32_t done, int32_t total) {
    kw_sbuf_printf(&j->out, ": prompt_progress %d/%d\n\n", done, total);
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

const char *kw_openai_finish_reason(kw_job *j) { return finish_reason(j, j->finish); }

static char *openai_final_json(kw_job *j) {
    cJSON *o = response_head(j, j->chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    kw_sbuf_add(&j->text, "", 0);
    kw_sbuf_add(&j->reasoning, "", 0);
    if (j->chat) {
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        bool has_calls = j->tool_calls && cJSON_GetArraySize(j->tool_calls) > 0;
        if (has_calls && !j->text.len) cJSON_AddNullToObject(m, "content");
        else cJSON_AddStringToObject(m, "content", j->text.p);
        if (j->reasoning.len) cJSON_AddStringToObject(m, "reasoning_content", j->reasoning.p);
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
    return kw_json_take(o);
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
    return kw_json_take(o);
}

void kw_openai_reason_error(kw_finish f, kw_reject_reason why, const char *msg, kw_http_error *e) {
    int status;
    const char *code;
    kw_openai_reason_status(f, why, &status, &code);
    kw_http_error_set(e, status, NULL, code, "%s", msg);
}

const kw_api kw_api_openai_chat = {
    .name = "chat", .index = KW_API_CHAT, .stream_type = "text/event-stream",
    .open = openai_open, .progress = openai_progress, .raw = openai_raw, .piece = openai_piece,
    .close = stream_finish, .final_json = openai_final_json, .error_json = kw_http_error_json,
    .reason_error = kw_openai_reason_error,
};

const kw_api kw_api_openai_completion = {
    .name = "completion", .index = KW_API_COMPLETION, .stream_type = "text/event-stream",
    .open = openai_open, .progress = openai_progress, .raw = openai_raw, .piece = openai_piece,
    .close = stream_finish, .final_json = openai_final_json, .error_json = kw_http_error_json,
    .reason_error = kw_openai_reason_error,
};
