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

typedef struct kw_chat_template {
    kw_tpl_family family;
    char source[64];        /* "model", "fallback", "--chat-template NAME", "FILE path" */
    char bos[32];           /* BOS text the family writes at the start ("" = none) */
} kw_chat_template;

typedef struct kw_chat_msg { const char *role; const char *content; } kw_chat_msg;

const char *kw_tpl_family_name(kw_tpl_family f);
/* NAME -> family; -1 if unknown. Names: chatml, qwen, llama3, llama2, mistral, gemma, phi3. */
int kw_tpl_family_from_name(const char *name);
/* Family from template text; -1 if it matches none. */
int kw_tpl_detect(const char *text);

/* Chooses the template: override (a name or a file holding template text)
 * wins, then the model's text, then ChatML (note says why). */
int kw_chat_template_choose(kw_chat_template *t, const char *override, const char *model_text,
                            const char *bos_text, char *note, size_t note_cap, kw_err *err);

/* true if role is one the templates know (system, developer, user, assistant, tool). */
bool kw_chat_role_valid(const char *role);

/* Renders messages + the assistant generation prompt. Returns malloc'd text or NULL (err). */
char *kw_chat_apply(const kw_chat_template *t, const kw_chat_msg *msgs, int n, kw_err *err);

#endif
