/* arch.c - the architecture table (arch.h): one descriptor per supported
 * general.architecture, the layer tensor lists they point at, and the
 * lookups every reader goes through.
 *
 * Facts: llama, qwen2 and qwen3 as llama.cpp loads them. qwen2 always has
 * q/k/v biases; llama and qwen3 take them when present (llama.cpp treats
 * them as optional there too); only qwen3 has per-head q/k norms. llama
 * pairs RoPE dimensions (2i, 2i+1), the qwen family NEOX-style (i, i+d/2).
 * The three share one attention layer layout and the dense SwiGLU block.
 * qwen3moe is qwen3's attention with a mixture-of-experts block as
 * ik_llama.cpp loads it (../shared/conformance/ARCHITECTURES.md): the
 * router ffn_gate_inp [n_embd, n_expert] and the experts as 3-D tensors
 * ffn_{gate,up}_exps [n_embd, n_ff_exp, n_expert], ffn_down_exps
 * [n_ff_exp, n_embd, n_expert].
 * qwen35 (Qwen3.5 dense) is a hybrid as ik_llama.cpp loads it: layer i is
 * gated full attention when (i+1) % full_attention_interval == 0 (default
 * 4), else a gated delta net; attn_q yields query and gate interleaved per
 * head; the pre-FFN norm is named post_attention_norm. qwen35moe is that
 * hybrid with qwen3moe's routed experts plus a shared expert
 * (ffn_{gate,up,down}_shexp, bound in the dense block's slots) scaled per
 * token by sigmoid(ffn_gate_inp_shexp . h2). */
#include "kvwise/arch.h"
#include "kvwise/model.h"
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* ---- layer tensor lists ---- */

/* The attention mixer: pre-norm, q/k/v projections (+ biases, + per-head
 * norms), output projection; in the order the forward pass reads them. */
static const kw_tensor_spec k_attention_tensors[] = {
    {"attn_norm.weight", KW_LT_ATTN_NORM, KW_ROLE_NORM, KW_DIM_EMBD, KW_DIM_1, KW_FEAT_CORE},
    {"attn_q.weight", KW_LT_ATTN_Q, KW_ROLE_MATRIX, KW_DIM_EMBD, KW_DIM_Q, KW_FEAT_CORE},
    {"attn_k.weight", KW_LT_ATTN_K, KW_ROLE_MATRIX, KW_DIM_EMBD, KW_DIM_K, KW_FEAT_CORE},
    {"attn_v.weight", KW_LT_ATTN_V, KW_ROLE_MATRIX, KW_DIM_EMBD, KW_DIM_V, KW_FEAT_CORE},
    {"attn_q.bias", KW_LT_ATTN_Q_BIAS, KW_ROLE_BIAS, KW_DIM_Q, KW_DIM_1, KW_FEAT_QKV_BIAS},
    {"attn_k.bias", KW_LT_ATTN_K_BIAS, KW_ROLE_BIAS, KW_DIM_K, KW_DIM_1, KW_FEAT_QKV_BIAS},
    {"attn_v.bias", KW_LT_ATTN_V_BIAS, KW_ROLE_BIAS, KW_DIM_V, KW_DIM_1, KW_FEAT_QKV_BIAS},
    {"attn_q_norm.weight", KW_LT_ATTN_Q_NORM, KW_ROLE_NORM, KW_DIM_HEAD_K, KW_DIM_1, KW_FEAT_QK_NORM},
    {"attn_k_norm.weight", KW_LT_ATTN_K_NORM, KW_ROLE_NORM, KW_DIM_HEAD_K, KW_DIM_1, KW_FEAT_QK_NORM},
    {"attn_output.weight", KW_LT_ATTN_OUT, KW_ROLE_MATRIX, KW_DIM_ATTN_OUT, KW_DIM_EMBD, KW_FEAT_CORE},
    {NULL, 0, 0, 0, 0, 0},
};

