/* chat_template.c - turning a chat request into prompt text: the model's
 * own Jinja template (src/template/) rendered as written, with the request's
 * nullable fields shaped the way templates expect; built-in chat template
 * families (ChatML/Qwen with the Hermes tool format, Llama 3, Llama 2,
 * Mistral, Gemma, Phi-3) recognised from the template text, used for the
 * --chat-template override and as the fallback when a render fails (never
 * one that drops tools: see kw_chat_apply). Owns chat_template.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "chat_template.h"
#include "kvwise/template.h"
#include "sbuf.h"

static const char *const family_names[KW_TPL_COUNT] = {"chatml", "llama3", "llama2", "mistral", "gemma", "phi3"};
static const char *const family_bos[KW_TPL_COUNT] = {"", "<|begin_of_text|>", "<s>", "<s>", "<bos>", ""};

const char *kw_tpl_family_name(kw_tpl_family f) { return f < KW_TPL_COUNT ? family_names[f] : "?"; }

int kw_tpl_family_from_name(const char *name) {
    if (!strcmp(name, "qwen") || !strcmp(name, "qwen2") || !strcmp(name, "qwen3")) return KW_TPL_CHATML;
    if (!strcmp(name, "llama-3") || !strcmp(name, "llama3.1")) return KW_TPL_LLAMA3;
    if (!strcmp(name, "phi-3")) return KW_TPL_PHI3;
    for (int i = 0; i < KW_TPL_COUNT; i++) if (!strcmp(name, family_names[i])) return i;
    return -1;
}

int kw_tpl_detect(const char *text) {
    if (!text || !*text) return -1;
    if (strstr(text, "<|im_start|>")) return KW_TPL_CHATML;
    if (strstr(text, "<|start_header_id|>")) return KW_TPL_LLAMA3;
    if (strstr(text, "<start_of_turn>")) return KW_TPL_GEMMA;
    if (strstr(text, "<|user|>") && strstr(text, "<|end|>")) return KW_TPL_PHI3;
    if (strstr(text, "[INST]")) return strstr(text, "<<SYS>>") ? KW_TPL_LLAMA2 : KW_TPL_MISTRAL;
    return -1;
}

/* The ChatML family's format, Hermes/Qwen style (what Qwen 2.5 / Qwen 3 and
 * Hermes models are trained on): tools listed as JSON in the system turn,
 * each call as <tool_call>{"name": .., "arguments": ..}</tool_call> in the
 * assistant turn, tool results as <tool_response> blocks in a user turn.
 * Without tools it is plain ChatML. Rendered by the Jinja interpreter. */
static const char HERMES_TEMPLATE[] =
    "{%- if messages and messages[0].role == 'system' %}{%- set sys = messages[0].content %}{%- set first = 1 %}"
    "{%- else %}{%- set sys = none %}{%- set first = 0 %}{%- endif %}"
    "{%- if tools %}"
    "{{- '<|im_start|>system\n' }}{%- if sys is not none %}{{- sys + '\n\n' }}{%- endif %}"
    "{{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>' }}"
    "{%- for t in tools %}{{- '\n' + (t | tojson) }}{%- endfor %}"
    "{{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
    "</tool_call><|im_end|>\n' }}"
    "{%- elif sys is not none %}{{- '<|im_start|>system\n' + sys + '<|im_end|>\n' }}{%- endif %}"
    "{%- for m in messages[first:] %}"
    "{%- if m.role == 'tool' %}"
    "{%- if loop.first or loop.previtem.role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\n<tool_response>\n' + m.content + '\n</tool_response>' }}"
    "{%- if loop.last or loop.nextitem.role != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}"
    "{%- elif m.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\n' + (m.content or '') }}"
    "{%- for c in (m.tool_calls or []) %}"
    "{%- set f = c.function if c.function is defined else c %}"
    "{%- if not loop.first or m.content %}{{- '\n' }}{%- endif %}"
    "{{- '<tool_call>\n{\"name\": ' + (f.name | tojson) + ', \"arguments\": ' + "
    "(f.arguments if f.arguments is string else (f.arguments | tojson)) + '}\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\n' }}"
    "{%- else %}{{- '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}";

static char *read_small_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    kw_sbuf b = {0};
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0 && b.len < (1u << 20)) kw_sbuf_add(&b, chunk, n);
    fclose(f);
    return kw_sbuf_take(&b);
}

