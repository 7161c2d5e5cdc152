/* attn.c - the portable attention (attn.h): shapes and scratch sizes of the
 * kernels, the per-token path over F32 / F16 / Q8_0 KV rows with its scalar
 * row operations, the scalar set's attention kernels, and attention through
 * a kernel set (kernels.h kw_attn_token, kw_attn_tiles, kw_attn_tile).
 *
 * The per-token path scores the G query heads that share a KV head
 * together, so each K and V row is read once per group. Rows are read in
 * place (F32, F16) or per Q8_0 block. */
#include "tensor/kernels.h"
#include <math.h>
#include <string.h>

/* ---- shapes and scratch ---- */

int kw_attn_tile_tokens(int G) {
    return G >= 1 && G <= KW_ATTN_TILE_LANES ? KW_ATTN_TILE_LANES / G : 0;
}

size_t kw_attn_tile_floats(int hk, int hv, int32_t max_ctx) {
    /* qt[hk][16], scores[max_ctx][16], krow[2][hk], vbuf[32][hv] */
    return (size_t)KW_ATTN_TILE_LANES * ((size_t)hk + (size_t)max_ctx) + 2 * (size_t)hk +
           (size_t)KW_ATTN_TILE_VCHUNK * (size_t)hv + 64;
}

size_t kw_attn_i16_floats(int nq, int hk, int hv, int32_t max_ctx) {
    /* scores[nq][ctx], q pairs[hk/2][16], acc[nq][hv], probability pairs[nq][16] */
    return (size_t)nq * ((size_t)max_ctx + (size_t)hv + 16) + (size_t)hk / 2 * 16 + 64;
}

bool kw_attn_tile_supported(uint32_t kv_type, int G, int hk, int hv) {
    return (kv_type == KW_TYPE_F32 || kv_type == KW_TYPE_F16) && kw_attn_tile_tokens(G) > 0 && hk % 8 == 0 &&
           hk <= 1024 && hv % 16 == 0 && hv <= 1024;
}

bool kw_attn_decode_supported(uint32_t kv_type, int G, int hk, int hv) {
    return (kv_type == KW_TYPE_F32 || kv_type == KW_TYPE_F16) && G >= 1 && G <= KW_ATTN_DEC_MAX_G && hk % 8 == 0 &&
           hk >= 8 && G * hk * 2 <= KW_ATTN_DEC_MAX_QFLOATS && hv % 16 == 0 && hv >= 16;
}

bool kw_attn_i16_supported(int nq, int hk, int hv) {
    return nq >= 1 && nq <= KW_ATTN_INT_MAX_Q && hk % 16 == 0 && hk >= 16 && hk <= 128 && hv % 16 == 0 && hv >= 16;
}

bool kw_attn_i16_tiles(int G, int hk, int hv) {
    int per = kw_attn_tile_tokens(G);
    return per > 0 && kw_attn_i16_supported(per * G, hk, hv);
}

/* ---- the scalar row operations ---- */

static float dot_f32(const float *a, const float *b, int n) {
    float s[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) s[l] += a[i + l] * b[i + l];
    float t = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
    for (; i < n; i++) t += a[i] * b[i];
    return t;
}

static float dot_f16(const float *q, const uint16_t *k, int n) {
    float t = 0.0f;
    for (int i = 0; i < n; i++) t += q[i] * kw_f16_to_f32(k[i]);
    return t;
}

static void axpy_f32(float *acc, float p, const float *v, int n) {
    for (int i = 0; i < n; i++) acc[i] += p * v[i];
}

static void axpy_f16(float *acc, float p, const uint16_t *v, int n) {
    for (int i = 0; i < n; i++) acc[i] += p * kw_f16_to_f32(v[i]);
}

/* Q8_0 rows (34-byte blocks: F16 scale, 32 int8). q arrives quantized the
 * same way (q_for_cache), as llama.cpp's vec-dot converts q for a Q8_0 K:
 * per block an exact integer dot, then t += (d_k * d_q) * isum in block
 * order (ggml_vec_dot_q8_0_q8_0's formula). attn_avx2.c computes the same
 * bits. */
