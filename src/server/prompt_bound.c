/* prompt_bound.c - refusing a prompt that cannot fit the context before the
 * work that would prove it: tokenizing megabytes of text, or building and
 * rendering the template context of 100k messages, costs memory and time on
 * an HTTP thread that no ledger line holds (docs/MEMORY.md, "Request
 * handling"). A text of len bytes makes at least len / max_token_text tokens
 * (the engine's bound); a message renders to at least one token in every
 * chat format. Owns kw_prompt_bytes_check and kw_chat_messages_check
 * (internal.h), and kw_json_tree_bound: what parsing a body will hold, charged
 * to the thread's request budget before the parse (server.c). */
#include <stdio.h>
#include <string.h>
#include "internal.h"

static int too_long(kw_http_error *e, const kw_engine *eng, const char *param, const char *what) {
    kw_http_error_set(e, 400, param, "context_length_exceeded",
                      "This model's maximum context length is %d tokens. However, your %s (%s) cannot fit in it. "
                      "Please reduce the length of the %s.", eng->n_ctx, param, what, param);
    e->n_ctx = eng->n_ctx;
    return -1;
}

/* The fewest tokens bytes of text can make (0 when the engine knows no bound). */
static size_t least_tokens(const kw_engine *eng, size_t bytes) {
    size_t m = eng->max_token_text;
    return m ? (bytes + m - 1) / m : 0;
}

int kw_prompt_bytes_check(const kw_engine *eng, size_t bytes, const char *param, kw_http_error *e) {
    size_t least = least_tokens(eng, bytes);
    if (eng->n_ctx <= 0 || least < (size_t)eng->n_ctx) return 0;
    char what[128];
    snprintf(what, sizeof what, "%zu bytes of text: at least %zu tokens", bytes, least);
    e->n_prompt = least > INT32_MAX ? INT32_MAX : (int32_t)least;
    return too_long(e, eng, param, what);
}

/* Text bytes of a message's content: a string, or the "text" of its parts. */
static size_t content_bytes(const cJSON *msg) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(msg, "content"), *part;
    if (cJSON_IsString(c)) return strlen(c->valuestring);
    size_t n = 0;
    if (cJSON_IsArray(c))
        cJSON_ArrayForEach(part, c) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
            if (cJSON_IsString(t)) n += strlen(t->valuestring);
        }
    return n;
}

int kw_chat_messages_check(const kw_engine *eng, const cJSON *root, kw_http_error *e) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages"), *m;
    if (!cJSON_IsArray(msgs) || eng->n_ctx <= 0) return 0;     /* render_chat names what is wrong */
    size_t n = 0, bytes = 0;
    cJSON_ArrayForEach(m, msgs) {
        n++;
        /* templates may drop an earlier assistant turn's text (its reasoning), never the others' */
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsString(role) || strcmp(role->valuestring, "assistant")) bytes += content_bytes(m);
    }
    if (n >= (size_t)eng->n_ctx) {
        char what[96];
        snprintf(what, sizeof what, "%zu messages: at least one token each", n);
        e->n_prompt = n > INT32_MAX ? INT32_MAX : (int32_t)n;
        return too_long(e, eng, "messages", what);
    }
    return kw_prompt_bytes_check(eng, bytes, "messages", e);
}

/* cJSON holds one node (64 bytes + the allocator's 16) per value and a copy
 * of every key and string (their bytes, + 16 each): per value at most 64 + 16
 * + 2 x 16 bytes besides the body's own bytes. Values are at most the commas
 * + the containers opened + 1 (each comma separates two, each container
 * holds its members); one pass over the body, strings skipped. */
uint64_t kw_json_tree_bound(const char *body, size_t len) {
    uint64_t values = 1;
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        char ch = body[i];
        if (in_str) {
            if (ch == '\\') i++;
            else if (ch == '"') in_str = false;
        } else if (ch == '"') in_str = true;
        else if (ch == ',' || ch == '{' || ch == '[') values++;
    }
    return values * (64 + 16 + 2 * 16) + len;
}
