/* gemm_avx512.c - the prefill GEMM for packed Q4_0 / Q8_0 weights (AVX-512
 * VNNI), i.e. many activation rows against the 16-row interleaved copy that
 * kw_matrix_pack makes (format in kernels_avx512.c: per group of 16 rows
 * and per 32-value block, 4 (Q4_0) or 8 (Q8_0) 64-byte parts whose lane L
 * holds 4 values of row L; blocks in pairs, the pair's F16 scales before
 * its two blocks' quants).
 *
 * Owns kw_gemm_x16_avx512(). Loop order: tiles of up to 12 activation rows
 * outside, the 16-row groups of the caller's chunk inside, so the tile's
 * activations stay in L1 while the chunk's weights come from L2. Per tile
 * the offset term of each activation block (-o * sum(x), o = 8 or 128: the
 * weights are stored unsigned, u = q + o) is computed once into a small
 * table, so the inner loop starts each block's accumulator with a broadcast
 * load instead of a multiply and a register broadcast. Per block and
 * activation row the work is 8 vpdpbusd (16 rows x 32 values) and 3 float
 * ops (convert, scale product, FMA); a block's 16-row weight vectors are
 * unpacked once for all rows of the tile.
 *
 * Each output is computed with exactly the operations of the per-row packed
 * kernel in kernels_avx512.c (int32 dot from -o*sum(x), then
 * acc = fma(float(dot), d_w * d_x, acc) over blocks in order), so results
 * do not depend on which kernel, tile or thread produced them. */
#include "tensor/kernels.h"
#include <immintrin.h>
#include "tensor/x16_avx512.h"
#include <string.h>
#include <math.h>
#include "kvwise/memory.h"

#define KW_INLINE static inline __attribute__((always_inline))
#define KW_GX_TILE 8                 /* activation rows per tile */
#define KW_GX_MAX_NB 1024
#define KW_GX_PASS_BYTES (160u * 1024u)   /* weight bytes of the rows one pass keeps in L2 */             /* blocks per row the offset table holds (32768 values) */

/* One 16-row group x C activation rows over all nb blocks. The group's
 * K-panels of pnb blocks (pnb = nb: one panel; kernels_avx512.c) are
 * pstride bytes apart, the first at grp0; the sums stay in registers
 * across panels, so a row gets the operations of the whole-row tile. */
KW_INLINE void gx_tile(const uint8_t *grp0, size_t pstride, int64_t pnb, int64_t nb, const uint8_t *const *xq,
                       const int32_t *offs, float *y, int64_t ldy, const int C, const int q4) {
    __m512 acc[KW_GX_TILE];
    _Pragma("GCC unroll 16") for (int c = 0; c < C; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += pnb) {
        const uint8_t *grp = grp0 + (size_t)(b0 / pnb) * pstride;
        for (int64_t bl = 0; bl < pnb; bl++) {
            const int64_t b = b0 + bl;
            __m512i w[8];
            kw_x16_unpack(kw_q0_quants(grp, 16, q4, bl), q4, 0, w);
            __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)kw_q0_scales(grp, 16, q4, bl)));
            /* the C chains of 8 vpdpbusd advance together (no dependency between rows) */
            __m512i d[KW_GX_TILE];
            _Pragma("GCC unroll 16") for (int c = 0; c < C; c++)
                d[c] = _mm512_set1_epi32(offs[(size_t)c * (size_t)nb + (size_t)b]);
            _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++)
            _Pragma("GCC unroll 16") for (int c = 0; c < C; c++)
                d[c] = _mm512_dpbusd_epi32(d[c], w[k], _mm512_set1_epi32(((const int32_t *)(xq[c] + 32 * b))[k]));
            _Pragma("GCC unroll 16") for (int c = 0; c < C; c++) {
                const float *xd = (const float *)(xq[c] + 32 * nb);
                acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d[c]), _mm512_mul_ps(dw, _mm512_set1_ps(xd[b])), acc[c]);
            }
        }
    }
    _Pragma("GCC unroll 16") for (int c = 0; c < C; c++) _mm512_storeu_ps(y + (size_t)c * (size_t)ldy, acc[c]);
}

