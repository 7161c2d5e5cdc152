/* test_plan.c - the planner's arithmetic (plan.h) on known shapes: the
 * issue-6 acceptance figures (Qwen3-8B-like KV = 147,456 bytes/token; a
 * 64-layer hybrid counts only its 16 attention layers; q8_0 = 34/64 of f16;
 * 273 GB/s / 20.00 GB = 13.65 tok/s), the budget lines and their sum, the
 * prompt-cache recommendation, the largest context that fits (exactly at
 * the boundary), advice when it does not fit, the ledger built from a plan,
 * and config.json parsing (hybrid layouts, errors). No test depends on the
 * machine: RAM, bandwidth and overhead are always given. */
#include "testutil.h"
#include "kvwise/kv.h"
#include "kvwise/plan.h"
#include "kvwise/server.h"
#include "kvwise/tensor.h"
#include <math.h>
#include <string.h>

#define MiB (1024ULL * 1024ULL)
#define GiB (1024ULL * MiB)

static const char *QWEN3_8B =
    "{\"architectures\":[\"Qwen3ForCausalLM\"],\"head_dim\":128,\"hidden_size\":4096,"
    "\"intermediate_size\":12288,\"max_position_embeddings\":40960,\"model_type\":\"qwen3\","
    "\"num_attention_heads\":32,\"num_hidden_layers\":36,\"num_key_value_heads\":8,"
    "\"rms_norm_eps\":1e-06,\"rope_theta\":1000000,\"tie_word_embeddings\":false,\"vocab_size\":151936}";

/* Qwen3.5-27B-like hybrid (the seeds' model): 64 layers, every 4th full attention
 * with 4 KV heads x 256; the other 48 are gated-delta-net linear attention. */
static const char *HYBRID_INTERVAL =
    "{\"model_type\":\"qwen3_5\",\"text_config\":{\"model_type\":\"qwen3_5_text\",\"num_hidden_layers\":64,"
    "\"num_attention_heads\":24,\"num_key_value_heads\":4,\"head_dim\":256,\"hidden_size\":5120,"
    "\"intermediate_size\":17408,\"vocab_size\":248320,\"max_position_embeddings\":262144,"
    "\"full_attention_interval\":4,\"linear_num_value_heads\":48,\"linear_num_key_heads\":16,"
    "\"linear_key_head_dim\":128,\"linear_value_head_dim\":128,\"linear_conv_kernel_dim\":4}}";

static int load(const char *json, uint64_t wbytes, kw_plan_model *m) {
    kw_err err = {{0}};
    int rc = kw_plan_model_from_hf_config(json, strlen(json), wbytes, m, &err);
    if (rc) fprintf(stderr, "load: %s\n", err.msg);
    return rc;
}

static kw_plan_opts opts(uint64_t ram, int32_t ctx) {
    kw_plan_opts o;
    kw_plan_opts_default(&o);
    o.ram = ram;
    o.ctx = ctx;
    o.overhead = 64 * MiB;      /* fixed, so nothing depends on this process */
    o.kv_type = KW_TYPE_F16;    /* the figures below are f16's; test_auto_kv_type checks the default */
    return o;
}

/* The default KV type is "auto": the plan resolves it for the model's head
 * dims on this CPU (kw_kv_type_auto) and sizes KV with what it chose. */
static void test_auto_kv_type(void) {
    kw_plan_model m;
    memset(&m, 0, sizeof m);
    m.hp.n_layer = m.hp.n_kv_layers = 36;
    m.hp.n_head = 32;
    m.hp.n_head_kv = 8;
    m.hp.head_dim_k = m.hp.head_dim_v = 128;
    m.hp.n_ctx_train = 40960;
    m.weight_bytes = 20ULL * 1000 * 1000 * 1000;
    /* i16: 128 int16 + one F32 scale per row, 36 x 2 x 8 x 260 */
    KW_CHECK_EQ_INT(kw_plan_kv_bytes_per_token(&m, KW_TYPE_KV_I16), 36 * 2 * 8 * 260);
    kw_plan_opts o;
    kw_plan_opts_default(&o);
    KW_CHECK_EQ_INT(o.kv_type, KW_KV_TYPE_AUTO);
    o.ram = 64 * GiB;
    o.ctx = 4096;
    o.overhead = 64 * MiB;
    kw_plan p;
    kw_err err;
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == 0);
    uint32_t want = kw_kv_type_auto(128, 128, o.block_tokens, 4);
    KW_CHECK_EQ_INT(p.o.kv_type, want);
    KW_CHECK_EQ_INT(p.kv_bytes_per_token, kw_plan_kv_bytes_per_token(&m, want));
    char line[1024];
    kw_plan_serve_line(&p, "m.gguf", line, sizeof line);
    char flag[64];
    snprintf(flag, sizeof flag, "--kv-type %s ", kw_kv_type_name(want));
    KW_CHECK_MSG(strstr(line, flag) != NULL && !strstr(line, "auto"), "%s", line);
    m.hp.n_head = 64;                          /* a group of 8 */
    o.kv_type = KW_KV_TYPE_AUTO;
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == 0);
    KW_CHECK_EQ_INT(p.o.kv_type, kw_kv_type_auto(128, 128, o.block_tokens, 8));
    m.hp.n_head = 8 * 32;                      /* a group of 32: beyond the kernels' 16 queries: f16 */
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == 0);
    KW_CHECK_EQ_INT(p.o.kv_type, KW_TYPE_F16);
    KW_CHECK_EQ_INT(kw_kv_type_auto(128, 128, 32, 32), KW_TYPE_F16);
    m.hp.n_head = 32;
    m.hp.head_dim_k = m.hp.head_dim_v = 256;   /* beyond i16's int32 bound: f16 */
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == 0);
    KW_CHECK_EQ_INT(p.o.kv_type, KW_TYPE_F16);
}

