/* x16_avx512.h - the one unpack of a block of the 16-row interleaved packed
 * Q4_0 / Q8_0 format (layout in kernels_avx512.c), shared by the per-group
 * tile there and the prefill GEMM in gemm_avx512.c so both read the format
 * the same way; the folded-broadcast vpdpbusd of the packed tiles, and a
 * vpdpwssd free to use all 32 registers. Include only from files compiled
 * with AVX-512 flags (*_avx512.c). */
#ifndef KW_TENSOR_X16_AVX512_H
#define KW_TENSOR_X16_AVX512_H
#include <immintrin.h>
#include <stdint.h>

/* d + vpdpbusd(w, the 4 bytes at x in every lane), the broadcast folded into
 * the instruction's memory operand ({1to16}). GCC emits
 * _mm512_dpbusd_epi32(d, w, _mm512_set1_epi32(*x)) as a separate
 * vpbroadcastd per vpdpbusd; folded, the small-batch tile is 3-7% faster
 * (512 x 2048 Q4_0, L2-resident, one thread: 2 rows 3.58 -> 3.33 ns per
 * block and row, 4 rows 3.17 -> 3.05). Same integer result. Used by the
 * x16 tiles (kernels_avx512.c) and the packed K-quant tiles (kquant_avx512.c). */
static inline __attribute__((always_inline)) __m512i kw_dpbusd_bcst(__m512i d, __m512i w, const int32_t *x) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(d) : "v"(w), "m"(*x));
    return d;
}

/* acc + vpdpwssd(a, b): int16 pairs of a and b multiplied and added into
 * acc's int32 lanes, with the accumulator in any of the 32 zmm registers.
 * In objdump of the i16 attention's loops, GCC 12 kept
 * _mm512_dpwssd_epi32's accumulator in zmm0-15 only, so the V loop, whose
 * 16 accumulators live in zmm16-31, copied each one into a low register
 * and back around every vpdpwssd: 32 moves per 16 products, the loop at
 * ~62% of the instruction's peak. Same result. */
static inline __attribute__((always_inline)) __m512i kw_dpwssd(__m512i acc, __m512i a, __m512i b) {
    __asm__("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
}

/* 64 bytes read once per token (packed weights, or K/V in decode): a plain
 * load, or with nt a non-temporal one (vmovntdqa: p must be 64-byte
 * aligned), which on AMD EPYC keeps the line out of the L3 that L2
 * evictions fill and streams faster (bandwidth.c). */
static inline __attribute__((always_inline)) __m512i kw_x16_load(const uint8_t *p, int nt) {
    return nt ? _mm512_stream_load_si512((void *)p) : _mm512_loadu_si512(p);
}

/* w[k] = part k of the block whose quants start at q (64-byte aligned) as
 * unsigned bytes (lane L: row L's values 4k..4k+3); nt: see kw_x16_load. */
static inline __attribute__((always_inline)) void kw_x16_unpack(const uint8_t *q, int q4, int nt, __m512i w[8]) {
    if (q4) {
        const __m512i m4 = _mm512_set1_epi8(0x0F);
        _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
            __m512i p = kw_x16_load(q + 64 * j, nt);
            w[j] = _mm512_and_si512(p, m4);
            w[j + 4] = _mm512_and_si512(_mm512_srli_epi16(p, 4), m4);
        }
    } else {
        _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) w[k] = kw_x16_load(q + 64 * k, nt);
    }
}

/* Calls TILE(args..., C) with C (1..8 activation rows, more as 8) a
 * compile-time constant, so a tile's per-row arrays stay in registers; the
 * x16 and the K-quant tiles take their row count last. */
#define KW_TILE_ROWS_SWITCH(C, TILE, ...)      \
    switch (C) {                               \
    case 1: TILE(__VA_ARGS__, 1); break;       \
    case 2: TILE(__VA_ARGS__, 2); break;       \
    case 3: TILE(__VA_ARGS__, 3); break;       \
    case 4: TILE(__VA_ARGS__, 4); break;       \
    case 5: TILE(__VA_ARGS__, 5); break;       \
    case 6: TILE(__VA_ARGS__, 6); break;       \
    case 7: TILE(__VA_ARGS__, 7); break;       \
    default: TILE(__VA_ARGS__, 8); break;      \
    }

#endif
