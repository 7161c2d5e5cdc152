/* kquant_avx512.c - packed Q4_K for the AVX-512 VNNI family: the load-time
 * repack (kw_pack_k_x16, format KW_FMT_Q4_K_X16) and the kernels that read
 * it (kw_gemm_k_x16: decode, batched decode and prefill).
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
 * results do not depend on the thread split or on batch composition.
 *
 * Q6_K (format KW_FMT_Q6_K_X16) the same way, 3392 bytes per group and
 * super-block (212 per row; the original block is 210):
 *   [0, 3072)     ql words transposed as above (part p: row L's ql[4p..4p+3])
 *                 and qh words (part q: row L's qh[4q..4q+3]), per half h
 *                 and k = 0..7 the three parts ql 16h+k, ql 16h+8+k, qh 8h+k
 *                 that the one-row tile reads together, in that order
 *                 (q6k_ql_off/qh_off): decode reads the block in address
 *                 order, one stream. Laid out for the batched tile's first
 *                 touch instead (ql 16h+k with qh 8h+k, ql 16h+8.. apart),
 *                 decode read two interleaved streams and one thread
 *                 streamed 11 GB/s from DRAM against 31 in address order
 *                 (27 against 11 in bench_kernels, two threads 33 against 21);
 *   [3072, 3328)  int8 scales in pairs, byte 32t+2L+e = row L's sc[2t+e];
 *   [3328, 3360)  the 16 rows' F16 d; 32 bytes of padding so every block
 *                 starts on a cache line (at 3360 bytes every other block's
 *                 64-byte loads straddled two lines: GEMV 9 -> 16.5 GB/s).
 * Values are the unsigned levels u = q + 32 (0..63): per 16-value sub-block
 * j one exact vpdpbusd chain, sc_j*dot_j exact in float (|.| <= 128*16*63*
 * 128 < 2^24), and the offset 32*sum_j sc_j*bsum_j an exact vpdpwssd of the
 * scale pairs with the Q8_K bsums, applied once per super-block. */
#include "tensor/kernels.h"
#include "tensor/quant_blocks.h"
#include <immintrin.h>
#include "tensor/x16_avx512.h"
#include <string.h>
#include "kvwise/memory.h"

#define KW_INLINE static inline __attribute__((always_inline))

#define Q4K_X16_BLK 2368
/* Q5_K: the same with the 16 rows' qh words (8 parts of 64 bytes: row L's
 * qh[4k..4k+3]) and the rest 512 bytes further: 2880 bytes (45 cache lines,
 * 180 per row; the original block is 176). The one-row tile reads qh part k
 * with part k (sub-blocks 0 and 1), so qh part k sits right after it:
 * [part 0, qh 0, part 1, qh 1, .., part 7, qh 7, part 8, .., part 31]
 * (k45_part_off, k45_qh_off), one stream in address order. With the qh
 * parts after the 32 (two interleaved streams) one thread streamed 12 GB/s
 * of Q5_K from DRAM, Q4_K's tile 23. */
#define Q5K_X16_BLK 2880
#define K45_BLK(q5) ((q5) ? Q5K_X16_BLK : Q4K_X16_BLK)
#define K45_OFF_SC(q5) ((q5) ? 2560 : 2048)
#define K45_OFF_MN(q5) (K45_OFF_SC(q5) + 128)
#define K45_OFF_D(q5) (K45_OFF_SC(q5) + 256)
#define K45_OFF_DMIN(q5) (K45_OFF_SC(q5) + 288)

