/* kernels_avx512.c - the AVX-512 kernel family (F/BW/VL/DQ + VNNI; BF16
 * dot products where the CPU has AVX512_BF16). Only called when
 * kw_cpu_info_get() reports these features.
 *
 * Integer path (Q4_0, Q5_0, Q8_0 weights x Q8_0 activations): weights are
 * turned into unsigned bytes u = q + o (o = 8, 16, 128), so one vpdpbusd
 * per pair of blocks gives sum(u*x); its accumulator starts at -o*sum(x),
 * computed once per activation block, which makes the result exactly
 * sum(q*x). Each 512-bit step covers two 32-value blocks; the int32 lanes
 * are converted to float and accumulated with the product of the two
 * blocks' scales. Tiles of up to 4 weight rows x 4 activation rows share
 * loads (GEMV for decode is the 1-column case, GEMM for prefill the rest).
 *
 * Activations for Q8_0 use this family's own layout (kw_matmul leaves room
 * for it): all 32*nb quants first, then nb float scales (the F16 value),
 * then nb int32 sums of the quants; two blocks are one contiguous 64-byte
 * load. The values are bit-identical to the scalar quantizer's.
 *
 * Packed Q4_0/Q8_0 (kw_matrix_pack): 16 rows interleaved per block so one
 * vpdpbusd with 4 broadcast activation bytes advances 16 rows at once; the
 * result lanes are the 16 outputs, so no horizontal sums are needed.
 *
 * Every output is produced by the same instruction sequence whatever tile
 * it falls in, so results do not depend on the thread split. */
#include "tensor/kernels.h"
#include "tensor/quant_blocks.h"
#include <immintrin.h>
#include "tensor/x16_avx512.h"
#include <string.h>
#include "kvwise/memory.h"

#define KW_INLINE static inline __attribute__((always_inline))

/* ---------------- activations: Q8_0 in split layout ---------------- */

static void act_q8_0_split(const float *x, void *dst, int64_t n) {
    int64_t nb = n / KW_QK;
    int8_t *qs = dst;
    float *ds = (float *)(qs + 32 * nb);
    int32_t *sums = (int32_t *)(ds + nb);
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t i = 0; i < nb; i++, x += KW_QK) {
        __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
        __m512 a = _mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1));
        float amax = _mm512_reduce_max_ps(a);
        float id = amax != 0.0f ? 127.f / amax : 0.0f;
        ds[i] = _cvtsh_ss(_cvtss_sh(amax / 127.f, _MM_FROUND_TO_NEAREST_INT));
        __m512 m = _mm512_set1_ps(id);
        __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, m));   /* MXCSR: round half to even */
        __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, m));
        sums[i] = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
        _mm_storeu_si128((__m128i *)(qs + 32 * i), _mm512_cvtsepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(qs + 32 * i + 16), _mm512_cvtsepi32_epi8(q1));
    }
}

/* [d(a) x8, d(b) x8] as floats from two F16 scales. */
KW_INLINE __m512 scales2(uint16_t a, uint16_t b) {
    __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)a | ((uint32_t)b << 16))));
    const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(f));
}

/* Unsigned weight bytes of blocks b and b+1 (b+1 absent: zeros). */
KW_INLINE __m512i wq_q8_0(const kw_block_q8_0 *w, int64_t b, int two) {
    __m256i lo = _mm256_loadu_si256((const __m256i *)w[b].qs);
    __m256i hi = two ? _mm256_loadu_si256((const __m256i *)w[b + 1].qs) : _mm256_set1_epi8(-128);
    __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    return _mm512_xor_si512(v, _mm512_set1_epi8(-128));
}

KW_INLINE __m512i nibbles2(const uint8_t *qa, const uint8_t *qb) {
    __m256i y = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)qa)),
                                        _mm_loadu_si128((const __m128i *)qb), 1);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i lo = _mm256_and_si256(y, m4), hi = _mm256_and_si256(_mm256_srli_epi16(y, 4), m4);
    __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);   /* [loA loB hiA hiB] */
    return _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));          /* [loA hiA loB hiB] */
}

static const uint8_t g_zero16[16];

KW_INLINE __m512i wq_q4_0(const kw_block_q4_0 *w, int64_t b, int two) {
    return nibbles2(w[b].qs, two ? w[b + 1].qs : g_zero16);
}

KW_INLINE __m512i wq_q5_0(const kw_block_q5_0 *w, int64_t b, int two) {
    __m512i v = nibbles2(w[b].qs, two ? w[b + 1].qs : g_zero16);
    uint32_t ha, hb = 0;
    memcpy(&ha, w[b].qh, 4);
    if (two) memcpy(&hb, w[b + 1].qh, 4);
    __mmask64 hm = (__mmask64)ha | ((__mmask64)hb << 32);
    return _mm512_or_si512(v, _mm512_maskz_mov_epi8(hm, _mm512_set1_epi8(0x10)));
}

/* One tile of R weight rows x C activation rows. */
#define KW_QTILE(NAME, BLK, WQ, OFF)                                                                      \
    KW_INLINE void NAME##_tile(const uint8_t *w0, size_t wrb, const uint8_t *x0, size_t xs, int64_t nb,  \
                               float *y, int64_t ldy, const int R, const int C) {                        \
        __m512 acc[4][4];                                                                                 \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                                               \
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) acc[r][c] = _mm512_setzero_ps();              \
        const __m512i off = _mm512_set1_epi8(OFF);                                                        \
        for (int64_t b = 0; b < nb; b += 2) {                                                             \
            int two = b + 1 < nb;                                                                         \
            __m512i xv[4], nc[4];                                                                         \
            __m512 dx[4];                                                                                 \
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {                                         \
                const int8_t *xq = (const int8_t *)(x0 + (size_t)c * xs);                                 \
                const float *xd = (const float *)(xq + 32 * nb);                                          \
                xv[c] = two ? _mm512_loadu_si512(xq + 32 * b)                                             \
                            : _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(xq + 32 * b))); \
                if (!two) xv[c] = _mm512_inserti64x4(xv[c], _mm256_setzero_si256(), 1);                  \
                nc[c] = _mm512_sub_epi32(_mm512_setzero_si512(),                                          \
                                         _mm512_dpbusd_epi32(_mm512_setzero_si512(), off, xv[c]));        \
                dx[c] = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(xd[b])),                 \
                                           _mm256_set1_ps(two ? xd[b + 1] : 0.0f), 1);                    \
            }                                                                                             \
            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                                         \
                const BLK *w = (const BLK *)(w0 + (size_t)r * wrb);                                       \
                __m512i wv = WQ(w, b, two);                                                               \
                __m512 dw = scales2(w[b].d, two ? w[b + 1].d : 0);                                        \
                _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {                                     \
                    __m512i dot = _mm512_dpbusd_epi32(nc[c], wv, xv[c]);                                  \
                    acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, dx[c]),        \
                                                acc[r][c]);                                               \
                }                                                                                         \
            }                                                                                             \
        }                                                                                                 \
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++)                                               \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) y[c * ldy + r] = _mm512_reduce_add_ps(acc[r][c]); \
    }

KW_QTILE(q4_0, kw_block_q4_0, wq_q4_0, 8)
KW_QTILE(q5_0, kw_block_q5_0, wq_q5_0, 16)
KW_QTILE(q8_0, kw_block_q8_0, wq_q8_0, -128)