#define KW_GX_C(N) ((N) < KW_GX_TILE ? (N) : KW_GX_TILE)
#define KW_GX_CASE(N, Q4) case N: gx_tile(grp, pstride, pnb, nb, xq, offs, y, ldy, KW_GX_C(N), Q4); break;
#define KW_GX_SWITCH(Q4)                                                                              \
    switch (C) {                                                                                      \
    KW_GX_CASE(1, Q4) KW_GX_CASE(2, Q4) KW_GX_CASE(3, Q4) KW_GX_CASE(4, Q4) KW_GX_CASE(5, Q4)         \
    KW_GX_CASE(6, Q4) KW_GX_CASE(7, Q4) KW_GX_CASE(8, Q4) KW_GX_CASE(9, Q4) KW_GX_CASE(10, Q4)        \
    KW_GX_CASE(11, Q4) KW_GX_CASE(12, Q4) KW_GX_CASE(13, Q4) KW_GX_CASE(14, Q4) KW_GX_CASE(15, Q4)    \
    default: gx_tile(grp, pstride, pnb, nb, xq, offs, y, ldy, KW_GX_TILE, Q4); break;               \
    }

/* The offset terms -o * sum(x) of C activation rows, row c at ot + c * nb. */
static void offsets(const uint8_t *const *xq, int C, int64_t nb, int32_t off, int32_t *ot) {
    const __m512i mo = _mm512_set1_epi32(-off);
    for (int c = 0; c < C; c++) {
        const int32_t *xsum = (const int32_t *)(xq[c] + 32 * nb + 4 * nb);
        int32_t *o = ot + (size_t)c * (size_t)nb;
        int64_t b = 0;
        for (; b + 16 <= nb; b += 16) _mm512_storeu_si512(o + b, _mm512_mullo_epi32(_mm512_loadu_si512(xsum + b), mo));
        for (; b < nb; b++) o[b] = -off * xsum[b];
    }
}

int64_t kw_gemm_x16_avx512(const uint8_t *packed, int q4, int64_t nb, int64_t pnb, size_t pstride, int64_t r0,
                           int64_t end, const void *X, size_t xs, int64_t nx, float *Y, int64_t ldy) {
    if (r0 % 16 || end <= r0 || nb > KW_GX_MAX_NB || pnb <= 0 || nb % pnb) return r0;
    end -= (end - r0) % 16;
    if (end <= r0) return r0;
    const size_t gbp = kw_q0_group_bytes(16, q4, pnb), gb = gbp * (size_t)(nb / pnb);
    const int32_t off = q4 ? 8 : 128;
    /* rows per pass: their weights (<= ~150 KB at 2048 values) stay in L2 while every tile runs over them */
    const int64_t rowblk = 16 * (int64_t)(KW_GX_PASS_BYTES / gb > 1 ? KW_GX_PASS_BYTES / gb : 1);
    int32_t ot[KW_GX_TILE * KW_GX_MAX_NB];   /* 48 KiB of stack (threads have the default 8 MiB) */
    for (int64_t rb = r0; rb < end; rb += rowblk) {
        int64_t re = rb + rowblk < end ? rb + rowblk : end;
        for (int64_t i = 0; i < nx; i += KW_GX_TILE) {
            int C = (int)(nx - i < KW_GX_TILE ? nx - i : KW_GX_TILE);
            const uint8_t *xq[KW_GX_TILE];
            for (int c = 0; c < C; c++) xq[c] = (const uint8_t *)X + (size_t)(i + c) * xs;
            offsets(xq, C, nb, off, ot);
            for (int64_t r = rb; r < re; r += 16) {
                const uint8_t *grp = packed + (size_t)(r / 16) * gbp;
                float *y = Y + i * ldy + r;
                const int32_t *offs = ot;
                if (q4) { KW_GX_SWITCH(1) }
                else { KW_GX_SWITCH(0) }
            }
        }
    }
    return end;
}