KW_INLINE size_t k45_part_off(const int q5, int p) { return (size_t)(q5 ? (p < 8 ? 128 * p : 64 * p + 512) : 64 * p); }
KW_INLINE size_t k45_qh_off(int k) { return (size_t)(128 * k + 64); }   /* Q5_K only */
/* Bytes ahead the batched tile prefetches into L2 (as kernels_avx512.c's
 * KW_X16_PREFETCH: with 2..8 rows the tile is compute-bound, so DRAM needs
 * requests issued far ahead). K_PF_SPREAD: one row (decode) prefetches the
 * next block into L1 (T0), one line for every line it reads, at the same
 * offset one block ahead, so requests leave at the rate lines are used.
 * The whole next block in a burst at the start of a block (37-53
 * prefetches at once, more than the L1 miss buffers hold) streamed Q4_K at
 * 65% of one core's read bandwidth; spread, 91% (2 threads: 70% -> 87%).
 * The one-row tiles prefetch only where the CPU takes a decode prefetch
 * (kw_decode_prefetch_bytes: Intel, as the Q4_0/Q8_0 tiles): on AMD (Zen 4)
 * the hardware prefetcher alone does better, one thread streaming Q4_K 22
 * -> 25.5 GB/s and Q5_K 21 -> 27, two threads in the host's fast state
 * Q4_K 39 -> 50 (bench_kernels --no-gemm, alternating). */
#define Q4K_PREFETCH 16384

/* Packs super-block i of rows 16g..16g+15 (Q4_K, or Q5_K when q5). */
static void pack_group_superblock(const kw_matrix *W, int q5, int64_t g, int64_t i, uint8_t *dst) {
    uint16_t *dd = (uint16_t *)(dst + K45_OFF_D(q5)), *dm = (uint16_t *)(dst + K45_OFF_DMIN(q5));
    for (int L = 0; L < 16; L++) {
        const uint8_t *row = (const uint8_t *)W->data + (size_t)(16 * g + L) * W->row_bytes;
        /* Q4_K and Q5_K share the head (d, dmin, scales[12]); Q5_K has qh[32] before qs */
        const kw_block_q4_K *b = (const kw_block_q4_K *)row + i;
        const kw_block_q5_K *b5 = (const kw_block_q5_K *)row + i;
        const uint8_t *qs = q5 ? b5->qs : b->qs, *scales = q5 ? b5->scales : b->scales;
        for (int p = 0; p < 32; p++) memcpy(dst + k45_part_off(q5, p) + 4 * L, qs + 4 * p, 4);
        if (q5)
            for (int k = 0; k < 8; k++) memcpy(dst + k45_qh_off(k) + 4 * L, b5->qh + 4 * k, 4);
        for (int s = 0; s < 8; s++) {
            uint8_t sc, m;
            kw_get_scale_min_k4(s, scales, &sc, &m);
            dst[K45_OFF_SC(q5) + 16 * s + L] = sc;
            dst[K45_OFF_MN(q5) + 32 * (s / 2) + 2 * L + (s & 1)] = m;
        }
        dd[L] = q5 ? b5->d : b->d;
        dm[L] = q5 ? b5->dmin : b->dmin;
    }
}

static int pack_k45(kw_matrix *W, int q5, kw_pack_arena *a, kw_err *err) {
    int64_t groups = W->rows / 16, nb = W->cols / KW_QK_K;
    uint8_t *p = kw_pack_alloc(W, a, q5 ? KW_FMT_Q5_K_X16 : KW_FMT_Q4_K_X16, groups * 16, nb,
                               (size_t)groups * (size_t)nb * K45_BLK(q5), err);
    if (!p) return kw_pack_missing(a);
    for (int64_t g = 0; g < groups; g++)
        for (int64_t i = 0; i < nb; i++)
            pack_group_superblock(W, q5, g, i, p + KW_PACK_HDR_BYTES + (size_t)(g * nb + i) * K45_BLK(q5));
    W->packed = p;
    return 0;
}


/* The 8 per-32 sums of a Q8_K block as int16 word pairs (s32[t] = sums 2t, 2t+1). */
KW_INLINE void q8k_sums32(const kw_block_q8_K *xb, int32_t s32[4]) {
    __m256i bs = _mm256_loadu_si256((const __m256i *)xb->bsums);
    __m256i s = _mm256_madd_epi16(bs, _mm256_set1_epi16(1));   /* |sum| <= 32*128: fits int16 */
    _mm_storeu_si128((__m128i *)s32, _mm256_cvtepi32_epi16(s));
}