/* Rows outer (a 4-row weight tile stays in L1), activation rows inner. One
 * activation row (decode over rows as stored: the experts of a mixture)
 * takes the rows one at a time, so memory is read as one sequential
 * stream the hardware prefetcher follows: unpacked gemv one core Q8_0
 * 15 -> 19-20 GB/s, Q4_0 9 -> 18-19.5 (4 rows at a time: 4 streams 2 KiB
 * apart; 2 rows: slower still). A software prefetch 1 KiB ahead, which
 * helped the 4 streams, slows the one stream (two threads Q8_0 46-52 ->
 * 37-38 GB/s, Q4_0 39-41 -> 35-38), so there is none. */
#define KW_GEMM(NAME, NB_DIV) KW_GEMM2(NAME, NAME, NB_DIV)
#define KW_GEMM2(NAME, TILE, NB_DIV)                                                               \
    static void gemm_##NAME(const kw_matrix *W, int64_t r0, int64_t r1, const void *X, size_t xs, \
                            int64_t nx, float *Y, int64_t ldy) {                                   \
        int64_t nb = W->cols / (NB_DIV);                                                           \
        const uint8_t *wd = W->data;                                                               \
        int rstep = nx == 1 ? 1 : 4;                                                               \
        for (int64_t r = r0; r < r1; r += rstep) {                                                 \
            int R = (int)(r1 - r < rstep ? r1 - r : rstep);                                        \
            for (int64_t i = 0; i < nx; i += 4) {                                                  \
                int C = (int)(nx - i < 4 ? nx - i : 4);                                            \
                KW_TILE_SWITCH(TILE, wd + (size_t)r * W->row_bytes, W->row_bytes,                  \
                               (const uint8_t *)X + (size_t)i * xs, xs, nb, Y + i * ldy + r, ldy) \
            }                                                                                      \
        }                                                                                          \
    }

KW_GEMM2(q4_0_rows, q4_0, KW_QK)
KW_GEMM(q5_0, KW_QK)
KW_GEMM2(q8_0_rows, q8_0, KW_QK)

/* ---------------- packed Q4_0 / Q8_0: 16 rows interleaved ----------------
 * Per group of 16 rows and per pair of blocks, first the two blocks' 16 F16
 * row scales (2 x 32 bytes), then each block's quants, 256 (Q4_0) or 512
 * (Q8_0) bytes:
 *   Q4_0: 4 x 64 bytes; byte 4L+t of part j holds row L's value 4j+t in the
 *         low nibble and value 16+4j+t in the high nibble (unsigned 0..15);
 *   Q8_0: 8 x 64 bytes; byte 4L+t of part k is row L's value 4k+t + 128;
 * an odd last block's mate is zeros (kw_q0_quants / kw_q0_scales in
 * kernels.h). Unpacked, part k is a vector whose lane L holds row L's
 * values 4k..4k+3, which vpdpbusd multiplies with activation bytes
 * 4k..4k+3 broadcast.
 * Pairs put every block's quants on a cache-line start, so decode (one
 * activation row) reads them with non-temporal loads (vmovntdqa, which
 * needs 64-byte alignment): on this host (AMD EPYC, whose 32 MiB L3 takes
 * every line L2 evicts) two threads stream 68.5 GB/s with them against
 * 56.9 with plain loads in the host's fast state (bandwidth.c). The
 * earlier layout (each block's scales right after its quants, 288 / 544
 * bytes) left every other block 32 bytes off a line. Measured in one
 * process alternating 16-token decode bursts (1B shape, two threads,
 * bench/ab.sh --same), ratios to the earlier layout: these pairs Q8_0
 * 1.05-1.10x, Q4_0 1.07x (its output matrix is Q8_0), 4-row prefill (the
 * batch-of-4 tile) Q8_0 1.02x, Q4_0 0.99x; the same pairs with plain
 * loads 0.95x Q8_0 decode; the scales after the pair's quants (reads go
 * lines 0-7, 16, 8-15: not monotonic) 0.72x with plain loads; all scales
 * of a group after all its quants (a second stream) 0.93x. */
/* Activation rows from which the tiled GEMM (gemm_avx512.c) takes over; up
 * to 16 rows (batched decode, short prefill chunks) the per-group tile
 * streams each block once for all rows (tiles of 8) with its far prefetch.
 * From DRAM the GEMM, which has no prefetch, was slower at every size up to
 * 64 rows once the tile prefetched 16 KiB ahead (65536 x 2048, one thread,
 * CPU time, GEMM vs tile: Q4_0 n=9 11.8 vs 7.3 ms, n=16 17.2 vs 12.4, n=32
 * 30.4 vs 26.9, n=64 55.1 vs 52.9; Q8_0 n=16 24.4 vs 13.7; two threads Q4_0
 * n=12 7.1 vs 4.7, n=16 8.9 vs 6.4), and alike from L2 (512 rows). 16 keeps
 * the GEMM for prefill chunks, where it keeps weights in L2 across tiles. */
#define KW_X16_GEMM_MIN_ROWS 17
#define KW_FMT_Q4_0_X16 1u
#define KW_FMT_Q8_0_X16 2u
/* Bytes ahead in the group stream that the small-batch tile prefetches, into
 * L2 (prefetcht1). With 2..8 rows the tile is compute-bound (8 vpdpbusd +
 * a multiply and an FMA per block and row, all on the same two FP pipes),
 * so a core keeps DRAM busy only through requests issued far ahead: 1 KiB
 * into L1 leaves ~16 lines in flight, 16 KiB into L2 keeps enough
 * outstanding to hide the latency (4 rows of Q8_0 on a 65536 x 2048
 * matrix: 10.4 -> 5.2 ms). One-row decode does not use this distance: it
 * prefetches kw_decode_prefetch_bytes ahead, chosen per CPU (cpu.c). */
#define KW_X16_PREFETCH 16384

/* The blocks a tile runs over: nb blocks from the group pointer given,
 * which are the activation row's blocks b0.. of xnb (a K-panel of a
 * matrix stored in panels, or the whole row: b0 = 0, xnb = nb), and
 * whether the sums start from y's values (a panel after the first) or 0. */
typedef struct {
    int64_t nb, xnb, b0;
    int carry;
} x16_span;

/* S groups (grp[s], outputs at y[s]) x C activation rows, block by block,
 * every group's block of a step in turn: S = 1 is the tile, S > 1 the
 * lanes of x16_q8_lanes below. S * C <= 8 (the accumulators). */