/* ---------------- F16 weights: int16 blocks, vpdpwssd ----------------
 * vpdpwssd multiplies 16-bit pairs (32 products per instruction, twice the
 * FMA rate), so F16 matrices get a packed copy at load in a 16-bit integer
 * form: per row and block of KW_I16_QK (128) values a float scale
 * d = max|w| / KW_I16_WMAX (8191) and q = round(w / d). Activations get
 * the same form per 128-value block (written by kw_act_f16_i16 after the
 * F32 values the unpacked F16 kernels read), but their scale is bounded by
 * the block's sum of magnitudes instead of its maximum: d = max(max|x| /
 * 32767, sum|x| / KW_I16_XL1), so sum|q_x| <= XL1 + 64 and any weight
 * block with |q_w| <= 8191 gives |dot| <= 8191 * (XL1 + 128) < 2^31
 * (checked below): the integer dot of a whole block is exact in int32.
 * Typical activation blocks then get ~7-8k levels at their maximum (an
 * outlier block up to 32767) over 128 values, and the block's float work
 * (convert, scale product, FMA) is spread over 64 vpdpwssd.
 *
 * Choice (llama-f16 conformance, tolerance abs 0.02; max top-10 |d| /
 * last-token rms over 6 prompts): this form 0.0122 / 0.0026; the first
 * int16 form (32 values, both 8191 by max) 0.0115 / 0.0027; 64 values with
 * weights 4095 / activations 8191 by max 0.0136 / 0.0031; 128 values
 * 4095 / 4095 by max 0.0179; 128 values with the sum bound and weights
 * 16383 0.0164, 4095 0.0144; 256 values 0.0149. Exact F16: 0.0049 / 0.0016.
 * Matrices whose width is not a multiple of 128 are not packed (the exact
 * F16 kernels serve them).
 *
 * Packed layout per group of 16 rows and block b (4160 bytes): 64 parts of
 * 64 bytes, part k lane L = row L's values 2k, 2k+1 (int16), then the 16
 * rows' float scales. Activation row of n values: n F32 values, then the n
 * int16 values, then the n / 128 float scales (6n + n/32 bytes: within the
 * 4n + 68n/32 that kw_matmul reserves per row). */
#define KW_I16_QK 128
#define KW_I16_WMAX 8191
#define KW_I16_XMAX 32767                                     /* int16 */
#define KW_I16_XL1 ((int32_t)(2147483647 / KW_I16_WMAX) - KW_I16_QK)   /* sum |q_x| target per block */
#define KW_I16_R 2       /* 16-row groups per int16 tile */
#define KW_I16_TC 6      /* activation rows per int16 tile: 2 x 6 chains + 12 accumulators */
#define KW_I16_PASS_BYTES (384u * 1024u)   /* packed weight bytes of one pass (Zen 4 L2: 1 MiB) */
#define KW_I16_BLK (KW_I16_QK * 32 + 64)
/* |dot| <= WMAX * sum|q_x| <= WMAX * (XL1 + QK/2 (rounding) + slack for the float sum of |x|) */
_Static_assert((int64_t)KW_I16_WMAX * (KW_I16_XL1 + KW_I16_QK) < ((int64_t)1 << 31),
               "a block's int16 products must fit int32");

/* q[j] = round(x[j] * id) capped at +-lim, for the KW_I16_QK values of a block. */
static void i16_store(const float *x, int16_t *q, float id, int lim) {
    const __m512i hi = _mm512_set1_epi32(lim), lo = _mm512_set1_epi32(-lim);
    for (int j = 0; j < KW_I16_QK; j += 16) {
        __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + j), _mm512_set1_ps(id)));
        _mm256_storeu_si256((__m256i *)(q + j), _mm512_cvtepi32_epi16(_mm512_max_epi32(_mm512_min_epi32(v, hi), lo)));
    }
}

