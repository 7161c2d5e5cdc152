/* attn_rows.h - K/V row access shared by the AVX-512 attention kernels
 * (attn_avx512.c prefill tiles, attn_decode_avx512.c decode): the row of
 * key j of one head in its paged block, and the prefetch of rows ahead.
 *
 * A block's rows of one head are a few KiB on their own page and the next
 * block of the sequence is elsewhere, so the hardware prefetcher stops at
 * every block edge; both kernels ask for rows KW_ATTN_PF_KEYS keys ahead
 * into L2 (prefetcht1: into L1 the prefetches themselves stalled the core).
 * perf at depth 4096 before: ~65% of decode attention and a third of the
 * tiles' time were load stalls. */
#ifndef KW_MODEL_ATTN_ROWS_H
#define KW_MODEL_ATTN_ROWS_H
#include "model_internal.h"
#include <immintrin.h>

#define KW_ATTN_PF_KEYS 48   /* keys ahead (24-96 measured alike, 16 and 384 slower) */

/* Row pointer of key j of this head, K (v = 0) or V (v = 1). */
static inline const void *kw_attn_row(const kw_attn_tile_args *a, int32_t j, int v) {
    int32_t bt = a->kv->lay.block_tokens;
    return v ? kw_kv_v(a->kv, a->table->ids[j / bt], a->layer, a->kvh, j % bt)
             : kw_kv_k(a->kv, a->table->ids[j / bt], a->layer, a->kvh, j % bt);
}

/* Asks rows [j, j + cnt) of this head into L2, clipped to the context n
 * and to j's block (rows of one block are consecutive). */
static inline void kw_attn_prefetch_rows(const kw_attn_tile_args *a, int32_t j, int32_t cnt, int32_t n, int v) {
    if (j >= n) return;
    int32_t bt = a->kv->lay.block_tokens, end = j + cnt < n ? j + cnt : n;
    if (end > (j / bt + 1) * bt) end = (j / bt + 1) * bt;
    size_t rb = v ? a->kv->v_row_bytes : a->kv->k_row_bytes;
    const char *p = kw_attn_row(a, j, v), *e = p + (size_t)(end - j) * rb;
    for (; p < e; p += 64) _mm_prefetch(p, _MM_HINT_T1);
}

#endif
