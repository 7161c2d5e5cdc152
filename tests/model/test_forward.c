/* test_forward.c - kw_forward's batching contract and the KV element types,
 * on the conformance models (../shared/conformance/models):
 *   - two sequences interleaved in one batch = each run alone;
 *   - continuous batching (one sequence mid-decode, another prefilling);
 *   - a prompt split into prefill chunks = one batch;
 *   - block_tokens 16 = 32; one thread = two threads;
 *   - KV f16 / q8_0 vs f32 within measured tolerances; q8_0 with
 *     head_dim % 32 != 0 is a clear error;
 *   - kw_ctx_workspace_bytes() = what kw_ctx_create() allocates;
 *   - mixture of experts: the same, the experts a token marks used, and
 *     that only those become resident (the kernel's page tables);
 *   - bad batches are refused with a message, never a crash. */
#include "testutil.h"
#include "kvwise/memory.h"
#include "kvwise/model.h"
#include "mkmodel/mkmodel.h"
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

/* Same-implementation batch-shape differences. Every matmul row is computed
 * by the same per-row kernel whatever the batch, and attention is per
 * (token, head), so batch composition should not change results beyond
 * float reassociation. 1e-4 is far below any oracle tolerance (1e-3 for F32). */
static const double TOL_BATCH = 1e-4;
/* KV cache element type vs F32 KV, over every position of a 64-token prompt
 * (figures measured at 64 and 96 tokens agree to ~5%).
 * Measured with this implementation (max |delta| / RMS):
 *   f16 : llama-q4_0 0.27/0.052, llama-q8_0 0.30/0.049, llama-q6_k 0.45/0.075,
 *         qwen2 0.16/0.035, qwen3 0.16/0.035, gpt2bpe 0.30/0.043, llama-f16 0.015/0.0029
 *   q8_0: llama-q4_0 0.40/0.079, llama-q8_0 0.48/0.074, llama-q6_k 0.59/0.103,
 *         qwen2 0.27/0.049, qwen3 0.25/0.050, gpt2bpe 0.40/0.065, llama-f16 0.31/0.043
 * On quantized-weight models the small KV rounding is amplified by the Q8
 * re-quantization of activations (values crossing a rounding step), as the
 * README reports for llama.cpp itself: an F16 V cache alone moved its
 * llama-q8_0 logits by 0.22-0.24 max / 0.058 RMS. On F16 weights (no
 * activation re-quantization) the F16 cache effect is ~0.015.
 * Bounds: about 1.3-1.7x the largest measured figure. */
static const double TOL_KV_F16 = 0.6, TOL_KV_F16_RMS = 0.1;
static const double TOL_KV_Q8 = 0.8, TOL_KV_Q8_RMS = 0.15;
static const double TOL_KV_F16_ON_F16_WEIGHTS = 0.03;
/* i16 (int16 rows + scale, exact integer dots) measured 0.0089 / 0.0016 on
 * llama-f16 (f16: 0.016 / 0.0021), llama-q4_0 0.24 / 0.049, qwen3-q8_0
 * 0.19 / 0.034: closer to F32 than f16 in RMS everywhere; it shares f16's
 * bounds and has its own on F16 weights (1.7x the measured figure). */
static const double TOL_KV_I16_ON_F16_WEIGHTS = 0.015;
/* i8 (int8 rows + scale, q to 8 bits as well: a q8_0-like cache) shares
 * q8_0's bounds. */

static const char *g_models;

static kw_model *load(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.gguf", g_models, name);
    kw_err err = {{0}};
    kw_model *m = kw_model_load(path, NULL, &err);
    KW_CHECK_MSG(m != NULL, "%s: %s", name, err.msg);
    return m;
}

/* Deterministic pseudo-random tokens in [1, n_vocab). */
static void make_tokens(int32_t *t, int n, int n_vocab, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        t[i] = 1 + (int32_t)((seed >> 8) % (uint32_t)(n_vocab - 1));
    }
}

typedef struct runner {
    const kw_model *m;
    kw_pool *pool;
    kw_kv_pool *kv;
    kw_ctx *ctx;
    int n_vocab;
    kw_rec_state st[2];         /* recurrent models: the states of sequences 0 and 1 */
    kw_rec_state *sp[2];
    kw_rec_state *const *states;/* sp, or NULL for a model without recurrent layers */
} runner;

static int runner_init(runner *r, const kw_model *m, kw_pool *pool, uint32_t kv_type, int bt, int max_tokens, int n_blocks) {
    kw_err err = {{0}};
    memset(r, 0, sizeof *r);
    r->m = m;
    r->pool = pool;
    r->n_vocab = kw_model_hparams(m)->n_vocab;
    kw_kv_layout lay = kw_model_kv_layout(m, kv_type, bt);
    r->kv = kw_kv_pool_create(&lay, n_blocks, &err);
    KW_CHECK_MSG(r->kv != NULL, "%s", err.msg);
    r->ctx = kw_ctx_create(m, pool, max_tokens, n_blocks * bt, &err);
    KW_CHECK_MSG(r->ctx != NULL, "%s", err.msg);
    size_t rec = (size_t)kw_model_hparams(m)->rec_state_bytes;
    for (int i = 0; rec > 0 && i < 2; i++) {
        r->st[i].data = malloc(rec);
        memset(r->st[i].data, 0x7f, rec);        /* garbage: a start at position 0 must clear it */
        r->sp[i] = &r->st[i];
        r->states = r->sp;
    }
    return r->kv && r->ctx ? 0 : -1;
}