/* KW_I16_QK values -> int16 at q (|q| <= lim) and their scale at *d (d = 0 for a zero block). */
static void i16_block(const float *x, int16_t *q, float *d, int lim) {
    const __m512 sign = _mm512_set1_ps(-0.0f);
    __m512 mx = _mm512_setzero_ps();
    for (int j = 0; j < KW_I16_QK; j += 16) mx = _mm512_max_ps(mx, _mm512_andnot_ps(sign, _mm512_loadu_ps(x + j)));
    float amax = _mm512_reduce_max_ps(mx);
    *d = amax / (float)lim;
    i16_store(x, q, amax > 0.0f ? (float)lim / amax : 0.0f, lim);
}

/* Activation block: the scale is the larger of max|x| / 32767 (int16) and
 * sum|x| / XL1 (sum: 16 lane sums over j = lane mod 16 in order, folded
 * pairwise: lane i += lane i + w for w = 8, 4, 2, 1), so sum |q| <= XL1 + QK/2 and any block of weights with
 * |q_w| <= WMAX gives an int32 dot (see the assertion above). */
static void i16_act_block(const float *x, int16_t *q, float *d) {
    const __m512 sign = _mm512_set1_ps(-0.0f);
    __m512 mx = _mm512_setzero_ps(), l1 = _mm512_setzero_ps();
    for (int j = 0; j < KW_I16_QK; j += 16) {
        __m512 a = _mm512_andnot_ps(sign, _mm512_loadu_ps(x + j));
        mx = _mm512_max_ps(mx, a);
        l1 = _mm512_add_ps(l1, a);
    }
    /* the lane sums folded in a fixed order (halves, quarters, ...), so a reference can repeat it exactly */
    float ls[16];
    _mm512_storeu_ps(ls, l1);
    for (int w = 8; w >= 1; w /= 2)
        for (int i = 0; i < w; i++) ls[i] += ls[i + w];
    float amax = _mm512_reduce_max_ps(mx), sum = ls[0];
    float s = fmaxf(amax / (float)KW_I16_XMAX, sum / (float)KW_I16_XL1);
    *d = s;
    i16_store(x, q, s > 0.0f ? 1.0f / s : 0.0f, KW_I16_XMAX);
}

size_t kw_act_f16_i16_bytes(int64_t n) {
    return (size_t)n * 6 + (size_t)(n / KW_I16_QK) * 4;
}

/* The int16 blocks and scales after the row's n F32 values (none when n is
 * not a multiple of KW_I16_QK: such matrices are never packed). Used alone
 * for runs of packed matrices only: writing the F32 values too cost 1.8%
 * of F16 prefill (bench/ab.sh, pp512, 1B, 26 rounds). */
void kw_act_f16_i16_only(const float *x, void *dst, int64_t n) {
    if (n % KW_I16_QK) return;
    int16_t *q = (int16_t *)((uint8_t *)dst + (size_t)n * 4);
    float *d = (float *)(q + n);
    for (int64_t b = 0; b < n / KW_I16_QK; b++) i16_act_block(x + KW_I16_QK * b, q + KW_I16_QK * b, d + b);
}

void kw_act_f16_i16(const float *x, void *dst, int64_t n) {
    float *y = dst;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; i++) y[i] = _cvtsh_ss(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT));
    kw_act_f16_i16_only(x, dst, n);
}