KW_INLINE void x16_groups(const uint8_t *const *grp, const x16_span *k, const uint8_t *x0, size_t xs, float *const *y,
                          int64_t ldy, const int q4, const int C, const int S) {
    const size_t pb = kw_q0_run_bytes(16, q4);
    const int off = q4 ? 8 : 128;
    const int64_t nb = k->nb, xnb = k->xnb, b0 = k->b0;
    __m512 acc[8];
    _Pragma("GCC unroll 4") for (int s = 0; s < S; s++)
    _Pragma("GCC unroll 8") for (int c = 0; c < C; c++)
        acc[s * C + c] = k->carry ? _mm512_loadu_ps(y[s] + (size_t)c * (size_t)ldy) : _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        _Pragma("GCC unroll 4") for (int s = 0; s < S; s++) {
            const uint8_t *blk = kw_q0_quants(grp[s], 16, q4, b);
            if (C > 1) {   /* fetch ahead so DRAM streams meanwhile (see KW_X16_PREFETCH) */
                /* the pair's lines ahead, the first half at its even block, the rest at the odd one
                 * (all at the even block: 4 rows 0.95x on Q8_0) */
                const uint8_t *pair = grp[s] + (size_t)(b >> 1) * pb;
                const size_t ahead = KW_X16_PREFETCH;
                const size_t half = (pb / 64 + 1) / 2 * 64, o0 = (b & 1) ? half : 0, o1 = (b & 1) ? pb : half;
                for (size_t o = o0; o < o1; o += 64)
                    _mm_prefetch((const char *)pair + ahead + o, _MM_HINT_T1);
            }
            __m512i w[8];
            kw_x16_unpack(blk, q4, C == 1, w);
            __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)kw_q0_scales(grp[s], 16, q4, b)));
            _Pragma("GCC unroll 8") for (int c = 0; c < C; c++) {
                const uint8_t *xq = x0 + (size_t)c * xs;
                const float *xd0 = (const float *)(xq + 32 * xnb);   /* the row's scales, then its sums */
                const float *xd = xd0 + b0;
                const int32_t *xsum = (const int32_t *)(xd0 + xnb) + b0;
                const int32_t *xi = (const int32_t *)(xq + 32 * (b0 + b));
                __m512i d = _mm512_set1_epi32(-off * xsum[b]), d1 = _mm512_setzero_si512();
                _Pragma("GCC unroll 4") for (int k = 0; k < 8; k += 2) {   /* two chains: dpbusd latency */
                    d = kw_dpbusd_bcst(d, w[k], xi + k);
                    d1 = kw_dpbusd_bcst(d1, w[k + 1], xi + k + 1);
                }
                d = _mm512_add_epi32(d, d1);
                acc[s * C + c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(dw, _mm512_set1_ps(xd[b])),
                                                 acc[s * C + c]);
            }
        }
    }
    _Pragma("GCC unroll 4") for (int s = 0; s < S; s++)
    _Pragma("GCC unroll 8") for (int c = 0; c < C; c++) _mm512_storeu_ps(y[s] + (size_t)c * (size_t)ldy, acc[s * C + c]);
}

KW_INLINE void x16_tile(const uint8_t *grp, const x16_span *k, const uint8_t *x0, size_t xs, float *y, int64_t ldy,
                        const int q4, const int C) {
    x16_groups(&grp, k, x0, xs, &y, ldy, q4, C, 1);
}

/* Decode of packed Q4_0: one activation row against a run of groups, a
 * pair of blocks per step. It computes the sums of x16_tile with C = 1
 * with fewer instructions per byte (48 -> 29 per block): the pair's
 * address once per two blocks (the tile derives it from b per block); the
 * high nibbles masked in place (p & 0xF0, 16 times the value) instead of
 * shifted down and masked, their chain started at 16 times the offset and
 * shifted back once (vpsrad by 4 is exact: every term is a multiple of
 * 16); and the offsets -128 * sum of the activation's blocks made once per
 * call, not per group and block. The integer sum per row and block is the
 * tile's and the float steps are the same in the same order, so the
 * results are identical (test_x16_batch compares them with 2..16 rows,
 * which run the tile). Why it pays: a decode core is limited by the misses
 * it keeps in flight, and those are bounded by how many blocks' worth of
 * instructions fit in its out-of-order window while the oldest load
 * waits: fewer instructions per byte keep more misses in flight. */
KW_INLINE __m512 x16_q4_block(const uint8_t *q, const uint16_t *sc, const int32_t *xi, const int32_t *off16, float xd,
                              __m512 acc) {
    const __m512i lo4 = _mm512_set1_epi8(0x0F), hi4 = _mm512_set1_epi8((char)0xF0);
    __m512i p0 = kw_x16_load(q, 1), p1 = kw_x16_load(q + 64, 1);
    __m512i p2 = kw_x16_load(q + 128, 1), p3 = kw_x16_load(q + 192, 1);
    __m512i dl = _mm512_setzero_si512(), dh = _mm512_set1_epi32(*off16);
    dl = kw_dpbusd_bcst(dl, _mm512_and_si512(p0, lo4), xi + 0);
    dh = kw_dpbusd_bcst(dh, _mm512_and_si512(p0, hi4), xi + 4);
    dl = kw_dpbusd_bcst(dl, _mm512_and_si512(p1, lo4), xi + 1);
    dh = kw_dpbusd_bcst(dh, _mm512_and_si512(p1, hi4), xi + 5);
    dl = kw_dpbusd_bcst(dl, _mm512_and_si512(p2, lo4), xi + 2);
    dh = kw_dpbusd_bcst(dh, _mm512_and_si512(p2, hi4), xi + 6);
    dl = kw_dpbusd_bcst(dl, _mm512_and_si512(p3, lo4), xi + 3);
    dh = kw_dpbusd_bcst(dh, _mm512_and_si512(p3, hi4), xi + 7);
    __m512i d = _mm512_add_epi32(dl, _mm512_srai_epi32(dh, 4));
    __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)sc));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(dw, _mm512_set1_ps(xd)), acc);
}

/* One-row decode's software prefetch (kw_decode_prefetch_bytes): bytes
 * ahead of the pair being read, 0 for none; set by kw_kernels_avx512_init.
 * With it every pair step asks for the lines of the pair that far ahead
 * into L2 (prefetcht1; T0 and NTA were slower, and 4-6 KiB was the best
 * distance on the Intel host it was measured on). Prefetches change no
 * result. */
static size_t g_x16_pf;

/* pf: g_x16_pf or the constant 0 (the loop without prefetches). */
KW_INLINE void x16_q4_row(const uint8_t *grp, const x16_span *k, const uint8_t *x0, const int32_t *off16, float *y,
                          const size_t pf) {
    const int64_t nb = k->nb;
    const float *xd = (const float *)(x0 + 32 * k->xnb) + k->b0;
    const int32_t *xi = (const int32_t *)(x0 + 32 * k->b0);
    const size_t pb = kw_q0_run_bytes(16, 1);
    __m512 acc = k->carry ? _mm512_loadu_ps(y) : _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2, grp += pb, xi += 16) {
        const uint16_t *sc = (const uint16_t *)grp;
        if (pf) kw_prefetch_l2(grp + pf, pb);
        acc = x16_q4_block(grp + 64, sc, xi, off16 + b, xd[b], acc);
        acc = x16_q4_block(grp + 64 + 256, sc + 16, xi + 8, off16 + b + 1, xd[b + 1], acc);
    }
    if (b < nb) acc = x16_q4_block(grp + 64, (const uint16_t *)grp, xi, off16 + b, xd[b], acc);
    _mm512_storeu_ps(y, acc);
}

/* The one-row loops' offsets: -128 times the sum of each of the span's
 * blocks of the activation row X (its scales, then its sums, after its
 * quants), into off[0 .. k->nb), which holds KW_X16_ROW_MAX_NB. Q8_0 words
 * are stored + 128, and Q4_0's high-nibble chain runs at 16 times the
 * offset 8: both start from this. */
#define KW_X16_ROW_MAX_NB 512
static const int32_t *x16_row_offsets(const uint8_t *X, const x16_span *k, int32_t *off) {
    const int32_t *xsum = (const int32_t *)((const float *)(X + 32 * k->xnb) + k->xnb) + k->b0;
    for (int64_t b = 0; b < k->nb; b++) off[b] = -128 * xsum[b];
    return off;
}

/* Groups [g0, g1) of packed Q4_0 against one activation row; false
 * (nothing done) for more rows or a span longer than the offset table. */
