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
 * split never changes results. Q4_K/Q5_K/Q6_K x Q8_K: one weight row x up
 * to 4 activation rows, exact integers per super-block (see "K-quants"
 * below); Q4_K repacked at load into 8-row groups (KW_FMT_Q4_K_X8). Other
 * types (Q4_1, Q5_1, BF16) use the scalar kernels. */
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
 * takes the same layout with 8 parts per block (x8_tile).
 * Blocks go in quads: the four blocks' scales (4 x 16 bytes) first, then
 * their quants (128 or 256 bytes each; kw_q0_quants / kw_q0_scales in
 * kernels.h), so every block's quants start on a cache line and decode
 * (one activation row) reads them with non-temporal loads (vmovntdqa ymm),
 * as the AVX-512 family's pairs; a group's last quad is filled up with
 * zero blocks. The earlier layout
 * (144 / 272 bytes per block, scales after quants) let decode use them on
 * every other block only: Q8_0 decode 1.024x (fast host state 1.054x). */
#define KW_FMT_Q4_0_X8 3u
#define KW_FMT_Q8_0_X8 4u
#define KW_X8_MAX_NB 1024

static int pack_q4k_x8(kw_matrix *W, kw_pack_arena *a, kw_err *err);

static int pack_avx2(kw_matrix *W, kw_pack_arena *a, kw_err *err) {
    if (W->type == KW_TYPE_Q4_K) return pack_q4k_x8(W, a, err);
    const int q4 = W->type == KW_TYPE_Q4_0;
    if ((!q4 && W->type != KW_TYPE_Q8_0) || W->cols % KW_QK || W->cols / KW_QK > KW_X8_MAX_NB) return 1;
    int64_t groups = W->rows / 8, nb = W->cols / KW_QK;
    const size_t gb = kw_q0_group_bytes(8, q4, nb);
    uint8_t *p = kw_pack_alloc(W, a, q4 ? KW_FMT_Q4_0_X8 : KW_FMT_Q8_0_X8, groups * 8, nb, (size_t)groups * gb, err);
    if (!p) return kw_pack_missing(a);
    for (int64_t g = 0; g < groups; g++) {
        uint8_t *grp = p + KW_PACK_HDR_BYTES + (size_t)g * gb;
        for (int64_t b = 0; b < nb; b++) kw_pack_q0_group_block(W, 8, g, b, 0u, grp);
    }
    W->packed = p;
    return 0;
}

/* S groups of 8 rows (grp[s], outputs at y[s]) x C activation rows, block
 * by block, every group's block of a step in turn: S = 1 is the tile, S > 1
 * the lanes of x8_lanes below; S * C <= 4. Q4_0 (q4): per part the low and
 * high nibbles into maddubs, summed in 16 bits, one madd per block, minus
 * 8 x the activation block's sum (sx: C rows, nb apart). Q8_0 (272 bytes
 * per group and block: 8 parts, then the scales): signed weights, so the
 * sign trick per part, and a part's pair sums reach 2 * 128 * 127 = 32512:
 * each is widened by madd before adding. One row (decode) with pf > 0:
 * at the start of every run of 4 blocks, the lines of the run pf bytes
 * ahead are asked for into L2 (kw_decode_prefetch_bytes: Intel 4096; on the
 * session-25 Xeon with KW_KERNEL=avx2, bench_ab knob variants on the same
 * pages, Q4_0 decode 1.26x, Q8_0 1.17x; 2048 bytes ahead 1.24x). */
static size_t g_x8_pf;