int kw_pack_f16_i16(kw_matrix *W, kw_pack_arena *a, kw_err *err) {
    if (W->type != KW_TYPE_F16 || W->cols % KW_I16_QK) return 1;
    int64_t groups = (W->rows + 15) / 16, nb = W->cols / KW_I16_QK;
    /* all rows packed, so every output has the same contract; padding rows stay zero */
    uint8_t *p = kw_pack_alloc(W, a, KW_FMT_F16_I16, W->rows, nb, (size_t)groups * (size_t)nb * KW_I16_BLK, err);
    if (!p) return kw_pack_missing(a);
    float vals[KW_I16_QK];
    int16_t q[KW_I16_QK];
    for (int64_t g = 0; g < groups; g++)
        for (int L = 0; L < 16 && 16 * g + L < W->rows; L++) {
            const uint16_t *row = (const uint16_t *)((const uint8_t *)W->data + (size_t)(16 * g + L) * W->row_bytes);
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *blk = p + KW_PACK_HDR_BYTES + (size_t)(g * nb + b) * KW_I16_BLK;
                for (int j = 0; j < KW_I16_QK; j += 16)
                    _mm512_storeu_ps(vals + j, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + KW_I16_QK * b + j))));
                float d;
                i16_block(vals, q, &d, KW_I16_WMAX);
                for (int k = 0; k < KW_I16_QK / 2; k++) memcpy(blk + 64 * k + 4 * L, q + 2 * k, 4);
                memcpy(blk + 64 * (KW_I16_QK / 2) + 4 * L, &d, 4);
            }
        }
    W->packed = p;
    return 0;
}

/* R 16-row groups (gstride bytes apart) x C activation rows: per block and
 * k, R weight vectors and C activation broadcasts feed R*C vpdpwssd, so a
 * tile of 2 groups x 6 rows needs half the broadcasts of 1 x 12 (on Zen 4 a
 * broadcast costs about as much as the vpdpwssd it feeds). Small tiles run
 * NCH independent chains per output (exact int32 sums, so the result does
 * not depend on NCH) to hide vpdpwssd latency. Then per block
 * acc = fma(float(dot), d_w * d_x, acc), blocks in order. `left` = rows of
 * the output still inside the caller's range (the last group may be
 * partial). One activation row (decode) reads the weights with
 * non-temporal loads, as the packed Q4_0 / Q8_0 tile does
 * (kernels_avx512.c; blocks are 4160 bytes, on cache lines): F16 decode
 * 1.04x (bench/ab.sh). */
KW_INLINE void i16_tile(const uint8_t *grp, size_t gstride, int64_t nb, const int16_t *const *xq,
                        const float *const *xd, float *y, int64_t ldy, int64_t left, const int R, const int C,
                        const int NCH) {
    __m512 acc[KW_I16_R * KW_I16_TC];
    _Pragma("GCC unroll 16") for (int t = 0; t < R * C; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = grp + (size_t)b * KW_I16_BLK;
        __m512i d[KW_I16_R * KW_I16_TC];
        _Pragma("GCC unroll 16") for (int t = 0; t < R * C * NCH; t++) d[t] = _mm512_setzero_si512();
        _Pragma("GCC unroll 4") for (int k = 0; k < KW_I16_QK / 2; k += NCH)
        _Pragma("GCC unroll 4") for (int h = 0; h < NCH; h++) {
            __m512i w[KW_I16_R];
            _Pragma("GCC unroll 4") for (int g = 0; g < R; g++) w[g] = kw_x16_load(blk + (size_t)g * gstride + 64 * (k + h), C == 1);
            _Pragma("GCC unroll 16") for (int c = 0; c < C; c++) {
                __m512i x = _mm512_set1_epi32(((const int32_t *)(xq[c] + (size_t)b * KW_I16_QK))[k + h]);
                _Pragma("GCC unroll 4") for (int g = 0; g < R; g++)
                    d[(g * C + c) * NCH + h] = _mm512_dpwssd_epi32(d[(g * C + c) * NCH + h], w[g], x);
            }
        }
        _Pragma("GCC unroll 16") for (int c = 0; c < C; c++) {
            __m512 dx = _mm512_set1_ps(xd[c][b]);
            _Pragma("GCC unroll 4") for (int g = 0; g < R; g++) {
                __m512i s = d[(g * C + c) * NCH];
                _Pragma("GCC unroll 4") for (int h = 1; h < NCH; h++) s = _mm512_add_epi32(s, d[(g * C + c) * NCH + h]);
                __m512 dw = _mm512_loadu_ps((const float *)(blk + (size_t)g * gstride + 64 * (KW_I16_QK / 2)));
                acc[g * C + c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, dx), acc[g * C + c]);
            }
        }
    }
    _Pragma("GCC unroll 4") for (int g = 0; g < R; g++) {
        int64_t l = left - 16 * g;
        __mmask16 m = l >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << l) - 1);
        _Pragma("GCC unroll 16") for (int c = 0; c < C; c++)
            _mm512_mask_storeu_ps(y + (size_t)c * (size_t)ldy + 16 * g, m, acc[g * C + c]);
    }
}

