/* forward.c - the transformer forward pass over a batch of tokens (model.h).
 *
 * Owns: the workspace (kw_ctx: activations in one KW_MEM_WORKSPACE block,
 * matmul + per-thread attention scratch in one KW_MEM_SCRATCH block, both
 * sized by plan_workspace(), which kw_ctx_workspace_bytes() reports), and
 * kw_forward(): embedding lookup -> per layer [RMSNorm -> Q/K/V projections
 * (+ qwen2 biases, qwen3 per-head q/k RMSNorm) -> RoPE -> K/V written at
 * each token's position through its sequence's block table -> causal GQA
 * attention over the paged KV -> output projection -> residual -> RMSNorm
 * -> SiLU-gated FFN -> residual] -> final RMSNorm -> LM head for the rows
 * that want logits.
 *
 * Numerics follow llama.cpp's CPU backend where it matters for the
 * conformance oracle: RMSNorm sums squares in double, RoPE angles are
 * built by repeated multiplication by base^(-2/d). Attention and the SwiGLU
 * are kernels of the active kernel set (src/tensor/attn.h, kernels.h): this
 * file hands out the attention work items and says which KV blocks they
 * read. The matmuls (kw_matmul) quantize activations to the weight's dot type. */
#include "model_internal.h"
#include "kvwise/memory.h"
#include "tensor/kernels.h"
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- workspace plan (one source of truth for ctx_create and the ledger) ---- */

typedef struct ws_plan {
    size_t x, xn, q, k, v, att, tmp, gate, up, rope, rows;  /* byte offsets in work */
    size_t router, sel, wts, moe;                            /* mixture of experts (else unused) */
    size_t qg, agate;                                        /* gated attention: attn_q's q|gate rows, the gates */
    size_t ssm_m, ssm_z, ssm_beta, ssm_alpha, ssm_o;         /* gated delta net (else unused) */
    size_t grp, order, bseq_off, bseq_id;                    /* the batch's tokens grouped by sequence */
    size_t work_bytes;
    size_t mm_bytes;            /* matmul scratch at the start of scratch */
    size_t att_floats;          /* per-thread attention scratch, in floats */
    size_t scratch_bytes;
} ws_plan;

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

static size_t take(size_t *off, size_t bytes) {
    size_t at = *off;
    *off += round64(bytes);
    return at;
}

/* Largest matmul scratch over every weight type this matrix shape could have. */
static size_t matmul_scratch_any_type(int64_t rows, int64_t cols, int64_t n) {
    static const uint32_t types[] = {KW_TYPE_F32, KW_TYPE_F16, KW_TYPE_BF16, KW_TYPE_Q8_0, KW_TYPE_Q4_0,
                                     KW_TYPE_Q4_1, KW_TYPE_Q5_0, KW_TYPE_Q5_1, KW_TYPE_Q4_K, KW_TYPE_Q5_K,
                                     KW_TYPE_Q6_K};
    size_t best = 0;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        size_t rb = kw_row_bytes(types[i], cols);
        if (rb == 0) continue;
        kw_matrix W = {.type = types[i], .rows = rows, .cols = cols, .row_bytes = rb};
        size_t s = kw_matmul_scratch_bytes(&W, n);
        if (s > best) best = s;
    }
    return best;
}

/* The width of the dense SwiGLU a layer runs through kw_matmul: n_ff, or
 * for a mixture of experts the shared expert's (0 without one: the routed
 * experts have their own scratch, kw_moe_scratch_bytes). */
static int64_t dense_ff(const kw_hparams *hp) { return hp->n_expert > 0 ? hp->n_ff_shexp : hp->n_ff; }

/* A gated delta net's convolution channels: q | k | v (0 without such layers). */
static int64_t conv_dim(const kw_hparams *hp) {
    return hp->n_rec_layers > 0 ? 2 * (int64_t)hp->ssm_n_group * hp->ssm_d_state + hp->ssm_d_inner : 0;
}

static size_t matmul_scratch_model(const kw_hparams *hp, int64_t n) {
    int64_t E = hp->n_embd, ff = dense_ff(hp) > 0 ? dense_ff(hp) : E;
    int64_t shapes[][2] = {
        {(int64_t)hp->n_head * hp->head_dim_k, E}, {(int64_t)hp->n_head_kv * hp->head_dim_k, E},
        {(int64_t)hp->n_head_kv * hp->head_dim_v, E}, {E, (int64_t)hp->n_head * hp->head_dim_v},
        {ff, E}, {E, ff}, {hp->n_vocab, E}, {hp->n_expert > 0 ? hp->n_expert : 1, E},
        {2 * (int64_t)hp->n_head * hp->head_dim_k, E},                       /* gated attention's attn_q */
        {conv_dim(hp) > 0 ? conv_dim(hp) : 1, E}, {hp->ssm_d_inner > 0 ? hp->ssm_d_inner : 1, E},
        {hp->ssm_dt_rank > 0 ? hp->ssm_dt_rank : 1, E}, {E, hp->ssm_d_inner > 0 ? hp->ssm_d_inner : 1},
    };
    size_t best = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        size_t s = matmul_scratch_any_type(shapes[i][0], shapes[i][1], n);
        if (s > best) best = s;
    }
    return best;
}

static void plan_workspace(const kw_hparams *hp, int32_t T, int32_t C, int n_threads, ws_plan *p) {
    size_t f = sizeof(float), t = (size_t)T, off = 0;
    size_t E = (size_t)hp->n_embd, hk = (size_t)hp->head_dim_k, hv = (size_t)hp->head_dim_v;
    memset(p, 0, sizeof *p);
    p->x = take(&off, t * E * f);
    p->xn = take(&off, t * E * f);
    p->q = take(&off, t * (size_t)hp->n_head * hk * f);
    p->k = take(&off, t * (size_t)hp->n_head_kv * hk * f);
    p->v = take(&off, t * (size_t)hp->n_head_kv * hv * f);
    p->att = take(&off, t * (size_t)hp->n_head * hv * f);
    p->tmp = take(&off, t * E * f);
    p->gate = take(&off, t * (size_t)dense_ff(hp) * f);
    p->up = take(&off, t * (size_t)dense_ff(hp) * f);
    p->rope = take(&off, t * (size_t)hp->rope_dim * f);
    p->rows = take(&off, t * sizeof(int32_t));
    if (hp->n_expert > 0) {
        size_t k = (size_t)hp->n_expert_used;
        p->router = take(&off, t * (size_t)hp->n_expert * f);
        p->sel = take(&off, t * k * sizeof(int32_t));
        p->wts = take(&off, t * k * f);
        p->moe = take(&off, kw_moe_scratch_bytes(hp->n_embd, hp->n_ff_exp, hp->n_expert, T, hp->n_expert_used));
    }
    if (hp->arch && hp->arch->attn_output_gate) {
        p->qg = take(&off, t * 2 * (size_t)hp->n_head * hk * f);
        p->agate = take(&off, t * (size_t)hp->n_head * hv * f);
    }
    if (hp->n_rec_layers > 0) {
        size_t inner = (size_t)hp->ssm_d_inner, heads = (size_t)hp->ssm_dt_rank;
        p->ssm_m = take(&off, t * (size_t)conv_dim(hp) * f);
        p->ssm_z = take(&off, t * inner * f);
        p->ssm_beta = take(&off, t * heads * f);
        p->ssm_alpha = take(&off, t * heads * f);
        p->ssm_o = take(&off, t * inner * f);
    }
    p->grp = take(&off, t * sizeof(int32_t));
    p->order = take(&off, t * sizeof(int32_t));
    p->bseq_off = take(&off, (t + 1) * sizeof(int32_t));
    p->bseq_id = take(&off, t * sizeof(int32_t));
    p->work_bytes = off;
    /* per thread, for the G query heads of one KV head: scores[G][C], q[G][hk], acc[G][hv] */
    size_t G = (size_t)(hp->n_head / hp->n_head_kv);
    p->att_floats = round64(G * ((size_t)C + hk + hv) * f) / f;
    size_t i16f = round64(kw_attn_i16_floats((int)G, (int)hk, (int)hv, C) * f) / f;   /* i16 decode (tensor/attn_i16.c) */
    if (i16f > p->att_floats) p->att_floats = i16f;
    if (T >= 2) {   /* prefill tiles (tensor/attn_avx512.c, attn_i16_avx512.c) */
        size_t tf = round64(kw_attn_tile_floats((int)hk, (int)hv, C) * f) / f;
        if (tf > p->att_floats) p->att_floats = tf;
        int per = kw_attn_tile_tokens((int)G);
        i16f = round64(kw_attn_i16_floats(per * (int)G, (int)hk, (int)hv, C) * f) / f;
        if (i16f > p->att_floats) p->att_floats = i16f;
    }
    p->mm_bytes = round64(matmul_scratch_model(hp, T));
    p->scratch_bytes = p->mm_bytes + (size_t)(n_threads > 0 ? n_threads : 1) * p->att_floats * f;
}