KW_INLINE void x8_groups(const uint8_t *const *grp, int64_t nb, const uint8_t *x0, size_t xs, const int32_t *sx,
                         float *const *y, int64_t ldy, const int q4, const int C, const int S) {
    const size_t pf = C == 1 ? g_x8_pf : 0, rb = kw_q0_run_bytes(8, q4);
    const int parts = q4 ? 4 : 8;
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256 acc[4];
    _Pragma("GCC unroll 4") for (int t = 0; t < S * C; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        if (pf && b % kw_q0_run_blocks(8) == 0)
            _Pragma("GCC unroll 4") for (int g = 0; g < S; g++)
                kw_prefetch_l2(grp[g] + (size_t)(b / kw_q0_run_blocks(8)) * rb + pf, rb);
        _Pragma("GCC unroll 4") for (int g = 0; g < S; g++) {
            const uint8_t *blk = kw_q0_quants(grp[g], 8, q4, b);
            __m256i s[4];
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) s[c] = _mm256_setzero_si256();
            _Pragma("GCC unroll 8") for (int k = 0; k < parts; k++) {
                __m256i v = C == 1 ? _mm256_stream_load_si256((const __m256i *)(blk + 32 * k))   /* decode */
                                   : _mm256_loadu_si256((const __m256i *)(blk + 32 * k));
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
            __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)kw_q0_scales(grp[g], 8, q4, b)));
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
                const kw_block_q8_0 *xb = (const kw_block_q8_0 *)(x0 + (size_t)c * xs) + b;
                __m256i d = q4 ? _mm256_sub_epi32(_mm256_madd_epi16(s[c], ones),
                                                  _mm256_set1_epi32(8 * sx[(size_t)c * (size_t)nb + (size_t)b]))
                               : s[c];
                acc[g * C + c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_mul_ps(dw, _mm256_set1_ps(h2f(xb->d))),
                                                 acc[g * C + c]);
            }
        }
    }
    _Pragma("GCC unroll 4") for (int g = 0; g < S; g++)
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) _mm256_storeu_ps(y[g] + (size_t)c * (size_t)ldy, acc[g * C + c]);
}

KW_INLINE void x8_tile(const uint8_t *grp, int64_t nb, const uint8_t *x0, size_t xs, const int32_t *sx, float *y,
                       int64_t ldy, const int q4, const int C) {
    x8_groups(&grp, nb, x0, xs, sx, &y, ldy, q4, C, 1);
}

/* Decode (one activation row) of a run of packed groups in several
 * streams, as the AVX-512 family's x16_q8_lanes: the run [g0, g1) is cut
 * into S contiguous lanes (each at least KW_X8_LANE_BYTES) and group i of
 * every lane is computed at the same time, so a core has S sequential
 * streams in flight instead of one. Every output gets the tile's
 * operations in the tile's order: identical results. Unlike the AVX-512
 * family (Q8_0 only), both types gain here: this family's tile does about
 * twice the work per byte. Measured with KW_KERNEL=avx2 on the same pages
 * (bench_ab knob variants of one build, 1B shape, 2 threads, 16-token
 * decode bursts, Zen 5, probe median 52-53 GB/s): Q8_0 1.075x and 1.085x
 * over 120 s; Q4_0 1.061x and 1.035x over 150 s (against the tile with the
 * vectorised block sums of x8_block_sums, themselves 1.014-1.019x against
 * the scalar loop they replace). */
#define KW_X8_LANES 4
#define KW_X8_LANE_BYTES ((size_t)128 * 1024)

KW_INLINE void x8_lanes_run(const uint8_t *base, size_t gb, int64_t nb, int64_t g0, int64_t g1, const uint8_t *x0,
                            const int32_t *sx, float *Y, const int q4, const int S) {
    int64_t first[KW_X8_LANES], extra, len = kw_lanes_split(g0, g1, S, first, &extra);
    for (int64_t i = 0; i < len; i++) {
        const uint8_t *grp[KW_X8_LANES];
        float *y[KW_X8_LANES];
        for (int s = 0; s < S; s++) {
            grp[s] = base + (size_t)(first[s] + i) * gb;
            y[s] = Y + 8 * (first[s] + i);
        }
        x8_groups(grp, nb, x0, 0, sx, y, 0, q4, 1, S);
    }
    for (int s = 0; s < extra; s++) x8_tile(base + (size_t)(first[s] + len) * gb, nb, x0, 0, sx, Y + 8 * (first[s] + len), 0, q4, 1);
}

/* Groups [g0, g1) against one activation row in lanes; false (nothing
 * done) when the run is too short for two. */
static bool x8_lanes(const uint8_t *base, size_t gb, int64_t nb, int64_t g0, int64_t g1, const uint8_t *x0,
                     const int32_t *sx, float *Y, int q4) {
    size_t lanes = (size_t)(g1 - g0) * gb / KW_X8_LANE_BYTES;
    if (lanes < 2) return false;
    const int S = lanes >= KW_X8_LANES ? KW_X8_LANES : (int)lanes;
    if (q4) {
        if (S == 4) x8_lanes_run(base, gb, nb, g0, g1, x0, sx, Y, 1, 4);
        else if (S == 3) x8_lanes_run(base, gb, nb, g0, g1, x0, sx, Y, 1, 3);
        else x8_lanes_run(base, gb, nb, g0, g1, x0, sx, Y, 1, 2);
    } else {
        if (S == 4) x8_lanes_run(base, gb, nb, g0, g1, x0, sx, Y, 0, 4);
        else if (S == 3) x8_lanes_run(base, gb, nb, g0, g1, x0, sx, Y, 0, 3);
        else x8_lanes_run(base, gb, nb, g0, g1, x0, sx, Y, 0, 2);
    }
    return true;
}

