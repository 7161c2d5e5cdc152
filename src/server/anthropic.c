/* anthropic.c - the Anthropic Messages API: POST /v1/messages (streaming
 * and not) and POST /v1/messages/count_tokens.
 *
 * Request: `system` (a string or text blocks) and `messages` (roles user,
 * assistant and system; content a string or blocks: text, tool_use,
 * tool_result, thinking) become the canonical chat request of chat.c
 * (tool_use -> assistant tool_calls, tool_result -> role "tool" messages,
 * thinking -> reasoning_content); `tools` (input_schema) -> function tools;
 * tool_choice auto / any / tool / none; max_tokens, temperature, top_p,
 * top_k, stop_sequences; thinking disabled -> enable_thinking false.
 * Accepted and ignored (annotations with nothing to apply here):
 * metadata, context_management, cache_control, service_tier,
 * output_config.effort, thinking budget_tokens. Structured outputs:
 * output_format / output_config.format {type: json_schema, schema}
 * constrain the text answer; tool_choice any / tool force a call whose
 * input is generated under the tool's input_schema (chat.c), strict when
 * the tool says strict: true.
 *
 * Answer: a message with content blocks (thinking, text, tool_use) and
 * usage {input_tokens (not from the cache), cache_read_input_tokens,
 * output_tokens}; the stream is message_start, ping, content_block_start /
 * _delta (text_delta, thinking_delta, input_json_delta) / _stop,
 * message_delta (stop_reason end_turn / max_tokens / stop_sequence /
 * tool_use, usage), message_stop. Errors are {"type":"error","error":
 * {"type","message"}}; a busy server is 529 overloaded_error with
 * Retry-After. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "kvwise/toolcall.h"

/* ---- request ---------------------------------------------------------------- */

/* Text of a content value: a string, or text blocks joined with "\n"
 * (other block types are refused). -1 + e. */
static int blocks_text(const cJSON *content, const char *where, kw_sbuf *out, kw_http_error *e) {
    if (!content || cJSON_IsNull(content)) return 0;
    if (cJSON_IsString(content)) return kw_sbuf_puts(out, content->valuestring) < 0 ? -1 : 0;
    if (!cJSON_IsArray(content))
        return kw_http_error_set(e, 400, "messages", "invalid_type", "%s must be a string or a list of content blocks", where);
    bool first = true;
    const cJSON *b;
    cJSON_ArrayForEach(b, content) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(b, "text");
        if (!cJSON_IsString(type))
            return kw_http_error_set(e, 400, "messages", "invalid_type", "%s: every content block needs a string 'type'", where);
        if (strcmp(type->valuestring, "text"))
            return kw_http_error_set(e, 400, "messages", "invalid_value", "%s: content block type '%.64s' is not supported here (text only)",
                                     where, type->valuestring);
        if (!cJSON_IsString(text))
            return kw_http_error_set(e, 400, "messages", "invalid_type", "%s: a text block needs a string 'text'", where);
        if (!first) kw_sbuf_puts(out, "\n");
        kw_sbuf_puts(out, text->valuestring);
        first = false;
    }
    return 0;
}

static cJSON *text_message(const char *role, const kw_sbuf *text) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddItemToObject(m, "content", kw_json_string_n(text->p ? text->p : "", text->len));
    return m;
}

/* A user message: its tool_result blocks become role "tool" messages (in
 * order), its text blocks one user message after them. */
