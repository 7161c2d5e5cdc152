/* mkmodel.c - random-weight GGUF models (mkmodel.h): presets, metadata,
 * the tensor list (every tensor the architecture's descriptor requires,
 * arch.h, in its order), and deterministic weights streamed to the GGUF
 * writer. The vocab is the trained one
 * (bpe_train.c) or an imported Hugging Face tokenizer (src/hfimport/).
 *
 * Weights: matrices N(0, 0.02^2), norm gains 1 + N(0, 0.05^2), biases
 * N(0, 0.02^2), so activations stay finite at any depth. Every row has its
 * own random stream (seeded from the model seed, the tensor's index and
 * the row), so rows can be generated in any order or chunking and the file
 * is byte-identical for the same seed. Rows are quantized with the
 * reference quantizer (kw_quantize_row). Layers come from the
 * architecture table (arch.h), the hybrids' (qwen35) too; hybrid.c adds
 * their shape checks and extra metadata. */
#include "mkmodel.h"
#include "hybrid.h"
#include "kvwise/arch.h"
#include "kvwise/gguf.h"
#include "kvwise/hfimport.h"
#include "kvwise/memory.h"
#include "kvwise/model.h"
#include "kvwise/tensor.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STD_MATRIX 0.02f
#define STD_BIAS 0.02f
#define STD_NORM_GAIN 0.05f
/* A delta net's convolution taps: about a 4-tap kernel's default initial
 * scale, so the convolution does not shrink its input 50-fold. Its decay
 * rate ssm_a: -1 + N(0, 0.2^2), negative everywhere (the Irwin-Hall draws
 * stop at 3.46 sigma), so the decay exp(softplus(.) * a) stays in (0, 1). */
#define STD_CONV 0.3f
#define MEAN_DECAY -1.0f
#define STD_DECAY 0.2f

/* ---- presets ---- */

typedef struct preset { const char *name; kw_mk_shape s; } preset;

#define SHAPE_FIELDS(arch_, name_, layers, embd, heads, kv_heads, hd, ff, vocab, ctx, base, eps, tied_)               \
    .arch = arch_, .name = name_, .n_layer = layers, .n_embd = embd, .n_head = heads, .n_head_kv = kv_heads,           \
    .head_dim = hd, .n_ff = ff, .n_vocab = vocab, .n_ctx = ctx, .rope_base = base, .rms_eps = eps, .tied = tied_
#define SHAPE(...) {SHAPE_FIELDS(__VA_ARGS__)}

/* The mixture-of-experts part of a shape: experts, experts per token, expert width. */
#define MOE(n_exp, used, ff_exp) .n_expert = n_exp, .n_expert_used = used, .n_ff_exp = ff_exp

/* The delta-net part of a hybrid shape: key/value head dim, key heads,
 * value heads, convolution taps, attention interval, rotary dims. */
#define HYBRID(state, groups, heads, conv, interval, rot)                                                             \
    .ssm_d_state = state, .ssm_n_group = groups, .ssm_dt_rank = heads, .ssm_d_conv = conv, .attn_interval = interval,      \
    .rope_dim = rot

/* The MoE presets: a tiny one for tests; Qwen3-30B-A3B's shape (48 layers,
 * 128 experts of width 768, 8 per token, 30.5B weights of which 3.3B are
 * read per token); and the benchmark shape, 6 of its layers with a 24576
 * vocab so that the share read per token stays about Qwen3-30B-A3B's
 * (390M of 3.84B weights, 10.2%, against 3.0B of 30.5B, 9.9%) in 4.1 GB of
 * Q8_0 (2.3 GB of Q4_K_M) that this machine's disk and memory hold.
 * The Qwen3.5 presets (docs/GGUF.md, "Qwen3.5 hybrids", gives the sources):
 * qwen35-tiny, 8 layers (3 and 7 attention) of 256 with delta-net heads of
 * 64 (ik_llama.cpp's batched delta-net kernel is right only for 64 and
 * 128); 0.8B, 9B and 27B with the published Qwen3.5 text shapes (no MTP
 * layer, no vision tower). */
