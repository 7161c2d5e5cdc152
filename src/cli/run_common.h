/* run_common.h - option parsing and setup shared by the commands that run
 * the model (generate, logits, perplexity): -m/-p/-f/-t/--ctx/--kv-type,
 * loading the model, reading a prompt, tokenizing it, timing. */
#ifndef KW_CLI_RUN_COMMON_H
#define KW_CLI_RUN_COMMON_H
#include "kvwise/model.h"
#include <stdio.h>

typedef struct kw_run_opts {
    const char *cmd;            /* "generate" (for messages) */
    const char *model;          /* -m */
    const char *prompt;         /* -p */
    const char *file;           /* -f */
    int threads;                /* -t (0 = physical cores) */
    int32_t ctx;                /* --ctx (0 = default) */
    int32_t batch;              /* --batch */
    uint32_t kv_type;           /* --kv-type */
    bool no_bos;                /* --no-bos */
} kw_run_opts;

/* Parses one common option at argv[*i] (advancing *i past its value).
 * Returns 1 if consumed, 0 if not a common option, -1 on a bad value
 * (message printed). */
int kw_run_parse_common(kw_run_opts *o, int argc, char **argv, int *i);
/* One argument of a model-running command, argv[*i]: -h/--help (usage
 * printed to stdout), a common option (consumed as kw_run_parse_common
 * does), a bad common value (message printed) or the command's own. */
typedef enum { KW_RUN_ARG_OWN, KW_RUN_ARG_TAKEN, KW_RUN_ARG_HELP, KW_RUN_ARG_BAD } kw_run_arg_kind;
kw_run_arg_kind kw_run_arg(kw_run_opts *o, int argc, char **argv, int *i, void (*usage)(FILE *));
/* Text of the common options for --help. */
const char *kw_run_common_help(void);

/* Parses a strictly numeric value; prints "kvwise CMD: OPT needs ..." on error. */
int kw_run_int(const kw_run_opts *o, const char *opt, const char *s, long lo, long hi, long *out);
int kw_run_float(const kw_run_opts *o, const char *opt, const char *s, double lo, double hi, double *out);

/* Loads the model (printing the error); *ms gets the load time. */
kw_model *kw_run_load(const kw_run_opts *o, double *ms);
/* Whole file, NUL-terminated (len excludes the NUL); NULL if it cannot be read. */
char *kw_run_read_file(const char *path, size_t *len);
/* A prompt and its tokens: text (len bytes, NUL-terminated) and ids (n);
 * text stays NULL when the ids were given directly. */
typedef struct kw_run_prompt { char *text; size_t len; int32_t *ids; size_t n; } kw_run_prompt;
/* Reads the prompt (-p as given, or the bytes of -f) and tokenizes it (BOS
 * as the vocab says unless --no-bos): 0, or -1 with the message printed. */
int kw_run_prompt_read(const kw_run_opts *o, const kw_model *m, kw_run_prompt *p);
void kw_run_prompt_free(kw_run_prompt *p);
/* The end of a command's run: frees its session and prompt, returns rc. */
int kw_run_end(kw_session *s, kw_run_prompt *p, int rc);
kw_session *kw_run_session(const kw_run_opts *o, const kw_model *m, int32_t default_ctx);
double kw_run_now_ms(void);

#endif