static int user_message(const cJSON *content, int idx, cJSON *out, kw_http_error *e) {
    char where[48];
    snprintf(where, sizeof where, "messages[%d].content", idx);
    if (!cJSON_IsArray(content)) {
        kw_sbuf t = {0};
        int rc = blocks_text(content, where, &t, e);
        if (rc == 0) cJSON_AddItemToArray(out, text_message("user", &t));
        kw_sbuf_free(&t);
        return rc;
    }
    kw_sbuf text = {0};
    bool any_text = false;
    const cJSON *b;
    cJSON_ArrayForEach(b, content) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "type");
        if (!cJSON_IsObject(b) || !cJSON_IsString(type)) {
            kw_sbuf_free(&text);
            return kw_http_error_set(e, 400, "messages", "invalid_type", "%s: every content block needs a string 'type'", where);
        }
        if (!strcmp(type->valuestring, "tool_result")) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "tool_use_id");
            if (!cJSON_IsString(id)) {
                kw_sbuf_free(&text);
                return kw_http_error_set(e, 400, "messages", "invalid_type", "%s: a tool_result needs a string 'tool_use_id'", where);
            }
            kw_sbuf r = {0};
            if (blocks_text(cJSON_GetObjectItemCaseSensitive(b, "content"), where, &r, e) < 0) {
                kw_sbuf_free(&r); kw_sbuf_free(&text);
                return -1;
            }
            cJSON *m = text_message("tool", &r);
            cJSON_AddStringToObject(m, "tool_call_id", id->valuestring);
            cJSON_AddItemToArray(out, m);
            kw_sbuf_free(&r);
        } else if (!strcmp(type->valuestring, "text")) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(b, "text");
            if (!cJSON_IsString(t)) {
                kw_sbuf_free(&text);
                return kw_http_error_set(e, 400, "messages", "invalid_type", "%s: a text block needs a string 'text'", where);
            }
            if (any_text) kw_sbuf_puts(&text, "\n");
            kw_sbuf_puts(&text, t->valuestring);
            any_text = true;
        } else {
            kw_sbuf_free(&text);
            return kw_http_error_set(e, 400, "messages", "invalid_value", "%s: content block type '%.64s' is not supported "
                                     "(text and tool_result)", where, type->valuestring);
        }
    }
    if (any_text) cJSON_AddItemToArray(out, text_message("user", &text));
    kw_sbuf_free(&text);
    return 0;
}

/* An assistant message: text -> content, thinking -> reasoning_content,
 * tool_use -> tool_calls (input serialised as the arguments JSON). */
static int assistant_message(const cJSON *content, int idx, cJSON *out, kw_http_error *e) {
    char where[48];
    snprintf(where, sizeof where, "messages[%d].content", idx);
    kw_sbuf text = {0}, thinking = {0};
    cJSON *m = cJSON_CreateObject(), *calls = cJSON_CreateArray();
    int rc = 0;
    if (!cJSON_IsArray(content)) {
        rc = blocks_text(content, where, &text, e);
    } else {
        const cJSON *b;
        cJSON_ArrayForEach(b, content) {
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "type");
            const char *ty = cJSON_IsString(type) ? type->valuestring : "";
            if (!strcmp(ty, "text") && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(b, "text"))) {
                if (text.len) kw_sbuf_puts(&text, "\n");
                kw_sbuf_puts(&text, cJSON_GetObjectItemCaseSensitive(b, "text")->valuestring);
            } else if (!strcmp(ty, "thinking") && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(b, "thinking"))) {
                kw_sbuf_puts(&thinking, cJSON_GetObjectItemCaseSensitive(b, "thinking")->valuestring);
            } else if (!strcmp(ty, "redacted_thinking")) {
                /* encrypted by another server: nothing a local model can read */
            } else if (!strcmp(ty, "tool_use")) {
                const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "id");
                const cJSON *name = cJSON_GetObjectItemCaseSensitive(b, "name");
                const cJSON *input = cJSON_GetObjectItemCaseSensitive(b, "input");
                if (!cJSON_IsString(id) || !cJSON_IsString(name)) {
                    rc = kw_http_error_set(e, 400, "messages", "invalid_type", "%s: a tool_use needs string 'id' and 'name'", where);
                    break;
                }
                char *args = input ? cJSON_PrintUnformatted(input) : NULL;
                cJSON_AddItemToArray(calls, kw_canon_call(id->valuestring, name->valuestring, args ? args : "{}"));
                free(args);
            } else {
                rc = kw_http_error_set(e, 400, "messages", "invalid_value", "%s: content block type '%.64s' is not supported "
                                       "in an assistant message", where, ty);
                break;
            }
        }
    }
    if (rc == 0) {
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddItemToObject(m, "content", kw_json_string_n(text.p ? text.p : "", text.len));
        if (thinking.len) cJSON_AddItemToObject(m, "reasoning_content", kw_json_string_n(thinking.p, thinking.len));
        if (cJSON_GetArraySize(calls)) { cJSON_AddItemToObject(m, "tool_calls", calls); calls = NULL; }
        cJSON_AddItemToArray(out, m);
        m = NULL;
    }
    cJSON_Delete(m);
    cJSON_Delete(calls);
    kw_sbuf_free(&text);
    kw_sbuf_free(&thinking);
    return rc;
}

