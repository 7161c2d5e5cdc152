/* kernels_avx2.c - the AVX2+FMA kernel family (compiled with -mavx2 -mfma
 * -mf16c; only called when kw_cpu_info_get() reports them).
 *
 * Q4_0/Q5_0/Q8_0 x Q8_0 (standard block layout): per 32-value block,
 * maddubs -> madd(.,1) gives 8 exact int32 partial sums, converted to float
 * and accumulated with the block's dw*dx. maddubs wants its first operand
 * unsigned: Q4_0/Q5_0 weights are used as stored (0..15, 0..31) and the
 * offset (8, 16) times the activations' partial sums, computed once per
 * activation block for all rows of a tile, is subtracted; Q8_0 weights go
 * through the sign trick, maddubs(|w|, sign(x, w)). F32/F16
 * weights: FMA over 8 lanes, F16 activations widened to F32 once. Tiles
 * of up to 4 x 4 (quantized) or 3 x 3 (float) weight rows x activation
 * rows share loads (KW_GEMM_AVX2); every output is
 * computed by the same instruction sequence in any tile, so the thread
 * split never changes results. Other types use the scalar kernels. */
#include "tensor/kernels.h"
#include "tensor/quant_blocks.h"
#include <immintrin.h>
#include <string.h>

#define KW_INLINE static inline __attribute__((always_inline))
#ifndef KW_AVX2_PF_HINT
#define KW_AVX2_PF_HINT _MM_HINT_T0
#endif

KW_INLINE float h2f(uint16_t h) { return _cvtsh_ss(h); }

/* Weights of one block as 32 int8 lanes: Q4_0 and Q5_0 unsigned (0..15,
 * 0..31; the tile subtracts the offset times the activations' sum), Q8_0
 * signed. */
KW_INLINE __m256i w_q4_0(const kw_block_q4_0 *b) {
    __m128i q = _mm_loadu_si128((const __m128i *)b->qs);
    __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

KW_INLINE __m256i w_q5_0(const kw_block_q5_0 *b) {
    __m128i q = _mm_loadu_si128((const __m128i *)b->qs);
    __m256i v = _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1),
                                 _mm256_set1_epi8(0x0F));
    uint32_t qh;
    memcpy(&qh, b->qh, 4);
    /* spread bit j of qh to byte j: shuffle the 4 qh bytes, test one bit per byte */
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bits = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i h = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), shuf);
    h = _mm256_cmpeq_epi8(_mm256_and_si256(h, bits), bits);
    return _mm256_or_si256(v, _mm256_and_si256(h, _mm256_set1_epi8(0x10)));
}

KW_INLINE __m256i w_q8_0(const kw_block_q8_0 *b) { return _mm256_loadu_si256((const __m256i *)b->qs); }

/* The R rows of a tile are contiguous (R * wrb bytes), but each row is a
 * short stream (1152 bytes for 2048 Q4_0 values) and a tile reads R of them
 * side by side, which the hardware prefetcher does not follow: without help
 * one thread streamed Q4_0 at 5.8 GB/s. So a tile asks for the next tile's
 * bytes as it goes: at step `done` of `step` bytes of its own, the same
 * offset of the next tile (tile_bytes further), every line of it (after
 * a thread's last tile that is past its rows or the matrix: a prefetch
 * never faults, and the bytes are at most one tile). Only
 * where each weight tile is read once (at most CM activation rows: decode,
 * small batches); a prefill re-reads its tile from cache for every
 * activation tile, and prefetching there ran F16 prefill 0.85x as fast. */
KW_INLINE void kw_prefetch_next_tile(const uint8_t *w0, size_t tile_bytes, size_t done, size_t step) {
    const char *p = (const char *)w0 + tile_bytes + done;
    for (size_t o = 0; o < step + 64; o += 64) _mm_prefetch(p + o, KW_AVX2_PF_HINT);
}

/* 8 int32 partial sums of w . x (lane i: bytes 4i..4i+3), as floats. With
 * off = 0, w is signed (the sign trick makes maddubs' first operand
 * unsigned); with off > 0, w holds unsigned values u = w + off (at most 31,
 * so maddubs' pair sums cannot saturate) and ox = the same partial sums of
 * off * x (ox_i8), subtracted lane by lane: the same exact integers. */