static void runner_free(runner *r) {
    free(r->st[0].data);
    free(r->st[1].data);
    kw_ctx_free(r->ctx);
    kw_kv_pool_destroy(r->kv);
}

/* Runs tokens[0..n) of one sequence in chunks of `chunk`; all rows of logits. */
static int run_alone(runner *r, const int32_t *tokens, int n, int chunk, float *logits) {
    kw_err err = {{0}};
    kw_block_table t = {0};
    int rc = kw_block_table_ensure(&t, r->kv, n);
    KW_CHECK(rc == 0);
    int32_t pos[512], seq[512] = {0};
    bool want[512];
    kw_block_table *tabs[1] = {&t};
    for (int done = 0; rc == 0 && done < n; done += chunk) {
        int len = n - done < chunk ? n - done : chunk;
        for (int i = 0; i < len; i++) { pos[i] = done + i; want[i] = true; }
        kw_batch b = {.n_tokens = len, .tokens = tokens + done, .pos = pos, .seq = seq, .tables = tabs, .want_logits = want,
                      .states = r->states};
        rc = kw_forward(r->ctx, r->kv, &b, logits + (size_t)done * r->n_vocab, &err);
        KW_CHECK_MSG(rc == 0, "%s", err.msg);
    }
    kw_block_table_release(&t, r->kv);
    kw_block_table_free(&t);
    return rc;
}

static double rms_diff(const float *a, const float *b, size_t n) {
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return sqrt(ss / (double)n);
}

static double max_diff(const float *a, const float *b, size_t n) {
    double mx = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= mx)) mx = d;     /* NaN propagates as a failure */
    }
    return mx;
}

/* A and B interleaved in one batch, then A half-prefilled and continued in a
 * batch mixed with B's whole prompt (continuous batching). */
static void test_interleaved(const char *name, kw_pool *pool) {
    kw_model *m = load(name);
    if (!m) return;
    enum { NA = 40, NB = 25 };
    runner r;
    if (runner_init(&r, m, pool, KW_TYPE_F32, 16, NA + NB, 16) == 0) {
        int V = r.n_vocab;
        int32_t A[NA], B[NB];
        make_tokens(A, NA, V, 1);
        make_tokens(B, NB, V, 2);
        float *la = malloc((size_t)NA * V * 4), *lb = malloc((size_t)NB * V * 4), *mix = malloc((size_t)(NA + NB) * V * 4);
        run_alone(&r, A, NA, NA, la);
        run_alone(&r, B, NB, NB, lb);

        kw_block_table ta = {0}, tb = {0};
        kw_block_table *tabs[2] = {&ta, &tb};
        KW_CHECK(kw_block_table_ensure(&ta, r.kv, NA) == 0 && kw_block_table_ensure(&tb, r.kv, NB) == 0);
        int32_t tok[NA + NB], pos[NA + NB], seq[NA + NB], n = 0;
        bool want[NA + NB];
        for (int i = 0; i < NA; i++) {
            tok[n] = A[i]; pos[n] = i; seq[n] = 0; want[n++] = true;
            if (i < NB) { tok[n] = B[i]; pos[n] = i; seq[n] = 1; want[n++] = true; }
        }
        kw_err err = {{0}};
        kw_batch b = {.n_tokens = n, .tokens = tok, .pos = pos, .seq = seq, .tables = tabs, .want_logits = want,
                      .states = r.states};
        KW_CHECK_MSG(kw_forward(r.ctx, r.kv, &b, mix, &err) == 0, "%s", err.msg);
        double da = 0, db = 0;
        for (int i = 0, ia = 0, ib = 0; i < n; i++) {
            const float *ref = seq[i] == 0 ? la + (size_t)(ia++) * V : lb + (size_t)(ib++) * V;
            double d = max_diff(mix + (size_t)i * V, ref, (size_t)V);
            if (seq[i] == 0 && d > da) da = d;
            if (seq[i] == 1 && d > db) db = d;
        }
        KW_CHECK_MSG(da <= TOL_BATCH && db <= TOL_BATCH, "%s interleaved: max |delta| A %.3g B %.3g", name, da, db);
        printf("%s: interleaved A/B vs alone: max |delta| %.3g / %.3g\n", name, da, db);

        /* continuous batching: A[0..20) alone, then A[20..40) + B[0..25) in one batch */
        kw_block_table_release(&ta, r.kv);
        kw_block_table_release(&tb, r.kv);
        KW_CHECK(kw_block_table_ensure(&ta, r.kv, NA) == 0 && kw_block_table_ensure(&tb, r.kv, NB) == 0);
        n = 0;
        for (int i = 0; i < 20; i++) { tok[n] = A[i]; pos[n] = i; seq[n] = 0; want[n++] = false; }
        b.n_tokens = n;
        KW_CHECK(kw_forward(r.ctx, r.kv, &b, NULL, &err) == 0);
        n = 0;
        for (int i = 0; i < NB; i++) { tok[n] = B[i]; pos[n] = i; seq[n] = 1; want[n++] = true; }
        for (int i = 20; i < NA; i++) { tok[n] = A[i]; pos[n] = i; seq[n] = 0; want[n++] = true; }
        b.n_tokens = n;
        KW_CHECK_MSG(kw_forward(r.ctx, r.kv, &b, mix, &err) == 0, "%s", err.msg);
        double dc = max_diff(mix, lb, (size_t)NB * V);
        double dd = max_diff(mix + (size_t)NB * V, la + (size_t)20 * V, (size_t)20 * V);
        KW_CHECK_MSG(dc <= TOL_BATCH && dd <= TOL_BATCH, "%s continuous: max |delta| %.3g %.3g", name, dc, dd);
        kw_block_table_release(&ta, r.kv);
        kw_block_table_release(&tb, r.kv);
        kw_block_table_free(&ta);
        kw_block_table_free(&tb);
        free(la); free(lb); free(mix);
    }
    runner_free(&r);
    kw_model_free(m);
}

