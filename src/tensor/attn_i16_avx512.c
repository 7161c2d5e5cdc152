/* attn_i16_avx512.c - attention over an i16 or i8 KV cache with AVX-512
 * VNNI.
 *
 * Owns kw_attn_i16_avx512(): the queries of up to 16 consecutive batch
 * tokens x G heads (at most 16 queries) of one sequence that share KV head
 * kvh, over their causal ranges; the AVX-512 family's attention
 * (attn_avx512.c) uses it for prefill tiles and for decode (one token, the
 * G heads). It computes exactly what attn_i16.c
 * defines (and kw_attn_i16_ref computes), so results are bit-identical to
 * the portable path whatever the tile.
 *
 * Lanes are 16 keys. i16 K is stored in 16-slot groups of dimension pairs
 * (tensor.h), so one 64-byte load is one dimension pair of 16 keys and one
 * vpdpwssd with the query's pair broadcast adds 32 products of up to 16
 * queries' dots at once (the queries stay in registers as accumulators, K
 * is read once per tile); i8 K is stored as dimension quads, one vpdpbusd
 * per quad (dots16). Scores get the key scales and the per-query max; then
 * per chunk of 32 keys their exp2 (and the softmax's lane sums), the probabilities
 * times the V scales quantized to 13 bits, and V (stored as slot pairs
 * across dimensions; i8 widened to int16) accumulated with vpdpwssd for 4
 * queries x 64 dimensions from registers, each chunk's int32 sums scaled
 * into F32 with one FMA. The K regions and V chunks of the blocks ahead
 * are prefetched into L2, in address order, a row per loop step, in
 * prefill tiles and in decode (attn_rows.h says why decode does too). Decode
 * reads K and V with non-temporal loads (kw_x16_load), as the packed weights
 * are read: 1B Q4_0 decode at depth 4096 1.023x (bench/ab.sh); prefill
 * tiles read a block once per tile of queries and keep plain loads. */
#include "attn_rows.h"
#include "tensor/x16_avx512.h"   /* kw_dpbusd_bcst, kw_dpwssd, kw_x16_load */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#define KW_INLINE static inline __attribute__((always_inline))
#define KW_UNROLL _Pragma("GCC unroll 16")
#define NQ_MAX KW_ATTN_INT_MAX_Q   /* queries per call (kw_attn_i16_supported) */
#define CHUNK 32

/* kw_attn_exp2 (attn.h) in 16 lanes, vscalefps for p * 2^n */
KW_INLINE __m512 exp2_16(__m512 x) {
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(128.0f)), _mm512_set1_ps(-127.0f));
    __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(x, n);
    __m512 p;
    KW_ATTN_EXP2_POLY(p, f, _mm512_set1_ps, _mm512_fmadd_ps);
    return _mm512_scalef_ps(p, n);
}

void kw_attn_exp2_avx512(float *x, int32_t n) {
    int32_t j = 0;
    for (; j + 16 <= n; j += 16) _mm512_storeu_ps(x + j, exp2_16(_mm512_loadu_ps(x + j)));
    if (j < n) {
        __mmask16 m = (__mmask16)((1u << (n - j)) - 1);
        _mm512_mask_storeu_ps(x + j, m, exp2_16(_mm512_maskz_loadu_ps(m, x + j)));
    }
}

/* part[0..16) += the 16 float lanes l, which are cleared (the span flush of the definition) */
KW_INLINE void flush_lanes(double *part, __m512 *l) {
    _mm512_storeu_pd(part, _mm512_add_pd(_mm512_loadu_pd(part), _mm512_cvtps_pd(_mm512_castps512_ps256(*l))));
    _mm512_storeu_pd(part + 8, _mm512_add_pd(_mm512_loadu_pd(part + 8), _mm512_cvtps_pd(_mm512_extractf32x8_ps(*l, 1))));
    *l = _mm512_setzero_ps();
}

/* 16 dword lanes of V integer pairs from p: 64 bytes of int16 (i16), or 32
 * bytes of int8 widened to int16 (i8), so both types meet vpdpwssd the same. */
KW_INLINE __m512i ld_pairs(const uint8_t *p, const int w8, const int nt) {
    return w8 ? _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)p)) : kw_x16_load(p, nt);
}