static const preset k_presets[] = {
    {"tiny", SHAPE("llama", "kvwise-tiny-random", 4, 256, 8, 2, 32, 768, 1024, 2048, 10000.0f, 1e-5f, false)},
    {"llama3.2-1b", SHAPE("llama", "kvwise-llama3.2-1b-random", 16, 2048, 32, 8, 64, 8192, 128256, 131072, 500000.0f, 1e-5f, true)},
    {"qwen2.5-0.5b", SHAPE("qwen2", "kvwise-qwen2.5-0.5b-random", 24, 896, 14, 2, 64, 4864, 151936, 32768, 1000000.0f, 1e-6f, true)},
    {"qwen3-0.6b", SHAPE("qwen3", "kvwise-qwen3-0.6b-random", 28, 1024, 16, 8, 128, 3072, 151936, 40960, 1000000.0f, 1e-6f, true)},
    {"tiny-moe", {SHAPE_FIELDS("qwen3moe", "kvwise-tiny-moe-random", 4, 256, 8, 2, 32, 256, 1024, 2048, 1000000.0f, 1e-6f, false),
                  MOE(8, 2, 128)}},
    {"qwen3-30b-a3b", {SHAPE_FIELDS("qwen3moe", "kvwise-qwen3-30b-a3b-random", 48, 2048, 32, 4, 128, 6144, 151936, 40960,
                             1000000.0f, 1e-6f, false), MOE(128, 8, 768)}},
    {"qwen3moe-bench", {SHAPE_FIELDS("qwen3moe", "kvwise-qwen3moe-bench-random", 6, 2048, 32, 4, 128, 6144, 24576, 40960,
                              1000000.0f, 1e-6f, false), MOE(128, 8, 768)}},
    {"qwen35moe-tiny", {SHAPE_FIELDS("qwen35moe", "kvwise-qwen35moe-tiny-random", 8, 256, 4, 2, 64, 512, 1024, 4096,
                              10000000.0f, 1e-6f, false), HYBRID(64, 2, 4, 4, 4, 16), MOE(8, 2, 128), .n_ff_shexp = 256}},
    {"qwen35-tiny", {SHAPE_FIELDS("qwen35", "kvwise-qwen35-tiny-random", 8, 256, 4, 2, 64, 512, 1024, 4096, 10000000.0f,
                           1e-6f, false), HYBRID(64, 2, 4, 4, 4, 16)}},
    {"qwen3.5-0.8b", {SHAPE_FIELDS("qwen35", "kvwise-qwen3.5-0.8b-random", 24, 1024, 8, 2, 256, 3584, 248320, 262144,
                            10000000.0f, 1e-6f, true), HYBRID(128, 16, 16, 4, 4, 64)}},
    {"qwen3.5-9b", {SHAPE_FIELDS("qwen35", "kvwise-qwen3.5-9b-random", 32, 4096, 16, 4, 256, 12288, 248320, 262144,
                          10000000.0f, 1e-6f, false), HYBRID(128, 16, 32, 4, 4, 64)}},
    {"qwen3.5-27b", {SHAPE_FIELDS("qwen35", "kvwise-qwen3.5-27b-random", 64, 5120, 24, 4, 256, 17408, 248320, 262144,
                           10000000.0f, 1e-6f, false), HYBRID(128, 16, 48, 4, 4, 64)}},
};

/* A hybrid shape made from a plain one (--arch qwen35 on another preset):
 * the fields it lacks follow the attention shape (delta-net heads of
 * head_dim, as many key heads as KV heads and value heads as query heads,
 * 4 taps, attention every 4th layer, a quarter of each head rotated, as in
 * Qwen3.5). */
static void hybrid_defaults(kw_mk_shape *s) {
    if (!s->ssm_d_state) s->ssm_d_state = s->head_dim;
    if (!s->ssm_n_group) s->ssm_n_group = s->n_head_kv;
    if (!s->ssm_dt_rank) s->ssm_dt_rank = s->n_head;
    if (!s->ssm_d_conv) s->ssm_d_conv = 4;
    if (!s->attn_interval) s->attn_interval = 4;
    if (!s->rope_dim) s->rope_dim = s->head_dim / 4 / 2 * 2 > 0 ? s->head_dim / 4 / 2 * 2 : s->head_dim;
}