/* Moves bit s of every byte to bit 4 (the rest is masked off by the caller). */
KW_INLINE __m512i q5k_hbit(__m512i h, const int s) {
    if (s < 4) return _mm512_slli_epi16(h, 4 - s);
    if (s > 4) return _mm512_srli_epi16(h, s - 4);
    return h;
}

/* acc + accb * d * dx - (sum_s m_s * bsum32_s) * dmin * dx for one
 * super-block: the mins as an exact vpdpwssd of the min pairs with the
 * Q8_K 32-value sums. Both Q4_K / Q5_K tiles end a block with it. */
KW_INLINE __m512 q45k_finish(const uint8_t *blk, const int q5, const kw_block_q8_K *xb, __m512 accb, __m512 acc) {
    int32_t s32[4];
    q8k_sums32(xb, s32);
    __m512i im = _mm512_setzero_si512();
    _Pragma("GCC unroll 4") for (int t = 0; t < 4; t++) {
        __m512i mp = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(blk + K45_OFF_MN(q5) + 32 * t)));
        im = _mm512_dpwssd_epi32(im, mp, _mm512_set1_epi32(s32[t]));   /* exact: <= 8*63*4096 */
    }
    __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + K45_OFF_D(q5))));
    __m512 dmv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + K45_OFF_DMIN(q5))));
    __m512 dx = _mm512_set1_ps(xb->d);
    acc = _mm512_fmadd_ps(accb, _mm512_mul_ps(dv, dx), acc);
    return _mm512_fnmadd_ps(_mm512_cvtepi32_ps(im), _mm512_mul_ps(dmv, dx), acc);
}

/* Sub-block s's scales as floats, lanes = rows. */
KW_INLINE __m512 q45k_scale(const uint8_t *blk, const int q5, int s) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(blk + K45_OFF_SC(q5) + 16 * s))));
}

/* One group of 16 rows x C activation rows (Q8_K, xs bytes apart): y[c*ldy + L].
 * Q5_K (q5): each level also gets bit s of its qh byte as 16. C >= 2: one
 * activation row (decode) goes to q45k_tile_row. */
KW_INLINE void q45k_tile(const uint8_t *grp, int64_t nb, const uint8_t *x0, size_t xs, float *y, int64_t ldy,
                         const int q5, const int C) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m10 = _mm512_set1_epi8(0x10);
    const size_t blkb = K45_BLK(q5);
    __m512 acc[8];
    _Pragma("GCC unroll 8") for (int c = 0; c < C; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *blk = grp + (size_t)i * blkb;
        _Pragma("GCC unroll 45") for (size_t o = 0; o < blkb; o += 64)
            _mm_prefetch((const char *)blk + Q4K_PREFETCH + o, _MM_HINT_T1);
        __m512 accb[8];
        _Pragma("GCC unroll 8") for (int s = 0; s < 8; s++) {
            const int j = s >> 1, hi = s & 1;
            __m512 fsc = q45k_scale(blk, q5, s);
            __m512i w[8];
            _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
                __m512i p = _mm512_loadu_si512(blk + k45_part_off(q5, 8 * j + k));
                w[k] = _mm512_and_si512(hi ? _mm512_srli_epi16(p, 4) : p, m4);
                if (q5)
                    w[k] = _mm512_or_si512(w[k], _mm512_and_si512(q5k_hbit(_mm512_loadu_si512(blk + k45_qh_off(k)), s), m10));
            }
            _Pragma("GCC unroll 8") for (int c = 0; c < C; c++) {
                const kw_block_q8_K *xb = (const kw_block_q8_K *)(x0 + (size_t)c * xs) + i;
                const int32_t *xi = (const int32_t *)(xb->qs + 64 * j + 32 * hi);
                __m512i d0 = _mm512_setzero_si512(), d1 = _mm512_setzero_si512();
                _Pragma("GCC unroll 4") for (int k = 0; k < 8; k += 2) {   /* two chains: latency */
                    d0 = kw_dpbusd_bcst(d0, w[k], xi + k);
                    d1 = kw_dpbusd_bcst(d1, w[k + 1], xi + k + 1);
                }
                __m512 dot = _mm512_cvtepi32_ps(_mm512_add_epi32(d0, d1));   /* exact: |dot| <= 32*31*128 */
                accb[c] = s == 0 ? _mm512_mul_ps(dot, fsc) : _mm512_fmadd_ps(dot, fsc, accb[c]);
            }
        }
        _Pragma("GCC unroll 8") for (int c = 0; c < C; c++)
            acc[c] = q45k_finish(blk, q5, (const kw_block_q8_K *)(x0 + (size_t)c * xs) + i, accb[c], acc[c]);
    }
    _Pragma("GCC unroll 8") for (int c = 0; c < C; c++) _mm512_storeu_ps(y + (size_t)c * (size_t)ldy, acc[c]);
}

