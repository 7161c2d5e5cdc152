/* ollama.c - the part of Ollama's API that tools use: GET /api/version,
 * GET /api/tags, POST /api/show, POST /api/chat, POST /api/generate.
 *
 * kvwise serves one model: every `model` name reaches it (the listed name
 * is the server's model id). Requests: /api/chat's messages (roles system /
 * user / assistant / tool; assistant tool_calls with object arguments,
 * thinking; a tool result's tool_name) and tools become the canonical chat
 * request of chat.c; /api/generate renders `system` + `prompt` with the chat
 * template, or sends the prompt as is with raw: true; a generate request
 * without a prompt is Ollama's "load the model" call, answered at once with
 * done_reason "load". options applied: temperature, top_p, top_k, min_p,
 * seed, num_predict, stop, presence_penalty, frequency_penalty; refused
 * unless neutral (a sampler kvwise does not have): repeat_penalty,
 * mirostat, typical_p, tfs_z; other options (num_ctx, num_gpu, num_thread,
 * ...) and keep_alive describe the runtime and are ignored. think: false
 * turns thinking off (enable_thinking false). format: "json" constrains the
 * answer to a JSON object, a JSON Schema object to that schema (the same
 * grammar request as chat's response_format, grammar_req.c); any other
 * value is a 400 naming format. Refused with a 400: images, suffix,
 * template, context.
 *
 * Answers are NDJSON when streaming (stream defaults to true, as in
 * Ollama): {"model","created_at","message":{"role","content","thinking",
 * "tool_calls"},"done":false} per piece (a tool call whole, when it ends;
 * generate: "response" / "thinking"), then a last object with done: true,
 * done_reason (stop, length), durations in ns, prompt_eval_count (all prompt
 * tokens), prompt_eval_cached_count (those read from the prompt cache) and
 * eval_count. Errors are {"error": "..."}. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "internal.h"
#include "kvwise/gguf.h"
#include "kvwise/toolcall.h"

/* The Ollama API version whose surface this implements (clients check it). */
#define KW_OLLAMA_API_VERSION "0.12.0"

/* ---- request -------------------------------------------------------------- */

static int map_messages(const cJSON *root, cJSON *canon, kw_http_error *e) {
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!cJSON_IsArray(in)) return kw_http_error_set(e, 400, "messages", "invalid_type", "'messages' must be an array");
    cJSON *msgs = cJSON_AddArrayToObject(canon, "messages");
    int i = 0, n_call = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, in) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        const cJSON *images = cJSON_GetObjectItemCaseSensitive(m, "images");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role))
            return kw_http_error_set(e, 400, "messages", "invalid_type", "messages[%d] needs a string 'role'", i);
        if (content && !cJSON_IsNull(content) && !cJSON_IsString(content))
            return kw_http_error_set(e, 400, "messages", "invalid_type", "messages[%d].content must be a string", i);
        if (cJSON_IsArray(images) && cJSON_GetArraySize(images) > 0)
            return kw_http_error_set(e, 400, "messages", "invalid_value", "messages[%d]: images are not supported (text only)", i);
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "role", role->valuestring);
        cJSON_AddStringToObject(c, "content", cJSON_IsString(content) ? content->valuestring : "");
        const cJSON *thinking = cJSON_GetObjectItemCaseSensitive(m, "thinking");
        if (cJSON_IsString(thinking) && thinking->valuestring[0]) cJSON_AddStringToObject(c, "reasoning_content", thinking->valuestring);
        const cJSON *tname = cJSON_GetObjectItemCaseSensitive(m, "tool_name");
        if (cJSON_IsString(tname)) cJSON_AddStringToObject(c, "name", tname->valuestring);
        const cJSON *tid = cJSON_GetObjectItemCaseSensitive(m, "tool_call_id");
        if (cJSON_IsString(tid)) cJSON_AddStringToObject(c, "tool_call_id", tid->valuestring);
        cJSON_AddItemToArray(msgs, c);
        const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), *call;
        if (!cJSON_IsArray(calls) || !cJSON_GetArraySize(calls)) { i++; continue; }
        cJSON *out = cJSON_AddArrayToObject(c, "tool_calls");
        cJSON_ArrayForEach(call, calls) {
            const cJSON *f = cJSON_GetObjectItemCaseSensitive(call, "function");
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
            const cJSON *args = cJSON_GetObjectItemCaseSensitive(f, "arguments");
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(call, "id");
            if (!cJSON_IsString(name))
                return kw_http_error_set(e, 400, "messages", "invalid_type", "messages[%d]: a tool call needs function.name", i);
            char *a = cJSON_IsString(args) ? strdup(args->valuestring) : args ? cJSON_PrintUnformatted(args) : strdup("{}");
            char idbuf[32];
            snprintf(idbuf, sizeof idbuf, "call_%d", n_call++);
            cJSON_AddItemToArray(out, kw_canon_call(cJSON_IsString(id) ? id->valuestring : idbuf, name->valuestring, a ? a : "{}"));
            free(a);
        }
        i++;
    }
    if (!i) return kw_http_error_set(e, 400, "messages", "invalid_value", "'messages' must not be empty");
    return 0;
}

