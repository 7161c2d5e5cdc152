/* test_plan_model.c - the plan's predictions against what loading the model
 * really allocates, for every conformance model: the weights line (mapped
 * file + load-time repack) equals the growth of the accounted weights after
 * kw_model_load, the tokenizer line equals what the model's tokenizer holds,
 * and the workspace line equals what kw_ctx_create allocates. This is the
 * "plan within 5% of the server's ledger" check, made per line and exact.
 * For a mixture of experts, the active bytes the plan says one decoded
 * token reads (k of n experts) are within 2% of what a decode step of the
 * loaded model counts (kw_session_weight_bytes_read); printed for all. */
#include "testutil.h"
#include "kvwise/memory.h"
#include "kvwise/model.h"
#include "kvwise/plan.h"
#include <math.h>
#include <string.h>

static const char *models[] = {"llama-q8_0", "llama-q4_0", "llama-f16", "llama-q4_k_m", "llama-q6_k",
                               "gpt2bpe-q8_0", "qwen2-q8_0", "qwen3-q8_0", "stories260K", "qwen3moe-q8_0",
                               "qwen35moe-q8_0"};

/* Weight bytes one decode step of m reads, as the forward pass counts them. */
static uint64_t counted_decode_bytes(const kw_model *m) {
    kw_err err = {{0}};
    kw_session_opts so = {.n_ctx = 8, .max_batch = 1, .n_threads = 1};
    kw_session *s = kw_session_create(m, &so, &err);
    KW_CHECK_MSG(s != NULL, "%s", err.msg);
    if (!s) return 0;
    int32_t tok[2] = {1, 2};
    KW_CHECK(kw_session_eval(s, tok, 1, false, &err) == 0);
    uint64_t b0 = kw_session_weight_bytes_read(s);
    KW_CHECK(kw_session_eval(s, tok + 1, 1, false, &err) == 0);
    uint64_t b = kw_session_weight_bytes_read(s) - b0;
    kw_session_free(s);
    return b;
}

/* One prefill of n tokens through m. */
static void prefill_batch(const kw_model *m, int32_t n) {
    kw_err err = {{0}};
    kw_session_opts so = {.n_ctx = n + 1, .max_batch = n, .n_threads = 2};
    kw_session *s = kw_session_create(m, &so, &err);
    KW_CHECK_MSG(s != NULL, "%s", err.msg);
    if (!s) return;
    int32_t *tok = malloc((size_t)n * sizeof *tok);
    for (int32_t i = 0; tok && i < n; i++) tok[i] = 1 + (i * 37) % 200;
    KW_CHECK(tok && kw_session_eval(s, tok, n, false, &err) == 0);
    free(tok);
    kw_session_free(s);
}

int main(void) {
    const char *dir = kw_test_path(kw_test_shared_dir(), "conformance/models");
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.gguf", dir, models[i]);
        kw_err err = {{0}};
        kw_gguf *g = kw_gguf_open(path, &err);
        KW_CHECK_MSG(g != NULL, "%s: %s", models[i], err.msg);
        if (!g) continue;
        kw_plan_model pm;
        KW_CHECK_MSG(kw_plan_model_from_gguf(g, &pm, &err) == 0, "%s: %s", models[i], err.msg);
        kw_gguf_close(g);

        uint64_t w0 = kw_mem_current(KW_MEM_WEIGHTS), t0 = kw_mem_current(KW_MEM_TOKENIZER);
        kw_model *m = kw_model_load(path, NULL, &err);
        KW_CHECK_MSG(m != NULL, "%s: %s", models[i], err.msg);
        if (!m) continue;
        uint64_t weights = kw_mem_current(KW_MEM_WEIGHTS) - w0, tok = kw_mem_current(KW_MEM_TOKENIZER) - t0;
        printf("%-14s plan weights %llu (repack %llu), loaded %llu; tokenizer plan %llu, loaded %llu\n", models[i],
               (unsigned long long)pm.resident_bytes, (unsigned long long)pm.repack_bytes,
               (unsigned long long)weights, (unsigned long long)pm.tokenizer_bytes, (unsigned long long)tok);
        /* experts packed at first use: the plan's allowance is the model's, from file offsets */
        kw_expert_stats xs;
        uint64_t growth = kw_model_expert_stats(m, &xs) ? xs.pack_growth : 0;
        KW_CHECK_EQ_INT(pm.expert_pack_bytes, growth);
        KW_CHECK_EQ_INT(pm.resident_bytes, weights + growth);
        KW_CHECK_EQ_INT(pm.tokenizer_bytes, tok);

        uint64_t counted = counted_decode_bytes(m);
        if (growth) {   /* a batch packs most experts: the weights stay within the plan's line */
            prefill_batch(m, 96);
            KW_CHECK(kw_model_expert_stats(m, &xs) && xs.n_packed > 0);
            uint64_t now = kw_mem_current(KW_MEM_WEIGHTS) - w0;
            printf("%-14s after a 96-token batch: %d of %d experts packed, weights %llu <= plan %llu\n", models[i],
                   xs.n_packed, xs.n_experts, (unsigned long long)now, (unsigned long long)pm.resident_bytes);
            KW_CHECK(now <= pm.resident_bytes);
        }
        printf("%-14s read per decoded token: plan %llu, counted %llu (%+.2f%%)\n", models[i],
               (unsigned long long)pm.read_bytes_per_token, (unsigned long long)counted,
               100.0 * ((double)counted / (double)pm.read_bytes_per_token - 1.0));
        /* the plan counts the packed copies decode reads */
            KW_CHECK_MSG(fabs((double)counted / (double)pm.read_bytes_per_token - 1.0) <= 0.02, "%s: plan %llu, counted %llu",
                     models[i], (unsigned long long)pm.read_bytes_per_token, (unsigned long long)counted);

        kw_plan_opts o;
        kw_plan_opts_default(&o);
        o.ram = 4ULL << 30;
        o.ctx = 512;
        o.prefill_step = 128;
        o.overhead = 0;
        kw_plan p;
        KW_CHECK(kw_plan_compute(&pm, &o, &p, &err) == 0);
        int32_t tokens = o.concurrency + o.prompt_concurrency * o.prefill_step;  /* the server's batch */
        kw_pool *pool = kw_pool_create(o.n_threads);
        uint64_t s0 = kw_mem_current(KW_MEM_WORKSPACE) + kw_mem_current(KW_MEM_SCRATCH);
        kw_ctx *c = kw_ctx_create(m, pool, tokens, o.ctx, &err);
        KW_CHECK_MSG(c != NULL, "%s: %s", models[i], err.msg);
        uint64_t ws = kw_mem_current(KW_MEM_WORKSPACE) + kw_mem_current(KW_MEM_SCRATCH) - s0;
        KW_CHECK_EQ_INT(p.workspace_bytes, ws);
        kw_ctx_free(c);
        kw_pool_destroy(pool);
        kw_model_free(m);
    }
    return kw_test_finish();
}