/* Q4_K / Q5_K for one activation row (decode). Each part is loaded once
 * and gives both sub-blocks of its pair (low nibbles 2j, high nibbles
 * 2j+1), where q45k_tile loads and masks it per sub-block: twice the loads
 * and masks, and one thread streamed ~8 GB/s of Q4_K (packed Q4_0: 12.6).
 * The sub-block dots are exact integers either way and the float steps
 * after them are q45k_tile's, in its order (s = 0..7), so the outputs are
 * q45k_tile's bit for bit. */
KW_INLINE void q45k_tile_row(const uint8_t *grp, int64_t nb, const uint8_t *x0, float *y, const int q5, const int pf_on) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), mf0 = _mm512_set1_epi8((char)0xF0), m10 = _mm512_set1_epi8(0x10);
    const size_t blkb = K45_BLK(q5);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *blk = grp + (size_t)i * blkb;
        const kw_block_q8_K *xb = (const kw_block_q8_K *)x0 + i;
        /* the next block, one line per line read here (see K_PF_SPREAD) */
        const char *pf = (const char *)blk + blkb;
        if (pf_on) _Pragma("GCC unroll 5") for (size_t o = K45_OFF_SC(q5); o < blkb; o += 64) _mm_prefetch(pf + o, _MM_HINT_T0);
        __m512 accb = _mm512_setzero_ps();
        _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
            const int32_t *xl = (const int32_t *)(xb->qs + 64 * j), *xh = xl + 8;
            __m512i d[2][2] = {{_mm512_setzero_si512(), _mm512_setzero_si512()},
                               {_mm512_setzero_si512(), _mm512_setzero_si512()}};
            _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
                if (pf_on) _mm_prefetch(pf + k45_part_off(q5, 8 * j + k), _MM_HINT_T0);
                if (pf_on && q5 && j == 0) _mm_prefetch(pf + k45_qh_off(k), _MM_HINT_T0);   /* qh: read from j = 0 */
                __m512i p = _mm512_loadu_si512(blk + k45_part_off(q5, 8 * j + k));
                /* Q4_K: the high nibbles stay in place (16 x the level): one AND
                   instead of a shift and an AND; their dot is scaled back below */
                __m512i lo = _mm512_and_si512(p, m4),
                        hi = q5 ? _mm512_and_si512(_mm512_srli_epi16(p, 4), m4) : _mm512_and_si512(p, mf0);
                if (q5) {
                    __m512i qh = _mm512_loadu_si512(blk + k45_qh_off(k));
                    lo = _mm512_or_si512(lo, _mm512_and_si512(q5k_hbit(qh, 2 * j), m10));
                    hi = _mm512_or_si512(hi, _mm512_and_si512(q5k_hbit(qh, 2 * j + 1), m10));
                }
                d[0][k & 1] = kw_dpbusd_bcst(d[0][k & 1], lo, xl + k);
                d[1][k & 1] = kw_dpbusd_bcst(d[1][k & 1], hi, xh + k);
            }
            _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {   /* q45k_tile's float steps, in its order */
                const int s = 2 * j + h;
                /* a Q4_K high dot is 16 x the true one (exact: < 2^24) and its
                   scale 1/16 x: the product is the same real number, the same bits */
                __m512 dot = _mm512_cvtepi32_ps(_mm512_add_epi32(d[h][0], d[h][1]));
                __m512 fsc = q45k_scale(blk, q5, s);
                if (h && !q5) fsc = _mm512_mul_ps(fsc, _mm512_set1_ps(0.0625f));
                accb = s == 0 ? _mm512_mul_ps(dot, fsc) : _mm512_fmadd_ps(dot, fsc, accb);
            }
        }
        acc = q45k_finish(blk, q5, xb, accb, acc);
    }
    _mm512_storeu_ps(y, acc);
}

