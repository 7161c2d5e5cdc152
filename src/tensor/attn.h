/* attn.h - internal interface of the attention and activation kernels.
 *
 * The forward pass (src/model/forward.c) runs them only through the active
 * kernel set (kernels.h: kw_attn_token, kw_attn_tiles, kw_attn_tile and the
 * swiglu entry) and sizes its scratch with the functions below; the
 * families' kernels are declared here for their sets, the tests and
 * bench_attn.
 *
 * One call is one KV head (kvh) of one sequence: the G query heads that
 * share it (heads kvh * G .. kvh * G + G - 1) of n_tok consecutive batch
 * tokens i0.., each over its causal range, positions 0..pos[i]. The KV
 * cache is read through a->kv (tensor.h kw_attn_kv: the KV pool's blocks of
 * the sequence, one layer), never through the pool itself.
 *
 * Every path of one KV type gives the same bits for a token whatever the
 * tile, thread or family it runs in, except where a family's exp differs
 * (the float per-token path: expf in the scalar and AVX2 families, the
 * AVX-512 exp of exp_avx512.h in the AVX-512 family, which its decode and
 * tile kernels inline). The integer (i16, i8) paths give the same bits in
 * every family (attn_i16.c defines them). */
#ifndef KW_TENSOR_ATTN_H
#define KW_TENSOR_ATTN_H
#include "kvwise/tensor.h"

typedef struct kw_attn_args {
    const float *q;                 /* [n_tokens][n_head][hk] */
    float *out;                     /* [n_tokens][n_head][hv] */
    kw_attn_kv kv;                  /* the sequence's KV blocks of this layer */
    const int32_t *pos;             /* batch positions */
    int32_t i0, n_tok;
    int kvh, n_head, G, hk, hv;
} kw_attn_args;

/* Head kvh's K (v = 0) or V (v = 1) region of the sequence's block b. */
static inline uint8_t *kw_attn_region(const kw_attn_args *a, int32_t b, int v) {
    return a->kv.region(&a->kv, a->kv.ids[b], a->kvh, v);
}
/* Row pointer of key j of head kvh, K (v = 0) or V (v = 1): F32/F16/Q8_0 rows. */
static inline const void *kw_attn_row(const kw_attn_args *a, int32_t j, int v) {
    int32_t bt = a->kv.block_tokens;
    return kw_attn_region(a, j / bt, v) + (size_t)(j % bt) * (v ? a->kv.v_row_bytes : a->kv.k_row_bytes);
}
/* The same rows for a kernel that walks the keys: the block's region is
 * looked up once per block (kw_attn_walk_row), not once per key. */
typedef struct kw_attn_walk {
    const kw_attn_args *a;
    int v;
    int32_t block;
    const uint8_t *base;
} kw_attn_walk;
static inline kw_attn_walk kw_attn_walk_start(const kw_attn_args *a, int v) {
    return (kw_attn_walk){.a = a, .v = v, .block = -1, .base = NULL};
}
static inline const void *kw_attn_walk_row(kw_attn_walk *w, int32_t j) {
    const kw_attn_args *a = w->a;
    int32_t bt = a->kv.block_tokens;
    if (j / bt != w->block) {
        w->block = j / bt;
        w->base = kw_attn_region(a, w->block, w->v);
    }
    return w->base + (size_t)(j % bt) * (w->v ? a->kv.v_row_bytes : a->kv.k_row_bytes);
}

/* ---- shapes and scratch (attn.c; the same for every family) ---- */

#define KW_ATTN_TILE_LANES 16        /* queries of a prefill tile (tokens x G heads) */
#define KW_ATTN_TILE_VCHUNK 32       /* V rows a float tile converts to F32 at a time */
#define KW_ATTN_DEC_MAX_QFLOATS 4096 /* the float decode kernel's G * hk * 2 duplicated query floats (stack) */
#define KW_ATTN_DEC_MAX_G 64         /* its query heads per KV head */
#define KW_ATTN_INT_MAX_Q 16         /* queries an integer kernel takes in one call */

int kw_attn_tile_tokens(int G);                                  /* tokens per prefill tile (0: G > 16) */
size_t kw_attn_tile_floats(int hk, int hv, int32_t max_ctx);     /* a float tile's scratch */
size_t kw_attn_i16_floats(int nq, int hk, int hv, int32_t max_ctx);   /* integer attention's, for nq queries */
/* The float prefill tile (F32/F16 KV, attn_avx512.c) and decode
 * (attn_decode_avx512.c) kernels take these shapes; the integer kernels
 * (attn_i16_avx2.c, attn_i16_avx512.c) nq queries of these head dims. */
bool kw_attn_tile_supported(uint32_t kv_type, int G, int hk, int hv);
bool kw_attn_decode_supported(uint32_t kv_type, int G, int hk, int hv);
bool kw_attn_i16_supported(int nq, int hk, int hv);
/* An integer kernel takes a whole prefill tile of this shape. */
bool kw_attn_i16_tiles(int G, int hk, int hv);

/* ---- the per-token path over F32 / F16 / Q8_0 rows (attn.c) ----
 * Numerics follow llama.cpp's CPU backend where it matters for the
 * conformance oracle: softmax sums in double, and an F16 (Q8_0) K cache
 * rounds q to F16 (Q8_0) before the dot product, an F16 V cache rounds the
 * probabilities to F16 before the weighted sum. A family supplies the row
 * operations; the AVX2 ones give the scalar ones' bits for Q8_0 rows. */
