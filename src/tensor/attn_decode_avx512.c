/* attn_decode_avx512.c - decode attention of one token (AVX-512F).
 *
 * Owns kw_attn_decode_avx512(): for one batch token and one KV head, the
 * G query heads that share it attend over positions 0..pos of the token's
 * sequence (F32 or F16 cache). It is the AVX-512 set's attn_decode:
 * kw_attn_token (attn.c) calls it for every single-token item (plain
 * decode and each sequence of a batched decode step) when the shapes fit
 * (kw_attn_decode_supported).
 *
 * The arithmetic of every output is exactly the family's per-token path's
 * (attn.c with attn_avx2.c's rows), so results are bit-identical to it and
 * to the prefill tiles (attn_avx512.c), which match the same path:
 *   - q . k: 8 partial sums (element d goes to sum d % 8, FMA in order of
 *     d), combined as ((s0+s4)+(s2+s6)) + ((s1+s5)+(s3+s7)), times scale;
 *   - softmax: max, exp(s - max) (kw_exp_avx512, as the family's per-token
 *     softmax), sum in double in key order, times (float)(1/sum); an F16
 *     cache rounds q and the probabilities to F16;
 *   - out = sum over keys in order of p * v, one FMA per element.
 * What is faster: two keys share a 512-bit register (lanes 0-7 key A, 8-15
 * key B, each lane one of the 8 partial sums), each K row is converted
 * from F16 once for all G heads, the 8-partial trees of 16 keys are
 * reduced together with lane permutes (three add stages, the same adds in
 * the same order as the 8-lane tree), the G heads' softmax sums run as
 * independent chains, and each V row is converted once and accumulated
 * for up to 4 heads from registers. */
#include "attn_rows.h"
#include <immintrin.h>
#include <math.h>
#include <string.h>

#define KW_INLINE static inline __attribute__((always_inline))
#define KW_DEC_MAX_QFLOATS KW_ATTN_DEC_MAX_QFLOATS   /* G * hk * 2 floats of duplicated queries on the stack */

/* Element d..d+7 of key rows a and b as F32 in the low and high halves. */
static inline __m512 pair8(const void *ra, const void *rb, int d, int f16) {
    if (f16) {
        __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)((const uint16_t *)ra + d))),
                                            _mm_loadu_si128((const __m128i *)((const uint16_t *)rb + d)), 1);
        return _mm512_cvtph_ps(h);
    }
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps((const float *)ra + d)),
                              _mm256_loadu_ps((const float *)rb + d), 1);
}

/* One add stage of the tree over two vectors: lo/hi pick, per output lane,
 * the two partials the 8-lane tree adds at this stage. */
static inline __m512 stage(__m512 x, __m512 y, __m512i lo, __m512i hi) {
    return _mm512_add_ps(_mm512_permutex2var_ps(x, lo, y), _mm512_permutex2var_ps(x, hi, y));
}

typedef struct tree_idx { __m512i lo1, hi1, lo2, hi2, lo3, hi3; } tree_idx;

/* Stage 1: X = [key a: s0..s7 | key b: s0..s7] pairs -> 4 keys x (s_l + s_{l+4}), l < 4.
 * Stage 2: 4 keys x t -> 8 keys x (t_m + t_{m+2}), m < 2. Stage 3: 8 keys x u -> 16 x (u0 + u1). */
static void tree_init(tree_idx *t) {
    int lo1[16], hi1[16], lo2[16], hi2[16], lo3[16], hi3[16];
    for (int k = 0; k < 4; k++)
        for (int l = 0; l < 4; l++) {
            int src = (k < 2 ? 0 : 16) + 8 * (k % 2) + l;
            lo1[4 * k + l] = src;
            hi1[4 * k + l] = src + 4;
        }
    for (int k = 0; k < 8; k++)
        for (int m = 0; m < 2; m++) {
            int src = (k < 4 ? 0 : 16) + 4 * (k % 4) + m;
            lo2[2 * k + m] = src;
            hi2[2 * k + m] = src + 2;
        }
    for (int k = 0; k < 16; k++) {
        int src = (k < 8 ? 0 : 16) + 2 * (k % 8);
        lo3[k] = src;
        hi3[k] = src + 1;
    }
    t->lo1 = _mm512_loadu_si512(lo1); t->hi1 = _mm512_loadu_si512(hi1);
    t->lo2 = _mm512_loadu_si512(lo2); t->hi2 = _mm512_loadu_si512(hi2);
    t->lo3 = _mm512_loadu_si512(lo3); t->hi3 = _mm512_loadu_si512(hi3);
}

