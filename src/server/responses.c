/* responses.c - the OpenAI Responses API: POST /v1/responses, stateless.
 *
 * Request: `instructions` and `input` (a string, or items: messages with
 * roles developer / system / user / assistant, function_call,
 * function_call_output, custom_tool_call, custom_tool_call_output,
 * reasoning) become the canonical chat request of chat.c: an assistant turn
 * gathers the reasoning, text and calls that follow each other, a call
 * output is a role "tool" message. `tools` of type function (parameters)
 * and custom (freeform text input, e.g. Codex's apply_patch: offered to the
 * model as a function with one string parameter "input", its format shown in
 * that parameter's description) are offered; other tool types (hosted
 * web_search, tool_search, namespace) are not offered to the model.
 * tool_choice, parallel_tool_calls, max_output_tokens, temperature, top_p;
 * reasoning.effort "none" turns thinking off (enable_thinking false).
 * Refused with a 400 naming the field: previous_response_id, store: true,
 * background, conversation (nothing is kept), a text.format type other than
 * text / json_object / json_schema (those constrain the answer as chat's
 * response_format does), truncation "auto". tool_choice "required" or
 * naming a tool forces one call, its arguments generated under the tool's
 * parameters (chat.c; strict when the tool says strict: true). Accepted and ignored: include, metadata, user,
 * prompt_cache_key (logged), client_metadata, service_tier, safety_identifier,
 * text.verbosity, reasoning.summary.
 *
 * Answer: output items (reasoning with reasoning_text content, message
 * with output_text, function_call with arguments, custom_tool_call with its
 * raw input, never a function_call for a custom tool), usage with
 * input_tokens_details.cached_tokens and output_tokens_details.
 * reasoning_tokens; the stream is response.created, response.in_progress,
 * per item output_item.added, its deltas (output_text, reasoning_text,
 * function_call_arguments, custom_tool_call_input), their .done events and
 * output_item.done carrying the whole item, then response.completed
 * (response.incomplete at max_output_tokens, response.failed on an error:
 * context_length_exceeded for a prompt longer than the context). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "kvwise/toolcall.h"

/* ---- request: input items -> canonical messages ------------------------------ */

typedef struct build {
    cJSON *msgs;                /* canonical messages */
    cJSON *asst;                /* the assistant turn being gathered, or NULL */
} build;

static void flush(build *b) {
    if (!b->asst) return;
    if (!cJSON_GetObjectItemCaseSensitive(b->asst, "content")) cJSON_AddStringToObject(b->asst, "content", "");
    cJSON_AddItemToArray(b->msgs, b->asst);
    b->asst = NULL;
}

static cJSON *assistant(build *b) {
    if (!b->asst) {
        b->asst = cJSON_CreateObject();
        cJSON_AddStringToObject(b->asst, "role", "assistant");
    }
    return b->asst;
}

static void append_field(cJSON *m, const char *key, const char *text) {
    cJSON *old = cJSON_GetObjectItemCaseSensitive(m, key);
    if (!cJSON_IsString(old)) { cJSON_AddStringToObject(m, key, text); return; }
    kw_sbuf s = {0};
    kw_sbuf_puts(&s, old->valuestring);
    kw_sbuf_puts(&s, text);
    cJSON_ReplaceItemInObjectCaseSensitive(m, key, kw_json_string_n(s.p ? s.p : "", s.len));
    kw_sbuf_free(&s);
}

static void add_call(build *b, const char *call_id, const char *name, const char *args) {
    cJSON *m = assistant(b), *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    if (!calls) calls = cJSON_AddArrayToObject(m, "tool_calls");
    cJSON_AddItemToArray(calls, kw_canon_call(call_id, name, args));
}

/* An item's text: content as a string or text parts (input_text,
 * output_text, text), or a call output as a string or such parts. */
static int item_text(const cJSON *v, int idx, kw_sbuf *out, kw_http_error *e) {
    cJSON *wrap = cJSON_CreateObject();
    cJSON_AddItemReferenceToObject(wrap, "content", (cJSON *)v);
    int rc = kw_openai_message_text(wrap, idx, out, e);
    cJSON_Delete(wrap);
    if (rc < 0) { e->param = "input"; snprintf(e->message, sizeof e->message, "input[%d]: content must be a string or "
                                               "text parts (input_text / output_text)", idx); }
    return rc;
}

