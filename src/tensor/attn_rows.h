/* attn_rows.h - K/V prefetch shared by the SIMD attention kernels (rows
 * themselves: kw_attn_row, attn.h): for F32/F16 caches (attn_avx512.c
 * prefill tiles, attn_decode_avx512.c decode) the prefetch of rows ahead;
 * for the i16 and i8 caches (attn_i16_avx512.c, attn_i16_avx2.c) the
 * prefetch of the K group and the V chunk ahead in their layout (tensor.h).
 * Include only from files compiled with AVX2 or AVX-512 flags.
 *
 * A block's rows of one head are a few KiB; the F32/F16 kernels ask for
 * rows KW_ATTN_PF_KEYS keys ahead into L2 (prefetcht1: into L1 the
 * prefetches themselves stalled the core; perf at depth 4096 before: ~65%
 * of decode attention and a third of the tiles' time were load stalls).
 * The i16/i8 kernels ask for every block's K and V ahead, in prefill tiles
 * and in decode: alone, a head's run of consecutive blocks is followed by
 * the hardware prefetcher, but inside the model, where each layer's
 * attention starts between two weight streams, it does not catch the run
 * in time (1B Q4_0 decode at depth 4096 is 1.03-1.04x faster with the
 * software prefetches). */
#ifndef KW_TENSOR_ATTN_ROWS_H
#define KW_TENSOR_ATTN_ROWS_H
#include "tensor/attn.h"
#include <immintrin.h>

#define KW_ATTN_PF_KEYS 48   /* keys ahead (24-96 measured alike, 16 and 384 slower) */

/* Asks rows [j, j + cnt) of this head into L2, clipped to the context n
 * and to j's block (rows of one block are consecutive). */
static inline void kw_attn_prefetch_rows(const kw_attn_args *a, int32_t j, int32_t cnt, int32_t n, int v) {
    if (j >= n) return;
    int32_t bt = a->kv.block_tokens, end = j + cnt < n ? j + cnt : n;
    if (end > (j / bt + 1) * bt) end = (j / bt + 1) * bt;
    size_t rb = v ? a->kv.v_row_bytes : a->kv.k_row_bytes;
    const char *p = kw_attn_row(a, j, v), *e = p + (size_t)(end - j) * rb;
    for (; p < e; p += 64) _mm_prefetch(p, _MM_HINT_T1);
}

/* i16 and i8: keys ahead that K and V are prefetched into L2 (one block
 * left DRAM stalls in decode). */
#define KW_ATTN_I16_PF_KEYS 64

/* Bytes per integer of an integer KV type: 2 (i16) or 1 (i8). */
static inline size_t kw_attn_int_bytes(const kw_attn_args *a) {
    return a->kv.type == KW_TYPE_KV_I8 ? 1 : 2;
}

/* i16 / i8: asks into L2 the K lines (one per dimension pair (i16) or
 * quad (i8) of the group, 64 contiguous bytes each, and the scales) of the
 * 16-key group KW_ATTN_I16_PF_KEYS keys after j, if it is below n. */
static inline void kw_attn_i16_prefetch_k(const kw_attn_args *a, int32_t j, int32_t n) {
    int32_t jf = j + KW_ATTN_I16_PF_KEYS, bt = a->kv.block_tokens;
    if (jf >= n) return;
    bool w8 = kw_attn_int_bytes(a) == 1;
    int rows = w8 ? a->hk / 4 : a->hk / 2;   /* quads (i8) or pairs (i16) */
    void *fr = kw_attn_region(a, jf / bt, 0);
    const char *fk = (const char *)kw_kv_i16_ints(fr, bt) + kw_kv_int_k_group(a->hk, jf % bt, w8);
    _mm_prefetch((const char *)(kw_kv_i16_scales(fr) + jf % bt), _MM_HINT_T1);
    for (int p = 0; p < rows; p++) _mm_prefetch(fk + (size_t)p * 64, _MM_HINT_T1);
}

/* i16 / i8, spread: called where key j + KW_ATTN_I16_PF_KEYS is the first
 * of its block; when that key is below n, the address of the
 * block's K integers (group 0; the groups' rows follow in address order),
 * else NULL; the block's scales are prefetched here. The caller prefetches the region's lines in
 * address order, spread over the dot loops of the block's 16-key groups. */
static inline const uint8_t *kw_attn_i16_k_block_ahead(const kw_attn_args *a, int32_t j, int32_t n) {
    int32_t jf = j + KW_ATTN_I16_PF_KEYS, bt = a->kv.block_tokens;
    if (jf >= n) return NULL;
    void *fr = kw_attn_region(a, jf / bt, 0);
    for (int32_t s = 0; s < bt; s += 16) _mm_prefetch((const char *)(kw_kv_i16_scales(fr) + s), _MM_HINT_T1);
    return (const uint8_t *)kw_kv_i16_ints(fr, bt);
}

/* i16 / i8: the address of the V chunk starting at key j1 (integers, slot
 * pair 0), its scales prefetched. */
static inline const uint8_t *kw_attn_i16_v_chunk(const kw_attn_args *a, int32_t j1, int32_t chunk) {
    int32_t bt = a->kv.block_tokens;
    void *nr = kw_attn_region(a, j1 / bt, 1);
    const char *sc = (const char *)(kw_kv_i16_scales(nr) + j1 % bt);
    for (size_t o = 0; o < (size_t)chunk * sizeof(float); o += 64) _mm_prefetch(sc + o, _MM_HINT_T1);
    return (const uint8_t *)kw_kv_i16_ints(nr, bt) + (size_t)(j1 % bt) * (size_t)a->hv * kw_attn_int_bytes(a);
}

/* i16 / i8, spread: the V chunk KW_ATTN_I16_PF_KEYS keys after j0
 * (kw_attn_i16_v_chunk), or NULL if it is not below n; the caller
 * prefetches one slot pair's row (hv * 2 integers) per step of its V loop. */
static inline const uint8_t *kw_attn_i16_v_ahead(const kw_attn_args *a, int32_t j0, int32_t chunk, int32_t n) {
    int32_t j1 = j0 + KW_ATTN_I16_PF_KEYS;
    if (j1 >= n) return NULL;
    return kw_attn_i16_v_chunk(a, j1, chunk);
}

/* i16 / i8: asks into L2 the V scales and integers of the chunk of `chunk`
 * keys KW_ATTN_I16_PF_KEYS keys after j0, if it is below n, all at once. */
static inline void kw_attn_i16_prefetch_v(const kw_attn_args *a, int32_t j0, int32_t chunk, int32_t n) {
    int32_t j1 = j0 + KW_ATTN_I16_PF_KEYS;
    if (j1 >= n) return;
    const uint8_t *vi = kw_attn_i16_v_chunk(a, j1, chunk);
    for (size_t o = 0; o < (size_t)chunk * (size_t)a->hv * kw_attn_int_bytes(a); o += 64)
        _mm_prefetch((const char *)vi + o, _MM_HINT_T1);
}
#endif
