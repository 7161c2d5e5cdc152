/* attn_i16_avx2.c - attention over an i16 or i8 KV cache with AVX2 + FMA
 * (no AVX-512).
 *
 * Owns kw_attn_i16_avx2(): the same work as kw_attn_i16_avx512() (the
 * queries of up to 16 consecutive batch tokens x G heads, at most 16
 * queries, of one sequence that share KV head kvh, over their causal
 * ranges) for CPUs without AVX-512 VNNI: the AVX2 family's attention
 * (attn_avx2.c) uses it for prefill tiles and decode. It computes exactly
 * what attn_i16.c defines, so results are bit-identical to kw_attn_i16_ref
 * (and to the VNNI kernel) on every machine: the exp2 is the definition's
 * (kw_attn_exp2) in 8 lanes, exp2_8 below, every float step keeps
 * the definition's order, and the int16 pair products go through vpmaddwd
 * + vpaddd, which give the same exact int32 sums as any other order.
 *
 * Lanes are 8 keys; a group of 16 keys of one dimension pair (64 bytes of
 * K) is two ymm. AVX2 has 16 ymm registers, so the queries are taken in
 * blocks of at most 6 (12 accumulators, the two K vectors, the broadcast
 * query pair and one product) for each group of 16 keys, K of the group
 * staying in L1 between blocks. Per chunk of 32 keys the probabilities are
 * quantized to 13 bits and V (slot pairs across dimensions) accumulated for
 * 2 queries x 32 dimensions at a time (8 accumulators, each V vector
 * loaded once for both; 3 x 32 spilled), each chunk's int32 sums scaled
 * into F32 with one FMA. The loops over constant counts are instantiated
 * through switches (dots16_n, pv_block_n) so that the accumulators live in
 * registers. i8 (tensor.h): K quads of 8 keys widened to int16 four keys at a
 * time, vpmaddwd against the query's quad and vphaddd (dots16); V widened
 * to int16 at its load, the rest as i16.
 * The softmax is one pass per query over its scores: subtract the max,
 * exp2_8, store, and add to the 16 float lanes of the definition's sum
 * (keys 0-7 of each 16 in one accumulator, 8-15 in the other), flushed
 * into the double parts every KW_ATTN_SPAN keys. */
#include "attn_rows.h"
#include <immintrin.h>
#include <math.h>
#include <string.h>

#define KW_INLINE static inline __attribute__((always_inline))
#define KW_UNROLL _Pragma("GCC unroll 16")
/* An empty asm that takes and returns v in a register: keeps GCC from
 * computing a new register per accumulator update and copying it back */
#define KW_IN_REG(v) __asm__("" : "+x"(v))
#define NQ_MAX KW_ATTN_INT_MAX_Q   /* queries per call (kw_attn_i16_supported) */
#define DQ_MAX 6       /* queries per pass over a group of 16 keys */
#define PV_Q 2         /* queries per V block */
#define PV_V 4         /* ymm (8 dimensions each) per V block */
#define CHUNK 32

/* 8 dword lanes of integer pairs from p: 32 bytes of int16 (i16), or 16
 * bytes of int8 widened to int16 (i8). */
KW_INLINE __m256i ld_pairs(const uint8_t *p, const int w8) {
    return w8 ? _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p)) : _mm256_loadu_si256((const __m256i *)p);
}

/* Raw int32 dots of nq queries with 16 keys; out[2q] keys 0-7, out[2q + 1]
 * keys 8-15. Rows (dimension pairs for i16, quads for i8) are contiguous,
 * 64 bytes each, from kp (tensor.h). qp + q * hp holds query q's integers as
 * int16.
 * i16: one vpmaddwd per pair of 8 keys with the query's pair broadcast.
 * i8: 8 keys of one quad (32 bytes) widened to int16 in two halves of 4
 * keys, each vpmaddwd against the query's quad (4 int16, broadcast) gives
 * per key two dwords, which vphaddd adds (lanes come out as keys 0 1 4 5 |
 * 2 3 6 7 and are put in order once at the end). */