/* The tensor groups of s->arch that mkmodel writes: the required ones. */
static int apply_arch(kw_mk_shape *s, kw_err *err) {
    const kw_arch_desc *a = kw_arch_find(s->arch);
    if (!a) return kw_err_set(err, "unknown architecture '%s' (supported: %s)", s->arch, kw_arch_supported_list());
    if (kw_mk_is_hybrid(s->arch)) hybrid_defaults(s);
    else s->ssm_d_state = s->ssm_n_group = s->ssm_dt_rank = s->ssm_d_conv = s->attn_interval = s->rope_dim = s->n_mtp = 0;
    s->qkv_bias = kw_arch_presence(a, KW_FEAT_QKV_BIAS) == KW_REQUIRED;
    s->qk_norm = kw_arch_presence(a, KW_FEAT_QK_NORM) == KW_REQUIRED;
    if (a->ffn != KW_FFN_MOE) s->n_expert = s->n_expert_used = s->n_ff_exp = 0;
    else if (s->n_expert < 1 || s->n_expert_used < 1 || s->n_ff_exp < 1)
        return kw_err_set(err, "architecture %s is a mixture of experts: it needs --experts, --experts-used and --ff-exp",
                          s->arch);
    if (kw_arch_presence(a, KW_FEAT_SHARED_EXPERT) != KW_REQUIRED) s->n_ff_shexp = 0;
    else if (s->n_ff_shexp < 1) s->n_ff_shexp = s->n_ff;   /* ik's default: feed_forward_length */
    return 0;
}

int kw_mk_preset(const char *name, kw_mk_shape *out, kw_err *err) {
    for (size_t i = 0; i < sizeof k_presets / sizeof k_presets[0]; i++)
        if (name && !strcmp(name, k_presets[i].name)) { *out = k_presets[i].s; return apply_arch(out, err); }
    return kw_err_set(err, "unknown preset '%s' (presets: tiny, llama3.2-1b, qwen2.5-0.5b, qwen3-0.6b, tiny-moe, "
                      "qwen3-30b-a3b, qwen3moe-bench, qwen35moe-tiny, qwen35-tiny, qwen3.5-0.8b, qwen3.5-9b, qwen3.5-27b)", name ? name : "");
}

int kw_mk_shape_check(kw_mk_shape *s, kw_err *err) {
    if (apply_arch(s, err)) return -1;
    if (s->n_layer < 1 || s->n_layer > 1024) return kw_err_set(err, "layers %d out of range (1..1024)", s->n_layer);
    if (s->n_embd < 1 || s->n_ff < 1 || s->n_head < 1 || s->n_head_kv < 1 || s->head_dim < 1 || s->n_ctx < 1)
        return kw_err_set(err, "embd, ff, heads, kv heads, head_dim and ctx must be positive");
    if (s->n_head % s->n_head_kv) return kw_err_set(err, "heads (%d) must be a multiple of kv heads (%d)", s->n_head, s->n_head_kv);
    if (s->head_dim % 2) return kw_err_set(err, "head_dim %d must be even (RoPE rotates pairs)", s->head_dim);
    if ((int64_t)s->n_embd * s->n_vocab > (1ll << 34) || (int64_t)s->n_embd * s->n_ff > (1ll << 34) ||
        (int64_t)s->n_head * s->head_dim > (1 << 20))
        return kw_err_set(err, "shape too large");
    if (s->n_vocab < 259 || s->n_vocab > (1 << 22)) return kw_err_set(err, "vocab %d out of range (259..4194304)", s->n_vocab);
    if (s->n_expert_used > s->n_expert || s->n_expert > 4096)
        return kw_err_set(err, "experts used (%d) must be 1..experts (%d), experts at most 4096", s->n_expert_used, s->n_expert);
    if ((int64_t)s->n_embd * s->n_ff_exp * s->n_expert > (1ll << 36)) return kw_err_set(err, "shape too large");
    return kw_mk_is_hybrid(s->arch) ? kw_mk_hybrid_check(s, err) : 0;
}

/* ---- types ---- */

uint32_t kw_mk_matrix_type(uint32_t want, int64_t ncols) {
    const kw_type_traits *t = kw_type_traits_get(want);
    if (!t || ncols % t->block_size == 0) return want;
    uint32_t fb = want == KW_TYPE_Q4_K ? KW_TYPE_Q5_0 : want == KW_TYPE_Q5_K ? KW_TYPE_Q5_1
                : want == KW_TYPE_Q6_K ? KW_TYPE_Q8_0 : KW_TYPE_F16;
    return ncols % kw_type_traits_get(fb)->block_size == 0 ? fb : KW_TYPE_F16;
}