static void test_qwen3_8b_kv(void) {
    kw_plan_model m;
    KW_CHECK(load(QWEN3_8B, 16400000000ULL, &m) == 0);
    KW_CHECK_EQ_INT(m.hp.n_layer, 36);
    KW_CHECK_EQ_INT(m.hp.n_kv_layers, 36);
    KW_CHECK_EQ_INT(m.n_linear_layers, 0);
    /* 36 layers x K,V x 8 KV heads x 128 dims x 2 bytes: 36 x 2 x 8 x 128 x 2 = 147,456 bytes (144 KiB) */
    KW_CHECK_EQ_INT(kw_plan_kv_bytes_per_token(&m, KW_TYPE_F16), 147456);
    KW_CHECK_EQ_INT(kw_plan_kv_bytes_per_token(&m, KW_TYPE_F16), 144 * 1024);
    /* q8_0: 32 values + one f16 scale = 34 bytes per 32 elements = 34/64 of f16 */
    KW_CHECK_EQ_INT(kw_plan_kv_bytes_per_token(&m, KW_TYPE_Q8_0) * 64, 147456ULL * 34);
    KW_CHECK_EQ_INT(kw_plan_kv_bytes_per_token(&m, KW_TYPE_F32), 2 * 147456);

    kw_plan p;
    kw_plan_opts o = opts(64 * GiB, 4096);
    kw_err err;
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == 0);
    KW_CHECK_EQ_INT(p.kv_bytes_per_token, 147456);
    KW_CHECK_EQ_INT(p.seq_kv_bytes, 147456ULL * 4096);   /* 4096 is a whole number of 32-token blocks */
    o.ctx = 4097;                                       /* one token more takes one more block */
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == 0);
    KW_CHECK_EQ_INT(p.seq_kv_bytes, 147456ULL * (4096 + 32));
}

