/* gemm_avx512.c - the prefill GEMM for packed Q4_0 / Q8_0 weights (AVX-512
 * VNNI), i.e. many activation rows against the 16-row interleaved copy that
 * kw_matrix_pack makes (format in kernels_avx512.c: per group of 16 rows
 * and per 32-value block, 4 (Q4_0) or 8 (Q8_0) 64-byte parts whose lane L
 * holds 4 values of row L, then the 16 F16 scales).
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
#include <string.h>

#define KW_INLINE static inline __attribute__((always_inline))
#define KW_GX_TILE 8                 /* activation rows per tile */
#define KW_GX_MAX_NB 1024
#define KW_GX_PASS_BYTES (160u * 1024u)   /* weight bytes of the rows one pass keeps in L2 */             /* blocks per row the offset table holds (32768 values) */

/* One 16-row group x C activation rows over all nb blocks. */
KW_INLINE void gx_tile(const uint8_t *grp, int64_t nb, const uint8_t *const *xq, const int32_t *offs,
                       float *y, int64_t ldy, const int C, const int q4) {
    const size_t blkb = q4 ? 288 : 544, qsb = q4 ? 256 : 512;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc[KW_GX_TILE];
    _Pragma("GCC unroll 16") for (int c = 0; c < C; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = grp + (size_t)b * blkb;
        __m512i w[8];
        if (q4) {
            _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
                __m512i p = _mm512_loadu_si512(blk + 64 * j);
                w[j] = _mm512_and_si512(p, m4);
                w[j + 4] = _mm512_and_si512(_mm512_srli_epi16(p, 4), m4);
            }
        } else {
            _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) w[k] = _mm512_loadu_si512(blk + 64 * k);
        }
        __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + qsb)));
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
    _Pragma("GCC unroll 16") for (int c = 0; c < C; c++) _mm512_storeu_ps(y + (size_t)c * (size_t)ldy, acc[c]);
}

#define KW_GX_C(N) ((N) < KW_GX_TILE ? (N) : KW_GX_TILE)
#define KW_GX_CASE(N, Q4) case N: gx_tile(grp, nb, xq, offs, y, ldy, KW_GX_C(N), Q4); break;
#define KW_GX_SWITCH(Q4)                                                                              \
    switch (C) {                                                                                      \
    KW_GX_CASE(1, Q4) KW_GX_CASE(2, Q4) KW_GX_CASE(3, Q4) KW_GX_CASE(4, Q4) KW_GX_CASE(5, Q4)         \
    KW_GX_CASE(6, Q4) KW_GX_CASE(7, Q4) KW_GX_CASE(8, Q4) KW_GX_CASE(9, Q4) KW_GX_CASE(10, Q4)        \
    KW_GX_CASE(11, Q4) KW_GX_CASE(12, Q4) KW_GX_CASE(13, Q4) KW_GX_CASE(14, Q4) KW_GX_CASE(15, Q4)    \
    default: gx_tile(grp, nb, xq, offs, y, ldy, KW_GX_TILE, Q4); break;                              \
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

int64_t kw_gemm_x16_avx512(const uint8_t *packed, int q4, int64_t nb, int64_t r0, int64_t end,
                           const void *X, size_t xs, int64_t nx, float *Y, int64_t ldy) {
    if (r0 % 16 || end <= r0 || nb > KW_GX_MAX_NB) return r0;
    end -= (end - r0) % 16;
    if (end <= r0) return r0;
    const size_t blkb = q4 ? 288 : 544;
    const int32_t off = q4 ? 8 : 128;
    /* rows per pass: their weights (<= ~150 KB at 2048 values) stay in L2 while every tile runs over them */
    const int64_t rowblk = 16 * (int64_t)(KW_GX_PASS_BYTES / ((size_t)nb * blkb) > 1 ? KW_GX_PASS_BYTES / ((size_t)nb * blkb) : 1);
    int32_t ot[KW_GX_TILE * KW_GX_MAX_NB];   /* 48 KiB of stack (threads have the default 8 MiB) */
    for (int64_t rb = r0; rb < end; rb += rowblk) {
        int64_t re = rb + rowblk < end ? rb + rowblk : end;
        for (int64_t i = 0; i < nx; i += KW_GX_TILE) {
            int C = (int)(nx - i < KW_GX_TILE ? nx - i : KW_GX_TILE);
            const uint8_t *xq[KW_GX_TILE];
            for (int c = 0; c < C; c++) xq[c] = (const uint8_t *)X + (size_t)(i + c) * xs;
            offsets(xq, C, nb, off, ot);
            for (int64_t r = rb; r < re; r += 16) {
                const uint8_t *grp = packed + (size_t)(r / 16) * (size_t)nb * blkb;
                float *y = Y + i * ldy + r;
                const int32_t *offs = ot;
                if (q4) { KW_GX_SWITCH(1) }
                else { KW_GX_SWITCH(0) }
            }
        }
    }
    return end;
}
