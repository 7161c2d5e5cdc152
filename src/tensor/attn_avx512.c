/* attn_avx512.c - prefill attention in tiles of up to 16 queries (AVX-512F).
 *
 * Owns kw_attn_tile_avx512(): causal GQA attention of the queries of a few
 * consecutive batch tokens of one sequence that share one KV head (token t,
 * group head g -> lane t*G + g). The queries are transposed once per tile
 * so that each K row is read once for all 16 lanes: scores of a key for the
 * 16 queries are 16-lane FMAs with that key's values broadcast. Then the
 * usual two passes: softmax per query over its own causal range, and the
 * weighted sum of V rows.
 *
 * The arithmetic of every output is the one the AVX-512 family's per-token
 * path performs (attn.c with attn_avx2.c's rows and act_avx512.c's exp), so
 * results are bit-identical whichever path or tile a token falls in:
 *   - q . k: 8 partial sums (element d goes to sum d % 8, FMA in order of d),
 *     combined as ((s0+s4)+(s2+s6)) + ((s1+s5)+(s3+s7)), times the scale;
 *   - softmax: max, exp(s - max) (exp_avx512.h), sum in double, times (float)(1/sum);
 *     an F16 cache rounds q and the probabilities to F16 (as llama.cpp);
 *   - out = sum over keys in order of p * v, one FMA per element.
 * Also the AVX-512 set's attention (kw_attn_kernels_avx512, at the end).
 * Compiled with AVX-512F flags. */
#include "tensor/kernels.h"
#include "attn_rows.h"
#include "exp_avx512.h"
#include <immintrin.h>
#include <math.h>
#include <string.h>

#define KW_ATT_LANES KW_ATTN_TILE_LANES
#define KW_ATT_VCHUNK KW_ATTN_TILE_VCHUNK   /* V rows converted to F32 at a time */

/* Row j of this head's K or V (the walk's) as n F32 values: in place for
 * an F32 cache, else converted from F16 into buf. */
static const float *row_f32(kw_attn_walk *w, int32_t j, int n, float *buf) {
    const void *p = kw_attn_walk_row(w, j);
    if (w->a->kv.type == KW_TYPE_F32) return p;
    const uint16_t *h = p;
    for (int d = 0; d < n; d += 16)
        _mm512_storeu_ps(buf + d, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + d))));
    return buf;
}

/* Row pointers of V rows [j0, j1) as F32 (converted into vbuf for an F16 cache). */
static void v_rows_f32(kw_attn_walk *vw, int32_t j0, int32_t j1, float *vbuf, const float **rows) {
    int hv = vw->a->hv;
    for (int32_t j = j0; j < j1; j++) rows[j - j0] = row_f32(vw, j, hv, vbuf + (size_t)(j - j0) * (size_t)hv);
}

/* The 8-partial-sum tree of the per-token dot product (attn_avx2.c hsum8). */
static inline __m512 tree8(const __m512 s[8]) {
    return _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(s[0], s[4]), _mm512_add_ps(s[2], s[6])),
                         _mm512_add_ps(_mm512_add_ps(s[1], s[5]), _mm512_add_ps(s[3], s[7])));
}

/* scores of keys k0 and k1 (k1 may be NULL) for the 16 lanes of qt[hk][16]. */
static void score_keys(const float *qt, const float *k0, const float *k1, int hk, float scale, float *s0, float *s1) {
    __m512 a0[8], a1[8];
    for (int l = 0; l < 8; l++) { a0[l] = _mm512_setzero_ps(); a1[l] = _mm512_setzero_ps(); }
    if (k1) {
        for (int d = 0; d < hk; d += 8) {
            __m512 q[8];
            _Pragma("GCC unroll 8") for (int l = 0; l < 8; l++) q[l] = _mm512_loadu_ps(qt + (size_t)(d + l) * KW_ATT_LANES);
            __asm__("" : "+v"(q[0]), "+v"(q[1]), "+v"(q[2]), "+v"(q[3]), "+v"(q[4]), "+v"(q[5]), "+v"(q[6]), "+v"(q[7]));
            _Pragma("GCC unroll 8") for (int l = 0; l < 8; l++) {
                a0[l] = _mm512_fmadd_ps(q[l], _mm512_set1_ps(k0[d + l]), a0[l]);
                a1[l] = _mm512_fmadd_ps(q[l], _mm512_set1_ps(k1[d + l]), a1[l]);
            }
        }
        _mm512_storeu_ps(s1, _mm512_mul_ps(tree8(a1), _mm512_set1_ps(scale)));
    } else {
        for (int d = 0; d < hk; d += 8) {
            _Pragma("GCC unroll 8") for (int l = 0; l < 8; l++)
                a0[l] = _mm512_fmadd_ps(_mm512_loadu_ps(qt + (size_t)(d + l) * KW_ATT_LANES), _mm512_set1_ps(k0[d + l]), a0[l]);
        }
    }
    _mm512_storeu_ps(s0, _mm512_mul_ps(tree8(a0), _mm512_set1_ps(scale)));
}