size_t kw_ctx_workspace_bytes(const kw_hparams *hp, int32_t max_tokens, int32_t max_ctx, int n_threads) {
    if (!hp || max_tokens < 1 || max_ctx < 1) return 0;
    ws_plan p;
    plan_workspace(hp, max_tokens, max_ctx, n_threads, &p);
    return p.work_bytes + p.scratch_bytes;
}

/* ---- the context ---- */

struct kw_ctx {
    const kw_model *m;
    kw_pool *pool;
    int n_threads;
    int32_t max_tokens, max_ctx;
    ws_plan plan;
    uint8_t *work, *scratch;
    float *x, *xn, *q, *k, *v, *att, *tmp, *gate, *up, *rope;
    int32_t *rows;
    void *mm_scratch;
    float *router, *wts;        /* mixture of experts: router probabilities, chosen experts' weights */
    int32_t *sel;               /* the chosen experts, [token][n_expert_used] */
    void *moe_scratch;
    float *qg, *agate;          /* gated attention */
    float *ssm_m, *ssm_z, *ssm_beta, *ssm_alpha, *ssm_o;   /* gated delta net: conv in/out, z, beta, decay, output */
    int32_t *grp;               /* [token] its sequence's index among the batch's sequences */
    int32_t *order;             /* the batch's token indices grouped by sequence, in batch order within each */
    int32_t *bseq_off;          /* [n_bseq + 1] where each sequence's tokens start in order[] */
    int32_t *bseq_id;           /* [n_bseq] the sequence (index into the batch's tables/states) */
    int32_t n_bseq;
    uint64_t bytes_read;        /* weight bytes the forward passes have read (kw_ctx_weight_bytes_read) */
    uint64_t layer_bytes;       /* what one pass reads of the layer matrices (all of them) */
    /* set per layer for the attention task */
    kw_kv_pool *kv;
    const kw_batch *b;
    int layer;
    const kw_kernel_set *ks;    /* the active kernels (attention entries) */
    int32_t n_tiles;            /* prefill attention tiles (starts in rows[]) */
    _Atomic int64_t next_item;  /* the next attention item a thread takes (decode and prefill tiles) */
};

kw_ctx *kw_ctx_create(const kw_model *m, kw_pool *pool, int32_t max_tokens, int32_t max_ctx, kw_err *err) {
    if (!m) { kw_err_set(err, "ctx: no model"); return NULL; }
    if (max_tokens < 1 || max_tokens > (1 << 20) || max_ctx < 1 || max_ctx > (1 << 24)) {
        kw_err_set(err, "ctx: batch size %d / context %d out of range", max_tokens, max_ctx);
        return NULL;
    }
    if (m->hp.arch->attn_output_gate && m->hp.head_dim_k != m->hp.head_dim_v) {
        kw_err_set(err, "ctx: %s: gated attention needs equal key and value head dims (%d, %d)", m->hp.arch_name,
                   m->hp.head_dim_k, m->hp.head_dim_v);
        return NULL;
    }
    kw_ctx *c = calloc(1, sizeof *c);
    if (!c) { kw_err_set(err, "ctx: out of memory"); return NULL; }
    c->m = m;
    c->pool = pool;
    c->n_threads = pool ? kw_pool_size(pool) : 1;
    c->max_tokens = max_tokens;
    c->max_ctx = max_ctx;
    plan_workspace(&m->hp, max_tokens, max_ctx, c->n_threads, &c->plan);
    /* On transparent huge pages, as the weights and the KV pool: a 512-token
     * prefill walks tens of MiB of activations (gate/up 16 MiB each for the
     * 1B shape, the quantized rows 25 MiB), which in 4 KiB pages cost TLB
     * misses on every pass and ~20k page faults on the first one. Measured
     * on the same pages (bench_ab knob variants, each with its own session):
     * F16 pp512 1.061x / 1.037x (same build 1.012x), Q4_0 1.023x / 1.030x
     * (same build 0.992x), decode level; a fresh session's first pp512 of F16
     * 178-258 -> 272-307 tok/s (kvwise bench, rep 1 of 3). */
    c->work = kw_mem_alloc_huge(KW_MEM_WORKSPACE, c->plan.work_bytes);
    c->scratch = kw_mem_alloc_huge(KW_MEM_SCRATCH, c->plan.scratch_bytes);
    if (!c->work || !c->scratch) {
        kw_err_set(err, "ctx: cannot allocate the workspace (%zu + %zu bytes)", c->plan.work_bytes, c->plan.scratch_bytes);
        kw_ctx_free(c);
        return NULL;
    }
    const ws_plan *p = &c->plan;
    c->x = (float *)(c->work + p->x);
    c->xn = (float *)(c->work + p->xn);
    c->q = (float *)(c->work + p->q);
    c->k = (float *)(c->work + p->k);
    c->v = (float *)(c->work + p->v);
    c->att = (float *)(c->work + p->att);
    c->tmp = (float *)(c->work + p->tmp);
    c->gate = (float *)(c->work + p->gate);
    c->up = (float *)(c->work + p->up);
    c->rope = (float *)(c->work + p->rope);
    c->rows = (int32_t *)(c->work + p->rows);
    c->mm_scratch = c->scratch;
    c->layer_bytes = kw_model_layer_matrix_bytes(m);
    if (m->hp.n_expert > 0) {
        c->router = (float *)(c->work + p->router);
        c->sel = (int32_t *)(c->work + p->sel);
        c->wts = (float *)(c->work + p->wts);
        c->moe_scratch = c->work + p->moe;
    }
    if (m->hp.arch->attn_output_gate) {
        c->qg = (float *)(c->work + p->qg);
        c->agate = (float *)(c->work + p->agate);
    }
    if (m->hp.n_rec_layers > 0) {
        c->ssm_m = (float *)(c->work + p->ssm_m);
        c->ssm_z = (float *)(c->work + p->ssm_z);
        c->ssm_beta = (float *)(c->work + p->ssm_beta);
        c->ssm_alpha = (float *)(c->work + p->ssm_alpha);
        c->ssm_o = (float *)(c->work + p->ssm_o);
    }
    c->grp = (int32_t *)(c->work + p->grp);
    c->order = (int32_t *)(c->work + p->order);
    c->bseq_off = (int32_t *)(c->work + p->bseq_off);
    c->bseq_id = (int32_t *)(c->work + p->bseq_id);
    return c;
}