KW_INLINE __m256 dot8(__m256i w, __m256i x, __m256i ox, const int off) {
    const __m256i ones = _mm256_set1_epi16(1);
    if (!off) {
        __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
        return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
    }
    __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones);
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(p, ox));
}

/* The partial sums of off * x that dot8 subtracts for unsigned weights. */
KW_INLINE __m256i ox_i8(__m256i x, const int off) {
    if (!off) return _mm256_setzero_si256();
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8((char)off), x), _mm256_set1_epi16(1));
}

#define KW_QTILE2(NAME, BLK, WQ, OFF)                                                                       \
    KW_INLINE void NAME##_tile(const uint8_t *w0, size_t wrb, const uint8_t *x0, size_t xs, int64_t nb, \
                               float *y, int64_t ldy, int pf, const int R, const int C) {               \
        __m256 acc[4][4];                                                                                \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                                              \
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) acc[r][c] = _mm256_setzero_ps();             \
        for (int64_t b = 0; b < nb; b++) {                                                               \
            if (pf) kw_prefetch_next_tile(w0, (size_t)R * wrb, (size_t)b * (size_t)R * sizeof(BLK), (size_t)R * sizeof(BLK)); \
            __m256i xv[4], ox[4];                                                                        \
            float dx[4];                                                                                 \
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {                                        \
                const kw_block_q8_0 *xb = (const kw_block_q8_0 *)(x0 + (size_t)c * xs) + b;             \
                xv[c] = _mm256_loadu_si256((const __m256i *)xb->qs);                                     \
                ox[c] = ox_i8(xv[c], OFF);                                                               \
                dx[c] = h2f(xb->d);                                                                      \
            }                                                                                            \
            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                                        \
                const BLK *wb = (const BLK *)(w0 + (size_t)r * wrb) + b;                                 \
                __m256i wv = WQ(wb);                                                                     \
                float dw = h2f(wb->d);                                                                   \
                _Pragma("GCC unroll 4") for (int c = 0; c < C; c++)                                      \
                    acc[r][c] = _mm256_fmadd_ps(dot8(wv, xv[c], ox[c], OFF), _mm256_set1_ps(dw * dx[c]), acc[r][c]); \
            }                                                                                            \
        }                                                                                                \
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++)                                              \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) y[c * ldy + r] = hsum8(acc[r][c]);           \
    }

KW_INLINE float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

KW_QTILE2(q4_0_rows, kw_block_q4_0, w_q4_0, 8)
KW_QTILE2(q5_0, kw_block_q5_0, w_q5_0, 16)
KW_QTILE2(q8_0_rows, kw_block_q8_0, w_q8_0, 0)

/* F32 / F16 weights against F32 activations (F16 ones widened beforehand). */
KW_INLINE __m256 ldw_f32(const uint8_t *p, int64_t k) { return _mm256_loadu_ps((const float *)p + k); }
KW_INLINE __m256 ldw_f16(const uint8_t *p, int64_t k) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + k)));
}
KW_INLINE float tail_f32(const uint8_t *p, int64_t k) { return ((const float *)p)[k]; }
KW_INLINE float tail_f16(const uint8_t *p, int64_t k) { return h2f(((const uint16_t *)p)[k]); }

#define KW_FTILE2(NAME, LDW, TAILW)                                                                      \
    KW_INLINE void NAME##_tile(const uint8_t *w0, size_t wrb, const uint8_t *x0, size_t xs, int64_t n,  \
                               float *y, int64_t ldy, int pf, const int R, const int C) {               \
        __m256 acc[4][4];                                                                                \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                                              \
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) acc[r][c] = _mm256_setzero_ps();             \
        int64_t k = 0;                                                                                   \
        const size_t vb = wrb / (size_t)n;   /* bytes per weight value: 2 (F16) or 4 (F32) */          \
        for (; k + 8 <= n; k += 8) {                                                                     \
            if (pf) kw_prefetch_next_tile(w0, (size_t)R * wrb, (size_t)k * (size_t)R * vb, (size_t)R * 8 * vb); \
            __m256 wv[4];                                                                                \
            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) wv[r] = LDW(w0 + (size_t)r * wrb, k);    \
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {                                        \
                __m256 xv = _mm256_loadu_ps((const float *)(x0 + (size_t)c * xs) + k);                   \
                _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                                      \
                    acc[r][c] = _mm256_fmadd_ps(wv[r], xv, acc[r][c]);                                   \
            }                                                                                            \
        }                                                                                                \
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++)                                              \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                                            \
            float s = hsum8(acc[r][c]);                                                                  \
            for (int64_t j = k; j < n; j++)                                                              \
                s += TAILW(w0 + (size_t)r * wrb, j) * ((const float *)(x0 + (size_t)c * xs))[j];         \
            y[c * ldy + r] = s;                                                                          \
        }                                                                                                \
    }