/* ---- random numbers ---- */

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* n approximately standard normal values: the sum of four 16-bit uniform
 * integers from one 64-bit draw, centred and scaled to unit variance
 * (Irwin-Hall, n = 4: bell-shaped, tails cut at 3.46 sigma). Integer math
 * plus one float multiply, so the values are the same on every machine
 * and compiler, and cheap enough for a 1B model in seconds (Box-Muller's
 * log/sin/cos cost ~50 ns per value here). */
static void gaussians(uint64_t *state, float *out, int64_t n) {
    const float scale = 1.7320508075688772f / 65536.0f;   /* sqrt(3) / 2^16: variance 4/12 -> 1 */
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = splitmix64(state);
        int32_t sum = (int32_t)(r & 0xffff) + (int32_t)((r >> 16) & 0xffff) + (int32_t)((r >> 32) & 0xffff) +
                      (int32_t)(r >> 48);
        out[i] = (float)(sum - 131070) * scale;
    }
}

/* ---- tensor list ---- */

#define MK_MAX_THREADS 16

/* Shared by all tensors of one write: the thread pool and a scratch row
 * (F32) per thread. */
typedef struct mk_run { kw_pool *pool; int n_threads; float *rows[MK_MAX_THREADS]; } mk_run;

typedef struct mk_tensor {
    char name[64];
    uint32_t type, n_dims;
    int64_t ne[3];
    float mean, std;
    uint64_t seed;      /* stream of this tensor */
    mk_run *run;
} mk_tensor;

typedef struct mk_list { mk_tensor *t; int n, cap; } mk_list;

static int add3(mk_list *l, const char *name, uint32_t type, int64_t ne0, int64_t ne1, int64_t ne2, float mean, float std) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 64;
        mk_tensor *n = realloc(l->t, (size_t)cap * sizeof *n);
        if (!n) return -1;
        l->t = n;
        l->cap = cap;
    }
    mk_tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = ne2 > 1 ? 3 : ne1 > 1 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->type = t->n_dims >= 2 ? kw_mk_matrix_type(type, ne0) : KW_TYPE_F32;
    t->mean = mean;
    t->std = std;
    return 0;
}

static int add(mk_list *l, const char *name, uint32_t type, int64_t ne0, int64_t ne1, float mean, float std) {
    return add3(l, name, type, ne0, ne1, 1, mean, std);
}

/* The hyper-parameters the descriptor's tensor dimensions are sized from. */
static kw_hparams shape_hparams(const kw_mk_shape *s) {
    kw_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_embd = s->n_embd;
    hp.n_head = s->n_head;
    hp.n_head_kv = s->n_head_kv;
    hp.head_dim_k = hp.head_dim_v = s->head_dim;
    hp.n_ff = s->n_ff;
    hp.n_expert = s->n_expert;
    hp.n_expert_used = s->n_expert_used;
    hp.n_ff_exp = s->n_ff_exp;
    hp.n_ff_shexp = s->n_ff_shexp;
    hp.has_shared_expert = s->n_ff_shexp > 0;
    hp.ssm_d_state = s->ssm_d_state;
    hp.ssm_n_group = s->ssm_n_group;
    hp.ssm_dt_rank = s->ssm_dt_rank;
    hp.ssm_d_inner = s->ssm_dt_rank * s->ssm_d_state;
    hp.ssm_d_conv = s->ssm_d_conv;
    return hp;
}

/* Adds blk.<il>.* for every required tensor of a list: matrices and expert
 * tensors of wtype N(0, 0.02^2) (the MoE router F32, as converters write
 * it), norm gains 1 + N(0, 0.05^2), biases N(0, 0.02^2), a delta net's
 * convolution taps N(0, 0.3^2) and decay rate -1 + N(0, 0.2^2). */