/* options: the sampling ones are applied; a non-neutral value of a sampler
 * kvwise does not have is refused; the runtime ones are ignored. */
static int parse_options(const cJSON *root, kw_job *j, kw_http_error *e) {
    kw_sampling *sp = &j->req.sp;
    sp->temperature = 0.8f;                     /* Ollama's defaults */
    sp->top_p = 0.9f;
    sp->top_k = 40;
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "options");
    if (!o || cJSON_IsNull(o)) return 0;
    if (!cJSON_IsObject(o)) return kw_http_error_set(e, 400, "options", "invalid_type", "'options' must be an object");
    static const struct { const char *key; double neutral; } refused[] = {
        {"repeat_penalty", 1}, {"mirostat", 0}, {"typical_p", 1}, {"tfs_z", 1}};
    for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, refused[k].key);
        if (cJSON_IsNumber(v) && v->valuedouble != refused[k].neutral)
            return kw_http_error_set(e, 400, refused[k].key, "invalid_value", "options.%s is not supported (only %g)",
                                     refused[k].key, refused[k].neutral);
    }
    double d;
    int64_t n;
    int rc;
    if ((rc = kw_json_number(o, "temperature", 0, 2, &d, e)) < 0) return -1;
    if (rc) sp->temperature = (float)d;
    if ((rc = kw_json_number(o, "top_p", 0, 1, &d, e)) < 0) return -1;
    if (rc) sp->top_p = (float)d;
    if ((rc = kw_json_number(o, "min_p", 0, 1, &d, e)) < 0) return -1;
    if (rc) sp->min_p = (float)d;
    if ((rc = kw_json_int(o, "top_k", -1e9, 1e9, &n, e)) < 0) return -1;
    if (rc) sp->top_k = n > 0 ? (int32_t)n : 0;
    if ((rc = kw_json_number(o, "presence_penalty", -2, 2, &d, e)) < 0) return -1;
    if (rc) sp->presence_penalty = (float)d;
    if ((rc = kw_json_number(o, "frequency_penalty", -2, 2, &d, e)) < 0) return -1;
    if (rc) sp->frequency_penalty = (float)d;
    if ((rc = kw_json_int(o, "seed", -9.2e18, 9.2e18, &n, e)) < 0) return -1;
    if (rc) { sp->seed = (uint64_t)n; sp->has_seed = true; }
    if ((rc = kw_json_int(o, "num_predict", -2, 1e12, &n, e)) < 0) return -1;
    if (rc && n > 0) j->req.max_tokens = n > 0x7fffffff ? 0x7fffffff : (int32_t)n;   /* -1, -2: up to the context */
    return kw_job_set_stop(j, cJSON_GetObjectItemCaseSensitive(o, "stop"), "stop", e);
}

static int refuse_fields(const cJSON *root, kw_http_error *e) {
    static const char *const fields[] = {"suffix", "template", "context", "images"};
    for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, fields[k]);
        bool set = v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && !v->valuestring[0]) &&
                   !(cJSON_IsArray(v) && !cJSON_GetArraySize(v));
        if (set)
            return kw_http_error_set(e, 400, fields[k], "invalid_value", "'%s' is not supported", fields[k]);
    }
    return 0;
}

