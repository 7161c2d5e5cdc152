/* chat_template.c - built-in chat template families (ChatML/Qwen, Llama 3,
 * Llama 2, Mistral, Gemma, Phi-3): recognition from the model's
 * tokenizer.chat_template text, the --chat-template override, and
 * rendering (kw_chat_apply, the one entry point a Jinja interpreter can
 * take over). Owns chat_template.h. */
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
}

void kw_chat_template_free(kw_chat_template *t) {
    if (t && t->jinja) kw_template_free(t->jinja);
    if (t) t->jinja = NULL;
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
        if (!t->jinja && fam < 0) return kw_err_set(err, "--chat-template file '%s': %s", override, note);
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

/* The Jinja context: the request's messages with text parts joined, the
 * developer role as system, tool-call arguments as objects when the template
 * wants them; tools; chat_template_kwargs; BOS/EOS; the generation prompt. */
static cJSON *jinja_context(const kw_chat_template *t, const kw_chat_msg *msgs, int n, const cJSON *request) {
    cJSON *ctx = cJSON_CreateObject(), *out = cJSON_AddArrayToObject(ctx, "messages");
    const cJSON *in = request ? cJSON_GetObjectItemCaseSensitive(request, "messages") : NULL;
    for (int i = 0; i < n; i++) {
        const cJSON *src = in ? cJSON_GetArrayItem(in, i) : NULL;
        cJSON *m = src ? cJSON_Duplicate(src, 1) : cJSON_CreateObject();
        cJSON_DeleteItemFromObjectCaseSensitive(m, "role");
        cJSON_DeleteItemFromObjectCaseSensitive(m, "content");
        cJSON_AddStringToObject(m, "role", !strcmp(msgs[i].role, "developer") ? "system" : msgs[i].role);
        bool null_content = src && cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(src, "content")) && !*msgs[i].content;
        if (null_content) cJSON_AddNullToObject(m, "content");
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
    cJSON_AddBoolToObject(ctx, "add_generation_prompt", true);
    cJSON_AddStringToObject(ctx, "bos_token", t->bos_token);
    cJSON_AddStringToObject(ctx, "eos_token", t->eos_token);
    return ctx;
}

char *kw_chat_apply(const kw_chat_template *t, const kw_chat_msg *msgs, int n, const cJSON *request, kw_err *err) {
    kw_sbuf b = {0};
    for (int i = 0; i < n; i++)
        if (!kw_chat_role_valid(msgs[i].role)) { kw_err_set(err, "unknown role '%s'", msgs[i].role); return NULL; }
    if (t->jinja) {
        cJSON *ctx = jinja_context(t, msgs, n, request);
        char *text = NULL;
        kw_err e = {{0}};
        int rc = ctx ? kw_template_render(t->jinja, ctx, &text, &e) : -1;
        cJSON_Delete(ctx);
        if (rc == 0) {
            char *copy = strdup(text);
            kw_template_output_free(text);
            if (!copy) kw_err_set(err, "out of memory rendering the chat template");
            return copy;
        }
        /* the template refused (raise_exception) or failed: say so, render the family format */
        fprintf(stderr, "chat template: %s; using the built-in %s format for this request\n",
                e.msg[0] ? e.msg : "render failed", kw_tpl_family_name(t->family));
    }
    switch (t->family) {
    case KW_TPL_LLAMA3: render_llama3(&b, t, msgs, n); break;
    case KW_TPL_LLAMA2: render_inst(&b, t, msgs, n, true); break;
    case KW_TPL_MISTRAL: render_inst(&b, t, msgs, n, false); break;
    case KW_TPL_GEMMA: render_gemma(&b, t, msgs, n); break;
    case KW_TPL_PHI3: render_phi3(&b, msgs, n); break;
    default: render_chatml(&b, msgs, n); break;
    }
    if (b.oom) { kw_sbuf_free(&b); kw_err_set(err, "out of memory rendering the chat template"); return NULL; }
    return kw_sbuf_take(&b);
}