/* Scores of keys [j0, j0+16) (rows in kr[], padded by repeats) for every
 * head: sc[g * C + j0 + k] for k < cnt. q2[g][hk/8][16]: q_g's 8 values of
 * each chunk in both halves. Each key pair is converted once for up to 8
 * heads; their partial-sum vectors go through xs[g][pair]. */
/* Heads g0..g0+GN (GN a constant, so the accumulators stay in registers). */
KW_INLINE void score16_heads(const void *const *kr, int cnt, const float *q2, const tree_idx *t, float scale,
                             float *sc, size_t C, int32_t j0, int f16, int nch, int g0, const int GN) {
    __m512 xs[8][8];
    for (int p = 0; p < 8; p++) {
        __m512 acc[8];
        _Pragma("GCC unroll 8") for (int g = 0; g < GN; g++) acc[g] = _mm512_setzero_ps();
        for (int c = 0; c < nch; c++) {
            __m512 kv = pair8(kr[2 * p], kr[2 * p + 1], 8 * c, f16);
            _Pragma("GCC unroll 8") for (int g = 0; g < GN; g++)
                acc[g] = _mm512_fmadd_ps(_mm512_loadu_ps(q2 + ((size_t)(g0 + g) * nch + c) * 16), kv, acc[g]);
        }
        _Pragma("GCC unroll 8") for (int g = 0; g < GN; g++) xs[g][p] = acc[g];
    }
    _Pragma("GCC unroll 8") for (int g = 0; g < GN; g++) {
        const __m512 *x = xs[g];
        __m512 y0 = stage(x[0], x[1], t->lo1, t->hi1), y1 = stage(x[2], x[3], t->lo1, t->hi1);
        __m512 y2 = stage(x[4], x[5], t->lo1, t->hi1), y3 = stage(x[6], x[7], t->lo1, t->hi1);
        __m512 z0 = stage(y0, y1, t->lo2, t->hi2), z1 = stage(y2, y3, t->lo2, t->hi2);
        __m512 s = _mm512_mul_ps(stage(z0, z1, t->lo3, t->hi3), _mm512_set1_ps(scale));
        _mm512_mask_storeu_ps(sc + (size_t)(g0 + g) * C + j0, (__mmask16)((1u << cnt) - 1), s);
    }
}

/* score16_heads for GN <= 4 heads with the chunk loop outside: the 16 keys
 * in two halves of 4 pairs, each head's q chunk loaded once per chunk for
 * the 4 pairs (GN x 4 accumulators), and the first two tree stages of a
 * half done before the next, so nothing is spilled. The same FMAs in the
 * same order per lane and the same tree as score16_heads. */
KW_INLINE void score16_heads4(const void *const *kr, int cnt, const float *q2, const tree_idx *t, float scale,
                              float *sc, size_t C, int32_t j0, int f16, int nch, int g0, const int GN) {
    __m512 z[2][4];
    for (int h = 0; h < 2; h++) {
        __m512 acc[4][4];
        _Pragma("GCC unroll 4") for (int g = 0; g < GN; g++)
        _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) acc[g][p] = _mm512_setzero_ps();
        const void *const *r = kr + 8 * h;
        for (int c = 0; c < nch; c++) {
            __m512 q[4];
            _Pragma("GCC unroll 4") for (int g = 0; g < GN; g++) q[g] = _mm512_loadu_ps(q2 + ((size_t)(g0 + g) * nch + c) * 16);
            _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
                __m512 kv = pair8(r[2 * p], r[2 * p + 1], 8 * c, f16);
                _Pragma("GCC unroll 4") for (int g = 0; g < GN; g++) acc[g][p] = _mm512_fmadd_ps(q[g], kv, acc[g][p]);
            }
        }
        _Pragma("GCC unroll 4") for (int g = 0; g < GN; g++) {
            __m512 y0 = stage(acc[g][0], acc[g][1], t->lo1, t->hi1), y1 = stage(acc[g][2], acc[g][3], t->lo1, t->hi1);
            z[h][g] = stage(y0, y1, t->lo2, t->hi2);
        }
    }
    _Pragma("GCC unroll 4") for (int g = 0; g < GN; g++) {
        __m512 s = _mm512_mul_ps(stage(z[0][g], z[1][g], t->lo3, t->hi3), _mm512_set1_ps(scale));
        _mm512_mask_storeu_ps(sc + (size_t)(g0 + g) * C + j0, (__mmask16)((1u << cnt) - 1), s);
    }
}