static int add_layer_tensors(mk_list *l, const kw_arch_desc *a, const kw_tensor_spec *t, const kw_hparams *hp,
                             int il, uint32_t wtype) {
    int rc = 0;
    for (; t && t->name; t++) {
        if (kw_arch_presence(a, t->feature) != KW_REQUIRED) continue;
        char n[64];
        snprintf(n, sizeof n, "blk.%d.%s", il, t->name);
        int64_t ne0 = kw_dim_size(t->ne0, hp), ne1 = kw_dim_size(t->ne1, hp);
        if (t->role == KW_ROLE_MATRIX)
            rc |= add(l, n, t->what == KW_LT_FFN_ROUTER ? KW_TYPE_F32 : wtype, ne0, ne1, 0, STD_MATRIX);
        else if (t->role == KW_ROLE_EXPERTS) rc |= add3(l, n, wtype, ne0, ne1, hp->n_expert, 0, STD_MATRIX);
        else if (t->role == KW_ROLE_NORM) rc |= add(l, n, KW_TYPE_F32, ne0, ne1, 1, STD_NORM_GAIN);
        else if (t->role == KW_ROLE_CONV) rc |= add(l, n, KW_TYPE_F32, ne0, ne1, 0, STD_CONV);
        else if (t->what == KW_LT_SSM_A) rc |= add(l, n, KW_TYPE_F32, ne0, ne1, MEAN_DECAY, STD_DECAY);
        else rc |= add(l, n, KW_TYPE_F32, ne0, ne1, 0, STD_BIAS);
    }
    return rc;
}

/* A multi-token-prediction layer's own tensors after its attention and
 * FFN: the projection of [embedding, hidden] and its norms, as
 * ik_llama.cpp reads them. */
static int add_mtp_tensors(mk_list *l, const kw_mk_shape *s, int il, uint32_t wtype) {
    int64_t E = s->n_embd;
    char n[64];
    snprintf(n, sizeof n, "blk.%d.nextn.eh_proj.weight", il);
    int rc = add(l, n, wtype, 2 * E, E, 0, STD_MATRIX);
    static const char *const norms[] = {"enorm", "hnorm", "shared_head_norm"};
    for (int k = 0; k < 3; k++) {
        snprintf(n, sizeof n, "blk.%d.nextn.%s.weight", il, norms[k]);
        rc |= add(l, n, KW_TYPE_F32, E, 1, 1, STD_NORM_GAIN);
    }
    return rc;
}

static int build_list(const kw_mk_shape *s, uint32_t wtype, mk_list *l) {
    int64_t E = s->n_embd;
    int rc = add(l, "token_embd.weight", wtype, E, s->n_vocab, 0, STD_MATRIX);
    rc |= add(l, "output_norm.weight", KW_TYPE_F32, E, 1, 1, STD_NORM_GAIN);
    if (!s->tied) rc |= add(l, "output.weight", wtype, E, s->n_vocab, 0, STD_MATRIX);
    const kw_arch_desc *a = kw_arch_find(s->arch);
    kw_hparams hp = shape_hparams(s);
    int32_t interval = s->attn_interval ? s->attn_interval : a->layers.interval_default;
    /* an MTP layer (after the n_layer main ones) runs full attention */
    for (int i = 0; i < s->n_layer + s->n_mtp && rc == 0; i++) {
        kw_mixer_kind k = i < s->n_layer ? kw_arch_layer_mixer(a, interval, i) : KW_MIXER_ATTENTION;
        rc |= add_layer_tensors(l, a, kw_arch_mixer_tensors(a, k), &hp, i, wtype);
        rc |= add_layer_tensors(l, a, a->ffn_tensors, &hp, i, wtype);
        if (i >= s->n_layer) rc |= add_mtp_tensors(l, s, i, wtype);
    }
    return rc ? -1 : 0;
}

/* The types of the target (mix.c): a tensor a quantization leaves alone
 * (norms, the router) is F32, the others get the target's choice. */
static int apply_target(mk_list *l, const kw_mk_shape *s, uint32_t wtype, kw_err *err) {
    int n = l->n;
    const char **names = malloc((size_t)(n ? n : 1) * sizeof *names);
    uint32_t *dims = malloc((size_t)(n ? n : 1) * sizeof *dims), *types = malloc((size_t)(n ? n : 1) * sizeof *types);
    int64_t *ne0 = malloc((size_t)(n ? n : 1) * sizeof *ne0);
    int rc = names && dims && types && ne0 ? 0 : kw_err_set(err, "out of memory");
    for (int i = 0; i < n && !rc; i++) {
        names[i] = l->t[i].name;
        dims[i] = (uint32_t)l->t[i].n_dims;
        ne0[i] = l->t[i].ne[0];
    }
    /* the mixes count the file's layers (block_count), MTP ones included */
    kw_mk_mix_model m = {s->arch, s->n_layer + s->n_mtp, s->n_head, s->n_head_kv, s->n_expert};
    if (!rc) rc = kw_mk_mix_types(wtype, &m, n, names, dims, ne0, types, err);
    for (int i = 0; i < n && !rc; i++) l->t[i].type = types[i] == KW_MK_KEEP ? KW_TYPE_F32 : types[i];
    free(names);
    free(dims);
    free(types);
    free(ne0);
    return rc;
}