/* One batch vs prefill chunks of 7, and block_tokens 16 vs 32. */
static void test_chunks_and_blocks(const char *name, kw_pool *pool) {
    kw_model *m = load(name);
    if (!m) return;
    enum { N = 60 };
    runner r16, r32, r1;
    if (runner_init(&r16, m, pool, KW_TYPE_F32, 16, N, 8) == 0 && runner_init(&r32, m, pool, KW_TYPE_F32, 32, N, 4) == 0 &&
        runner_init(&r1, m, NULL, KW_TYPE_F32, 16, N, 8) == 0) {
        int V = r16.n_vocab;
        int32_t T[N];
        make_tokens(T, N, V, 3);
        float *one = malloc((size_t)N * V * 4), *chunked = malloc((size_t)N * V * 4), *b32 = malloc((size_t)N * V * 4);
        run_alone(&r16, T, N, N, one);
        run_alone(&r16, T, N, 7, chunked);
        run_alone(&r32, T, N, N, b32);
        double dc = max_diff(one, chunked, (size_t)N * V), db = max_diff(one, b32, (size_t)N * V);
        run_alone(&r16, T, N, 1, chunked);               /* the one-token path */
        double d1 = max_diff(one, chunked, (size_t)N * V);
        KW_CHECK_MSG(d1 <= TOL_BATCH, "%s one token at a time vs one batch: %.3g", name, d1);
        run_alone(&r1, T, N, N, chunked);                /* no thread pool: one thread */
        double dt = max_diff(one, chunked, (size_t)N * V);
        KW_CHECK_MSG(dt <= TOL_BATCH, "%s 1 thread vs 2: %.3g", name, dt);
        KW_CHECK_MSG(dc <= TOL_BATCH, "%s chunks of 7 vs one batch: %.3g", name, dc);
        KW_CHECK_MSG(db <= TOL_BATCH, "%s block_tokens 16 vs 32: %.3g", name, db);
        printf("%s: one token at a time vs one batch %.3g, chunks of 7 %.3g, block 16 vs 32 %.3g, 1 vs 2 threads %.3g\n",
               name, d1, dc, db, dt);
        free(one); free(chunked); free(b32);
    }
    runner_free(&r16);
    runner_free(&r32);
    runner_free(&r1);
    kw_model_free(m);
}

