/* serve_opts.h - the settings of `kvwise serve`: one table of options
 * (flag name, /v1/config key, kind, range, whether SIGHUP applies it
 * live), read from the command line and from --config FILE with the same
 * names and units. A flag on the command line wins over the file, the file
 * over the default; every setting remembers where its value came from, and
 * GET /v1/config shows it ("sources"). On SIGHUP the file is read again
 * and compared with what runs: what can change live is applied, what needs a
 * restart is reported (docs/SERVICE.md). */
#ifndef KW_CLI_SERVE_OPTS_H
#define KW_CLI_SERVE_OPTS_H
#include <stdio.h>
#include "kvwise/common.h"
#include "kvwise/conf.h"
#ifdef KW_TESTCTL
#include "serve_testctl.h"
#endif

typedef enum { SERVE_SRC_DEFAULT = 0, SERVE_SRC_CONFIG, SERVE_SRC_FLAG } serve_src;

typedef struct serve_opts {
    const char *model, *host, *api_key, *origins, *chat_template, *alias, *kv_type;
    const char *experts;        /* mixture of experts: first-use, load or mapped (kw_experts_mode) */
    const char *allowed_hosts;  /* Host names allowed without --api-key besides the built-in ones */
    int header_timeout_s, body_timeout_s;
    int port, ctx_size, decode_conc, prompt_conc, prefill_step, kv_blocks, kv_block_tokens;
    int timeout_s, http_threads, max_queue, threads;
    int max_client_conns;       /* -1 = default: unlimited on loopback, 64 elsewhere */
    int max_conns;              /* open HTTP connections in all (a ledger line) */
    uint64_t max_body;
    uint64_t request_memory;    /* per HTTP thread: the JSON tree, template and tokenizer work of a request */
    bool mlock, quiet_progress;
    /* memory (docs/MEMORY.md) */
    uint64_t memory_limit;      /* 0 = default: MemAvailable at start minus a reserve */
    uint64_t cache_bytes;       /* UINT64_MAX = default: the plan's (kw_plan_serve_sizing) */
    int cache_size;
    int checkpoint_interval;    /* hybrid models: --checkpoint-interval */
    double queue_timeout;
    const char *config_path;    /* --config FILE (command line only) */
#ifdef KW_TESTCTL
    serve_test_opts test;       /* the test hooks' flags (serve_testctl.h; command line only) */
#endif
} serve_opts;

/* One option of the table. */
typedef struct serve_opt_desc {
    const char *name;           /* the long flag without "--": also its key in a config file */
    const char *alt;            /* another spelling on the command line ("-m"), or NULL */
    const char *key;            /* its key in GET /v1/config */
    bool live;                  /* SIGHUP applies a new value without a restart */
} serve_opt_desc;

int serve_opt_count(void);
const serve_opt_desc *serve_opt_at(int i);

/* Every setting's value and source. */
typedef struct serve_settings {
    serve_opts o;
    serve_src src[64];          /* by option index */
} serve_settings;

/* Defaults, then the file (when conf is given), then argv's flags. Prints
 * one message naming the flag (or FILE:LINE) and returns -1 on a bad value
 * or an unknown name. argv's --config is read by serve_config_path. */
int serve_settings_parse(int argc, char **argv, const kw_conf *conf, serve_settings *s);
/* The --config FILE of argv (NULL if none; "" when it lacks its value). */
const char *serve_config_path(int argc, char **argv);

/* Option i's value as text ("4 GiB (4294967296)", "30 s", "true"). */
const char *serve_opt_value(const serve_opts *o, int i, char *buf, size_t cap);
/* Do a and b differ in option i? */
bool serve_opt_differs(const serve_opts *a, const serve_opts *b, int i);
/* Copies option i's value from b into a. */
void serve_opt_copy(serve_opts *a, const serve_opts *b, int i);
const char *serve_src_name(serve_src s);    /* "default", "config", "flag" */

#endif