static int map_messages(const cJSON *root, cJSON *canon, kw_http_error *e) {
    cJSON *msgs = cJSON_AddArrayToObject(canon, "messages");
    const cJSON *sys = cJSON_GetObjectItemCaseSensitive(root, "system");
    if (sys && !cJSON_IsNull(sys)) {
        kw_sbuf t = {0};
        int rc = blocks_text(sys, "system", &t, e);
        if (rc == 0 && t.len) cJSON_AddItemToArray(msgs, text_message("system", &t));
        kw_sbuf_free(&t);
        if (rc < 0) { e->param = "system"; return -1; }
    }
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!cJSON_IsArray(in)) return kw_http_error_set(e, 400, "messages", "invalid_type", "'messages' must be an array");
    if (!cJSON_GetArraySize(in)) return kw_http_error_set(e, 400, "messages", "invalid_value", "'messages' must not be empty");
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, in) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role))
            return kw_http_error_set(e, 400, "messages", "invalid_type", "messages[%d] must be an object with a string 'role'", i);
        int rc;
        if (!strcmp(role->valuestring, "user")) {
            rc = user_message(content, i, msgs, e);
        } else if (!strcmp(role->valuestring, "assistant")) {
            rc = assistant_message(content, i, msgs, e);
        } else if (!strcmp(role->valuestring, "system")) {
            kw_sbuf t = {0};
            rc = blocks_text(content, "a system message", &t, e);
            if (rc == 0) cJSON_AddItemToArray(msgs, text_message("system", &t));
            kw_sbuf_free(&t);
        } else {
            return kw_http_error_set(e, 400, "messages", "invalid_value", "messages[%d]: unknown role '%.32s' (user, assistant, system)",
                                     i, role->valuestring);
        }
        if (rc < 0) return -1;
        i++;
    }
    if (!cJSON_GetArraySize(msgs)) return kw_http_error_set(e, 400, "messages", "invalid_value", "the messages hold no content");
    return 0;
}

/* tools: client tools (no type, or "custom") with input_schema -> function
 * tools. A tool with defer_loading is not shown to the model (it is loaded
 * by a tool search the client runs). Server tools are refused. */
static int map_tools(const cJSON *root, cJSON *canon, kw_http_error *e) {
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    if (!tools || cJSON_IsNull(tools)) return 0;
    if (!cJSON_IsArray(tools)) return kw_http_error_set(e, 400, "tools", "invalid_type", "'tools' must be an array");
    cJSON *out = cJSON_AddArrayToObject(canon, "tools");
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(t, "input_schema");
        if (cJSON_IsString(type) && strcmp(type->valuestring, "custom"))
            return kw_http_error_set(e, 400, "tools", "invalid_value", "tools[%d]: tool type '%.64s' is not supported "
                                     "(client tools with input_schema only)", i, type->valuestring);
        if (!cJSON_IsString(name) || !name->valuestring[0])
            return kw_http_error_set(e, 400, "tools", "invalid_type", "tools[%d] needs a string 'name'", i);
        if (schema && !cJSON_IsObject(schema))
            return kw_http_error_set(e, 400, "tools", "invalid_type", "tools[%d].input_schema must be an object", i);
        const cJSON *strict = cJSON_GetObjectItemCaseSensitive(t, "strict");
        if (strict && !cJSON_IsNull(strict) && !cJSON_IsBool(strict))
            return kw_http_error_set(e, 400, "tools", "invalid_type", "tools[%d].strict must be a boolean", i);
        i++;
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "defer_loading"))) continue;
        cJSON *ft = cJSON_CreateObject(), *fn = cJSON_AddObjectToObject(ft, "function");
        cJSON_AddStringToObject(ft, "type", "function");
        cJSON_AddStringToObject(fn, "name", name->valuestring);
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description");
        if (cJSON_IsString(desc)) cJSON_AddStringToObject(fn, "description", desc->valuestring);
        cJSON_AddItemToObject(fn, "parameters", schema ? cJSON_Duplicate(schema, 1) : cJSON_CreateObject());
        if (cJSON_IsTrue(strict)) cJSON_AddTrueToObject(fn, "strict");
        cJSON_AddItemToArray(out, ft);
    }
    return 0;
}