/* ---------------- Q6_K ---------------- */
#define Q6K_X16_BLK 3392   /* 53 cache lines: every block starts 64-byte aligned */
#define Q6K_OFF_SC 3072
#define Q6K_OFF_D 3328
/* Offsets of ql part p and qh part q: 192-byte steps of (ql 16h+k, ql 16h+8+k, qh 8h+k), the one-row tile's order. */
KW_INLINE size_t q6k_ql_off(int p) {
    int h = p / 16, r = p % 16;
    return (size_t)(1536 * h + 192 * (r % 8) + 64 * (r / 8));
}
KW_INLINE size_t q6k_qh_off(int q) { return (size_t)(1536 * (q / 8) + 192 * (q % 8) + 128); }

static void pack_group_superblock_q6(const kw_matrix *W, int64_t g, int64_t i, uint8_t *dst) {
    uint16_t *dd = (uint16_t *)(dst + Q6K_OFF_D);
    for (int L = 0; L < 16; L++) {
        const kw_block_q6_K *b = (const kw_block_q6_K *)((const uint8_t *)W->data + (size_t)(16 * g + L) * W->row_bytes) + i;
        for (int p = 0; p < 32; p++) memcpy(dst + q6k_ql_off(p) + 4 * L, b->ql + 4 * p, 4);
        for (int q = 0; q < 16; q++) memcpy(dst + q6k_qh_off(q) + 4 * L, b->qh + 4 * q, 4);
        for (int j = 0; j < 16; j++) dst[Q6K_OFF_SC + 32 * (j / 2) + 2 * L + (j & 1)] = (uint8_t)b->scales[j];
        dd[L] = b->d;
    }
    memset(dst + Q6K_OFF_D + 32, 0, Q6K_X16_BLK - Q6K_OFF_D - 32);
}

static int pack_q6k(kw_matrix *W, kw_pack_arena *a, kw_err *err) {
    int64_t groups = W->rows / 16, nb = W->cols / KW_QK_K;
    uint8_t *p = kw_pack_alloc(W, a, KW_FMT_Q6_K_X16, groups * 16, nb, (size_t)groups * (size_t)nb * Q6K_X16_BLK, err);
    if (!p) return kw_pack_missing(a);
    for (int64_t g = 0; g < groups; g++)
        for (int64_t i = 0; i < nb; i++)
            pack_group_superblock_q6(W, g, i, p + KW_PACK_HDR_BYTES + (size_t)(g * nb + i) * Q6K_X16_BLK);
    W->packed = p;
    return 0;
}

/* Moves bits 2a, 2a+1 of every byte to bits 4, 5 (the rest is masked off by the caller). */
KW_INLINE __m512i q6k_hbits(__m512i h, const int a) {
    switch (a) {
    case 0: return _mm512_slli_epi16(h, 4);
    case 1: return _mm512_slli_epi16(h, 2);
    case 2: return h;
    default: return _mm512_srli_epi16(h, 2);
    }
}

/* Row L's int8 scales of sub-blocks 2t and 2t+1 (the pair at t = 4h + a)
 * as floats, lanes = rows. */
KW_INLINE void q6k_scale_pair(const uint8_t *blk, int t, __m512 *fs0, __m512 *fs1) {
    __m512i sp = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(blk + Q6K_OFF_SC + 32 * t)));
    *fs0 = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(sp, 16), 16));
    *fs1 = _mm512_cvtepi32_ps(_mm512_srai_epi32(sp, 16));
}

/* accb + dot0 * sc0 + dot1 * sc1 for one quarter (the first quarter of a
 * super-block starts accb): the float steps both Q6_K tiles share, in this
 * order, so they give the same bits. */
