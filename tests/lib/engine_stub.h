/* engine_stub.h - a deterministic stand-in engine (engine.h) for tests and
 * benchmarks: no model, byte-level vocabulary (ids 0..255 are the bytes)
 * plus <|im_start|> <|im_end|> <|endoftext|>, a ChatML template, logits a
 * hash of (previous token, position). step_us simulates the cost of a
 * forward call. It is test code: linked into the test programs, and into
 * the kvwise binary only when it is built with the test hooks (KW_TESTCTL),
 * where `kvwise serve --stub-engine [--stub-kv]` runs it. */
#ifndef KW_TESTS_ENGINE_STUB_H
#define KW_TESTS_ENGINE_STUB_H
#include "kvwise/engine.h"
#include "kvwise/kv.h"
#include "kvwise/plan.h"

kw_engine *kw_engine_stub_create(int32_t n_ctx, int32_t n_slots, int32_t max_batch, int32_t step_us);

/* Gives the stub real KV memory: a paged pool of a fixed toy layout
 * (kw_engine_stub_kv_layout: 4 KiB per token) with a prompt cache and
 * admission (kvmem.h), so the memory wall can be tested without a model. */
typedef struct kw_engine_stub_kv_opts {
    int32_t kv_blocks;          /* the pool (> 0) */
    int32_t block_tokens;       /* 0 = 32 */
    int32_t cache_max_seqs;
    uint64_t cache_max_bytes;
    struct kw_ledger *ledger;
    double log_interval_s;
} kw_engine_stub_kv_opts;
int kw_engine_stub_enable_kv(kw_engine *e, const kw_engine_stub_kv_opts *o, kw_err *err);
kw_kv_layout kw_engine_stub_kv_layout(int32_t block_tokens);
/* The stub as the plan sees it (plan.h): its KV layout (plan it with
 * kw_engine_stub_kv_layout's type), no weights, tokenizer or workspace. */
void kw_engine_stub_plan_model(kw_plan_model *m);

#endif