KW_INLINE void dots16(const uint8_t *kp, const uint32_t *qp, int hp, const int nq, const int w8,
                      __m256i *out) {
    __m256i A[DQ_MAX][2];
    KW_UNROLL for (int q = 0; q < nq; q++) A[q][0] = A[q][1] = _mm256_setzero_si256();
    const int nrow = w8 ? hp / 2 : hp;
    for (int p = 0; p < nrow; p++) {
        const uint8_t *kr = kp + (size_t)p * 64;
        if (w8) {
            __m256i k[4];
            KW_UNROLL for (int i = 0; i < 4; i++) k[i] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(kr + 16 * i)));
            KW_UNROLL for (int q = 0; q < nq; q++) {
                int64_t q4;
                memcpy(&q4, (const int16_t *)(qp + (size_t)q * hp) + 4 * p, sizeof q4);
                __m256i qb = _mm256_set1_epi64x(q4);
                A[q][0] = _mm256_add_epi32(A[q][0], _mm256_hadd_epi32(_mm256_madd_epi16(k[0], qb), _mm256_madd_epi16(k[1], qb)));
                A[q][1] = _mm256_add_epi32(A[q][1], _mm256_hadd_epi32(_mm256_madd_epi16(k[2], qb), _mm256_madd_epi16(k[3], qb)));
            }
            continue;
        }
        __m256i k0 = _mm256_loadu_si256((const __m256i *)kr), k1 = _mm256_loadu_si256((const __m256i *)(kr + 32));
        KW_UNROLL for (int q = 0; q < nq; q++) {
            __m256i qb = _mm256_set1_epi32((int)qp[(size_t)q * hp + p]);
            A[q][0] = _mm256_add_epi32(A[q][0], _mm256_madd_epi16(k0, qb));
            A[q][1] = _mm256_add_epi32(A[q][1], _mm256_madd_epi16(k1, qb));
        }
    }
    if (w8) {   /* lanes 0 1 4 5 2 3 6 7 -> keys in order */
        const __m256i ord = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
        KW_UNROLL for (int q = 0; q < nq; q++) {
            A[q][0] = _mm256_permutevar8x32_epi32(A[q][0], ord);
            A[q][1] = _mm256_permutevar8x32_epi32(A[q][1], ord);
        }
    }
    KW_UNROLL for (int q = 0; q < nq; q++) { out[2 * q] = A[q][0]; out[2 * q + 1] = A[q][1]; }
}

static void dots16_n(const uint8_t *kp, const uint32_t *qp, int hp, int nq, int w8, __m256i *out) {
    switch (nq * 2 + w8) {
#define KW_DOTS_CASE(N) case N * 2: dots16(kp, qp, hp, N, 0, out); break; \
                        case N * 2 + 1: dots16(kp, qp, hp, N, 1, out); break;
        KW_DOTS_CASE(1) KW_DOTS_CASE(2) KW_DOTS_CASE(3) KW_DOTS_CASE(4) KW_DOTS_CASE(5) KW_DOTS_CASE(6)
#undef KW_DOTS_CASE
    default: break;
    }
}

/* acc[q][d0 .. d0 + 8 nv) += sp[q] * (P_int[q] . V) over the chunk's npair
 * slot pairs for gq queries: vp points at the chunk's pair 0 (rowb bytes
 * per slot pair: hv pairs of integers), pp[q * 16 + k] is query q's
 * probability pair k. */
KW_INLINE void pv_block(const uint8_t *vp, size_t rowb, int hv, int d0, int npair, const uint32_t *pp, const float *sp,
                        float *acc, const int gq, const int nv, const int w8) {
    const size_t eb = w8 ? 2 : 4;   /* bytes of one dimension's slot pair */
    __m256i B[PV_Q][PV_V];
    KW_UNROLL for (int q = 0; q < gq; q++)
        KW_UNROLL for (int v = 0; v < nv; v++) B[q][v] = _mm256_setzero_si256();
    for (int k = 0; k < npair; k++) {
        const uint8_t *row = vp + (size_t)k * rowb + (size_t)d0 * eb;
        __m256i pb[PV_Q];
        KW_UNROLL for (int q = 0; q < gq; q++) pb[q] = _mm256_set1_epi32((int)pp[q * 16 + k]);
        KW_UNROLL for (int v = 0; v < nv; v++) {
            __m256i x = ld_pairs(row + 8 * eb * (size_t)v, w8);
            KW_UNROLL for (int q = 0; q < gq; q++) {
                B[q][v] = _mm256_add_epi32(B[q][v], _mm256_madd_epi16(x, pb[q]));
                KW_IN_REG(B[q][v]);
            }
        }
    }
    KW_UNROLL for (int q = 0; q < gq; q++) {
        __m256 s = _mm256_set1_ps(sp[q]);
        float *o = acc + (size_t)q * (size_t)hv + d0;
        KW_UNROLL for (int v = 0; v < nv; v++)
            _mm256_storeu_ps(o + 8 * v, _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(B[q][v]), _mm256_loadu_ps(o + 8 * v)));
    }
}