/* The dense SwiGLU block with its pre-norm. */
static const kw_tensor_spec k_dense_ffn_tensors[] = {
    {"ffn_norm.weight", KW_LT_FFN_NORM, KW_ROLE_NORM, KW_DIM_EMBD, KW_DIM_1, KW_FEAT_CORE},
    {"ffn_gate.weight", KW_LT_FFN_GATE, KW_ROLE_MATRIX, KW_DIM_EMBD, KW_DIM_FF, KW_FEAT_CORE},
    {"ffn_up.weight", KW_LT_FFN_UP, KW_ROLE_MATRIX, KW_DIM_EMBD, KW_DIM_FF, KW_FEAT_CORE},
    {"ffn_down.weight", KW_LT_FFN_DOWN, KW_ROLE_MATRIX, KW_DIM_FF, KW_DIM_EMBD, KW_FEAT_CORE},
    {NULL, 0, 0, 0, 0, 0},
};

/* The gated full attention of qwen35: attn_q gives, per head, hd query
 * values then hd gate values; q/k per-head norms are core. The qwen35
 * lists are in the files' order (ARCHITECTURES.md), the order mkmodel
 * writes them in. */
static const kw_tensor_spec k_gated_attention_tensors[] = {
    {"attn_norm.weight", KW_LT_ATTN_NORM, KW_ROLE_NORM, KW_DIM_EMBD, KW_DIM_1, KW_FEAT_CORE},
    {"attn_q.weight", KW_LT_ATTN_Q, KW_ROLE_MATRIX, KW_DIM_EMBD, KW_DIM_Q_GATED, KW_FEAT_CORE},
    {"attn_k.weight", KW_LT_ATTN_K, KW_ROLE_MATRIX, KW_DIM_EMBD, KW_DIM_K, KW_FEAT_CORE},
    {"attn_v.weight", KW_LT_ATTN_V, KW_ROLE_MATRIX, KW_DIM_EMBD, KW_DIM_V, KW_FEAT_CORE},
    {"attn_output.weight", KW_LT_ATTN_OUT, KW_ROLE_MATRIX, KW_DIM_ATTN_OUT, KW_DIM_EMBD, KW_FEAT_CORE},
    {"attn_q_norm.weight", KW_LT_ATTN_Q_NORM, KW_ROLE_NORM, KW_DIM_HEAD_K, KW_DIM_1, KW_FEAT_QK_NORM},
    {"attn_k_norm.weight", KW_LT_ATTN_K_NORM, KW_ROLE_NORM, KW_DIM_HEAD_K, KW_DIM_1, KW_FEAT_QK_NORM},
    {NULL, 0, 0, 0, 0, 0},
};

/* The gated delta net: pre-norm, the fused q/k/v projection and z, the
 * convolution filters, dt bias and the decay rate A (stored as A,
 * negative, not A_log), beta and alpha, the output norm gain, the output
 * projection. */
static const kw_tensor_spec k_gdn_tensors[] = {
    {"attn_norm.weight", KW_LT_ATTN_NORM, KW_ROLE_NORM, KW_DIM_EMBD, KW_DIM_1, KW_FEAT_CORE},
    {"attn_qkv.weight", KW_LT_SSM_QKV, KW_ROLE_MATRIX, KW_DIM_EMBD, KW_DIM_SSM_CONV, KW_FEAT_CORE},
    {"attn_gate.weight", KW_LT_SSM_Z, KW_ROLE_MATRIX, KW_DIM_EMBD, KW_DIM_SSM_INNER, KW_FEAT_CORE},
    {"ssm_conv1d.weight", KW_LT_SSM_CONV, KW_ROLE_CONV, KW_DIM_SSM_KERNEL, KW_DIM_SSM_CONV, KW_FEAT_CORE},
    {"ssm_dt.bias", KW_LT_SSM_DT_BIAS, KW_ROLE_BIAS, KW_DIM_SSM_HEADS, KW_DIM_1, KW_FEAT_CORE},
    {"ssm_a", KW_LT_SSM_A, KW_ROLE_BIAS, KW_DIM_SSM_HEADS, KW_DIM_1, KW_FEAT_CORE},
    {"ssm_beta.weight", KW_LT_SSM_BETA, KW_ROLE_MATRIX, KW_DIM_EMBD, KW_DIM_SSM_HEADS, KW_FEAT_CORE},
    {"ssm_alpha.weight", KW_LT_SSM_ALPHA, KW_ROLE_MATRIX, KW_DIM_EMBD, KW_DIM_SSM_HEADS, KW_FEAT_CORE},
    {"ssm_norm.weight", KW_LT_SSM_NORM, KW_ROLE_NORM, KW_DIM_SSM_STATE, KW_DIM_1, KW_FEAT_CORE},
    {"ssm_out.weight", KW_LT_SSM_OUT, KW_ROLE_MATRIX, KW_DIM_SSM_INNER, KW_DIM_EMBD, KW_FEAT_CORE},
    {NULL, 0, 0, 0, 0, 0},
};

