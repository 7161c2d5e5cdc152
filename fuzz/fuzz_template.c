/* fuzz_template.c - libFuzzer target for the chat-template interpreter.
 *
 * The input is template text. It is parsed; when that succeeds it is
 * rendered with a fixed chat context (system/user/assistant turns, tool
 * calls and results, tools, add_generation_prompt) under tight limits.
 * Either step may fail, but only with a one-line kw_err message; a crash,
 * a sanitizer report, a leak or a hang (libFuzzer -timeout) is a finding.
 * Checked also: the reported output length matches the NUL-terminated text.
 * Built and run by scripts/fuzz.sh (seeds in fuzz/corpus/template/). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kvwise/template.h"

static cJSON *g_ctx;

static const char *CONTEXT =
    "{\"bos_token\":\"<s>\",\"eos_token\":\"</s>\",\"add_generation_prompt\":true,\"enable_thinking\":false,"
    "\"messages\":[{\"role\":\"system\",\"content\":\"You are helpful.\"},"
    "{\"role\":\"user\",\"content\":\"Weather in Seoul? \\u00e9\\ud83d\\ude00\"},"
    "{\"role\":\"assistant\",\"content\":\"<think>\\nhmm\\n</think>\\n\\nok\",\"reasoning_content\":\"r\","
    "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
    "\"arguments\":{\"city\":\"Seoul\",\"n\":[1,2.5,null,true]}}}]},"
    "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"21C\"},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"part\"},{\"type\":\"image\"}]}],"
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"d\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_ctx) {
        g_ctx = cJSON_Parse(CONTEXT);
        if (!g_ctx) abort();
    }
    if (size > 65536) return 0;
    kw_err err = {{0}};
    kw_template *t = kw_template_parse_n((const char *)data, size, &err);
    if (!t) {
        if (!err.msg[0] || strchr(err.msg, '\n')) abort();   /* errors are one non-empty line */
        return 0;
    }
    kw_template_limits lim = kw_template_default_limits();
    lim.max_steps = 200000;
    lim.max_memory_bytes = (size_t)32 << 20;
    lim.max_output_bytes = (size_t)1 << 20;
    lim.max_depth = 200;
    char *out = NULL;
    size_t len = 0;
    if (kw_template_render_ex(t, g_ctx, &lim, &out, &len, &err) == 0) {
        if (!out || out[len] != 0) abort();
    } else {
        if (out || !err.msg[0]) abort();
    }
    kw_template_output_free(out);
    kw_template_free(t);
    return 0;
}