static void test_kv_types(const char *name, kw_pool *pool) {
    kw_model *m = load(name);
    if (!m) return;
    enum { N = 64 };
    runner rf, rh, rq, ri, r8;
    if (runner_init(&rf, m, pool, KW_TYPE_F32, 32, N, 3) == 0 && runner_init(&rh, m, pool, KW_TYPE_F16, 32, N, 3) == 0 &&
        runner_init(&rq, m, pool, KW_TYPE_Q8_0, 32, N, 3) == 0 && runner_init(&ri, m, pool, KW_TYPE_KV_I16, 32, N, 3) == 0 &&
        runner_init(&r8, m, pool, KW_TYPE_KV_I8, 32, N, 3) == 0) {
        int V = rf.n_vocab;
        int32_t T[N];
        make_tokens(T, N, V, 4);
        size_t nb = (size_t)N * V * 4;
        float *f = malloc(nb), *h = malloc(nb), *q = malloc(nb), *i16 = malloc(nb), *i8 = malloc(nb);
        run_alone(&rf, T, N, N, f);
        run_alone(&rh, T, N, N, h);
        run_alone(&rq, T, N, N, q);
        run_alone(&ri, T, N, N, i16);
        run_alone(&r8, T, N, N, i8);
        double dh = max_diff(f, h, (size_t)N * V), dq = max_diff(f, q, (size_t)N * V), di = max_diff(f, i16, (size_t)N * V);
        KW_CHECK_MSG(dh <= TOL_KV_F16, "%s kv f16 vs f32: %.3g", name, dh);
        KW_CHECK_MSG(di <= TOL_KV_F16, "%s kv i16 vs f32: %.3g", name, di);
        if (!strcmp(name, "llama-f16")) {
            KW_CHECK_MSG(dh <= TOL_KV_F16_ON_F16_WEIGHTS, "%s kv f16 vs f32: %.3g", name, dh);
            KW_CHECK_MSG(di <= TOL_KV_I16_ON_F16_WEIGHTS, "%s kv i16 vs f32: %.3g", name, di);
        }
        KW_CHECK_MSG(dq <= TOL_KV_Q8, "%s kv q8_0 vs f32: %.3g", name, dq);
        double d8 = max_diff(f, i8, (size_t)N * V), r8d = rms_diff(f, i8, (size_t)N * V);
        KW_CHECK_MSG(d8 <= TOL_KV_Q8, "%s kv i8 vs f32: %.3g", name, d8);
        KW_CHECK_MSG(r8d <= TOL_KV_Q8_RMS, "%s kv i8 vs f32: RMS %.3g", name, r8d);
        KW_CHECK_MSG(dh > 0 && dq > 0 && di > 0 && d8 > 0, "%s: KV types made no difference at all (suspicious)", name);
        double rh = rms_diff(f, h, (size_t)N * V), rq = rms_diff(f, q, (size_t)N * V), ri16 = rms_diff(f, i16, (size_t)N * V);
        KW_CHECK_MSG(rh <= TOL_KV_F16_RMS, "%s kv f16 vs f32: RMS %.3g", name, rh);
        KW_CHECK_MSG(ri16 <= TOL_KV_F16_RMS, "%s kv i16 vs f32: RMS %.3g", name, ri16);
        KW_CHECK_MSG(rq <= TOL_KV_Q8_RMS, "%s kv q8_0 vs f32: RMS %.3g", name, rq);
        printf("%s: KV vs f32 max |delta| / RMS: f16 %.4f / %.4f, i16 %.4f / %.4f, q8_0 %.4f / %.4f, i8 %.4f / %.4f\n",
               name, dh, rh, di, ri16, dq, rq, d8, r8d);
        free(f); free(h); free(q); free(i16); free(i8);
    }
    runner_free(&rf);
    runner_free(&rh);
    runner_free(&rq);
    runner_free(&ri);
    runner_free(&r8);
    kw_model_free(m);
}

static void test_q8_kv_needs_head_dim_32(void) {
    kw_model *m = load("stories260K");       /* head_dim 8 */
    if (!m) return;
    kw_kv_layout lay = kw_model_kv_layout(m, KW_TYPE_Q8_0, 32);
    kw_err err = {{0}};
    KW_CHECK(kw_kv_pool_create(&lay, 4, &err) == NULL);
    KW_CHECK_MSG(strstr(err.msg, "head_dim") != NULL, "%s", err.msg);
    kw_session_opts o = {.n_ctx = 64, .kv_type = KW_TYPE_Q8_0, .n_threads = 1};
    KW_CHECK(kw_session_create(m, &o, &err) == NULL);
    kw_model_free(m);
}

/* Mixture of experts: one token marks exactly its k experts per layer as
 * used, and the byte counter counts them with every layer matrix and the
 * LM head; a batch reads each expert it uses once. */