/* qwen35's dense SwiGLU block: its pre-norm is named post_attention_norm. */
static const kw_tensor_spec k_dense_ffn_post_norm_tensors[] = {
    {"post_attention_norm.weight", KW_LT_FFN_NORM, KW_ROLE_NORM, KW_DIM_EMBD, KW_DIM_1, KW_FEAT_CORE},
    {"ffn_gate.weight", KW_LT_FFN_GATE, KW_ROLE_MATRIX, KW_DIM_EMBD, KW_DIM_FF, KW_FEAT_CORE},
    {"ffn_up.weight", KW_LT_FFN_UP, KW_ROLE_MATRIX, KW_DIM_EMBD, KW_DIM_FF, KW_FEAT_CORE},
    {"ffn_down.weight", KW_LT_FFN_DOWN, KW_ROLE_MATRIX, KW_DIM_FF, KW_DIM_EMBD, KW_FEAT_CORE},
    {NULL, 0, 0, 0, 0, 0},
};

/* The mixture-of-experts block of qwen3moe: pre-norm, the router, the
 * routed experts (one matrix per expert along ne2). */
static const kw_tensor_spec k_moe_ffn_tensors[] = {
    {"ffn_norm.weight", KW_LT_FFN_NORM, KW_ROLE_NORM, KW_DIM_EMBD, KW_DIM_1, KW_FEAT_CORE},
    {"ffn_gate_inp.weight", KW_LT_FFN_ROUTER, KW_ROLE_MATRIX, KW_DIM_EMBD, KW_DIM_EXPERTS, KW_FEAT_CORE},
    {"ffn_gate_exps.weight", KW_LT_FFN_GATE_EXPS, KW_ROLE_EXPERTS, KW_DIM_EMBD, KW_DIM_FF_EXP, KW_FEAT_CORE},
    {"ffn_up_exps.weight", KW_LT_FFN_UP_EXPS, KW_ROLE_EXPERTS, KW_DIM_EMBD, KW_DIM_FF_EXP, KW_FEAT_CORE},
    {"ffn_down_exps.weight", KW_LT_FFN_DOWN_EXPS, KW_ROLE_EXPERTS, KW_DIM_FF_EXP, KW_DIM_EMBD, KW_FEAT_CORE},
    {NULL, 0, 0, 0, 0, 0},
};

/* qwen35moe's block: qwen3moe's routed experts under the post_attention_norm
 * name, plus the shared expert every token runs, scaled per token by
 * sigmoid(ffn_gate_inp_shexp . h2). */