KW_FTILE2(f32, ldw_f32, tail_f32)
KW_FTILE2(f16, ldw_f16, tail_f16)

/* Tiles of up to RM weight rows x CM activation rows (one row: up to 4 x 1).
 * AVX2 has 16 ymm registers: a 4 x 4 float tile's 16 accumulators spill,
 * and 3 x 3 ran F16 prefill 1.14x as fast (bench_kernels -t 1 --cputime
 * -k avx2, p=512: 955-983 against 1112-1139 ms); the integer tiles spill
 * too but gained nothing from smaller shapes (4 x 4 905-918 ms, 4 x 2
 * 994-1009, 3 x 3 965-998, 2 x 4 1045-1048 for Q4_0). */
#define KW_GEMM_AVX2(NAME, DIV, RM, CM)                                                              \
    static void gemm_##NAME(const kw_matrix *W, int64_t r0, int64_t r1, const void *X, size_t xs,   \
                            int64_t nx, float *Y, int64_t ldy) {                                     \
        int64_t nb = W->cols / (DIV);                                                                \
        const uint8_t *wd = W->data;                                                                 \
        const int rm = nx == 1 ? 4 : (RM);                                                           \
        const int pf = nx <= (CM);   /* weights streamed once: prefetch them (kw_prefetch_next_tile) */ \
        for (int64_t r = r0; r < r1; r += rm) {                                                      \
            int R = (int)(r1 - r < rm ? r1 - r : rm);                                                \
            for (int64_t i = 0; i < nx; i += (CM)) {                                                 \
                int C = (int)(nx - i < (CM) ? nx - i : (CM));                                        \
                KW_TILE_SWITCH(NAME, wd + (size_t)r * W->row_bytes, W->row_bytes,                   \
                                (const uint8_t *)X + (size_t)i * xs, xs, nb, Y + i * ldy + r, ldy, pf) \
            }                                                                                        \
        }                                                                                            \
    }

KW_GEMM_AVX2(q4_0_rows, KW_QK, 4, 4)
KW_GEMM_AVX2(q5_0, KW_QK, 4, 4)
KW_GEMM_AVX2(q8_0_rows, KW_QK, 4, 4)
KW_GEMM_AVX2(f32, 1, 3, 3)
KW_GEMM_AVX2(f16, 1, 3, 3)

/* ---------------- packed Q4_0 / Q8_0: 8 rows interleaved (KW_FMT_Q4_0_X8, KW_FMT_Q8_0_X8) ----------------
 * A tile reads 4 rows side by side (4 short streams, see
 * kw_prefetch_next_tile) and pays the unpack, scale and convert per row and
 * block. Packed at load, a group of 8 rows is one stream: per block, 4
 * parts of 32 bytes, bytes 4L..4L+3 of part j = row L's qs[4j..4j+3] (low
 * nibbles: values 4j..4j+3, high: 16+4j..), then the 8 rows' F16 scales
 * (144 bytes, Q4_0's own size). Per part, maddubs of the nibbles (unsigned)
 * with 4 broadcast activation bytes leaves each row's pair sums in 16-bit
 * lanes; a block's 8 results add up in 16 bits (|sum| <= 8 * 2 * 15 * 127
 * = 30480) before one madd gives the 8 rows' dots; the offset, 8 times the
 * activation block's sum, is the same for every row (sums computed once
 * per activation row and call, at most KW_X8_MAX_NB blocks: wider matrices
 * are not packed). Rows past the last whole group use the tile. Q8_0
 * takes the same layout with 8 parts per block (x8_tile). */