/* Raw int32 dots of nq queries with 16 keys.
 * i16 (w8 = 0): kp points at dimension pair 0 of the 16 keys, qp[p * NQ_MAX
 * + q] is query q's pair p (pair-major: one pointer serves every query),
 * one vpdpwssd per pair and query.
 * i8 (w8 = 1): kp points at dimension quad 0 (int8; flipped to k + 128 to
 * be vpdpbusd's unsigned operand), qp[p * NQ_MAX + q] is query q's quad p
 * (4 int8, broadcast from memory), qc[q] = -128 * sum(q_int) starts the sum
 * and takes the offset back out: exact, as i16.
 * The group's rows (pairs or quads) are contiguous, 64 bytes each (tensor.h);
 * with pf, nrow lines from pf on are prefetched, one per step (the
 * caller's share of the block ahead). */
KW_INLINE void dots16(const uint8_t *kp, const uint32_t *qp, int nrow, const int32_t *qc,
                      const uint8_t *pf, const int nq, const int w8, const int nt, __m512i *out) {
    /* up to 8 queries, two sums per query over alternate rows: 4 queries
     * alone would be 4 dependent chains, bound by the instruction's latency */
    const int two = nq <= 8;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512i A[NQ_MAX], A2[8];
    KW_UNROLL for (int q = 0; q < nq; q++) A[q] = w8 ? _mm512_set1_epi32(qc[q]) : _mm512_setzero_si512();
    if (two) KW_UNROLL for (int q = 0; q < nq; q++) A2[q] = _mm512_setzero_si512();
    for (int p = 0; p < nrow; p++, qp += NQ_MAX) {
        if (pf) _mm_prefetch((const char *)(pf + (size_t)p * 64), _MM_HINT_T1);
        __m512i kz = kw_x16_load(kp + (size_t)p * 64, nt);
        if (w8) kz = _mm512_xor_si512(kz, flip);
        if (two && (p & 1)) {
            KW_UNROLL for (int q = 0; q < nq; q++)
                A2[q] = w8 ? kw_dpbusd_bcst(A2[q], kz, (const int32_t *)(qp + q))
                           : kw_dpwssd(A2[q], kz, _mm512_set1_epi32((int)qp[q]));
        } else {
            KW_UNROLL for (int q = 0; q < nq; q++)
                A[q] = w8 ? kw_dpbusd_bcst(A[q], kz, (const int32_t *)(qp + q))
                          : kw_dpwssd(A[q], kz, _mm512_set1_epi32((int)qp[q]));
        }
    }
    KW_UNROLL for (int q = 0; q < nq; q++) out[q] = two ? _mm512_add_epi32(A[q], A2[q]) : A[q];
}

static void dots16_n(const uint8_t *kp, const uint32_t *qp, int nrow, const int32_t *qc, const uint8_t *pf, int nq,
                     int w8, int nt, __m512i *out) {
    switch ((nq * 2 + w8) * 2 + nt) {
#define KW_DOTS_CASE(N) case N * 4: dots16(kp, qp, nrow, qc, pf, N, 0, 0, out); break;     \
                        case N * 4 + 1: dots16(kp, qp, nrow, qc, pf, N, 0, 1, out); break; \
                        case N * 4 + 2: dots16(kp, qp, nrow, qc, pf, N, 1, 0, out); break; \
                        case N * 4 + 3: dots16(kp, qp, nrow, qc, pf, N, 1, 1, out); break;
        KW_DOTS_CASE(1) KW_DOTS_CASE(2) KW_DOTS_CASE(3) KW_DOTS_CASE(4) KW_DOTS_CASE(5) KW_DOTS_CASE(6)
        KW_DOTS_CASE(7) KW_DOTS_CASE(8) KW_DOTS_CASE(9) KW_DOTS_CASE(10) KW_DOTS_CASE(11) KW_DOTS_CASE(12)
        KW_DOTS_CASE(13) KW_DOTS_CASE(14) KW_DOTS_CASE(15) KW_DOTS_CASE(16)
#undef KW_DOTS_CASE
    default: break;
    }
}

/* acc[q][d0 .. d0 + 16 nv) += sp[q] * (P_int[q] . V) over the chunk's npair
 * slot pairs for gq queries: vp points at the chunk's pair 0 (rowb bytes
 * per slot pair: hv pairs of integers), pp[q * 16 + k] is query q's
 * probability pair k. With pf, the chunk ahead's rows are prefetched, one
 * per step. */