static void test_hybrid(void) {
    kw_plan_model m;
    KW_CHECK(load(HYBRID_INTERVAL, 17000000000ULL, &m) == 0);
    KW_CHECK_EQ_INT(m.hp.n_layer, 64);
    KW_CHECK_EQ_INT(m.hp.n_kv_layers, 16);
    KW_CHECK_EQ_INT(m.n_linear_layers, 48);
    /* only the 16 attention layers: 16 x 2 x 4 x 256 x 2 = 65,536 bytes/token */
    KW_CHECK_EQ_INT(kw_plan_kv_bytes_per_token(&m, KW_TYPE_F16), 65536);
    /* gated delta net state: 48*128*128*4 + 3*(2*16*128 + 48*128)*4 = 3,268,608 per layer */
    KW_CHECK_EQ_INT(m.linear_state_bytes, 3268608ULL * 48);
    KW_CHECK(strstr(m.linear_formula, "gated delta net") != NULL);
    /* the seeds: 16k tokens of this KV are about 1 GB (f16), half with 8-bit */
    KW_CHECK_EQ_INT(kw_plan_kv_bytes_per_token(&m, KW_TYPE_F16) * 16384, 1 * GiB);

    /* the same model described with layer_types */
    char buf[8192];
    int n = snprintf(buf, sizeof buf, "{\"num_hidden_layers\":64,\"num_attention_heads\":24,\"num_key_value_heads\":4,"
                     "\"head_dim\":256,\"hidden_size\":5120,\"layer_types\":[");
    for (int i = 0; i < 64; i++)
        n += snprintf(buf + n, sizeof buf - (size_t)n, "%s\"%s\"", i ? "," : "",
                      (i + 1) % 4 == 0 ? "full_attention" : "linear_attention");
    snprintf(buf + n, sizeof buf - (size_t)n, "]}");
    kw_plan_model m2;
    KW_CHECK(load(buf, 1000, &m2) == 0);
    KW_CHECK_EQ_INT(m2.hp.n_kv_layers, 16);
    KW_CHECK_EQ_INT(m2.n_linear_layers, 48);
    KW_CHECK_EQ_INT(kw_plan_kv_bytes_per_token(&m2, KW_TYPE_F16), 65536);
    KW_CHECK_EQ_INT(m2.linear_state_bytes, 0);          /* no state keys: not counted ... */
    kw_plan p;
    kw_plan_opts o = opts(32 * GiB, 1024);
    kw_err err;
    KW_CHECK(kw_plan_compute(&m2, &o, &p, &err) == 0);
    bool said = false;                                  /* ... and the plan says so */
    for (int i = 0; i < p.n_warnings; i++) said |= strstr(p.warnings[i], "not counted") != NULL;
    KW_CHECK(said);

    /* per-sequence bytes include the fixed state; the live KV counts it per sequence */
    o = opts(64 * GiB, 16384);
    o.concurrency = 2;
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == 0);
    KW_CHECK_EQ_INT(p.seq_state_bytes, 3268608ULL * 48);
    KW_CHECK_EQ_INT(p.seq_bytes, 65536ULL * 16384 + 3268608ULL * 48);
    KW_CHECK_EQ_INT(p.live_kv, 2 * p.seq_bytes);

    /* Jamba-style period/offset and Nemotron-H-style pattern */
    const char *jamba = "{\"num_hidden_layers\":32,\"num_attention_heads\":32,\"num_key_value_heads\":8,\"hidden_size\":4096,"
                        "\"attn_layer_period\":8,\"attn_layer_offset\":4,\"mamba_d_state\":16,\"mamba_d_conv\":4,\"mamba_expand\":2}";
    KW_CHECK(load(jamba, 1000, &m2) == 0);
    KW_CHECK_EQ_INT(m2.hp.n_kv_layers, 4);
    KW_CHECK_EQ_INT(m2.n_linear_layers, 28);
    /* mamba: d = 2*4096; d*16*4 + 3*d*4 */
    KW_CHECK_EQ_INT(m2.linear_state_bytes, 28ULL * (8192ULL * 16 * 4 + 3ULL * 8192 * 4));
    const char *nemo = "{\"num_hidden_layers\":8,\"num_attention_heads\":8,\"num_key_value_heads\":2,\"hidden_size\":1024,"
                       "\"hybrid_override_pattern\":\"M-M*M-M*\",\"mamba_num_heads\":16,\"mamba_head_dim\":64,"
                       "\"ssm_state_size\":128,\"n_groups\":2,\"conv_kernel\":4}";
    KW_CHECK(load(nemo, 1000, &m2) == 0);
    KW_CHECK_EQ_INT(m2.hp.n_kv_layers, 2);
    KW_CHECK_EQ_INT(m2.n_linear_layers, 4);
    KW_CHECK_EQ_INT(m2.linear_state_bytes, 4ULL * (16 * 64 * 128 * 4 + 3 * (16 * 64 + 2 * 2 * 128) * 4));
}

static void test_bandwidth_ceiling(void) {
    kw_plan_model m;
    KW_CHECK(load(QWEN3_8B, 20000000000ULL, &m) == 0);  /* the seeds' 20.00 GB of weights */
    kw_plan_opts o = opts(64 * GiB, 4096);
    o.bandwidth = 273e9;
    kw_plan p;
    kw_err err;
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == 0);
    KW_CHECK_EQ_INT(p.bytes_per_token, 20000000000ULL);
    /* 273 / 20.00 = 13.65 exactly; 1e-9 is double rounding */
    KW_CHECK_NEAR(p.decode_tok_s, 13.65, 1e-9);
    /* reading the sequence's KV too can only be slower */
    double kv = 147456.0 * 4096;
    KW_CHECK_NEAR(p.decode_tok_s_full_ctx, 273e9 / (20e9 + kv), 1e-9);
    o.bandwidth = 0;
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == 0);
    KW_CHECK_EQ_INT(p.decode_tok_s, 0);
}