#define KW_FMT_Q4_0_X8 3u
#define KW_FMT_Q8_0_X8 4u
#define KW_X8_BLK 144
#define KW_X8_BLK8 272
#define KW_X8_MAX_NB 1024

static int pack_avx2(kw_matrix *W, kw_pack_arena *a, kw_err *err) {
    const int q4 = W->type == KW_TYPE_Q4_0;
    if ((!q4 && W->type != KW_TYPE_Q8_0) || W->cols % KW_QK || W->cols / KW_QK > KW_X8_MAX_NB) return 1;
    const size_t blkb = q4 ? KW_X8_BLK : KW_X8_BLK8;
    int64_t groups = W->rows / 8, nb = W->cols / KW_QK;
    uint8_t *p = kw_pack_alloc(W, a, q4 ? KW_FMT_Q4_0_X8 : KW_FMT_Q8_0_X8, groups * 8, nb,
                               (size_t)groups * (size_t)nb * blkb, err);
    if (!p) return kw_pack_missing(a);
    for (int64_t g = 0; g < groups; g++)
        for (int64_t b = 0; b < nb; b++)
            kw_pack_q0_group_block(W, 8, g, b, 0u, p + KW_PACK_HDR_BYTES + (size_t)(g * nb + b) * blkb);
    W->packed = p;
    return 0;
}

/* One group of 8 rows x C activation rows. Q4_0 (q4): per part the low and
 * high nibbles into maddubs, summed in 16 bits, one madd per block, minus
 * 8 x the activation block's sum (sx: C rows, nb apart). Q8_0 (272 bytes
 * per group and block: 8 parts, then the scales): signed weights, so the
 * sign trick per part, and a part's pair sums reach 2 * 128 * 127 = 32512:
 * each is widened by madd before adding. */
KW_INLINE void x8_tile(const uint8_t *grp, int64_t nb, const uint8_t *x0, size_t xs, const int32_t *sx, float *y,
                       int64_t ldy, const int q4, const int C) {
    const size_t blkb = q4 ? KW_X8_BLK : KW_X8_BLK8, qsb = q4 ? 128 : 256;
    const int parts = q4 ? 4 : 8;
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256 acc[4];
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = grp + (size_t)b * blkb;
        __m256i s[4];
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) s[c] = _mm256_setzero_si256();
        _Pragma("GCC unroll 8") for (int k = 0; k < parts; k++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(blk + 32 * k));
            __m256i lo = q4 ? _mm256_and_si256(v, m4) : _mm256_sign_epi8(v, v);   /* Q8_0: |w| */
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
                const int8_t *xq = ((const kw_block_q8_0 *)(x0 + (size_t)c * xs) + b)->qs;
                int32_t x_lo, x_hi;
                memcpy(&x_lo, xq + 4 * k, 4);
                if (q4) {
                    memcpy(&x_hi, xq + 16 + 4 * k, 4);
                    s[c] = _mm256_add_epi16(s[c], _mm256_maddubs_epi16(lo, _mm256_set1_epi32(x_lo)));
                    s[c] = _mm256_add_epi16(s[c], _mm256_maddubs_epi16(hi, _mm256_set1_epi32(x_hi)));
                } else {
                    __m256i p16 = _mm256_maddubs_epi16(lo, _mm256_sign_epi8(_mm256_set1_epi32(x_lo), v));
                    s[c] = _mm256_add_epi32(s[c], _mm256_madd_epi16(p16, ones));
                }
            }
        }
        __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + qsb)));
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
            const kw_block_q8_0 *xb = (const kw_block_q8_0 *)(x0 + (size_t)c * xs) + b;
            __m256i d = q4 ? _mm256_sub_epi32(_mm256_madd_epi16(s[c], ones),
                                              _mm256_set1_epi32(8 * sx[(size_t)c * (size_t)nb + (size_t)b]))
                           : s[c];
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_mul_ps(dw, _mm256_set1_ps(h2f(xb->d))), acc[c]);
        }
    }
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) _mm256_storeu_ps(y + (size_t)c * (size_t)ldy, acc[c]);
}