/* The sum of each Q8_0 activation block's 32 values (exact int32), the
 * offset term of the Q4_0 tile. */
static void x8_block_sums(const uint8_t *x, int64_t nb, int32_t *sx) {
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < nb; b++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)((const kw_block_q8_0 *)x + b)->qs);
        __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16);
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
        sx[b] = _mm_cvtsi128_si32(h);
    }
}

/* TILE(..., C) with C = 1..4 a compile-time constant. */
#define KW_X8_SWITCH(C, TILE, ...)          \
    switch (C) {                            \
    case 1: TILE(__VA_ARGS__, 1); break;    \
    case 2: TILE(__VA_ARGS__, 2); break;    \
    case 3: TILE(__VA_ARGS__, 3); break;    \
    default: TILE(__VA_ARGS__, 4); break;   \
    }

/* The end of the whole 8-row groups of h's packed rows in [r0, r1) (r0
 * itself when r0 is not a group start or no whole group is there). */
static int64_t x8_packed_end(const kw_pack_hdr *h, int64_t r0, int64_t r1) {
    if (r0 % 8) return r0;
    int64_t end = r1 < h->packed_rows ? r1 : h->packed_rows;
    if (end <= r0) return r0;
    return end - (end - r0) % 8;
}

/* Packed rows [r0, end) in groups of 8 (r0 a multiple of 8: kw_matmul's
 * chunks are 16-aligned); returns the first row not done. Activation tiles
 * of 4 rows outside, groups inside: a thread's chunk of weights stays in
 * cache across a prefill's activation tiles. */
