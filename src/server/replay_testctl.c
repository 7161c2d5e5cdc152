/* replay_testctl.c - `kvwise serve --test-replay`, a test hook compiled only
 * with KW_TESTCTL (testctl.h): a chat or completion request's "test_replay"
 * text, or the output a --test-replay-script rule picks for it, is tokenized
 * when the request is parsed and becomes the model's output through a
 * sampler plugged into the scheduler's sampling step; the request's other
 * fields (stop strings, max_tokens, tools, streaming) apply as usual. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "kvwise/testctl.h"

/* --test-replay-script FILE (tests only): a JSON array of rules
 * {"if_last_role": R, "if_tools": B, "if_tool_result": B, "if_contains": S,
 * "text": T}; the first rule whose conditions all hold (last message's role,
 * the request has tools, some message is a tool result, the last message's
 * text contains S) gives the output T. Every API's request is seen in its
 * canonical chat form (chat.c), so the rules read the same for all. The
 * file is read on every request (tests rewrite it freely). NULL: no rule. */
static char *replay_script_text(const char *path, const cJSON *root, kw_http_error *e) {
    FILE *f = fopen(path, "rb");
    if (!f) { kw_http_error_set(e, 500, NULL, NULL, "test replay script %s: cannot open", path); return NULL; }
    kw_sbuf b = {0};
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0 && b.len < (1u << 20)) kw_sbuf_add(&b, chunk, n);
    fclose(f);
    cJSON *rules = cJSON_ParseWithLength(b.p ? b.p : "", b.len);
    kw_sbuf_free(&b);
    if (!cJSON_IsArray(rules)) {
        cJSON_Delete(rules);
        kw_http_error_set(e, 500, NULL, NULL, "test replay script %s: not a JSON array of rules", path);
        return NULL;
    }
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    const cJSON *last = cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1);
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(last, "role");
    kw_sbuf last_text = {0};
    kw_http_error ignored;
    kw_openai_message_text(last, 0, &last_text, &ignored);
    kw_sbuf_add(&last_text, "", 0);
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    bool has_tools = cJSON_IsArray(tools) && cJSON_GetArraySize(tools) > 0;
    bool has_result = false;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *mr = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (cJSON_IsString(mr) && !strcmp(mr->valuestring, "tool")) has_result = true;
    }
    char *out = NULL;
    const cJSON *r;
    cJSON_ArrayForEach(r, rules) {
        const cJSON *want_role = cJSON_GetObjectItemCaseSensitive(r, "if_last_role");
        const cJSON *want_tools = cJSON_GetObjectItemCaseSensitive(r, "if_tools");
        const cJSON *want_text = cJSON_GetObjectItemCaseSensitive(r, "if_contains");
        const cJSON *want_result = cJSON_GetObjectItemCaseSensitive(r, "if_tool_result");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(r, "text");
        if (!cJSON_IsString(text)) continue;
        if (cJSON_IsString(want_role) && !(cJSON_IsString(role) && !strcmp(role->valuestring, want_role->valuestring))) continue;
        if (cJSON_IsBool(want_tools) && cJSON_IsTrue(want_tools) != has_tools) continue;
        if (cJSON_IsBool(want_result) && cJSON_IsTrue(want_result) != has_result) continue;
        if (cJSON_IsString(want_text) && !strstr(last_text.p, want_text->valuestring)) continue;
        out = strdup(text->valuestring);
        break;
    }
    kw_sbuf_free(&last_text);
    cJSON_Delete(rules);
    return out;
}

int kw_replay_setup(kw_job *j, const cJSON *root, kw_engine *eng, kw_http_error *e) {
    const char *script = NULL;
    if (!kw_testctl_replay(&script)) return 0;
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(root, "test_replay");
    char *scripted = NULL;
    if (!r && script && j->chat) {
        e->status = 0;
        scripted = replay_script_text(script, root, e);
        if (!scripted) return e->status ? -1 : 0;
    } else if (!r) {
        return 0;
    } else if (!cJSON_IsString(r)) {
        return kw_http_error_set(e, 400, "test_replay", "invalid_type", "'test_replay' must be a string");
    }
    const char *text = scripted ? scripted : r->valuestring;
    size_t n = 0;
    kw_err err = {{0}};
    int rc = eng->tokenize(eng, text, strlen(text), false, false, &j->replay_ids, &n, &err);
    free(scripted);
    if (rc < 0) return kw_openai_error_400_or_oom(e, "test_replay", err.msg);
    j->n_replay = (int32_t)n;
    j->replaying = true;
    return 0;
}

/* The sampler plugged into the scheduler (testctl.h): a replaying job's
 * tokens one by one, the last one ending the request "stop"; every other
 * request is passed to kw_sample. Every request of this server is a job. */
static int32_t replay_sample(void *ctx, const kw_sched_req *r, int32_t n_gen, bool *last) {
    (void)ctx;
    const kw_job *j = (const kw_job *)(const void *)((const char *)r - offsetof(kw_job, req));
    if (!j->replaying) return KW_TEST_SAMPLE_PASS;
    if (n_gen >= j->n_replay) return KW_TEST_SAMPLE_END;      /* an empty script */
    *last = n_gen + 1 >= j->n_replay;
    return j->replay_ids[n_gen];
}

void kw_replay_plug(bool on) { kw_testctl_set_sampler(on ? replay_sample : NULL, NULL); }