void kw_ctx_free(kw_ctx *c) {
    if (!c) return;
    kw_mem_free(c->work);
    kw_mem_free(c->scratch);
    free(c);
}

/* ---- elementwise ops ---- */

/* y = x / sqrt(mean(x^2) + eps) * w (w may be NULL). The sum of squares
 * is in double, as 16 partial sums (value i into sum i % 16, in order)
 * added in order 0..15: the same bits on every CPU and thread count, and
 * 16 independent chains where one chain of dependent adds took ~4 cycles
 * per value (1B F16 prefill, one thread: 1.0% of the GEMM's perf samples,
 * now 0.57%). */
static void rmsnorm(float *y, const float *x, const float *w, int n, float eps) {
    double part[16] = {0};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++) part[l] += (double)(x[i + l] * x[i + l]);
    for (; i < n; i++) part[i % 16] += (double)(x[i] * x[i]);
    double ss = 0.0;
    for (int l = 0; l < 16; l++) ss += part[l];
    float mean = (float)(ss / n);
    float scale = 1.0f / sqrtf(mean + eps);
    if (w) for (int i = 0; i < n; i++) y[i] = (x[i] * scale) * w[i];
    else for (int i = 0; i < n; i++) y[i] = x[i] * scale;
}

static void rmsnorm_rows(float *y, const float *x, const float *w, int64_t rows, int n, float eps) {
    for (int64_t r = 0; r < rows; r++) rmsnorm(y + r * n, x + r * n, w, n, eps);
}