KW_INLINE __m512 q6k_add_quarter(__m512 accb, int first, __m512i d0, __m512i d1, __m512 fs0, __m512 fs1) {
    __m512 p0 = _mm512_mul_ps(_mm512_cvtepi32_ps(d0), fs0);   /* exact (see the top) */
    accb = first ? p0 : _mm512_add_ps(accb, p0);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), fs1, accb);
}

/* acc + (accb - 32 * sum_j sc_j * bsum_j) * d * dx for one super-block:
 * the offset is an exact vpdpwssd of the scale pairs with the Q8_K bsums. */
KW_INLINE __m512 q6k_finish(const uint8_t *blk, __m512 dv, const kw_block_q8_K *xb, __m512 accb, __m512 acc) {
    const int32_t *bs = (const int32_t *)xb->bsums;
    __m512i im = _mm512_setzero_si512();
    _Pragma("GCC unroll 8") for (int t = 0; t < 8; t++) {
        __m512i sp = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(blk + Q6K_OFF_SC + 32 * t)));
        im = _mm512_dpwssd_epi32(im, sp, _mm512_set1_epi32(bs[t]));   /* exact: <= 16*128*2048 */
    }
    __m512 ddx = _mm512_mul_ps(dv, _mm512_set1_ps(xb->d));
    acc = _mm512_fmadd_ps(accb, ddx, acc);
    return _mm512_fnmadd_ps(_mm512_cvtepi32_ps(im), _mm512_mul_ps(ddx, _mm512_set1_ps(32.0f)), acc);
}

KW_INLINE void q6k_tile(const uint8_t *grp, int64_t nb, const uint8_t *x0, size_t xs, float *y, int64_t ldy,
                        const int C) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    __m512 acc[8];
    _Pragma("GCC unroll 8") for (int c = 0; c < C; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *blk = grp + (size_t)i * Q6K_X16_BLK;
        if (C > 1)
        _Pragma("GCC unroll 53") for (size_t o = 0; o < Q6K_X16_BLK; o += 64)
            _mm_prefetch((const char *)blk + Q4K_PREFETCH + o, _MM_HINT_T1);
        __m512 accb[8];
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++)
        _Pragma("GCC unroll 4") for (int aa = 0; aa < 4; aa++) {
            const int a = (aa & 1) * 2 + (aa >> 1);   /* 0, 2, 1, 3: values 128h + 32a .. +31 */
            __m512 fs0, fs1;
            q6k_scale_pair(blk, 4 * h + a, &fs0, &fs1);
            __m512i w[8];
            _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
                __m512i l = _mm512_loadu_si512(blk + q6k_ql_off(16 * h + 8 * (a & 1) + k));
                __m512i hq = _mm512_loadu_si512(blk + q6k_qh_off(8 * h + k));
                w[k] = _mm512_or_si512(_mm512_and_si512(a >> 1 ? _mm512_srli_epi16(l, 4) : l, m4),
                                       _mm512_and_si512(q6k_hbits(hq, a), m30));
            }
            _Pragma("GCC unroll 8") for (int c = 0; c < C; c++) {
                const kw_block_q8_K *xb = (const kw_block_q8_K *)(x0 + (size_t)c * xs) + i;
                const int32_t *xi = (const int32_t *)(xb->qs + 128 * h + 32 * a);
                __m512i d0 = _mm512_setzero_si512(), d1 = _mm512_setzero_si512();
                _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {   /* sub-blocks 2(4h+a) and +1 */
                    d0 = kw_dpbusd_bcst(d0, w[k], xi + k);
                    d1 = kw_dpbusd_bcst(d1, w[k + 4], xi + k + 4);
                }
                accb[c] = q6k_add_quarter(accb[c], h == 0 && aa == 0, d0, d1, fs0, fs1);
            }
        }
        __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + Q6K_OFF_D)));
        _Pragma("GCC unroll 8") for (int c = 0; c < C; c++)
            acc[c] = q6k_finish(blk, dv, (const kw_block_q8_K *)(x0 + (size_t)c * xs) + i, accb[c], acc[c]);
    }
    _Pragma("GCC unroll 8") for (int c = 0; c < C; c++) _mm512_storeu_ps(y + (size_t)c * (size_t)ldy, acc[c]);
}