static int map_tool_choice(const cJSON *root, cJSON *canon, kw_http_error *e) {
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    if (!tc || cJSON_IsNull(tc)) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(tc, "type");
    if (!cJSON_IsObject(tc) || !cJSON_IsString(type))
        return kw_http_error_set(e, 400, "tool_choice", "invalid_type", "'tool_choice' must be an object with a 'type'");
    const char *ty = type->valuestring;
    if (!strcmp(ty, "auto")) cJSON_AddStringToObject(canon, "tool_choice", "auto");
    else if (!strcmp(ty, "any")) cJSON_AddStringToObject(canon, "tool_choice", "required");
    else if (!strcmp(ty, "none")) cJSON_AddStringToObject(canon, "tool_choice", "none");
    else if (!strcmp(ty, "tool")) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(tc, "name");
        if (!cJSON_IsString(name)) return kw_http_error_set(e, 400, "tool_choice", "invalid_type", "'tool_choice' of type tool needs a 'name'");
        cJSON *o = cJSON_AddObjectToObject(canon, "tool_choice");
        cJSON_AddStringToObject(o, "type", "function");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "function"), "name", name->valuestring);
    } else {
        return kw_http_error_set(e, 400, "tool_choice", "invalid_value", "'tool_choice.type' must be auto, any, tool or none");
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(tc, "disable_parallel_tool_use")))
        cJSON_AddFalseToObject(canon, "parallel_tool_calls");
    return 0;
}

/* Structured outputs: output_format (or output_config.format, the same
 * object) {type: "json_schema", schema} constrains the text answer through
 * the same grammar request as chat's response_format. Strict as Anthropic's
 * structured outputs are: an object without additionalProperties allows
 * none. Any other type is a 400 naming the field. */
static int map_output_format(const cJSON *root, kw_job *j, kw_http_error *e) {
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(root, "output_format");
    const cJSON *oc = cJSON_GetObjectItemCaseSensitive(root, "output_config");
    const cJSON *ocf = cJSON_IsObject(oc) ? cJSON_GetObjectItemCaseSensitive(oc, "format") : NULL;
    const char *param = "output_format";
    if (of && !cJSON_IsNull(of) && ocf && !cJSON_IsNull(ocf))
        return kw_http_error_set(e, 400, "output_format", "invalid_value",
                                 "'output_format' and 'output_config.format' cannot both be given");
    if (!of || cJSON_IsNull(of)) { of = ocf; param = "output_config.format"; }
    if (!of || cJSON_IsNull(of)) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(of, "type");
    if (!cJSON_IsObject(of) || !cJSON_IsString(type))
        return kw_http_error_set(e, 400, param, "invalid_type", "'%s' must be an object with a string 'type'", param);
    if (strcmp(type->valuestring, "json_schema"))
        return kw_http_error_set(e, 400, param, "invalid_value", "'%s.type' must be json_schema (got '%.40s')", param,
                                 type->valuestring);
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(of, "schema");
    if (!cJSON_IsObject(schema))
        return kw_http_error_set(e, 400, param, "invalid_type", "'%s.schema' must be a JSON Schema object", param);
    cJSON *strict = cJSON_CreateTrue();
    int rc = kw_job_set_schema(j, schema, strict, param, e);
    cJSON_Delete(strict);
    return rc;
}

/* thinking: {type: enabled | adaptive (the template's default) | disabled
 * (enable_thinking false), budget_tokens (not enforced), display: omitted
 * (thinking blocks without their text)}; output_config.effort is an
 * annotation. */
static int map_thinking(const cJSON *root, kw_job *j, cJSON *canon, kw_http_error *e) {
    const cJSON *th = cJSON_GetObjectItemCaseSensitive(root, "thinking");
    if (!th || cJSON_IsNull(th)) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(th, "type");
    if (!cJSON_IsObject(th) || !cJSON_IsString(type))
        return kw_http_error_set(e, 400, "thinking", "invalid_type", "'thinking' must be an object with a 'type'");
    if (!strcmp(type->valuestring, "disabled")) {
        cJSON_AddFalseToObject(cJSON_AddObjectToObject(canon, "chat_template_kwargs"), "enable_thinking");
    } else if (strcmp(type->valuestring, "enabled") && strcmp(type->valuestring, "adaptive")) {
        return kw_http_error_set(e, 400, "thinking", "invalid_value", "'thinking.type' must be enabled, adaptive or disabled");
    }
    const cJSON *display = cJSON_GetObjectItemCaseSensitive(th, "display");
    j->thinking_hidden = cJSON_IsString(display) && !strcmp(display->valuestring, "omitted");
    return 0;
}