static void test_budget_and_cache(void) {
    kw_plan_model m;
    KW_CHECK(load(QWEN3_8B, 5 * GiB, &m) == 0);
    kw_plan_opts o = opts(32 * GiB, 8192);
    kw_plan p;
    kw_err err;
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == 0);
    /* --ram 32GiB: reserve min(6 GiB, RAM/4) = 6 GiB -> limit 26 GiB */
    KW_CHECK_EQ_INT(p.reserve, 6 * GiB);
    KW_CHECK_EQ_INT(p.memory_limit, 26 * GiB);
    KW_CHECK_EQ_INT(p.weights, 5 * GiB);
    KW_CHECK_EQ_INT(p.overhead, 64 * MiB);
    KW_CHECK_EQ_INT(p.tokenizer, 151936ULL * 64);
    KW_CHECK(p.workspace_bytes > 0);
    /* the server's batch: 1 decoding sequence + one 512-token prefill chunk */
    KW_CHECK_EQ_INT(p.workspace_bytes, kw_plan_workspace_bytes(&m, 1 + 512, 8192, 2));
    /* HTTP connections: 128 (default) x 68 KiB + the 16 MiB body allowance + 2 HTTP threads x 16 MiB */
    KW_CHECK_EQ_INT(p.connections, (128ULL + KW_SERVER_SHED_MARGIN) * 68 * 1024 + 16 * MiB + 2 * 16 * MiB);
    KW_CHECK_EQ_INT(p.fixed, p.weights + p.workspace_bytes + p.tokenizer + p.overhead + p.connections);
    KW_CHECK_EQ_INT(p.live_kv, 147456ULL * 8192);
    KW_CHECK_EQ_INT(p.needed, p.fixed + p.live_kv);
    KW_CHECK(p.fits);
    KW_CHECK_EQ_INT(p.remainder, p.memory_limit - p.needed);
    /* cache: concurrency + 1 = 2 conversations at full ctx, which fit */
    KW_CHECK_EQ_INT(p.prompt_cache_size, 2);
    KW_CHECK_EQ_INT(p.prompt_cache_bytes, 2 * p.seq_bytes);
    KW_CHECK_EQ_INT(p.headroom, p.remainder - p.prompt_cache_bytes);
    /* the pool: 1 live + 2 cached sequences of 8192/32 = 256 blocks */
    KW_CHECK_EQ_INT(p.kv_pool_blocks, 3 * 256);
    /* the workspace grows with the step size */
    for (int i = 1; i < KW_PLAN_STEP_ROWS; i++) KW_CHECK(p.ws_bytes[i] > p.ws_bytes[i - 1]);
    /* largest context: exactly at the boundary */
    KW_CHECK(p.max_ctx > 8192);
    kw_plan q;
    kw_plan_opts o2 = o;
    o2.ctx = p.max_ctx;
    KW_CHECK(kw_plan_compute(&m, &o2, &q, &err) == 0);
    KW_CHECK(q.fits);
    o2.ctx = p.max_ctx + 1;
    KW_CHECK(kw_plan_compute(&m, &o2, &q, &err) == 0);
    KW_CHECK(!q.fits);
    KW_CHECK(p.max_ctx_q8 > p.max_ctx);
    /* most sequences at this ctx: exactly at the boundary too */
    o2 = o;
    o2.concurrency = p.max_concurrency;
    KW_CHECK(kw_plan_compute(&m, &o2, &q, &err) == 0);
    KW_CHECK(q.fits);
    o2.concurrency = p.max_concurrency + 1;
    KW_CHECK(kw_plan_compute(&m, &o2, &q, &err) == 0);
    KW_CHECK(!q.fits);

    /* an explicit cache wish larger than the remainder holds: as many as fit */
    o2 = o;
    o2.cache_seqs = 1000;
    KW_CHECK(kw_plan_compute(&m, &o2, &q, &err) == 0);
    KW_CHECK_EQ_INT(q.prompt_cache_size, (int32_t)(q.remainder / q.seq_bytes));
    KW_CHECK(q.prompt_cache_bytes <= q.remainder);

    /* serve line carries the plan's flags */
    char line[1024];
    kw_plan_serve_line(&p, "m.gguf", line, sizeof line);
    KW_CHECK_MSG(strstr(line, "kvwise serve -m m.gguf --memory-limit 26GiB --ctx-size 8192 --kv-type f16") != NULL, "%s", line);
    KW_CHECK_MSG(strstr(line, "--prompt-cache-size 2 --prompt-cache-bytes 2304MiB --kv-block-size 32 --kv-blocks 768") != NULL, "%s", line);

    /* the ledger from the plan: fixed lines set, live KV reserved -> same sum */
    kw_ledger *l = kw_ledger_create(p.memory_limit);
    KW_CHECK(kw_plan_fill_ledger(&p, l, &err) == 0);
    KW_CHECK_EQ_INT(kw_ledger_used(l), p.fixed);
    KW_CHECK_EQ_INT(kw_ledger_reserve(l, KW_LEDGER_KV_LIVE, p.live_kv), 0);
    KW_CHECK_EQ_INT(kw_ledger_used(l), p.needed);
    KW_CHECK_EQ_INT(kw_ledger_available(l), p.remainder);
    KW_CHECK_EQ_INT(kw_ledger_reserve(l, KW_LEDGER_KV_CACHED, p.prompt_cache_bytes), 0);
    kw_ledger_destroy(l);
}