static int64_t gemm_x8(const kw_pack_hdr *h, int q4, int64_t r0, int64_t r1, const void *X, size_t xs, int64_t nx,
                       float *Y, int64_t ldy) {
    const int64_t end = x8_packed_end(h, r0, r1);
    if (end <= r0) return r0;
    const int64_t nb = h->nb;
    const uint8_t *base = (const uint8_t *)h + KW_PACK_HDR_BYTES;
    int32_t sx[4 * KW_X8_MAX_NB];
    for (int64_t i = 0; i < nx; i += 4) {
        int C = (int)(nx - i < 4 ? nx - i : 4);
        const uint8_t *x0 = (const uint8_t *)X + (size_t)i * xs;
        for (int c = 0; c < C && q4; c++) x8_block_sums(x0 + (size_t)c * xs, nb, sx + (size_t)c * (size_t)nb);
        if (nx == 1 && x8_lanes(base, kw_q0_group_bytes(8, q4, nb), nb, r0 / 8, end / 8, x0, sx, Y, q4)) break;
        for (int64_t r = r0; r < end; r += 8) {
            const uint8_t *grp = base + (size_t)(r / 8) * kw_q0_group_bytes(8, q4, nb);
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

/* ---------------- K-quants: Q4_K, Q5_K, Q6_K x Q8_K (standard block layout) ----------------
 * One weight row x up to 4 activation rows per tile (the unpacked weights
 * of a super-block serve every activation row). Per super-block of 256
 * values everything up to the final scaling is exact integer work, as in
 * the scalar reference: maddubs of the unsigned levels with the Q8_K
 * bytes gives 16-bit pair sums (Q4_K <= 2*15*128, Q5_K <= 2*31*128, Q6_K
 * <= 2*63*128: no saturation), madd with the sub-block's scale (as int16,
 * broadcast per lane) widens and scales them into 8 int32 lanes. The Q4_K/
 * Q5_K min term (sum_j m_j * bsums) and the Q6_K offset (32 * sum_j sc_j
 * * bsum_j, levels stored as q + 32) are one madd of the Q8_K bsums with
 * the block's mins / scales. Then per super-block the lanes are converted
 * and scaled by d*dx (and dmin*dx) into float lanes, summed across lanes
 * at the end: the same instruction sequence for every output whatever the
 * tile, so results do not depend on the thread split. */

/* The 8 six-bit scales (bytes 0-7) and mins (bytes 8-15) of a Q4_K/Q5_K
 * block's 12 packed bytes: kw_get_scale_min_k4 for all j at once, on
 * 32-bit words (j < 4: low 6 bits of bytes j, j+4; j >= 4: nibbles of
 * byte j+4 with the top 2 bits of bytes j-4 / j above them). */
KW_INLINE __m128i k4_scale_min_bytes(const uint8_t *s) {
    uint32_t a0, a1, a2;
    memcpy(&a0, s, 4);
    memcpy(&a1, s + 4, 4);
    memcpy(&a2, s + 8, 4);
    uint32_t sc_lo = a0 & 0x3f3f3f3fu, m_lo = a1 & 0x3f3f3f3fu;
    uint32_t sc_hi = (a2 & 0x0f0f0f0fu) | (((a0 >> 6) & 0x03030303u) << 4);
    uint32_t m_hi = ((a2 >> 4) & 0x0f0f0f0fu) | (((a1 >> 6) & 0x03030303u) << 4);
    return _mm_setr_epi32((int)sc_lo, (int)sc_hi, (int)m_lo, (int)m_hi);
}

/* int16 lane j of each 128-bit half of v in every lane of that half. */
#define KW_BCAST16(v, j) _mm256_shuffle_epi8((v), _mm256_set1_epi16((short)(0x0100 + 0x0202 * (j))))

/* Q4_K (q5 = 0) / Q5_K: sub-block j (32 values) is the low (even j) or
 * high (odd j) nibbles of qs[32 * (j / 2) ...], Q5_K's fifth bit is bit j
 * of qh[l]. */
KW_INLINE void k45_tile(const uint8_t *w, const uint8_t *x0, size_t xs, int64_t nb, float *y, int64_t ldy,
                        const int q5, const int C) {
    const size_t bsz = q5 ? sizeof(kw_block_q5_K) : sizeof(kw_block_q4_K);
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    /* m_0 m_0 m_1 m_1 .. m_3 m_3 | m_4 m_4 .. m_7 m_7 from the mins in both halves: each pair of Q8_K bsums */
    const __m256i mpair = _mm256_setr_epi8(0, 1, 0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 6, 7, 6, 7,
                                           8, 9, 8, 9, 10, 11, 10, 11, 12, 13, 12, 13, 14, 15, 14, 15);
    __m256 acc[4];
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *blk = w + (size_t)i * bsz;
        uint16_t dh, dmh;
        memcpy(&dh, blk, 2);
        memcpy(&dmh, blk + 2, 2);
        const uint8_t *qs = blk + (q5 ? 48 : 16);
        __m256i sm = _mm256_cvtepu8_epi16(k4_scale_min_bytes(blk + 4));   /* scales | mins as int16 */
        __m256i scb = _mm256_permute2x128_si256(sm, sm, 0x00);
        __m256i mp = _mm256_shuffle_epi8(_mm256_permute2x128_si256(sm, sm, 0x11), mpair);
        const float d = h2f(dh), dmin = h2f(dmh);
        const kw_block_q8_K *xb[4];
        __m256i sumi[4];
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
            xb[c] = (const kw_block_q8_K *)(x0 + (size_t)c * xs) + i;
            __m256i summ = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)xb[c]->bsums), mp);
            acc[c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(summ), _mm256_set1_ps(dmin * xb[c]->d), acc[c]);
            sumi[c] = _mm256_setzero_si256();
        }
        __m256i hb = q5 ? _mm256_loadu_si256((const __m256i *)(blk + 16)) : _mm256_setzero_si256();
        _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * p));
            __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            if (q5) {   /* bit 2p of each qh byte, then bit 2p+1, into bit 4 */
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(hb, one), 4));
                hb = _mm256_srli_epi16(hb, 1);
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(hb, one), 4));
                hb = _mm256_srli_epi16(hb, 1);
            }
            __m256i slo = KW_BCAST16(scb, 2 * p), shi = KW_BCAST16(scb, 2 * p + 1);
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
                const int8_t *xq = xb[c]->qs + 64 * p;
                __m256i a = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)xq)), slo);
                __m256i b = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(xq + 32))), shi);
                sumi[c] = _mm256_add_epi32(sumi[c], _mm256_add_epi32(a, b));
            }
        }
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++)
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[c]), _mm256_set1_ps(d * xb[c]->d), acc[c]);
    }
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) y[c * ldy] = hsum8(acc[c]);
}

/* Q6_K: per half h of the block (128 values), quarter t (32 values) is the
 * low (t = 0, 1) or high (t = 2, 3) nibbles of ql[64h + 32(t & 1) ...]
 * with bits 2t, 2t+1 of qh[32h + l] above them; its two 16-value
 * sub-blocks have int8 scales 8h+2t, 8h+2t+1 (lanes 0-7 and 8-15 of the
 * pair sums). */