static void set_family(kw_chat_template *t, int fam, const char *bos_text, const char *source) {
    t->family = (kw_tpl_family)fam;
    snprintf(t->source, sizeof t->source, "%s", source);
    /* The family's own BOS spelling, unless the model's vocab names another. */
    const char *bos = family_bos[fam];
    if (*bos && bos_text && *bos_text) bos = bos_text;
    snprintf(t->bos, sizeof t->bos, "%s", bos);
    if (fam == KW_TPL_CHATML && !t->hermes) {
        kw_err e;
        t->hermes = kw_template_parse(HERMES_TEMPLATE, &e);   /* NULL only when out of memory: plain ChatML then */
    }
}

/* Parses template text as Jinja; on failure leaves t->jinja NULL and says why in note. */
static void try_jinja(kw_chat_template *t, const char *text, char *note, size_t note_cap) {
    kw_err e = {{0}};
    t->jinja = kw_template_parse(text, &e);
    if (!t->jinja) {
        snprintf(note, note_cap, "the chat template does not parse (%s); using the built-in %s format", e.msg,
                 kw_tpl_family_name(t->family));
        return;
    }
    kw_template_caps caps;
    kw_template_probe(t->jinja, &caps);
    t->object_arguments = caps.object_arguments;
    t->null_content = caps.null_content;
}

void kw_chat_template_free(kw_chat_template *t) {
    if (t && t->jinja) kw_template_free(t->jinja);
    if (t && t->hermes) kw_template_free(t->hermes);
    if (t) t->jinja = t->hermes = NULL;
}

void kw_chat_template_describe(const kw_chat_template *t, char *buf, size_t cap) {
    if (t->jinja) snprintf(buf, cap, "jinja (%s), fallback %s", t->source, kw_tpl_family_name(t->family));
    else snprintf(buf, cap, "%s (%s)", kw_tpl_family_name(t->family), t->source);
}

int kw_chat_template_choose(kw_chat_template *t, const char *override, const char *model_text,
                            const char *bos_text, char *note, size_t note_cap, kw_err *err) {
    return kw_chat_template_choose2(t, override, model_text, bos_text, "", note, note_cap, err);
}

int kw_chat_template_choose2(kw_chat_template *t, const char *override, const char *model_text,
                             const char *bos_text, const char *eos_text, char *note, size_t note_cap, kw_err *err) {
    memset(t, 0, sizeof *t);
    if (note_cap) note[0] = 0;
    snprintf(t->bos_token, sizeof t->bos_token, "%s", bos_text ? bos_text : "");
    snprintf(t->eos_token, sizeof t->eos_token, "%s", eos_text ? eos_text : "");
    if (override && *override) {
        int fam = kw_tpl_family_from_name(override);
        if (fam >= 0) { set_family(t, fam, bos_text, "--chat-template"); return 0; }
        char *text = read_small_file(override);
        if (!text) return kw_err_set(err, "--chat-template '%s': not a known name (chatml, llama3, llama2, "
                                     "mistral, gemma, phi3) and not a readable file", override);
        fam = kw_tpl_detect(text);
        set_family(t, fam >= 0 ? fam : KW_TPL_CHATML, bos_text, "--chat-template file");
        try_jinja(t, text, note, note_cap);
        free(text);
        if (!t->jinja && fam < 0) {
            kw_chat_template_free(t);
            return kw_err_set(err, "--chat-template file '%s': %s", override, note);
        }
        return 0;
    }
    int fam = kw_tpl_detect(model_text);
    if (model_text && *model_text) {
        set_family(t, fam >= 0 ? fam : KW_TPL_CHATML, bos_text, "model");
        try_jinja(t, model_text, note, note_cap);
        if (t->jinja || fam >= 0) return 0;
    }
    if (fam >= 0) { set_family(t, fam, bos_text, "model"); return 0; }
    set_family(t, KW_TPL_CHATML, bos_text, "fallback");
    snprintf(note, note_cap, model_text && *model_text
             ? "the model's chat template is not one of the known families; using ChatML (override with --chat-template)"
             : "the model has no chat template; using ChatML (override with --chat-template)");
    return 0;
}

bool kw_chat_role_valid(const char *role) {
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++) if (!strcmp(role, roles[i])) return true;
    return false;
}

static const char *norm_role(const char *r) { return !strcmp(r, "developer") ? "system" : r; }

static void render_chatml(kw_sbuf *b, const kw_chat_msg *m, int n) {
    for (int i = 0; i < n; i++)
        kw_sbuf_printf(b, "<|im_start|>%s\n%s<|im_end|>\n", norm_role(m[i].role), m[i].content);
    kw_sbuf_puts(b, "<|im_start|>assistant\n");
}