static int parse_fields(const cJSON *root, kw_job *j, bool count, kw_http_error *e) {
    int64_t n;
    int rc;
    if (kw_json_bool(root, "stream", &j->stream, e) < 0 || kw_parse_model_sampling(root, j, 1, e) < 0) return -1;
    if ((rc = kw_json_int(root, "top_k", 0, 1e9, &n, e)) < 0) return -1;
    if (rc) j->req.sp.top_k = (int32_t)n;
    if ((rc = kw_json_int(root, "max_tokens", 1, 1e12, &n, e)) < 0) return -1;
    if (!rc && !count) return kw_http_error_set(e, 400, "max_tokens", "missing_required_parameter", "'max_tokens' is required");
    j->req.max_tokens = n > 0x7fffffff ? 0x7fffffff : (int32_t)n;
    const cJSON *mcp = cJSON_GetObjectItemCaseSensitive(root, "mcp_servers");
    if (cJSON_IsArray(mcp) && cJSON_GetArraySize(mcp) > 0)
        return kw_http_error_set(e, 400, "mcp_servers", "invalid_value", "'mcp_servers' (MCP run by the server) is not supported");
    return kw_job_set_stop(j, cJSON_GetObjectItemCaseSensitive(root, "stop_sequences"), "stop_sequences", e);
}

kw_job *kw_anthropic_parse(struct kw_server *srv, kw_engine *eng, const kw_chat_template *tpl, bool count,
                           const char *body, size_t len, const char *model_id, kw_http_error *e) {
    cJSON *root = kw_json_body(body, len, e), *canon = NULL;
    kw_job *j = NULL;
    if (!root) return NULL;
    j = kw_job_new(srv, eng, &kw_api_anthropic, "msg_", model_id);
    canon = cJSON_CreateObject();
    if (!j || !canon) { kw_http_error_set(e, 500, NULL, NULL, "out of memory"); goto fail; }
    if (parse_fields(root, j, count, e) < 0 || map_messages(root, canon, e) < 0 || map_tools(root, canon, e) < 0 ||
        map_tool_choice(root, canon, e) < 0 || map_thinking(root, j, canon, e) < 0 ||
        (!count && map_output_format(root, j, e) < 0)) goto fail;
    const cJSON *replay = cJSON_GetObjectItemCaseSensitive(root, "test_replay");
    if (replay) cJSON_AddItemToObject(canon, "test_replay", cJSON_Duplicate(replay, 1));
    if (kw_chat_tokenize(j, canon, tpl, eng, e) < 0) goto fail;
    if (!count && kw_job_check(j, canon, eng, "messages", e) < 0) goto fail;
    return kw_parse_end(j, root, canon, true);
fail:
    return kw_parse_end(j, root, canon, false);
}

char *kw_anthropic_count_json(const kw_job *j) {
    char *s = malloc(48);
    if (s) snprintf(s, 48, "{\"input_tokens\":%d}", j->req.n_prompt);
    return s;
}

/* ---- answer ------------------------------------------------------------------- */

/* Our call ids ("call_<hex>") as Anthropic spells tool_use ids. */
static void tool_use_id(const char *call_id, char *buf, size_t cap) {
    snprintf(buf, cap, "toolu_%s", !strncmp(call_id, "call_", 5) ? call_id + 5 : call_id);
}

static const char *stop_reason(const kw_job *j) {
    if (j->finish == KW_FINISH_LENGTH) return "max_tokens";
    if (kw_job_has_calls(j)) return "tool_use";
    if (j->stop_index >= 0 && j->stop_index < j->req.n_stop) return "stop_sequence";
    return "end_turn";
}