static void score16(const kw_attn_args *a, const void *const *kr, int cnt, const float *q2, const tree_idx *t,
                    float scale, float *sc, size_t C, int32_t j0, int f16) {
    const int G = a->G, nch = a->hk / 8;
    for (int g0 = 0; g0 < G; g0 += 8) {
#define KW_S16(GN) score16_heads(kr, cnt, q2, t, scale, sc, C, j0, f16, nch, g0, GN)
#define KW_S16_4(GN) score16_heads4(kr, cnt, q2, t, scale, sc, C, j0, f16, nch, g0, GN)
        switch (G - g0 < 8 ? G - g0 : 8) {
        case 1: KW_S16_4(1); break;
        case 2: KW_S16_4(2); break;
        case 3: KW_S16_4(3); break;
        case 4: KW_S16_4(4); break;
        case 5: KW_S16(5); break;
        case 6: KW_S16(6); break;
        case 7: KW_S16(7); break;
        default: KW_S16(8); break;
        }
#undef KW_S16
#undef KW_S16_4
    }
}

/* softmax of each head's n scores as the family's per-token softmax (attn.c):
 * max, exp of s - max with kw_exp_avx512 (act_avx512.c), sum in double in
 * key order (the G heads' sums as independent chains), times (float)(1/sum). */
static void softmax_heads(float *sc, size_t C, int G, int32_t n, int f16) {
    double sums[KW_ATTN_DEC_MAX_G];
    for (int g = 0; g < G; g++) {
        float *s = sc + (size_t)g * C;
        __m512 vm = _mm512_set1_ps(-INFINITY);
        int32_t j = 0;
        for (; j + 16 <= n; j += 16) vm = _mm512_max_ps(vm, _mm512_loadu_ps(s + j));
        float mx = _mm512_reduce_max_ps(vm);
        for (; j < n; j++) if (s[j] > mx) mx = s[j];
        __m512 vx = _mm512_set1_ps(mx);
        for (j = 0; j + 16 <= n; j += 16) _mm512_storeu_ps(s + j, _mm512_sub_ps(_mm512_loadu_ps(s + j), vx));
        for (; j < n; j++) s[j] -= mx;
        kw_exp_avx512(s, n);
    }
    int g = 0;
    for (; g + 4 <= G; g += 4) {   /* four heads' chains in registers (each still in key order) */
        const float *s0 = sc + (size_t)g * C, *s1 = s0 + C, *s2 = s1 + C, *s3 = s2 + C;
        double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
        for (int32_t j = 0; j < n; j++) { a0 += s0[j]; a1 += s1[j]; a2 += s2[j]; a3 += s3[j]; }
        sums[g] = a0; sums[g + 1] = a1; sums[g + 2] = a2; sums[g + 3] = a3;
    }
    for (; g < G; g++) {
        const float *s0 = sc + (size_t)g * C;
        double a0 = 0.0;
        for (int32_t j = 0; j < n; j++) a0 += s0[j];
        sums[g] = a0;
    }
    for (int g = 0; g < G; g++) {
        float *s = sc + (size_t)g * C;
        float inv = (float)(1.0 / sums[g]);
        __m512 vi = _mm512_set1_ps(inv);
        int32_t j = 0;
        for (; j + 16 <= n; j += 16) {
            __m512 p = _mm512_mul_ps(_mm512_loadu_ps(s + j), vi);
            if (f16) p = _mm512_cvtph_ps(_mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT));
            _mm512_storeu_ps(s + j, p);
        }
        for (; j < n; j++) {
            s[j] *= inv;
            if (f16) s[j] = _cvtsh_ss(_cvtss_sh(s[j], _MM_FROUND_TO_NEAREST_INT));
        }
    }
}

/* out_g[c0 .. c0+16*NC) for heads g0..g0+GN (GN <= 4, NC <= 4, both
 * constants so the accumulators stay in registers) over all keys. */
