/* model.c - hyper-parameters and weight binding (model.h).
 *
 * Owns: reading a model's shape from GGUF metadata (kw_hparams_from_gguf)
 * as its architecture's descriptor (arch.h, src/model/arch.c) says:
 * defaults, RoPE pairing, optional tensor groups, the layer schedule;
 * checking that every tensor the descriptor lists for a layer is present
 * (or allowed to be absent) with a supported type and the shape the hparams
 * imply, binding them into a kw_model (weights stay in the read-only
 * mapping), and the KV layout a model needs. The forward pass is in
 * forward.c. */
#include "model_internal.h"
#include "kvwise/footprint.h"
#include "kvwise/memory.h"
#include "kvwise/progress.h"
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>

/* ---- metadata helpers ---- */

static bool arch_int(const kw_gguf *g, const char *arch, const char *key, int64_t *out) {
    char full[160];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    return kw_gguf_get_int(g, full, out);
}

static bool arch_float(const kw_gguf *g, const char *arch, const char *key, double *out) {
    char full[160];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    return kw_gguf_get_float(g, full, out);
}

static const char *arch_str(const kw_gguf *g, const char *arch, const char *key) {
    char full[160];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    return kw_gguf_get_str(g, full);
}

/* A required positive integer key <arch>.key within [1, max]. */
static int need_int(const kw_gguf *g, const char *arch, const char *key, int64_t max, int32_t *out, kw_err *err) {
    int64_t v;
    if (!arch_int(g, arch, key, &v)) return kw_err_set(err, "missing metadata key %s.%s", arch, key);
    if (v < 1 || v > max) return kw_err_set(err, "metadata %s.%s = %lld is out of range (1..%lld)",
                                            arch, key, (long long)v, (long long)max);
    *out = (int32_t)v;
    return 0;
}

/* An optional positive integer key; keeps *out (the default) when absent. */
static int opt_int(const kw_gguf *g, const char *arch, const char *key, int64_t max, int32_t *out, kw_err *err) {
    int64_t v;
    if (!arch_int(g, arch, key, &v)) return 0;
    if (v < 1 || v > max) return kw_err_set(err, "metadata %s.%s = %lld is out of range (1..%lld)",
                                            arch, key, (long long)v, (long long)max);
    *out = (int32_t)v;
    return 0;
}

static int read_vocab_size(const kw_gguf *g, const char *arch, kw_hparams *hp, kw_err *err) {
    int64_t v;
    const kw_gguf_kv *toks = kw_gguf_find(g, "tokenizer.ggml.tokens");
    const kw_gguf_tensor *emb = kw_gguf_find_tensor(g, "token_embd.weight");
    if (arch_int(g, arch, "vocab_size", &v)) {
        /* use it */
    } else if (toks && toks->type == KW_GGUF_ARRAY) {
        v = (int64_t)toks->arr_n;
    } else if (emb) {
        v = emb->ne[1];
    } else {
        return kw_err_set(err, "cannot tell the vocabulary size: no %s.vocab_size, tokenizer.ggml.tokens or token_embd.weight", arch);
    }
    if (v < 1 || v > (1 << 24)) return kw_err_set(err, "vocabulary size %lld is out of range", (long long)v);
    hp->n_vocab = (int32_t)v;
    return 0;
}

static int read_rope(const kw_gguf *g, const char *arch, kw_hparams *hp, kw_err *err) {
    double f;
    hp->rope_base = hp->arch->defaults.rope_freq_base;
    if (arch_float(g, arch, "rope.freq_base", &f)) {
        if (!(f > 0.0) || f > 1e12) return kw_err_set(err, "metadata %s.rope.freq_base = %g is out of range", arch, f);
        hp->rope_base = (float)f;
    }
    hp->rope_dim = hp->head_dim_k;
    if (opt_int(g, arch, "rope.dimension_count", hp->head_dim_k, &hp->rope_dim, err) != 0) return -1;
    if (hp->rope_dim % 2) return kw_err_set(err, "metadata %s.rope.dimension_count = %d must be even", arch, hp->rope_dim);
    hp->rope_scale = 1.0f;
    const char *type = arch_str(g, arch, "rope.scaling.type");
    if (type && strcmp(type, "none") != 0) {
        if (strcmp(type, "linear") != 0)
            return kw_err_set(err, "rope scaling type '%s' is not supported (supported: none, linear)", type);
        if (!arch_float(g, arch, "rope.scaling.factor", &f))
            return kw_err_set(err, "rope scaling 'linear' without %s.rope.scaling.factor", arch);
        if (!(f > 0.0) || f > 1e6) return kw_err_set(err, "metadata %s.rope.scaling.factor = %g is out of range", arch, f);
        hp->rope_scale = (float)f;
    } else if (!type && arch_float(g, arch, "rope.scale_linear", &f)) {
        if (!(f > 0.0) || f > 1e6) return kw_err_set(err, "metadata %s.rope.scale_linear = %g is out of range", arch, f);
        hp->rope_scale = (float)f;
    }
    hp->rope_neox = hp->arch->rope == KW_ROPE_NEOX;
    return 0;
}

/* The trailing multi-token-prediction blocks (nextn_predict_layers): they
 * count in block_count but are not part of the main stack, so n_layer
 * leaves them out; their blk.N.* tensors stay in the mapping unbound (for
 * speculative decoding later). */
static int read_nextn(const kw_gguf *g, const char *arch, kw_hparams *hp, kw_err *err) {
    int64_t v;
    if (!arch_int(g, arch, "nextn_predict_layers", &v) || v == 0) return 0;
    if (v < 0 || v >= hp->n_layer)
        return kw_err_set(err, "metadata %s.nextn_predict_layers = %lld is out of range (0..%d)", arch, (long long)v,
                          hp->n_layer - 1);
    hp->n_nextn_layers = (int32_t)v;
    hp->n_layer -= hp->n_nextn_layers;
    return 0;
}

/* The interval of the descriptor's every-Nth-layer rule, and the layers
 * whose mixer keeps a KV cache / a recurrent state. */