static int message_item(build *b, const cJSON *it, int idx, kw_http_error *e) {
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
    if (!cJSON_IsString(role)) return kw_http_error_set(e, 400, "input", "invalid_type", "input[%d]: a message needs a string 'role'", idx);
    const char *r = role->valuestring;
    if (strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "system") && strcmp(r, "developer"))
        return kw_http_error_set(e, 400, "input", "invalid_value", "input[%d]: unknown role '%.32s'", idx, r);
    kw_sbuf t = {0};
    if (item_text(cJSON_GetObjectItemCaseSensitive(it, "content"), idx, &t, e) < 0) { kw_sbuf_free(&t); return -1; }
    kw_sbuf_add(&t, "", 0);
    if (!strcmp(r, "assistant")) {
        cJSON *m = assistant(b);
        if (cJSON_GetObjectItemCaseSensitive(m, "tool_calls")) { flush(b); m = assistant(b); }
        append_field(m, "content", t.p ? t.p : "");
    } else {
        flush(b);
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", !strcmp(r, "developer") ? "system" : r);
        cJSON_AddStringToObject(m, "content", t.p ? t.p : "");
        cJSON_AddItemToArray(b->msgs, m);
    }
    kw_sbuf_free(&t);
    return 0;
}

/* reasoning: its reasoning_text content (or, without it, its summary) is the
 * assistant turn's reasoning_content. A reasoning item after text or calls
 * starts a new turn. */
static void reasoning_item(build *b, const cJSON *it) {
    if (b->asst && (cJSON_GetObjectItemCaseSensitive(b->asst, "content") || cJSON_GetObjectItemCaseSensitive(b->asst, "tool_calls")))
        flush(b);
    kw_sbuf t = {0};
    const char *lists[] = {"content", "summary"};
    for (int k = 0; k < 2 && !t.len; k++) {
        const cJSON *p;
        cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(it, lists[k])) {
            const cJSON *text = cJSON_GetObjectItemCaseSensitive(p, "text");
            if (cJSON_IsString(text)) kw_sbuf_puts(&t, text->valuestring);
        }
    }
    kw_sbuf_add(&t, "", 0);
    if (t.len) append_field(assistant(b), "reasoning_content", t.p);
    kw_sbuf_free(&t);
}

static int call_item(build *b, const cJSON *it, int idx, bool custom, kw_http_error *e) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "call_id");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
    const cJSON *payload = cJSON_GetObjectItemCaseSensitive(it, custom ? "input" : "arguments");
    if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsString(payload))
        return kw_http_error_set(e, 400, "input", "invalid_type", "input[%d]: a %s needs string 'call_id', 'name' and '%s'",
                                 idx, custom ? "custom_tool_call" : "function_call", custom ? "input" : "arguments");
    if (!custom) { add_call(b, id->valuestring, name->valuestring, payload->valuestring); return 0; }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "input", payload->valuestring);
    char *args = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    add_call(b, id->valuestring, name->valuestring, args ? args : "{}");
    free(args);
    return 0;
}

static int output_item(build *b, const cJSON *it, int idx, kw_http_error *e) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "call_id");
    if (!cJSON_IsString(id)) return kw_http_error_set(e, 400, "input", "invalid_type", "input[%d]: a call output needs a string 'call_id'", idx);
    kw_sbuf t = {0};
    if (item_text(cJSON_GetObjectItemCaseSensitive(it, "output"), idx, &t, e) < 0) { kw_sbuf_free(&t); return -1; }
    flush(b);
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "tool");
    cJSON_AddStringToObject(m, "tool_call_id", id->valuestring);
    cJSON_AddItemToObject(m, "content", kw_json_string_n(t.p ? t.p : "", t.len));
    cJSON_AddItemToArray(b->msgs, m);
    kw_sbuf_free(&t);
    return 0;
}