static const kw_tensor_spec k_moe_shexp_ffn_tensors[] = {
    {"post_attention_norm.weight", KW_LT_FFN_NORM, KW_ROLE_NORM, KW_DIM_EMBD, KW_DIM_1, KW_FEAT_CORE},
    {"ffn_gate_inp.weight", KW_LT_FFN_ROUTER, KW_ROLE_MATRIX, KW_DIM_EMBD, KW_DIM_EXPERTS, KW_FEAT_CORE},
    {"ffn_gate_exps.weight", KW_LT_FFN_GATE_EXPS, KW_ROLE_EXPERTS, KW_DIM_EMBD, KW_DIM_FF_EXP, KW_FEAT_CORE},
    {"ffn_up_exps.weight", KW_LT_FFN_UP_EXPS, KW_ROLE_EXPERTS, KW_DIM_EMBD, KW_DIM_FF_EXP, KW_FEAT_CORE},
    {"ffn_down_exps.weight", KW_LT_FFN_DOWN_EXPS, KW_ROLE_EXPERTS, KW_DIM_FF_EXP, KW_DIM_EMBD, KW_FEAT_CORE},
    {"ffn_gate_inp_shexp.weight", KW_LT_FFN_SHEXP_GATE_INP, KW_ROLE_BIAS, KW_DIM_EMBD, KW_DIM_1, KW_FEAT_SHARED_EXPERT},
    {"ffn_gate_shexp.weight", KW_LT_FFN_GATE_SHEXP, KW_ROLE_MATRIX, KW_DIM_EMBD, KW_DIM_FF_SHEXP, KW_FEAT_SHARED_EXPERT},
    {"ffn_up_shexp.weight", KW_LT_FFN_UP_SHEXP, KW_ROLE_MATRIX, KW_DIM_EMBD, KW_DIM_FF_SHEXP, KW_FEAT_SHARED_EXPERT},
    {"ffn_down_shexp.weight", KW_LT_FFN_DOWN_SHEXP, KW_ROLE_MATRIX, KW_DIM_FF_SHEXP, KW_DIM_EMBD, KW_FEAT_SHARED_EXPERT},
    {NULL, 0, 0, 0, 0, 0},
};

/* ---- the table ---- */

/* The layout llama, qwen2 and qwen3 share: every layer attention then the
 * dense block, with llama.cpp's defaults for omitted keys. */
#define ATTENTION_DENSE_LAYOUT                                                                                       \
    .layers = {.mixer = KW_MIXER_ATTENTION, .every_nth = KW_MIXER_ATTENTION, .interval_key = NULL, .interval_default = 0}, \
    .ffn = KW_FFN_DENSE, .mixer_tensors = {[KW_MIXER_ATTENTION] = k_attention_tensors}, .ffn_tensors = k_dense_ffn_tensors, \
    .defaults = {.context_length = 4096, .rms_eps = 1e-5f, .rope_freq_base = 10000.0f}

