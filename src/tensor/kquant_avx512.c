/* kquant_avx512.c - packed Q4_K for the AVX-512 VNNI family: the load-time
 * repack (kw_pack_q4k_x16, format KW_FMT_Q4_K_X16) and the kernels that read
 * it (kw_gemm_q4k_x16: decode, batched decode and prefill).
 *
 * Layout: per group of 16 weight rows and per 256-value super-block, 2368
 * bytes (148 per row, vs 144 for the original block):
 *   [0, 2048)     32 parts of 64 bytes; 32-bit word L of part p is row L's
 *                 qs[4p..4p+3]. Part p = 8j+k: its low nibbles are values
 *                 64j+4k..+3 (sub-block 2j), its high nibbles values
 *                 64j+32+4k..+3 (sub-block 2j+1), so lane L of an unpacked
 *                 part times 4 broadcast activation bytes is row L's share.
 *   [2048, 2176)  6-bit scales, byte 16s+L = row L's sc of sub-block s;
 *   [2176, 2304)  6-bit mins in pairs, byte 32t+2L+h = row L's m of
 *                 sub-block 2t+h (zero-extended to int16 they are the
 *                 (m_2t, m_2t+1) word pairs vpdpwssd takes);
 *   [2304, 2336)  the 16 rows' F16 d, then [2336, 2368) their F16 dmin.
 * The scales are unpacked once here instead of per block and per output.
 *
 * Per super-block and activation row (Q8_K: float dx, int8 q, bsums):
 *   y += (d*dx) * sum_s sc_s * dot_s  -  (dmin*dx) * sum_s m_s * bsum32_s
 * dot_s (one vpdpbusd chain per 32 values) and the min sum (vpdpwssd over
 * the 8 per-32 sums, each two Q8_K 16-sums) are exact integers; sc_s*dot_s
 * is exact in float (6 + 17 bits), only the sum over s and the final two
 * FMAs round. Lanes are the 16 outputs: no horizontal sums. Each output
 * gets the same instruction sequence whatever the batch size or tile, so
 * results do not depend on the thread split or on batch composition. */
#include "tensor/kernels.h"
#include "tensor/quant_blocks.h"
#include <immintrin.h>
#include <string.h>
#include "kvwise/memory.h"

#define KW_INLINE static inline __attribute__((always_inline))

#define Q4K_X16_BLK 2368
#define Q4K_OFF_SC 2048
#define Q4K_OFF_MN 2176
#define Q4K_OFF_D 2304
#define Q4K_OFF_DMIN 2336
/* Bytes ahead the batched tile prefetches into L2 (as kernels_avx512.c's
 * KW_X16_PREFETCH: with 2..8 rows the tile is compute-bound, so DRAM needs
 * requests issued far ahead). One row gets no software prefetch. */
#define Q4K_PREFETCH 16384

/* Packs super-block i of rows 16g..16g+15. */
static void pack_group_superblock(const kw_matrix *W, int64_t g, int64_t i, uint8_t *dst) {
    uint16_t *dd = (uint16_t *)(dst + Q4K_OFF_D), *dm = (uint16_t *)(dst + Q4K_OFF_DMIN);
    for (int L = 0; L < 16; L++) {
        const kw_block_q4_K *b = (const kw_block_q4_K *)((const uint8_t *)W->data + (size_t)(16 * g + L) * W->row_bytes) + i;
        for (int p = 0; p < 32; p++) memcpy(dst + 64 * p + 4 * L, b->qs + 4 * p, 4);
        for (int s = 0; s < 8; s++) {
            uint8_t sc, m;
            kw_get_scale_min_k4(s, b->scales, &sc, &m);
            dst[Q4K_OFF_SC + 16 * s + L] = sc;
            dst[Q4K_OFF_MN + 32 * (s / 2) + 2 * L + (s & 1)] = m;
        }
        dd[L] = b->d;
        dm[L] = b->dmin;
    }
}

int kw_pack_q4k_x16(kw_matrix *W, kw_err *err) {
    int64_t groups = W->rows / 16, nb = W->cols / KW_QK_K;
    size_t bytes = KW_PACK_HDR_BYTES + (size_t)groups * (size_t)nb * Q4K_X16_BLK;
    uint8_t *p = kw_mem_alloc(KW_MEM_WEIGHTS, bytes);
    if (!p) return kw_err_set(err, "out of memory repacking a %lld x %lld q4_K matrix (%zu bytes)",
                              (long long)W->rows, (long long)W->cols, bytes);
    kw_advise_hugepages(p, bytes);   /* decode streams it every token: fewer TLB misses */
    kw_pack_hdr *h = (kw_pack_hdr *)p;
    memset(p, 0, KW_PACK_HDR_BYTES);
    h->magic = KW_PACK_MAGIC;
    h->format = KW_FMT_Q4_K_X16;
    h->packed_rows = groups * 16;
    h->nb = nb;
    for (int64_t g = 0; g < groups; g++)
        for (int64_t i = 0; i < nb; i++)
            pack_group_superblock(W, g, i, p + KW_PACK_HDR_BYTES + (size_t)(g * nb + i) * Q4K_X16_BLK);
    W->packed = p;
    return 0;
}

/* d + vpdpbusd(w, the 4 bytes at x in every lane), the broadcast folded into
 * the memory operand (as kernels_avx512.c's dpbusd_bcst). */
KW_INLINE __m512i q4k_dpbusd_bcst(__m512i d, __m512i w, const int32_t *x) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(d) : "v"(w), "m"(*x));
    return d;
}