static int map_input(const cJSON *root, cJSON *canon, kw_http_error *e) {
    build b = {cJSON_AddArrayToObject(canon, "messages"), NULL};
    const cJSON *ins = cJSON_GetObjectItemCaseSensitive(root, "instructions");
    if (cJSON_IsString(ins) && ins->valuestring[0]) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", ins->valuestring);
        cJSON_AddItemToArray(b.msgs, m);
    } else if (ins && !cJSON_IsNull(ins) && !cJSON_IsString(ins)) {
        return kw_http_error_set(e, 400, "instructions", "invalid_type", "'instructions' must be a string");
    }
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(root, "input");
    if (!in) return kw_http_error_set(e, 400, "input", "missing_required_parameter", "'input' is required");
    if (cJSON_IsString(in)) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", in->valuestring);
        cJSON_AddItemToArray(b.msgs, m);
        return 0;
    }
    if (!cJSON_IsArray(in)) return kw_http_error_set(e, 400, "input", "invalid_type", "'input' must be a string or a list of items");
    int idx = 0, rc = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, in) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
        const char *ty = cJSON_IsString(type) ? type->valuestring : "message";
        if (!cJSON_IsObject(it)) rc = kw_http_error_set(e, 400, "input", "invalid_type", "input[%d] must be an object", idx);
        else if (!strcmp(ty, "message")) rc = message_item(&b, it, idx, e);
        else if (!strcmp(ty, "reasoning")) reasoning_item(&b, it);
        else if (!strcmp(ty, "function_call")) rc = call_item(&b, it, idx, false, e);
        else if (!strcmp(ty, "custom_tool_call")) rc = call_item(&b, it, idx, true, e);
        else if (!strcmp(ty, "function_call_output") || !strcmp(ty, "custom_tool_call_output")) rc = output_item(&b, it, idx, e);
        else rc = kw_http_error_set(e, 400, "input", "invalid_value", "input[%d]: item type '%.64s' is not supported%s", idx, ty,
                                    !strcmp(ty, "item_reference") ? " (kvwise keeps no responses)" : "");
        if (rc < 0) break;
        idx++;
    }
    flush(&b);
    if (rc == 0 && !cJSON_GetArraySize(b.msgs)) rc = kw_http_error_set(e, 400, "input", "invalid_value", "'input' must not be empty");
    return rc;
}

/* ---- request: tools and settings ---------------------------------------------- */

/* A custom tool as the model sees it: a function with one string "input"
 * whose description carries the tool's input format (not enforced). */
static cJSON *custom_as_function(const cJSON *t, const char *name) {
    cJSON *ft = cJSON_CreateObject(), *fn = cJSON_AddObjectToObject(ft, "function");
    cJSON_AddStringToObject(ft, "type", "function");
    cJSON_AddStringToObject(fn, "name", name);
    const cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description");
    if (cJSON_IsString(desc)) cJSON_AddStringToObject(fn, "description", desc->valuestring);
    cJSON *params = cJSON_AddObjectToObject(fn, "parameters");
    cJSON_AddStringToObject(params, "type", "object");
    cJSON *input = cJSON_AddObjectToObject(cJSON_AddObjectToObject(params, "properties"), "input");
    cJSON_AddStringToObject(input, "type", "string");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(t, "format");
    const cJSON *def = cJSON_GetObjectItemCaseSensitive(fmt, "definition");
    const cJSON *syntax = cJSON_GetObjectItemCaseSensitive(fmt, "syntax");
    kw_sbuf d = {0};
    kw_sbuf_puts(&d, "The tool's whole input, as free text (not JSON)");
    if (cJSON_IsString(def))
        kw_sbuf_printf(&d, ", following this %s grammar:\n%s", cJSON_IsString(syntax) ? syntax->valuestring : "", def->valuestring);
    kw_sbuf_add(&d, "", 0);
    cJSON_AddStringToObject(input, "description", d.p ? d.p : "");
    kw_sbuf_free(&d);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(params, "required"), cJSON_CreateString("input"));
    return ft;
}

static int map_tools(const cJSON *root, kw_job *j, cJSON *canon, kw_http_error *e) {
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    if (!tools || cJSON_IsNull(tools)) return 0;
    if (!cJSON_IsArray(tools)) return kw_http_error_set(e, 400, "tools", "invalid_type", "'tools' must be an array");
    cJSON *out = cJSON_AddArrayToObject(canon, "tools");
    j->custom_tools = cJSON_CreateArray();
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
        const char *ty = cJSON_IsString(type) ? type->valuestring : "";
        bool fn = !strcmp(ty, "function"), custom = !strcmp(ty, "custom");
        if ((fn || custom) && (!cJSON_IsString(name) || !name->valuestring[0]))
            return kw_http_error_set(e, 400, "tools", "invalid_type", "tools[%d] needs a string 'name'", i);
        const cJSON *strict = cJSON_GetObjectItemCaseSensitive(t, "strict");
        if (fn && strict && !cJSON_IsNull(strict) && !cJSON_IsBool(strict))
            return kw_http_error_set(e, 400, "tools", "invalid_type", "tools[%d].strict must be a boolean", i);
        i++;
        if (fn) {
            cJSON *ft = cJSON_CreateObject(), *f = cJSON_AddObjectToObject(ft, "function");
            cJSON_AddStringToObject(ft, "type", "function");
            cJSON_AddStringToObject(f, "name", name->valuestring);
            const cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description");
            if (cJSON_IsString(desc)) cJSON_AddStringToObject(f, "description", desc->valuestring);
            const cJSON *params = cJSON_GetObjectItemCaseSensitive(t, "parameters");
            cJSON_AddItemToObject(f, "parameters", cJSON_IsObject(params) ? cJSON_Duplicate(params, 1) : cJSON_CreateObject());
            if (cJSON_IsTrue(strict)) cJSON_AddTrueToObject(f, "strict");
            cJSON_AddItemToArray(out, ft);
        } else if (custom) {
            cJSON_AddItemToArray(out, custom_as_function(t, name->valuestring));
            cJSON_AddItemToArray(j->custom_tools, cJSON_CreateString(name->valuestring));
        }
    }
    return 0;
}

