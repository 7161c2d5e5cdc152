/* serve_testctl.c - the test-only flags of `kvwise serve` (serve_testctl.h):
 * parsing them, their --help lines, and the stub engine they start
 * (tests/lib/engine_stub.h). Compiled only with KW_TESTCTL. */
#include <stdlib.h>
#include <string.h>
#include "engine_stub.h"
#include "serve_testctl.h"

int serve_test_parse(int argc, char **argv, int *i, serve_test_opts *t) {
    const char *a = argv[*i];
    if (!strcmp(a, "--stub-engine")) { t->stub = true; return 1; }
    if (!strcmp(a, "--stub-kv")) { t->stub_kv = true; return 1; }
    if (!strcmp(a, "--stub-step-us")) {
        const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
        char *end;
        long x = v ? strtol(v, &end, 10) : -1;
        if (!v || *end || x < 0 || x > 10000000) {
            fprintf(stderr, "kvwise serve: --stub-step-us needs an integer in [0, 10000000]\n");
            return -1;
        }
        t->stub_step_us = (int)x;
        (*i)++;
        return 1;
    }
    return 0;
}

void serve_test_usage(FILE *f) {
    fprintf(f,
        "test hooks (this build has them; a production build has none of these flags):\n"
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