static bool has_warning(const kw_plan *p, const char *s) {
    for (int i = 0; i < p->n_warnings; i++)
        if (strstr(p->warnings[i], s)) return true;
    return false;
}

/* The connections line: (--max-connections + the shed margin) x KW_SERVER_CONN_BYTES + --max-body,
 * in the plan, its ledger and its serve line; more connections can stop a
 * plan from fitting, exactly at the boundary. */
static void test_connections_line(void) {
    KW_CHECK_EQ_INT(KW_SERVER_CONN_BYTES, 68 * 1024);
    KW_CHECK_EQ_INT(kw_plan_connections_bytes(0, 0, 0, 0), (128ULL + KW_SERVER_SHED_MARGIN) * 68 * 1024 + 16 * MiB + 32 * MiB);
    KW_CHECK_EQ_INT(kw_plan_connections_bytes(10, 1 * MiB, 3, 2 * MiB), (10ULL + KW_SERVER_SHED_MARGIN) * 68 * 1024 + 1 * MiB + 6 * MiB);
    KW_CHECK_EQ_INT(kw_plan_connections_bytes(100000, UINT64_MAX, 1, 1), UINT64_MAX);     /* saturates */
    KW_CHECK_EQ_INT(kw_plan_connections_bytes(1, 1, 64, UINT64_MAX), UINT64_MAX);
    kw_plan_model m;
    KW_CHECK(load(QWEN3_8B, 16400000000ULL, &m) == 0);
    kw_plan_opts o = opts(32 * GiB, 8192);
    o.max_connections = 1000;
    o.max_body = 4 * MiB;
    o.http_threads = 3;
    o.request_memory = 8 * MiB;
    kw_plan p;
    kw_err err;
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == 0);
    KW_CHECK_EQ_INT(p.connections, (1000ULL + KW_SERVER_SHED_MARGIN) * 68 * 1024 + 4 * MiB + 3 * 8 * MiB);
    kw_ledger *l = kw_ledger_create(p.memory_limit);
    KW_CHECK(kw_plan_fill_ledger(&p, l, &err) == 0);
    KW_CHECK_EQ_INT(kw_ledger_line(l, KW_LEDGER_CONNECTIONS), p.connections);
    KW_CHECK_EQ_INT(kw_ledger_used(l), p.fixed);
    kw_ledger_destroy(l);
    char line[1024];
    kw_plan_serve_line(&p, "m.gguf", line, sizeof line);
    KW_CHECK_MSG(strstr(line, " --max-connections 1000 --max-body 4194304 --http-threads 3 --request-memory 8388608") != NULL,
                 "%s", line);
    /* a limit of exactly what 1000 connections need fits; 1001 are one connection short */
    o.memory_limit = p.needed;
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == 0);
    KW_CHECK(p.fits);
    o.max_connections = 1001;
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == 0);
    KW_CHECK(!p.fits);
    KW_CHECK_EQ_INT(p.shortfall, KW_SERVER_CONN_BYTES);
    o.max_connections = -1;
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) != 0);
}