static void add_inplace(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

static void add_bias_rows(float *y, const float *bias, int64_t rows, int n) {
    if (!bias) return;
    for (int64_t r = 0; r < rows; r++) add_inplace(y + r * n, bias, n);
}

static void embed_tokens(const kw_model *m, const int32_t *tokens, int32_t n, float *x) {
    const kw_matrix *E = &m->tok_embd;
    for (int32_t i = 0; i < n; i++) {
        const uint8_t *row = (const uint8_t *)E->data + (size_t)tokens[i] * E->row_bytes;
        if (E->type == KW_TYPE_F32) memcpy(x + (int64_t)i * E->cols, row, (size_t)E->cols * sizeof(float));
        else kw_dequantize_row(E->type, row, x + (int64_t)i * E->cols, E->cols);
    }
}

/* ---- RoPE ---- */

/* IMROPE (rope.dimension_sections [s0, s1, s2, s3], ARCHITECTURES.md):
 * whether rotary pair p rotates with the token's position. Each pair gets a
 * position channel t, h, w or e; text feeds (pos, pos, pos, 0), so every
 * channel but e rotates by the position and a pair on channel e stays put. */
static bool rope_pair_rotates(const int32_t sec[4], int p) {
    int S = sec[0] + sec[1] + sec[2] + sec[3];
    if (S <= 0) return true;
    int ch = p % S;
    if (ch % 3 == 1 && ch < 3 * sec[1]) return true;   /* h */
    if (ch % 3 == 2 && ch < 3 * sec[2]) return true;   /* w */
    return ch % 3 == 0 && ch < 3 * sec[0];             /* t, else e */
}

/* cos/sin pairs of every rotated pair for each token's position. */
static void rope_tables(const kw_model *m, const int32_t *pos, int32_t n, float *tab) {
    const kw_hparams *hp = &m->hp;
    int half = hp->rope_dim / 2;
    float theta_scale = powf(hp->rope_base, -2.0f / (float)hp->rope_dim);
    float freq_scale = 1.0f / hp->rope_scale;
    for (int32_t i = 0; i < n; i++) {
        float *t = tab + (int64_t)i * hp->rope_dim;
        float theta = (float)pos[i];
        for (int p = 0; p < half; p++) {
            float th = theta / (m->rope_freqs ? m->rope_freqs[p] : 1.0f) * freq_scale;
            bool rot = rope_pair_rotates(hp->rope_sections, p);
            t[2 * p] = rot ? cosf(th) : 1.0f;
            t[2 * p + 1] = rot ? sinf(th) : 0.0f;
            theta *= theta_scale;
        }
    }
}

/* Rotates one head of dimension hd in place; pairs are adjacent (2p, 2p+1)
 * or, for NEOX, (p, p + rope_dim/2). Dimensions past rope_dim are untouched. */
static void rope_head(float *h, const float *tab, int rope_dim, bool neox) {
    int half = rope_dim / 2;
    for (int p = 0; p < half; p++) {
        int i0 = neox ? p : 2 * p, i1 = neox ? p + half : 2 * p + 1;
        float c = tab[2 * p], s = tab[2 * p + 1];
        float a = h[i0], b = h[i1];
        h[i0] = a * c - b * s;
        h[i1] = a * s + b * c;
    }
}

static void rope_rows(const kw_hparams *hp, float *x, const float *tab, int32_t i0, int32_t i1, int n_heads, int hd) {
    for (int32_t i = i0; i < i1; i++)
        for (int h = 0; h < n_heads; h++)
            rope_head(x + ((int64_t)i * n_heads + h) * hd, tab + (int64_t)i * hp->rope_dim, hp->rope_dim, hp->rope_neox);
}

/* qwen3: RMSNorm over each head's values with gains w[hd]. */
static void head_norm_rows(float *x, const float *w, int64_t n_rows_heads, int hd, float eps) {
    for (int64_t r = 0; r < n_rows_heads; r++) rmsnorm(x + r * hd, x + r * hd, w, hd, eps);
}

/* ---- KV cache I/O ---- */

static void store_row(uint32_t type, const float *src, void *dst, int n) {
    if (type == KW_TYPE_F32) memcpy(dst, src, (size_t)n * sizeof(float));
    else if (type == KW_TYPE_F16) {
        uint16_t *d = dst;
        for (int i = 0; i < n; i++) d[i] = kw_f32_to_f16(src[i]);
    } else kw_quantize_row(type, src, dst, n);
}

/* K/V rows of batch tokens [i0, i1) into their blocks. Distinct (sequence,
 * position) pairs write disjoint slots (check_token refuses writes into
 * shared blocks), so token ranges can run on different threads; the
 * scheduler and kw_session never put one position of a sequence twice in a
 * batch (a batch that did would have had its later row win before, and is
 * a race now). */
static void store_kv(kw_ctx *c, kw_kv_pool *kv, const kw_batch *b, int il, int32_t i0, int32_t i1) {
    const kw_hparams *hp = &c->m->hp;
    int bt = kv->lay.block_tokens, nkv = hp->n_head_kv, hk = hp->head_dim_k, hv = hp->head_dim_v;
    il = c->m->layers[il].kv_layer;
    for (int32_t i = i0; i < i1; i++) {
        const kw_block_table *t = b->tables[b->seq[i]];
        int32_t id = t->ids[b->pos[i] / bt], slot = b->pos[i] % bt;
        for (int h = 0; h < nkv; h++) {
            const float *kx = c->k + ((int64_t)i * nkv + h) * hk, *vx = c->v + ((int64_t)i * nkv + h) * hv;
            if (kw_kv_type_is_int(kv->lay.type)) {   /* per-head regions (kv.h) */
                void (*put)(void *, int32_t, int32_t, const float *, int32_t, int) =
                    kv->lay.type == KW_TYPE_KV_I8 ? kw_kv_i8_put : kw_kv_i16_put;
                put(kw_kv_k(kv, id, il, h, 0), bt, slot, kx, hk, 0);
                put(kw_kv_v(kv, id, il, h, 0), bt, slot, vx, hv, 1);
                continue;
            }
            store_row(kv->lay.type, kx, kw_kv_k(kv, id, il, h, slot), hk);
            store_row(kv->lay.type, vx, kw_kv_v(kv, id, il, h, slot), hv);
        }
    }
}

/* ---- attention ----
 * One work item is (token, KV head): the n_head/n_head_kv query heads that
 * share that KV head are computed together (tensor/kernels.h
 * kw_attn_token), or in prefill (tile, KV head): up to
 * kw_attn_tile_tokens(G) consecutive tokens of one sequence (kw_attn_tile),
 * where the active set runs tiles for this shape (kw_attn_tiles). */

/* The kernel arguments of KV head kvh for batch tokens [i0, i0 + n_tok) of one sequence. */
static kw_attn_args attn_args(const kw_ctx *c, int32_t i0, int32_t n_tok, int kvh) {
    const kw_hparams *hp = &c->m->hp;
    const kw_batch *b = c->b;
    return (kw_attn_args){.q = c->q, .out = c->att, .kv = kw_kv_attn_view(c->kv, b->tables[b->seq[i0]]->ids, c->layer),
                          .pos = b->pos, .i0 = i0, .n_tok = n_tok, .kvh = kvh, .n_head = hp->n_head,
                          .G = hp->n_head / hp->n_head_kv, .hk = hp->head_dim_k, .hv = hp->head_dim_v};
}

/* Token i, KV head kvh: for each query head h of the group,
 * out_h = softmax(q_h . K[0..pos] / sqrt(hk)) . V[0..pos]. */
static void attend_group(kw_ctx *c, int32_t i, int kvh, float *scr) {
    kw_attn_args a = attn_args(c, i, 1, kvh);
    kw_attn_token(c->ks, &a, scr, c->max_ctx);
}

/* Decode: items (token, KV head) handed out through the same counter as
 * the prefill tiles, so a thread the host slows takes fewer heads (fixed
 * halves left the other waiting: 1.017x at depth 4096). */
static void attention_task(void *arg, int ith, int nth) {
    (void)nth;
    kw_ctx *c = arg;
    int64_t n_kv = c->m->hp.n_head_kv, items = (int64_t)c->b->n_tokens * n_kv;
    float *scr = (float *)((uint8_t *)c->scratch + c->plan.mm_bytes) + (size_t)ith * c->plan.att_floats;
    for (;;) {
        int64_t it = atomic_fetch_add_explicit(&c->next_item, 1, memory_order_relaxed);
        if (it >= items) break;
        attend_group(c, (int32_t)(it / n_kv), (int)(it % n_kv), scr);
    }
}

/* Prefill: items (tile, KV head) handed out through a counter (causal work
 * grows with the position, so a static split would be uneven). A tile of
 * one token takes the per-token path (same results, less set-up). */
static void attention_tiles_task(void *arg, int ith, int nth) {
    (void)nth;
    kw_ctx *c = arg;
    const kw_batch *b = c->b;
    int n_kv = c->m->hp.n_head_kv;
    float *scr = (float *)((uint8_t *)c->scratch + c->plan.mm_bytes) + (size_t)ith * c->plan.att_floats;
    for (;;) {
        int64_t it = atomic_fetch_add_explicit(&c->next_item, 1, memory_order_relaxed);
        if (it >= (int64_t)c->n_tiles * n_kv) break;
        int32_t tile = (int32_t)(it / n_kv), i0 = c->rows[tile];
        int32_t i1 = tile + 1 < c->n_tiles ? c->rows[tile + 1] : b->n_tokens;
        int kvh = (int)(it % n_kv);
        if (i1 - i0 == 1) { attend_group(c, i0, kvh, scr); continue; }
        kw_attn_args a = attn_args(c, i0, i1 - i0, kvh);
        kw_attn_tile(c->ks, &a, scr, c->max_ctx);
    }
}

/* Splits the batch into tiles of consecutive tokens of one sequence; 0 when
 * the tiled path does not apply (the active set has no tiles for this KV
 * type and head shape, or decode). */
static int32_t plan_tiles(kw_ctx *c, const kw_batch *b) {
    const kw_hparams *hp = &c->m->hp;
    int G = hp->n_head / hp->n_head_kv, per = kw_attn_tile_tokens(G);
    if (b->n_tokens < 2 || c->max_tokens < 2 || !kw_attn_tiles(c->ks, c->kv->lay.type, G, hp->head_dim_k, hp->head_dim_v))
        return 0;
    int32_t n = 0;
    for (int32_t i = 0; i < b->n_tokens; i++)
        if (i == 0 || b->seq[i] != b->seq[i - 1] || i - c->rows[n - 1] >= per) c->rows[n++] = i;
    return n;
}

/* Below this many multiply-adds a wake-up of the pool costs more than it saves. */
#define KW_ATTN_PARALLEL_MIN (1 << 17)

static void attention(kw_ctx *c, kw_kv_pool *kv, const kw_batch *b, int il) {
    c->kv = kv;
    c->b = b;
    c->layer = c->m->layers[il].kv_layer;
    c->ks = kw_kernels_active();
    const kw_hparams *hp = &c->m->hp;
    int64_t work = 0;
    for (int32_t i = 0; i < b->n_tokens; i++) work += (int64_t)b->pos[i] + 1;
    work *= (int64_t)hp->n_head * (hp->head_dim_k + hp->head_dim_v);
    c->n_tiles = plan_tiles(c, b);
    kw_task_fn task = c->n_tiles > 0 ? attention_tiles_task : attention_task;   /* both take items from next_item */
    atomic_store(&c->next_item, 0);
    if (c->pool && kw_pool_size(c->pool) > 1 && work >= KW_ATTN_PARALLEL_MIN) kw_pool_run(c->pool, task, c);
    else task(c, 0, 1);
}

/* ---- layers ---- */

static void matmul(kw_ctx *c, const kw_matrix *W, const float *X, int64_t n, float *Y) {
    kw_matmul(c->pool, W, X, n, Y, c->mm_scratch);
}

/* Row-wise steps of a prefill batch on the pool (each row is computed by
 * the same code whatever the split, so results do not change). */
typedef struct rows_task {
    float *y, *a;
    const float *x, *w;
    int64_t rows;
    int n;
    float eps;
} rows_task;

static void rmsnorm_task(void *arg, int ith, int nth) {
    rows_task *t = arg;
    int64_t lo = t->rows * ith / nth, hi = t->rows * (ith + 1) / nth;
    rmsnorm_rows(t->y + lo * t->n, t->x + lo * t->n, t->w, hi - lo, t->n, t->eps);
}

static void swiglu_task(void *arg, int ith, int nth) {
    rows_task *t = arg;
    int64_t lo = t->rows * ith / nth, hi = t->rows * (ith + 1) / nth;
    kw_kernels_active()->swiglu(t->a + lo * t->n, t->x + lo * t->n, (hi - lo) * t->n);
}

#define KW_ROWS_PARALLEL_MIN 65536   /* values; below this the pool wake-up costs more */

static void run_rows(kw_ctx *c, kw_task_fn fn, rows_task *t) {
    if (c->pool && kw_pool_size(c->pool) > 1 && t->rows > 1 && t->rows * t->n >= KW_ROWS_PARALLEL_MIN)
        kw_pool_run(c->pool, fn, t);
    else fn(t, 0, 1);
}

static void rmsnorm_rows_par(kw_ctx *c, float *y, const float *x, const float *w, int64_t rows, int n, float eps) {
    rows_task t = {.y = y, .x = x, .w = w, .rows = rows, .n = n, .eps = eps};
    run_rows(c, rmsnorm_task, &t);
}

/* What follows the Q/K/V matmuls for batch tokens [i0, i1): biases, the
 * per-head norms (qwen3), RoPE, and the K/V rows into the cache. Every
 * step is per token, so a split of the tokens over threads gives the same
 * bits. */
static void qkv_post_rows(kw_ctx *c, kw_kv_pool *kv, const kw_batch *b, int il, int32_t i0, int32_t i1) {
    const kw_hparams *hp = &c->m->hp;
    const kw_layer *L = &c->m->layers[il];
    int q_dim = hp->n_head * hp->head_dim_k, k_dim = hp->n_head_kv * hp->head_dim_k;
    int v_dim = hp->n_head_kv * hp->head_dim_v;
    int32_t n = i1 - i0;
    float *q = c->q + (int64_t)i0 * q_dim, *k = c->k + (int64_t)i0 * k_dim;
    add_bias_rows(q, L->bq, n, q_dim);
    add_bias_rows(k, L->bk, n, k_dim);
    add_bias_rows(c->v + (int64_t)i0 * v_dim, L->bv, n, v_dim);
    if (L->q_norm) head_norm_rows(q, L->q_norm, (int64_t)n * hp->n_head, hp->head_dim_k, hp->rms_eps);
    if (L->k_norm) head_norm_rows(k, L->k_norm, (int64_t)n * hp->n_head_kv, hp->head_dim_k, hp->rms_eps);
    rope_rows(hp, c->q, c->rope, i0, i1, hp->n_head, hp->head_dim_k);
    rope_rows(hp, c->k, c->rope, i0, i1, hp->n_head_kv, hp->head_dim_k);
    store_kv(c, kv, b, il, i0, i1);
}

typedef struct qkv_post_task {
    kw_ctx *c;
    kw_kv_pool *kv;
    const kw_batch *b;
    int il;
} qkv_post_task;

static void qkv_post_run(void *arg, int ith, int nth) {
    qkv_post_task *t = arg;
    int32_t n = t->b->n_tokens;
    qkv_post_rows(t->c, t->kv, t->b, t->il, (int32_t)((int64_t)n * ith / nth), (int32_t)((int64_t)n * (ith + 1) / nth));
}

#define KW_QKV_POST_PARALLEL_MIN 16   /* tokens; below this one thread does it (on one thread it was 1.25% of a 2-thread F16 prefill) */

static void qkv_post(kw_ctx *c, kw_kv_pool *kv, const kw_batch *b, int il) {
    qkv_post_task t = {.c = c, .kv = kv, .b = b, .il = il};
    if (c->pool && kw_pool_size(c->pool) > 1 && b->n_tokens >= KW_QKV_POST_PARALLEL_MIN) kw_pool_run(c->pool, qkv_post_run, &t);
    else qkv_post_rows(c, kv, b, il, 0, b->n_tokens);
}

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* Gated attention (qwen35): attn_q yields, per head, hd query values then
 * hd gate values; the queries go on as usual, the gates wait in agate. */
static void split_query_gate(kw_ctx *c, int32_t n) {
    const kw_hparams *hp = &c->m->hp;
    size_t hd = (size_t)hp->head_dim_k;
    for (int64_t r = 0; r < (int64_t)n * hp->n_head; r++) {
        memcpy(c->q + r * hd, c->qg + 2 * r * hd, hd * sizeof(float));
        memcpy(c->agate + r * hd, c->qg + (2 * r + 1) * hd, hd * sizeof(float));
    }
}

/* Each attention output value times the sigmoid of its own gate. */
static void apply_output_gate(kw_ctx *c, int32_t n) {
    int64_t len = (int64_t)n * c->m->hp.n_head * c->m->hp.head_dim_v;
    for (int64_t i = 0; i < len; i++) c->att[i] *= sigmoidf(c->agate[i]);
}

static void attention_block(kw_ctx *c, kw_kv_pool *kv, const kw_batch *b, int il) {
    const kw_hparams *hp = &c->m->hp;
    const kw_layer *L = &c->m->layers[il];
    bool gated = hp->arch->attn_output_gate;
    int32_t n = b->n_tokens;
    rmsnorm_rows_par(c, c->xn, c->x, L->attn_norm, n, hp->n_embd, hp->rms_eps);
    const kw_matrix *qkv[3] = {&L->wq, &L->wk, &L->wv};   /* one pool run when the types match */
    float *qkv_out[3] = {gated ? c->qg : c->q, c->k, c->v};
    kw_matmul_multi(c->pool, qkv, 3, c->xn, n, qkv_out, c->mm_scratch);
    if (gated) split_query_gate(c, n);
    qkv_post(c, kv, b, il);
    attention(c, kv, b, il);
    if (gated) apply_output_gate(c, n);
    matmul(c, &L->wo, c->att, n, c->tmp);
    add_inplace(c->x, c->tmp, (int64_t)n * hp->n_embd);
}

/* ---- gated delta net ----
 * As ../shared/conformance/ARCHITECTURES.md describes it ("Gated delta net
 * layer"). Per token t of a sequence, with h the attn_norm output:
 *   m = attn_qkv.h, z = attn_gate.h; u = SiLU(causal depthwise conv of m
 *   over this and the last d_conv-1 tokens); q, k = L2-normalised heads
 *   of u, v = the rest; beta = sigmoid(ssm_beta.h); decay =
 *   exp(softplus(ssm_alpha.h + dt_bias) * A); per value head j (key head
 *   j mod H_k): S = decay S; S += beta (v - S k) k^T (clamped to +-1e6);
 *   o = S q / sqrt(d); out = ssm_out . (RMSNorm(o) * SiLU(z)) per head.
 * The convolution window and S are the sequence's recurrent state
 * (kw_rec_state): tokens of one sequence run in order, sequences and
 * value heads in parallel. */

/* Floats of one gated delta net layer's state: conv window, then the S matrices. */
static int64_t rec_conv_floats(const kw_hparams *hp) { return (int64_t)(hp->ssm_d_conv - 1) * conv_dim(hp); }
static int64_t rec_layer_floats(const kw_hparams *hp) {
    return rec_conv_floats(hp) + (int64_t)hp->ssm_dt_rank * hp->ssm_d_state * hp->ssm_d_state;
}

static float *rec_layer_state(const kw_ctx *c, const kw_batch *b, int32_t g, int rec_layer) {
    return b->states[c->bseq_id[g]]->data + (int64_t)rec_layer * rec_layer_floats(&c->m->hp);
}

typedef struct gdn_task {
    kw_ctx *c;
    const kw_batch *b;
    const kw_layer *L;
} gdn_task;

/* Channels [j0, j1) of every sequence: the convolution over the window
 * then this token, the window moved on by one, u = SiLU(conv) in place of m.
 * Taps are summed in order, oldest first. */
static void gdn_conv_task(void *arg, int ith, int nth) {
    gdn_task *t = arg;
    const kw_ctx *c = t->c;
    const kw_hparams *hp = &c->m->hp;
    int64_t C = conv_dim(hp), j0 = C * ith / nth, j1 = C * (ith + 1) / nth;
    int K = hp->ssm_d_conv;
    for (int32_t g = 0; g < c->n_bseq; g++) {
        float *win = rec_layer_state(c, t->b, g, t->L->rec_layer);   /* [K-1][C], oldest first */
        for (int32_t o = c->bseq_off[g]; o < c->bseq_off[g + 1]; o++) {
            float *m = c->ssm_m + (int64_t)c->order[o] * C;
            for (int64_t j = j0; j < j1; j++) {
                const float *w = t->L->ssm_conv + j * K;
                float acc = 0.0f;
                for (int i = 0; i < K - 1; i++) acc += w[i] * win[i * C + j];
                acc += w[K - 1] * m[j];
                for (int i = 0; i + 1 < K - 1; i++) win[i * C + j] = win[(i + 1) * C + j];
                if (K > 1) win[(K - 2) * C + j] = m[j];
                m[j] = acc * sigmoidf(acc);
            }
        }
    }
}

static void l2norm(float *x, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float nrm = sqrtf((float)ss);
    float inv = 1.0f / (nrm > eps ? nrm : eps);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

static float softplusf(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* Tokens [lo, hi): q and k heads L2-normalised, beta = sigmoid, and the
 * decay exp(min(softplus(alpha + dt_bias) * A, 50)) in place of alpha. */
static void gdn_gates_rows(const kw_ctx *c, const kw_layer *L, int32_t lo, int32_t hi) {
    const kw_hparams *hp = &c->m->hp;
    int d = hp->ssm_d_state, H = hp->ssm_dt_rank;
    for (int32_t i = lo; i < hi; i++) {
        float *u = c->ssm_m + (int64_t)i * conv_dim(hp);
        for (int h = 0; h < 2 * hp->ssm_n_group; h++) l2norm(u + (int64_t)h * d, d, hp->rms_eps);   /* q heads, then k heads */
        float *beta = c->ssm_beta + (int64_t)i * H, *a = c->ssm_alpha + (int64_t)i * H;
        for (int j = 0; j < H; j++) {
            beta[j] = sigmoidf(beta[j]);
            float g = softplusf(a[j] + L->ssm_dt_bias[j]) * L->ssm_a[j];
            a[j] = expf(g < 50.0f ? g : 50.0f);
        }
    }
}

static void gdn_gates_task(void *arg, int ith, int nth) {
    gdn_task *t = arg;
    int32_t n = t->b->n_tokens;
    gdn_gates_rows(t->c, t->L, (int32_t)((int64_t)n * ith / nth), (int32_t)((int64_t)n * (ith + 1) / nth));
}

/* Value head j of batch sequence g, over that sequence's tokens in order:
 * the delta rule after the decay, one pass over S per token (row r of S
 * is value dim r: decay, S k, the update and S q in one sweep). */
static void gdn_recur(const kw_ctx *c, const kw_batch *b, const kw_layer *L, int32_t g, int j) {
    const kw_hparams *hp = &c->m->hp;
    int d = hp->ssm_d_state, H = hp->ssm_dt_rank, kh = j % hp->ssm_n_group;
    int64_t C = conv_dim(hp), key_dim = (int64_t)hp->ssm_n_group * d;
    float *S = rec_layer_state(c, b, g, L->rec_layer) + rec_conv_floats(hp) + (int64_t)j * d * d;
    float scale = 1.0f / sqrtf((float)d);
    for (int32_t o = c->bseq_off[g]; o < c->bseq_off[g + 1]; o++) {
        int32_t i = c->order[o];
        const float *u = c->ssm_m + (int64_t)i * C;
        const float *q = u + (int64_t)kh * d, *k = u + key_dim + (int64_t)kh * d, *v = u + 2 * key_dim + (int64_t)j * d;
        float beta = c->ssm_beta[(int64_t)i * H + j], decay = c->ssm_alpha[(int64_t)i * H + j];
        float *out = c->ssm_o + (int64_t)i * hp->ssm_d_inner + (int64_t)j * d;
        for (int r = 0; r < d; r++) {
            float *row = S + (int64_t)r * d;
            float sk = 0.0f;
            for (int e = 0; e < d; e++) {
                row[e] *= decay;
                sk += row[e] * k[e];
            }
            float vn = beta * (v[r] - sk), sq = 0.0f;
            for (int e = 0; e < d; e++) {
                float x = row[e] + vn * k[e];
                x = x > 1e6f ? 1e6f : x < -1e6f ? -1e6f : x;
                row[e] = x;
                sq += x * q[e];
            }
            out[r] = sq * scale;
        }
    }
}

static void gdn_recur_task(void *arg, int ith, int nth) {
    gdn_task *t = arg;
    int H = t->c->m->hp.ssm_dt_rank;
    for (int64_t it = ith; it < (int64_t)t->c->n_bseq * H; it += nth) gdn_recur(t->c, t->b, t->L, (int32_t)(it / H), (int)(it % H));
}

/* Tokens [lo, hi): each value head's output RMS-normalised (ssm_norm, the
 * same gain for every head) and multiplied by SiLU of its z. */
static void gdn_out_rows(const kw_ctx *c, const kw_layer *L, int32_t lo, int32_t hi) {
    const kw_hparams *hp = &c->m->hp;
    int d = hp->ssm_d_state;
    for (int32_t i = lo; i < hi; i++)
        for (int j = 0; j < hp->ssm_dt_rank; j++) {
            int64_t at = (int64_t)i * hp->ssm_d_inner + (int64_t)j * d;
            float *o = c->ssm_o + at;
            const float *z = c->ssm_z + at;
            rmsnorm(o, o, L->ssm_norm, d, hp->rms_eps);
            for (int e = 0; e < d; e++) o[e] *= z[e] * sigmoidf(z[e]);
        }
}

static void gdn_out_task(void *arg, int ith, int nth) {
    gdn_task *t = arg;
    int32_t n = t->b->n_tokens;
    gdn_out_rows(t->c, t->L, (int32_t)((int64_t)n * ith / nth), (int32_t)((int64_t)n * (ith + 1) / nth));
}

#define KW_GDN_PARALLEL_MIN 65536   /* multiply-adds; below this one thread does the step */

static void run_gdn(kw_ctx *c, kw_task_fn fn, gdn_task *t, int64_t work) {
    if (c->pool && kw_pool_size(c->pool) > 1 && work >= KW_GDN_PARALLEL_MIN) kw_pool_run(c->pool, fn, t);
    else fn(t, 0, 1);
}

static void gdn_block(kw_ctx *c, const kw_batch *b, int il) {
    const kw_hparams *hp = &c->m->hp;
    const kw_layer *L = &c->m->layers[il];
    int32_t n = b->n_tokens;
    rmsnorm_rows_par(c, c->xn, c->x, L->attn_norm, n, hp->n_embd, hp->rms_eps);
    const kw_matrix *w[4] = {&L->w_qkv, &L->w_z, &L->w_beta, &L->w_alpha};
    float *out[4] = {c->ssm_m, c->ssm_z, c->ssm_beta, c->ssm_alpha};
    kw_matmul_multi(c->pool, w, 4, c->xn, n, out, c->mm_scratch);
    gdn_task t = {.c = c, .b = b, .L = L};
    int64_t d = hp->ssm_d_state;
    run_gdn(c, gdn_conv_task, &t, (int64_t)n * conv_dim(hp) * hp->ssm_d_conv);
    run_gdn(c, gdn_gates_task, &t, (int64_t)n * conv_dim(hp));
    run_gdn(c, gdn_recur_task, &t, (int64_t)n * hp->ssm_dt_rank * d * d * 4);
    run_gdn(c, gdn_out_task, &t, (int64_t)n * hp->ssm_d_inner * 4);
    matmul(c, &L->w_ssm_out, c->ssm_o, n, c->tmp);
    add_inplace(c->x, c->tmp, (int64_t)n * hp->n_embd);
}

/* out = w_down . (SiLU(w_gate . xn) * (w_up . xn)) for n rows of width ff
 * (the dense block, or a mixture's shared expert). */
static void swiglu(kw_ctx *c, const kw_layer *L, int32_t n, int64_t ff, float *out) {
    const kw_matrix *gu[2] = {&L->w_gate, &L->w_up};
    float *gu_out[2] = {c->gate, c->up};
    kw_matmul_multi(c->pool, gu, 2, c->xn, n, gu_out, c->mm_scratch);
    rows_task sw = {.a = c->gate, .x = c->up, .rows = n, .n = ff};
    run_rows(c, swiglu_task, &sw);
    matmul(c, &L->w_down, c->gate, n, out);
}

static void ffn_block(kw_ctx *c, int il, int32_t n) {
    const kw_hparams *hp = &c->m->hp;
    const kw_layer *L = &c->m->layers[il];
    rmsnorm_rows_par(c, c->xn, c->x, L->ffn_norm, n, hp->n_embd, hp->rms_eps);
    swiglu(c, L, n, hp->n_ff, c->tmp);
    add_inplace(c->x, c->tmp, (int64_t)n * hp->n_embd);
}

/* ---- mixture of experts ----
 * As ik_llama.cpp computes it (../shared/conformance/ARCHITECTURES.md):
 * p = softmax(router . h2) over all experts, the k largest p chosen (ties
 * to the lower index), their weights p_e / sum of the chosen p; no other
 * gating, norm or scale. */

/* Token i's router logits r[0..E) -> its k choices and weights. The
 * softmax sums in double, as ggml's does. */
static void route_token(const float *r, int E, int k, int32_t *sel, float *w, float *p) {
    float mx = r[0];
    for (int e = 1; e < E; e++) if (r[e] > mx) mx = r[e];
    double sum = 0;
    for (int e = 0; e < E; e++) {
        p[e] = expf(r[e] - mx);
        sum += p[e];
    }
    float inv = (float)(1.0 / sum);
    for (int e = 0; e < E; e++) p[e] *= inv;
    float chosen = 0;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int q = 0; q < j && !taken; q++) taken = sel[q] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        sel[j] = best;
        w[j] = p[best];
        chosen += p[best];
    }
    for (int j = 0; j < k; j++) w[j] /= chosen;
}

/* tmp (the routed experts' sum) += g_i * shared(h2_i) for every token i,
 * g_i = sigmoid(ffn_gate_inp_shexp . h2_i): the FFN output is routed +
 * g * shared before the residual add, as ik_llama.cpp sums it. The
 * router buffer (free once the experts ran) holds the gates, and xn, read
 * by nothing after the shared expert's gate/up, takes its output. */
static void shared_expert(kw_ctx *c, const kw_layer *L, int32_t n) {
    const kw_hparams *hp = &c->m->hp;
    const int64_t d = hp->n_embd;
    float *g = c->router;
    for (int32_t i = 0; i < n; i++) {
        const float *h = c->xn + (int64_t)i * d;
        float z = 0;
        for (int64_t j = 0; j < d; j++) z += L->shexp_gate[j] * h[j];
        g[i] = 1.0f / (1.0f + expf(-z));
    }
    swiglu(c, L, n, hp->n_ff_shexp, c->xn);
    for (int32_t i = 0; i < n; i++) {
        float *o = c->tmp + (int64_t)i * d;
        const float *sh = c->xn + (int64_t)i * d;
        for (int64_t j = 0; j < d; j++) o[j] += g[i] * sh[j];
    }
}

/* h2 = RMSNorm(x); x += the routed experts of each token (+ the gated shared expert). */
static void moe_block(kw_ctx *c, int il, int32_t n) {
    const kw_hparams *hp = &c->m->hp;
    const kw_layer *L = &c->m->layers[il];
    int E = hp->n_expert, k = hp->n_expert_used;
    rmsnorm_rows_par(c, c->xn, c->x, L->ffn_norm, n, hp->n_embd, hp->rms_eps);
    matmul(c, &L->w_router, c->xn, n, c->router);
    for (int32_t i = 0; i < n; i++) {
        route_token(c->router + (int64_t)i * E, E, k, c->sel + (int64_t)i * k, c->wts + (int64_t)i * k,
                    c->router + (int64_t)i * E);
        for (int j = 0; j < k; j++) kw_model_mark_expert(c->m, il, c->sel[(int64_t)i * k + j]);
    }
    kw_model_pack_experts(c->m, c->pool, il, c->sel, (int64_t)n * k);
    kw_moe_args a = {.gate = &L->gate_exps, .up = &L->up_exps, .down = &L->down_exps, .x = c->xn, .n = n, .k = k,
                     .sel = c->sel, .w = c->wts, .out = c->tmp};
    c->bytes_read += kw_moe_experts(c->pool, &a, c->moe_scratch);
    if (hp->has_shared_expert) shared_expert(c, L, n);
    add_inplace(c->x, c->tmp, (int64_t)n * hp->n_embd);
}

/* Final norm of the rows that want logits (gathered into xn), then the LM head. */
static void lm_head(kw_ctx *c, const kw_batch *b, float *logits) {
    const kw_hparams *hp = &c->m->hp;
    int32_t n_out = 0;
    for (int32_t i = 0; i < b->n_tokens; i++) {
        bool want = b->want_logits ? b->want_logits[i] : i == b->n_tokens - 1;
        if (want) c->rows[n_out++] = i;
    }
    for (int32_t r = 0; r < n_out; r++)
        rmsnorm(c->xn + (int64_t)r * hp->n_embd, c->x + (int64_t)c->rows[r] * hp->n_embd, c->m->output_norm,
                hp->n_embd, hp->rms_eps);
    if (n_out > 0 && logits) {
        matmul(c, &c->m->output, c->xn, n_out, logits);
        c->bytes_read += kw_matrix_span(&c->m->output).bytes;
    }
}

/* ---- batch validation ---- */

static int check_kv_layout(const kw_ctx *c, const kw_kv_pool *kv, kw_err *err) {
    const kw_hparams *hp = &c->m->hp;
    if (kv->lay.n_layer != hp->n_kv_layers || kv->lay.n_head_kv != hp->n_head_kv ||
        kv->lay.head_dim_k != hp->head_dim_k || kv->lay.head_dim_v != hp->head_dim_v)
        return kw_err_set(err, "forward: KV pool layout (%d layers, %d heads, %d/%d dims) does not match the model",
                          kv->lay.n_layer, kv->lay.n_head_kv, kv->lay.head_dim_k, kv->lay.head_dim_v);
    return 0;
}

static int check_token(const kw_ctx *c, const kw_kv_pool *kv, const kw_batch *b, int32_t i, kw_err *err) {
    int32_t tok = b->tokens[i], pos = b->pos[i], s = b->seq[i], bt = kv->lay.block_tokens;
    if (tok < 0 || tok >= c->m->hp.n_vocab)
        return kw_err_set(err, "forward: token %d at batch index %d is outside the vocabulary (0..%d)", tok, i, c->m->hp.n_vocab - 1);
    if (pos < 0 || pos >= c->max_ctx)
        return kw_err_set(err, "forward: position %d at batch index %d is outside the context (0..%d)", pos, i, c->max_ctx - 1);
    if (s < 0 || !b->tables[s]) return kw_err_set(err, "forward: batch index %d has no block table (seq %d)", i, s);
    const kw_block_table *t = b->tables[s];
    if (pos / bt >= t->n)
        return kw_err_set(err, "forward: block table of seq %d covers %d positions, position %d needs more", s, t->n * bt, pos);
    for (int32_t j = 0; j <= pos / bt; j++)
        if (t->ids[j] < 0 || t->ids[j] >= kv->n_blocks || kv->refs[t->ids[j]] <= 0)
            return kw_err_set(err, "forward: seq %d block %d (id %d) is not a live KV block", s, j, t->ids[j]);
    int32_t id = t->ids[pos / bt];
    if (kv->refs[id] > 1)
        return kw_err_set(err, "forward: seq %d would write position %d into shared KV block %d (refs %d); copy it first",
                          s, pos, id, kv->refs[id]);
    return 0;
}

/* The batch's distinct sequences in order of first appearance, and its
 * token indices grouped by them (batch order within each). */
static void group_by_sequence(kw_ctx *c, const kw_batch *b) {
    int32_t nb = 0;
    for (int32_t i = 0; i < b->n_tokens; i++) {
        int32_t g = 0;
        while (g < nb && c->bseq_id[g] != b->seq[i]) g++;
        if (g == nb) c->bseq_id[nb++] = b->seq[i];
        c->grp[i] = g;
    }
    for (int32_t g = 0; g <= nb; g++) c->bseq_off[g] = 0;
    for (int32_t i = 0; i < b->n_tokens; i++) c->bseq_off[c->grp[i] + 1]++;
    for (int32_t g = 0; g < nb; g++) c->bseq_off[g + 1] += c->bseq_off[g];
    for (int32_t i = 0; i < b->n_tokens; i++) c->order[c->bseq_off[c->grp[i]]++] = i;
    for (int32_t g = nb; g > 0; g--) c->bseq_off[g] = c->bseq_off[g - 1];   /* back to starts */
    c->bseq_off[0] = 0;
    c->n_bseq = nb;
}

/* Recurrent layers: every sequence has a state, and its tokens continue it
 * in order: the first at the state's n_past (or at 0, a fresh start), each
 * next one position on. */
static int check_states(const kw_ctx *c, const kw_batch *b, kw_err *err) {
    if (c->m->hp.n_rec_layers == 0) return 0;
    if (!b->states) return kw_err_set(err, "forward: %s has recurrent layers and the batch carries no states", c->m->hp.arch_name);
    for (int32_t g = 0; g < c->n_bseq; g++) {
        int32_t s = c->bseq_id[g];
        const kw_rec_state *st = b->states[s];
        if (!st || !st->data) return kw_err_set(err, "forward: seq %d has no recurrent state", s);
        int32_t first = b->pos[c->order[c->bseq_off[g]]];
        if (first != 0 && first != st->n_past)
            return kw_err_set(err, "forward: seq %d continues at position %d but its recurrent state is at %d "
                              "(a recurrent state cannot be rewound: restart at 0 or restore a saved state)",
                              s, first, st->n_past);
        for (int32_t o = c->bseq_off[g] + 1; o < c->bseq_off[g + 1]; o++)
            if (b->pos[c->order[o]] != b->pos[c->order[o - 1]] + 1)
                return kw_err_set(err, "forward: seq %d has positions %d then %d in one batch; a recurrent model takes "
                                  "each sequence's tokens in order", s, b->pos[c->order[o - 1]], b->pos[c->order[o]]);
    }
    return 0;
}

static int check_batch(kw_ctx *c, const kw_kv_pool *kv, const kw_batch *b, kw_err *err) {
    if (!b || !kv) return kw_err_set(err, "forward: no batch or KV pool");
    if (b->n_tokens < 1 || b->n_tokens > c->max_tokens)
        return kw_err_set(err, "forward: batch of %d tokens (this context takes 1..%d)", b->n_tokens, c->max_tokens);
    if (!b->tokens || !b->pos || !b->seq || !b->tables) return kw_err_set(err, "forward: incomplete batch");
    if (check_kv_layout(c, kv, err)) return -1;
    for (int32_t i = 0; i < b->n_tokens; i++)
        if (check_token(c, kv, b, i, err)) return -1;
    group_by_sequence(c, b);
    return check_states(c, b, err);
}

/* Sequences that start at 0 start from a zero state. */
static void states_begin(const kw_ctx *c, const kw_batch *b) {
    if (c->m->hp.n_rec_layers == 0) return;
    for (int32_t g = 0; g < c->n_bseq; g++)
        if (b->pos[c->order[c->bseq_off[g]]] == 0)
            memset(b->states[c->bseq_id[g]]->data, 0, (size_t)c->m->hp.rec_state_bytes);
}

static void states_end(const kw_ctx *c, const kw_batch *b) {
    if (c->m->hp.n_rec_layers == 0) return;
    for (int32_t g = 0; g < c->n_bseq; g++)
        b->states[c->bseq_id[g]]->n_past = b->pos[c->order[c->bseq_off[g + 1] - 1]] + 1;
}

int kw_forward(kw_ctx *c, kw_kv_pool *kv, const kw_batch *b, float *logits_out, kw_err *err) {
    if (!c) return kw_err_set(err, "forward: no context");
    if (check_batch(c, kv, b, err)) return -1;
    const kw_hparams *hp = &c->m->hp;
    embed_tokens(c->m, b->tokens, b->n_tokens, c->x);
    rope_tables(c->m, b->pos, b->n_tokens, c->rope);
    states_begin(c, b);
    for (int il = 0; il < hp->n_layer; il++) {
        if (c->m->layers[il].mixer == KW_MIXER_GDN) gdn_block(c, b, il);
        else attention_block(c, kv, b, il);
        if (hp->arch->ffn == KW_FFN_MOE) moe_block(c, il, b->n_tokens);
        else ffn_block(c, il, b->n_tokens);
    }
    states_end(c, b);
    lm_head(c, b, logits_out);
    c->bytes_read += c->layer_bytes;
    return 0;
}

uint64_t kw_ctx_weight_bytes_read(const kw_ctx *c) { return c ? c->bytes_read : 0; }