/* TILE(..., C) with C = 1..4 a compile-time constant. */
#define KW_X8_SWITCH(C, TILE, ...)          \
    switch (C) {                            \
    case 1: TILE(__VA_ARGS__, 1); break;    \
    case 2: TILE(__VA_ARGS__, 2); break;    \
    case 3: TILE(__VA_ARGS__, 3); break;    \
    default: TILE(__VA_ARGS__, 4); break;   \
    }

/* Packed rows [r0, end) in groups of 8 (r0 a multiple of 8: kw_matmul's
 * chunks are 16-aligned); returns the first row not done. Activation tiles
 * of 4 rows outside, groups inside: a thread's chunk of weights stays in
 * cache across a prefill's activation tiles. */
static int64_t gemm_x8(const kw_pack_hdr *h, int q4, int64_t r0, int64_t r1, const void *X, size_t xs, int64_t nx,
                       float *Y, int64_t ldy) {
    if (r0 % 8) return r0;
    int64_t end = r1 < h->packed_rows ? r1 : h->packed_rows;
    if (end <= r0) return r0;
    end -= (end - r0) % 8;
    const int64_t nb = h->nb;
    const uint8_t *base = (const uint8_t *)h + KW_PACK_HDR_BYTES;
    int32_t sx[4 * KW_X8_MAX_NB];
    for (int64_t i = 0; i < nx; i += 4) {
        int C = (int)(nx - i < 4 ? nx - i : 4);
        const uint8_t *x0 = (const uint8_t *)X + (size_t)i * xs;
        for (int c = 0; c < C && q4; c++)
            for (int64_t b = 0; b < nb; b++) {
                const int8_t *q = ((const kw_block_q8_0 *)(x0 + (size_t)c * xs) + b)->qs;
                int32_t t = 0;
                for (int k = 0; k < KW_QK; k++) t += q[k];
                sx[(size_t)c * (size_t)nb + (size_t)b] = t;
            }
        for (int64_t r = r0; r < end; r += 8) {
            const uint8_t *grp = base + (size_t)(r / 8) * (size_t)nb * (q4 ? KW_X8_BLK : KW_X8_BLK8);
            float *y = Y + i * ldy + r;
            if (q4) { KW_X8_SWITCH(C, x8_tile, grp, nb, x0, xs, sx, y, ldy, 1) }
            else { KW_X8_SWITCH(C, x8_tile, grp, nb, x0, xs, sx, y, ldy, 0) }
        }
    }
    return end;
}

static void gemm_q4_0(const kw_matrix *W, int64_t r0, int64_t r1, const void *X, size_t xs, int64_t nx, float *Y,
                      int64_t ldy) {
    const kw_pack_hdr *h = kw_packed_hdr(W, KW_FMT_Q4_0_X8);
    if (h) r0 = gemm_x8(h, 1, r0, r1, X, xs, nx, Y, ldy);
    if (r0 < r1) gemm_q4_0_rows(W, r0, r1, X, xs, nx, Y, ldy);
}

static void gemm_q8_0(const kw_matrix *W, int64_t r0, int64_t r1, const void *X, size_t xs, int64_t nx, float *Y,
                      int64_t ldy) {
    const kw_pack_hdr *h = kw_packed_hdr(W, KW_FMT_Q8_0_X8);
    if (h) r0 = gemm_x8(h, 0, r0, r1, X, xs, nx, Y, ldy);
    if (r0 < r1) gemm_q8_0_rows(W, r0, r1, X, xs, nx, Y, ldy);
}

static void act_f16_as_f32(const float *x, void *dst, int64_t n) {
    float *y = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; i++) y[i] = _cvtsh_ss(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT));
}

void kw_kernels_avx2_init(kw_kernel_set *k) {
    k->name = "avx2";
    k->quant[KW_TYPE_F16] = act_f16_as_f32;
    k->gemm[KW_TYPE_Q4_0] = gemm_q4_0;
    k->gemm[KW_TYPE_Q5_0] = gemm_q5_0;
    k->gemm[KW_TYPE_Q8_0] = gemm_q8_0;
    k->gemm[KW_TYPE_F32] = gemm_f32;
    k->gemm[KW_TYPE_F16] = gemm_f16;
    k->pack = pack_avx2;
}