static void pv_block_n(const uint8_t *vp, size_t rowb, int hv, int d0, int npair, const uint32_t *pp, const float *sp,
                       float *acc, int gq, int nv, int w8) {
    switch ((gq * 4 + nv) * 2 + w8) {
#define KW_PV_CASE(G, V) case (G * 4 + V) * 2: pv_block(vp, rowb, hv, d0, npair, pp, sp, acc, G, V, 0); break; \
                         case (G * 4 + V) * 2 + 1: pv_block(vp, rowb, hv, d0, npair, pp, sp, acc, G, V, 1); break;
        KW_PV_CASE(1, 1) KW_PV_CASE(1, 2) KW_PV_CASE(1, 3) KW_PV_CASE(1, 4)
        KW_PV_CASE(2, 1) KW_PV_CASE(2, 2) KW_PV_CASE(2, 3) KW_PV_CASE(2, 4)
#undef KW_PV_CASE
    default: break;
    }
}

/* All-ones in the lanes i (0..7) with base + i < k. */
static inline __m256i lanes_below(int32_t base, int32_t k) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k - base), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ps(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

/* Stores the 16 scores of keys j.. of one query (those below its n) and
 * folds them into its running maximum. */
static inline void store_scores(float *s, int32_t j, int32_t n, __m256 s0, __m256 s1, __m256 *mx) {
    int32_t k = n - j;
    if (k >= 16) {
        _mm256_storeu_ps(s + j, s0);
        _mm256_storeu_ps(s + j + 8, s1);
        *mx = _mm256_max_ps(_mm256_max_ps(*mx, s0), s1);
        return;
    }
    if (k <= 0) return;
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256i m0 = lanes_below(0, k), m1 = lanes_below(8, k);
    _mm256_maskstore_ps(s + j, m0, s0);
    _mm256_maskstore_ps(s + j + 8, m1, s1);
    *mx = _mm256_max_ps(*mx, _mm256_blendv_ps(ninf, s0, _mm256_castsi256_ps(m0)));
    *mx = _mm256_max_ps(*mx, _mm256_blendv_ps(ninf, s1, _mm256_castsi256_ps(m1)));
}

/* The float 2^k of each lane (-126 <= k <= 127): k + 127 in the exponent bits. */
static inline __m256 pow2_normal8(__m256i k) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
}

/* kw_attn_exp2 (attn.h) in 8 lanes, the same operations in the
 * same order. vmin/vmaxps keep their operand rule (the second when one is
 * NaN) and vroundps with nearest-even rounds as vroundscaleps does. AVX2 has
 * no vscalefps: p * 2^n (-127 <= n <= 128) is taken as two products by
 * powers of two that are normal floats, n1 = n >> 1 and n2 = n - n1 (both
 * within [-64, 64]); p * 2^n1 is a normal float, so exact, and only the
 * second product rounds, as vscalefps rounds once (subnormal or inf). */
static inline __m256 exp2_8(__m256 x) {
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(128.0f)), _mm256_set1_ps(-127.0f));
    __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_sub_ps(x, n);
    __m256 p;
    KW_ATTN_EXP2_POLY(p, f, _mm256_set1_ps, _mm256_fmadd_ps);
    __m256i ni = _mm256_cvtps_epi32(n), n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    return _mm256_mul_ps(_mm256_mul_ps(p, pow2_normal8(n1)), pow2_normal8(n2));
}

void kw_attn_exp2_avx2(float *x, int32_t n) {
    int32_t j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(x + j, exp2_8(_mm256_loadu_ps(x + j)));
    if (j < n) {
        __m256i m = lanes_below(j, n);
        _mm256_maskstore_ps(x + j, m, exp2_8(_mm256_maskload_ps(x + j, m)));
    }
}

/* part[0..8) += the 8 float lanes l (cleared): the span flush of the definition */
static inline void flush8(double *part, __m256 *l) {
    _mm256_storeu_pd(part, _mm256_add_pd(_mm256_loadu_pd(part), _mm256_cvtps_pd(_mm256_castps256_ps128(*l))));
    _mm256_storeu_pd(part + 4, _mm256_add_pd(_mm256_loadu_pd(part + 4), _mm256_cvtps_pd(_mm256_extractf128_ps(*l, 1))));
    *l = _mm256_setzero_ps();
}

/* s[0..n) = exp2(s - m) (exp2_8), and the definition's sum (lanes of 16
 * keys, flushed into double parts every KW_ATTN_SPAN keys); returns the
 * inverse sum. */