static int read_layer_schedule(const kw_gguf *g, const char *arch, kw_hparams *hp, kw_err *err) {
    const kw_layer_schedule *ls = &hp->arch->layers;
    hp->layer_interval = ls->interval_default;
    if (ls->interval_key && opt_int(g, arch, ls->interval_key, hp->n_layer, &hp->layer_interval, err)) return -1;
    hp->n_kv_layers = hp->n_rec_layers = 0;
    for (int32_t il = 0; il < hp->n_layer; il++) {
        kw_mixer_kind k = kw_arch_layer_mixer(hp->arch, hp->layer_interval, il);
        hp->n_kv_layers += kw_mixer_has_kv(k);
        hp->n_rec_layers += k == KW_MIXER_GDN;
    }
    return 0;
}

/* The gated delta net keys (ik_llama.cpp's names; all required when the
 * schedule has such a layer): value heads a multiple of key heads, the
 * inner size = value heads x state size. */
static int read_gdn(const kw_gguf *g, const char *arch, kw_hparams *hp, kw_err *err) {
    if (hp->n_rec_layers == 0) return 0;
    if (need_int(g, arch, "ssm.state_size", 1 << 12, &hp->ssm_d_state, err) ||
        need_int(g, arch, "ssm.group_count", 1 << 12, &hp->ssm_n_group, err) ||
        need_int(g, arch, "ssm.time_step_rank", 1 << 12, &hp->ssm_dt_rank, err) ||
        need_int(g, arch, "ssm.inner_size", 1 << 20, &hp->ssm_d_inner, err) ||
        need_int(g, arch, "ssm.conv_kernel", 64, &hp->ssm_d_conv, err))
        return -1;
    if (hp->ssm_dt_rank % hp->ssm_n_group)
        return kw_err_set(err, "metadata %s.ssm.time_step_rank %d is not a multiple of ssm.group_count %d", arch,
                          hp->ssm_dt_rank, hp->ssm_n_group);
    if ((int64_t)hp->ssm_dt_rank * hp->ssm_d_state != hp->ssm_d_inner)
        return kw_err_set(err, "metadata %s.ssm.inner_size %d is not time_step_rank %d x state_size %d", arch,
                          hp->ssm_d_inner, hp->ssm_dt_rank, hp->ssm_d_state);
    uint64_t conv_dim = (uint64_t)kw_dim_size(KW_DIM_SSM_CONV, hp);
    uint64_t per_layer = (uint64_t)(hp->ssm_d_conv - 1) * conv_dim +
                         (uint64_t)hp->ssm_dt_rank * (uint64_t)hp->ssm_d_state * (uint64_t)hp->ssm_d_state;
    hp->rec_state_bytes = per_layer * sizeof(float) * (uint64_t)hp->n_rec_layers;
    return 0;
}

/* rope.dimension_sections: four INT32/UINT32 counts of the IMROPE position
 * channels (ARCHITECTURES.md); 0s when absent. */
static int read_rope_sections(const kw_gguf *g, const char *arch, kw_hparams *hp, kw_err *err) {
    char key[160];
    snprintf(key, sizeof key, "%s.rope.dimension_sections", arch);
    const kw_gguf_kv *kv = kw_gguf_find(g, key);
    if (!kv) return 0;
    if (kv->type != KW_GGUF_ARRAY || (kv->arr_type != KW_GGUF_INT32 && kv->arr_type != KW_GGUF_UINT32) ||
        kv->arr_n < 1 || kv->arr_n > 4)
        return kw_err_set(err, "metadata %s must be an array of 1..4 integers", key);
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        int32_t v;
        memcpy(&v, (const uint8_t *)kv->arr_data + 4 * i, 4);
        if (v < 0 || v > hp->rope_dim) return kw_err_set(err, "metadata %s[%llu] = %d is out of range", key,
                                                         (unsigned long long)i, v);
        hp->rope_sections[i] = v;
    }
    return 0;
}

/* The tensors of layer il: its mixer's list, then the feed-forward block's. */
static const kw_tensor_spec *layer_list(const kw_hparams *hp, int32_t il, int part) {
    if (part == 0) return kw_arch_mixer_tensors(hp->arch, kw_arch_layer_mixer(hp->arch, hp->layer_interval, il));
    return hp->arch->ffn_tensors;
}

/* A tensor group is in the layers when the descriptor requires it, or
 * allows it and the first layer that could hold it has its first tensor. */
static bool has_feature(const kw_gguf *g, const kw_hparams *hp, kw_feature f) {
    kw_presence p = kw_arch_presence(hp->arch, f);
    if (p != KW_OPTIONAL) return p == KW_REQUIRED;
    for (int32_t il = 0; il < hp->n_layer; il++)
        for (int part = 0; part < 2; part++)
            for (const kw_tensor_spec *l = layer_list(hp, il, part); l && l->name; l++)
                if (l->feature == f) {
                    char n[96];
                    snprintf(n, sizeof n, "blk.%d.%s", il, l->name);
                    return kw_gguf_find_tensor(g, n) != NULL;
                }
    return false;
}

static void sum_weights(const kw_gguf *g, kw_hparams *hp) {
    hp->weight_bytes = 0;
    hp->n_params = 0;
    hp->expert_bytes = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kw_gguf_tensor *t = &g->tensors[i];
        hp->weight_bytes += t->nbytes;
        hp->n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        if (kw_arch_is_layer_experts(hp->arch, t->name.s)) hp->expert_bytes += t->nbytes;
    }
}

/* The mixture-of-experts keys (ik_llama.cpp's: expert_count and
 * expert_used_count required, the expert width defaulting to
 * feed_forward_length / expert_used_count and the shared expert's to
 * feed_forward_length). No gating, norm or scale key is read: the block
 * always softmaxes, takes the top k and renormalises them (docs/MODEL.md). */
static int read_moe(const kw_gguf *g, const char *arch, kw_hparams *hp, kw_err *err) {
    if (hp->arch->ffn != KW_FFN_MOE) return 0;
    if (need_int(g, arch, "expert_count", 1 << 16, &hp->n_expert, err) ||
        need_int(g, arch, "expert_used_count", hp->n_expert, &hp->n_expert_used, err))
        return -1;
    hp->n_ff_exp = hp->n_ff / hp->n_expert_used;
    if (opt_int(g, arch, "expert_feed_forward_length", 1 << 24, &hp->n_ff_exp, err)) return -1;
    if (hp->n_ff_exp < 1) return kw_err_set(err, "expert width is 0 (feed_forward_length %d / expert_used_count %d)",
                                            hp->n_ff, hp->n_expert_used);
    hp->has_shared_expert = kw_arch_presence(hp->arch, KW_FEAT_SHARED_EXPERT) == KW_REQUIRED;
    if (hp->has_shared_expert) {
        hp->n_ff_shexp = hp->n_ff;
        if (opt_int(g, arch, "expert_shared_feed_forward_length", 1 << 24, &hp->n_ff_shexp, err)) return -1;
    }
    return 0;
}