static int map_tool_choice(const cJSON *root, cJSON *canon, kw_http_error *e) {
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    if (!tc || cJSON_IsNull(tc)) return 0;
    if (cJSON_IsString(tc)) { cJSON_AddItemToObject(canon, "tool_choice", cJSON_Duplicate(tc, 0)); return 0; }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(tc, "type");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(tc, "name");
    if (!cJSON_IsObject(tc) || !cJSON_IsString(type) || (strcmp(type->valuestring, "function") && strcmp(type->valuestring, "custom")) ||
        !cJSON_IsString(name))
        return kw_http_error_set(e, 400, "tool_choice", "invalid_value", "'tool_choice' must be \"auto\", \"none\", \"required\" or "
                                 "{\"type\": \"function\" | \"custom\", \"name\": ...}");
    cJSON *o = cJSON_AddObjectToObject(canon, "tool_choice");
    cJSON_AddStringToObject(o, "type", "function");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "function"), "name", name->valuestring);
    return 0;
}

/* Fields that ask for what a stateless server without structured outputs
 * cannot do: a 400 naming the field. */
static int refuse_unsupported(const cJSON *root, kw_http_error *e) {
    const cJSON *v;
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "previous_response_id")) && !cJSON_IsNull(v))
        return kw_http_error_set(e, 400, "previous_response_id", "invalid_value",
                                 "'previous_response_id' is not supported: kvwise keeps no responses (send the whole input)");
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "store")))
        return kw_http_error_set(e, 400, "store", "invalid_value", "'store': true is not supported: kvwise keeps no responses");
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "background")))
        return kw_http_error_set(e, 400, "background", "invalid_value", "'background': true is not supported");
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "conversation")) && !cJSON_IsNull(v))
        return kw_http_error_set(e, 400, "conversation", "invalid_value", "'conversation' is not supported: kvwise keeps no responses");
    v = cJSON_GetObjectItemCaseSensitive(root, "truncation");
    if (cJSON_IsString(v) && strcmp(v->valuestring, "disabled"))
        return kw_http_error_set(e, 400, "truncation", "invalid_value", "'truncation' must be \"disabled\" (kvwise does not drop input)");
    return 0;
}

/* text.format: {type: text} | {type: json_object} | {type: json_schema, name, schema, strict}
 * (the schema flat in the object, as Responses writes it): the same grammar
 * request as chat's response_format. */
static int parse_text_format(const cJSON *root, kw_job *j, kw_http_error *e) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "text"), "format");
    if (!fmt || cJSON_IsNull(fmt)) return 0;
    const cJSON *ft = cJSON_GetObjectItemCaseSensitive(fmt, "type");
    if (!cJSON_IsObject(fmt) || !cJSON_IsString(ft))
        return kw_http_error_set(e, 400, "text.format", "invalid_type", "'text.format' must be an object with a string 'type'");
    if (!strcmp(ft->valuestring, "text")) return 0;
    if (!strcmp(ft->valuestring, "json_object")) return kw_job_set_grammar(j, KW_GK_JSON_OBJECT, "", 0, false, "text.format", e);
    if (strcmp(ft->valuestring, "json_schema"))
        return kw_http_error_set(e, 400, "text.format", "invalid_value",
                                 "'text.format.type' must be text, json_object or json_schema (got '%.40s')", ft->valuestring);
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(fmt, "schema");
    if (!cJSON_IsObject(schema))
        return kw_http_error_set(e, 400, "text.format", "invalid_type", "'text.format.schema' must be a JSON Schema object");
    return kw_job_set_schema(j, schema, cJSON_GetObjectItemCaseSensitive(fmt, "strict"), "text.format", e);
}