static bool x16_q4_rows1(const uint8_t *base, size_t gb, const x16_span *k, int64_t g0, int64_t g1, const uint8_t *X,
                         int64_t nx, float *Y) {
    if (nx != 1 || k->nb > KW_X16_ROW_MAX_NB) return false;
    int32_t off16[KW_X16_ROW_MAX_NB];
    x16_row_offsets(X, k, off16);
    const size_t pf = g_x16_pf;
    if (pf) for (int64_t g = g0; g < g1; g++) x16_q4_row(base + (size_t)g * gb, k, X, off16, Y + 16 * g, pf);
    else for (int64_t g = g0; g < g1; g++) x16_q4_row(base + (size_t)g * gb, k, X, off16, Y + 16 * g, 0);
    return true;
}

/* Decode of packed Q8_0 in several streams. C activation rows (1..4)
 * against a run of groups: the run is cut into S contiguous lanes (each at
 * least KW_X16_LANE_BYTES; S <= 4 for one row, 2 for 2..4 rows) and group
 * i of every lane is computed at the same time, so a core has S sequential
 * streams in flight instead of one. With the vpdpbusd work between its
 * loads one stream does not keep a core's reads going (a bare read needs
 * only one); several do: one-row Q8_0 decode 1.06x, 4-token prefill
 * bursts with 2 lanes 1.09x. At 8 rows and more the lanes need 16
 * accumulators and lose (0.91x), so 5..16 rows keep x16_tile. Q4_0, with
 * half the loads per product, gains nothing and keeps one stream. The
 * lanes run x16_groups, the tile's own code, so every output is computed
 * with the same operations in the same order: identical results. */
#define KW_X16_LANES 4
#define KW_X16_LANE_BYTES ((size_t)128 * 1024)

/* One block of packed Q8_0 against one activation row: x16_groups' sums
 * for C = 1 (the same operations in the same order, so identical results;
 * test_x16_batch and test_matmul_multi compare them with the tile's), the
 * offset from a table made once per call. The lanes below step pointers
 * pair by pair instead of deriving each block's address: fewer
 * instructions per byte, as x16_q4_rows1 for Q4_0. */
KW_INLINE __m512 x16_q8_block(const uint8_t *q, const uint16_t *sc, const int32_t *xi, const int32_t *off, float xd,
                              __m512 acc) {
    __m512i d = _mm512_set1_epi32(*off), d1 = _mm512_setzero_si512();
    _Pragma("GCC unroll 4") for (int k = 0; k < 8; k += 2) {
        d = kw_dpbusd_bcst(d, kw_x16_load(q + 64 * k, 1), xi + k);
        d1 = kw_dpbusd_bcst(d1, kw_x16_load(q + 64 * (k + 1), 1), xi + k + 1);
    }
    d = _mm512_add_epi32(d, d1);
    __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)sc));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(dw, _mm512_set1_ps(xd)), acc);
}

/* S groups (lanes) of packed Q8_0 against one row, pair by pair, block b
 * of every lane, then block b + 1 of every lane (x16_groups' order). */
KW_INLINE void x16_q8_row_lanes(const uint8_t *const *grp, const x16_span *k, const uint8_t *x0, const int32_t *off,
                                float *const *y, const int S, const size_t pf) {
    const int64_t nb = k->nb;
    const float *xd = (const float *)(x0 + 32 * k->xnb) + k->b0;
    const int32_t *xi = (const int32_t *)(x0 + 32 * k->b0);
    const size_t pb = kw_q0_run_bytes(16, 0);
    const uint8_t *g[KW_X16_LANES] = {0};
    __m512 acc[KW_X16_LANES] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    _Pragma("GCC unroll 4") for (int s = 0; s < S; s++) {
        g[s] = grp[s];
        acc[s] = k->carry ? _mm512_loadu_ps(y[s]) : _mm512_setzero_ps();
    }
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2, xi += 16) {
        _Pragma("GCC unroll 4") for (int s = 0; s < S; s++)
            acc[s] = x16_q8_block(g[s] + 64, (const uint16_t *)g[s], xi, off + b, xd[b], acc[s]);
        if (pf) _Pragma("GCC unroll 4") for (int s = 0; s < S; s++) kw_prefetch_l2(g[s] + pf, pb);
        _Pragma("GCC unroll 4") for (int s = 0; s < S; s++) {
            acc[s] = x16_q8_block(g[s] + 64 + 512, (const uint16_t *)g[s] + 16, xi + 8, off + b + 1, xd[b + 1], acc[s]);
            g[s] += pb;
        }
    }
    if (b < nb)
        _Pragma("GCC unroll 4") for (int s = 0; s < S; s++)
            acc[s] = x16_q8_block(g[s] + 64, (const uint16_t *)g[s], xi, off + b, xd[b], acc[s]);
    _Pragma("GCC unroll 4") for (int s = 0; s < S; s++) _mm512_storeu_ps(y[s], acc[s]);
}

/* The run cut into S lanes (kw_lanes_split); each step computes group i
 * of every lane, with x16_groups, or for one row with the offset table
 * off (not NULL) x16_q8_row_lanes, prefetching pf bytes ahead; a lane's
 * extra group alone. */
KW_INLINE void x16_q8_lanes_run(const uint8_t *base, size_t gb, const x16_span *k, int64_t g0, int64_t g1,
                                const uint8_t *X, size_t xs, float *Y, int64_t ldy, const int C, const int S,
                                const int32_t *off, const size_t pf) {
    int64_t first[KW_X16_LANES], extra, len = kw_lanes_split(g0, g1, S, first, &extra);
    for (int64_t i = 0; i < len; i++) {
        const uint8_t *grp[KW_X16_LANES];
        float *y[KW_X16_LANES];
        for (int s = 0; s < S; s++) {
            grp[s] = base + (size_t)(first[s] + i) * gb;
            y[s] = Y + 16 * (first[s] + i);
        }
        if (off) x16_q8_row_lanes(grp, k, X, off, y, S, pf);
        else x16_groups(grp, k, X, xs, y, ldy, 0, C, S);
    }
    for (int s = 0; s < extra; s++) {
        const uint8_t *grp1 = base + (size_t)(first[s] + len) * gb;
        float *y1 = Y + 16 * (first[s] + len);
        if (off) x16_q8_row_lanes(&grp1, k, X, off, &y1, 1, pf);
        else x16_tile(grp1, k, X, xs, y1, ldy, 0, C);
    }
}

/* One row in S (2..4) lanes: S a constant of the inlined run, and pf too
 * where it is 0 (the loop without prefetches). */
KW_INLINE void x16_q8_lanes_row(const uint8_t *base, size_t gb, const x16_span *k, int64_t g0, int64_t g1,
                                const uint8_t *X, size_t xs, float *Y, int64_t ldy, const int32_t *off, int S,
                                const size_t pf) {
    if (S >= 4) x16_q8_lanes_run(base, gb, k, g0, g1, X, xs, Y, ldy, 1, 4, off, pf);
    else if (S == 3) x16_q8_lanes_run(base, gb, k, g0, g1, X, xs, Y, ldy, 1, 3, off, pf);
    else x16_q8_lanes_run(base, gb, k, g0, g1, X, xs, Y, ldy, 1, 2, off, pf);
}

/* Groups [g0, g1) of packed Q8_0 against nx <= 4 activation rows in lanes;
 * false (nothing done) when the run is too short for two. */