/* chains per output: at least ~4 independent vpdpwssd chains per tile */
#define KW_I16_NCH(R, N) ((R) * (N) >= 4 ? 1 : (R) * (N) >= 2 ? 2 : 4)
#define KW_I16_CASE(R, N) case N: i16_tile(grp, gstride, nb, xq, xd, y, ldy, left, R, N, KW_I16_NCH(R, N)); break;
#define KW_I16_SWITCH(R)                                                                              \
    switch (C) {                                                                                      \
    KW_I16_CASE(R, 1) KW_I16_CASE(R, 2) KW_I16_CASE(R, 3) KW_I16_CASE(R, 4) KW_I16_CASE(R, 5)         \
    default: i16_tile(grp, gstride, nb, xq, xd, y, ldy, left, R, KW_I16_TC, 1); break;               \
    }

int64_t kw_gemm_f16_i16(const kw_matrix *W, int64_t r0, int64_t r1, const void *X, size_t xs, int64_t nx, float *Y,
                        int64_t ldy) {
    const kw_pack_hdr *h = kw_packed_hdr(W, KW_FMT_F16_I16);
    if (!h || r0 % 16) return r0;
    int64_t end = r1 < h->packed_rows ? r1 : h->packed_rows;   /* every row is packed (last group zero-padded) */
    if (end <= r0) return r0;
    const int64_t nb = h->nb, n = W->cols;
    const size_t gstride = (size_t)nb * KW_I16_BLK;
    const uint8_t *packed = (const uint8_t *)h + KW_PACK_HDR_BYTES;
    /* rows per pass: whole tiles of R groups whose weights stay in L2 while every activation tile runs over them */
    int64_t tiles = (int64_t)(KW_I16_PASS_BYTES / (gstride * KW_I16_R));
    const int64_t rowblk = 16 * KW_I16_R * (tiles > 1 ? tiles : 1);
    for (int64_t rb = r0; rb < end; rb += rowblk) {
        int64_t re = rb + rowblk < end ? rb + rowblk : end;
        for (int64_t i = 0; i < nx; i += KW_I16_TC) {
            int C = (int)(nx - i < KW_I16_TC ? nx - i : KW_I16_TC);
            const int16_t *xq[KW_I16_TC];
            const float *xd[KW_I16_TC];
            for (int c = 0; c < C; c++) {
                xq[c] = (const int16_t *)((const uint8_t *)X + (size_t)(i + c) * xs + (size_t)n * 4);
                xd[c] = (const float *)(xq[c] + n);
            }
            for (int64_t r = rb; r < re; ) {
                const uint8_t *grp = packed + (size_t)(r / 16) * gstride;
                float *y = Y + i * ldy + r;
                int64_t left = re - r;
                if (left > 16 * (KW_I16_R - 1)) { KW_I16_SWITCH(KW_I16_R) r += 16 * KW_I16_R; }
                else { KW_I16_SWITCH(1) r += 16; }
            }
        }
    }
    return end;
}
