/* chat_template.h - turning chat messages into the prompt text a model
 * expects (server-internal). Built-in families are recognised from the
 * model's tokenizer.chat_template text; --chat-template NAME|FILE
 * overrides. Everything goes through kw_chat_apply() so that the Jinja
 * interpreter (src/template/) can replace the body of that one function. */
#ifndef KW_SERVER_CHAT_TEMPLATE_H
#define KW_SERVER_CHAT_TEMPLATE_H
#include "kvwise/common.h"

typedef enum kw_tpl_family {
    KW_TPL_CHATML = 0, KW_TPL_LLAMA3, KW_TPL_LLAMA2, KW_TPL_MISTRAL, KW_TPL_GEMMA, KW_TPL_PHI3,
    KW_TPL_COUNT
} kw_tpl_family;

struct kw_template;

typedef struct kw_chat_template {
    kw_tpl_family family;   /* the built-in family (used when jinja is NULL or fails) */
    char source[64];        /* "model", "fallback", "--chat-template NAME", "FILE path" */
    char bos[32];           /* BOS text the family writes at the start ("" = none) */
    struct kw_template *jinja;  /* the model's (or FILE's) own template, rendered as written */
    bool object_arguments;  /* it wants tool-call arguments as objects (kw_template_probe) */
    bool null_content;      /* it renders content null (else null reaches it as "", kw_template_probe) */
    struct kw_template *hermes; /* ChatML family: the built-in Hermes/Qwen tool format (chat_template.c) */
    char bos_token[64], eos_token[64];  /* the vocab's, for the Jinja context */
    /* Marks control-token text inside the request's strings (the engine's
     * defuse, engine.h) so that the rendered prompt, tokenized with
     * KW_SPECIAL_TEMPLATE, has control tokens only where the template wrote
     * them. NULL: strings go in as they are. */
    int (*defuse)(void *ctx, const char *s, size_t len, char **out, size_t *out_len);
    void *defuse_ctx;
} kw_chat_template;

typedef struct kw_chat_msg { const char *role; const char *content; } kw_chat_msg;

const char *kw_tpl_family_name(kw_tpl_family f);
/* NAME -> family; -1 if unknown. Names: chatml, qwen, llama3, llama2, mistral, gemma, phi3. */
int kw_tpl_family_from_name(const char *name);
/* Family from template text; -1 if it matches none. */
int kw_tpl_detect(const char *text);

/* Chooses the template: override (a family name, or a file holding template
 * text) wins, then the model's text, then ChatML (note says why). What it
 * holds (parsed templates) is released by kw_chat_template_free; on an
 * error nothing is held. Template
 * text is parsed as Jinja (src/template/) and rendered as written; the
 * family recognised in it is the fallback when it does not parse or a render
 * fails. */
int kw_chat_template_choose(kw_chat_template *t, const char *override, const char *model_text,
                            const char *bos_text, char *note, size_t note_cap, kw_err *err);
/* Same, with the vocab's EOS text for the Jinja context. */
int kw_chat_template_choose2(kw_chat_template *t, const char *override, const char *model_text,
                             const char *bos_text, const char *eos_text, char *note, size_t note_cap, kw_err *err);
void kw_chat_template_free(kw_chat_template *t);
/* "jinja (model), fallback chatml" or "chatml (model)" */
void kw_chat_template_describe(const kw_chat_template *t, char *buf, size_t cap);

/* true if role is one the templates know (system, developer, user, assistant, tool). */
bool kw_chat_role_valid(const char *role);

/* Renders messages + the assistant generation prompt. request (may be NULL)
 * is the whole chat request: with a Jinja template its messages (text parts
 * joined, tool calls, tool results), tools and chat_template_kwargs go into
 * the template context, with fields the OpenAI API lets be null in the form
 * templates expect (a null member is left out; null content becomes "" for
 * a template that cannot render null). A template that fails is never
 * replaced by a format that loses part of the request: a request without
 * tools, tool calls or tool results is rendered in the built-in family
 * format (logged); one with them in the built-in Hermes/Qwen tool format for
 * a ChatML model, and for other families it fails with "chat template: ..."
 * naming the template's error (line and column). Every string the request
 * brings (content, tool calls, tools, chat_template_kwargs) goes in through
 * t->defuse when set: a message cannot write the template's control tokens.
 * Returns malloc'd text or NULL (err). */
struct cJSON;
char *kw_chat_apply(const kw_chat_template *t, const kw_chat_msg *msgs, int n, const struct cJSON *request, kw_err *err);

#endif