static bool x16_q8_lanes(const uint8_t *base, size_t gb, const x16_span *k, int64_t g0, int64_t g1, const uint8_t *X,
                         size_t xs, int64_t nx, float *Y, int64_t ldy) {
    size_t lanes = (size_t)(g1 - g0) * gb / KW_X16_LANE_BYTES;
    if (lanes < 2 || nx < 1 || nx > 4) return false;
    if (nx == 1) {   /* one row: with the offset table unless the span outgrows it */
        int32_t tab[KW_X16_ROW_MAX_NB];
        const int32_t *off = k->nb <= KW_X16_ROW_MAX_NB ? x16_row_offsets(X, k, tab) : NULL;
        const size_t pf = off ? g_x16_pf : 0;
        const int S = lanes >= KW_X16_LANES ? KW_X16_LANES : (int)lanes;
        if (pf) x16_q8_lanes_row(base, gb, k, g0, g1, X, xs, Y, ldy, off, S, pf);
        else x16_q8_lanes_row(base, gb, k, g0, g1, X, xs, Y, ldy, off, S, 0);
    } else if (nx == 2) x16_q8_lanes_run(base, gb, k, g0, g1, X, xs, Y, ldy, 2, 2, NULL, 0);
    else if (nx == 3) x16_q8_lanes_run(base, gb, k, g0, g1, X, xs, Y, ldy, 3, 2, NULL, 0);
    else x16_q8_lanes_run(base, gb, k, g0, g1, X, xs, Y, ldy, 4, 2, NULL, 0);
    return true;
}

/* K-panels (kw_pack_hdr.panel_nb): a packed Q4_0 matrix of at least 2 *
 * KW_X16_PANEL_NB blocks per row (a multiple of it, whole groups of 16
 * rows) is stored panel by panel: panel p holds blocks p * KW_X16_PANEL_NB
 * .. of every group, each group's panel in the layout above, so a run of
 * groups over one panel is one sequential stream. Decode takes the
 * panels one after the other (kw_matmul's streaming split calls
 * gemm_panel per panel), so the activation a tile reads is one panel's,
 * 2 KiB of quants, and stays in L1 under the weight stream: over a whole
 * row of a wide matrix (down: 8192 values, a group of 16 rows 74 KB of
 * Q4_0) the stream evicted it once a group, and down streamed 20-25%
 * slower per byte than gate/up (decode timers, 1B Q4_0, 2 threads).
 * Measured against the whole-row layout (two copies of each build in one
 * bench_ab process, timers around the down and gate/up matmuls): down's
 * time over gate/up's 0.628 / 0.604 / 0.642 / 0.621 -> 0.586 / 0.573 /
 * 0.584 / 0.565 (0.5 is the bytes); pp512 1.04-1.07x (the prefill GEMM's
 * group reads its panels in turn, the sum in registers: gx_tile). Q8_0
 * keeps whole rows: its decode already reads down in 4 lanes (down / gate-up
 * 0.52, in panels 0.55) and its pp512 was 0.98x in panels. */
#define KW_X16_PANEL_NB 64

static bool x16_in_panels(int q4, int64_t rows, int64_t nb) {
    return q4 && rows % 16 == 0 && nb >= 2 * KW_X16_PANEL_NB && nb % KW_X16_PANEL_NB == 0;
}

/* W's packed header in its type's x16 format, or NULL. */
static const kw_pack_hdr *x16_hdr(const kw_matrix *W) {
    if (W->type != KW_TYPE_Q4_0 && W->type != KW_TYPE_Q8_0) return NULL;
    return kw_packed_hdr(W, W->type == KW_TYPE_Q4_0 ? KW_FMT_Q4_0_X16 : KW_FMT_Q8_0_X16);
}

/* Where panel p of group g starts, and the bytes of one group's panel. */
typedef struct {
    const uint8_t *base;   /* packed data */
    int64_t nb, pnb, np;   /* blocks per row, per panel (nb when not in panels), panels */
    size_t gbp;            /* bytes of a group's panel */
    size_t pstride;        /* bytes of a panel over all groups */
} x16_layout;

static x16_layout x16_layout_of(const kw_matrix *W, const kw_pack_hdr *h, int q4) {
    x16_layout L;
    L.base = (const uint8_t *)W->packed + KW_PACK_HDR_BYTES;
    L.nb = h->nb;
    L.pnb = h->panel_nb ? (int64_t)h->panel_nb : h->nb;
    L.np = L.nb / L.pnb;
    L.gbp = kw_q0_group_bytes(16, q4, L.pnb);
    L.pstride = (size_t)(h->packed_rows / 16) * L.gbp;
    return L;
}

/* Packed rows [r0, end) (whole groups, r0 a multiple of 16) over panel p,
 * one to 16 activation rows. */
static void x16_rows_panel(const x16_layout *L, int q4, int64_t p, int64_t r0, int64_t end, const void *X, size_t xs,
                           int64_t nx, float *Y, int64_t ldy) {
    const uint8_t *base = L->base + (size_t)p * L->pstride;
    x16_span k = {.nb = L->pnb, .xnb = L->nb, .b0 = p * L->pnb, .carry = p > 0};
    if (!q4 && end > r0 && x16_q8_lanes(base, L->gbp, &k, r0 / 16, end / 16, X, xs, nx, Y, ldy)) return;
    if (q4 && end > r0 && x16_q4_rows1(base, L->gbp, &k, r0 / 16, end / 16, X, nx, Y)) return;
    for (int64_t r = r0; r < end; r += 16) {
        const uint8_t *grp = base + (size_t)(r / 16) * L->gbp;
        for (int64_t i = 0; i < nx; i += 8) {
            int C = (int)(nx - i < 8 ? nx - i : 8);
            const uint8_t *x0 = (const uint8_t *)X + (size_t)i * xs;
            float *y = Y + i * ldy + r;
            if (q4) { KW_TILE_ROWS_SWITCH(C, x16_tile, grp, &k, x0, xs, y, ldy, 1) }
            else { KW_TILE_ROWS_SWITCH(C, x16_tile, grp, &k, x0, xs, y, ldy, 0) }
        }
    }
}

/* Packed rows [r0, min(r1, packed_rows)) in groups of 16 (r0 is a multiple
 * of 16: kw_matmul's chunks are); returns the first row not done. */
static int64_t gemm_x16(const kw_matrix *W, const kw_pack_hdr *h, int q4, int64_t r0, int64_t r1,
                        const void *X, size_t xs, int64_t nx, float *Y, int64_t ldy) {
    if (r0 % 16) return r0;
    int64_t end = r1 < h->packed_rows ? r1 : h->packed_rows;
    end -= (end - r0) % 16;
    if (end <= r0) return r0;
    const x16_layout L = x16_layout_of(W, h, q4);
    if (nx >= KW_X16_GEMM_MIN_ROWS) {   /* prefill: gemm_avx512.c */
        int64_t done = kw_gemm_x16_avx512(L.base, q4, L.nb, L.pnb, L.pstride, r0, end, X, xs, nx, Y, ldy);
        if (done > r0) return done;
    }
    for (int64_t p = 0; p < L.np; p++) x16_rows_panel(&L, q4, p, r0, end, X, xs, nx, Y, ldy);
    return end;
}

static int x16_panels(const kw_matrix *W) {
    const kw_pack_hdr *h = x16_hdr(W);
    return h && h->panel_nb ? (int)(h->nb / h->panel_nb) : 1;
}

/* gemm_panel (kernels.h): only called for matrices x16_panels counts in
 * panels, whose rows are all packed in whole groups. */
static void gemm_panel_x16(const kw_matrix *W, int p, int64_t r0, int64_t r1, const void *X, size_t xs, int64_t nx,
                           float *Y, int64_t ldy) {
    const int q4 = W->type == KW_TYPE_Q4_0;
    const kw_pack_hdr *h = x16_hdr(W);
    if (!h || !h->panel_nb || r0 % 16 || r1 > h->packed_rows || (r1 - r0) % 16) return;
    const x16_layout L = x16_layout_of(W, h, q4);
    x16_rows_panel(&L, q4, p, r0, r1, X, xs, nx, Y, ldy);
}

