/* kvwise/arch.h - the architecture descriptors: every fact kvwise needs
 * about a model architecture, as data, in one table (src/model/arch.c).
 *
 * A descriptor says how an architecture is named (the GGUF
 * general.architecture and the Hugging Face model_type values), which
 * tensors each layer holds and which of them may or must be present (q/k/v
 * biases, per-head q/k norms, ...), the RoPE pairing, the defaults of
 * metadata keys a file may omit, and which mixer each layer runs (the layer
 * schedule) and which feed-forward block. Its readers:
 *   model.c   kw_hparams_from_gguf (names, defaults, RoPE, feature flags,
 *             KV-carrying layers) and the binding of every layer tensor;
 *   mkmodel   writes the tensors the descriptor requires, in its order;
 *   plan      HF model_type lookup, which layer matrices are repacked;
 *   cmd_info  metadata defaults; error messages list the table's names.
 * Adding an architecture is adding an entry (and, for a new kind of mixer
 * or feed-forward block, its tensor list and its forward-pass code).
 * Mixture-of-experts blocks (KW_FFN_MOE) keep their experts as 3-D tensors
 * (KW_ROLE_EXPERTS) that stay in the file mapping.
 * Tokenizer behaviour is not in a descriptor: as in llama.cpp it follows
 * tokenizer.ggml.model / .pre (src/tokenizer/pretok.c) and, for quirks,
 * general.name (src/tokenizer/load.c), so a vocab loads whatever the
 * architecture (`kvwise tokenize` on any file).
 *
 * Invariants (tests/model/test_arch.c checks them for every entry): names
 * and model_types are unique across the table; every mixer the schedule
 * can pick, and the feed-forward block, has a non-empty tensor list whose
 * names and slots are unique within a layer, matrices 2-D, expert tensors
 * 3-D, norms and biases 1-D; core tensors (KW_FEAT_CORE) are always required. */
#ifndef KVWISE_ARCH_H
#define KVWISE_ARCH_H
#include "kvwise/common.h"

/* What a layer's token mixer is. Each kind has its own tensors and its own
 * per-sequence memory. */
typedef enum kw_mixer_kind {
    KW_MIXER_ATTENTION = 0,     /* causal softmax attention over a KV cache */
    KW_MIXER_GDN,               /* gated delta net: linear attention with a fixed-size recurrent state per
                                   sequence (conv inputs + one d x d matrix per value head); no KV cache */
    KW_MIXER_KINDS
} kw_mixer_kind;

/* What a layer's feed-forward block is. */
typedef enum kw_ffn_kind {
    KW_FFN_DENSE = 0,           /* down(silu(gate(x)) * up(x)) */
    KW_FFN_MOE,                 /* mixture of experts: a router picks n_expert_used of n_expert SwiGLU
                                   experts per token (softmax over all, top-k, renormalised), their
                                   outputs summed with those weights (+ a gated shared expert where the
                                   descriptor has KW_FEAT_SHARED_EXPERT); docs/MODEL.md */
    KW_FFN_KINDS
} kw_ffn_kind;

/* How RoPE pairs the dimensions of a head. (Room: Qwen3.5's partial,
 * sectioned IMROPE.) */
typedef enum kw_rope_style {
    KW_ROPE_NORMAL = 0,         /* pairs (2i, 2i+1) */
    KW_ROPE_NEOX,               /* pairs (i, i + d/2) */
} kw_rope_style;

/* Whether a group of optional tensors is in a layer. */
typedef enum kw_presence {
    KW_ABSENT = 0,              /* never bound, even when the file has it */
    KW_OPTIONAL,                /* bound when the file has it */
    KW_REQUIRED,                /* the file must have it; mkmodel writes it */
} kw_presence;

/* The groups a layer tensor belongs to; a descriptor gives each its presence. */
typedef enum kw_feature {
    KW_FEAT_CORE = 0,           /* the tensors every file of the architecture has */
    KW_FEAT_QKV_BIAS,           /* attn_q/k/v.bias */
    KW_FEAT_QK_NORM,            /* attn_q_norm, attn_k_norm: per-head RMSNorm of q and k before RoPE */
    KW_FEAT_SHARED_EXPERT,      /* ffn_*_shexp + ffn_gate_inp_shexp: an always-run expert, gated per token */
    KW_FEATURES
} kw_feature;