static void test_expert_use(kw_pool *pool) {
    kw_model *m = load("qwen3moe-q8_0");
    if (!m) return;
    const kw_hparams *hp = kw_model_hparams(m);
    kw_expert_stats st;
    KW_CHECK(kw_model_expert_stats(m, &st) && st.n_used == 0 && st.used_bytes == 0);
    KW_CHECK_EQ_INT(st.mapped_bytes, hp->expert_bytes);
    KW_CHECK_EQ_INT(st.n_experts, hp->n_layer * hp->n_expert);
    runner r;
    if (runner_init(&r, m, pool, KW_TYPE_F32, 16, 32, 4) == 0) {
        uint64_t expert = hp->expert_bytes / (uint64_t)(hp->n_layer * hp->n_expert);   /* gate + up + down of one */
        int32_t T[32];
        make_tokens(T, 32, r.n_vocab, 9);
        float *lg = malloc((size_t)32 * r.n_vocab * 4);
        uint64_t before = kw_ctx_weight_bytes_read(r.ctx);
        run_alone(&r, T, 1, 1, lg);
        uint64_t one = kw_ctx_weight_bytes_read(r.ctx) - before;
        KW_CHECK(kw_model_expert_stats(m, &st));
        KW_CHECK_EQ_INT(st.n_used, hp->n_layer * hp->n_expert_used);
        KW_CHECK_EQ_INT(st.used_bytes, (uint64_t)st.n_used * expert);
        /* decode: the dense matrices, the LM head, k experts per layer */
        kw_mem_span sp[64];
        int n = kw_model_decode_spans(m, sp, 64);
        uint64_t spans = 0;
        for (int i = 0; i < n && i < 64; i++) spans += sp[i].bytes;
        KW_CHECK_EQ_INT(one, spans);
        /* 32 tokens: each chosen expert once, at most every expert */
        before = kw_ctx_weight_bytes_read(r.ctx);
        run_alone(&r, T, 32, 32, lg);
        uint64_t many = kw_ctx_weight_bytes_read(r.ctx) - before;
        /* an expert read as its packed copy counts the copy's bytes (a little over the stored ones) */
        KW_CHECK(kw_model_expert_stats(m, &st));
        uint64_t pe = st.n_packed ? st.packed_bytes / (uint64_t)st.n_packed : expert;
        KW_CHECK(!st.packing || (st.n_packed == st.n_used && pe >= expert && pe < expert + expert / 50));
        KW_CHECK(many > one && many <= one + (uint64_t)(hp->n_layer * (hp->n_expert - hp->n_expert_used)) * pe);
        KW_CHECK(kw_model_expert_stats(m, &st) && st.n_used > hp->n_layer * hp->n_expert_used);
        printf("qwen3moe: one token reads %llu weight bytes; 32 tokens %llu; %d of %d experts used\n",
               (unsigned long long)one, (unsigned long long)many, st.n_used, st.n_experts);
        free(lg);
    }
    runner_free(&r);
    kw_model_free(m);
    kw_model *d = load("qwen3-q8_0");
    KW_CHECK(d && !kw_model_expert_stats(d, &st) && st.mapped_bytes == 0);
    kw_model_free(d);
}

/* The experts no token has chosen are mapped but not resident: what the
 * kernel's page tables say of the expert tensors (kw_expert_stats
 * resident_bytes) is about nothing after loading and about the chosen
 * experts after one token. The kernel maps file pages a folio at a time and
 * faults around a touched page (readahead of a cold file builds folios of
 * up to 128 KiB; fault-around maps 64 KiB), so the file is dropped from the
 * page cache first and the slack is RESIDENT_SLACK at each end of every
 * touched range, against the 557 KiB of one expert matrix here. */
#define RESIDENT_SLACK (256u << 10)

/* Writes the file's dirty pages and drops it from the page cache, so the
 * model's faults read it cold (the folio sizes of a freshly written file
 * can reach 2 MiB). */