static void gemm_q4_0(const kw_matrix *W, int64_t r0, int64_t r1, const void *X, size_t xs, int64_t nx,
                      float *Y, int64_t ldy) {
    const kw_pack_hdr *h = kw_packed_hdr(W, KW_FMT_Q4_0_X16);
    if (h) r0 = gemm_x16(W, h, 1, r0, r1, X, xs, nx, Y, ldy);
    if (r0 < r1) gemm_q4_0_rows(W, r0, r1, X, xs, nx, Y, ldy);
}

static void gemm_q8_0(const kw_matrix *W, int64_t r0, int64_t r1, const void *X, size_t xs, int64_t nx,
                      float *Y, int64_t ldy) {
    const kw_pack_hdr *h = kw_packed_hdr(W, KW_FMT_Q8_0_X16);
    if (h) r0 = gemm_x16(W, h, 0, r0, r1, X, xs, nx, Y, ldy);
    if (r0 < r1) gemm_q8_0_rows(W, r0, r1, X, xs, nx, Y, ldy);
}

static int pack_avx512(kw_matrix *W, kw_pack_arena *a, kw_err *err) {
    if (W->type == KW_TYPE_F16) return kw_pack_f16_i16(W, a, err);   /* gemm_avx512.c */
    if (W->type == KW_TYPE_Q4_K || W->type == KW_TYPE_Q5_K || W->type == KW_TYPE_Q6_K)
        return kw_pack_k_x16(W, a, err);   /* kquant_avx512.c */
    if (W->type != KW_TYPE_Q4_0 && W->type != KW_TYPE_Q8_0) return 1;
    const int q4 = W->type == KW_TYPE_Q4_0;
    int64_t groups = W->rows / 16, nb = W->cols / KW_QK;
    const int64_t pnb = x16_in_panels(q4, W->rows, nb) ? KW_X16_PANEL_NB : nb, np = nb / pnb;
    const size_t gbp = kw_q0_group_bytes(16, q4, pnb);
    uint8_t *p = kw_pack_alloc(W, a, q4 ? KW_FMT_Q4_0_X16 : KW_FMT_Q8_0_X16, groups * 16, nb,
                               (size_t)groups * gbp * (size_t)np, err);
    if (!p) return kw_pack_missing(a);
    ((kw_pack_hdr *)p)->panel_nb = np > 1 ? (uint32_t)pnb : 0;
    for (int64_t q = 0; q < np; q++)
        for (int64_t g = 0; g < groups; g++) {
            uint8_t *grp = p + KW_PACK_HDR_BYTES + ((size_t)q * (size_t)groups + (size_t)g) * gbp;
            for (int64_t b = 0; b < pnb; b++)   /* Q8_0: +128 per byte */
                kw_pack_q0_group_block_at(W, 16, g, q * pnb + b, b, q4 ? 0u : 0x80808080u, grp);
        }
    W->packed = p;
    return 0;
}

/* ---------------- float paths: F32, F16 (FMA), BF16 (vdpbf16ps) ---------------- */

KW_INLINE __m512 ld_f32(const void *p, int64_t k, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, (const float *)p + k);
}
KW_INLINE __m512 ld_f16(const void *p, int64_t k, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + k));
}

/* F16 activations are kept as F32 values already rounded to F16 (kw_matmul
 * leaves room), so the inner loop converts only weights; kw_act_f16_i16
 * (gemm_avx512.c) writes them, followed by the int16 blocks of packed F16. */
/* Up to 4 weight rows x 6 activation rows: 24 accumulators; each step
 * converts R weight vectors and issues R*C FMAs (activations from L1). */
#define KW_FTILE(NAME, LDW)                                                                             \
    KW_INLINE void NAME##_tile(const uint8_t *w0, size_t wrb, const uint8_t *x0, size_t xs, int64_t n, \
                               float *y, int64_t ldy, const int R, const int C) {                      \
        __m512 acc[4][6];                                                                               \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                                             \
        _Pragma("GCC unroll 6") for (int c = 0; c < C; c++) acc[r][c] = _mm512_setzero_ps();            \
        for (int64_t k = 0; k < n; k += 16) {                                                           \
            __mmask16 m = n - k >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - k)) - 1);           \
            __m512 wv[4];                                                                               \
            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) wv[r] = LDW(w0 + (size_t)r * wrb, k, m);\
            _Pragma("GCC unroll 6") for (int c = 0; c < C; c++) {                                       \
                __m512 xv = ld_f32(x0 + (size_t)c * xs, k, m);                                          \
                _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                                     \
                    acc[r][c] = _mm512_fmadd_ps(wv[r], xv, acc[r][c]);                                  \
            }                                                                                           \
        }                                                                                               \
        _Pragma("GCC unroll 6") for (int c = 0; c < C; c++)                                             \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) y[c * ldy + r] = _mm512_reduce_add_ps(acc[r][c]); \
    }

KW_FTILE(f32, ld_f32)
KW_FTILE(f16_rows, ld_f16)

#define KW_FC_SWITCH(NAME, RR, ...)                      \
    switch (C) {                                         \
    case 1: NAME##_tile(__VA_ARGS__, RR, 1); break;      \
    case 2: NAME##_tile(__VA_ARGS__, RR, 2); break;      \
    case 3: NAME##_tile(__VA_ARGS__, RR, 3); break;      \
    case 4: NAME##_tile(__VA_ARGS__, RR, 4); break;      \
    case 5: NAME##_tile(__VA_ARGS__, RR, 5); break;      \
    default: NAME##_tile(__VA_ARGS__, RR, 6); break;     \
    }
#define KW_FGEMM(NAME)                                                                                  \
    static void gemm_##NAME(const kw_matrix *W, int64_t r0, int64_t r1, const void *X, size_t xs,      \
                            int64_t nx, float *Y, int64_t ldy) {                                        \
        const uint8_t *wd = W->data;                                                                    \
        for (int64_t r = r0; r < r1; r += 4) {                                                          \
            int R = (int)(r1 - r < 4 ? r1 - r : 4);                                                     \
            for (int64_t i = 0; i < nx; i += 6) {                                                       \
                int C = (int)(nx - i < 6 ? nx - i : 6);                                                 \
                const uint8_t *w0 = wd + (size_t)r * W->row_bytes, *x0 = (const uint8_t *)X + (size_t)i * xs; \
                float *y = Y + i * ldy + r;                                                             \
                switch (R) {                                                                            \
                case 1: KW_FC_SWITCH(NAME, 1, w0, W->row_bytes, x0, xs, W->cols, y, ldy) break;         \
                case 2: KW_FC_SWITCH(NAME, 2, w0, W->row_bytes, x0, xs, W->cols, y, ldy) break;         \
                case 3: KW_FC_SWITCH(NAME, 3, w0, W->row_bytes, x0, xs, W->cols, y, ldy) break;         \
                default: KW_FC_SWITCH(NAME, 4, w0, W->row_bytes, x0, xs, W->cols, y, ldy) break;        \
                }                                                                                       \
            }                                                                                           \
        }                                                                                               \
    }
KW_FGEMM(f32)
KW_FGEMM(f16_rows)