KW_INLINE void q6k_tile(const uint8_t *w, const uint8_t *x0, size_t xs, int64_t nb, float *y, int64_t ldy,
                        const int C) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
    __m256 acc[4];
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const kw_block_q6_K *b = (const kw_block_q6_K *)w + i;
        __m128i sc8 = _mm_loadu_si128((const __m128i *)b->scales);
        const float d = h2f(b->d);
        const kw_block_q8_K *xb[4];
        __m256i sumi[4];
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {   /* minus 32 * sum_j sc_j * bsum_j */
            xb[c] = (const kw_block_q8_K *)(x0 + (size_t)c * xs) + i;
            __m256i off = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)xb[c]->bsums), _mm256_cvtepi8_epi16(sc8));
            sumi[c] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off, 5));
        }
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            __m256i ql0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
            __m256i ql1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
            _Pragma("GCC unroll 4") for (int t = 0; t < 4; t++) {
                __m256i l = t & 1 ? ql1 : ql0;
                if (t & 2) l = _mm256_srli_epi16(l, 4);
                __m256i u = _mm256_or_si256(_mm256_and_si256(l, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
                qh = _mm256_srli_epi16(qh, 2);
                const int j = 8 * h + 2 * t;
                __m256i scv = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, _mm_setr_epi8(j, j, j, j, j, j, j, j, j + 1, j + 1,
                                                                                       j + 1, j + 1, j + 1, j + 1, j + 1, j + 1)));
                _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
                    __m256i xv = _mm256_loadu_si256((const __m256i *)(xb[c]->qs + 128 * h + 32 * t));
                    sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(_mm256_maddubs_epi16(u, xv), scv));
                }
            }
        }
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++)
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[c]), _mm256_set1_ps(d * xb[c]->d), acc[c]);
    }
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) y[c * ldy] = hsum8(acc[c]);
}

#define KW_KQ_PASS_BYTES (256u * 1024u)   /* weight bytes of one pass: stays in L2 across the activation tiles */

/* Rows [r0, r1) x nx activation rows: passes of rows whose weights stay in
 * cache while every activation tile of 4 rows runs over them (decode: one
 * tile, the rows stream once). kind: 4 (Q4_K), 5 (Q5_K), 6 (Q6_K). */
static void gemm_kq(const kw_matrix *W, const int kind, int64_t r0, int64_t r1, const void *X, size_t xs,
                    int64_t nx, float *Y, int64_t ldy) {
    const int64_t nb = W->cols / KW_QK_K;
    int64_t pass = (int64_t)(KW_KQ_PASS_BYTES / W->row_bytes);
    if (pass < 1) pass = 1;
    for (int64_t rb = r0; rb < r1; rb += pass) {
        int64_t re = rb + pass < r1 ? rb + pass : r1;
        for (int64_t i = 0; i < nx; i += 4) {
            const int C = (int)(nx - i < 4 ? nx - i : 4);
            const uint8_t *x0 = (const uint8_t *)X + (size_t)i * xs;
            for (int64_t r = rb; r < re; r++) {
                const uint8_t *w = (const uint8_t *)W->data + (size_t)r * W->row_bytes;
                float *y = Y + i * ldy + r;
                if (kind == 6) { KW_X8_SWITCH(C, q6k_tile, w, x0, xs, nb, y, ldy) }
                else if (kind == 5) { KW_X8_SWITCH(C, k45_tile, w, x0, xs, nb, y, ldy, 1) }
                else { KW_X8_SWITCH(C, k45_tile, w, x0, xs, nb, y, ldy, 0) }
            }
        }
    }
}

/* ---------------- packed Q4_K: 8 rows interleaved (KW_FMT_Q4_K_X8) ----------------
 * The row tile above spends ~100 uops per row and super-block (one thread
 * GEMV 17 GB/s). Packed at load, per group of 8 rows and super-block
 * (1184 bytes, 148 per row against the block's 144; a multiple of 32, so
 * no 32-byte load straddles a line):
 *   [0, 1024)     32 parts of 32 bytes: bytes 4L..4L+3 of part p = row L's
 *                 qs[4p..4p+3]; part 8j+k's low nibbles are values 64j+4k..
 *                 (sub-block 2j), its high nibbles 64j+32+4k.. (2j+1);
 *   [1024, 1088)  the 6-bit scales, byte 8s+L = row L's sc of sub-block s;
 *   [1088, 1152)  the mins in pairs, byte 16t+2L+h = row L's m of sub-block
 *                 2t+h (zero-extended: the int16 pairs madd takes);
 *   [1152, 1184)  the 8 rows' F16 d, then their F16 dmin.
 * Per part, maddubs of the nibbles with 4 broadcast Q8_K bytes advances 8
 * rows; a sub-block's 8 parts add up in 16 bits (|.| <= 8 * 2 * 15 * 128 =
 * 30720), then one madd by the (sc, sc) pairs gives sc * dot per row in
 * int32; the min term is a madd of the min pairs with the Q8_K per-32 sums.
 * Exact integers per super-block, then d*dx and dmin*dx in float, as the
 * row tile but with the rows in lanes (the same float steps as the
 * AVX-512 x16 tile: logits of a tiny Q4_K model bit-identical to it). Rows
 * past the last whole group use the row tile. One thread, CPU time: GEMV
 * 17 -> 22.5-24.1 GB/s, GEMM 54 -> 74-78 GMAC/s (bench_kernels -k avx2). */