static float exp_and_sum(float *s, int32_t n, float m) {
    const __m256 mv = _mm256_set1_ps(m);
    __m256 l0 = _mm256_setzero_ps(), l1 = l0;   /* lanes 0-7, 8-15 */
    double part[16] = {0};
    int32_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m256 e0 = exp2_8(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv));
        __m256 e1 = exp2_8(_mm256_sub_ps(_mm256_loadu_ps(s + j + 8), mv));
        _mm256_storeu_ps(s + j, e0);
        _mm256_storeu_ps(s + j + 8, e1);
        l0 = _mm256_add_ps(l0, e0);
        l1 = _mm256_add_ps(l1, e1);
        if ((j + 16) % KW_ATTN_SPAN == 0) {   /* key j + 15 ended a span */
            flush8(part, &l0);
            flush8(part + 8, &l1);
        }
    }
    float lane[16];
    _mm256_storeu_ps(lane, l0);
    _mm256_storeu_ps(lane + 8, l1);
    for (int32_t t = j; t < n; t++) s[t] -= m;
    kw_attn_exp2_avx2(s + j, n - j);
    kw_attn_i16_sum_add(lane, part, s + j, j, n);
    return kw_attn_i16_sum_end(lane, part);
}

/* One query's chunk of 32 probabilities e[0..32) (k of them valid) times
 * the V scales sv, quantized against their max into pp[0..16) pairs;
 * returns the chunk's scale pm / 8191, 0 (pairs zero) when pm is not > 0. */
static float quant_chunk(const float *e, int32_t k, const float *sv, uint32_t *pp) {
    __m256 p[4];
    if (k >= CHUNK) {
        KW_UNROLL for (int i = 0; i < 4; i++) p[i] = _mm256_mul_ps(_mm256_loadu_ps(e + 8 * i), _mm256_loadu_ps(sv + 8 * i));
    } else {
        KW_UNROLL for (int i = 0; i < 4; i++) {
            __m256i m = lanes_below(8 * i, k);
            __m256 x = _mm256_mul_ps(_mm256_maskload_ps(e + 8 * i, m), _mm256_loadu_ps(sv + 8 * i));
            p[i] = _mm256_and_ps(x, _mm256_castsi256_ps(m));   /* an unwritten slot's scale may be NaN */
        }
    }
    float pm = k > 0 ? hmax8(_mm256_max_ps(_mm256_max_ps(p[0], p[1]), _mm256_max_ps(p[2], p[3]))) : 0.0f;
    if (!(pm > 0.0f)) {
        memset(pp, 0, 16 * sizeof(uint32_t));
        return 0.0f;
    }
    __m256 pinv = _mm256_set1_ps((float)KW_KV_I16_VMAX / pm);
    __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(p[0], pinv)), i1 = _mm256_cvtps_epi32(_mm256_mul_ps(p[1], pinv));
    __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(p[2], pinv)), i3 = _mm256_cvtps_epi32(_mm256_mul_ps(p[3], pinv));
    /* packs works per 128-bit half: [i0 0-3, i1 0-3, i0 4-7, i1 4-7]; the permute puts slots in order */
    _mm256_storeu_si256((__m256i *)pp, _mm256_permute4x64_epi64(_mm256_packs_epi32(i0, i1), 0xD8));
    _mm256_storeu_si256((__m256i *)(pp + 8), _mm256_permute4x64_epi64(_mm256_packs_epi32(i2, i3), 0xD8));
    return pm / (float)KW_KV_I16_VMAX;
}

