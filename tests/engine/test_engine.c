/* test_engine.c - the engine's typed boundary (engine.h) over the real
 * model engine: a tiny random-weight model written here with mkmodel, an
 * engine with a small KV pool and a prompt cache, and what a front-end may
 * ask of it: the positions one sequence can hold, whether a request could
 * ever fit, the cache caps in force, the cached prefix of a prompt after a
 * sequence was kept, the /v1/memory objects and the /metrics text. Also an
 * engine without KV memory (the test stub): everything fits, no cache, no
 * figures. */
#include "testutil.h"
#include "engine_stub.h"
#include "kvwise/engine.h"
#include "kvwise/ledger.h"
#include "kvwise/memory.h"
#include "mkmodel/mkmodel.h"
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#define CTX 128
#define BLOCK 32
#define BLOCKS 10   /* 320 positions: more than one sequence's context */

/* kvwise mkmodel --preset PRESET --type q8_0 --seed SEED into the test's temp dir (shape in *s). */
static const char *write_model(const char *preset, uint64_t seed, char *path, size_t cap, kw_mk_shape *s) {
    snprintf(path, cap, "%s/%s.gguf", kw_test_tmpdir(), preset);
    kw_err e = {{0}};
    KW_CHECK_MSG(kw_mk_preset(preset, s, &e) == 0, "%s", e.msg);
    KW_CHECK_MSG(kw_mk_write(s, KW_TYPE_Q8_0, seed, path, &e) == 0, "%s", e.msg);
    return path;
}

static const char *write_tiny_model(void) {
    static char path[512];
    kw_mk_shape s;
    return write_model("tiny", 7, path, sizeof path, &s);
}

static double num(const cJSON *o, const char *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, obj), key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* Prefills prompt[0..n) into slot 0 in one step; returns 0 when the last row's logits are finite. */
static int prefill(kw_engine *e, const int32_t *prompt, int32_t n) {
    int32_t *pos = malloc(sizeof *pos * (size_t)n), *slot = calloc((size_t)n, sizeof *slot);
    bool *want = calloc((size_t)n, sizeof *want);
    float *logits = malloc(sizeof *logits * (size_t)e->n_vocab);
    int rc = -1;
    if (pos && slot && want && logits) {
        for (int32_t i = 0; i < n; i++) pos[i] = i;
        want[n - 1] = true;
        kw_err err = {{0}};
        rc = e->forward(e, n, prompt, pos, slot, want, logits, &err);
        KW_CHECK_MSG(rc == 0, "forward: %s", err.msg);
        for (int32_t v = 0; rc == 0 && v < e->n_vocab; v++)
            if (!isfinite(logits[v])) rc = -1;
    }
    free(pos); free(slot); free(want); free(logits);
    return rc;
}

static void test_model_engine(void) {
    kw_engine_model_opts o = {.model_path = write_tiny_model(), .n_ctx = CTX, .n_slots = 2, .max_batch = 96,
                              .kv_blocks = BLOCKS, .kv_block_tokens = BLOCK, .kv_type = KW_TYPE_F16, .n_threads = 1,
                              .cache_max_seqs = 3, .cache_max_bytes = 1 << 30};
    kw_err err = {{0}};
    kw_engine *e = kw_engine_model_create(&o, &err);
    KW_CHECK_MSG(e != NULL, "%s", err.msg);
    if (!e) return;
    KW_CHECK_EQ_INT(e->n_ctx, CTX);
    KW_CHECK_EQ_INT(e->n_slots, 2);
    /* one sequence holds its context (the pool is larger) and never more */
    KW_CHECK_EQ_INT(kw_engine_max_positions(e), CTX);
    KW_CHECK(kw_engine_could_ever_fit(e, CTX));
    KW_CHECK(!kw_engine_could_ever_fit(e, CTX + 1));
    int32_t seqs = 0;
    uint64_t bytes = 0;
    KW_CHECK(kw_engine_cache_caps(e, &seqs, &bytes));
    KW_CHECK_EQ_INT(seqs, 3);
    KW_CHECK(bytes > 0 && bytes <= (uint64_t)1 << 30);
    KW_CHECK(kw_engine_caching(e));

    /* a 70-token prompt, kept: afterwards the cache covers a prefix of it (not all of it:
     * the last token is always computed again for its logits) */
    int32_t prompt[70];
    for (int32_t i = 0; i < 70; i++) prompt[i] = (int32_t)(3 + (i * 37) % (e->n_vocab - 3));
    KW_CHECK_EQ_INT(kw_engine_cached_prefix(e, prompt, 70), 0);
    KW_CHECK_EQ_INT(e->seq_begin(e, 0, prompt, 70, 80), 0);
    KW_CHECK(e->seq_ensure(e, 0, 70) == 0);
    KW_CHECK(prefill(e, prompt, 70) == 0);
    e->seq_end(e, 0, prompt, 70, true);
    int32_t hit = kw_engine_cached_prefix(e, prompt, 70);
    KW_CHECK_MSG(hit >= 64 && hit < 70, "cached prefix %d of 70", hit);
    /* asking changes nothing */
    KW_CHECK_EQ_INT(kw_engine_cached_prefix(e, prompt, 70), hit);
    /* a second sequence with that prompt starts from the cache */
    KW_CHECK_EQ_INT(e->seq_begin(e, 1, prompt, 70, 80), hit);
    e->seq_end(e, 1, prompt, hit, false);

    cJSON *o2 = cJSON_CreateObject();
    kw_engine_memory_json(e, o2);
    KW_CHECK_EQ_INT(num(o2, "kv_pool", "blocks"), BLOCKS);
    KW_CHECK_EQ_INT(num(o2, "kv_pool", "block_tokens"), BLOCK);
    KW_CHECK_EQ_INT(num(o2, "prompt_cache", "max_sequences"), 3);
    KW_CHECK_EQ_INT(num(o2, "prompt_cache", "max_bytes"), (double)bytes);
    KW_CHECK_EQ_INT(num(o2, "prompt_cache", "sequences"), 1);
    KW_CHECK(num(o2, "prompt_cache", "tokens") >= 64);
    cJSON_Delete(o2);

    char *buf = NULL;
    size_t len = 0;
    KW_CHECK(kw_engine_memory_metrics(e, &buf, &len) == 0);
    KW_CHECK(buf && len == strlen(buf) && strstr(buf, "kvwise_prompt_cache_") && strstr(buf, "kvwise_kv_"));
    free(buf);
    e->destroy(e);
}