/* format: "json" (any JSON object) or a JSON Schema object; "" / null: free text. */
static int parse_format(kw_job *j, const cJSON *root, kw_http_error *e) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!f || cJSON_IsNull(f) || (cJSON_IsString(f) && !f->valuestring[0])) return 0;
    if (cJSON_IsString(f) && !strcmp(f->valuestring, "json")) return kw_job_set_grammar(j, KW_GK_JSON_OBJECT, "", 0, false, "format", e);
    if (cJSON_IsObject(f)) return kw_job_set_schema(j, f, NULL, "format", e);
    return kw_http_error_set(e, 400, "format", "invalid_value", "'format' must be \"json\" or a JSON Schema object");
}

/* think: false -> enable_thinking false; true or a level -> the template's default. */
static void map_think(const cJSON *root, cJSON *canon) {
    if (cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(root, "think")))
        cJSON_AddFalseToObject(cJSON_AddObjectToObject(canon, "chat_template_kwargs"), "enable_thinking");
}

/* generate: system + prompt as a chat, or the prompt as is (raw). */
static int generate_prompt(kw_job *j, const cJSON *root, cJSON *canon, const kw_chat_template *tpl, kw_engine *eng,
                           kw_http_error *e) {
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "raw"))) {
        kw_err err = {{0}};
        int32_t *ids = NULL;
        size_t n = 0;
        if (kw_prompt_bytes_check(eng, strlen(prompt->valuestring), "prompt", e) < 0) return -1;
        if (eng->tokenize(eng, prompt->valuestring, strlen(prompt->valuestring), true, true, &ids, &n, &err) < 0)
            return kw_openai_error_400_or_oom(e, "prompt", err.msg);
        j->req.prompt = ids;
        j->req.n_prompt = (int32_t)n;
        return 0;
    }
    cJSON *msgs = cJSON_AddArrayToObject(canon, "messages");
    const cJSON *sys = cJSON_GetObjectItemCaseSensitive(root, "system");
    if (cJSON_IsString(sys) && sys->valuestring[0]) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", sys->valuestring);
        cJSON_AddItemToArray(msgs, m);
    }
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(m, "content", prompt->valuestring);
    cJSON_AddItemToArray(msgs, m);
    return kw_chat_tokenize(j, canon, tpl, eng, e);
}

static void iso_time(char *buf, size_t cap) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char base[24];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, cap, "%.20s.%06dZ", base, (int)(ts.tv_nsec / 1000) % 1000000);
}

/* Ollama's answer to a generate request without a prompt (load the model). */
static char *load_answer(const char *model) {
    char t[48];
    iso_time(t, sizeof t);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", model);
    cJSON_AddStringToObject(o, "created_at", t);
    cJSON_AddStringToObject(o, "response", "");
    cJSON_AddTrueToObject(o, "done");
    cJSON_AddStringToObject(o, "done_reason", "load");
    return kw_json_take(o);
}

kw_job *kw_ollama_parse(struct kw_server *srv, kw_engine *eng, const kw_chat_template *tpl, bool chat,
                        const char *body, size_t len, const char *model_id, char **loaded, kw_http_error *e) {
    cJSON *root = kw_json_body(body, len, e), *canon = NULL;
    kw_job *j = NULL;
    if (!root) return NULL;
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (!chat && prompt && !cJSON_IsNull(prompt) && !cJSON_IsString(prompt)) {
        kw_http_error_set(e, 400, "prompt", "invalid_type", "'prompt' must be a string");
        goto fail;
    }
    if (!chat && (!cJSON_IsString(prompt) || !prompt->valuestring[0])) {
        *loaded = load_answer(model_id);
        if (!*loaded) kw_http_error_set(e, 500, NULL, NULL, "out of memory");
        goto fail;
    }
    j = kw_job_new(srv, eng, chat ? &kw_api_ollama_chat : &kw_api_ollama_generate, "ollama-", model_id);
    canon = cJSON_CreateObject();
    if (!j || !canon) { kw_http_error_set(e, 500, NULL, NULL, "out of memory"); goto fail; }
    j->stream = true;                           /* Ollama streams unless told not to */
    if (kw_json_bool(root, "stream", &j->stream, e) < 0 || refuse_fields(root, e) < 0 || parse_options(root, j, e) < 0 ||
        parse_format(j, root, e) < 0) goto fail;
    map_think(root, canon);
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    if (chat && cJSON_IsArray(tools)) cJSON_AddItemToObject(canon, "tools", cJSON_Duplicate(tools, 1));
    else if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools)) { kw_http_error_set(e, 400, "tools", "invalid_type", "'tools' must be an array"); goto fail; }
    const cJSON *replay = cJSON_GetObjectItemCaseSensitive(root, "test_replay");
    if (replay) cJSON_AddItemToObject(canon, "test_replay", cJSON_Duplicate(replay, 1));
    if (chat) {
        if (map_messages(root, canon, e) < 0 || kw_chat_tokenize(j, canon, tpl, eng, e) < 0) goto fail;
    } else if (generate_prompt(j, root, canon, tpl, eng, e) < 0) {
        goto fail;
    }
    if (kw_job_check(j, canon, eng, chat ? "messages" : "prompt", e) < 0) goto fail;
    return kw_parse_end(j, root, canon, true);