/* One row: its own stream, scaled, encoded. */
static void random_row(const mk_tensor *t, int64_t r, float *row, void *dst) {
    uint64_t st = t->seed ^ ((uint64_t)r * 0xD1B54A32D192ED03ull);
    splitmix64(&st);
    gaussians(&st, row, t->ne[0]);
    for (int64_t k = 0; k < t->ne[0]; k++) row[k] = t->mean + t->std * row[k];
    kw_quantize_row(t->type, row, dst, t->ne[0]);
}

typedef struct fill_job { const mk_tensor *t; int64_t first, n; uint8_t *dst; size_t rb; } fill_job;

static void fill_task(void *arg, int ith, int nth) {
    const fill_job *j = arg;
    int64_t per = (j->n + nth - 1) / nth, lo = ith * per, hi = lo + per < j->n ? lo + per : j->n;
    for (int64_t r = lo; r < hi; r++)
        random_row(j->t, j->first + r, j->t->run->rows[ith], j->dst + (size_t)r * j->rb);
}

static int fill_random(void *ctx, int64_t first, int64_t n, void *dst, kw_err *err) {
    mk_tensor *t = ctx;
    fill_job j = {t, first, n, dst, kw_row_bytes(t->type, t->ne[0])};
    if (t->run->pool && n > 1) kw_pool_run(t->run->pool, fill_task, &j);
    else fill_task(&j, 0, 1);
    return 0;
}

/* ---- metadata ---- */

static void set_arch_u32(kw_gguf_writer *w, const char *arch, const char *key, uint32_t v) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    kw_gguf_writer_set_u32(w, k, v);
}

static void set_arch_f32(kw_gguf_writer *w, const char *arch, const char *key, float v) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    kw_gguf_writer_set_f32(w, k, v);
}

static void set_model_kvs(kw_gguf_writer *w, const kw_mk_shape *s, uint32_t wtype, uint64_t seed) {
    const char *a = s->arch;
    kw_gguf_writer_set_str(w, "general.architecture", a);
    kw_gguf_writer_set_str(w, "general.name", s->name);
    char desc[160];
    snprintf(desc, sizeof desc, "random weights (seed %llu) written by kvwise mkmodel; the text it generates is noise",
             (unsigned long long)seed);
    kw_gguf_writer_set_str(w, "general.description", desc);
    int ft = kw_mk_target_file_type(wtype);
    if (ft >= 0) kw_gguf_writer_set_u32(w, "general.file_type", (uint32_t)ft);
    kw_gguf_writer_set_u32(w, "general.quantization_version", 2);
    set_arch_u32(w, a, "context_length", (uint32_t)s->n_ctx);
    set_arch_u32(w, a, "embedding_length", (uint32_t)s->n_embd);
    set_arch_u32(w, a, "block_count", (uint32_t)(s->n_layer + s->n_mtp));
    set_arch_u32(w, a, "feed_forward_length", (uint32_t)s->n_ff);
    set_arch_u32(w, a, "attention.head_count", (uint32_t)s->n_head);
    set_arch_u32(w, a, "attention.head_count_kv", (uint32_t)s->n_head_kv);
    set_arch_u32(w, a, "attention.key_length", (uint32_t)s->head_dim);
    set_arch_u32(w, a, "attention.value_length", (uint32_t)s->head_dim);
    set_arch_u32(w, a, "rope.dimension_count", (uint32_t)(s->rope_dim > 0 ? s->rope_dim : s->head_dim));
    set_arch_u32(w, a, "vocab_size", (uint32_t)s->n_vocab);
    set_arch_f32(w, a, "rope.freq_base", s->rope_base);
    set_arch_f32(w, a, "attention.layer_norm_rms_epsilon", s->rms_eps);
    if (s->n_expert > 0) {
        set_arch_u32(w, a, "expert_count", (uint32_t)s->n_expert);
        set_arch_u32(w, a, "expert_used_count", (uint32_t)s->n_expert_used);
        set_arch_u32(w, a, "expert_feed_forward_length", (uint32_t)s->n_ff_exp);
        if (s->n_ff_shexp > 0) set_arch_u32(w, a, "expert_shared_feed_forward_length", (uint32_t)s->n_ff_shexp);
    }
    if (kw_mk_is_hybrid(a)) kw_mk_hybrid_kvs(w, s);
}

