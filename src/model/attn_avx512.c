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
 * The arithmetic of every output is the one the per-token AVX2 path of
 * forward.c performs (attn_avx2.c), so results are bit-identical whichever
 * path or tile a token falls in:
 *   - q . k: 8 partial sums (element d goes to sum d % 8, FMA in order of d),
 *     combined as ((s0+s4)+(s2+s6)) + ((s1+s5)+(s3+s7)), times the scale;
 *   - softmax: max, expf(s - max), sum in double, times (float)(1/sum);
 *     an F16 cache rounds q and the probabilities to F16 (as llama.cpp);
 *   - out = sum over keys in order of p * v, one FMA per element.
 * Compiled with AVX-512F flags; forward.c calls it only when the CPU has
 * AVX-512F (which implies the AVX2/FMA/F16C of the per-token path). */
#include "model_internal.h"
#include <immintrin.h>
#include <math.h>
#include <string.h>

#define KW_ATT_LANES 16
#define KW_ATT_VCHUNK 32     /* V rows converted to F32 at a time */

int kw_attn_tile_tokens(int G) {
    return G >= 1 && G <= KW_ATT_LANES ? KW_ATT_LANES / G : 0;
}

size_t kw_attn_tile_floats(int hk, int hv, int32_t max_ctx) {
    /* qt[hk][16], scores[max_ctx][16], krow[2][hk], vbuf[32][hv] */
    return (size_t)KW_ATT_LANES * ((size_t)hk + (size_t)max_ctx) + 2 * (size_t)hk + (size_t)KW_ATT_VCHUNK * (size_t)hv + 64;
}

bool kw_attn_tile_supported(uint32_t kv_type, int G, int hk, int hv) {
    return (kv_type == KW_TYPE_F32 || kv_type == KW_TYPE_F16) && kw_attn_tile_tokens(G) > 0 && hk % 8 == 0 &&
           hk <= 1024 && hv % 16 == 0 && hv <= 1024;
}

/* Key j's row of this head as F32: in place for an F32 cache, else converted into buf. */
static const float *k_row_f32(const kw_attn_tile_args *a, int32_t j, float *buf) {
    int32_t bt = a->kv->lay.block_tokens;
    const void *p = kw_kv_k(a->kv, a->table->ids[j / bt], a->layer, a->kvh, j % bt);
    if (a->kv->lay.type == KW_TYPE_F32) return p;
    const uint16_t *h = p;
    for (int d = 0; d < a->hk; d += 16)
        _mm512_storeu_ps(buf + d, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + d))));
    return buf;
}

/* Row pointers of V rows [j0, j1) as F32 (converted into vbuf for an F16 cache). */
static void v_rows_f32(const kw_attn_tile_args *a, int32_t j0, int32_t j1, float *vbuf, const float **rows) {
    int32_t bt = a->kv->lay.block_tokens;
    for (int32_t j = j0; j < j1; j++) {
        const void *p = kw_kv_v(a->kv, a->table->ids[j / bt], a->layer, a->kvh, j % bt);
        if (a->kv->lay.type == KW_TYPE_F32) { rows[j - j0] = p; continue; }
        float *dst = vbuf + (size_t)(j - j0) * (size_t)a->hv;
        const uint16_t *h = p;
        for (int d = 0; d < a->hv; d += 16)
            _mm512_storeu_ps(dst + d, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + d))));
        rows[j - j0] = dst;
    }
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
            _Pragma("GCC unroll 8") for (int l = 0; l < 8; l++) {
                __m512 q = _mm512_loadu_ps(qt + (size_t)(d + l) * KW_ATT_LANES);
                a0[l] = _mm512_fmadd_ps(q, _mm512_set1_ps(k0[d + l]), a0[l]);
                a1[l] = _mm512_fmadd_ps(q, _mm512_set1_ps(k1[d + l]), a1[l]);
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

/* softmax over scores[j * 16 + lane], j < n; sum in double (forward.c softmax). */
static void softmax_lane(float *s, int lane, int32_t n, int f16) {
    float mx = -INFINITY;
    for (int32_t j = 0; j < n; j++) if (s[(size_t)j * KW_ATT_LANES + lane] > mx) mx = s[(size_t)j * KW_ATT_LANES + lane];
    double sum = 0.0;
    for (int32_t j = 0; j < n; j++) {
        float *p = s + (size_t)j * KW_ATT_LANES + lane;
        *p = expf(*p - mx);
        sum += *p;
    }
    float inv = (float)(1.0 / sum);
    for (int32_t j = 0; j < n; j++) {
        float *p = s + (size_t)j * KW_ATT_LANES + lane;
        *p *= inv;
        if (f16) *p = _cvtsh_ss(_cvtss_sh(*p, _MM_FROUND_TO_NEAREST_INT));
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

void kw_attn_tile_avx512(const kw_attn_tile_args *a, float *scr) {
    const int G = a->G, hk = a->hk, hv = a->hv, nq = a->n_tok * G;
    const int f16 = a->kv->lay.type == KW_TYPE_F16;
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

    int32_t j = 0;
    for (; j + 2 <= n_max; j += 2) {
        const float *k0 = k_row_f32(a, j, krow), *k1 = k_row_f32(a, j + 1, krow + hk);
        score_keys(qt, k0, k1, hk, scale, sc + (size_t)j * KW_ATT_LANES, sc + (size_t)(j + 1) * KW_ATT_LANES);
    }
    if (j < n_max) score_keys(qt, k_row_f32(a, j, krow), NULL, hk, scale, sc + (size_t)j * KW_ATT_LANES, NULL);

    for (int l = 0; l < nq; l++) {
        int t = l / G, h = a->kvh * G + l % G;
        softmax_lane(sc, l, a->pos[a->i0 + t] + 1, f16);
        memset(a->out + ((size_t)(a->i0 + t) * (size_t)a->n_head + (size_t)h) * (size_t)hv, 0, sizeof(float) * (size_t)hv);
    }

    const float *rows[KW_ATT_VCHUNK];
    for (int32_t j0 = 0; j0 < n_max; j0 += KW_ATT_VCHUNK) {
        int32_t j1 = j0 + KW_ATT_VCHUNK < n_max ? j0 + KW_ATT_VCHUNK : n_max;
        v_rows_f32(a, j0, j1, vbuf, rows);
        for (int l = 0; l < nq; l++) {
            int t = l / G, h = a->kvh * G + l % G;
            int32_t n = a->pos[a->i0 + t] + 1;
            if (n <= j0) continue;
            float *o = a->out + ((size_t)(a->i0 + t) * (size_t)a->n_head + (size_t)h) * (size_t)hv;
            pv_lane(o, sc + l, j0, n < j1 ? n : j1, rows, hv);
        }
    }
}