float kw_attn_dot_q8_0(const uint8_t *q, const uint8_t *k, int n) {
    float t = 0.0f;
    for (int b = 0; b < n / 32; b++, k += 34, q += 34) {
        uint16_t dk, dq;
        memcpy(&dk, k, 2);
        memcpy(&dq, q, 2);
        const int8_t *ks = (const int8_t *)(k + 2), *qs = (const int8_t *)(q + 2);
        int32_t isum = 0;
        for (int i = 0; i < 32; i++) isum += (int32_t)qs[i] * (int32_t)ks[i];
        t += (kw_f16_to_f32(dk) * kw_f16_to_f32(dq)) * (float)isum;
    }
    return t;
}

/* acc += p * V-row for a Q8_0 row: per block pd = p * d, then one multiply
 * and one add per element (no FMA), as attn_avx2.c. */
void kw_attn_axpy_q8_0(float *acc, float p, const uint8_t *v, int n) {
    for (int b = 0; b < n / 32; b++, v += 34) {
        uint16_t d16;
        memcpy(&d16, v, 2);
        const int8_t *qs = (const int8_t *)(v + 2);
        float pd = p * kw_f16_to_f32(d16);
        for (int i = 0; i < 32; i++) acc[b * 32 + i] += pd * (float)qs[i];
    }
}

static void round_f16(float *x, int n) {
    for (int i = 0; i < n; i++) x[i] = kw_f16_to_f32(kw_f32_to_f16(x[i]));
}


/* ---- the per-token path ---- */

/* q . K-row; for a Q8_0 cache q is the Q8_0 blocks q_for_cache() wrote. */
static float dot_row(const kw_attn_ops *op, uint32_t type, const float *q, const void *k, int n) {
    if (type == KW_TYPE_F32) return op->dot_f32(q, k, n);
    if (type == KW_TYPE_F16) return op->dot_f16(q, k, n);
    return op->dot_q8_0((const uint8_t *)q, k, n);
}

static void axpy_row(const kw_attn_ops *op, uint32_t type, float *acc, float p, const void *v, int n) {
    if (type == KW_TYPE_F32) op->axpy_f32(acc, p, v, n);
    else if (type == KW_TYPE_F16) op->axpy_f16(acc, p, v, n);
    else op->axpy_q8_0(acc, p, v, n);
}

/* q as the K cache's dot type sees it (llama.cpp converts q to the K type's
 * vec-dot type): F16 rounding, or unchanged for F32. For Q8_0 the n floats
 * of out receive q's Q8_0 blocks (n / 32 * 34 bytes <= 4 * n). */
static void q_for_cache(const kw_attn_ops *op, uint32_t type, const float *q, float *out, int n) {
    if (type == KW_TYPE_Q8_0) { kw_quantize_row(type, q, out, n); return; }
    memcpy(out, q, (size_t)n * sizeof(float));
    if (type == KW_TYPE_F16) op->round_f16(out, n);
}

/* softmax(scores[0..n)) in place: exp(s - max) by the family's exp, sum in double. */
static void softmax(const kw_attn_ops *op, float *s, int n) {
    float mx = -INFINITY;
    for (int j = 0; j < n; j++) if (s[j] > mx) mx = s[j];
    for (int j = 0; j < n; j++) s[j] -= mx;
    op->exp(s, n);
    double sum = 0.0;
    for (int j = 0; j < n; j++) sum += s[j];
    float inv = (float)(1.0 / sum);
    for (int j = 0; j < n; j++) s[j] *= inv;
}

/* For each query head h of the group, out_h = softmax(q_h . K[0..pos] /
 * sqrt(hk)) . V[0..pos]. */
void kw_attn_per_token(const kw_attn_ops *op, const kw_attn_args *a, float *scr, int32_t C) {
    const int hk = a->hk, hv = a->hv, bt = a->kv.block_tokens, G = a->G, h0 = a->kvh * G;
    const uint32_t type = a->kv.type;
    const int32_t i = a->i0, n = a->pos[i] + 1;
    float *scores = scr, *qs = scores + (size_t)G * C, *acc = qs + (size_t)G * hk;
    float scale = 1.0f / sqrtf((float)hk);
    for (int g = 0; g < G; g++) q_for_cache(op, type, a->q + ((int64_t)i * a->n_head + h0 + g) * hk, qs + g * hk, hk);
    for (int32_t j0 = 0; j0 < n; j0 += bt) {           /* a block's rows of one head are contiguous */
        const uint8_t *kb = kw_attn_region(a, j0 / bt, 0);
        for (int32_t j = j0; j < n && j < j0 + bt; j++, kb += a->kv.k_row_bytes)
            for (int g = 0; g < G; g++) scores[(size_t)g * C + j] = dot_row(op, type, qs + g * hk, kb, hk) * scale;
    }
    for (int g = 0; g < G; g++) {
        softmax(op, scores + (size_t)g * C, n);
        if (type == KW_TYPE_F16) op->round_f16(scores + (size_t)g * C, n);  /* llama.cpp: KQ to F16 for an F16 V */
    }
    memset(acc, 0, (size_t)G * hv * sizeof(float));
    for (int32_t j0 = 0; j0 < n; j0 += bt) {
        const uint8_t *vb = kw_attn_region(a, j0 / bt, 1);
        for (int32_t j = j0; j < n && j < j0 + bt; j++, vb += a->kv.v_row_bytes)
            for (int g = 0; g < G; g++) axpy_row(op, type, acc + g * hv, scores[(size_t)g * C + j], vb, hv);
    }
    for (int g = 0; g < G; g++)
        memcpy(a->out + ((int64_t)i * a->n_head + h0 + g) * hv, acc + g * hv, (size_t)hv * sizeof(float));
}