fail:
    return kw_parse_end(j, root, canon, false);
}

/* ---- answer ------------------------------------------------------------------- */

static cJSON *head(const kw_job *j) {
    char t[48];
    iso_time(t, sizeof t);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", j->model);
    cJSON_AddStringToObject(o, "created_at", t);
    return o;
}

static cJSON *message(void) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddStringToObject(m, "content", "");
    return m;
}

/* One call as Ollama writes it: {id, function: {index, name, arguments: object}}. */
static cJSON *call_json(const cJSON *c, int index) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(f, "arguments");
    cJSON *a = cJSON_IsString(args) ? cJSON_Parse(args->valuestring) : NULL;
    if (!cJSON_IsObject(a)) { cJSON_Delete(a); a = cJSON_CreateObject(); }
    cJSON *o = cJSON_CreateObject(), *of;
    cJSON_AddStringToObject(o, "id", cJSON_GetObjectItemCaseSensitive(c, "id")->valuestring);
    of = cJSON_AddObjectToObject(o, "function");
    cJSON_AddNumberToObject(of, "index", index);
    cJSON_AddStringToObject(of, "name", cJSON_GetObjectItemCaseSensitive(f, "name")->valuestring);
    cJSON_AddItemToObject(of, "arguments", a);
    return o;
}

static void ndjson(kw_job *j, cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) return;
    kw_sbuf_puts(&j->out, s);
    kw_sbuf_puts(&j->out, "\n");
    free(s);
}

static bool is_chat(const kw_job *j) { return j->api == &kw_api_ollama_chat; }

/* A piece: chat puts it in message.content / message.thinking, generate in
 * response / thinking; a call goes out whole when it ends. */
static void ollama_piece(kw_job *j, const kw_tc_event *ev) {
    if (ev->type == KW_TC_CALL_BEGIN || ev->type == KW_TC_CALL_ARGS) return;
    cJSON *o = head(j), *m = is_chat(j) ? message() : o;
    if (!is_chat(j)) cJSON_AddStringToObject(o, "response", "");
    if (ev->type == KW_TC_CONTENT) {
        cJSON_ReplaceItemInObjectCaseSensitive(m, is_chat(j) ? "content" : "response", kw_json_string_n(ev->text, ev->len));
    } else if (ev->type == KW_TC_REASONING) {
        cJSON_AddItemToObject(m, "thinking", kw_json_string_n(ev->text, ev->len));
    } else {
        cJSON *c = cJSON_GetArrayItem(j->tool_calls, ev->index);
        if (!c || !is_chat(j)) { cJSON_Delete(o); if (is_chat(j)) cJSON_Delete(m); return; }
        cJSON_AddItemToArray(cJSON_AddArrayToObject(m, "tool_calls"), call_json(c, ev->index));
    }
    if (is_chat(j)) cJSON_AddItemToObject(o, "message", m);
    cJSON_AddFalseToObject(o, "done");
    ndjson(j, o);
}

static void ollama_open(kw_job *j) { (void)j; }