/* Q6_K for one activation row (decode). Per half h and k = 0..7 the parts
 * ql 16h+k, ql 16h+8+k and qh 8h+k are loaded once and give the levels of
 * all four quarters (a = 0..3: values 128h + 32a + 4k..+3; ql low / high
 * nibbles, qh bits 2a, 2a+1), where q6k_tile loads and unpacks them per
 * quarter (~600 uops per 16 rows and super-block: one thread streamed only
 * 17 GB/s, Q4_K's tile 28). The sub-block dots are exact integers either
 * way and the float steps after them are q6k_tile's, in its order, so the
 * outputs are q6k_tile's bit for bit (results do not depend on batch size).
 * Loading a half's parts up front paid, on the Intel host, only with the
 * next block prefetched into L1 (T0) as this one starts (one thread
 * streamed 11.6 GB/s without, 22.6 with); on Zen 4, with the block in read
 * order, the hardware prefetcher alone keeps up (pf_on = 0, K_PF_SPREAD). */
KW_INLINE void q6k_tile_row(const uint8_t *grp, int64_t nb, const uint8_t *x0, float *y, const int pf_on) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *blk = grp + (size_t)i * Q6K_X16_BLK;
        const kw_block_q8_K *xb = (const kw_block_q8_K *)x0 + i;
        /* the next block, one line per line read here (see K_PF_SPREAD) */
        const char *pf = (const char *)blk + Q6K_X16_BLK;
        if (pf_on) _Pragma("GCC unroll 5") for (size_t o = Q6K_OFF_SC; o < Q6K_X16_BLK; o += 64) _mm_prefetch(pf + o, _MM_HINT_T0);
        __m512 accb = _mm512_setzero_ps();
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            __m512i d[4][2];
            _Pragma("GCC unroll 4") for (int a = 0; a < 4; a++) d[a][0] = d[a][1] = _mm512_setzero_si512();
            _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
                if (pf_on) {
                    _mm_prefetch(pf + q6k_ql_off(16 * h + k), _MM_HINT_T0);
                    _mm_prefetch(pf + q6k_ql_off(16 * h + 8 + k), _MM_HINT_T0);
                    _mm_prefetch(pf + q6k_qh_off(8 * h + k), _MM_HINT_T0);
                }
                __m512i l0 = _mm512_loadu_si512(blk + q6k_ql_off(16 * h + k));
                __m512i l1 = _mm512_loadu_si512(blk + q6k_ql_off(16 * h + 8 + k));
                __m512i hq = _mm512_loadu_si512(blk + q6k_qh_off(8 * h + k));
                __m512i w[4];
                w[0] = _mm512_or_si512(_mm512_and_si512(l0, m4), _mm512_and_si512(_mm512_slli_epi16(hq, 4), m30));
                w[1] = _mm512_or_si512(_mm512_and_si512(l1, m4), _mm512_and_si512(_mm512_slli_epi16(hq, 2), m30));
                w[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l0, 4), m4), _mm512_and_si512(hq, m30));
                w[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l1, 4), m4),
                                       _mm512_and_si512(_mm512_srli_epi16(hq, 2), m30));
                _Pragma("GCC unroll 4") for (int a = 0; a < 4; a++)
                    d[a][k >> 2] = kw_dpbusd_bcst(d[a][k >> 2], w[a], (const int32_t *)(xb->qs + 128 * h + 32 * a + 4 * k));
            }
            _Pragma("GCC unroll 4") for (int aa = 0; aa < 4; aa++) {   /* q6k_tile's float steps, in its order */
                const int a = (aa & 1) * 2 + (aa >> 1);
                __m512 fs0, fs1;
                q6k_scale_pair(blk, 4 * h + a, &fs0, &fs1);
                accb = q6k_add_quarter(accb, h == 0 && aa == 0, d[a][0], d[a][1], fs0, fs1);
            }
        }
        acc = q6k_finish(blk, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + Q6K_OFF_D))), xb, accb, acc);
    }
    _mm512_storeu_ps(y, acc);
}