/* Packed F16 rows (int16 blocks, gemm_avx512.c), then the rest as F16. */
static void gemm_f16(const kw_matrix *W, int64_t r0, int64_t r1, const void *X, size_t xs, int64_t nx, float *Y,
                     int64_t ldy) {
    r0 = kw_gemm_f16_i16(W, r0, r1, X, xs, nx, Y, ldy);
    if (r0 < r1) gemm_f16_rows(W, r0, r1, X, xs, nx, Y, ldy);
}

/* BF16: 32 values (16 pairs) per vdpbf16ps. */
KW_INLINE void bf16_tile(const uint8_t *w0, size_t wrb, const uint8_t *x0, size_t xs, int64_t n, float *y,
                         int64_t ldy, const int R, const int C) {
    __m512 acc[4][4];
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) acc[r][c] = _mm512_setzero_ps();
    for (int64_t k = 0; k < n; k += 32) {
        __mmask32 m = n - k >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << (n - k)) - 1);
        __m512i xv[4];
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++)
            xv[c] = _mm512_maskz_loadu_epi16(m, (const uint16_t *)(x0 + (size_t)c * xs) + k);
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
            __m512i wv = _mm512_maskz_loadu_epi16(m, (const uint16_t *)(w0 + (size_t)r * wrb) + k);
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++)
                acc[r][c] = _mm512_dpbf16_ps(acc[r][c], (__m512bh)wv, (__m512bh)xv[c]);
        }
    }
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++)
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) y[c * ldy + r] = _mm512_reduce_add_ps(acc[r][c]);
}

KW_GEMM(bf16, 1)


/* ---------------- K-quants x Q8_K: one weight row x up to 4 activation rows ----------------
 * Q4_K/Q5_K: each 64-value step is one vpdpbusd per activation row of the
 * unsigned levels (unpacked once for all rows; lanes 0-7: sub-block 2j,
 * lanes 8-15: 2j+1), converted to float and scaled by sc * d_w * d_x; the
 * mins term uses the activation's bsums. Q6_K: levels 0..63 (unsigned),
 * the -32 offset is removed through bsums as well. The per-output
 * operations are the same for any number of activation rows. */

/* The 8 scales and 8 mins of a Q4_K/Q5_K block's 12 packed bytes, one byte
 * each (kw_get_scale_min_k4 for every j at once, on 32-bit words: j < 4
 * the low 6 bits of bytes j and j+4; j >= 4 a nibble of byte j+4 with the
 * top 2 bits of byte j-4 for the scale, of byte j for the min). */
KW_INLINE void k4_scales8(const uint8_t *q, uint64_t *sc, uint64_t *mn) {
    uint32_t a0, a1, a2;
    memcpy(&a0, q, 4);
    memcpy(&a1, q + 4, 4);
    memcpy(&a2, q + 8, 4);
    uint32_t s_hi = (a2 & 0x0f0f0f0fu) | ((a0 >> 2) & 0x30303030u);
    uint32_t m_hi = ((a2 >> 4) & 0x0f0f0f0fu) | ((a1 >> 2) & 0x30303030u);
    *sc = (a0 & 0x3f3f3f3fu) | (uint64_t)s_hi << 32;
    *mn = (a1 & 0x3f3f3f3fu) | (uint64_t)m_hi << 32;
}

/* Sum of the 8 int32 lanes of v. */
KW_INLINE int32_t hsum8_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

KW_INLINE __m512i pair_idx(int j) {
    return _mm512_set_epi32(2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1,
                            2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j);
}

/* Q4_K (qh == NULL) or Q5_K levels of 64-value step j of a block. */
KW_INLINE __m512i k45_levels(const uint8_t *qs, const uint8_t *qh, int j) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
    __m512i u = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(q, m4)),
                                   _mm256_and_si256(_mm256_srli_epi16(q, 4), m4), 1);
    if (qh) {
        __m256i h = _mm256_loadu_si256((const __m256i *)qh);
        __mmask32 h0 = _mm256_test_epi8_mask(h, _mm256_set1_epi8((char)(1 << (2 * j))));
        __mmask32 h1 = _mm256_test_epi8_mask(h, _mm256_set1_epi8((char)(1 << (2 * j + 1))));
        u = _mm512_or_si512(u, _mm512_maskz_mov_epi8((__mmask64)h0 | ((__mmask64)h1 << 32), _mm512_set1_epi8(0x10)));
    }
    return u;
}

KW_INLINE void k45_tile(const uint8_t *wrow, size_t bsz, int q5, const uint8_t *x0, size_t xs, int64_t nb, float *y,
                        int64_t ldy, const int C) {
    __m512 acc[4];
    float mins[4];
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) { acc[c] = _mm512_setzero_ps(); mins[c] = 0; }
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *blk = wrow + (size_t)i * bsz;
        /* Q4_K and Q5_K share the head: d, dmin, scales[12]; Q5_K has qh before qs */
        uint16_t dh, dmh;
        memcpy(&dh, blk, 2);
        memcpy(&dmh, blk + 2, 2);
        const uint8_t *scales = blk + 4, *qh = q5 ? blk + 16 : NULL, *qs = q5 ? blk + 48 : blk + 16;
        uint64_t sc8, mn8;
        k4_scales8(scales, &sc8, &mn8);
        float d = _cvtsh_ss(dh), dmin = _cvtsh_ss(dmh);
        __m512 scv = _mm512_castps256_ps512(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc8))));
        /* m_j for bsums 2j and 2j+1: one madd gives m_j * (bsum_2j + bsum_2j+1), exact */
        __m128i mb = _mm_cvtsi64_si128((long long)mn8);
        __m256i m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mb, mb));
        const kw_block_q8_K *xb[4];
        __m512 dx[4];
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
            xb[c] = (const kw_block_q8_K *)(x0 + (size_t)c * xs) + i;
            __m256i bs = _mm256_loadu_si256((const __m256i *)xb[c]->bsums);
            int32_t summ = hsum8_epi32(_mm256_madd_epi16(bs, m16));
            mins[c] += dmin * xb[c]->d * (float)summ;
            dx[c] = _mm512_set1_ps(d * xb[c]->d);
        }
        _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
            __m512i u = k45_levels(qs, qh, j);
            __m512 sp = _mm512_permutexvar_ps(pair_idx(j), scv);
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
                __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, _mm512_loadu_si512(xb[c]->qs + 64 * j));
                acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(sp, dx[c]), acc[c]);
            }
        }
    }
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) y[c * ldy] = _mm512_reduce_add_ps(acc[c]) - mins[c];
}