static void test_does_not_fit(void) {
    kw_plan_model m;
    KW_CHECK(load(QWEN3_8B, 5 * GiB, &m) == 0);
    /* 8 GiB RAM: reserve 2 GiB, limit 6 GiB; 5 GiB weights + 128k ctx of f16 KV (18 GiB) does not fit */
    kw_plan_opts o = opts(8 * GiB, 131072);
    kw_plan p;
    kw_err err;
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == 0);
    KW_CHECK_EQ_INT(p.memory_limit, 6 * GiB);
    KW_CHECK(!p.fits);
    KW_CHECK_EQ_INT(p.shortfall, p.needed - p.memory_limit);
    KW_CHECK_EQ_INT(p.prompt_cache_bytes, 0);
    KW_CHECK(p.max_ctx > 0 && p.max_ctx < 131072);
    KW_CHECK(has_warning(&p, "does not fit"));
    char want[64];
    snprintf(want, sizeof want, "--ctx %d", p.max_ctx);
    KW_CHECK(has_warning(&p, want));
    KW_CHECK(has_warning(&p, "more memory"));
    KW_CHECK(!has_warning(&p, "smaller quant"));  /* short by more than the weights weigh */

    /* q8_0 would fit where f16 does not: the plan says so */
    o = opts(8 * GiB, 6400);
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == 0);
    KW_CHECK(!p.fits);
    KW_CHECK(p.max_ctx_q8 >= 6400);
    KW_CHECK(has_warning(&p, "--kv-type q8_0"));
    /* where the integer kernels run for this shape, i8 is named first */
    KW_CHECK(has_warning(&p, "--kv-type i8") == (kw_hparams_kv_type(&m.hp, KW_KV_TYPE_AUTO, 32) == KW_TYPE_KV_I16));
    KW_CHECK(has_warning(&p, "smaller quant"));
    o.kv_type = KW_TYPE_Q8_0;
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == 0);
    KW_CHECK(p.fits);

    /* weights alone too big */
    KW_CHECK(load(QWEN3_8B, 40 * GiB, &m) == 0);
    o = opts(32 * GiB, 4096);
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == 0);
    KW_CHECK(!p.fits);
    KW_CHECK_EQ_INT(p.max_ctx, 0);
    KW_CHECK(has_warning(&p, "weights alone"));
}