static void render_llama3(kw_sbuf *b, const kw_chat_template *t, const kw_chat_msg *m, int n) {
    kw_sbuf_puts(b, t->bos);
    for (int i = 0; i < n; i++) {
        const char *r = norm_role(m[i].role);
        if (!strcmp(r, "tool")) r = "ipython";
        kw_sbuf_printf(b, "<|start_header_id|>%s<|end_header_id|>\n\n%s<|eot_id|>", r, m[i].content);
    }
    kw_sbuf_puts(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Llama 2 and Mistral: [INST] turns; a system prompt goes into the first user turn. */
static void render_inst(kw_sbuf *b, const kw_chat_template *t, const kw_chat_msg *m, int n, bool llama2) {
    const char *sys = NULL;
    bool first_user = true;
    for (int i = 0; i < n; i++) {
        const char *r = norm_role(m[i].role);
        if (!strcmp(r, "system")) { sys = m[i].content; continue; }
        if (!strcmp(r, "assistant")) {
            kw_sbuf_printf(b, " %s%s", m[i].content, llama2 ? " </s>" : "</s>");
            continue;
        }
        /* user and tool turns */
        if (llama2 || first_user) kw_sbuf_puts(b, t->bos);
        kw_sbuf_puts(b, "[INST] ");
        if (first_user && sys) {
            if (llama2) kw_sbuf_printf(b, "<<SYS>>\n%s\n<</SYS>>\n\n", sys);
            else kw_sbuf_printf(b, "%s\n\n", sys);
        }
        kw_sbuf_printf(b, "%s [/INST]", m[i].content);
        first_user = false;
    }
    if (first_user) {                       /* no user turn at all */
        kw_sbuf_puts(b, t->bos);
        if (sys) kw_sbuf_printf(b, llama2 ? "[INST] <<SYS>>\n%s\n<</SYS>>\n\n [/INST]" : "[INST] %s [/INST]", sys);
    }
}

static void render_gemma(kw_sbuf *b, const kw_chat_template *t, const kw_chat_msg *m, int n) {
    kw_sbuf_puts(b, t->bos);
    const char *sys = NULL;
    for (int i = 0; i < n; i++) {
        const char *r = norm_role(m[i].role);
        if (!strcmp(r, "system")) { sys = m[i].content; continue; }
        const char *gr = !strcmp(r, "assistant") ? "model" : "user";
        kw_sbuf_printf(b, "<start_of_turn>%s\n", gr);
        if (sys && !strcmp(gr, "user")) { kw_sbuf_printf(b, "%s\n\n", sys); sys = NULL; }
        kw_sbuf_printf(b, "%s<end_of_turn>\n", m[i].content);
    }
    kw_sbuf_puts(b, "<start_of_turn>model\n");
}

static void render_phi3(kw_sbuf *b, const kw_chat_msg *m, int n) {
    for (int i = 0; i < n; i++)
        kw_sbuf_printf(b, "<|%s|>\n%s<|end|>\n", norm_role(m[i].role), m[i].content);
    kw_sbuf_puts(b, "<|assistant|>\n");
}

/* Members of a message that are null are left out: the OpenAI API lets a
 * client send "name": null or "tool_calls": null where it means "none", and
 * templates test such members with `is defined` (a null would render as
 * "None" or fail). content is kept: kw_template_probe says whether the
 * template renders a null content, else it gets "" (what Qwen3's own
 * template needs: `'</think>' in content` fails on none). */
static void drop_null_members(cJSON *m) {
    cJSON *it = m ? m->child : NULL;
    while (it) {
        cJSON *next = it->next;
        if (cJSON_IsNull(it) && it->string && strcmp(it->string, "content")) cJSON_Delete(cJSON_DetachItemViaPointer(m, it));
        it = next;
    }
}

/* Every string value under node (not the keys) through t->defuse. -1 when out of memory. */
static int defuse_tree(const kw_chat_template *t, cJSON *node) {
    for (cJSON *it = node; it; it = it->next) {
        if (cJSON_IsString(it) && it->valuestring) {
            char *d = NULL;
            size_t dn = 0;
            int rc = t->defuse(t->defuse_ctx, it->valuestring, strlen(it->valuestring), &d, &dn);
            if (rc < 0) return -1;
            if (rc > 0) { free(it->valuestring); it->valuestring = d; }
        }
        if (it->child && defuse_tree(t, it->child) < 0) return -1;
    }
    return 0;
}

/* The Jinja context: the request's messages with text parts joined, the
 * developer role as system, null members shaped as above, tool-call
 * arguments as objects when the template wants them; tools;
 * chat_template_kwargs; BOS/EOS; the generation prompt. */
static cJSON *jinja_context(const kw_chat_template *t, const kw_chat_msg *msgs, int n, const cJSON *request,
                            bool null_content) {
    cJSON *ctx = cJSON_CreateObject(), *out = cJSON_AddArrayToObject(ctx, "messages");
    const cJSON *in = request ? cJSON_GetObjectItemCaseSensitive(request, "messages") : NULL;
    const cJSON *src = in ? in->child : NULL;     /* walked alongside msgs: linear in the messages */
    for (int i = 0; i < n; i++, src = src ? src->next : NULL) {
        cJSON *m = src ? cJSON_Duplicate(src, 1) : cJSON_CreateObject();
        cJSON_DeleteItemFromObjectCaseSensitive(m, "role");
        cJSON_DeleteItemFromObjectCaseSensitive(m, "content");
        drop_null_members(m);
        cJSON_AddStringToObject(m, "role", !strcmp(msgs[i].role, "developer") ? "system" : msgs[i].role);
        bool is_null = src && cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(src, "content")) && !*msgs[i].content;
        if (is_null && null_content) cJSON_AddNullToObject(m, "content");
        else cJSON_AddStringToObject(m, "content", msgs[i].content);
        cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), *call;
        if (t->object_arguments && cJSON_IsArray(calls)) {
            cJSON_ArrayForEach(call, calls) {
                cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
                cJSON *args = fn ? cJSON_GetObjectItemCaseSensitive(fn, "arguments") : NULL;
                if (!cJSON_IsString(args)) continue;
                cJSON *obj = cJSON_Parse(args->valuestring);
                if (obj) cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", obj);
            }
        }
        cJSON_AddItemToArray(out, m);
    }
    const cJSON *tools = request ? cJSON_GetObjectItemCaseSensitive(request, "tools") : NULL;
    if (cJSON_IsArray(tools) && cJSON_GetArraySize(tools) > 0) cJSON_AddItemToObject(ctx, "tools", cJSON_Duplicate(tools, 1));
    const cJSON *kw = request ? cJSON_GetObjectItemCaseSensitive(request, "chat_template_kwargs") : NULL, *it;
    if (cJSON_IsObject(kw))
        cJSON_ArrayForEach(it, kw)
            if (it->string && strcmp(it->string, "messages") && strcmp(it->string, "tools"))
                cJSON_AddItemToObject(ctx, it->string, cJSON_Duplicate(it, 1));
    if (t->defuse && defuse_tree(t, ctx->child) < 0) { cJSON_Delete(ctx); return NULL; }
    cJSON_AddBoolToObject(ctx, "add_generation_prompt", true);
    cJSON_AddStringToObject(ctx, "bos_token", t->bos_token);
    cJSON_AddStringToObject(ctx, "eos_token", t->eos_token);
    return ctx;
}