int kw_hparams_from_gguf(const kw_gguf *g, kw_hparams *hp, kw_err *err) {
    if (!g || !hp) return kw_err_set(err, "hparams: no file");
    memset(hp, 0, sizeof *hp);
    const char *arch = kw_gguf_get_str(g, "general.architecture");
    if (!arch) return kw_err_set(err, "missing metadata key general.architecture (supported: %s)", kw_arch_supported_list());
    hp->arch = kw_arch_find(arch);
    if (!hp->arch) return kw_err_set(err, "unsupported architecture '%.64s' (supported: %s)", arch, kw_arch_supported_list());
    snprintf(hp->arch_name, sizeof hp->arch_name, "%s", arch);
    const char *name = kw_gguf_get_str(g, "general.name");
    snprintf(hp->name, sizeof hp->name, "%s", name ? name : "");

    if (need_int(g, arch, "block_count", 4096, &hp->n_layer, err) ||
        need_int(g, arch, "embedding_length", 1 << 20, &hp->n_embd, err) ||
        need_int(g, arch, "attention.head_count", 1 << 14, &hp->n_head, err) ||
        need_int(g, arch, "feed_forward_length", 1 << 24, &hp->n_ff, err))
        return -1;
    hp->n_head_kv = hp->n_head;
    if (opt_int(g, arch, "attention.head_count_kv", hp->n_head, &hp->n_head_kv, err)) return -1;
    if (hp->n_head % hp->n_head_kv)
        return kw_err_set(err, "head_count %d is not a multiple of head_count_kv %d", hp->n_head, hp->n_head_kv);
    hp->head_dim_k = hp->n_embd / hp->n_head;
    if (opt_int(g, arch, "attention.key_length", 1 << 14, &hp->head_dim_k, err)) return -1;
    hp->head_dim_v = hp->head_dim_k;
    if (opt_int(g, arch, "attention.value_length", 1 << 14, &hp->head_dim_v, err)) return -1;
    if (hp->head_dim_k < 1 || hp->head_dim_v < 1)
        return kw_err_set(err, "head dimension is 0 (embedding_length %d, head_count %d)", hp->n_embd, hp->n_head);
    hp->n_ctx_train = hp->arch->defaults.context_length;
    if (opt_int(g, arch, "context_length", 1 << 30, &hp->n_ctx_train, err)) return -1;
    double eps = hp->arch->defaults.rms_eps;
    if (arch_float(g, arch, "attention.layer_norm_rms_epsilon", &eps) && !(eps > 0.0 && eps < 1.0))
        return kw_err_set(err, "metadata %s.attention.layer_norm_rms_epsilon = %g is out of range", arch, eps);
    hp->rms_eps = (float)eps;
    if (read_rope(g, arch, hp, err) || read_rope_sections(g, arch, hp, err) || read_vocab_size(g, arch, hp, err) ||
        read_nextn(g, arch, hp, err) || read_layer_schedule(g, arch, hp, err) || read_gdn(g, arch, hp, err) ||
        read_moe(g, arch, hp, err))
        return -1;
    hp->tied_output = kw_gguf_find_tensor(g, "output.weight") == NULL;
    hp->has_qkv_bias = has_feature(g, hp, KW_FEAT_QKV_BIAS);
    hp->has_qk_norm = has_feature(g, hp, KW_FEAT_QK_NORM);
    sum_weights(g, hp);
    return 0;
}

/* ---- tensor binding and validation ---- */

static const kw_gguf_tensor *find_tensor(const kw_gguf *g, const char *name, bool required, kw_err *err) {
    const kw_gguf_tensor *t = kw_gguf_find_tensor(g, name);
    if (!t && required) kw_err_set(err, "tensor %s is missing", name);
    return t;
}

