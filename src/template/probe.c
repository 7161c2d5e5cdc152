/* probe.c - what a chat template does with each part of a request.
 *
 * Owns kw_template_probe(): renders small probe conversations carrying
 * unique marker strings (system text, a tool name, tool-call arguments as an
 * object and as a JSON string, a tool result, reasoning_content) and reports
 * which markers reach the prompt; whether enable_thinking=false changes
 * the generation prompt; and whether an assistant turn whose content is
 * null (as the OpenAI API sends it beside tool_calls) renders at all. Conversations follow the user/assistant alternation
 * strict templates (Mistral, Gemma) demand, so a template that raises on a
 * part simply reports it unsupported. */
#include "kvwise/template.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"kw_probe_tool\",\"description\":\"probe\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"kw_probe_arg\":{\"type\":\"string\"}},"
    "\"required\":[\"kw_probe_arg\"]}}}]";

/* renders context JSON text; returns malloc'd output or NULL */
static char *render_json(const kw_template *t, const char *json) {
    cJSON *ctx = cJSON_Parse(json);
    if (!ctx) return NULL;
    cJSON_AddStringToObject(ctx, "bos_token", "");
    cJSON_AddStringToObject(ctx, "eos_token", "");
    kw_template_limits lim = kw_template_default_limits();
    lim.max_steps = 2000000;
    lim.max_memory_bytes = (size_t)64 << 20;
    char *out = NULL, *copy = NULL;
    kw_err err;
    if (kw_template_render_ex(t, ctx, &lim, &out, NULL, &err) == 0) {
        copy = strdup(out);
        kw_template_output_free(out);
    }
    cJSON_Delete(ctx);
    return copy;
}

static bool renders_marker(const kw_template *t, const char *json, const char *marker) {
    char *out = render_json(t, json);
    bool ok = out && strstr(out, marker) != NULL;
    free(out);
    return ok;
}

static char *with_tools(const char *messages_json, const char *extra) {
    size_t n = strlen(messages_json) + strlen(TOOLS) + strlen(extra) + 64;
    char *s = malloc(n);
    if (s) snprintf(s, n, "{\"messages\":%s,\"tools\":%s%s}", messages_json, TOOLS, extra);
    return s;
}

void kw_template_probe(const kw_template *t, kw_template_caps *caps) {
    memset(caps, 0, sizeof *caps);
    if (!t) return;
    caps->system_role = renders_marker(t,
        "{\"messages\":[{\"role\":\"system\",\"content\":\"kw_probe_system\"},{\"role\":\"user\",\"content\":\"hi\"}],"
        "\"add_generation_prompt\":true}", "kw_probe_system");

    char *j = with_tools("[{\"role\":\"user\",\"content\":\"hi\"}]", ",\"add_generation_prompt\":true");
    caps->tools = j && renders_marker(t, j, "kw_probe_tool");
    free(j);

    static const char *call_obj =
        "[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"c1\","
        "\"type\":\"function\",\"function\":{\"name\":\"kw_probe_tool\",\"arguments\":{\"kw_probe_arg\":\"kw_probe_value\"}}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"name\":\"kw_probe_tool\",\"content\":\"kw_probe_result\"}]";
    static const char *call_str =
        "[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"c1\","
        "\"type\":\"function\",\"function\":{\"name\":\"kw_probe_tool\",\"arguments\":\"{\\\"kw_probe_arg\\\": \\\"kw_probe_value\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"name\":\"kw_probe_tool\",\"content\":\"kw_probe_result\"}]";
    char *jo = with_tools(call_obj, ",\"add_generation_prompt\":true");
    char *js = with_tools(call_str, ",\"add_generation_prompt\":true");
    char *oo = jo ? render_json(t, jo) : NULL;
    char *os = js ? render_json(t, js) : NULL;
    bool obj_ok = oo && strstr(oo, "kw_probe_value") != NULL;
    bool str_ok = os && strstr(os, "kw_probe_value") != NULL;
    caps->tool_calls = obj_ok || str_ok;
    caps->object_arguments = obj_ok;
    caps->tool_results = (oo && strstr(oo, "kw_probe_result")) || (os && strstr(os, "kw_probe_result"));
    free(oo); free(os); free(jo); free(js);

    static const char *call_null =
        "[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\","
        "\"type\":\"function\",\"function\":{\"name\":\"kw_probe_tool\",\"arguments\":{\"kw_probe_arg\":\"x\"}}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"kw_probe_result\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c2\",\"type\":\"function\","
        "\"function\":{\"name\":\"kw_probe_tool\",\"arguments\":{}}}]}]";
    char *jn = with_tools(call_null, ",\"add_generation_prompt\":false");
    char *on_null = jn ? render_json(t, jn) : NULL;
    caps->null_content = on_null != NULL;
    free(on_null);
    free(jn);

    caps->reasoning_content = renders_marker(t,
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"ok\","
        "\"reasoning_content\":\"kw_probe_reasoning\"}],\"add_generation_prompt\":false}", "kw_probe_reasoning");

    char *on = render_json(t, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"add_generation_prompt\":true,"
                              "\"enable_thinking\":true}");
    char *off = render_json(t, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"add_generation_prompt\":true,"
                               "\"enable_thinking\":false}");
    caps->enable_thinking = on && off && strcmp(on, off) != 0;
    free(on);
    free(off);
}
