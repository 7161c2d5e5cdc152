/* model_internal.h - the loaded model as the forward pass sees it.
 *
 * Shared by src/model/model.c (loading, binding, validation) and
 * src/model/forward.c (the forward pass). Not a public header. */
#ifndef KW_MODEL_INTERNAL_H
#define KW_MODEL_INTERNAL_H
#include "kvwise/model.h"

/* A 1-D F32 vector (norm gains, biases) or NULL when absent. */
typedef const float *kw_vec;

typedef struct kw_layer {
    kw_vec attn_norm;
    kw_matrix wq, wk, wv, wo;
    kw_vec bq, bk, bv;          /* qwen2 */
    kw_vec q_norm, k_norm;      /* qwen3: per-head RMSNorm gains [head_dim_k] */
    kw_vec ffn_norm;
    kw_matrix w_gate, w_up, w_down;
    void *pack_block;           /* the repacked copies of the layer's matrices, one block (model.c pack_weights) */
} kw_layer;

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
};

#endif