static void add_stats(cJSON *o, const kw_job *j) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double now = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    double first = j->t_first ? j->t_first : now, adm = j->t_admitted ? j->t_admitted : j->t_start;
    cJSON_AddStringToObject(o, "done_reason", j->finish == KW_FINISH_LENGTH ? "length" : "stop");
    cJSON_AddNumberToObject(o, "total_duration", (double)(int64_t)((now - j->t_start) * 1e9));
    cJSON_AddNumberToObject(o, "load_duration", 0);
    cJSON_AddNumberToObject(o, "prompt_eval_count", j->prompt_tokens);
    cJSON_AddNumberToObject(o, "prompt_eval_cached_count", j->cached_tokens);
    cJSON_AddNumberToObject(o, "prompt_eval_duration", (double)(int64_t)((first - adm) * 1e9));
    cJSON_AddNumberToObject(o, "eval_count", j->completion_tokens);
    cJSON_AddNumberToObject(o, "eval_duration", (double)(int64_t)((now - first) * 1e9));
}

static void ollama_close(kw_job *j, const kw_sched_event *ev) {
    if (ev->finish == KW_FINISH_ERROR || ev->finish == KW_FINISH_CANCELLED) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "error", ev->error ? ev->error : "request cancelled");
        ndjson(j, o);
        return;
    }
    cJSON *o = head(j);
    if (is_chat(j)) cJSON_AddItemToObject(o, "message", message());
    else cJSON_AddStringToObject(o, "response", "");
    cJSON_AddTrueToObject(o, "done");
    add_stats(o, j);
    ndjson(j, o);
}

static char *ollama_final_json(kw_job *j) {
    cJSON *o = head(j);
    kw_sbuf_add(&j->text, "", 0);
    kw_sbuf_add(&j->reasoning, "", 0);
    if (is_chat(j)) {
        cJSON *m = message();
        cJSON_ReplaceItemInObjectCaseSensitive(m, "content", cJSON_CreateString(j->text.p));
        if (j->reasoning.len) cJSON_AddStringToObject(m, "thinking", j->reasoning.p);
        if (cJSON_GetArraySize(j->tool_calls)) {
            cJSON *calls = cJSON_AddArrayToObject(m, "tool_calls");
            int i = 0;
            const cJSON *c;
            cJSON_ArrayForEach(c, j->tool_calls) cJSON_AddItemToArray(calls, call_json(c, i++));
        }
        cJSON_AddItemToObject(o, "message", m);
    } else {
        cJSON_AddStringToObject(o, "response", j->text.p);
        if (j->reasoning.len) cJSON_AddStringToObject(o, "thinking", j->reasoning.p);
    }
    cJSON_AddTrueToObject(o, "done");
    add_stats(o, j);
    return kw_json_take(o);
}

static char *ollama_error_json(const kw_http_error *e) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "error", e->message);
    return kw_json_take(o);
}


const kw_api kw_api_ollama_chat = {
    .name = "ollama_chat", .index = KW_API_OLLAMA_CHAT, .stream_type = "application/x-ndjson",
    .open = ollama_open, .piece = ollama_piece, .close = ollama_close, .final_json = ollama_final_json,
    .error_json = ollama_error_json, .reason_error = kw_openai_reason_error,
};

const kw_api kw_api_ollama_generate = {
    .name = "ollama_generate", .index = KW_API_OLLAMA_GENERATE, .stream_type = "application/x-ndjson",
    .open = ollama_open, .piece = ollama_piece, .close = ollama_close, .final_json = ollama_final_json,
    .error_json = ollama_error_json, .reason_error = kw_openai_reason_error,
};

/* ---- model information ------------------------------------------------------------ */

char *kw_ollama_version_json(void) {
    return strdup("{\"version\":\"" KW_OLLAMA_API_VERSION "\"}");
}

typedef struct model_facts {
    char arch[64], file_type[32], param_size[32];
    uint64_t params, size;
} model_facts;

/* What the GGUF file says (architecture, parameter count, size); zeros when
 * there is no file (the stub engine) or it cannot be read. */