static cJSON *usage_json(const kw_job *j, bool with_output) {
    cJSON *u = cJSON_CreateObject();
    int32_t cached = j->cached_tokens < j->prompt_tokens ? j->cached_tokens : j->prompt_tokens;
    cJSON_AddNumberToObject(u, "input_tokens", j->prompt_tokens - cached);
    cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0);
    cJSON_AddNumberToObject(u, "cache_read_input_tokens", cached);
    cJSON_AddNumberToObject(u, "output_tokens", with_output ? j->completion_tokens : 0);
    return u;
}

static void add_stop_fields(cJSON *o, const kw_job *j) {
    cJSON_AddStringToObject(o, "stop_reason", stop_reason(j));
    if (!strcmp(stop_reason(j), "stop_sequence")) cJSON_AddStringToObject(o, "stop_sequence", j->req.stop[j->stop_index]);
    else cJSON_AddNullToObject(o, "stop_sequence");
}

static cJSON *message_head(const kw_job *j) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", j->id);
    cJSON_AddStringToObject(m, "type", "message");
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddStringToObject(m, "model", j->model);
    return m;
}

static cJSON *typed(const char *type) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    return o;
}

static void event(kw_job *j, const char *name, cJSON *o) { kw_sse_event(j, name, o); }

static void block_stop(kw_job *j) {
    if (j->blk.open == KW_BLK_NONE) return;
    cJSON *o = typed("content_block_stop");
    cJSON_AddNumberToObject(o, "index", j->blk.index);
    event(j, "content_block_stop", o);
    j->blk.open = KW_BLK_NONE;
    j->blk.index++;
}

static void block_start(kw_job *j, int kind, cJSON *block) {
    block_stop(j);
    cJSON *o = typed("content_block_start");
    cJSON_AddNumberToObject(o, "index", j->blk.index);
    cJSON_AddItemToObject(o, "content_block", block);
    event(j, "content_block_start", o);
    j->blk.open = kind;
}

static void block_delta(kw_job *j, const char *type, const char *field, const char *text, size_t len) {
    cJSON *o = typed("content_block_delta"), *d = typed(type);
    cJSON_AddNumberToObject(o, "index", j->blk.index);
    cJSON_AddItemToObject(d, field, kw_json_string_n(text, len));
    cJSON_AddItemToObject(o, "delta", d);
    event(j, "content_block_delta", o);
}

static void anthropic_open(kw_job *j) {
    cJSON *m = message_head(j);
    cJSON_AddArrayToObject(m, "content");
    cJSON_AddNullToObject(m, "stop_reason");
    cJSON_AddNullToObject(m, "stop_sequence");
    cJSON_AddItemToObject(m, "usage", usage_json(j, false));
    cJSON *o = typed("message_start");
    cJSON_AddItemToObject(o, "message", m);
    event(j, "message_start", o);
    event(j, "ping", typed("ping"));
}

/* A long prefill: pings keep the connection alive. */
static void anthropic_progress(kw_job *j, int32_t done, int32_t total) {
    (void)done; (void)total;
    event(j, "ping", typed("ping"));
}

static void anthropic_piece(kw_job *j, const kw_tc_event *ev) {
    switch (ev->type) {
    case KW_TC_CONTENT:
        if (j->blk.open != KW_BLK_TEXT) {
            cJSON *b = typed("text");
            cJSON_AddStringToObject(b, "text", "");
            block_start(j, KW_BLK_TEXT, b);
        }
        block_delta(j, "text_delta", "text", ev->text, ev->len);
        break;
    case KW_TC_REASONING:
        if (j->blk.open != KW_BLK_THINKING) {
            cJSON *b = typed("thinking");
            cJSON_AddStringToObject(b, "thinking", "");
            cJSON_AddStringToObject(b, "signature", "");
            block_start(j, KW_BLK_THINKING, b);
        }
        if (!j->thinking_hidden) block_delta(j, "thinking_delta", "thinking", ev->text, ev->len);
        break;
    case KW_TC_CALL_BEGIN: {
        char id[80];
        tool_use_id(ev->id, id, sizeof id);
        cJSON *b = typed("tool_use");
        cJSON_AddStringToObject(b, "id", id);
        cJSON_AddStringToObject(b, "name", ev->name);
        cJSON_AddObjectToObject(b, "input");
        block_start(j, KW_BLK_CALL, b);
        break;
    }
    case KW_TC_CALL_ARGS:
        block_delta(j, "input_json_delta", "partial_json", ev->text, ev->len);
        break;
    case KW_TC_CALL_END:
        block_stop(j);
        break;
    }
}