/* Does the request carry tools, tool calls or tool results (what a
 * fallback must not lose)? */
static bool has_tool_parts(const kw_chat_msg *msgs, int n, const cJSON *request) {
    const cJSON *tools = request ? cJSON_GetObjectItemCaseSensitive(request, "tools") : NULL;
    if (cJSON_IsArray(tools) && cJSON_GetArraySize(tools) > 0) return true;
    const cJSON *in = request ? cJSON_GetObjectItemCaseSensitive(request, "messages") : NULL;
    const cJSON *src = in ? in->child : NULL;
    for (int i = 0; i < n; i++, src = src ? src->next : NULL) {
        if (!strcmp(msgs[i].role, "tool")) return true;
        const cJSON *calls = cJSON_GetObjectItemCaseSensitive(src, "tool_calls");
        if (cJSON_IsArray(calls) && cJSON_GetArraySize(calls) > 0) return true;
    }
    return false;
}

/* Renders a parsed template over the request; NULL + err (its message) on failure. */
static char *render_jinja(const kw_chat_template *t, const kw_template *tpl, const kw_chat_msg *msgs, int n,
                          const cJSON *request, bool null_content, kw_err *err) {
    cJSON *ctx = jinja_context(t, msgs, n, request, null_content);
    char *text = NULL;
    int rc = ctx ? kw_template_render(tpl, ctx, &text, err) : kw_err_set(err, "out of memory");
    cJSON_Delete(ctx);
    if (rc != 0) return NULL;
    char *copy = strdup(text);
    kw_template_output_free(text);
    if (!copy) kw_err_set(err, "out of memory rendering the chat template");
    return copy;
}

