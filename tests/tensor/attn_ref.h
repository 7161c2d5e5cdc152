/* attn_ref.h - what the attention tests (test_attn_tiles, test_attn_decode)
 * compare against: the AVX-512 family's per-token path (src/tensor/attn.c)
 * for one head rebuilt from the attn_avx2.c helpers (softmax through the
 * AVX-512 exp, as that family runs it), a double-precision softmax
 * attention from scratch, and the
 * helpers that fill a KV row. Static functions: each test compiles its own
 * copy (header only, no extra test library). */
#ifndef KW_TESTS_ATTN_REF_H
#define KW_TESTS_ATTN_REF_H
#include "testutil.h"
#include "tensor/attn.h"
#include "kvwise/kv.h"
#include <string.h>

/* uniform in [-1, 1) from a 32-bit LCG; each test keeps its own seed */
static inline float attn_ref_frand(uint32_t *seed) {
    *seed = *seed * 1664525u + 1013904223u;
    return (float)((*seed >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static inline float round_f16(float x) { return kw_f16_to_f32(kw_f32_to_f16(x)); }

static inline void put_row(uint32_t type, void *dst, const float *src, int n) {
    if (type == KW_TYPE_F32) memcpy(dst, src, sizeof(float) * (size_t)n);
    else for (int i = 0; i < n; i++) ((uint16_t *)dst)[i] = kw_f32_to_f16(src[i]);
}

static inline float get_val(uint32_t type, const void *row, int d) {
    return type == KW_TYPE_F32 ? ((const float *)row)[d] : kw_f16_to_f32(((const uint16_t *)row)[d]);
}

#define MAXN 192   /* keys */
#define MAXD 128   /* head dim */

/* The AVX-512 family's per-token path for one head (the AVX2 helpers, its exp). */
static inline void per_token(kw_kv_pool *kv, const kw_block_table *t, int kvh, const float *q, int32_t n, int hk, int hv,
                      float *out) {
    uint32_t type = kv->lay.type;
    int bt = kv->lay.block_tokens;
    float qs[MAXD], sc[MAXN];
    memcpy(qs, q, sizeof(float) * (size_t)hk);
    if (type == KW_TYPE_F16) kw_attn_round_f16_avx2(qs, hk);
    float scale = 1.0f / sqrtf((float)hk);
    for (int32_t j = 0; j < n; j++) {
        const void *k = kw_kv_k(kv, t->ids[j / bt], 0, kvh, j % bt);
        sc[j] = (type == KW_TYPE_F32 ? kw_attn_dot_f32_avx2(qs, k, hk) : kw_attn_dot_f16_avx2(qs, k, hk)) * scale;
    }
    float mx = -INFINITY;
    for (int32_t j = 0; j < n; j++) if (sc[j] > mx) mx = sc[j];
    double sum = 0.0;
    for (int32_t j = 0; j < n; j++) sc[j] -= mx;
    kw_exp_avx512(sc, n);                 /* the AVX-512 family's softmax */
    for (int32_t j = 0; j < n; j++) sum += sc[j];
    float inv = (float)(1.0 / sum);
    for (int32_t j = 0; j < n; j++) sc[j] *= inv;
    if (type == KW_TYPE_F16) kw_attn_round_f16_avx2(sc, n);
    memset(out, 0, sizeof(float) * (size_t)hv);
    for (int32_t j = 0; j < n; j++) {
        const void *v = kw_kv_v(kv, t->ids[j / bt], 0, kvh, j % bt);
        if (type == KW_TYPE_F32) kw_attn_axpy_f32_avx2(out, sc[j], v, hv);
        else kw_attn_axpy_f16_avx2(out, sc[j], v, hv);
    }
}

static inline void reference(kw_kv_pool *kv, const kw_block_table *t, int kvh, const float *q, int32_t n, int hk, int hv,
                      double *out) {
    uint32_t type = kv->lay.type;
    int bt = kv->lay.block_tokens;
    double sc[MAXN], mx = -INFINITY, sum = 0.0;
    for (int32_t j = 0; j < n; j++) {
        const void *k = kw_kv_k(kv, t->ids[j / bt], 0, kvh, j % bt);
        double s = 0.0;
        for (int d = 0; d < hk; d++) s += (double)(type == KW_TYPE_F16 ? round_f16(q[d]) : q[d]) * get_val(type, k, d);
        sc[j] = s / sqrt((double)hk);
        if (sc[j] > mx) mx = sc[j];
    }
    for (int32_t j = 0; j < n; j++) { sc[j] = exp(sc[j] - mx); sum += sc[j]; }
    for (int d = 0; d < hv; d++) out[d] = 0.0;
    for (int32_t j = 0; j < n; j++) {
        const void *v = kw_kv_v(kv, t->ids[j / bt], 0, kvh, j % bt);
        double p = sc[j] / sum;
        if (type == KW_TYPE_F16) p = round_f16((float)p);
        for (int d = 0; d < hv; d++) out[d] += p * get_val(type, v, d);
    }
}

#endif
