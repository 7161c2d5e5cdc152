/* kvwise/template.h - chat templates: a Jinja2-subset interpreter.
 *
 * Renders a model's `tokenizer.chat_template` (Hugging Face convention) as
 * written. The dialect is the one Hugging Face's reference renderers use:
 * trim_blocks and lstrip_blocks on, one trailing newline of the template
 * dropped, and value semantics of the npm package @huggingface/jinja (the
 * conformance reference: booleans print as `true`, none/undefined print as
 * nothing, tojson matches Python json.dumps with ensure_ascii=False and key
 * order preserved). docs/TEMPLATES.md lists the supported statements,
 * expressions, filters, tests and methods, and where kvwise differs.
 *
 * Usage:
 *   kw_template *t = kw_template_parse(src, &err);     // NULL + err on syntax error
 *   cJSON *ctx = ...;  // {"messages":[...], "tools":[...], "add_generation_prompt":true,
 *                      //  "bos_token":"<s>", "enable_thinking":false, ...}
 *   char *text; size_t len;
 *   if (kw_template_render(t, ctx, &text, &err) == 0) { ...; kw_template_output_free(text); }
 *   kw_template_free(t);
 *
 * Every top-level member of the context object becomes a template variable.
 * JSON numbers with an integral value are integers, others floats.
 * Errors are one line and name the template position: "line 12, col 5: ...".
 * `raise_exception("msg")` in a template fails the render with that message.
 *
 * Abuse limits (kw_template_limits): a render can neither hang nor exhaust
 * memory: it stops with an error after max_steps evaluation steps, when its
 * working memory passes max_memory_bytes, when the output passes
 * max_output_bytes, or when nesting (macro recursion, expression depth)
 * passes max_depth. A parsed template is immutable and may be rendered from
 * several threads at once. */
#ifndef KVWISE_TEMPLATE_H
#define KVWISE_TEMPLATE_H
#include "kvwise/common.h"
#include <cjson/cJSON.h>

typedef struct kw_template kw_template;

typedef struct kw_template_limits {
    size_t max_output_bytes;   /* default 16 MiB */
    size_t max_memory_bytes;   /* working memory of one render, default 256 MiB */
    uint64_t max_steps;        /* evaluation steps (nodes, loop turns, calls), default 20M */
    int max_depth;             /* nested calls / evaluation depth, default 200 */
} kw_template_limits;

/* The defaults listed above. */
kw_template_limits kw_template_default_limits(void);

/* Parses template text (NUL-terminated, UTF-8). Returns NULL and fills err
 * ("line L, col C: ...") on a syntax error or when memory runs out. */
kw_template *kw_template_parse(const char *src, kw_err *err);
/* Same with an explicit length (src need not be NUL-terminated). */
kw_template *kw_template_parse_n(const char *src, size_t len, kw_err *err);
void kw_template_free(kw_template *t);

/* Renders with the default limits. context must be a JSON object or NULL.
 * On success *out is a NUL-terminated string owned by the caller, freed with
 * kw_template_output_free() (it comes from the accounted allocator). */
int kw_template_render(const kw_template *t, const cJSON *context, char **out, kw_err *err);
/* Same with explicit limits (NULL = defaults); out_len may be NULL. */
int kw_template_render_ex(const kw_template *t, const cJSON *context,
                          const kw_template_limits *limits,
                          char **out, size_t *out_len, kw_err *err);
void kw_template_output_free(char *out);

/* What a template does with the parts of an OpenAI chat request, found by
 * rendering small probe conversations (kw_template_probe). A server uses it
 * to shape the context: e.g. tool-call `arguments` arrive as a JSON string
 * in OpenAI requests, but most templates (Qwen, Llama 3.1) must be given an
 * object (they tojson it), while some (DeepSeek-R1) concatenate a string. */
typedef struct kw_template_caps {
    bool system_role;        /* a system message's text appears in the prompt */
    bool tools;              /* the `tools` list appears */
    bool tool_calls;         /* an assistant message's tool_calls appear */
    bool object_arguments;   /* ...when their arguments are a JSON object (else pass the string) */
    bool tool_results;       /* a role "tool" message's content appears */
    bool reasoning_content;  /* an assistant `reasoning_content` appears */
    bool enable_thinking;    /* enable_thinking=false changes the generation prompt */
    bool null_content;       /* an assistant turn with tool_calls and content null renders (the
                                OpenAI API sends null there; Qwen3's template fails on it) */
} kw_template_caps;

/* Fills caps (all false on any failure). Costs a handful of small renders. */
void kw_template_probe(const kw_template *t, kw_template_caps *caps);

#endif