KW_INLINE void pv_block(const uint8_t *vp, size_t rowb, int d0, int npair, const uint32_t *pp, const float *sp,
                        float *acc, int hv, const uint8_t *pf, const int gq, const int nv, const int w8, const int nt) {
    const size_t eb = w8 ? 2 : 4;   /* bytes of one dimension's slot pair */
    __m512i B[4][4];
    KW_UNROLL for (int q = 0; q < gq; q++)
        KW_UNROLL for (int v = 0; v < nv; v++) B[q][v] = _mm512_setzero_si512();
    for (int k = 0; k < npair; k++) {
        if (pf)
            for (size_t o = 0; o < rowb; o += 64) _mm_prefetch((const char *)(pf + (size_t)k * rowb + o), _MM_HINT_T1);
        const uint8_t *row = vp + (size_t)k * rowb + (size_t)d0 * eb;
        __m512i vz[4];
        KW_UNROLL for (int v = 0; v < nv; v++) vz[v] = ld_pairs(row + 16 * eb * (size_t)v, w8, nt);
        KW_UNROLL for (int q = 0; q < gq; q++) {
            __m512i pb = _mm512_set1_epi32((int)pp[q * 16 + k]);
            KW_UNROLL for (int v = 0; v < nv; v++) B[q][v] = kw_dpwssd(B[q][v], vz[v], pb);
        }
    }
    KW_UNROLL for (int q = 0; q < gq; q++) {
        __m512 s = _mm512_set1_ps(sp[q]);
        float *o = acc + (size_t)q * (size_t)hv + d0;
        KW_UNROLL for (int v = 0; v < nv; v++)
            _mm512_storeu_ps(o + 16 * v, _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(B[q][v]), _mm512_loadu_ps(o + 16 * v)));
    }
}

static void pv_block_n(const uint8_t *vp, size_t rowb, int d0, int npair, const uint32_t *pp, const float *sp,
                       float *acc, int hv, const uint8_t *pf, int gq, int nv, int w8, int nt) {
    switch (((gq * 4 + nv) * 2 + w8) * 2 + nt) {
#define KW_PV_CASE(G, V) case (G * 4 + V) * 4: pv_block(vp, rowb, d0, npair, pp, sp, acc, hv, pf, G, V, 0, 0); break;     \
                         case (G * 4 + V) * 4 + 1: pv_block(vp, rowb, d0, npair, pp, sp, acc, hv, pf, G, V, 0, 1); break; \
                         case (G * 4 + V) * 4 + 2: pv_block(vp, rowb, d0, npair, pp, sp, acc, hv, pf, G, V, 1, 0); break; \
                         case (G * 4 + V) * 4 + 3: pv_block(vp, rowb, d0, npair, pp, sp, acc, hv, pf, G, V, 1, 1); break;
        KW_PV_CASE(1, 1) KW_PV_CASE(1, 2) KW_PV_CASE(1, 3) KW_PV_CASE(1, 4)
        KW_PV_CASE(2, 1) KW_PV_CASE(2, 2) KW_PV_CASE(2, 3) KW_PV_CASE(2, 4)
        KW_PV_CASE(3, 1) KW_PV_CASE(3, 2) KW_PV_CASE(3, 3) KW_PV_CASE(3, 4)
        KW_PV_CASE(4, 1) KW_PV_CASE(4, 2) KW_PV_CASE(4, 3) KW_PV_CASE(4, 4)
#undef KW_PV_CASE
    default: break;
    }
}

static inline __mmask16 lanes_below(int32_t j, int32_t n) {
    int32_t k = n - j;
    return k >= 16 ? (__mmask16)0xFFFF : k <= 0 ? (__mmask16)0 : (__mmask16)((1u << k) - 1);
}