static void drop_page_cache(const char *path) {
    int fd = open(path, O_RDONLY);
    KW_CHECK(fd >= 0);
    if (fd < 0) return;
    KW_CHECK(fdatasync(fd) == 0);
    KW_CHECK(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
    close(fd);
}

static void test_expert_residency(kw_pool *pool) {
    kw_mk_shape s;
    kw_err err = {{0}};
    KW_CHECK(kw_mk_preset("tiny-moe", &s, &err) == 0);
    s.n_layer = 2;
    s.n_ff_exp = 2048;
    char path[1024];
    snprintf(path, sizeof path, "%s/moe-resident.gguf", kw_test_tmpdir());
    KW_CHECK_MSG(kw_mk_write(&s, KW_TYPE_Q8_0, 7, path, &err) == 0, "%s", err.msg);
    drop_page_cache(path);
    kw_model *m = kw_model_load(path, NULL, &err);
    KW_CHECK_MSG(m != NULL, "%s", err.msg);
    if (!m) return;
    kw_expert_stats st;
    KW_CHECK(kw_model_expert_stats(m, &st));
    if (st.resident_bytes == UINT64_MAX) {
        printf("expert residency: /proc/self/pagemap unreadable, not checked\n");
        kw_model_free(m);
        return;
    }
    const uint64_t slack = (uint64_t)s.n_layer * 2 * RESIDENT_SLACK;   /* the router's neighbours, read at load */
    uint64_t loaded = st.resident_bytes;
    KW_CHECK_MSG(loaded <= slack, "after loading %llu of %llu expert bytes are resident", (unsigned long long)loaded,
                 (unsigned long long)st.mapped_bytes);
    runner r;
    if (runner_init(&r, m, pool, KW_TYPE_F32, 16, 4, 4) == 0) {
        int32_t T[1] = {5};
        float *lg = malloc((size_t)r.n_vocab * 4);
        run_alone(&r, T, 1, 1, lg);
        KW_CHECK(kw_model_expert_stats(m, &st));
        KW_CHECK_EQ_INT(st.n_used, s.n_layer * s.n_expert_used);
        printf("expert residency: mapped %llu, resident after load %llu, after one token %llu (used %llu)\n",
               (unsigned long long)st.mapped_bytes, (unsigned long long)loaded, (unsigned long long)st.resident_bytes,
               (unsigned long long)st.used_bytes);
        KW_CHECK(st.resident_bytes >= st.used_bytes);
        KW_CHECK(st.resident_bytes <= st.used_bytes + slack + (uint64_t)st.n_used * 3 * 2 * RESIDENT_SLACK);
        KW_CHECK(st.resident_bytes * 2 < st.mapped_bytes);   /* 2 of 8 experts per layer: most are not resident */
        free(lg);
    }
    runner_free(&r);
    kw_model_free(m);
    remove(path);
}

/* --experts: first-use packs exactly the experts tokens chose and drops
 * their mapped pages; load packs every expert before any token (the same
 * logits: every computation uses the packed copies either way); mapped
 * never packs; load with --mlock is refused. */
static void eval_logits(const kw_model *m, const int32_t *T, int n, float *out) {
    kw_err err = {{0}};
    kw_session_opts so = {.n_ctx = n + 1, .max_batch = n, .n_threads = 2};
    kw_session *s = kw_session_create(m, &so, &err);
    KW_CHECK_MSG(s != NULL, "%s", err.msg);
    if (!s) return;
    KW_CHECK(kw_session_eval(s, T, n, false, &err) == 0);
    const float *lg = kw_session_logits(s, -1);
    KW_CHECK(lg != NULL);
    if (lg) memcpy(out, lg, (size_t)kw_model_hparams(m)->n_vocab * sizeof *out);
    kw_session_free(s);
}

static void test_experts_modes(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/qwen3moe-q8_0.gguf", g_models);
    kw_err err = {{0}};
    kw_model_opts first = {.experts = KW_EXPERTS_FIRST_USE}, load_all = {.experts = KW_EXPERTS_LOAD},
                  mapped = {.experts = KW_EXPERTS_MAPPED}, locked = {.experts = KW_EXPERTS_LOAD, .mlock = true};
    kw_model *a = kw_model_load(path, &first, &err), *b = a ? kw_model_load(path, &load_all, &err) : NULL;
    kw_model *c = b ? kw_model_load(path, &mapped, &err) : NULL;
    KW_CHECK_MSG(a && b && c, "%s", err.msg);
    if (a && b && c) {
        const kw_hparams *hp = kw_model_hparams(a);
        int nv = hp->n_vocab;
        kw_expert_stats sa, sb, sc;
        KW_CHECK(kw_model_expert_stats(a, &sa) && sa.packing && sa.n_packed == 0 && sa.packed_bytes == 0);
        KW_CHECK(kw_model_expert_stats(b, &sb) && sb.packing && sb.n_packed == sb.n_experts);
        KW_CHECK(sb.packed_bytes >= sb.mapped_bytes && sb.packed_bytes - sb.mapped_bytes <= sa.pack_growth);
        KW_CHECK(sb.pack_growth < sa.pack_growth);   /* what is left of the allowance once all are packed */
        KW_CHECK(kw_model_expert_stats(c, &sc) && !sc.packing && sc.pack_growth == 0);
        int32_t T[6];
        make_tokens(T, 6, nv, 21);
        float *la = malloc((size_t)nv * 4), *lb = malloc((size_t)nv * 4), *lc = malloc((size_t)nv * 4);
        eval_logits(a, T, 6, la);
        eval_logits(b, T, 6, lb);
        eval_logits(c, T, 6, lc);
        KW_CHECK_MSG(!memcmp(la, lb, (size_t)nv * 4), "first-use and load packing give different logits");
        double worst = 0;
        for (int i = 0; i < nv; i++) worst = fmax(worst, fabs((double)la[i] - lc[i]));
        KW_CHECK_MSG(worst < 0.05, "packed and mapped experts: logits %.3g apart", worst);
        KW_CHECK(kw_model_expert_stats(a, &sa) && sa.n_packed == sa.n_used && sa.n_used > 0);
        KW_CHECK(sa.packed_bytes >= sa.used_bytes);
        KW_CHECK(kw_model_expert_stats(c, &sc) && sc.n_packed == 0 && sc.n_used > 0);
        printf("experts: first-use %d of %d packed after 6 tokens (%llu bytes), load %d, mapped %d; mapped vs packed "
               "logits %.3g\n", sa.n_packed, sa.n_experts, (unsigned long long)sa.packed_bytes, sb.n_packed,
               sc.n_packed, worst);
        free(la); free(lb); free(lc);
    }
    kw_model_free(a);
    kw_model_free(b);
    kw_model_free(c);
    err = (kw_err){{0}};
    kw_model *d = kw_model_load(path, &locked, &err);
    KW_CHECK(d == NULL);
    KW_CHECK_MSG(strstr(err.msg, "mlock") != NULL, "%s", err.msg);
    kw_model_free(d);
}

static void test_workspace_bytes(kw_pool *pool) {
    const char *names[] = {"stories260K", "qwen3-q8_0", "llama-q8_0", "qwen3moe-q8_0"};
    for (size_t i = 0; i < 4; i++) {
        kw_model *m = load(names[i]);
        if (!m) continue;
        uint64_t before = kw_mem_current(KW_MEM_WORKSPACE) + kw_mem_current(KW_MEM_SCRATCH);
        kw_err err = {{0}};
        kw_ctx *c = kw_ctx_create(m, pool, 123, 1000, &err);
        KW_CHECK_MSG(c != NULL, "%s", err.msg);
        uint64_t used = kw_mem_current(KW_MEM_WORKSPACE) + kw_mem_current(KW_MEM_SCRATCH) - before;
        size_t want = kw_ctx_workspace_bytes(kw_model_hparams(m), 123, 1000, kw_pool_size(pool));
        KW_CHECK_MSG(used == want, "%s: ctx allocated %llu, workspace_bytes says %zu", names[i], (unsigned long long)used, want);
        KW_CHECK(want > 0);
        /* grows with the batch */
        KW_CHECK(kw_ctx_workspace_bytes(kw_model_hparams(m), 246, 1000, 2) > kw_ctx_workspace_bytes(kw_model_hparams(m), 123, 1000, 2));
        kw_ctx_free(c);
        KW_CHECK_EQ_INT(kw_mem_current(KW_MEM_WORKSPACE) + kw_mem_current(KW_MEM_SCRATCH), before);
        kw_model_free(m);
    }
}

/* A recurrent state moves only forward: a batch that skips or repeats a
 * position, or carries no state, is refused before anything is written;
 * a fresh start at 0 clears the state; a saved copy restores it. */
static void test_recurrent_states(kw_pool *pool) {
    kw_model *m = load("qwen35-f32");
    if (!m) return;
    enum { N = 24 };
    runner r;
    if (runner_init(&r, m, pool, KW_TYPE_F32, 16, N, 4) == 0) {
        int V = r.n_vocab;
        size_t rec = (size_t)kw_model_hparams(m)->rec_state_bytes;
        KW_CHECK_EQ_INT((long long)rec, 116736);   /* the conformance README: 29,184 F32 values */
        int32_t T[N];
        make_tokens(T, N, V, 5);
        float *ref = malloc((size_t)N * V * 4), *got = malloc((size_t)N * V * 4), *saved = malloc(rec);
        run_alone(&r, T, N, N, ref);
        KW_CHECK_EQ_INT(r.st[0].n_past, N);
        kw_block_table t = {0};
        kw_block_table *tabs[1] = {&t};
        KW_CHECK(kw_block_table_ensure(&t, r.kv, N) == 0);
        int32_t pos[N], seq[N] = {0};
        for (int i = 0; i < N; i++) pos[i] = i;
        kw_err err = {{0}};
        kw_batch b = {.n_tokens = 10, .tokens = T, .pos = pos, .seq = seq, .tables = tabs, .states = r.states};
        KW_CHECK(kw_forward(r.ctx, r.kv, &b, got, &err) == 0);   /* restart at 0: the old state is cleared */
        memcpy(saved, r.st[0].data, rec);
        b.n_tokens = 4;
        b.tokens = T + 12;
        b.pos = pos + 12;                                          /* skips 10, 11 */
        KW_CHECK(kw_forward(r.ctx, r.kv, &b, got, &err) == -1 && strstr(err.msg, "recurrent state is at 10"));
        KW_CHECK(memcmp(saved, r.st[0].data, rec) == 0 && r.st[0].n_past == 10);
        int32_t dup[2] = {10, 10};                                 /* one position twice */
        b.n_tokens = 2;
        b.tokens = T + 10;
        b.pos = dup;
        KW_CHECK(kw_forward(r.ctx, r.kv, &b, got, &err) == -1 && strstr(err.msg, "in order"));
        b.states = NULL;
        b.pos = pos + 10;
        KW_CHECK(kw_forward(r.ctx, r.kv, &b, got, &err) == -1 && strstr(err.msg, "no states"));
        b.states = r.states;
        b.n_tokens = N - 10;                                       /* continue at 10: the same as one batch */
        KW_CHECK(kw_forward(r.ctx, r.kv, &b, got, &err) == 0);
        double d = max_diff(got, ref + (size_t)(N - 1) * V, (size_t)V);
        KW_CHECK_MSG(d <= TOL_BATCH, "continued after refusals: %.3g", d);
        memcpy(r.st[0].data, saved, rec);                          /* restore the state saved at 10 */
        r.st[0].n_past = 10;
        KW_CHECK(kw_forward(r.ctx, r.kv, &b, got, &err) == 0);
        d = max_diff(got, ref + (size_t)(N - 1) * V, (size_t)V);
        KW_CHECK_MSG(d <= TOL_BATCH, "resumed from a saved state: %.3g", d);
        kw_block_table_release(&t, r.kv);
        kw_block_table_free(&t);
        free(ref); free(got); free(saved);
    }
    runner_free(&r);
    kw_model_free(m);
}

/* The session's checkpoint: rewinding a hybrid model goes back to the saved
 * position (same logits as the first time), anywhere else is refused. */
static void test_session_checkpoint(void) {
    kw_model *m = load("qwen35-q8_0");
    if (!m) return;
    kw_err err = {{0}};
    kw_session_opts o = {.n_ctx = 64, .n_threads = 1};
    kw_session *s = kw_session_create(m, &o, &err);
    KW_CHECK_MSG(s != NULL, "%s", err.msg);
    if (s) {
        int V = kw_model_hparams(m)->n_vocab;
        int32_t T[20];
        make_tokens(T, 20, V, 9);
        float *first = malloc((size_t)V * 4);
        KW_CHECK(kw_session_eval(s, T, 12, false, &err) == 0 && kw_session_checkpoint(s, &err) == 0);
        KW_CHECK(kw_session_eval(s, T + 12, 8, false, &err) == 0);
        memcpy(first, kw_session_logits(s, -1), (size_t)V * 4);
        kw_session_rewind(s, 12);
        KW_CHECK(kw_session_eval(s, T + 12, 8, false, &err) == 0);
        KW_CHECK(max_diff(first, kw_session_logits(s, -1), (size_t)V) == 0.0);
        kw_session_rewind(s, 5);                                   /* no state saved at 5 */
        KW_CHECK(kw_session_eval(s, T + 5, 1, false, &err) == -1 && strstr(err.msg, "cannot be rewound"));
        kw_session_rewind(s, 0);
        KW_CHECK(kw_session_eval(s, T, 20, false, &err) == 0);
        KW_CHECK(max_diff(first, kw_session_logits(s, -1), (size_t)V) <= TOL_BATCH);
        free(first);
    }
    kw_session_free(s);
    kw_model_free(m);
}

static void test_bad_batches(kw_pool *pool) {
    kw_model *m = load("stories260K");
    if (!m) return;
    runner r;
    if (runner_init(&r, m, pool, KW_TYPE_F32, 16, 8, 2) == 0) {
        kw_block_table t = {0};
        kw_block_table *tabs[1] = {&t};
        KW_CHECK(kw_block_table_ensure(&t, r.kv, 16) == 0);
        int32_t tok[2] = {1, 2}, pos[2] = {0, 1}, seq[2] = {0, 0};
        float logits[512];
        kw_err err = {{0}};
        kw_batch b = {.n_tokens = 2, .tokens = tok, .pos = pos, .seq = seq, .tables = tabs};
        KW_CHECK(kw_forward(r.ctx, r.kv, &b, logits, &err) == 0);
        tok[1] = 512;                                   /* outside the vocabulary */
        KW_CHECK(kw_forward(r.ctx, r.kv, &b, logits, &err) == -1 && strstr(err.msg, "vocabulary"));
        tok[1] = 2;
        pos[1] = 16;                                    /* table covers 16 positions */
        KW_CHECK(kw_forward(r.ctx, r.kv, &b, logits, &err) == -1 && strstr(err.msg, "block table"));
        pos[1] = 1;
        b.n_tokens = 9;                                 /* ctx takes 8 */
        KW_CHECK(kw_forward(r.ctx, r.kv, &b, logits, &err) == -1);
        b.n_tokens = 2;
        kw_kv_ref(r.kv, t.ids[0]);                      /* shared block: must not be written */
        KW_CHECK(kw_forward(r.ctx, r.kv, &b, logits, &err) == -1 && strstr(err.msg, "shared"));
        kw_kv_unref(r.kv, t.ids[0]);
        KW_CHECK(kw_forward(r.ctx, r.kv, &b, logits, &err) == 0);
        kw_block_table_release(&t, r.kv);
        kw_block_table_free(&t);
    }
    runner_free(&r);
    kw_model_free(m);
}

int main(void) {
    const char *shared = kw_test_shared_dir();
    static char models[1024];
    snprintf(models, sizeof models, "%s/conformance/models", shared);
    g_models = models;
    kw_pool *pool = kw_pool_create(2);
    test_interleaved("stories260K", pool);
    test_interleaved("llama-q4_0", pool);
    test_interleaved("qwen3-q8_0", pool);
    test_interleaved("qwen3moe-q8_0", pool);
    test_interleaved("qwen35-f32", pool);
    test_interleaved("qwen35-q8_0", pool);
    test_chunks_and_blocks("stories260K", pool);
    test_chunks_and_blocks("qwen2-q8_0", pool);
    test_chunks_and_blocks("llama-q4_k_m", pool);
    test_chunks_and_blocks("qwen3moe-q8_0", pool);
    test_chunks_and_blocks("qwen35-f32", pool);
    test_chunks_and_blocks("qwen35-q8_0", pool);
    test_recurrent_states(pool);
    test_session_checkpoint();
    test_expert_use(pool);
    test_expert_residency(pool);
    test_experts_modes();
    test_kv_types("llama-q4_0", pool);
    test_kv_types("qwen3-q8_0", pool);
    test_kv_types("llama-f16", pool);
    test_q8_kv_needs_head_dim_32();
    test_workspace_bytes(pool);
    test_bad_batches(pool);
    kw_pool_destroy(pool);
    return kw_test_finish();
}
