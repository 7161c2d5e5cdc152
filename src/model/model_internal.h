/* model_internal.h - the loaded model as the forward pass sees it.
 *
 * Shared by src/model/model.c (loading, binding, validation) and
 * src/model/forward.c (the forward pass). Not a public header. */
#ifndef KW_MODEL_INTERNAL_H
#define KW_MODEL_INTERNAL_H
#include "kvwise/model.h"
#include <stdatomic.h>

/* A 1-D F32 vector (norm gains, biases) or NULL when absent. */
typedef const float *kw_vec;

typedef struct kw_layer {
    kw_mixer_kind mixer;        /* attention or gated delta net (the descriptor's layer schedule) */
    int32_t kv_layer;           /* its layer in the KV pool (attention), else -1 */
    int32_t rec_layer;          /* its part of the recurrent state (gated delta net), else -1 */
    kw_vec attn_norm;
    kw_matrix wq, wk, wv, wo;
    kw_vec bq, bk, bv;          /* qwen2 */
    kw_vec q_norm, k_norm;      /* qwen3: per-head RMSNorm gains [head_dim_k] */
    kw_vec ffn_norm;
    kw_matrix w_gate, w_up, w_down; /* the dense SwiGLU; in a mixture of experts, its shared expert (ffn_*_shexp) */
    /* mixture of experts (KW_FFN_MOE) */
    kw_matrix w_router;         /* ffn_gate_inp: [n_expert][n_embd], the router logits */
    kw_experts gate_exps, up_exps, down_exps;   /* read in place from the mapping */
    kw_vec shexp_gate;          /* ffn_gate_inp_shexp [n_embd]: the shared expert's per-token gate (qwen35moe) */
    /* gated delta net (KW_MIXER_GDN) */
    kw_matrix w_qkv;            /* attn_qkv: [conv_dim][n_embd], q | k | v channels */
    kw_matrix w_z;              /* attn_gate: [d_inner][n_embd], the output gate z */
    kw_matrix w_beta, w_alpha;  /* [dt_rank][n_embd] */
    kw_vec ssm_conv;            /* ssm_conv1d: [conv_dim][d_conv] taps, tap d_conv-1 on the current token */
    kw_vec ssm_dt_bias, ssm_a;  /* [dt_rank]; ssm_a is the decay rate A itself (negative) */
    kw_vec ssm_norm;            /* [d_state], the gated output norm's gain */
    kw_matrix w_ssm_out;        /* ssm_out: [n_embd][d_inner] */
    void *pack_block;           /* the repacked copies of the layer's matrices, one block (model.c pack_weights) */
} kw_layer;

/* Which experts some token has used (mixture of experts): the forward pass
 * marks them, /v1/memory and the bench read them from other threads. */
typedef struct kw_expert_use {
    _Atomic uint8_t *used;      /* [n_layer][n_expert] */
    _Atomic uint64_t used_bytes;/* the used experts' bytes (gate + up + down) */
    _Atomic int32_t n_used;
    /* packing at first use (kw_model_pack_experts) */
    bool pack;                  /* on: the active family packs these types, and neither --no-repack nor --mlock */
    uint64_t pack_growth;       /* the most packing every expert can add (kw_experts_pack_growth) */
    void *_Atomic *slots;       /* [n_layer][3][n_expert]: the kw_experts packed slots */
    _Atomic uint8_t *claimed;   /* [n_layer][n_expert]: packing was tried (or is under way) */
    void **blocks;              /* [n_layer][n_expert]: expert's gate + up + down copies, or NULL */
    _Atomic uint64_t packed_bytes, released_bytes;
    _Atomic int32_t n_packed;
} kw_expert_use;

struct kw_model {
    kw_hparams hp;
    kw_gguf *gguf;
    kw_tokenizer *tok;          /* NULL if the file has no usable tokenizer */
    char tok_error[sizeof(kw_err)]; /* why tok is NULL */
    kw_matrix tok_embd;         /* [n_vocab][n_embd], any type */
    kw_vec output_norm;
    kw_matrix output;           /* LM head (= tok_embd when tied) */
    kw_vec rope_freqs;          /* optional per-pair frequency divisors [rope_dim/2] */
    kw_layer *layers;
    uint64_t released_bytes;    /* mapped weight pages dropped because a packed copy serves them */
    kw_expert_use *experts;     /* NULL for a dense model */
    bool mlocked;               /* every mapped page is locked resident (--mlock) */
};

/* The bytes one forward pass reads of the layer matrices (every one, as
 * kw_matrix_span says): all but the LM head and the experts. */
uint64_t kw_model_layer_matrix_bytes(const kw_model *m);
/* forward.c marks layer il's expert e as used. */
void kw_model_mark_expert(const kw_model *m, int il, int32_t e);
/* forward.c, before layer il's routed experts run: packs every expert of
 * the nk choices sel that has no packed copy yet (pool's threads share the
 * work), then drops the mapped pages the copies now serve. An expert that
 * cannot be packed (out of memory) is read in place from then on. */
void kw_model_pack_experts(const kw_model *m, kw_pool *pool, int il, const int32_t *sel, int64_t nk);

#endif