void kw_attn_i16_avx512(const kw_attn_args *a, float *scr, int32_t max_ctx) {
    const int G = a->G, hk = a->hk, hv = a->hv, hp = hk / 2, nq = a->n_tok * G, bt = a->kv.block_tokens;
    const int w8 = a->kv.type == KW_TYPE_KV_I8;
    const int nt = a->n_tok == 1;   /* decode: K and V lines read once, non-temporally (the pool's blocks,
                                     * their K groups and V rows are 64-byte aligned) */
    const size_t eb = w8 ? 1 : 2;   /* bytes per integer */
    /* K: 16-slot groups of nrow rows (dimension pairs (i16) or quads (i8)), 64 bytes each; V rows: slot pairs */
    const size_t vrowb = (size_t)hv * 2 * eb;
    const int nrow = w8 ? hk / 4 : hp;
    int32_t qc[NQ_MAX];
    const size_t C = (size_t)max_ctx;
    float *S = scr;                                          /* [nq][C] scores, then exp */
    uint32_t *qp = (uint32_t *)(S + (size_t)nq * C);         /* [nrow][16] query pairs or quads, row-major */
    float *acc = (float *)(qp + (size_t)NQ_MAX * (size_t)hp);    /* [nq][hv] */
    uint32_t *pp = (uint32_t *)(acc + (size_t)nq * (size_t)hv);   /* [nq][16] probability pairs */
    float c[NQ_MAX], sp[NQ_MAX];
    int32_t nl[NQ_MAX], n_max = 0;
    __m512 mx[NQ_MAX];

    for (int32_t j = -KW_ATTN_I16_PF_KEYS; j < 0; j += 16) kw_attn_i16_prefetch_k(a, j, a->pos[a->i0 + a->n_tok - 1] + 1);
    for (int q = 0; q < nq; q++) {
        int t = q / G, h = a->kvh * G + q % G;
        nl[q] = a->pos[a->i0 + t] + 1;
        if (nl[q] > n_max) n_max = nl[q];
        int16_t qi[128];   /* hk <= 128 */
        c[q] = kw_attn_i16_quant_q(a->q + ((size_t)(a->i0 + t) * (size_t)a->n_head + (size_t)h) * (size_t)hk, hk, w8,
                                   qi);
        int32_t qsum = 0;
        for (int p = 0; p < nrow; p++) {
            uint32_t w = 0;
            if (w8) {   /* 4 int8 of |q_int| <= 127 */
                for (int t4 = 0; t4 < 4; t4++) {
                    w |= (uint32_t)(uint8_t)(int8_t)qi[4 * p + t4] << (8 * t4);
                    qsum += qi[4 * p + t4];
                }
            } else
                w = (uint32_t)(uint16_t)qi[2 * p] | (uint32_t)(uint16_t)qi[2 * p + 1] << 16;
            qp[(size_t)p * NQ_MAX + q] = w;
        }
        qc[q] = -128 * qsum;
        mx[q] = _mm512_set1_ps(-INFINITY);
    }

    /* scores and their running maxima; where the block KW_ATTN_I16_PF_KEYS
     * keys ahead is prefetched (kw_attn_i16_k_block_ahead: bt / 16 groups
     * of nrow lines), each 16-key group asks for its counterpart's nrow
     * lines, one per step of the dot loop (asking for the whole region from
     * a block's first group, 2 lines a step, left perf's samples on those
     * prefetches; spread, bench_attn depth 4096 i16 took 0.94-0.97x the
     * time on two threads, 0.95x on one) */
    void *kr = NULL;
    const uint8_t *pfk = NULL;
    for (int32_t j = 0; j < n_max; j += 16) {   /* bt % 32 == 0: the block's region is looked up at its first key */
        int32_t s0 = j % bt, jf = j + KW_ATTN_I16_PF_KEYS;
        if (s0 == 0) kr = kw_attn_region(a, j / bt, 0);
        if (jf % bt == 0) pfk = kw_attn_i16_k_block_ahead(a, j, n_max);   /* NULL past the context */
        const uint8_t *pf = pfk && jf < n_max ? pfk + kw_kv_int_k_group(hk, jf % bt, w8) : NULL;
        __m512i d[NQ_MAX];
        dots16_n((const uint8_t *)kw_kv_i16_ints(kr, bt) + kw_kv_int_k_group(hk, s0, w8), qp, nrow, qc, pf, nq, w8, nt, d);
        __m512 sk = _mm512_loadu_ps(kw_kv_i16_scales(kr) + s0);
        for (int q = 0; q < nq; q++) {
            __mmask16 m = lanes_below(j, nl[q]);
            __m512 s = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(d[q]), sk), _mm512_set1_ps(c[q]));
            _mm512_mask_storeu_ps(S + (size_t)q * C + j, m, s);
            mx[q] = _mm512_mask_max_ps(mx[q], m, mx[q], s);
        }
    }

    /* weighted sum of V, chunk by chunk; each chunk's exp (and its share of
     * the lane sums per query) is computed just before its V pass, so the V
     * lines prefetched meanwhile keep DRAM busy (a separate exp pass left it
     * idle) */
    __m512 mb[NQ_MAX], lane[NQ_MAX];
    double part[NQ_MAX][16];
    for (int q = 0; q < nq; q++) {
        mb[q] = _mm512_set1_ps(_mm512_reduce_max_ps(mx[q]));
        lane[q] = _mm512_setzero_ps();
        memset(part[q], 0, sizeof part[q]);
    }
    memset(acc, 0, sizeof(float) * (size_t)nq * (size_t)hv);
    kw_attn_i16_prefetch_v(a, -KW_ATTN_I16_PF_KEYS, CHUNK, n_max);   /* the chunks before the first prefetch reaches */
    kw_attn_i16_prefetch_v(a, CHUNK - KW_ATTN_I16_PF_KEYS, CHUNK, n_max);
    for (int32_t j0 = 0; j0 < n_max; j0 += CHUNK) {
        int32_t s0 = j0 % bt;
        void *vr = kw_attn_region(a, j0 / bt, 1);
        const uint8_t *pfv = kw_attn_i16_v_ahead(a, j0, CHUNK, n_max);
        const float *sv = kw_kv_i16_scales(vr) + s0;
        __m512 sv0 = _mm512_loadu_ps(sv), sv1 = _mm512_loadu_ps(sv + 16);
        for (int q = 0; q < nq; q++) {
            const float *s = S + (size_t)q * C + j0;
            __mmask16 m0 = lanes_below(j0, nl[q]), m1 = lanes_below(j0 + 16, nl[q]);
            __m512 p0 = _mm512_setzero_ps(), p1 = p0;
            float pm = 0.0f;   /* stays 0 when the query's range ended before the chunk */
            if (m0) {
                __m512 e0 = exp2_16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m0, s), mb[q]));
                __m512 e1 = exp2_16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m1, s + 16), mb[q]));
                /* lane l: key j0 + l, then j0 + 16 + l (keys past the query's range add 0) */
                lane[q] = _mm512_add_ps(_mm512_add_ps(lane[q], _mm512_maskz_mov_ps(m0, e0)), _mm512_maskz_mov_ps(m1, e1));
                p0 = _mm512_maskz_mul_ps(m0, e0, sv0);
                p1 = _mm512_maskz_mul_ps(m1, e1, sv1);
                pm = _mm512_reduce_max_ps(_mm512_max_ps(p0, p1));
            }
            if (!(pm > 0.0f)) {
                sp[q] = 0.0f;
                memset(pp + (size_t)q * 16, 0, 16 * sizeof(uint32_t));
                continue;
            }
            __m512 pinv = _mm512_set1_ps((float)KW_KV_I16_VMAX / pm);   /* one scalar division, the same bits */
            __m256i i0 = _mm512_cvtepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(p0, pinv)));
            __m256i i1 = _mm512_cvtepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(p1, pinv)));
            _mm256_storeu_si256((__m256i *)(pp + (size_t)q * 16), i0);
            _mm256_storeu_si256((__m256i *)(pp + (size_t)q * 16 + 8), i1);
            sp[q] = pm / (float)KW_KV_I16_VMAX;
        }
        if ((j0 + CHUNK) % KW_ATTN_SPAN == 0)   /* key j0 + 31 ended a span */
            for (int q = 0; q < nq; q++) flush_lanes(part[q], &lane[q]);
        int32_t npair = (n_max - j0 + 1) / 2 < CHUNK / 2 ? (n_max - j0 + 1) / 2 : CHUNK / 2;
        const uint8_t *vp = (const uint8_t *)kw_kv_i16_ints(vr, bt) + (size_t)(s0 / 2) * vrowb;
        for (int q0 = 0; q0 < nq; q0 += 4) {
            int gq = nq - q0 < 4 ? nq - q0 : 4;
            for (int d0 = 0; d0 < hv; d0 += 64) {
                int nv = (hv - d0) / 16 < 4 ? (hv - d0) / 16 : 4;
                pv_block_n(vp, vrowb, d0, npair, pp + (size_t)q0 * 16, sp + q0, acc + (size_t)q0 * (size_t)hv, hv,
                           q0 == 0 && d0 == 0 ? pfv : NULL, gq, nv, w8, nt);
            }
        }
    }

    for (int q = 0; q < nq; q++) {
        int t = q / G, h = a->kvh * G + q % G;
        float lf[16];
        _mm512_storeu_ps(lf, lane[q]);
        float inv = kw_attn_i16_sum_end(lf, part[q]);
        float *o = a->out + ((size_t)(a->i0 + t) * (size_t)a->n_head + (size_t)h) * (size_t)hv;
        const float *r = acc + (size_t)q * (size_t)hv;
        __m512 iv = _mm512_set1_ps(inv);
        for (int d = 0; d < hv; d += 16) _mm512_storeu_ps(o + d, _mm512_mul_ps(_mm512_loadu_ps(r + d), iv));
    }
}