static void test_limits_and_errors(void) {
    uint64_t r;
    KW_CHECK_EQ_INT(kw_plan_default_memory_limit(32 * GiB, false, UINT64_MAX, &r), 26 * GiB);
    KW_CHECK_EQ_INT(r, 6 * GiB);
    KW_CHECK_EQ_INT(kw_plan_default_memory_limit(8 * GiB, false, UINT64_MAX, &r), 6 * GiB);   /* RAM/4 */
    KW_CHECK_EQ_INT(kw_plan_default_memory_limit(20 * GiB, true, UINT64_MAX, &r), 18 * GiB);  /* MemAvailable/10 */
    KW_CHECK_EQ_INT(kw_plan_default_memory_limit(1 * GiB, true, UINT64_MAX, &r), 768 * MiB);  /* at least 256 MiB */
    KW_CHECK_EQ_INT(kw_plan_default_memory_limit(32 * GiB, false, 4 * GiB, &r), 28 * GiB);    /* --reserve */
    KW_CHECK_EQ_INT(kw_plan_default_memory_limit(2 * GiB, false, 4 * GiB, &r), 0);

    kw_plan_model m;
    kw_err err = {{0}};
    KW_CHECK(load(QWEN3_8B, GiB, &m) == 0);
    kw_plan p;
    kw_plan_opts o = opts(0, 1024);                      /* no RAM and nothing measured */
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == -1);
    KW_CHECK_MSG(strstr(err.msg, "--ram") != NULL, "%s", err.msg);
    o = opts(0, 1024);
    o.mem_available = 10 * GiB;                          /* measured */
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == 0);
    KW_CHECK(p.ram_measured);
    KW_CHECK_EQ_INT(p.memory_limit, 9 * GiB);
    o = opts(4 * GiB, 1024);
    o.memory_limit = 3 * GiB;                            /* explicit limit wins */
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == 0);
    KW_CHECK_EQ_INT(p.memory_limit, 3 * GiB);
    KW_CHECK_EQ_INT(p.reserve, 1 * GiB);
    o = opts(4 * GiB, 0);                                /* default ctx: min(trained, 8192) */
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == 0);
    KW_CHECK_EQ_INT(p.o.ctx, 8192);
    o = opts(4 * GiB, 1024);
    o.concurrency = 0;
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == -1);
    o = opts(4 * GiB, 1024);
    o.kv_type = KW_TYPE_Q4_0;
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == -1);

    /* q8_0 needs head_dim % 32 == 0 */
    const char *odd = "{\"num_hidden_layers\":5,\"num_attention_heads\":8,\"num_key_value_heads\":4,\"hidden_size\":64}";
    KW_CHECK(load(odd, 1000, &m) == 0);
    KW_CHECK_EQ_INT(kw_plan_kv_bytes_per_token(&m, KW_TYPE_F16), 5 * 2 * 4 * 8 * 2);
    KW_CHECK_EQ_INT(kw_plan_kv_bytes_per_token(&m, KW_TYPE_Q8_0), 0);
    o = opts(4 * GiB, 256);
    o.kv_type = KW_TYPE_Q8_0;
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == -1);
    KW_CHECK_MSG(strstr(err.msg, "multiples of 32") != NULL, "%s", err.msg);

    /* malformed configs: one-line errors, no crash */
    static const char *bad[] = {
        "", "[]", "{", "{\"num_hidden_layers\":36}", "{\"num_hidden_layers\":-1,\"num_attention_heads\":8,\"hidden_size\":64}",
        "{\"num_hidden_layers\":2,\"num_attention_heads\":8,\"hidden_size\":64,\"layer_types\":[\"full_attention\"]}",
        "{\"num_hidden_layers\":2,\"num_attention_heads\":8,\"hidden_size\":64,\"layer_types\":[1,2]}",
        "{\"num_hidden_layers\":2,\"num_attention_heads\":8,\"num_key_value_heads\":9,\"hidden_size\":64}",
        "{\"num_hidden_layers\":2.5,\"num_attention_heads\":8,\"hidden_size\":64}",
        "{\"num_hidden_layers\":\"2\",\"num_attention_heads\":8,\"hidden_size\":64}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err.msg[0] = 0;
        KW_CHECK_MSG(kw_plan_model_from_hf_config(bad[i], strlen(bad[i]), 1, &m, &err) == -1, "accepted: %s", bad[i]);
        KW_CHECK_MSG(err.msg[0] && !strchr(err.msg, '\n'), "case %zu: '%s'", i, err.msg);
    }
    KW_CHECK(kw_plan_model_from_hf_config(NULL, 0, 1, &m, &err) == -1);

    /* mixture of experts: parsed, and the ceiling is flagged as a bound */
    const char *moe = "{\"num_hidden_layers\":48,\"num_attention_heads\":32,\"num_key_value_heads\":4,\"head_dim\":128,"
                      "\"hidden_size\":2048,\"num_experts\":128,\"num_experts_per_tok\":8,\"moe_intermediate_size\":768}";
    KW_CHECK(load(moe, 17 * GiB, &m) == 0);
    KW_CHECK_EQ_INT(m.n_experts, 128);
    KW_CHECK_EQ_INT(m.n_experts_used, 8);
    KW_CHECK_EQ_INT(m.hp.n_ff, 8 * 768);
    o = opts(32 * GiB, 1024);
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == 0);
    KW_CHECK(has_warning(&p, "8 of 128 experts"));

    /* with the expert bytes known (a GGUF file): the active bytes are the
     * ceiling's, no warning, and a step of n sequences reads the experts
     * some token of it picks (uniform routing): 1 - (1 - 8/128)^n of them */
    m.expert_bytes = 16 * GiB;
    m.read_bytes_per_token = 1 * GiB + m.expert_bytes / 16;
    o = opts(32 * GiB, 1024);
    o.bandwidth = 20e9;
    o.concurrency = 4;
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == 0);
    KW_CHECK(!has_warning(&p, "8 of 128 experts"));
    KW_CHECK_NEAR(p.decode_tok_s, 20e9 / (2.0 * GiB), 1e-6);
    KW_CHECK_NEAR(kw_plan_step_weight_bytes(&m, 1), 2.0 * GiB, 1.0);
    double four = 1.0 * GiB + 16.0 * GiB * (1.0 - pow(120.0 / 128.0, 4));
    KW_CHECK_NEAR(kw_plan_step_weight_bytes(&m, 4), four, 1.0);
    double kv_seq = (double)p.kv_bytes_per_token * o.ctx;
    KW_CHECK_NEAR(p.decode_aggregate_tok_s, 4 * 20e9 / (four + 4 * kv_seq), 1e-6);
}

/* What `kvwise serve` runs with (kw_plan_serve_sizing): the plan's pool and
 * byte cap when the plan fits; the flags as given; half the pool when not
 * every slot fits at full context; no cache with count 0; and the startup
 * refusal, naming the limit that would work, exactly at one sequence. */