/* softmax of every lane l over scores[j * 16 + l], j < n[l] (n[l] = 0: unused
 * lane), all lanes at once: per lane the operations of attn.c's softmax
 * (max, exp(s - max), sum in double in order of j, times (float)(1/sum)),
 * then F16 rounding for an F16 cache. Entries past a lane's n are left as
 * they are (never read). */
static void softmax_lanes(float *s, const int32_t *n, int32_t n_max, int f16) {
    __m512i nv = _mm512_loadu_si512(n);
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int32_t j = 0; j < n_max; j++) {
        __mmask16 m = _mm512_cmpgt_epi32_mask(nv, _mm512_set1_epi32(j));
        mx = _mm512_mask_max_ps(mx, m, mx, _mm512_loadu_ps(s + (size_t)j * KW_ATT_LANES));
    }
    __m512d sum_lo = _mm512_setzero_pd(), sum_hi = _mm512_setzero_pd();
    for (int32_t j = 0; j < n_max; j++) {
        float *row = s + (size_t)j * KW_ATT_LANES;
        __mmask16 m = _mm512_cmpgt_epi32_mask(nv, _mm512_set1_epi32(j));
        __m512 e = kw_exp16(_mm512_sub_ps(_mm512_loadu_ps(row), mx));
        _mm512_mask_storeu_ps(row, m, e);
        sum_lo = _mm512_mask_add_pd(sum_lo, (__mmask8)m, sum_lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        sum_hi = _mm512_mask_add_pd(sum_hi, (__mmask8)(m >> 8), sum_hi, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
    }
    const __m512d one = _mm512_set1_pd(1.0);
    __m512 inv = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(_mm512_div_pd(one, sum_lo))),
                                    _mm512_cvtpd_ps(_mm512_div_pd(one, sum_hi)), 1);
    for (int32_t j = 0; j < n_max; j++) {
        float *row = s + (size_t)j * KW_ATT_LANES;
        __m512 p = _mm512_mul_ps(_mm512_loadu_ps(row), inv);
        if (f16) p = _mm512_cvtph_ps(_mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        _mm512_storeu_ps(row, p);
    }
}

/* o[0..hv) += sum over j in [j0, jn) of p[j] * rows[j - j0][..], in order of j. */
static void pv_lane(float *o, const float *p, int32_t j0, int32_t jn, const float *const *rows, int hv) {
    int c = 0;
    for (; c + 64 <= hv; c += 64) {
        __m512 a0 = _mm512_loadu_ps(o + c), a1 = _mm512_loadu_ps(o + c + 16);
        __m512 a2 = _mm512_loadu_ps(o + c + 32), a3 = _mm512_loadu_ps(o + c + 48);
        for (int32_t j = j0; j < jn; j++) {
            __m512 pv = _mm512_set1_ps(p[(size_t)j * KW_ATT_LANES]);
            const float *v = rows[j - j0] + c;
            a0 = _mm512_fmadd_ps(pv, _mm512_loadu_ps(v), a0);
            a1 = _mm512_fmadd_ps(pv, _mm512_loadu_ps(v + 16), a1);
            a2 = _mm512_fmadd_ps(pv, _mm512_loadu_ps(v + 32), a2);
            a3 = _mm512_fmadd_ps(pv, _mm512_loadu_ps(v + 48), a3);
        }
        _mm512_storeu_ps(o + c, a0);
        _mm512_storeu_ps(o + c + 16, a1);
        _mm512_storeu_ps(o + c + 32, a2);
        _mm512_storeu_ps(o + c + 48, a3);
    }
    for (; c < hv; c += 16) {
        __m512 a0 = _mm512_loadu_ps(o + c);
        for (int32_t j = j0; j < jn; j++)
            a0 = _mm512_fmadd_ps(_mm512_set1_ps(p[(size_t)j * KW_ATT_LANES]), _mm512_loadu_ps(rows[j - j0] + c), a0);
        _mm512_storeu_ps(o + c, a0);
    }
}