static int parse_fields(const cJSON *root, kw_job *j, cJSON *canon, kw_http_error *e) {
    int64_t n;
    int rc;
    if (kw_parse_model_sampling(root, j, 2, e) < 0) return -1;
    if ((rc = kw_json_int(root, "max_output_tokens", 1, 1e12, &n, e)) < 0) return -1;
    if (rc) j->req.max_tokens = n > 0x7fffffff ? 0x7fffffff : (int32_t)n;
    const cJSON *par = cJSON_GetObjectItemCaseSensitive(root, "parallel_tool_calls");
    if (cJSON_IsBool(par)) cJSON_AddItemToObject(canon, "parallel_tool_calls", cJSON_Duplicate(par, 0));
    const cJSON *effort = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "reasoning"), "effort");
    if (cJSON_IsString(effort) && !strcmp(effort->valuestring, "none"))
        cJSON_AddFalseToObject(cJSON_AddObjectToObject(canon, "chat_template_kwargs"), "enable_thinking");
    const cJSON *key = cJSON_GetObjectItemCaseSensitive(root, "prompt_cache_key");
    if (cJSON_IsString(key)) cJSON_AddStringToObject(canon, "prompt_cache_key", key->valuestring);
    const cJSON *replay = cJSON_GetObjectItemCaseSensitive(root, "test_replay");
    if (replay) cJSON_AddItemToObject(canon, "test_replay", cJSON_Duplicate(replay, 1));
    return 0;
}

kw_job *kw_responses_parse(struct kw_server *srv, kw_engine *eng, const kw_chat_template *tpl,
                           const char *body, size_t len, const char *model_id, kw_http_error *e) {
    cJSON *root = kw_json_body(body, len, e), *canon = NULL;
    kw_job *j = NULL;
    if (!root) return NULL;
    j = kw_job_new(srv, eng, &kw_api_responses, "resp_", model_id);
    canon = cJSON_CreateObject();
    if (!j || !canon) { kw_http_error_set(e, 500, NULL, NULL, "out of memory"); goto fail; }
    if (kw_json_bool(root, "stream", &j->stream, e) < 0) goto fail;
    if (refuse_unsupported(root, e) < 0 || parse_fields(root, j, canon, e) < 0 || map_input(root, canon, e) < 0 ||
        map_tools(root, j, canon, e) < 0 || map_tool_choice(root, canon, e) < 0 || parse_text_format(root, j, e) < 0) goto fail;
    if (kw_chat_tokenize(j, canon, tpl, eng, e) < 0) goto fail;
    if (kw_job_check(j, canon, eng, "input", e) < 0) {
        /* a stream reports a prompt longer than the context as response.failed */
        e->stream_failure = j->stream && e->code && !strcmp(e->code, "context_length_exceeded");
        goto fail;
    }
    return kw_parse_end(j, root, canon, true);
fail:
    return kw_parse_end(j, root, canon, false);
}

/* ---- answer: items ------------------------------------------------------------ */

static bool is_custom(const kw_job *j, const char *name) {
    const cJSON *n;
    cJSON_ArrayForEach(n, j->custom_tools)
        if (cJSON_IsString(n) && !strcmp(n->valuestring, name)) return true;
    return false;
}

/* A custom tool's raw input from the arguments the model wrote: the string
 * "input" of an object, a JSON string's value, or the text as written. */
static char *custom_input(const char *args) {
    cJSON *v = cJSON_Parse(args);
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(v, "input");
    char *out = strdup(cJSON_IsString(in) ? in->valuestring : cJSON_IsString(v) ? v->valuestring : args);
    cJSON_Delete(v);
    return out;
}

static cJSON *text_item(const char *id, const char *text, size_t len, bool done) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "type", "message");
    cJSON_AddStringToObject(o, "status", done ? "completed" : "in_progress");
    cJSON_AddStringToObject(o, "role", "assistant");
    cJSON *content = cJSON_AddArrayToObject(o, "content");
    if (done) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "type", "output_text");
        cJSON_AddItemToObject(p, "text", kw_json_string_n(text, len));
        cJSON_AddArrayToObject(p, "annotations");
        cJSON_AddItemToArray(content, p);
    }
    return o;
}

static cJSON *reasoning_item_json(const char *id, const char *text, size_t len, bool done) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "type", "reasoning");
    cJSON_AddArrayToObject(o, "summary");
    cJSON *content = cJSON_AddArrayToObject(o, "content");
    if (done) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "type", "reasoning_text");
        cJSON_AddItemToObject(p, "text", kw_json_string_n(text, len));
        cJSON_AddItemToArray(content, p);
    }
    return o;
}

