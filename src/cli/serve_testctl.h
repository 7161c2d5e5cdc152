/* serve_testctl.h - the test-only part of `kvwise serve`, compiled only in
 * builds with the test hooks (CMake option KW_TESTCTL, testctl.h): the flags
 * that run the stub engine instead of a model (--stub-engine, --stub-kv,
 * --stub-step-us), script the model's output (--test-replay,
 * --test-replay-script) and make allocations fail on purpose
 * (--test-fail-alloc). A build without KW_TESTCTL has none of them: they are
 * not in `serve --help` and are refused as unknown options. */
#ifndef KW_CLI_SERVE_TESTCTL_H
#define KW_CLI_SERVE_TESTCTL_H
#include <stdio.h>
#include "kvwise/engine.h"

struct cJSON;
struct kw_ledger;

typedef struct serve_test_opts {
    bool stub;                  /* --stub-engine: the deterministic stub instead of a model */
    bool stub_kv;               /* --stub-kv: the stub keeps real KV memory */
    int stub_step_us;           /* --stub-step-us N: simulated cost of a forward call */
    bool replay;                /* --test-replay: a request's "test_replay" text is the model's output */
    const char *replay_script;  /* --test-replay-script FILE: outputs per chat request by rules (implies --test-replay) */
    const char *fail_alloc;     /* --test-fail-alloc SPEC: allocations made to fail (testctl.h) */
} serve_test_opts;

/* Takes argv[*i] when it is a test flag (then *i moves past its value):
 * 1 taken, 0 not a test flag, -1 bad value (a message was printed). */
int serve_test_parse(int argc, char **argv, int *i, serve_test_opts *t);
/* The test flags' lines of `serve --help`. */
void serve_test_usage(FILE *f);
/* Before anything is allocated: the fault rules (refused off loopback, with
 * a WARNING on stderr) and the replay settings. -1 + err. */
int serve_test_start(const serve_test_opts *t, const char *host, bool loopback, kw_err *err);
/* Once the server is ready: fault rules without @start start counting. */
void serve_test_ready(const serve_test_opts *t);
/* The test hooks in force, in the effective settings (GET /v1/config). */
void serve_test_config(const serve_test_opts *t, struct cJSON *c);

/* The stub engine's settings besides serve_test_opts: the context and
 * slots, and, with --stub-kv, its KV pool and prompt-cache caps (the
 * plan's, as for a model: kw_plan_serve_sizing). */
typedef struct serve_test_engine_opts {
    int32_t n_ctx, n_slots, max_batch;
    int32_t kv_blocks, block_tokens;    /* --stub-kv: the pool and its block size */
    int32_t cache_max_seqs;
    uint64_t cache_max_bytes;
    struct kw_ledger *ledger;
} serve_test_engine_opts;
kw_engine *serve_test_engine(const serve_test_opts *t, const serve_test_engine_opts *o, kw_err *err);

#endif