static int check_shape(const kw_gguf_tensor *t, const char *name, int64_t ne0, int64_t ne1, kw_err *err) {
    int64_t want1 = ne1 > 0 ? ne1 : 1;
    if (t->ne[0] != ne0 || t->ne[1] != want1 || t->ne[2] != 1 || t->ne[3] != 1)
        return kw_err_set(err, "tensor %s has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]", name,
                          (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                          (long long)ne0, (long long)want1);
    return 0;
}

/* Binds a weight matrix `name` of `rows` x `cols`. */
static int bind_matrix(const kw_gguf *g, const char *name, int64_t rows, int64_t cols, kw_matrix *m, kw_err *err) {
    const kw_gguf_tensor *t = find_tensor(g, name, true, err);
    if (!t) return -1;
    const kw_type_traits *tr = kw_type_traits_get(t->type);
    if (!tr || !tr->supported)
        return kw_err_set(err, "tensor %s has type %s, which kvwise does not support", name, kw_type_name(t->type));
    if (check_shape(t, name, cols, rows, err)) return -1;
    size_t rb = kw_row_bytes(t->type, cols);
    if (rb == 0)
        return kw_err_set(err, "tensor %s: row length %lld is not a multiple of the %s block size %d",
                          name, (long long)cols, tr->name, tr->block_size);
    if ((uint64_t)rb * (uint64_t)rows > t->nbytes)
        return kw_err_set(err, "tensor %s: %llu bytes of data, expected %llu", name,
                          (unsigned long long)t->nbytes, (unsigned long long)rb * (unsigned long long)rows);
    memset(m, 0, sizeof *m);
    m->type = t->type;
    m->rows = rows;
    m->cols = cols;
    m->row_bytes = rb;
    m->data = t->data;
    return 0;
}

/* Binds an F32 array of [ne0, ne1] values read as stored (ne1 = 1: a
 * vector); *v = NULL when absent and optional. */
static int bind_f32(const kw_gguf *g, const char *name, int64_t ne0, int64_t ne1, bool required, kw_vec *v, kw_err *err) {
    *v = NULL;
    const kw_gguf_tensor *t = find_tensor(g, name, required, err);
    if (!t) return required ? -1 : 0;
    if (t->type != KW_TYPE_F32)
        return kw_err_set(err, "tensor %s has type %s; %s must be f32", name, kw_type_name(t->type),
                          ne1 > 1 ? "convolution filters" : "1-D tensors");
    if (check_shape(t, name, ne0, ne1, err)) return -1;
    int64_t n = ne0 * ne1;
    if (t->nbytes < (uint64_t)n * sizeof(float))
        return kw_err_set(err, "tensor %s: %llu bytes of data, expected %llu", name,
                          (unsigned long long)t->nbytes, (unsigned long long)n * sizeof(float));
    if (((uintptr_t)t->data) % sizeof(float))
        return kw_err_set(err, "tensor %s: data is not 4-byte aligned", name);
    *v = (kw_vec)t->data;
    return 0;
}

/* Binds an F32 vector of n values; *v = NULL when absent and optional. */
static int bind_vec(const kw_gguf *g, const char *name, int64_t n, bool required, kw_vec *v, kw_err *err) {
    return bind_f32(g, name, n, 1, required, v, err);
}

/* A 3-D expert tensor `name`: n matrices of rows x cols, read in place. */
static int bind_experts(const kw_gguf *g, const char *name, int64_t rows, int64_t cols, int64_t n, kw_experts *E,
                        kw_err *err) {
    const kw_gguf_tensor *t = find_tensor(g, name, true, err);
    if (!t) return -1;
    const kw_type_traits *tr = kw_type_traits_get(t->type);
    if (!tr || !tr->supported)
        return kw_err_set(err, "tensor %s has type %s, which kvwise does not support", name, kw_type_name(t->type));
    if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != n || t->ne[3] != 1)
        return kw_err_set(err, "tensor %s has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld]", name,
                          (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                          (long long)cols, (long long)rows, (long long)n);
    size_t rb = kw_row_bytes(t->type, cols);
    if (rb == 0)
        return kw_err_set(err, "tensor %s: row length %lld is not a multiple of the %s block size %d",
                          name, (long long)cols, tr->name, tr->block_size);
    if ((uint64_t)rb * (uint64_t)rows * (uint64_t)n > t->nbytes)
        return kw_err_set(err, "tensor %s: %llu bytes of data, expected %llu", name, (unsigned long long)t->nbytes,
                          (unsigned long long)rb * (unsigned long long)rows * (unsigned long long)n);
    *E = (kw_experts){.type = t->type, .rows = rows, .cols = cols, .row_bytes = rb, .n = (int32_t)n,
                      .stride = rb * (size_t)rows, .data = t->data};
    return 0;
}

/* Where model.c binds each layer tensor in kw_layer, and as which kind. */
typedef enum slot_kind { SLOT_VEC = 0, SLOT_MATRIX, SLOT_EXPERTS } slot_kind;
typedef struct layer_slot { size_t offset; slot_kind kind; } layer_slot;
static const layer_slot k_slots[KW_LT_COUNT] = {
    [KW_LT_ATTN_NORM] = {offsetof(kw_layer, attn_norm), SLOT_VEC},
    [KW_LT_ATTN_Q] = {offsetof(kw_layer, wq), SLOT_MATRIX},
    [KW_LT_ATTN_K] = {offsetof(kw_layer, wk), SLOT_MATRIX},
    [KW_LT_ATTN_V] = {offsetof(kw_layer, wv), SLOT_MATRIX},
    [KW_LT_ATTN_Q_BIAS] = {offsetof(kw_layer, bq), SLOT_VEC},
    [KW_LT_ATTN_K_BIAS] = {offsetof(kw_layer, bk), SLOT_VEC},
    [KW_LT_ATTN_V_BIAS] = {offsetof(kw_layer, bv), SLOT_VEC},
    [KW_LT_ATTN_Q_NORM] = {offsetof(kw_layer, q_norm), SLOT_VEC},
    [KW_LT_ATTN_K_NORM] = {offsetof(kw_layer, k_norm), SLOT_VEC},
    [KW_LT_ATTN_OUT] = {offsetof(kw_layer, wo), SLOT_MATRIX},
    [KW_LT_FFN_NORM] = {offsetof(kw_layer, ffn_norm), SLOT_VEC},
    [KW_LT_FFN_GATE] = {offsetof(kw_layer, w_gate), SLOT_MATRIX},
    [KW_LT_FFN_UP] = {offsetof(kw_layer, w_up), SLOT_MATRIX},
    [KW_LT_FFN_DOWN] = {offsetof(kw_layer, w_down), SLOT_MATRIX},
    [KW_LT_FFN_ROUTER] = {offsetof(kw_layer, w_router), SLOT_MATRIX},
    [KW_LT_FFN_GATE_EXPS] = {offsetof(kw_layer, gate_exps), SLOT_EXPERTS},
    [KW_LT_FFN_UP_EXPS] = {offsetof(kw_layer, up_exps), SLOT_EXPERTS},
    [KW_LT_FFN_DOWN_EXPS] = {offsetof(kw_layer, down_exps), SLOT_EXPERTS},
    [KW_LT_FFN_SHEXP_GATE_INP] = {offsetof(kw_layer, shexp_gate), SLOT_VEC},
    [KW_LT_FFN_GATE_SHEXP] = {offsetof(kw_layer, w_gate), SLOT_MATRIX},   /* the shared expert in the dense slots */
    [KW_LT_FFN_UP_SHEXP] = {offsetof(kw_layer, w_up), SLOT_MATRIX},
    [KW_LT_FFN_DOWN_SHEXP] = {offsetof(kw_layer, w_down), SLOT_MATRIX},
    [KW_LT_SSM_QKV] = {offsetof(kw_layer, w_qkv), SLOT_MATRIX},
    [KW_LT_SSM_Z] = {offsetof(kw_layer, w_z), SLOT_MATRIX},
    [KW_LT_SSM_BETA] = {offsetof(kw_layer, w_beta), SLOT_MATRIX},
    [KW_LT_SSM_ALPHA] = {offsetof(kw_layer, w_alpha), SLOT_MATRIX},
    [KW_LT_SSM_CONV] = {offsetof(kw_layer, ssm_conv), SLOT_VEC},
    [KW_LT_SSM_DT_BIAS] = {offsetof(kw_layer, ssm_dt_bias), SLOT_VEC},
    [KW_LT_SSM_A] = {offsetof(kw_layer, ssm_a), SLOT_VEC},
    [KW_LT_SSM_NORM] = {offsetof(kw_layer, ssm_norm), SLOT_VEC},
    [KW_LT_SSM_OUT] = {offsetof(kw_layer, w_ssm_out), SLOT_MATRIX},
};

static slot_kind role_slot(kw_tensor_role r) {
    return r == KW_ROLE_MATRIX ? SLOT_MATRIX : r == KW_ROLE_EXPERTS ? SLOT_EXPERTS : SLOT_VEC;
}

/* Binds blk.<il>.<t->name> as the descriptor's presence for it says:
 * absent groups are not bound, optional ones only when the file has them. */
static int bind_spec(const kw_gguf *g, const kw_hparams *hp, int il, const kw_tensor_spec *t, kw_layer *L, kw_err *err) {
    kw_presence p = kw_arch_presence(hp->arch, t->feature);
    if (p == KW_ABSENT) return 0;
    char n[96];
    snprintf(n, sizeof n, "blk.%d.%s", il, t->name);
    const layer_slot *s = &k_slots[t->what];
    if (s->offset == 0 && t->what != KW_LT_ATTN_NORM)
        return kw_err_set(err, "tensor %s: the layer has no place for it", n);
    if (s->kind != role_slot(t->role))
        return kw_err_set(err, "tensor %s: the architecture table and the layer disagree on its kind", n);
    void *field = (char *)L + s->offset;
    int64_t ne0 = kw_dim_size(t->ne0, hp), ne1 = kw_dim_size(t->ne1, hp);
    if (s->kind == SLOT_VEC) return bind_f32(g, n, ne0, ne1, p == KW_REQUIRED, field, err);
    if (p == KW_OPTIONAL && !kw_gguf_find_tensor(g, n)) return 0;
    if (s->kind == SLOT_EXPERTS) return bind_experts(g, n, ne1, ne0, hp->n_expert, field, err);
    return bind_matrix(g, n, ne1, ne0, field, err);
}

static int bind_layer(const kw_gguf *g, const kw_hparams *hp, int il, kw_layer *L, kw_err *err) {
    for (int part = 0; part < 2; part++)
        for (const kw_tensor_spec *t = layer_list(hp, il, part); t && t->name; t++)
            if (bind_spec(g, hp, il, t, L, err)) return -1;
    return 0;
}

static int bind_model(kw_model *m, kw_err *err) {
    const kw_gguf *g = m->gguf;
    const kw_hparams *hp = &m->hp;
    if (bind_matrix(g, "token_embd.weight", hp->n_vocab, hp->n_embd, &m->tok_embd, err) ||
        bind_vec(g, "output_norm.weight", hp->n_embd, true, &m->output_norm, err))
        return -1;
    if (hp->tied_output) m->output = m->tok_embd;
    else if (bind_matrix(g, "output.weight", hp->n_vocab, hp->n_embd, &m->output, err)) return -1;
    if (bind_vec(g, "rope_freqs.weight", hp->rope_dim / 2, false, &m->rope_freqs, err)) return -1;
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) return kw_err_set(err, "out of memory binding %d layers", hp->n_layer);
    int32_t n_kv = 0, n_rec = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        kw_layer *L = &m->layers[il];
        L->mixer = kw_arch_layer_mixer(hp->arch, hp->layer_interval, il);
        L->kv_layer = kw_mixer_has_kv(L->mixer) ? n_kv++ : -1;
        L->rec_layer = L->mixer == KW_MIXER_GDN ? n_rec++ : -1;
        if (bind_layer(g, hp, il, L, err)) return -1;
    }
    return 0;
}