/* Output row of lane l (token i0 + l / G, head kvh * G + l % G). */
static float *lane_out(const kw_attn_args *a, int l) {
    int t = l / a->G, h = a->kvh * a->G + l % a->G;
    return a->out + ((size_t)(a->i0 + t) * (size_t)a->n_head + (size_t)h) * (size_t)a->hv;
}

/* pv_lane for two lanes over the same keys [j0, jn): each V row is loaded once
 * for both (64 columns at a time; the per-lane operations are unchanged). */
static void pv_pair(float *oa, float *ob, const float *pa, const float *pb, int32_t j0, int32_t jn,
                    const float *const *rows, int hv) {
    for (int c = 0; c < hv; c += 64) {
        __m512 a0 = _mm512_loadu_ps(oa + c), a1 = _mm512_loadu_ps(oa + c + 16);
        __m512 a2 = _mm512_loadu_ps(oa + c + 32), a3 = _mm512_loadu_ps(oa + c + 48);
        __m512 b0 = _mm512_loadu_ps(ob + c), b1 = _mm512_loadu_ps(ob + c + 16);
        __m512 b2 = _mm512_loadu_ps(ob + c + 32), b3 = _mm512_loadu_ps(ob + c + 48);
        for (int32_t j = j0; j < jn; j++) {
            __m512 va = _mm512_set1_ps(pa[(size_t)j * KW_ATT_LANES]), vb = _mm512_set1_ps(pb[(size_t)j * KW_ATT_LANES]);
            const float *v = rows[j - j0] + c;
            __m512 v0 = _mm512_loadu_ps(v), v1 = _mm512_loadu_ps(v + 16), v2 = _mm512_loadu_ps(v + 32), v3 = _mm512_loadu_ps(v + 48);
            a0 = _mm512_fmadd_ps(va, v0, a0); b0 = _mm512_fmadd_ps(vb, v0, b0);
            a1 = _mm512_fmadd_ps(va, v1, a1); b1 = _mm512_fmadd_ps(vb, v1, b1);
            a2 = _mm512_fmadd_ps(va, v2, a2); b2 = _mm512_fmadd_ps(vb, v2, b2);
            a3 = _mm512_fmadd_ps(va, v3, a3); b3 = _mm512_fmadd_ps(vb, v3, b3);
        }
        _mm512_storeu_ps(oa + c, a0); _mm512_storeu_ps(oa + c + 16, a1);
        _mm512_storeu_ps(oa + c + 32, a2); _mm512_storeu_ps(oa + c + 48, a3);
        _mm512_storeu_ps(ob + c, b0); _mm512_storeu_ps(ob + c + 16, b1);
        _mm512_storeu_ps(ob + c + 32, b2); _mm512_storeu_ps(ob + c + 48, b3);
    }
}