typedef struct kw_attn_ops {
    float (*dot_f32)(const float *q, const float *k, int n);
    float (*dot_f16)(const float *q, const uint16_t *k, int n);
    float (*dot_q8_0)(const uint8_t *q, const uint8_t *k, int n);   /* both Q8_0 blocks */
    void (*axpy_f32)(float *acc, float p, const float *v, int n);
    void (*axpy_f16)(float *acc, float p, const uint16_t *v, int n);
    void (*axpy_q8_0)(float *acc, float p, const uint8_t *v, int n);
    void (*round_f16)(float *x, int n);
    void (*exp)(float *x, int64_t n);   /* x = exp(x): the softmax's */
} kw_attn_ops;
/* One token (a->i0; n_tok 1) x the G heads. scr: G * (max_ctx + hk + hv) floats. */
void kw_attn_per_token(const kw_attn_ops *op, const kw_attn_args *a, float *scr, int32_t max_ctx);
/* The scalar set's decode and tile kernels (F32/F16 KV; its predicate
 * kw_attn_no_kernel says no, so they are never asked): the per-token path
 * with the scalar rows, a tile token by token. */
void kw_attn_decode_scalar(const kw_attn_args *a, float *scr, int32_t max_ctx);
void kw_attn_tile_scalar(const kw_attn_args *a, float *scr, int32_t max_ctx);
bool kw_attn_no_kernel(uint32_t kv_type, int G, int hk, int hv);   /* false */
/* attn.c: the portable Q8_0 rows (the AVX2 ones give the same bits) */
float kw_attn_dot_q8_0(const uint8_t *q, const uint8_t *k, int n);
void kw_attn_axpy_q8_0(float *acc, float p, const uint8_t *v, int n);
/* act.c: the portable activations: x = exp(x) (expf); gate = silu(gate) * up */
void kw_exp_scalar(float *x, int64_t n);
void kw_swiglu_scalar(float *gate, const float *up, int64_t n);

/* attn_avx2.c (AVX2 + FMA + F16C) */
float kw_attn_dot_f32_avx2(const float *q, const float *k, int n);
float kw_attn_dot_f16_avx2(const float *q, const uint16_t *k, int n);
void kw_attn_axpy_f32_avx2(float *acc, float p, const float *v, int n);
void kw_attn_axpy_f16_avx2(float *acc, float p, const uint16_t *v, int n);
void kw_attn_round_f16_avx2(float *x, int n);
float kw_attn_dot_q8_0_avx2(const uint8_t *q, const uint8_t *k, int n);
void kw_attn_axpy_q8_0_avx2(float *acc, float p, const uint8_t *v, int n);
/* They in kw_attn_ops order, up to its exp: the rows of both SIMD sets */
#define KW_ATTN_ROWS_AVX2                                                                                      \
    kw_attn_dot_f32_avx2, kw_attn_dot_f16_avx2, kw_attn_dot_q8_0_avx2, kw_attn_axpy_f32_avx2,                 \
        kw_attn_axpy_f16_avx2, kw_attn_axpy_q8_0_avx2, kw_attn_round_f16_avx2

/* act_avx512.c (AVX-512F): gate[i] = silu(gate[i]) * up[i]; x[i] = exp(x[i]) (~1 ulp) */
void kw_swiglu_avx512(float *gate, const float *up, int64_t n);
void kw_exp_avx512(float *x, int64_t n);

/* attn_avx512.c (AVX-512F): a prefill tile of a->n_tok tokens (F32/F16
 * KV, kw_attn_tile_supported), bit-identical to the AVX-512 family's
 * per-token path. scr: kw_attn_tile_floats(hk, hv, max_ctx) floats. */
void kw_attn_tile_avx512(const kw_attn_args *a, float *scr, int32_t max_ctx);

/* attn_decode_avx512.c: one token x the G heads (kw_attn_decode_supported);
 * the same bits as the per-token path. scr: G * max_ctx floats. */
void kw_attn_decode_avx512(const kw_attn_args *a, float *scr, int32_t max_ctx);

/* ---- attention over an i16 or i8 KV cache ----
 * attn_i16.c defines it and has the portable path (kw_attn_i16_ref: any
 * number of queries); the AVX-512 VNNI kernel (attn_i16_avx512.c) and the
 * AVX2 one (attn_i16_avx2.c) take kw_attn_i16_supported queries and give
 * the same bits. scr: kw_attn_i16_floats(n_tok * G, ...) floats. */
float kw_attn_i16_quant_q(const float *q, int hk, int w8, int16_t *qi);   /* q_int (127 for i8); returns c */
void kw_attn_i16_ref(const kw_attn_args *a, float *scr, int32_t max_ctx);
void kw_attn_i16_avx512(const kw_attn_args *a, float *scr, int32_t max_ctx);
void kw_attn_i16_avx2(const kw_attn_args *a, float *scr, int32_t max_ctx);
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
/* x[0..n) = kw_attn_exp2(x): 8 lanes at a time (AVX2 + FMA), resp. 16
 * (AVX-512F), each the kernel's own exp2 (tests/tensor/test_exp_i16.c) */
void kw_attn_exp2_avx2(float *x, int32_t n);
void kw_attn_exp2_avx512(float *x, int32_t n);

#endif