/* A call item: function_call with its arguments, or custom_tool_call with
 * its raw input for a custom tool. done = the call's text is complete. */
static cJSON *call_item_json(const kw_job *j, const char *id, const char *call_id, const char *name, const char *args, bool done) {
    bool custom = is_custom(j, name);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "type", custom ? "custom_tool_call" : "function_call");
    cJSON_AddStringToObject(o, "status", done ? "completed" : "in_progress");
    cJSON_AddStringToObject(o, "call_id", call_id);
    cJSON_AddStringToObject(o, "name", name);
    if (custom) {
        char *in = done ? custom_input(args) : NULL;
        cJSON_AddStringToObject(o, "input", in ? in : "");
        free(in);
    } else {
        cJSON_AddStringToObject(o, "arguments", done ? args : "");
    }
    return o;
}

static void item_id(const kw_job *j, const char *prefix, int n, char *buf, size_t cap) {
    const char *tail = strchr(j->id, '_');
    snprintf(buf, cap, "%.4s_%.24s%d", prefix, tail ? tail + 1 : j->id, n);
}

static cJSON *usage_json(kw_job *j) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "input_tokens", j->prompt_tokens);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "input_tokens_details"), "cached_tokens", j->cached_tokens);
    cJSON_AddNumberToObject(u, "output_tokens", j->completion_tokens);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "output_tokens_details"), "reasoning_tokens", kw_job_reasoning_tokens(j));
    cJSON_AddNumberToObject(u, "total_tokens", j->prompt_tokens + j->completion_tokens);
    return u;
}

static const char *status_of(const kw_job *j, bool finished) {
    if (!finished) return "in_progress";
    if (j->finish == KW_FINISH_LENGTH) return "incomplete";
    if (j->finish == KW_FINISH_STOP) return "completed";
    return "failed";
}

/* The response object; output is taken (NULL: []). */
static cJSON *response_json(kw_job *j, const char *status, cJSON *output, cJSON *usage) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "id", j->id);
    cJSON_AddStringToObject(r, "object", "response");
    cJSON_AddNumberToObject(r, "created_at", (double)j->created);
    cJSON_AddStringToObject(r, "status", status);
    cJSON_AddNullToObject(r, "error");
    if (!strcmp(status, "incomplete")) cJSON_AddStringToObject(cJSON_AddObjectToObject(r, "incomplete_details"), "reason", "max_output_tokens");
    else cJSON_AddNullToObject(r, "incomplete_details");
    cJSON_AddStringToObject(r, "model", j->model);
    cJSON_AddItemToObject(r, "output", output ? output : cJSON_CreateArray());
    cJSON_AddBoolToObject(r, "parallel_tool_calls", !j->single_call);
    cJSON_AddNullToObject(r, "previous_response_id");
    cJSON_AddBoolToObject(r, "store", false);
    cJSON_AddNumberToObject(r, "temperature", j->req.sp.temperature);
    cJSON_AddNumberToObject(r, "top_p", j->req.sp.top_p);
    if (j->req.max_tokens > 0) cJSON_AddNumberToObject(r, "max_output_tokens", j->req.max_tokens);
    else cJSON_AddNullToObject(r, "max_output_tokens");
    cJSON_AddStringToObject(r, "truncation", "disabled");
    if (usage) cJSON_AddItemToObject(r, "usage", usage);
    else cJSON_AddNullToObject(r, "usage");
    return r;
}

/* ---- answer: stream ----------------------------------------------------------- */

static void emit(kw_job *j, const char *type, cJSON *o) {
    cJSON_AddStringToObject(o, "type", type);
    cJSON_AddNumberToObject(o, "sequence_number", j->blk.seq++);
    kw_sse_event(j, type, o);
}

static cJSON *at(const kw_job *j, bool content_index) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "item_id", j->blk.item_id);
    cJSON_AddNumberToObject(o, "output_index", j->blk.index);
    if (content_index) cJSON_AddNumberToObject(o, "content_index", 0);
    return o;
}

static void item_added(kw_job *j, cJSON *item) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "output_index", j->blk.index);
    cJSON_AddItemToObject(o, "item", item);
    emit(j, "response.output_item.added", o);
}