static void read_facts(const char *path, model_facts *f) {
    memset(f, 0, sizeof *f);
    snprintf(f->arch, sizeof f->arch, "unknown");
    if (!path) return;
    kw_err err;
    kw_gguf *g = kw_gguf_open(path, &err);
    if (!g) return;
    const char *arch = kw_gguf_get_str(g, "general.architecture");
    if (arch) snprintf(f->arch, sizeof f->arch, "%s", arch);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        uint64_t n = 1;
        for (uint32_t d = 0; d < g->tensors[i].n_dims; d++) n *= g->tensors[i].ne[d];
        f->params += n;
    }
    f->size = g->size;
    static const char *const types[] = {[0] = "F32", [1] = "F16", [2] = "Q4_0", [3] = "Q4_1", [7] = "Q8_0", [8] = "Q5_0",
        [9] = "Q5_1", [10] = "Q2_K", [11] = "Q3_K_S", [12] = "Q3_K_M", [13] = "Q3_K_L", [14] = "Q4_K_S", [15] = "Q4_K_M",
        [16] = "Q5_K_S", [17] = "Q5_K_M", [18] = "Q6_K", [32] = "BF16"};
    int64_t ft;
    if (kw_gguf_get_int(g, "general.file_type", &ft) && ft >= 0 && ft < (int64_t)(sizeof types / sizeof types[0]) && types[ft])
        snprintf(f->file_type, sizeof f->file_type, "%s", types[ft]);
    kw_gguf_close(g);
    if (f->params >= 1000000000ull) snprintf(f->param_size, sizeof f->param_size, "%.1fB", (double)f->params / 1e9);
    else snprintf(f->param_size, sizeof f->param_size, "%.1fM", (double)f->params / 1e6);
}

static cJSON *details_json(const model_facts *f) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "parent_model", "");
    cJSON_AddStringToObject(d, "format", "gguf");
    cJSON_AddStringToObject(d, "family", f->arch);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(d, "families"), cJSON_CreateString(f->arch));
    cJSON_AddStringToObject(d, "parameter_size", f->param_size);
    cJSON_AddStringToObject(d, "quantization_level", f->file_type);
    return d;
}

static void modified_at(long t, char *buf, size_t cap) {
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

char *kw_ollama_tags_json(const char *model_id, const char *model_path, long created) {
    model_facts f;
    read_facts(model_path, &f);
    char when[32];
    modified_at(created, when, sizeof when);
    cJSON *o = cJSON_CreateObject(), *m = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "models"), m);
    cJSON_AddStringToObject(m, "name", model_id);
    cJSON_AddStringToObject(m, "model", model_id);
    cJSON_AddStringToObject(m, "modified_at", when);
    cJSON_AddNumberToObject(m, "size", (double)f.size);
    cJSON_AddStringToObject(m, "digest", "");
    cJSON_AddItemToObject(m, "details", details_json(&f));
    return kw_json_take(o);
}

/* /api/show: details, model_info (architecture, parameter count, and
 * "<arch>.context_length" = the context this server runs with, the most a
 * client may send), the chat template, and capabilities: completion, tools
 * when the template renders tools, thinking when it uses <think>. */
char *kw_ollama_show_json(const char *model_id, const char *model_path, const char *chat_template,
                          int32_t n_ctx, const char *body, size_t len, kw_http_error *e) {
    cJSON *req = kw_json_body(body, len, e);
    if (!req) return NULL;
    cJSON_Delete(req);
    model_facts f;
    read_facts(model_path, &f);
    char key[96], when[32];
    modified_at((long)time(NULL), when, sizeof when);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "modelfile", "");
    cJSON_AddStringToObject(o, "parameters", "");
    cJSON_AddStringToObject(o, "template", chat_template ? chat_template : "");
    cJSON_AddItemToObject(o, "details", details_json(&f));
    cJSON *info = cJSON_AddObjectToObject(o, "model_info");
    cJSON_AddStringToObject(info, "general.architecture", f.arch);
    cJSON_AddStringToObject(info, "general.basename", model_id);
    cJSON_AddNumberToObject(info, "general.parameter_count", (double)f.params);
    snprintf(key, sizeof key, "%s.context_length", f.arch);
    cJSON_AddNumberToObject(info, key, n_ctx);
    cJSON *caps = cJSON_AddArrayToObject(o, "capabilities");
    cJSON_AddItemToArray(caps, cJSON_CreateString("completion"));
    if (chat_template && strstr(chat_template, "tools")) cJSON_AddItemToArray(caps, cJSON_CreateString("tools"));
    if (chat_template && strstr(chat_template, "<think>")) cJSON_AddItemToArray(caps, cJSON_CreateString("thinking"));
    cJSON_AddStringToObject(o, "modified_at", when);
    return kw_json_take(o);
}