#define KW_FMT_Q4_K_X8 5u
#define Q4K_X8_BLK 1184

static int pack_q4k_x8(kw_matrix *W, kw_pack_arena *a, kw_err *err) {
    if (W->cols % KW_QK_K) return 1;
    int64_t groups = W->rows / 8, nb = W->cols / KW_QK_K;
    uint8_t *p = kw_pack_alloc(W, a, KW_FMT_Q4_K_X8, groups * 8, nb, (size_t)groups * (size_t)nb * Q4K_X8_BLK, err);
    if (!p) return kw_pack_missing(a);
    for (int64_t g = 0; g < groups; g++)
        for (int64_t i = 0; i < nb; i++) {
            uint8_t *dst = p + KW_PACK_HDR_BYTES + (size_t)(g * nb + i) * Q4K_X8_BLK;
            uint16_t *dd = (uint16_t *)(dst + 1152), *dm = (uint16_t *)(dst + 1168);
            for (int L = 0; L < 8; L++) {
                const kw_block_q4_K *b = (const kw_block_q4_K *)((const uint8_t *)W->data + (size_t)(8 * g + L) * W->row_bytes) + i;
                for (int q = 0; q < 32; q++) memcpy(dst + 32 * q + 4 * L, b->qs + 4 * q, 4);
                for (int sb = 0; sb < 8; sb++) {
                    uint8_t sc, m;
                    kw_get_scale_min_k4(sb, b->scales, &sc, &m);
                    dst[1024 + 8 * sb + L] = sc;
                    dst[1088 + 16 * (sb / 2) + 2 * L + (sb & 1)] = m;
                }
                dd[L] = b->d;
                dm[L] = b->dmin;
            }
        }
    W->packed = p;
    return 0;
}

/* One group of 8 rows x C (1..2) activation rows: y[c*ldy + L]. */
KW_INLINE void q4k_x8_tile(const uint8_t *grp, int64_t nb, const uint8_t *x0, size_t xs, float *y, int64_t ldy,
                           const int C) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256 acc[2];
    _Pragma("GCC unroll 2") for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *blk = grp + (size_t)i * Q4K_X8_BLK;
        const kw_block_q8_K *xb[2];
        __m256i isum[2];
        _Pragma("GCC unroll 2") for (int c = 0; c < C; c++) {
            xb[c] = (const kw_block_q8_K *)(x0 + (size_t)c * xs) + i;
            isum[c] = _mm256_setzero_si256();
        }
        _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
            __m256i slo[2], shi[2];
            _Pragma("GCC unroll 2") for (int c = 0; c < C; c++) slo[c] = shi[c] = _mm256_setzero_si256();
            _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(blk + 32 * (8 * j + k)));
                __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                _Pragma("GCC unroll 2") for (int c = 0; c < C; c++) {
                    int32_t xl, xh;
                    memcpy(&xl, xb[c]->qs + 64 * j + 4 * k, 4);
                    memcpy(&xh, xb[c]->qs + 64 * j + 32 + 4 * k, 4);
                    slo[c] = _mm256_add_epi16(slo[c], _mm256_maddubs_epi16(lo, _mm256_set1_epi32(xl)));
                    shi[c] = _mm256_add_epi16(shi[c], _mm256_maddubs_epi16(hi, _mm256_set1_epi32(xh)));
                }
            }
            /* (sc, sc) in every row's 32-bit lane, sub-blocks 2j and 2j+1 */
            __m256i s0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 1024 + 16 * j)));
            __m256i s1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 1024 + 16 * j + 8)));
            s0 = _mm256_or_si256(s0, _mm256_slli_epi32(s0, 16));
            s1 = _mm256_or_si256(s1, _mm256_slli_epi32(s1, 16));
            _Pragma("GCC unroll 2") for (int c = 0; c < C; c++)
                isum[c] = _mm256_add_epi32(isum[c], _mm256_add_epi32(_mm256_madd_epi16(slo[c], s0), _mm256_madd_epi16(shi[c], s1)));
        }
        __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 1152)));
        __m256 dmv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 1168)));
        _Pragma("GCC unroll 2") for (int c = 0; c < C; c++) {
            /* per-32 sums of the Q8_K bsums as int16 pairs: word t = (sum 2t, sum 2t+1) */
            __m256i s32 = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)xb[c]->bsums), ones);   /* |.| <= 32*128 */
            __m128i p16 = _mm_packs_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
            int32_t pw[4];
            _mm_storeu_si128((__m128i *)pw, p16);
            __m256i im = _mm256_setzero_si256();
            _Pragma("GCC unroll 4") for (int t = 0; t < 4; t++) {
                __m256i mp = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(blk + 1088 + 16 * t)));
                im = _mm256_add_epi32(im, _mm256_madd_epi16(mp, _mm256_set1_epi32(pw[t])));   /* <= 8*63*4096 */
            }
            __m256 dx = _mm256_set1_ps(xb[c]->d);
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_mul_ps(dv, dx), acc[c]);
            acc[c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(im), _mm256_mul_ps(dmv, dx), acc[c]);
        }
    }
    _Pragma("GCC unroll 2") for (int c = 0; c < C; c++) _mm256_storeu_ps(y + (size_t)c * (size_t)ldy, acc[c]);
}