void kw_attn_tile_avx512(const kw_attn_args *a, float *scr, int32_t max_ctx) {
    const int G = a->G, hk = a->hk, hv = a->hv, nq = a->n_tok * G;
    const int f16 = a->kv.type == KW_TYPE_F16;
    float *qt = scr, *sc = qt + (size_t)KW_ATT_LANES * hk;
    int32_t n_max = 0;
    for (int t = 0; t < a->n_tok; t++) if (a->pos[a->i0 + t] + 1 > n_max) n_max = a->pos[a->i0 + t] + 1;
    float *krow = sc + (size_t)KW_ATT_LANES * (size_t)n_max, *vbuf = krow + 2 * (size_t)hk;
    float scale = 1.0f / sqrtf((float)hk);

    /* queries transposed: qt[d][lane], F16-rounded for an F16 cache; unused lanes 0 */
    memset(qt, 0, sizeof(float) * (size_t)KW_ATT_LANES * hk);
    for (int l = 0; l < nq; l++) {
        int t = l / G, h = a->kvh * G + l % G;
        const float *q = a->q + ((size_t)(a->i0 + t) * (size_t)a->n_head + (size_t)h) * (size_t)hk;
        for (int d = 0; d < hk; d++)
            qt[(size_t)d * KW_ATT_LANES + l] = f16 ? _cvtsh_ss(_cvtss_sh(q[d], _MM_FROUND_TO_NEAREST_INT)) : q[d];
    }

    kw_attn_walk kw = kw_attn_walk_start(a, 0), vw = kw_attn_walk_start(a, 1);
    int32_t j = 0;
    for (; j + 2 <= n_max; j += 2) {
        if ((j & 7) == 0) kw_attn_prefetch_rows(a, j + KW_ATTN_PF_KEYS, 8, n_max, 0);
        const float *k0 = row_f32(&kw, j, hk, krow), *k1 = row_f32(&kw, j + 1, hk, krow + hk);
        score_keys(qt, k0, k1, hk, scale, sc + (size_t)j * KW_ATT_LANES, sc + (size_t)(j + 1) * KW_ATT_LANES);
    }
    if (j < n_max) score_keys(qt, row_f32(&kw, j, hk, krow), NULL, hk, scale, sc + (size_t)j * KW_ATT_LANES, NULL);

    int32_t nl[KW_ATT_LANES];
    for (int l = 0; l < KW_ATT_LANES; l++) nl[l] = l < nq ? a->pos[a->i0 + l / G] + 1 : 0;
    softmax_lanes(sc, nl, n_max, f16);
    for (int l = 0; l < nq; l++) {
        int t = l / G, h = a->kvh * G + l % G;
        memset(a->out + ((size_t)(a->i0 + t) * (size_t)a->n_head + (size_t)h) * (size_t)hv, 0, sizeof(float) * (size_t)hv);
    }

    const float *rows[KW_ATT_VCHUNK];
    for (int32_t j0 = 0; j0 < n_max; j0 += KW_ATT_VCHUNK) {
        int32_t j1 = j0 + KW_ATT_VCHUNK < n_max ? j0 + KW_ATT_VCHUNK : n_max;
        kw_attn_prefetch_rows(a, j1, KW_ATT_VCHUNK, n_max, 1);   /* the next chunk's V rows, while this one is used */
        v_rows_f32(&vw, j0, j1, vbuf, rows);
        for (int l = 0; l < nq; l++) {
            int32_t jn = nl[l] < j1 ? nl[l] : j1;
            if (jn <= j0) continue;
            float *o = lane_out(a, l);
            if (hv % 64 == 0 && l + 1 < nq && nl[l + 1] > j0) {   /* two lanes share the V rows */
                int32_t jm = nl[l + 1] < j1 ? nl[l + 1] : j1, jc = jm < jn ? jm : jn;
                float *o2 = lane_out(a, l + 1);
                pv_pair(o, o2, sc + l, sc + l + 1, j0, jc, rows, hv);
                if (jn > jc) pv_lane(o, sc + l, jc, jn, rows + (jc - j0), hv);
                if (jm > jc) pv_lane(o2, sc + l + 1, jc, jm, rows + (jc - j0), hv);
                l++;
                continue;
            }
            pv_lane(o, sc + l, j0, jn, rows, hv);
        }
    }
}

/* The AVX-512 set's attention: attn_avx2.c's rows with the exp the decode
 * and tile kernels inline (so the three give the same bits), the float
 * decode (attn_decode_avx512.c) and tile kernels, the VNNI integer kernel
 * (attn_i16_avx512.c). */
const kw_attn_kernels kw_attn_kernels_avx512 = {
    .ops = {KW_ATTN_ROWS_AVX2, kw_exp_avx512},
    .decode_supported = kw_attn_decode_supported, .decode = kw_attn_decode_avx512,
    .tile_supported = kw_attn_tile_supported, .tile = kw_attn_tile_avx512,
    .integer_supported = kw_attn_i16_supported, .integer = kw_attn_i16_avx512, .kv_type_auto = KW_TYPE_KV_I16};