static void set_tokenizer_kvs(kw_gguf_writer *w, const kw_mk_vocab *v) {
    kw_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    kw_gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt-2");
    kw_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens, (uint64_t)v->n_tokens);
    kw_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", KW_GGUF_INT32, v->types, (uint64_t)v->n_tokens);
    kw_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges, (uint64_t)v->n_merges);
    kw_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->eos);
    kw_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos);
    kw_gguf_writer_set_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)v->im_end);
    kw_gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)v->eos);
    kw_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false);
    kw_gguf_writer_set_str(w, "tokenizer.chat_template", kw_mk_chatml_template);
}

/* ---- writing ---- */

int kw_mk_write(const kw_mk_shape *shape, uint32_t wtype, uint64_t seed, const char *path, kw_err *err) {
    kw_mk_shape s = *shape;
    if (kw_mk_shape_check(&s, err)) return -1;
    if (kw_mk_target_file_type(wtype) < 0)
        return kw_err_set(err, "weight type %s is not one mkmodel writes (f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k "
                          "q4_k_m q5_k_m q6_k)", kw_type_name(wtype));
    kw_mk_vocab v = {0};
    kw_hf_vocab hf = {0};
    if (s.hf_tokenizer) {
        if (kw_hf_vocab_load(s.hf_tokenizer, &hf, err)) return -1;
        s.n_vocab = hf.n_tokens;
        if (kw_mk_shape_check(&s, err)) { kw_hf_vocab_free(&hf); return -1; }
    } else if (kw_mk_vocab_build(s.n_vocab, &v, err)) {
        return -1;
    }
    mk_list l = {0};
    kw_gguf_writer *w = kw_gguf_writer_create();
    int rc = w ? 0 : kw_err_set(err, "out of memory");
    if (!rc && build_list(&s, wtype, &l)) rc = kw_err_set(err, "out of memory");
    if (!rc) rc = apply_target(&l, &s, wtype, err);
    if (!rc) {
        set_model_kvs(w, &s, wtype, seed);
        if (s.hf_tokenizer) kw_hf_vocab_write_kvs(&hf, w);
        else set_tokenizer_kvs(w, &v);
    }
    int64_t max_row = 0;
    for (int i = 0; i < l.n; i++) if (l.t[i].ne[0] > max_row) max_row = l.t[i].ne[0];
    mk_run run = {0};
    run.n_threads = kw_cpu_physical_cores();
    if (run.n_threads < 1) run.n_threads = 1;
    if (run.n_threads > MK_MAX_THREADS) run.n_threads = MK_MAX_THREADS;
    if (!rc && run.n_threads > 1) run.pool = kw_pool_create(run.n_threads);
    if (!run.pool) run.n_threads = 1;
    for (int k = 0; k < run.n_threads && !rc; k++) {
        run.rows[k] = kw_mem_alloc(KW_MEM_WORKSPACE, (size_t)(max_row + 1) * sizeof(float));
        if (!run.rows[k]) rc = kw_err_set(err, "out of memory");
    }
    uint64_t base = seed;
    splitmix64(&base);
    for (int i = 0; i < l.n && !rc; i++) {
        mk_tensor *t = &l.t[i];
        uint64_t st = base ^ ((uint64_t)(i + 1) * 0xA0761D6478BD642Full);
        t->seed = splitmix64(&st);
        t->run = &run;
        int64_t ne[3] = {t->ne[0], t->ne[1], t->ne[2]};
        rc = kw_gguf_writer_add_tensor_fill(w, t->name, t->type, t->n_dims, ne, fill_random, t, err);
    }
    if (!rc) rc = kw_gguf_writer_write_progress(w, path, s.progress, err);
    for (int k = 0; k < MK_MAX_THREADS; k++) kw_mem_free(run.rows[k]);
    kw_pool_destroy(run.pool);
    kw_gguf_writer_destroy(w);
    free(l.t);
    if (s.hf_tokenizer) kw_hf_vocab_free(&hf);
    else kw_mk_vocab_free(&v);
    return rc;
}