/* Packed groups of rows [r0, end) (r0 a multiple of 8: kw_matmul's chunks
 * are 16-aligned) in passes that stay in L2 across the activation tiles of
 * 2 rows; returns the first row not done. */
static int64_t gemm_q4k_x8(const kw_pack_hdr *h, int64_t r0, int64_t r1, const void *X, size_t xs, int64_t nx,
                           float *Y, int64_t ldy) {
    const int64_t end = x8_packed_end(h, r0, r1);
    if (end <= r0) return r0;
    const int64_t nb = h->nb;
    const size_t gbytes = (size_t)nb * Q4K_X8_BLK;
    const uint8_t *base = (const uint8_t *)h + KW_PACK_HDR_BYTES;
    int64_t pass = 8 * (int64_t)(KW_KQ_PASS_BYTES / gbytes);
    if (pass < 8) pass = 8;
    for (int64_t rb = r0; rb < end; rb += pass) {
        int64_t re = rb + pass < end ? rb + pass : end;
        for (int64_t i = 0; i < nx; i += 2) {
            const uint8_t *x0 = (const uint8_t *)X + (size_t)i * xs;
            for (int64_t r = rb; r < re; r += 8) {
                const uint8_t *grp = base + (size_t)(r / 8) * gbytes;
                if (nx - i >= 2) q4k_x8_tile(grp, nb, x0, xs, Y + i * ldy + r, ldy, 2);
                else q4k_x8_tile(grp, nb, x0, xs, Y + i * ldy + r, ldy, 1);
            }
        }
    }
    return end;
}

static void gemm_q4_K(const kw_matrix *W, int64_t r0, int64_t r1, const void *X, size_t xs, int64_t nx, float *Y,
                      int64_t ldy) {
    const kw_pack_hdr *h = kw_packed_hdr(W, KW_FMT_Q4_K_X8);
    if (h) r0 = gemm_q4k_x8(h, r0, r1, X, xs, nx, Y, ldy);
    if (r0 < r1) gemm_kq(W, 4, r0, r1, X, xs, nx, Y, ldy);
}
static void gemm_q5_K(const kw_matrix *W, int64_t r0, int64_t r1, const void *X, size_t xs, int64_t nx, float *Y,
                      int64_t ldy) {
    gemm_kq(W, 5, r0, r1, X, xs, nx, Y, ldy);
}
static void gemm_q6_K(const kw_matrix *W, int64_t r0, int64_t r1, const void *X, size_t xs, int64_t nx, float *Y,
                      int64_t ldy) {
    gemm_kq(W, 6, r0, r1, X, xs, nx, Y, ldy);
}

/* Q8_K activations byte for byte as kw_quantize_q8_K_ref: amax over |x|
 * (NaN lanes keep the running maximum, as the reference skips them), the
 * first value with that magnitude as max, q = min(127, round-half-even(
 * (-127 / max) * x)) (cvtps rounds as the reference's magic-number add),
 * bsums over 16 values, d = 1 / iscale. For K-quant weights it runs once
 * per matmul, on one thread at decode: the scalar reference cost ~2.6 us
 * per 2048 values, as much as a 64-row Q4_K GEMV from L2. */