/* What a tensor is to the forward pass (model.c binds each to its own field). */
typedef enum kw_layer_tensor {
    KW_LT_ATTN_NORM = 0, KW_LT_ATTN_Q, KW_LT_ATTN_K, KW_LT_ATTN_V,
    KW_LT_ATTN_Q_BIAS, KW_LT_ATTN_K_BIAS, KW_LT_ATTN_V_BIAS, KW_LT_ATTN_Q_NORM, KW_LT_ATTN_K_NORM, KW_LT_ATTN_OUT,
    KW_LT_FFN_NORM, KW_LT_FFN_GATE, KW_LT_FFN_UP, KW_LT_FFN_DOWN,
    KW_LT_FFN_ROUTER, KW_LT_FFN_GATE_EXPS, KW_LT_FFN_UP_EXPS, KW_LT_FFN_DOWN_EXPS,
    KW_LT_FFN_SHEXP_GATE_INP, KW_LT_FFN_GATE_SHEXP, KW_LT_FFN_UP_SHEXP, KW_LT_FFN_DOWN_SHEXP,
    /* gated delta net (KW_MIXER_GDN) */
    KW_LT_SSM_QKV, KW_LT_SSM_Z, KW_LT_SSM_BETA, KW_LT_SSM_ALPHA, KW_LT_SSM_CONV, KW_LT_SSM_DT_BIAS, KW_LT_SSM_A,
    KW_LT_SSM_NORM, KW_LT_SSM_OUT,
    KW_LT_COUNT
} kw_layer_tensor;

/* How a tensor is stored and initialised. */
typedef enum kw_tensor_role {
    KW_ROLE_MATRIX = 0,         /* 2-D, any supported type, repacked at load for the kernels */
    KW_ROLE_NORM,               /* 1-D F32 RMSNorm gain */
    KW_ROLE_BIAS,               /* 1-D F32 added after a matmul */
    KW_ROLE_EXPERTS,            /* 3-D [ne0, ne1, n_expert]: one matrix per expert, any supported
                                   type, read in place from the mapping (never repacked: the experts
                                   no token uses stay mapped but not resident) */
    KW_ROLE_CONV,               /* 2-D F32 [taps, channels] read as stored (a depthwise convolution's filters) */
} kw_tensor_role;

/* A dimension of a tensor, in terms of the hyper-parameters. */
typedef enum kw_dim {
    KW_DIM_1 = 0,               /* 1: the second dimension of a vector */
    KW_DIM_EMBD,                /* n_embd */
    KW_DIM_Q,                   /* n_head * head_dim_k */
    KW_DIM_K,                   /* n_head_kv * head_dim_k */
    KW_DIM_V,                   /* n_head_kv * head_dim_v */
    KW_DIM_ATTN_OUT,            /* n_head * head_dim_v */
    KW_DIM_HEAD_K,              /* head_dim_k */
    KW_DIM_FF,                  /* n_ff */
    KW_DIM_EXPERTS,             /* n_expert */
    KW_DIM_FF_EXP,              /* n_ff_exp: the width of one routed expert */
    KW_DIM_FF_SHEXP,            /* n_ff_shexp: the width of the shared expert */
    KW_DIM_Q_GATED,             /* 2 * n_head * head_dim_k: per head hd query values then hd gate values */
    KW_DIM_SSM_CONV,            /* conv_dim = 2 * ssm_n_group * ssm_d_state + ssm_d_inner (q, k, v channels) */
    KW_DIM_SSM_INNER,           /* ssm_d_inner = ssm_dt_rank * ssm_d_state (value_dim) */
    KW_DIM_SSM_HEADS,           /* ssm_dt_rank: the number of value heads */
    KW_DIM_SSM_STATE,           /* ssm_d_state: the head dimension of keys and values */
    KW_DIM_SSM_KERNEL,          /* ssm_d_conv: the taps of the causal convolution */
} kw_dim;

/* One tensor of a layer: blk.<i>.<name>, shape [ne0, ne1] in GGUF order
 * (ne0 contiguous: a matrix maps ne0 inputs to ne1 outputs); a
 * KW_ROLE_EXPERTS tensor is [ne0, ne1, n_expert]. */