void kw_attn_i16_avx2(const kw_attn_args *a, float *scr, int32_t max_ctx) {
    const int G = a->G, hk = a->hk, hv = a->hv, hp = hk / 2, nq = a->n_tok * G, bt = a->kv.block_tokens;
    const int w8 = a->kv.type == KW_TYPE_KV_I8;
    const size_t eb = w8 ? 1 : 2;   /* bytes per integer */
    /* K: 16-slot groups of rows (dimension pairs (i16) or quads (i8)), 64 bytes each; V rows: slot pairs */
    const size_t vrowb = (size_t)hv * 2 * eb;
    const size_t C = (size_t)max_ctx;
    float *S = scr;                                          /* [nq][C] scores, then exp */
    uint32_t *qp = (uint32_t *)(S + (size_t)nq * C);         /* [nq][hp] query pairs */
    float *acc = (float *)(qp + (size_t)nq * (size_t)hp);    /* [nq][hv] */
    uint32_t *pp = (uint32_t *)(acc + (size_t)nq * (size_t)hv);   /* [nq][16] probability pairs */
    float c[NQ_MAX], inv[NQ_MAX], sp[NQ_MAX];
    int32_t nl[NQ_MAX], n_max = 0;
    __m256 mx[NQ_MAX];

    for (int q = 0; q < nq; q++) {
        int t = q / G, h = a->kvh * G + q % G;
        nl[q] = a->pos[a->i0 + t] + 1;
        if (nl[q] > n_max) n_max = nl[q];
        c[q] = kw_attn_i16_quant_q(a->q + ((size_t)(a->i0 + t) * (size_t)a->n_head + (size_t)h) * (size_t)hk, hk, w8,
                                   (int16_t *)(qp + (size_t)q * (size_t)hp));
        mx[q] = _mm256_set1_ps(-INFINITY);
    }

    /* scores and their running maxima, the queries in nb blocks of at most DQ_MAX */
    const int nb = (nq + DQ_MAX - 1) / DQ_MAX;
    for (int32_t j = 0; j < n_max; j += 16) {
        int32_t s0 = j % bt;
        void *kr = kw_attn_region(a, j / bt, 0);
        kw_attn_i16_prefetch_k(a, j, n_max);
        const uint8_t *kp = (const uint8_t *)kw_kv_i16_ints(kr, bt) + kw_kv_int_k_group(hk, s0, w8);
        const float *sk = kw_kv_i16_scales(kr) + s0;
        __m256 sk0 = _mm256_loadu_ps(sk), sk1 = _mm256_loadu_ps(sk + 8);
        for (int b = 0; b < nb; b++) {
            int q0 = b * nq / nb, q1 = (b + 1) * nq / nb;
            __m256i d[2 * DQ_MAX];
            dots16_n(kp, qp + (size_t)q0 * (size_t)hp, hp, q1 - q0, w8, d);
            for (int q = q0; q < q1; q++) {
                __m256 cq = _mm256_set1_ps(c[q]);
                __m256 x0 = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(d[2 * (q - q0)]), sk0), cq);
                __m256 x1 = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(d[2 * (q - q0) + 1]), sk1), cq);
                store_scores(S + (size_t)q * C, j, nl[q], x0, x1, &mx[q]);
            }
        }
    }

    for (int q = 0; q < nq; q++) inv[q] = exp_and_sum(S + (size_t)q * C, nl[q], hmax8(mx[q]));

    /* weighted sum of V, chunk by chunk */
    memset(acc, 0, sizeof(float) * (size_t)nq * (size_t)hv);
    for (int32_t j0 = 0; j0 < n_max; j0 += CHUNK) {
        int32_t s0 = j0 % bt;
        void *vr = kw_attn_region(a, j0 / bt, 1);   /* bt % 32 == 0: one block */
        kw_attn_i16_prefetch_v(a, j0, CHUNK, n_max);
        const float *sv = kw_kv_i16_scales(vr) + s0;
        for (int q = 0; q < nq; q++)
            sp[q] = quant_chunk(S + (size_t)q * C + j0, nl[q] - j0, sv, pp + (size_t)q * 16);
        int32_t npair = (n_max - j0 + 1) / 2 < CHUNK / 2 ? (n_max - j0 + 1) / 2 : CHUNK / 2;
        const uint8_t *vp = (const uint8_t *)kw_kv_i16_ints(vr, bt) + (size_t)(s0 / 2) * vrowb;
        for (int q0 = 0; q0 < nq; q0 += PV_Q) {
            int gq = nq - q0 < PV_Q ? nq - q0 : PV_Q;
            for (int d0 = 0; d0 < hv; d0 += 8 * PV_V) {
                int nv = (hv - d0) / 8 < PV_V ? (hv - d0) / 8 : PV_V;
                pv_block_n(vp, vrowb, hv, d0, npair, pp + (size_t)q0 * 16, sp + q0, acc + (size_t)q0 * (size_t)hv, gq, nv,
                           w8);
            }
        }
    }

    for (int q = 0; q < nq; q++) {
        int t = q / G, h = a->kvh * G + q % G;
        float *o = a->out + ((size_t)(a->i0 + t) * (size_t)a->n_head + (size_t)h) * (size_t)hv;
        const float *r = acc + (size_t)q * (size_t)hv;
        __m256 iv = _mm256_set1_ps(inv[q]);
        for (int d = 0; d < hv; d += 8) _mm256_storeu_ps(o + d, _mm256_mul_ps(_mm256_loadu_ps(r + d), iv));
    }
}