/* A mixture of experts behind the engine: the weights line holds the
 * packing allowance, /v1/memory's "experts" says what was packed, and what
 * the weights hold stays within the line as experts are packed at first
 * use; `load` packs them all before any request. */
static void test_moe_engine(void) {
    static char path[512];
    kw_mk_shape s;
    kw_err err = {{0}};
    write_model("tiny-moe", 3, path, sizeof path, &s);
    for (int mode = KW_EXPERTS_FIRST_USE; mode <= KW_EXPERTS_LOAD; mode++) {
        kw_ledger *l = kw_ledger_create(8ULL << 30);
        uint64_t w0 = kw_mem_current(KW_MEM_WEIGHTS);
        kw_engine_model_opts o = {.model_path = path, .n_ctx = CTX, .n_slots = 1, .max_batch = 96, .kv_blocks = BLOCKS,
                                  .kv_block_tokens = BLOCK, .kv_type = KW_TYPE_F16, .n_threads = 2, .ledger = l,
                                  .experts = (kw_experts_mode)mode};
        kw_engine *e = l ? kw_engine_model_create(&o, &err) : NULL;
        KW_CHECK_MSG(e != NULL, "%s", err.msg);
        if (!e) { kw_ledger_destroy(l); continue; }
        cJSON *j = cJSON_CreateObject();
        kw_engine_memory_json(e, j);
        double growth = num(j, "experts", "pack_growth_bytes"), all = num(j, "experts", "experts");
        KW_CHECK(growth >= 0 && all == s.n_layer * s.n_expert);
        if (mode == KW_EXPERTS_FIRST_USE) KW_CHECK(growth > 0);
        KW_CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "experts"), "packing")));
        KW_CHECK_EQ_INT(num(j, "experts", "experts_packed"), mode == KW_EXPERTS_LOAD ? all : 0);
        cJSON_Delete(j);
        uint64_t line = kw_ledger_line(l, KW_LEDGER_WEIGHTS);
        KW_CHECK_EQ_INT(line, kw_mem_current(KW_MEM_WEIGHTS) - w0 + (uint64_t)growth);
        int32_t prompt[90];
        for (int32_t i = 0; i < 90; i++) prompt[i] = (int32_t)(3 + (i * 53) % (e->n_vocab - 3));
        KW_CHECK_EQ_INT(e->seq_begin(e, 0, prompt, 90, 100), 0);
        KW_CHECK(e->seq_ensure(e, 0, 90) == 0);
        KW_CHECK(prefill(e, prompt, 90) == 0);
        e->seq_end(e, 0, prompt, 90, false);
        j = cJSON_CreateObject();
        kw_engine_memory_json(e, j);
        double used = num(j, "experts", "experts_used"), packed = num(j, "experts", "experts_packed");
        KW_CHECK(used > 0);
        KW_CHECK_MSG(packed == (mode == KW_EXPERTS_LOAD ? all : used), "%s: %g of %g used experts packed",
                     kw_experts_mode_name((kw_experts_mode)mode), packed, used);
        KW_CHECK(num(j, "experts", "packed_bytes") >= num(j, "experts", "used_bytes"));
        cJSON_Delete(j);
        KW_CHECK_MSG(kw_mem_current(KW_MEM_WEIGHTS) - w0 <= line, "weights %llu over their line %llu",
                     (unsigned long long)(kw_mem_current(KW_MEM_WEIGHTS) - w0), (unsigned long long)line);
        e->destroy(e);
        kw_ledger_destroy(l);
    }
    remove(path);
}

/* Without KV memory: every query still answers, for an engine that keeps nothing. */
static void test_engine_without_kv(void) {
    kw_engine *e = kw_engine_stub_create(256, 2, 64, 0);
    KW_CHECK(e != NULL);
    if (!e) return;
    KW_CHECK_EQ_INT(kw_engine_max_positions(e), 256);
    KW_CHECK(kw_engine_could_ever_fit(e, 1 << 20));
    int32_t seqs = -1;
    uint64_t bytes = 1;
    KW_CHECK(!kw_engine_cache_caps(e, &seqs, &bytes) && seqs == 0 && bytes == 0);
    KW_CHECK(!kw_engine_caching(e));
    int32_t p[3] = {1, 2, 3};
    KW_CHECK_EQ_INT(kw_engine_cached_prefix(e, p, 3), 0);
    cJSON *o = cJSON_CreateObject();
    kw_engine_memory_json(e, o);
    KW_CHECK(cJSON_GetArraySize(o) == 0);
    cJSON_Delete(o);
    char *buf = NULL;
    size_t len = 0;
    KW_CHECK(kw_engine_memory_metrics(e, &buf, &len) == 0 && len == 0);
    free(buf);
    e->destroy(e);
}

int main(void) {
    test_model_engine();
    test_moe_engine();
    test_engine_without_kv();
    return kw_test_finish();
}