/* Once a packed copy serves rows [0, packed_rows) of W, the mapped pages of
 * those rows are never read again: drop them from the process (the file
 * stays in the page cache; a stray read would fault them back in from the
 * file, so this is safe) and take them off the weights line, so weights are
 * not held twice. Not for a tied embedding (its rows are also read as the
 * token-embedding table): pack_weights() passes release = false for it. */
static void release_packed_source(kw_model *m, const kw_matrix *W) {
    int64_t rows = kw_matrix_packed_rows(W);
    if (rows <= 0) return;
    uint64_t start = 0;
    size_t len = kw_whole_pages((uint64_t)(uintptr_t)W->data, (uint64_t)rows * W->row_bytes, &start);
    if (len && madvise((void *)(uintptr_t)start, len, MADV_DONTNEED) == 0) {
        kw_mem_note_mapped(KW_MEM_WEIGHTS, -(int64_t)len);
        m->released_bytes += len;
    }
}

/* Repacks every matrix for the active kernel family (accounted as
 * KW_MEM_WEIGHTS); types without a packed form stay as mapped. A layer's
 * matrices share one block in the order decode reads them, so the layer is
 * one run of huge pages (a block per matrix left each one's small-page
 * head and tail, the K/V matrices wholly: 82% -> 96% of the copies on huge
 * pages, Q8_0 1B decode +3% alternating with the old layout in one
 * process). The LM head has a block of its own. Each layer's mapped pages
 * are dropped right after its copies are made (unless they must stay:
 * --mlock), so the load peak is the file plus one layer, not twice the
 * weights. */
#define KW_LAYER_MAX_MATRICES 16
/* The bound matrices of layer il in the order the descriptor lists them
 * (the order the forward pass reads them); returns how many. */
static int layer_matrices(const kw_model *m, int il, kw_matrix *ws[KW_LAYER_MAX_MATRICES]) {
    kw_layer *L = &m->layers[il];   /* the layers array is not const inside the model */
    int n = 0;
    for (int part = 0; part < 2; part++)
        for (const kw_tensor_spec *t = layer_list(&m->hp, il, part); t && t->name; t++) {
            if (t->role != KW_ROLE_MATRIX || n == KW_LAYER_MAX_MATRICES) continue;   /* experts stay mapped */
            kw_matrix *w = (kw_matrix *)(void *)((char *)L + k_slots[t->what].offset);
            if (w->data) ws[n++] = w;
        }
    return n;
}

