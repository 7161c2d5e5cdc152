/* quant_blocks.h - one plain struct per GGUF/ggml quantized block format.
 *
 * Owns the in-memory layouts of the block types that kvwise computes with
 * (weights) and of the internal activation "dot types" (Q8_0, Q8_1, Q8_K).
 * The layouts are ggml's byte for byte, so a row in a mapped GGUF file can
 * be read as an array of these structs. Half-precision fields are stored as
 * raw uint16_t bit patterns (IEEE binary16). */
#ifndef KW_QUANT_BLOCKS_H
#define KW_QUANT_BLOCKS_H
#include <stdint.h>

#define KW_QK 32          /* values per block of the "legacy" formats */
#define KW_QK_K 256       /* values per super-block of the K formats */

typedef struct { uint16_t d; uint8_t qs[KW_QK / 2]; } kw_block_q4_0;                    /* 18 B */
typedef struct { uint16_t d, m; uint8_t qs[KW_QK / 2]; } kw_block_q4_1;                 /* 20 B */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[KW_QK / 2]; } kw_block_q5_0;     /* 22 B */
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[KW_QK / 2]; } kw_block_q5_1;  /* 24 B */
typedef struct { uint16_t d; int8_t qs[KW_QK]; } kw_block_q8_0;                         /* 34 B */
/* s = d * sum(qs), used by the Q4_1/Q5_1 dot products for the min term. */
typedef struct { uint16_t d, s; int8_t qs[KW_QK]; } kw_block_q8_1;                      /* 36 B */

/* Q4_K: 8 sub-blocks of 32 with 6-bit scales and mins packed in 12 bytes. */
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[KW_QK_K / 2];
} kw_block_q4_K;                                                                        /* 144 B */

/* Q5_K: as Q4_K plus one high bit per value in qh. */
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[KW_QK_K / 8];
    uint8_t qs[KW_QK_K / 2];
} kw_block_q5_K;                                                                        /* 176 B */

/* Q6_K: 16 sub-blocks of 16 with int8 scales; 4 low bits in ql, 2 high in qh. */
typedef struct {
    uint8_t ql[KW_QK_K / 2];
    uint8_t qh[KW_QK_K / 4];
    int8_t scales[KW_QK_K / 16];
    uint16_t d;
} kw_block_q6_K;                                                                        /* 210 B */

/* Q8_K: activation super-block; bsums[j] = sum of qs[16j .. 16j+15]. */
typedef struct {
    float d;
    int8_t qs[KW_QK_K];
    int16_t bsums[KW_QK_K / 16];
} kw_block_q8_K;                                                                        /* 292 B */

_Static_assert(sizeof(kw_block_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(kw_block_q4_1) == 20, "q4_1 layout");
_Static_assert(sizeof(kw_block_q5_0) == 22, "q5_0 layout");
_Static_assert(sizeof(kw_block_q5_1) == 24, "q5_1 layout");
_Static_assert(sizeof(kw_block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(kw_block_q8_1) == 36, "q8_1 layout");
_Static_assert(sizeof(kw_block_q4_K) == 144, "q4_K layout");
_Static_assert(sizeof(kw_block_q5_K) == 176, "q5_K layout");
_Static_assert(sizeof(kw_block_q6_K) == 210, "q6_K layout");
_Static_assert(sizeof(kw_block_q8_K) == 292, "q8_K layout");

/* Unpacks sub-block j's 6-bit scale and min from a Q4_K/Q5_K scales[12]. */
static inline void kw_get_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

#endif