KW_INLINE void q6k_tile(const kw_block_q6_K *w, const uint8_t *x0, size_t xs, int64_t nb, float *y, int64_t ldy,
                        const int C) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x03);
    __m512 acc[4];
    float off[4];
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) { acc[c] = _mm512_setzero_ps(); off[c] = 0; }
    for (int64_t i = 0; i < nb; i++) {
        float d = _cvtsh_ss(w[i].d);
        __m512i sc32 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)w[i].scales));
        __m512 scv = _mm512_cvtepi32_ps(sc32);
        const kw_block_q8_K *xb[4];
        __m512 dx[4];
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
            xb[c] = (const kw_block_q8_K *)(x0 + (size_t)c * xs) + i;
            __m512i bs32 = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)xb[c]->bsums));
            off[c] += d * xb[c]->d * 32.0f * (float)_mm512_reduce_add_epi32(_mm512_mullo_epi32(sc32, bs32));
            dx[c] = _mm512_set1_ps(d * xb[c]->d);
        }
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            __m512i ql = _mm512_loadu_si512(w[i].ql + 64 * h);
            __m256i q = _mm256_loadu_si256((const __m256i *)(w[i].qh + 32 * h));
            __m512i hA = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 2), 1);
            __m512i hB = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_srli_epi16(q, 4)), _mm256_srli_epi16(q, 6), 1);
            __m512i uA = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_slli_epi16(_mm512_and_si512(hA, m2), 4));
            __m512i uB = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                         _mm512_slli_epi16(_mm512_and_si512(hB, m2), 4));
            /* lanes 4s..4s+3 of a 64-value step belong to 16-value sub-block s */
            const int s0 = 8 * h;
            const __m512i iA = _mm512_set_epi32(s0 + 3, s0 + 3, s0 + 3, s0 + 3, s0 + 2, s0 + 2, s0 + 2, s0 + 2,
                                                s0 + 1, s0 + 1, s0 + 1, s0 + 1, s0, s0, s0, s0);
            __m512 spA = _mm512_permutexvar_ps(iA, scv);
            __m512 spB = _mm512_permutexvar_ps(_mm512_add_epi32(iA, _mm512_set1_epi32(4)), scv);
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
                __m512i dA = _mm512_dpbusd_epi32(_mm512_setzero_si512(), uA, _mm512_loadu_si512(xb[c]->qs + 128 * h));
                __m512i dB = _mm512_dpbusd_epi32(_mm512_setzero_si512(), uB, _mm512_loadu_si512(xb[c]->qs + 128 * h + 64));
                acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dA), _mm512_mul_ps(spA, dx[c]), acc[c]);
                acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dB), _mm512_mul_ps(spB, dx[c]), acc[c]);
            }
        }
    }
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) y[c * ldy] = _mm512_reduce_add_ps(acc[c]) - off[c];
}

#define KW_K_SWITCH(CALL)                      \
    switch (C) {                               \
    case 1: CALL(1); break;                    \
    case 2: CALL(2); break;                    \
    case 3: CALL(3); break;                    \
    default: CALL(4); break;                   \
    }

static void gemm_k45(const kw_matrix *W, int q5, int64_t r0, int64_t r1, const void *X, size_t xs, int64_t nx,
                     float *Y, int64_t ldy) {
    int64_t nb = W->cols / KW_QK_K;
    size_t bsz = q5 ? sizeof(kw_block_q5_K) : sizeof(kw_block_q4_K);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *w = (const uint8_t *)W->data + (size_t)r * W->row_bytes;
        for (int64_t i = 0; i < nx; i += 4) {
            int C = (int)(nx - i < 4 ? nx - i : 4);
            const uint8_t *x0 = (const uint8_t *)X + (size_t)i * xs;
            float *y = Y + i * ldy + r;
#define KW_K45(CC) k45_tile(w, bsz, q5, x0, xs, nb, y, ldy, CC)
            KW_K_SWITCH(KW_K45)
#undef KW_K45
        }
    }
}

static void gemm_q4_K(const kw_matrix *W, int64_t r0, int64_t r1, const void *X, size_t xs, int64_t nx, float *Y,
                      int64_t ldy) {
    r0 = kw_gemm_k_x16(W, r0, r1, X, xs, nx, Y, ldy);   /* packed groups: kquant_avx512.c */
    if (r0 < r1) gemm_k45(W, 0, r0, r1, X, xs, nx, Y, ldy);
}

static void gemm_q5_K(const kw_matrix *W, int64_t r0, int64_t r1, const void *X, size_t xs, int64_t nx, float *Y,
                      int64_t ldy) {
    r0 = kw_gemm_k_x16(W, r0, r1, X, xs, nx, Y, ldy);   /* packed groups: kquant_avx512.c */
    if (r0 < r1) gemm_k45(W, 1, r0, r1, X, xs, nx, Y, ldy);
}

static void gemm_q6_K(const kw_matrix *W, int64_t r0, int64_t r1, const void *X, size_t xs, int64_t nx, float *Y,
                      int64_t ldy) {
    r0 = kw_gemm_k_x16(W, r0, r1, X, xs, nx, Y, ldy);   /* packed groups: kquant_avx512.c */
    int64_t nb = W->cols / KW_QK_K;
    for (int64_t r = r0; r < r1; r++) {
        const kw_block_q6_K *w = (const kw_block_q6_K *)((const uint8_t *)W->data + (size_t)r * W->row_bytes);
        for (int64_t i = 0; i < nx; i += 4) {
            int C = (int)(nx - i < 4 ? nx - i : 4);
            const uint8_t *x0 = (const uint8_t *)X + (size_t)i * xs;
            float *y = Y + i * ldy + r;
#define KW_Q6(CC) q6k_tile(w, x0, xs, nb, y, ldy, CC)
            KW_K_SWITCH(KW_Q6)
#undef KW_Q6
        }
    }
}

/* The bandwidth probe's non-temporal read (kernel set read_nt), as x16_tile reads a pair. */
static uint64_t read_nt_avx512(const void *p, size_t bytes) {
    const uint8_t *q = p;
    __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
    for (size_t o = 0; o + 256 <= bytes; o += 256) {
        a = _mm512_add_epi64(a, kw_x16_load(q + o, 1));
        b = _mm512_add_epi64(b, kw_x16_load(q + o + 64, 1));
        c = _mm512_add_epi64(c, kw_x16_load(q + o + 128, 1));
        d = _mm512_add_epi64(d, kw_x16_load(q + o + 192, 1));
    }
    uint64_t lane[8], sum = 0;   /* unsigned: the sums wrap (_mm512_reduce_add_epi64 adds signed: UB) */
    _mm512_storeu_si512(lane, _mm512_add_epi64(_mm512_add_epi64(a, b), _mm512_add_epi64(c, d)));
    for (int i = 0; i < 8; i++) sum += lane[i];
    return sum;
}

void kw_kernels_avx512_init(kw_kernel_set *k) {
    k->name = "avx512";
    g_x16_pf = kw_decode_prefetch_raw();
    k->pack = pack_avx512;
    k->read_nt = read_nt_avx512;
    k->quant[KW_TYPE_Q8_0] = act_q8_0_split;
    k->quant[KW_TYPE_F16] = kw_act_f16_i16;   /* act_f16_as_f32's values + int16 blocks for packed F16 */
    k->quant_packed[KW_TYPE_F16] = kw_act_f16_i16_only;
    k->packed_fmt[KW_TYPE_F16] = KW_FMT_F16_I16;
    k->gemm[KW_TYPE_Q4_0] = gemm_q4_0;
    k->gemm[KW_TYPE_Q5_0] = gemm_q5_0;
    k->gemm[KW_TYPE_Q8_0] = gemm_q8_0;
    k->panels = x16_panels;
    k->gemm_panel[KW_TYPE_Q4_0] = gemm_panel_x16;
    k->gemm_panel[KW_TYPE_Q8_0] = gemm_panel_x16;
    k->gemm[KW_TYPE_F32] = gemm_f32;
    k->gemm[KW_TYPE_F16] = gemm_f16;
    k->gemm[KW_TYPE_Q4_K] = gemm_q4_K;
    k->gemm[KW_TYPE_Q5_K] = gemm_q5_K;
    k->gemm[KW_TYPE_Q6_K] = gemm_q6_K;
    if (kw_cpu_info_raw()->avx512bf16) k->gemm[KW_TYPE_BF16] = gemm_bf16;
    for (int t = 0; t < KW_TYPE_COUNT; t++) k->gemm_experts[t] = k->gemm[t];   /* unpacked: the stored rows */
}