static int pack_weights(kw_model *m, bool release, kw_progress *prog, kw_err *err) {
    kw_progress_set_total(prog, (uint64_t)m->hp.n_layer + 1);
    for (int il = 0; il < m->hp.n_layer; il++) {
        kw_matrix *ws[KW_LAYER_MAX_MATRICES];
        int n = layer_matrices(m, il, ws);
        if (kw_matrices_pack(ws, n, &m->layers[il].pack_block, err) < 0) return -1;
        if (release)
            for (int i = 0; i < n; i++) release_packed_source(m, ws[i]);
        kw_progress_add(prog, 1);
    }
    if (kw_matrix_pack(&m->output, err) < 0) return -1;
    kw_progress_add(prog, 1);
    if (release && !m->hp.tied_output) release_packed_source(m, &m->output);
    return 0;
}

static void unpack_weights(kw_model *m) {
    if (m->layers)
        for (int il = 0; il < m->hp.n_layer; il++) {
            kw_matrix *ws[KW_LAYER_MAX_MATRICES];
            int n = layer_matrices(m, il, ws);
            kw_matrices_unpack(ws, n, m->layers[il].pack_block);
            m->layers[il].pack_block = NULL;
        }
    kw_matrix_unpack(&m->output);
}

/* The expert table, and the packed slots of every layer's expert tensors. */
static int alloc_expert_use(kw_model *m, kw_err *err) {
    if (m->hp.n_expert < 1) return 0;
    size_t nl = (size_t)m->hp.n_layer, ne = (size_t)m->hp.n_expert;
    kw_expert_use *u = m->experts = calloc(1, sizeof *m->experts);
    if (u) {
        u->used = calloc(nl * ne, 1);
        u->claimed = calloc(nl * ne, 1);
        u->slots = calloc(nl * 3 * ne, sizeof *u->slots);
        u->blocks = calloc(nl * ne, sizeof *u->blocks);
    }
    if (!u || !u->used || !u->claimed || !u->slots || !u->blocks)
        return kw_err_set(err, "out of memory for the expert table");
    for (size_t il = 0; il < nl; il++) {
        kw_layer *L = &m->layers[il];
        kw_experts *E[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
        for (int t = 0; t < 3; t++) {
            if (!E[t]->data) continue;
            E[t]->packed = u->slots + (il * 3 + (size_t)t) * ne;
            u->pack_growth += kw_experts_pack_growth(E[t], (uint64_t)(uintptr_t)E[t]->data);
        }
    }
    return 0;
}

static void free_expert_use(kw_model *m) {
    kw_expert_use *u = m->experts;
    if (!u) return;
    if (u->blocks)
        for (size_t i = 0; i < (size_t)m->hp.n_layer * (size_t)m->hp.n_expert; i++) kw_mem_free(u->blocks[i]);
    kw_mem_note_mapped(KW_MEM_WEIGHTS, (int64_t)atomic_load(&u->released_bytes));   /* as for released_bytes */
    free((void *)u->used);
    free((void *)u->claimed);
    free((void *)u->slots);
    free(u->blocks);
    free(u);
    m->experts = NULL;
}

typedef struct pack_job {
    kw_model *m;
    int il, n;
    const int32_t *todo;
} pack_job;

static void pack_experts_task(void *arg, int ith, int nth) {
    pack_job *j = arg;
    kw_layer *L = &j->m->layers[j->il];
    kw_experts *E[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
    for (int i = ith; i < j->n; i += nth) {
        kw_err err = {{0}};
        j->m->experts->blocks[(size_t)j->il * (size_t)j->m->hp.n_expert + (size_t)j->todo[i]] =
            kw_experts_pack(E, 3, j->todo[i], &err);
    }
}

/* Expert e of layer il now has packed copies: its mapped pages are not read
 * again (release_packed_source's reasoning, whole pages only, so the
 * neighbours' shared pages stay). */
static void release_expert_source(kw_model *m, int il, int32_t e) {
    kw_expert_use *u = m->experts;
    const kw_layer *L = &m->layers[il];
    const kw_experts *E[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
    atomic_fetch_add(&u->packed_bytes, kw_mem_size(u->blocks[(size_t)il * (size_t)m->hp.n_expert + (size_t)e]));
    atomic_fetch_add(&u->n_packed, 1);
    for (int t = 0; t < 3; t++) {
        uint64_t start = 0;
        size_t len = kw_whole_pages((uint64_t)(uintptr_t)E[t]->data + (uint64_t)e * E[t]->stride, E[t]->stride, &start);
        if (len && madvise((void *)(uintptr_t)start, len, MADV_DONTNEED) == 0) {
            kw_mem_note_mapped(KW_MEM_WEIGHTS, -(int64_t)len);
            atomic_fetch_add(&u->released_bytes, len);
        }
    }
}

void kw_model_pack_experts(const kw_model *cm, kw_pool *pool, int il, const int32_t *sel, int64_t nk) {
    kw_model *m = (kw_model *)(uintptr_t)cm;   /* the expert copies are the model's mutable state */
    kw_expert_use *u = m->experts;
    if (!u || !u->pack || il < 0 || il >= m->hp.n_layer) return;
    _Atomic uint8_t *claimed = u->claimed + (size_t)il * (size_t)m->hp.n_expert;
    int32_t *todo = NULL;
    int n = 0;
    for (int64_t q = 0; q < nk; q++) {
        int32_t e = sel[q];
        if (e < 0 || e >= m->hp.n_expert || atomic_load_explicit(&claimed[e], memory_order_relaxed) ||
            atomic_exchange(&claimed[e], 1))
            continue;
        if (!todo && !(todo = malloc((size_t)nk * sizeof *todo))) {   /* no room to list them: try next step */
            atomic_store(&claimed[e], 0);
            return;
        }
        todo[n++] = e;
    }
    if (n == 0) return;
    pack_job j = {m, il, n, todo};
    if (pool && kw_pool_size(pool) > 1 && n > 1) kw_pool_run(pool, pack_experts_task, &j);
    else pack_experts_task(&j, 0, 1);
    for (int i = 0; i < n; i++)
        if (u->blocks[(size_t)il * (size_t)m->hp.n_expert + (size_t)todo[i]]) release_expert_source(m, il, todo[i]);
    free(todo);
}

void kw_model_mark_expert(const kw_model *m, int il, int32_t e) {
    kw_expert_use *u = m->experts;
    if (!u) return;
    _Atomic uint8_t *b = &u->used[(size_t)il * (size_t)m->hp.n_expert + (size_t)e];
    if (atomic_load_explicit(b, memory_order_relaxed) || atomic_exchange(b, 1)) return;
    const kw_layer *L = &m->layers[il];
    atomic_fetch_add(&u->used_bytes, L->gate_exps.stride + L->up_exps.stride + L->down_exps.stride);
    atomic_fetch_add(&u->n_used, 1);
}

/* What the kernel has resident of every layer's expert tensors (their
 * mapped pages), plus the packed copies (accounted, all resident). */
static uint64_t experts_resident(const kw_model *m) {
    uint64_t sum = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const kw_layer *L = &m->layers[il];
        const kw_experts *E[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
        for (int t = 0; t < 3; t++) {
            uint64_t r = E[t]->data ? kw_footprint_resident_bytes(E[t]->data, E[t]->stride * (size_t)E[t]->n) : 0;
            if (r == UINT64_MAX) return r;
            sum += r;
        }
    }
    return sum + atomic_load(&m->experts->packed_bytes);
}

bool kw_model_expert_stats(const kw_model *m, kw_expert_stats *out) {
    memset(out, 0, sizeof *out);
    if (!m || !m->experts) return false;
    out->mapped_bytes = m->hp.expert_bytes;
    out->resident_bytes = experts_resident(m);
    out->used_bytes = atomic_load(&m->experts->used_bytes);
    out->n_experts = m->hp.n_layer * m->hp.n_expert;
    out->n_used = atomic_load(&m->experts->n_used);
    out->locked = m->mlocked;
    out->packing = m->experts->pack;
    out->packed_bytes = atomic_load(&m->experts->packed_bytes);
    out->n_packed = atomic_load(&m->experts->n_packed);
    /* what is left of the allowance: the accounted weights have grown by packed - released so far */
    uint64_t grown = out->packed_bytes - atomic_load(&m->experts->released_bytes);
    uint64_t left = m->experts->pack_growth > grown ? m->experts->pack_growth - grown : 0;
    out->pack_growth = m->experts->pack ? left : 0;
    return true;
}

int kw_experts_mode_from_name(const char *name) {
    if (!name) return -1;
    if (!strcmp(name, "first-use")) return KW_EXPERTS_FIRST_USE;
    if (!strcmp(name, "load")) return KW_EXPERTS_LOAD;
    if (!strcmp(name, "mapped")) return KW_EXPERTS_MAPPED;
    return -1;
}

const char *kw_experts_mode_name(kw_experts_mode mode) {
    return mode == KW_EXPERTS_LOAD ? "load" : mode == KW_EXPERTS_MAPPED ? "mapped" : "first-use";
}

/* Whether experts are packed (first use or now, at load), from the options:
 * never under --no-repack, --mlock (the locked mapped pages stay, so a copy
 * would hold them twice) or "mapped", nor when the active kernel family has
 * no packed form for their types. */
static int setup_expert_packing(kw_model *m, const kw_model_opts *opts, kw_err *err) {
    kw_experts_mode mode = opts ? opts->experts : KW_EXPERTS_FIRST_USE;
    if ((unsigned)mode > KW_EXPERTS_MAPPED) return kw_err_set(err, "unknown experts mode %d", (int)mode);
    kw_expert_use *u = m->experts;
    u->pack = u->pack_growth > 0 && mode != KW_EXPERTS_MAPPED && !(opts && (opts->no_repack || opts->mlock));
    if (!u->pack || mode != KW_EXPERTS_LOAD) return 0;
    int32_t *all = malloc((size_t)m->hp.n_expert * sizeof *all);
    kw_pool *pool = kw_pool_create(kw_cpu_physical_cores() > 0 ? kw_cpu_physical_cores() : 1);
    if (!all || !pool) {
        free(all);
        kw_pool_destroy(pool);
        return kw_err_set(err, "out of memory packing the experts");
    }
    for (int32_t e = 0; e < m->hp.n_expert; e++) all[e] = e;
    kw_progress *prog = opts->progress;
    kw_progress_set_total(prog, 2 * (uint64_t)m->hp.n_layer + 1);   /* pack_weights' layers and head, then these */
    for (int il = 0; il < m->hp.n_layer; il++) {
        kw_model_pack_experts(m, pool, il, all, m->hp.n_expert);
        kw_progress_add(prog, 1);
    }
    free(all);
    kw_pool_destroy(pool);
    if (atomic_load(&u->n_packed) < m->hp.n_layer * m->hp.n_expert)
        return kw_err_set(err, "packing the experts at load: %d of %d packed (out of memory?)",
                          atomic_load(&u->n_packed), m->hp.n_layer * m->hp.n_expert);
    return 0;
}

kw_model *kw_model_load(const char *path, const kw_model_opts *opts, kw_err *err) {
    if (opts && opts->experts == KW_EXPERTS_LOAD && opts->mlock) {
        kw_err_set(err, "experts \"load\" packs every expert and drops its mapped pages, which --mlock keeps "
                        "locked: use one of them");
        return NULL;
    }
    kw_model *m = calloc(1, sizeof *m);
    if (!m) { kw_err_set(err, "out of memory"); return NULL; }
    m->gguf = kw_gguf_open(path, err);
    if (!m->gguf || kw_hparams_from_gguf(m->gguf, &m->hp, err) || bind_model(m, err) || alloc_expert_use(m, err)) {
        kw_model_free(m);
        return NULL;
    }
    kw_err tok_err = {{0}};
    m->tok = kw_tokenizer_load(m->gguf, &tok_err);
    if (!m->tok) snprintf(m->tok_error, sizeof m->tok_error, "%s", tok_err.msg);
    if (!(opts && opts->no_repack) && pack_weights(m, !(opts && opts->mlock), opts ? opts->progress : NULL, err)) {
        kw_model_free(m);
        return NULL;
    }
    if (opts && opts->mlock && mlock(m->gguf->base, m->gguf->size) != 0) {
        kw_err_set(err, "%s: mlock of %llu bytes failed (raise ulimit -l or drop --mlock)", path,
                   (unsigned long long)m->gguf->size);
        kw_model_free(m);
        return NULL;
    }
    m->mlocked = opts && opts->mlock;
    if (m->experts && setup_expert_packing(m, opts, err)) {
        kw_model_free(m);
        return NULL;
    }
    return m;
}

void kw_model_free(kw_model *m) {
    if (!m) return;
    unpack_weights(m);
    kw_mem_note_mapped(KW_MEM_WEIGHTS, (int64_t)m->released_bytes); /* kw_gguf_close takes off the whole mapping */
    kw_tokenizer_free(m->tok);
    free_expert_use(m);
    free(m->layers);
    kw_gguf_close(m->gguf);
    free(m);
}

const kw_hparams *kw_model_hparams(const kw_model *m) { return m ? &m->hp : NULL; }
const kw_tokenizer *kw_model_tokenizer(const kw_model *m) { return m ? m->tok : NULL; }
const char *kw_model_tokenizer_error(const kw_model *m) { return m && !m->tok ? m->tok_error : ""; }
const kw_gguf *kw_model_gguf(const kw_model *m) { return m ? m->gguf : NULL; }

/* A mixture-of-experts layer's decode reads n_expert_used experts of
 * each expert tensor; the spans stand for them with the first k experts
 * that have packed copies when there are k (what decode reads once tokens
 * have used them), else with experts 0..k-1 as stored (the bytes are the
 * same for any k experts of one form). */
static int expert_spans(const kw_model *m, int il, kw_mem_span *out, int n, int max) {
    const kw_layer *L = &m->layers[il];
    const kw_experts *E[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
    int k = m->hp.n_expert_used;
    for (int t = 0; t < 3; t++) {
        if (!E[t]->data) continue;
        int found = 0;
        for (int32_t e = 0; E[t]->packed && e < E[t]->n && found < k; e++)
            if (atomic_load_explicit(&E[t]->packed[e], memory_order_acquire)) found++;
        bool packed = found == k;
        found = 0;
        for (int32_t e = 0; e < E[t]->n && found < k; e++) {
            kw_matrix w = kw_expert_matrix(E[t], e);
            if (packed && !w.packed) continue;
            if (n < max) out[n] = kw_matrix_span(&w);
            n++;
            found++;
        }
    }
    return n;
}

int kw_model_decode_spans(const kw_model *m, kw_mem_span *out, int max) {
    int n = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        kw_matrix *ws[KW_LAYER_MAX_MATRICES];
        int k = layer_matrices(m, il, ws);
        for (int i = 0; i < k; i++, n++)
            if (n < max) out[n] = kw_matrix_span(ws[i]);
        n = expert_spans(m, il, out, n, max);
    }
    if (n < max) out[n] = kw_matrix_span(&m->output);
    return n + 1;
}

bool kw_model_repacks_tensor(const kw_arch_desc *a, const kw_gguf_tensor *t, bool tied) {
    const char *n = t->name.s;
    if (t->n_dims != 2 || !n) return false;
    if (!strcmp(n, "output.weight") || (tied && !strcmp(n, "token_embd.weight"))) return true;
    return kw_arch_is_layer_matrix(a, n);
}

/* Bytes a read of a [cols, rows] matrix of `type` takes: its packed copy's
 * when `packed` and the active family has one, else its stored rows'. */
static uint64_t matrix_read_bytes(uint32_t type, int64_t cols, int64_t rows, uint64_t stored, bool packed) {
    size_t p = packed ? kw_shape_pack_bytes(type, cols, rows) : 0;
    return p ? p : stored;
}

uint64_t kw_decode_weight_bytes(const kw_gguf *g, const kw_hparams *hp, unsigned packed) {
    bool tied = kw_gguf_find_tensor(g, "output.weight") == NULL;
    uint64_t b = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kw_gguf_tensor *t = &g->tensors[i];
        const char *n = t->name.s ? t->name.s : "";
        if (!tied && !strcmp(n, "token_embd.weight")) {   /* one row per token */
            uint64_t rows = (uint64_t)t->ne[1] * (uint64_t)t->ne[2] * (uint64_t)t->ne[3];
            b += t->nbytes / (rows > 0 ? rows : 1);
        } else if (hp->n_expert > 0 && kw_arch_is_layer_experts(hp->arch, n)) {
            uint64_t one = t->nbytes / (uint64_t)hp->n_expert;
            b += (uint64_t)hp->n_expert_used *
                 matrix_read_bytes(t->type, t->ne[0], t->ne[1], one, packed & KW_DECODE_PACKED_EXPERTS);
        } else if (kw_model_repacks_tensor(hp->arch, t, tied)) {
            b += matrix_read_bytes(t->type, t->ne[0], t->ne[1], t->nbytes, packed & KW_DECODE_PACKED);
        } else {
            b += t->nbytes;
        }
    }
    return b;
}

uint64_t kw_model_layer_matrix_bytes(const kw_model *m) {
    uint64_t sum = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        kw_matrix *ws[KW_LAYER_MAX_MATRICES];
        int k = layer_matrices(m, il, ws);
        for (int i = 0; i < k; i++) sum += kw_matrix_span(ws[i]).bytes;
    }
    return sum;
}

double kw_model_read_bandwidth(const kw_model *m, kw_pool *pool, double seconds) {
    int n = kw_model_decode_spans(m, NULL, 0);
    kw_mem_span *s = malloc(sizeof *s * (size_t)n);
    if (!s) return 0;
    kw_model_decode_spans(m, s, n);
    double bw = kw_measure_spans_bandwidth(pool, s, n, seconds);
    free(s);
    return bw;
}

uint32_t kw_hparams_kv_type(const kw_hparams *hp, uint32_t kv_type, int32_t block_tokens) {
    if (kv_type != KW_KV_TYPE_AUTO) return kv_type;
    return kw_kv_type_auto(hp->head_dim_k, hp->head_dim_v, block_tokens, hp->n_head_kv > 0 ? hp->n_head / hp->n_head_kv : 0);
}

kw_kv_layout kw_model_kv_layout(const kw_model *m, uint32_t kv_type, int32_t block_tokens) {
    kw_kv_layout lay;
    memset(&lay, 0, sizeof lay);
    if (!m) return lay;
    lay.n_layer = m->hp.n_kv_layers;
    lay.n_head_kv = m->hp.n_head_kv;
    lay.head_dim_k = m->hp.head_dim_k;
    lay.head_dim_v = m->hp.head_dim_v;
    lay.type = kw_hparams_kv_type(&m->hp, kv_type, block_tokens);
    lay.block_tokens = block_tokens;
    return lay;
}