/* The messages with their content through t->defuse (a copy only where it
 * changed); NULL when out of memory. free_msgs releases it. */
static void free_msgs(kw_chat_msg *own, const kw_chat_msg *orig, int n);

static kw_chat_msg *defuse_msgs(const kw_chat_template *t, const kw_chat_msg *msgs, int n) {
    kw_chat_msg *own = malloc(sizeof *own * (size_t)(n > 0 ? n : 1));
    if (!own) return NULL;
    memcpy(own, msgs, sizeof *own * (size_t)n);
    for (int i = 0; i < n; i++) {
        char *d = NULL;
        size_t dn = 0;
        int rc = t->defuse(t->defuse_ctx, msgs[i].content, strlen(msgs[i].content), &d, &dn);
        if (rc < 0) { free_msgs(own, msgs, i); return NULL; }
        if (rc > 0) own[i].content = d;
    }
    return own;
}

static void free_msgs(kw_chat_msg *own, const kw_chat_msg *orig, int n) {
    if (!own) return;
    for (int i = 0; i < n; i++)
        if (own[i].content != orig[i].content) free((char *)own[i].content);
    free(own);
}

char *kw_chat_apply(const kw_chat_template *t, const kw_chat_msg *msgs, int n, const cJSON *request, kw_err *err) {
    kw_sbuf b = {0};
    for (int i = 0; i < n; i++)
        if (!kw_chat_role_valid(msgs[i].role)) { kw_err_set(err, "unknown role '%s'", msgs[i].role); return NULL; }
    bool tool_parts = has_tool_parts(msgs, n, request);
    if (t->jinja) {
        kw_err e = {{0}};
        char *text = render_jinja(t, t->jinja, msgs, n, request, t->null_content, &e);
        if (text || strstr(e.msg, "out of memory")) {
            if (!text) kw_err_set(err, "%s", e.msg);
            return text;
        }
        /* The template refused (raise_exception) or failed. A built-in format
         * that keeps everything the request carries takes over (logged);
         * otherwise the request fails naming the template's error. */
        const char *msg = e.msg[0] ? e.msg : "render failed";
        if (tool_parts && !(t->family == KW_TPL_CHATML && t->hermes)) {
            kw_err_set(err, "chat template: %s (the built-in %s format cannot render tools and tool calls, "
                       "so the request is not rendered without them)", msg, kw_tpl_family_name(t->family));
            return NULL;
        }
        fprintf(stderr, "chat template: %s; using the built-in %s format for this request\n", msg,
                tool_parts ? "Hermes/Qwen tool" : kw_tpl_family_name(t->family));
    } else if (tool_parts && t->family != KW_TPL_CHATML) {
        kw_err_set(err, "chat template: the built-in %s format cannot render tools and tool calls; serve a template "
                   "that does (the model's own, or --chat-template FILE)", kw_tpl_family_name(t->family));
        return NULL;
    }
    if (t->family == KW_TPL_CHATML && t->hermes) {
        kw_err e = {{0}};
        char *text = render_jinja(t, t->hermes, msgs, n, request, false, &e);
        if (!text) kw_err_set(err, "%s", strstr(e.msg, "out of memory") ? e.msg : "chat template: the built-in Hermes format failed");
        return text;
    }
    kw_chat_msg *own = t->defuse ? defuse_msgs(t, msgs, n) : NULL;
    if (t->defuse && !own) { kw_err_set(err, "out of memory rendering the chat template"); return NULL; }
    const kw_chat_msg *orig = msgs;
    if (own) msgs = own;
    switch (t->family) {
    case KW_TPL_LLAMA3: render_llama3(&b, t, msgs, n); break;
    case KW_TPL_LLAMA2: render_inst(&b, t, msgs, n, true); break;
    case KW_TPL_MISTRAL: render_inst(&b, t, msgs, n, false); break;
    case KW_TPL_GEMMA: render_gemma(&b, t, msgs, n); break;
    case KW_TPL_PHI3: render_phi3(&b, msgs, n); break;
    default: render_chatml(&b, msgs, n); break;
    }
    free_msgs(own, orig, n);
    if (b.oom) { kw_sbuf_free(&b); kw_err_set(err, "out of memory rendering the chat template"); return NULL; }
    return kw_sbuf_take(&b);
}