/* ---- the scalar set's attention: the portable paths, no kernel ---- */

void kw_attn_decode_scalar(const kw_attn_args *a, float *scr, int32_t max_ctx) {
    kw_attn_per_token(&kw_attn_kernels_scalar.ops, a, scr, max_ctx);
}

void kw_attn_tile_scalar(const kw_attn_args *a, float *scr, int32_t max_ctx) {
    kw_attn_args t = *a;
    t.n_tok = 1;
    for (t.i0 = a->i0; t.i0 < a->i0 + a->n_tok; t.i0++) kw_attn_decode_scalar(&t, scr, max_ctx);
}

bool kw_attn_no_kernel(uint32_t kv_type, int G, int hk, int hv) { return false; }
static bool no_integer_kernel(int nq, int hk, int hv) { return false; }

const kw_attn_kernels kw_attn_kernels_scalar = {
    .ops = {dot_f32, dot_f16, kw_attn_dot_q8_0, axpy_f32, axpy_f16, kw_attn_axpy_q8_0, round_f16, kw_exp_scalar},
    .decode_supported = kw_attn_no_kernel, .decode = kw_attn_decode_scalar,
    .tile_supported = kw_attn_no_kernel, .tile = kw_attn_tile_scalar,
    .integer_supported = no_integer_kernel, .integer = kw_attn_i16_ref, .kv_type_auto = KW_TYPE_F16};

/* ---- attention through a kernel set ---- */

/* i16 / i8: the set's kernel where it takes the queries, else the portable path (the same bits). */
static void attn_int(const kw_kernel_set *ks, const kw_attn_args *a, float *scr, int32_t max_ctx) {
    if (ks->attn.integer_supported(a->n_tok * a->G, a->hk, a->hv)) ks->attn.integer(a, scr, max_ctx);
    else kw_attn_i16_ref(a, scr, max_ctx);
}

void kw_attn_token(const kw_kernel_set *ks, const kw_attn_args *a, float *scr, int32_t max_ctx) {
    const uint32_t type = a->kv.type;
    if (kw_kv_type_is_int(type)) attn_int(ks, a, scr, max_ctx);
    else if (ks->attn.decode_supported(type, a->G, a->hk, a->hv)) ks->attn.decode(a, scr, max_ctx);
    else kw_attn_per_token(&ks->attn.ops, a, scr, max_ctx);
}

bool kw_attn_tiles(const kw_kernel_set *ks, uint32_t kv_type, int G, int hk, int hv) {
    int per = kw_attn_tile_tokens(G);
    if (per == 0) return false;
    return kw_kv_type_is_int(kv_type) ? ks->attn.integer_supported(per * G, hk, hv)
                                      : ks->attn.tile_supported(kv_type, G, hk, hv);
}

void kw_attn_tile(const kw_kernel_set *ks, const kw_attn_args *a, float *scr, int32_t max_ctx) {
    if (kw_kv_type_is_int(a->kv.type)) { attn_int(ks, a, scr, max_ctx); return; }
    if (ks->attn.tile_supported(a->kv.type, a->G, a->hk, a->hv)) { ks->attn.tile(a, scr, max_ctx); return; }
    kw_attn_args t = *a;   /* no tile kernel for this shape: token by token */
    t.n_tok = 1;
    for (t.i0 = a->i0; t.i0 < a->i0 + a->n_tok; t.i0++) kw_attn_token(ks, &t, scr, max_ctx);
}