static const kw_arch_desc k_archs[] = {
    {
        .gguf_name = "llama",
        .hf_model_types = {"llama", NULL},
        .rope = KW_ROPE_NORMAL,
        .presence = {[KW_FEAT_CORE] = KW_REQUIRED, [KW_FEAT_QKV_BIAS] = KW_OPTIONAL, [KW_FEAT_QK_NORM] = KW_ABSENT},
        ATTENTION_DENSE_LAYOUT,
    },
    {
        .gguf_name = "qwen2",
        .hf_model_types = {"qwen2", NULL},
        .rope = KW_ROPE_NEOX,
        .presence = {[KW_FEAT_CORE] = KW_REQUIRED, [KW_FEAT_QKV_BIAS] = KW_REQUIRED, [KW_FEAT_QK_NORM] = KW_ABSENT},
        ATTENTION_DENSE_LAYOUT,
    },
    {
        .gguf_name = "qwen3",
        .hf_model_types = {"qwen3", NULL},
        .rope = KW_ROPE_NEOX,
        .presence = {[KW_FEAT_CORE] = KW_REQUIRED, [KW_FEAT_QKV_BIAS] = KW_OPTIONAL, [KW_FEAT_QK_NORM] = KW_REQUIRED},
        ATTENTION_DENSE_LAYOUT,
    },
    {
        .gguf_name = "qwen3moe",
        .hf_model_types = {"qwen3_moe", NULL},
        .rope = KW_ROPE_NEOX,
        .presence = {[KW_FEAT_CORE] = KW_REQUIRED, [KW_FEAT_QKV_BIAS] = KW_OPTIONAL, [KW_FEAT_QK_NORM] = KW_REQUIRED,
                     [KW_FEAT_SHARED_EXPERT] = KW_ABSENT},
        .layers = {.mixer = KW_MIXER_ATTENTION, .every_nth = KW_MIXER_ATTENTION, .interval_key = NULL, .interval_default = 0},
        .ffn = KW_FFN_MOE,
        .mixer_tensors = {[KW_MIXER_ATTENTION] = k_attention_tensors},
        .ffn_tensors = k_moe_ffn_tensors,
        .defaults = {.context_length = 4096, .rms_eps = 1e-5f, .rope_freq_base = 10000.0f},
    },
    {
        .gguf_name = "qwen35",
        .hf_model_types = {"qwen3_5", "qwen3_5_text", NULL},
        .rope = KW_ROPE_NEOX,
        .presence = {[KW_FEAT_CORE] = KW_REQUIRED, [KW_FEAT_QKV_BIAS] = KW_ABSENT, [KW_FEAT_QK_NORM] = KW_REQUIRED,
                     [KW_FEAT_SHARED_EXPERT] = KW_ABSENT},
        .layers = {.mixer = KW_MIXER_GDN, .every_nth = KW_MIXER_ATTENTION, .interval_key = "full_attention_interval",
                   .interval_default = 4},
        .ffn = KW_FFN_DENSE,
        .mixer_tensors = {[KW_MIXER_ATTENTION] = k_gated_attention_tensors, [KW_MIXER_GDN] = k_gdn_tensors},
        .ffn_tensors = k_dense_ffn_post_norm_tensors,
        .attn_output_gate = true,
        .defaults = {.context_length = 4096, .rms_eps = 1e-6f, .rope_freq_base = 10000000.0f},
    },
    {
        .gguf_name = "qwen35moe",
        .hf_model_types = {"qwen3_5_moe", "qwen3_5_moe_text", NULL},
        .rope = KW_ROPE_NEOX,
        .presence = {[KW_FEAT_CORE] = KW_REQUIRED, [KW_FEAT_QKV_BIAS] = KW_ABSENT, [KW_FEAT_QK_NORM] = KW_REQUIRED,
                     [KW_FEAT_SHARED_EXPERT] = KW_REQUIRED},
        .layers = {.mixer = KW_MIXER_GDN, .every_nth = KW_MIXER_ATTENTION, .interval_key = "full_attention_interval",
                   .interval_default = 4},
        .ffn = KW_FFN_MOE,
        .mixer_tensors = {[KW_MIXER_ATTENTION] = k_gated_attention_tensors, [KW_MIXER_GDN] = k_gdn_tensors},
        .ffn_tensors = k_moe_shexp_ffn_tensors,
        .attn_output_gate = true,
        .defaults = {.context_length = 4096, .rms_eps = 1e-6f, .rope_freq_base = 10000000.0f},
    },
};

#define N_ARCHS ((int)(sizeof k_archs / sizeof k_archs[0]))

int kw_arch_count(void) { return N_ARCHS; }

const kw_arch_desc *kw_arch_at(int i) { return i >= 0 && i < N_ARCHS ? &k_archs[i] : NULL; }

const kw_arch_desc *kw_arch_find(const char *gguf_name) {
    for (int i = 0; gguf_name && i < N_ARCHS; i++)
        if (!strcmp(gguf_name, k_archs[i].gguf_name)) return &k_archs[i];
    return NULL;
}

const kw_arch_desc *kw_arch_find_hf(const char *model_type) {
    for (int i = 0; model_type && i < N_ARCHS; i++)
        for (int k = 0; k < KW_ARCH_MAX_HF_TYPES && k_archs[i].hf_model_types[k]; k++)
            if (!strcmp(model_type, k_archs[i].hf_model_types[k])) return &k_archs[i];
    return NULL;
}

static char g_list[256];
static pthread_once_t g_list_once = PTHREAD_ONCE_INIT;

static void build_list(void) {
    size_t n = 0;
    for (int i = 0; i < N_ARCHS && n < sizeof g_list; i++)
        n += (size_t)snprintf(g_list + n, sizeof g_list - n, "%s%s", i ? ", " : "", k_archs[i].gguf_name);
}

const char *kw_arch_supported_list(void) {
    pthread_once(&g_list_once, build_list);
    return g_list;
}