static void item_done(kw_job *j, cJSON *item) {
    cJSON_AddItemToArray(j->blk.output, cJSON_Duplicate(item, 1));
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "output_index", j->blk.index);
    cJSON_AddItemToObject(o, "item", item);
    emit(j, "response.output_item.done", o);
}

static void close_item(kw_job *j) {
    kw_blocks *b = &j->blk;
    if (b->open == KW_BLK_TEXT) {
        const char *t = j->text.p + b->text_from;
        size_t n = j->text.len - b->text_from;
        cJSON *o = at(j, true);
        cJSON_AddItemToObject(o, "text", kw_json_string_n(t, n));
        emit(j, "response.output_text.done", o);
        cJSON *item = text_item(b->item_id, t, n, true);
        o = at(j, true);
        cJSON_AddItemToObject(o, "part", cJSON_Duplicate(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(item, "content"), 0), 1));
        emit(j, "response.content_part.done", o);
        item_done(j, item);
    } else if (b->open == KW_BLK_THINKING) {
        const char *t = j->reasoning.p + b->text_from;
        size_t n = j->reasoning.len - b->text_from;
        cJSON *o = at(j, true);
        cJSON_AddItemToObject(o, "text", kw_json_string_n(t, n));
        emit(j, "response.reasoning_text.done", o);
        item_done(j, reasoning_item_json(b->item_id, t, n, true));
    } else if (b->open == KW_BLK_CALL) {
        const cJSON *c = cJSON_GetArrayItem(j->tool_calls, cJSON_GetArraySize(j->tool_calls) - 1);
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(f, "arguments");
        const char *name = cJSON_GetObjectItemCaseSensitive(f, "name")->valuestring;
        cJSON *item = call_item_json(j, b->item_id, cJSON_GetObjectItemCaseSensitive(c, "id")->valuestring, name,
                                     cJSON_IsString(args) ? args->valuestring : "", true);
        cJSON *o = at(j, false);
        if (is_custom(j, name)) {
            const char *in = cJSON_GetObjectItemCaseSensitive(item, "input")->valuestring;
            cJSON_AddStringToObject(o, "delta", in);
            emit(j, "response.custom_tool_call_input.delta", o);
            o = at(j, false);
            cJSON_AddStringToObject(o, "input", in);
            emit(j, "response.custom_tool_call_input.done", o);
        } else {
            cJSON_AddStringToObject(o, "arguments", cJSON_IsString(args) ? args->valuestring : "");
            emit(j, "response.function_call_arguments.done", o);
        }
        item_done(j, item);
    } else {
        return;
    }
    b->open = KW_BLK_NONE;
    b->index++;
}

static void open_item(kw_job *j, int kind, const char *prefix, size_t text_from) {
    close_item(j);
    j->blk.open = kind;
    j->blk.text_from = text_from;
    item_id(j, prefix, j->blk.index, j->blk.item_id, sizeof j->blk.item_id);
}

static void responses_piece(kw_job *j, const kw_tc_event *ev) {
    kw_blocks *b = &j->blk;
    switch (ev->type) {
    case KW_TC_CONTENT: {
        if (b->open != KW_BLK_TEXT) {
            open_item(j, KW_BLK_TEXT, "msg", j->text.len - ev->len);
            item_added(j, text_item(b->item_id, "", 0, false));
            cJSON *o = at(j, true), *p = cJSON_AddObjectToObject(o, "part");
            cJSON_AddStringToObject(p, "type", "output_text");
            cJSON_AddStringToObject(p, "text", "");
            cJSON_AddArrayToObject(p, "annotations");
            emit(j, "response.content_part.added", o);
        }
        cJSON *o = at(j, true);
        cJSON_AddItemToObject(o, "delta", kw_json_string_n(ev->text, ev->len));
        cJSON_AddArrayToObject(o, "logprobs");
        emit(j, "response.output_text.delta", o);
        break;
    }
    case KW_TC_REASONING: {
        if (b->open != KW_BLK_THINKING) {
            open_item(j, KW_BLK_THINKING, "rs", j->reasoning.len - ev->len);
            item_added(j, reasoning_item_json(b->item_id, "", 0, false));
        }
        cJSON *o = at(j, true);
        cJSON_AddItemToObject(o, "delta", kw_json_string_n(ev->text, ev->len));
        emit(j, "response.reasoning_text.delta", o);
        break;
    }
    case KW_TC_CALL_BEGIN:
        open_item(j, KW_BLK_CALL, is_custom(j, ev->name) ? "ctc" : "fc", 0);
        item_added(j, call_item_json(j, b->item_id, ev->id, ev->name, "", false));
        break;
    case KW_TC_CALL_ARGS: {
        const cJSON *c = cJSON_GetArrayItem(j->tool_calls, cJSON_GetArraySize(j->tool_calls) - 1);
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "function"), "name");
        if (cJSON_IsString(name) && is_custom(j, name->valuestring)) break;   /* the raw input goes out when the call ends */
        cJSON *o = at(j, false);
        cJSON_AddItemToObject(o, "delta", kw_json_string_n(ev->text, ev->len));
        emit(j, "response.function_call_arguments.delta", o);
        break;
    }
    case KW_TC_CALL_END:
        close_item(j);
        break;
    }
}