KW_INLINE void pv_block(const kw_attn_args *a, const float *sc, size_t C, int32_t n, int g0, int c0, int f16,
                        const int GN, const int NC) {
    __m512 acc[4][4];
    _Pragma("GCC unroll 4") for (int g = 0; g < GN; g++)
    _Pragma("GCC unroll 4") for (int c = 0; c < NC; c++) acc[g][c] = _mm512_setzero_ps();
    int32_t bt = a->kv.block_tokens;
    size_t vrb = a->kv.v_row_bytes;
    for (int32_t jb = 0; jb < n; jb += bt) {
        const uint8_t *vr = kw_attn_row(a, jb, 1);
        int32_t je = jb + bt < n ? jb + bt : n;
        for (int32_t j = jb; j < je; j++, vr += vrb) {
            if (g0 == 0 && c0 == 0 && (j & 7) == 0) kw_attn_prefetch_rows(a, j + KW_ATTN_PF_KEYS, 8, n, 1);
            __m512 v[4];
            _Pragma("GCC unroll 4") for (int c = 0; c < NC; c++)
                v[c] = f16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)vr + c0 + 16 * c)))
                           : _mm512_loadu_ps((const float *)vr + c0 + 16 * c);
            _Pragma("GCC unroll 4") for (int g = 0; g < GN; g++) {
                __m512 p = _mm512_set1_ps(sc[(size_t)(g0 + g) * C + j]);
                _Pragma("GCC unroll 4") for (int c = 0; c < NC; c++) acc[g][c] = _mm512_fmadd_ps(p, v[c], acc[g][c]);
            }
        }
    }
    int32_t i = a->i0;
    _Pragma("GCC unroll 4") for (int g = 0; g < GN; g++) {
        float *o = a->out + ((size_t)i * (size_t)a->n_head + (size_t)(a->kvh * a->G + g0 + g)) * (size_t)a->hv;
        _Pragma("GCC unroll 4") for (int c = 0; c < NC; c++) _mm512_storeu_ps(o + c0 + 16 * c, acc[g][c]);
    }
}

static void pv_heads(const kw_attn_args *a, const float *sc, size_t C, int32_t n, int g0, int GN, int c0, int NC,
                     int f16) {
#define KW_PV(G_, N_) pv_block(a, sc, C, n, g0, c0, f16, G_, N_)
#define KW_PV_N(G_)                      \
    switch (NC) {                        \
    case 1: KW_PV(G_, 1); break;         \
    case 2: KW_PV(G_, 2); break;         \
    case 3: KW_PV(G_, 3); break;         \
    default: KW_PV(G_, 4); break;        \
    }
    switch (GN) {
    case 1: KW_PV_N(1) break;
    case 2: KW_PV_N(2) break;
    case 3: KW_PV_N(3) break;
    default: KW_PV_N(4) break;
    }
#undef KW_PV_N
#undef KW_PV
}

void kw_attn_decode_avx512(const kw_attn_args *a, float *scr, int32_t max_ctx) {
    const int G = a->G, hk = a->hk, hv = a->hv, nch = hk / 8;
    const int f16 = a->kv.type == KW_TYPE_F16;
    const int32_t i = a->i0, n = a->pos[i] + 1;
    const size_t C = (size_t)max_ctx;
    float *sc = scr;
    float scale = 1.0f / sqrtf((float)hk);
    tree_idx t;
    tree_init(&t);


    /* q2[g][chunk][16]: q's chunk in both halves, F16-rounded for an F16 cache */
    float q2[KW_DEC_MAX_QFLOATS];
    for (int g = 0; g < G; g++) {
        const float *q = a->q + ((size_t)i * (size_t)a->n_head + (size_t)(a->kvh * G + g)) * (size_t)hk;
        for (int c = 0; c < nch; c++) {
            __m256 v = _mm256_loadu_ps(q + 8 * c);
            if (f16) v = _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
            _mm256_storeu_ps(q2 + ((size_t)g * nch + c) * 16, v);
            _mm256_storeu_ps(q2 + ((size_t)g * nch + c) * 16 + 8, v);
        }
    }

    /* scores, 16 keys at a time (the last group padded with its first key) */
    const void *kr[16];
    for (int32_t j0 = 0; j0 < n; j0 += 16) {
        int cnt = n - j0 < 16 ? (int)(n - j0) : 16;
        int32_t bt = a->kv.block_tokens;
        if (j0 % bt + cnt <= bt) {   /* all in one block: rows are consecutive */
            const uint8_t *base = kw_attn_row(a, j0, 0);
            for (int k = 0; k < 16; k++) kr[k] = base + (size_t)(k < cnt ? k : 0) * a->kv.k_row_bytes;
        } else {
            for (int k = 0; k < 16; k++) kr[k] = kw_attn_row(a, j0 + (k < cnt ? k : 0), 0);
        }
        kw_attn_prefetch_rows(a, j0 + KW_ATTN_PF_KEYS, 16, n, 0);
        score16(a, kr, cnt, q2, &t, scale, sc, C, j0, f16);
    }
    softmax_heads(sc, C, G, n, f16);

    /* out = P . V in pieces of up to 4 heads x 64 values */
    for (int c0 = 0; c0 < hv; c0 += 64) {
        int NC = (hv - c0) / 16 < 4 ? (hv - c0) / 16 : 4;
        for (int g0 = 0; g0 < G; g0 += 4) pv_heads(a, sc, C, n, g0, G - g0 < 4 ? G - g0 : 4, c0, NC, f16);
    }
}