/* ---- questions about a descriptor ---- */

kw_presence kw_arch_presence(const kw_arch_desc *a, kw_feature f) {
    if (f == KW_FEAT_CORE) return KW_REQUIRED;
    return f < KW_FEATURES ? a->presence[f] : KW_ABSENT;
}

const char *kw_feature_label(kw_feature f) {
    static const char *const labels[KW_FEATURES] = {
        [KW_FEAT_CORE] = "core tensors", [KW_FEAT_QKV_BIAS] = "q/k/v biases", [KW_FEAT_QK_NORM] = "q/k norm",
        [KW_FEAT_SHARED_EXPERT] = "gated shared expert"};
    return f < KW_FEATURES ? labels[f] : "?";
}

kw_mixer_kind kw_arch_layer_mixer(const kw_arch_desc *a, int32_t interval, int32_t il) {
    if (interval > 0 && (il + 1) % interval == 0) return a->layers.every_nth;
    return a->layers.mixer;
}

bool kw_mixer_has_kv(kw_mixer_kind k) { return k == KW_MIXER_ATTENTION; }

const kw_tensor_spec *kw_arch_mixer_tensors(const kw_arch_desc *a, kw_mixer_kind k) {
    return k < KW_MIXER_KINDS ? a->mixer_tensors[k] : NULL;
}

static bool list_has_role(const kw_tensor_spec *l, const char *suffix, kw_tensor_role role) {
    for (; l && l->name; l++)
        if (l->role == role && !strcmp(l->name, suffix)) return true;
    return false;
}

/* Whether name is blk.<i>.<spec name> of a tensor of this role in a's lists. */
static bool is_layer_role(const kw_arch_desc *a, const char *name, kw_tensor_role role) {
    if (!a || !name || strncmp(name, "blk.", 4)) return false;
    const char *p = name + 4;
    if (*p < '0' || *p > '9') return false;
    while (*p >= '0' && *p <= '9') p++;
    if (*p != '.') return false;
    p++;
    for (int k = 0; k < KW_MIXER_KINDS; k++)
        if (list_has_role(a->mixer_tensors[k], p, role)) return true;
    return list_has_role(a->ffn_tensors, p, role);
}

bool kw_arch_is_layer_matrix(const kw_arch_desc *a, const char *name) { return is_layer_role(a, name, KW_ROLE_MATRIX); }

bool kw_arch_is_layer_experts(const kw_arch_desc *a, const char *name) { return is_layer_role(a, name, KW_ROLE_EXPERTS); }

int64_t kw_dim_size(kw_dim d, const struct kw_hparams *hp) {
    switch (d) {
    case KW_DIM_1: return 1;
    case KW_DIM_EMBD: return hp->n_embd;
    case KW_DIM_Q: return (int64_t)hp->n_head * hp->head_dim_k;
    case KW_DIM_K: return (int64_t)hp->n_head_kv * hp->head_dim_k;
    case KW_DIM_V: return (int64_t)hp->n_head_kv * hp->head_dim_v;
    case KW_DIM_ATTN_OUT: return (int64_t)hp->n_head * hp->head_dim_v;
    case KW_DIM_HEAD_K: return hp->head_dim_k;
    case KW_DIM_FF: return hp->n_ff;
    case KW_DIM_EXPERTS: return hp->n_expert;
    case KW_DIM_FF_EXP: return hp->n_ff_exp;
    case KW_DIM_FF_SHEXP: return hp->n_ff_shexp;
    case KW_DIM_Q_GATED: return 2 * (int64_t)hp->n_head * hp->head_dim_k;
    case KW_DIM_SSM_CONV: return 2 * (int64_t)hp->ssm_n_group * hp->ssm_d_state + hp->ssm_d_inner;
    case KW_DIM_SSM_INNER: return hp->ssm_d_inner;
    case KW_DIM_SSM_HEADS: return hp->ssm_dt_rank;
    case KW_DIM_SSM_STATE: return hp->ssm_d_state;
    case KW_DIM_SSM_KERNEL: return hp->ssm_d_conv;
    }
    return 0;
}
