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

/* forward.c: the portable Q8_0 attention rows (the AVX2 ones give the same bits) */
float kw_attn_dot_q8_0(const uint8_t *q, const uint8_t *k, int n);
void kw_attn_axpy_q8_0(float *acc, float p, const uint8_t *v, int n);

/* attn_avx2.c (used when the CPU has AVX2 + FMA + F16C) */
float kw_attn_dot_f32_avx2(const float *q, const float *k, int n);
float kw_attn_dot_f16_avx2(const float *q, const uint16_t *k, int n);
void kw_attn_axpy_f32_avx2(float *acc, float p, const float *v, int n);
void kw_attn_axpy_f16_avx2(float *acc, float p, const uint16_t *v, int n);
void kw_attn_round_f16_avx2(float *x, int n);
float kw_attn_dot_q8_0_avx2(const uint8_t *q, const uint8_t *k, int n);   /* both Q8_0 blocks */
void kw_attn_axpy_q8_0_avx2(float *acc, float p, const uint8_t *v, int n);

/* act_avx512.c (AVX-512F): gate[i] = silu(gate[i]) * up[i]; x[i] = exp(x[i]) (~1 ulp) */
void kw_swiglu_avx512(float *gate, const float *up, int64_t n);
void kw_exp_avx512(float *x, int64_t n);

/* attn_avx512.c (used when the CPU has AVX-512F): prefill attention of the
 * n_tok consecutive batch tokens i0.. (one sequence) for the G query heads
 * of KV head kvh; bit-identical to the per-token AVX2 path. */
typedef struct kw_attn_tile_args {
    const float *q;                 /* [n_tokens][n_head][hk] */
    float *out;                     /* [n_tokens][n_head][hv] */
    kw_kv_pool *kv;
    const kw_block_table *table;    /* the tile's sequence */
    const int32_t *pos;             /* batch positions */
    int32_t i0, n_tok;
    int layer, kvh, n_head, G, hk, hv;
} kw_attn_tile_args;
int kw_attn_tile_tokens(int G);                                  /* tokens per tile */
size_t kw_attn_tile_floats(int hk, int hv, int32_t max_ctx);     /* per-thread scratch */
bool kw_attn_tile_supported(uint32_t kv_type, int G, int hk, int hv);
void kw_attn_tile_avx512(const kw_attn_tile_args *a, float *scr);

/* attn_decode_avx512.c: one token (i0, n_tok = 1) x the G heads of KV head
 * kvh; bit-identical to the per-token AVX2 path. scr: G * max_ctx floats. */
bool kw_attn_decode_supported(uint32_t kv_type, int G, int hk, int hv);
void kw_attn_decode_avx512(const kw_attn_tile_args *a, float *scr, int32_t max_ctx);

/* attn_i16.c / attn_i16_avx512.c: attention over an i16 or i8 KV cache
 * (KW_TYPE_KV_I16, KW_TYPE_KV_I8: the pool's type says which) for the n_tok
 * tokens x G heads of a->kvh; the portable ref and the AVX-512 VNNI kernel
 * (at most 16 queries) give the same bits.
 * scr: kw_attn_i16_floats(n_tok * G, ...) floats. */
size_t kw_attn_i16_floats(int nq, int hk, int hv, int32_t max_ctx);
float kw_attn_i16_quant_q(const float *q, int hk, int w8, int16_t *qi);   /* q_int (127 for i8); returns c */
void kw_attn_i16_ref(const kw_attn_tile_args *a, float *scr, int32_t max_ctx);
bool kw_attn_i16_supported(int nq, int hk, int hv);
void kw_attn_i16_avx512(const kw_attn_tile_args *a, float *scr, int32_t max_ctx);
/* The softmax of the definition (attn_i16.c): scores are in base 2 (c holds
 * log2 e), e_j = 2^(s_j - max) by kw_attn_exp2: x clamped to [-127, 128]
 * (min then max, NaN -> 128), n = x rounded to nearest even, f = x - n
 * (exact), p = the degree-6 Taylor polynomial of 2^f below by Horner in
 * fused multiply-adds, result p * 2^n rounded once. The same constants in
 * every implementation: */
#define KW_ATTN_LOG2E 1.44269504088896341f
#define KW_ATTN_EXP2_C6 1.5403530393381606e-4f   /* ln2^k / k! */
#define KW_ATTN_EXP2_C5 1.3333558146428441e-3f
#define KW_ATTN_EXP2_C4 9.6181291076284770e-3f
#define KW_ATTN_EXP2_C3 5.5504108664821576e-2f
#define KW_ATTN_EXP2_C2 0.24022650695910071f
#define KW_ATTN_EXP2_C1 0.69314718055994531f
/* p = the polynomial of 2^f by Horner: one text for the portable, AVX2 and
 * AVX-512 exp2 (C: a constant as the type, FMA: its fused multiply-add) */
#define KW_ATTN_EXP2_POLY(p, f, C, FMA)                  \
    do {                                                 \
        (p) = C(KW_ATTN_EXP2_C6);                        \
        (p) = FMA((p), (f), C(KW_ATTN_EXP2_C5));         \
        (p) = FMA((p), (f), C(KW_ATTN_EXP2_C4));         \
        (p) = FMA((p), (f), C(KW_ATTN_EXP2_C3));         \
        (p) = FMA((p), (f), C(KW_ATTN_EXP2_C2));         \
        (p) = FMA((p), (f), C(KW_ATTN_EXP2_C1));         \
        (p) = FMA((p), (f), C(1.0f));                    \
    } while (0)
#define KW_ATTN_SPAN 256   /* keys per float partial sum span (below) */
float kw_attn_exp2(float x);
void kw_attn_i16_exp(float *x, int32_t n);   /* x[0..n) = kw_attn_exp2(x) */
/* The sum of the e_j: key j added into float lane[j % 16] (keys in order);
 * after each key j with j % KW_ATTN_SPAN == KW_ATTN_SPAN - 1, and at the
 * end, the 16 lanes are added into 16 double parts and cleared; the parts
 * are added in order 0..15 and inv = (float)(1 / sum).
 * kw_attn_i16_sum_add adds keys [j0, j1) (e[j - j0]) to lane / part;
 * kw_attn_i16_sum_end flushes the lanes and returns inv. */
void kw_attn_i16_sum_add(float *lane, double *part, const float *e, int32_t j0, int32_t j1);
float kw_attn_i16_sum_end(float *lane, double *part);
/* attn_i16_avx2.c (AVX2 + FMA): the same queries as kw_attn_i16_avx512 (at
 * most 16, kw_attn_i16_supported), the same bits, for CPUs without VNNI */
void kw_attn_i16_avx2(const kw_attn_tile_args *a, float *scr, int32_t max_ctx);
/* x[0..n) = kw_attn_exp2(x): 8 lanes at a time (AVX2 + FMA), resp. 16
 * (AVX-512F), each the kernel's own exp2 (tests/model/test_exp_i16.c) */
void kw_attn_exp2_avx2(float *x, int32_t n);
void kw_attn_exp2_avx512(float *x, int32_t n);

#endif
