/* serve_testctl.c - the test-only flags of `kvwise serve` (serve_testctl.h):
 * parsing them, their --help lines, the stub engine they start
 * (tests/lib/engine_stub.h), the fault rules and replay settings they give
 * the test hooks (testctl.h). Compiled only with KW_TESTCTL. */
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "engine_stub.h"
#include "kvwise/testctl.h"
#include "serve_testctl.h"

/* The value of flag argv[*i] (then *i moves past it), or NULL with a message. */
static const char *value_of(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) { fprintf(stderr, "kvwise serve: %s needs a value\n", argv[*i]); return NULL; }
    return argv[++*i];
}

int serve_test_parse(int argc, char **argv, int *i, serve_test_opts *t) {
    const char *a = argv[*i];
    if (!strcmp(a, "--test-replay")) { t->replay = true; return 1; }
    if (!strcmp(a, "--test-replay-script")) {
        if (!(t->replay_script = value_of(argc, argv, i))) return -1;
        t->replay = true;
        return 1;
    }
    if (!strcmp(a, "--test-fail-alloc")) return (t->fail_alloc = value_of(argc, argv, i)) ? 1 : -1;
    if (!strcmp(a, "--stub-engine")) { t->stub = true; return 1; }
    if (!strcmp(a, "--stub-kv")) { t->stub_kv = true; return 1; }
    if (!strcmp(a, "--stub-step-us")) {
        const char *v = value_of(argc, argv, i);
        if (!v) return -1;
        char *end;
        long x = strtol(v, &end, 10);
        if (*end || x < 0 || x > 10000000) {
            fprintf(stderr, "kvwise serve: --stub-step-us needs an integer in [0, 10000000]\n");
            return -1;
        }
        t->stub_step_us = (int)x;
        return 1;
    }
    return 0;
}

void serve_test_usage(FILE *f) {
    fprintf(f,
        "test hooks (this build has them; a production build has none of these flags):\n"
        "  --test-replay            TESTS ONLY: a request's \"test_replay\" text is emitted as the model's output\n"
        "  --test-fail-alloc SPEC   TESTS ONLY (loopback only): make chosen allocations fail on purpose, e.g.\n"
        "                           kv_block=%%5 (every 5th KV block); see include/kvwise/testctl.h\n"
        "  --test-replay-script FILE  TESTS ONLY: outputs chosen per chat request by the rules in FILE (docs/SERVER.md)\n"
        "  --stub-engine            TESTS ONLY: a deterministic stub instead of a model (no -m)\n"
        "  --stub-kv                TESTS ONLY: the stub keeps real KV memory (pool, prompt cache, admission)\n"
        "  --stub-step-us N         TESTS ONLY: simulated cost of one stub forward call in microseconds\n");
}

kw_engine *serve_test_engine(const serve_test_opts *t, const serve_test_engine_opts *o, kw_err *err) {
    kw_engine *e = kw_engine_stub_create(o->n_ctx, o->n_slots, o->max_batch, t->stub_step_us);
    if (!e) { kw_err_set(err, "stub engine: out of memory"); return NULL; }
    kw_engine_stub_kv_opts ko = {.kv_blocks = o->kv_blocks, .block_tokens = o->block_tokens,
                                 .cache_max_seqs = o->cache_max_seqs, .cache_max_bytes = o->cache_max_bytes,
                                 .ledger = o->ledger, .log_interval_s = 10};
    if (t->stub_kv && kw_engine_stub_enable_kv(e, &ko, err) < 0) { e->destroy(e); return NULL; }
    return e;
}

/* --test-fail-alloc: a test hook, never a setting. Refused off loopback;
 * loud on stderr. Rules marked @start count from here (model load included). */
int serve_test_start(const serve_test_opts *t, const char *host, bool loopback, kw_err *err) {
    if (t->fail_alloc) {
        if (!loopback)
            return kw_err_set(err, "--test-fail-alloc is a test hook: refused when listening on %s (loopback only)", host);
        if (kw_fault_configure(t->fail_alloc, err) < 0) return -1;
        fprintf(stderr, "kvwise serve: WARNING: --test-fail-alloc %s: TEST-ONLY fault injection, allocations will fail "
                "on purpose (never use this outside tests)\n", t->fail_alloc);
    }
    kw_testctl_set_replay(t->replay, t->replay_script);
    return 0;
}

void serve_test_ready(const serve_test_opts *t) {
    (void)t;
    kw_fault_arm();
}

void serve_test_config(const serve_test_opts *t, cJSON *c) {
    if (t->fail_alloc) cJSON_AddStringToObject(c, "test_fail_alloc", t->fail_alloc);
}