static void responses_open(kw_job *j) {
    j->blk.output = cJSON_CreateArray();
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "response", response_json(j, "in_progress", NULL, NULL));
    emit(j, "response.created", o);
    o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "response", response_json(j, "in_progress", NULL, NULL));
    emit(j, "response.in_progress", o);
}

static void responses_progress(kw_job *j, int32_t done, int32_t total) {
    kw_sbuf_printf(&j->out, ": prompt_progress %d/%d\n\n", done, total);
}


/* response.failed carrying e's code and message. */
static cJSON *failed_event(kw_job *j, const kw_http_error *e) {
    cJSON *r = response_json(j, "failed", j->blk.output, NULL);
    j->blk.output = NULL;
    cJSON *err = cJSON_CreateObject();
    cJSON_AddStringToObject(err, "code", e->code ? e->code : "server_error");
    cJSON_AddStringToObject(err, "message", e->message);
    cJSON_ReplaceItemInObjectCaseSensitive(r, "error", err);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "response", r);
    return o;
}

static void responses_close(kw_job *j, const kw_sched_event *ev) {
    if (ev->finish == KW_FINISH_ERROR || ev->finish == KW_FINISH_CANCELLED) {
        kw_http_error he = {0};
        kw_openai_reason_error(ev->finish, ev->reason, ev->error ? ev->error : "request cancelled", &he);
        emit(j, "response.failed", failed_event(j, &he));
        return;
    }
    close_item(j);
    const char *status = status_of(j, true);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "response", response_json(j, status, j->blk.output, usage_json(j)));
    j->blk.output = NULL;
    emit(j, !strcmp(status, "incomplete") ? "response.incomplete" : "response.completed", o);
}

/* A stream request refused before it started (a prompt longer than the
 * context): response.created, then response.failed with the error's code. */
static char *responses_stream_error(const kw_http_error *e) {
    kw_job *j = kw_job_new(NULL, NULL, &kw_api_responses, "resp_", "");
    if (!j) return NULL;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "response", response_json(j, "in_progress", NULL, NULL));
    emit(j, "response.created", o);
    emit(j, "response.failed", failed_event(j, e));
    char *s = kw_sbuf_take(&j->out);
    kw_job_free(j);
    return s;
}

static char *responses_final_json(kw_job *j) {
    cJSON *out = cJSON_CreateArray();
    char id[64];
    int n = 0;
    if (j->reasoning.len) {
        item_id(j, "rs", n++, id, sizeof id);
        cJSON_AddItemToArray(out, reasoning_item_json(id, j->reasoning.p, j->reasoning.len, true));
    }
    if (j->text.len) {
        item_id(j, "msg", n++, id, sizeof id);
        cJSON_AddItemToArray(out, text_item(id, j->text.p, j->text.len, true));
    }
    const cJSON *c;
    cJSON_ArrayForEach(c, j->tool_calls) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(f, "arguments");
        const char *name = cJSON_GetObjectItemCaseSensitive(f, "name")->valuestring;
        item_id(j, is_custom(j, name) ? "ctc" : "fc", n++, id, sizeof id);
        cJSON_AddItemToArray(out, call_item_json(j, id, cJSON_GetObjectItemCaseSensitive(c, "id")->valuestring, name,
                                                 cJSON_IsString(args) ? args->valuestring : "", true));
    }
    cJSON *r = response_json(j, status_of(j, true), out, usage_json(j));
    return kw_json_take(r);
}

const kw_api kw_api_responses = {
    .name = "responses", .index = KW_API_RESPONSES, .stream_type = "text/event-stream",
    .open = responses_open, .progress = responses_progress, .piece = responses_piece, .close = responses_close,
    .final_json = responses_final_json, .error_json = kw_http_error_json, .stream_error = responses_stream_error,
    .reason_error = kw_openai_reason_error,
};