enum { KQ_Q4K, KQ_Q5K, KQ_Q6K };

/* Packed groups of rows [r0, min(r1, packed_rows)) (r0 a multiple of 16,
 * as kw_matmul's chunks are); returns the first row not done. */
static int64_t gemm_kq_x16(const kw_matrix *W, int kind, int64_t r0, int64_t r1, const void *X, size_t xs,
                           int64_t nx, float *Y, int64_t ldy) {
    static const uint32_t fmts[] = {KW_FMT_Q4_K_X16, KW_FMT_Q5_K_X16, KW_FMT_Q6_K_X16};
    static const size_t blks[] = {Q4K_X16_BLK, Q5K_X16_BLK, Q6K_X16_BLK};
    const kw_pack_hdr *h = kw_packed_hdr(W, fmts[kind]);
    if (!h || r0 % 16) return r0;
    int64_t end = r1 < h->packed_rows ? r1 : h->packed_rows;
    end -= (end - r0) % 16;
    const size_t blkb = blks[kind];
    const int pf_on = kw_decode_prefetch_raw() != 0;   /* the one-row tiles' prefetch, per CPU (K_PF_SPREAD) */
    const uint8_t *base = (const uint8_t *)W->packed + KW_PACK_HDR_BYTES;
    for (int64_t r = r0; r < end; r += 16) {
        const uint8_t *grp = base + (size_t)(r / 16) * (size_t)h->nb * blkb;
        for (int64_t i = 0; i < nx; i += 8) {
            int C = (int)(nx - i < 8 ? nx - i : 8);
            const uint8_t *x0 = (const uint8_t *)X + (size_t)i * xs;
            float *y = Y + i * ldy + r;
            if (kind == KQ_Q6K && C == 1) {
                if (pf_on) q6k_tile_row(grp, h->nb, x0, y, 1);
                else q6k_tile_row(grp, h->nb, x0, y, 0);
            } else if (kind == KQ_Q6K) { KW_TILE_ROWS_SWITCH(C, q6k_tile, grp, h->nb, x0, xs, y, ldy) }
            else if (C == 1 && pf_on) q45k_tile_row(grp, h->nb, x0, y, kind == KQ_Q5K, 1);
            else if (C == 1) q45k_tile_row(grp, h->nb, x0, y, kind == KQ_Q5K, 0);
            else if (kind == KQ_Q5K) { KW_TILE_ROWS_SWITCH(C, q45k_tile, grp, h->nb, x0, xs, y, ldy, 1) }
            else { KW_TILE_ROWS_SWITCH(C, q45k_tile, grp, h->nb, x0, xs, y, ldy, 0) }
        }
    }
    return end > r0 ? end : r0;
}

int kw_pack_k_x16(kw_matrix *W, kw_pack_arena *a, kw_err *err) {
    switch (W->type) {
    case KW_TYPE_Q4_K: return pack_k45(W, 0, a, err);
    case KW_TYPE_Q5_K: return pack_k45(W, 1, a, err);
    case KW_TYPE_Q6_K: return pack_q6k(W, a, err);
    default: return 1;
    }
}

/* Each type through its own call, so that the kind stays a constant there. */
int64_t kw_gemm_k_x16(const kw_matrix *W, int64_t r0, int64_t r1, const void *X, size_t xs, int64_t nx, float *Y,
                      int64_t ldy) {
    switch (W->type) {
    case KW_TYPE_Q4_K: return gemm_kq_x16(W, KQ_Q4K, r0, r1, X, xs, nx, Y, ldy);
    case KW_TYPE_Q5_K: return gemm_kq_x16(W, KQ_Q5K, r0, r1, X, xs, nx, Y, ldy);
    case KW_TYPE_Q6_K: return gemm_kq_x16(W, KQ_Q6K, r0, r1, X, xs, nx, Y, ldy);
    default: return r0;
    }
}