static const char *error_type(int status) {
    switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

static cJSON *error_obj(int status, const char *message) {
    cJSON *o = typed("error"), *err = typed(error_type(status));
    cJSON_AddStringToObject(err, "message", message);
    cJSON_AddItemToObject(o, "error", err);
    return o;
}

static char *anthropic_error_json(const kw_http_error *e) {
    cJSON *o = error_obj(e->status, e->message);
    return kw_json_take(o);
}

/* A busy server is 529 overloaded_error (what Anthropic clients retry,
 * honouring Retry-After); a stopping one 503; a request that can never
 * run 400; a failure 500. */
static void anthropic_reason_error(kw_finish f, kw_reject_reason why, const char *msg, kw_http_error *e) {
    int status = 500;
    if (f == KW_FINISH_CANCELLED) status = 503;
    else if (why == KW_REJECT_QUEUE_FULL || why == KW_REJECT_QUEUE_TIMEOUT || why == KW_REJECT_NOMEM) status = 529;
    else if (why == KW_REJECT_SHUTTING_DOWN) status = 503;
    else if (why == KW_REJECT_NEVER_FITS || why == KW_REJECT_CONTEXT) status = 400;
    else if (f == KW_FINISH_REJECTED) status = 529;
    kw_http_error_set(e, status, NULL, error_type(status), "%s", msg);
}

static void anthropic_close(kw_job *j, const kw_sched_event *ev) {
    if (ev->finish == KW_FINISH_ERROR || ev->finish == KW_FINISH_CANCELLED) {
        kw_http_error he = {0};
        anthropic_reason_error(ev->finish, ev->reason, ev->error ? ev->error : "request cancelled", &he);
        event(j, "error", error_obj(he.status, he.message));
        return;
    }
    block_stop(j);
    cJSON *o = typed("message_delta"), *d = cJSON_AddObjectToObject(o, "delta");
    add_stop_fields(d, j);
    cJSON_AddItemToObject(o, "usage", usage_json(j, true));
    event(j, "message_delta", o);
    event(j, "message_stop", typed("message_stop"));
}

static char *anthropic_final_json(kw_job *j) {
    cJSON *m = message_head(j), *content = cJSON_AddArrayToObject(m, "content");
    if (j->reasoning.len) {
        cJSON *b = typed("thinking");
        if (j->thinking_hidden) cJSON_AddStringToObject(b, "thinking", "");
        else cJSON_AddItemToObject(b, "thinking", kw_json_string_n(j->reasoning.p, j->reasoning.len));
        cJSON_AddStringToObject(b, "signature", "");
        cJSON_AddItemToArray(content, b);
    }
    if (j->text.len || !kw_job_has_calls(j)) {
        cJSON *b = typed("text");
        cJSON_AddItemToObject(b, "text", kw_json_string_n(j->text.p ? j->text.p : "", j->text.len));
        cJSON_AddItemToArray(content, b);
    }
    const cJSON *c;
    cJSON_ArrayForEach(c, j->tool_calls) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(f, "arguments");
        cJSON *input = cJSON_IsString(args) ? cJSON_Parse(args->valuestring) : NULL;
        if (!cJSON_IsObject(input)) { cJSON_Delete(input); input = cJSON_CreateObject(); }
        char id[80];
        tool_use_id(cJSON_GetObjectItemCaseSensitive(c, "id")->valuestring, id, sizeof id);
        cJSON *b = typed("tool_use");
        cJSON_AddStringToObject(b, "id", id);
        cJSON_AddStringToObject(b, "name", cJSON_GetObjectItemCaseSensitive(f, "name")->valuestring);
        cJSON_AddItemToObject(b, "input", input);
        cJSON_AddItemToArray(content, b);
    }
    add_stop_fields(m, j);
    cJSON_AddItemToObject(m, "usage", usage_json(j, true));
    return kw_json_take(m);
}

const kw_api kw_api_anthropic = {
    .name = "messages", .index = KW_API_MESSAGES, .stream_type = "text/event-stream",
    .open = anthropic_open, .progress = anthropic_progress, .piece = anthropic_piece, .close = anthropic_close,
    .final_json = anthropic_final_json, .error_json = anthropic_error_json, .reason_error = anthropic_reason_error,
};