typedef struct kw_tensor_spec {
    const char *name;           /* after "blk.<i>.", e.g. "attn_q.weight"; NULL ends a list */
    kw_layer_tensor what;
    kw_tensor_role role;
    kw_dim ne0, ne1;
    kw_feature feature;         /* its presence is the descriptor's presence[feature] */
} kw_tensor_spec;

/* Which mixer each layer runs: `mixer`, except that with an interval N > 0
 * layer i runs `every_nth` when (i + 1) % N == 0. N is the metadata key
 * <arch>.<interval_key> when the file has it, else interval_default; N = 0
 * means every layer runs `mixer`. (A hybrid like Qwen3.5: mixer = gated
 * delta net, every_nth = attention, interval_key "full_attention_interval",
 * default 4.) */
typedef struct kw_layer_schedule {
    kw_mixer_kind mixer;
    kw_mixer_kind every_nth;
    const char *interval_key;   /* NULL: N = interval_default */
    int32_t interval_default;
} kw_layer_schedule;

/* Values of <arch>.* keys a file may omit (llama.cpp's defaults). */
typedef struct kw_arch_defaults {
    int32_t context_length;     /* <arch>.context_length */
    float rms_eps;              /* <arch>.attention.layer_norm_rms_epsilon */
    float rope_freq_base;       /* <arch>.rope.freq_base */
} kw_arch_defaults;

#define KW_ARCH_MAX_HF_TYPES 4

typedef struct kw_arch_desc {
    const char *gguf_name;                              /* general.architecture and the <arch>. key prefix */
    const char *hf_model_types[KW_ARCH_MAX_HF_TYPES];   /* config.json model_type values; NULL-terminated */
    kw_rope_style rope;
    kw_presence presence[KW_FEATURES];                  /* [KW_FEAT_CORE] is KW_REQUIRED */
    kw_layer_schedule layers;
    kw_ffn_kind ffn;
    const kw_tensor_spec *mixer_tensors[KW_MIXER_KINDS]; /* per mixer kind, in the order the forward pass reads them */
    const kw_tensor_spec *ffn_tensors;                   /* the feed-forward block's, likewise */
    bool attn_output_gate;                               /* attn_q also yields a per-element gate: out *= sigmoid(gate) */
    kw_arch_defaults defaults;
} kw_arch_desc;

/* The table: entries 0..kw_arch_count()-1. */
int kw_arch_count(void);
const kw_arch_desc *kw_arch_at(int i);
/* By general.architecture / by config.json model_type; NULL when unknown. */
const kw_arch_desc *kw_arch_find(const char *gguf_name);
const kw_arch_desc *kw_arch_find_hf(const char *model_type);
/* Every gguf_name, comma-separated ("llama, qwen2, qwen3"), for error messages. */
const char *kw_arch_supported_list(void);

/* The presence of a tensor group (KW_FEAT_CORE: always required). */
kw_presence kw_arch_presence(const kw_arch_desc *a, kw_feature f);
/* A tensor group in words ("q/k/v biases"), for help texts. */
const char *kw_feature_label(kw_feature f);
/* The mixer layer il runs when the schedule's interval is `interval`. */
kw_mixer_kind kw_arch_layer_mixer(const kw_arch_desc *a, int32_t interval, int32_t il);
/* Whether a mixer kind keeps a KV cache (attention) per sequence. */
bool kw_mixer_has_kv(kw_mixer_kind k);
/* The tensor list of a mixer kind / of the feed-forward block (NULL if the
 * architecture has none). */
const kw_tensor_spec *kw_arch_mixer_tensors(const kw_arch_desc *a, kw_mixer_kind k);
/* Whether `name` is blk.<i>.<spec name> of a matrix in any of a's lists. */
bool kw_arch_is_layer_matrix(const kw_arch_desc *a, const char *name);
/* Whether `name` is blk.<i>.<spec name> of an expert tensor (KW_ROLE_EXPERTS) in a's lists. */
bool kw_arch_is_layer_experts(const kw_arch_desc *a, const char *name);

/* The size of a dimension for a shape. */
struct kw_hparams;
int64_t kw_dim_size(kw_dim d, const struct kw_hparams *hp);

#endif