static void test_serve_sizing(void) {
    kw_plan_model m;
    KW_CHECK(load(QWEN3_8B, 5 * GiB, &m) == 0);
    KW_CHECK_EQ_INT(kw_plan_serve_ctx(&m, 0), KW_PLAN_SERVE_CTX);         /* trained 40960: at most 4096 */
    KW_CHECK_EQ_INT(kw_plan_serve_ctx(&m, 777), 777);
    kw_plan_opts o = opts(32 * GiB, 8192);
    o.concurrency = 2;
    o.cache_seqs = 4;
    kw_plan p;
    kw_err err = {{0}};
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == 0 && p.fits);
    kw_plan_serve sz;
    kw_plan_serve_opts f = {.cache_seqs = 4, .cache_bytes = UINT64_MAX};
    KW_CHECK(kw_plan_serve_sizing(&p, &f, &sz, &err) == 0);
    KW_CHECK_EQ_INT(sz.kv_blocks, p.kv_pool_blocks);                      /* 2 live + 4 cached x 256 blocks */
    KW_CHECK_EQ_INT(sz.kv_blocks, 6 * 256);
    KW_CHECK_EQ_INT(sz.cache_max_bytes, p.prompt_cache_bytes);
    KW_CHECK_EQ_INT(sz.cache_max_seqs, 4);
    f = (kw_plan_serve_opts){.kv_blocks = 100, .cache_seqs = 2, .cache_bytes = 64 * MiB};
    KW_CHECK(kw_plan_serve_sizing(&p, &f, &sz, &err) == 0);                /* flags as given */
    KW_CHECK(sz.kv_blocks == 100 && sz.cache_max_seqs == 2 && sz.cache_max_bytes == 64 * MiB);
    f = (kw_plan_serve_opts){.cache_seqs = 2, .cache_bytes = 64 * MiB};
    KW_CHECK(kw_plan_serve_sizing(&p, &f, &sz, &err) == 0);                /* the pool holds live + the given cache */
    KW_CHECK_EQ_INT(sz.kv_blocks, 2 * 256 + (int32_t)(64 * MiB / p.kv_block_bytes));
    f = (kw_plan_serve_opts){.cache_seqs = 0, .cache_bytes = UINT64_MAX};
    KW_CHECK(kw_plan_serve_sizing(&p, &f, &sz, &err) == 0);                /* no cache: live sequences only */
    KW_CHECK(sz.kv_blocks == 2 * 256 && sz.cache_max_bytes == 0 && sz.cache_max_seqs == 0);
    f = (kw_plan_serve_opts){.kv_blocks = 1 << 30, .cache_seqs = 4, .cache_bytes = UINT64_MAX};
    KW_CHECK(kw_plan_serve_sizing(&p, &f, &sz, &err) == 0);                /* never past what the budget leaves */
    KW_CHECK_EQ_INT((uint64_t)sz.kv_blocks, (p.memory_limit - p.fixed) / p.kv_block_bytes);

    /* not every slot fits: the pool is what the budget leaves, the cache may hold half of it */
    o.concurrency = 64;
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == 0 && !p.fits);
    f = (kw_plan_serve_opts){.cache_seqs = 4, .cache_bytes = UINT64_MAX};
    KW_CHECK(kw_plan_serve_sizing(&p, &f, &sz, &err) == 0);
    KW_CHECK_EQ_INT((uint64_t)sz.kv_blocks, (p.memory_limit - p.fixed) / p.kv_block_bytes);
    KW_CHECK_EQ_INT(sz.cache_max_bytes, (uint64_t)sz.kv_blocks * p.kv_block_bytes / 2);

    /* exactly one sequence beside the fixed lines starts; one byte less is refused with that limit */
    o.concurrency = 1;
    o.memory_limit = 0;
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == 0);
    uint64_t need = p.fixed + 256 * p.kv_block_bytes;
    o.memory_limit = need;
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == 0);
    KW_CHECK(kw_plan_serve_sizing(&p, &f, &sz, &err) == 0 && sz.kv_blocks == 256);
    o.memory_limit = need - 1;
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == 0);
    KW_CHECK(kw_plan_serve_sizing(&p, &f, &sz, &err) == -1);
    char want[64];
    KW_CHECK_MSG(strstr(err.msg, "--memory-limit ") && strstr(err.msg, "is too small") &&
                 strstr(err.msg, kw_format_bytes(need, want, sizeof want)) && strstr(err.msg, "would work"), "%s", err.msg);
    /* the one value it suggests works on the first try: it covers the whole need with a margin */
    const char *at = strstr(err.msg, "; --memory-limit ");
    unsigned long long sug_mib = 0;
    KW_CHECK_MSG(at && sscanf(at, "; --memory-limit %lluMiB would work", &sug_mib) == 1, "%s", err.msg);
    o.memory_limit = sug_mib * MiB;
    KW_CHECK(sug_mib * MiB >= need + need / 50 && kw_plan_compute(&m, &o, &p, &err) == 0 &&
             kw_plan_serve_sizing(&p, &f, &sz, &err) == 0);
}

int main(void) {
    test_serve_sizing();
    test_qwen3_8b_kv();
    test_hybrid();
    test_bandwidth_ceiling();
    test_budget_and_cache();
    test_does_not_fit();
    test_connections_line();
    test_limits_and_errors();
    test_auto_kv_type();
    return kw_test_finish();
}