/* The 8 per-32 sums of a Q8_K block as int16 word pairs (s32[t] = sums 2t, 2t+1). */
KW_INLINE void q8k_sums32(const kw_block_q8_K *xb, int32_t s32[4]) {
    __m256i bs = _mm256_loadu_si256((const __m256i *)xb->bsums);
    __m256i s = _mm256_madd_epi16(bs, _mm256_set1_epi16(1));   /* |sum| <= 32*128: fits int16 */
    _mm_storeu_si128((__m128i *)s32, _mm256_cvtepi32_epi16(s));
}

/* One group of 16 rows x C activation rows (Q8_K, xs bytes apart): y[c*ldy + L]. */
KW_INLINE void q4k_tile(const uint8_t *grp, int64_t nb, const uint8_t *x0, size_t xs, float *y, int64_t ldy,
                        const int C) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc[8];
    _Pragma("GCC unroll 8") for (int c = 0; c < C; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *blk = grp + (size_t)i * Q4K_X16_BLK;
        if (C > 1)
            _Pragma("GCC unroll 37") for (size_t o = 0; o < Q4K_X16_BLK; o += 64)
                _mm_prefetch((const char *)blk + Q4K_PREFETCH + o, _MM_HINT_T1);
        __m512 accb[8];
        _Pragma("GCC unroll 8") for (int s = 0; s < 8; s++) {
            const int j = s >> 1, hi = s & 1;
            __m512 fsc = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(blk + Q4K_OFF_SC + 16 * s))));
            __m512i w[8];
            _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
                __m512i p = _mm512_loadu_si512(blk + 64 * (8 * j + k));
                w[k] = _mm512_and_si512(hi ? _mm512_srli_epi16(p, 4) : p, m4);
            }
            _Pragma("GCC unroll 8") for (int c = 0; c < C; c++) {
                const kw_block_q8_K *xb = (const kw_block_q8_K *)(x0 + (size_t)c * xs) + i;
                const int32_t *xi = (const int32_t *)(xb->qs + 64 * j + 32 * hi);
                __m512i d0 = _mm512_setzero_si512(), d1 = _mm512_setzero_si512();
                _Pragma("GCC unroll 4") for (int k = 0; k < 8; k += 2) {   /* two chains: latency */
                    d0 = q4k_dpbusd_bcst(d0, w[k], xi + k);
                    d1 = q4k_dpbusd_bcst(d1, w[k + 1], xi + k + 1);
                }
                __m512 dot = _mm512_cvtepi32_ps(_mm512_add_epi32(d0, d1));   /* exact: |dot| <= 32*15*128 */
                accb[c] = s == 0 ? _mm512_mul_ps(dot, fsc) : _mm512_fmadd_ps(dot, fsc, accb[c]);
            }
        }
        __m512i mp[4];
        _Pragma("GCC unroll 4") for (int t = 0; t < 4; t++)
            mp[t] = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(blk + Q4K_OFF_MN + 32 * t)));
        __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + Q4K_OFF_D)));
        __m512 dmv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + Q4K_OFF_DMIN)));
        _Pragma("GCC unroll 8") for (int c = 0; c < C; c++) {
            const kw_block_q8_K *xb = (const kw_block_q8_K *)(x0 + (size_t)c * xs) + i;
            int32_t s32[4];
            q8k_sums32(xb, s32);
            __m512i im = _mm512_setzero_si512();
            _Pragma("GCC unroll 4") for (int t = 0; t < 4; t++)
                im = _mm512_dpwssd_epi32(im, mp[t], _mm512_set1_epi32(s32[t]));   /* exact: <= 8*63*4096 */
            __m512 dx = _mm512_set1_ps(xb->d);
            acc[c] = _mm512_fmadd_ps(accb[c], _mm512_mul_ps(dv, dx), acc[c]);
            acc[c] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(im), _mm512_mul_ps(dmv, dx), acc[c]);
        }
    }
    _Pragma("GCC unroll 8") for (int c = 0; c < C; c++) _mm512_storeu_ps(y + (size_t)c * (size_t)ldy, acc[c]);
}

#define Q4K_SWITCH(...)                          \
    switch (C) {                                 \
    case 1: q4k_tile(__VA_ARGS__, 1); break;     \
    case 2: q4k_tile(__VA_ARGS__, 2); break;     \
    case 3: q4k_tile(__VA_ARGS__, 3); break;     \
    case 4: q4k_tile(__VA_ARGS__, 4); break;     \
    case 5: q4k_tile(__VA_ARGS__, 5); break;     \
    case 6: q4k_tile(__VA_ARGS__, 6); break;     \
    case 7: q4k_tile(__VA_ARGS__, 7); break;     \
    default: q4k_tile(__VA_ARGS__, 8); break;    \
    }

int64_t kw_gemm_q4k_x16(const kw_matrix *W, int64_t r0, int64_t r1, const void *X, size_t xs, int64_t nx, float *Y,
                        int64_t ldy) {
    const kw_pack_hdr *h = W->packed;
    if (!h || h->magic != KW_PACK_MAGIC || h->format != KW_FMT_Q4_K_X16 || r0 % 16) return r0;
    int64_t end = r1 < h->packed_rows ? r1 : h->packed_rows;
    end -= (end - r0) % 16;
    const uint8_t *base = (const uint8_t *)W->packed + KW_PACK_HDR_BYTES;
    for (int64_t r = r0; r < end; r += 16) {
        const uint8_t *grp = base + (size_t)(r / 16) * (size_t)h->nb * Q4K_X16_BLK;
        for (int64_t i = 0; i < nx; i += 8) {
            int C = (int)(nx - i < 8 ? nx - i : 8);
            Q4K_SWITCH(grp, h->nb, (const uint8_t *)X + (size_t)i * xs, xs, Y + i * ldy + r, ldy)
        }
    }
    return end > r0 ? end : r0;
}