static void act_q8_K(const float *x, void *dst, int64_t n) {
    kw_block_q8_K *b = dst;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / KW_QK_K; i++, x += KW_QK_K) {
        __m256 mx = _mm256_setzero_ps();
        for (int j = 0; j < KW_QK_K; j += 8) mx = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), mx);
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
        if (!amax) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        int first = 0;
        for (int j = 0; j < KW_QK_K; j += 8) {
            __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j));
            int m = _mm256_movemask_ps(_mm256_cmp_ps(a, _mm256_set1_ps(amax), _CMP_EQ_OQ));
            if (m) {
                first = j + __builtin_ctz((unsigned)m);
                break;
            }
        }
        const float iscale = -127.f / x[first];
        const __m256 is = _mm256_set1_ps(iscale);
        const __m256i q127 = _mm256_set1_epi32(127);
        for (int j = 0; j < KW_QK_K; j += 16) {
            __m256i a = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(x + j))), q127);
            __m256i c = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(x + j + 8))), q127);
            __m128i a16 = _mm_packs_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
            __m128i c16 = _mm_packs_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
            _mm_storeu_si128((__m128i *)(b[i].qs + j), _mm_packs_epi16(a16, c16));
            __m128i s = _mm_madd_epi16(_mm_add_epi16(a16, c16), _mm_set1_epi16(1));   /* |sum| <= 16 * 128 */
            s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
            s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
            b[i].bsums[j / 16] = (int16_t)_mm_cvtsi128_si32(s);
        }
        b[i].d = 1 / iscale;
    }
}

static void act_f16_as_f32(const float *x, void *dst, int64_t n) {
    float *y = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; i++) y[i] = _cvtsh_ss(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT));
}

/* The bandwidth probe's non-temporal read (kernel set read_nt), as x8_tile reads in decode. */
static uint64_t read_nt_avx2(const void *p, size_t bytes) {
    const uint8_t *q = p;
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (size_t o = 0; o + 256 <= bytes; o += 256) {
        a = _mm256_add_epi64(_mm256_add_epi64(a, _mm256_stream_load_si256((const __m256i *)(q + o))),
                             _mm256_stream_load_si256((const __m256i *)(q + o + 32)));
        b = _mm256_add_epi64(_mm256_add_epi64(b, _mm256_stream_load_si256((const __m256i *)(q + o + 64))),
                             _mm256_stream_load_si256((const __m256i *)(q + o + 96)));
        c = _mm256_add_epi64(_mm256_add_epi64(c, _mm256_stream_load_si256((const __m256i *)(q + o + 128))),
                             _mm256_stream_load_si256((const __m256i *)(q + o + 160)));
        d = _mm256_add_epi64(_mm256_add_epi64(d, _mm256_stream_load_si256((const __m256i *)(q + o + 192))),
                             _mm256_stream_load_si256((const __m256i *)(q + o + 224)));
    }
    uint64_t lane[4], sum = 0;   /* unsigned: the sums wrap */
    _mm256_storeu_si256((__m256i *)lane, _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d)));
    for (int i = 0; i < 4; i++) sum += lane[i];
    return sum;
}

void kw_kernels_avx2_init(kw_kernel_set *k) {
    k->name = "avx2";
    g_x8_pf = kw_decode_prefetch_raw();
    k->read_nt = read_nt_avx2;
    k->quant[KW_TYPE_F16] = act_f16_as_f32;
    k->quant[KW_TYPE_Q8_K] = act_q8_K;   /* the AVX-512 family inherits it */
    k->gemm[KW_TYPE_Q4_0] = gemm_q4_0;
    k->gemm[KW_TYPE_Q5_0] = gemm_q5_0;
    k->gemm[KW_TYPE_Q8_0] = gemm_q8_0;
    k->gemm[KW_TYPE_F32] = gemm_f32;
    k->gemm[KW_TYPE_F16] = gemm_f16;
    k->gemm[KW_TYPE_Q4_K] = gemm_q4_K;
    k->gemm[KW_TYPE_Q5_K] = gemm_q5_K;
    k->gemm[KW_TYPE_Q6_K] = gemm_q6_K;
    k->pack = pack_avx2;
    for (int t = 0; t < KW_TYPE_COUNT; t++) k->gemm_experts[t] = k->gemm[t];   /* unpacked: the stored rows */
}
