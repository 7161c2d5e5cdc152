/* kvwise/kv.h - the paged KV pool: fixed-size blocks of KV for every layer.
 *
 * The pool is one accounted allocation (KW_MEM_KV) cut into n_blocks blocks;
 * a block holds K and V of `block_tokens` consecutive positions for every
 * layer. Blocks are laid out in chunks of KW_KV_CHUNK_BLOCKS: inside a
 * chunk, one head's regions (kw_kv_k, kw_kv_v) of its blocks are adjacent,
 * so a sequence whose blocks have consecutive ids reads each head's K and V
 * as long runs the hardware prefetcher follows. A sequence owns a block
 * table (kw_block_table): entry i holds the block of positions
 * [i*block_tokens, (i+1)*block_tokens). Blocks are
 * reference counted so that the prompt cache (prefix_cache.h) and several
 * live sequences can share a prefix without copying; a shared block is
 * never written (the owner of a partially filled shared block copies it
 * first: kw_kv_block_copy).
 *
 * The pool is not thread-safe: one scheduler thread owns it. */
#ifndef KVWISE_KV_H
#define KVWISE_KV_H
#include "kvwise/common.h"
#include "kvwise/tensor.h"   /* element types (KW_TYPE_*) */

typedef struct kw_kv_layout {
    int32_t n_layer;        /* layers that keep KV */
    int32_t n_head_kv;
    int32_t head_dim_k;
    int32_t head_dim_v;
    uint32_t type;          /* KW_TYPE_F32, KW_TYPE_F16, KW_TYPE_Q8_0, KW_TYPE_KV_I16 or KW_TYPE_KV_I8 */
    int32_t block_tokens;   /* positions per block, e.g. 32 */
} kw_kv_layout;

typedef struct kw_kv_pool {
    kw_kv_layout lay;
    int32_t n_blocks;
    size_t k_row_bytes;     /* bytes of one position's K for one head */
    size_t v_row_bytes;
    size_t block_bytes;     /* K+V of all layers for one block */
    uint8_t *data;
    int32_t *refs;          /* per block; 0 = free */
    int32_t *free_ids;      /* stack of free block ids */
    int32_t n_free;
} kw_kv_pool;

typedef struct kw_block_table {
    int32_t *ids;
    int32_t n;              /* blocks in use */
    int32_t cap;
} kw_block_table;

/* The KV element types a pool takes, by the names of --kv-type: "f32",
 * "f16", "q8_0", "i16", "i8", and "auto" (KW_KV_TYPE_AUTO, which is not a pool
 * type: model and plan layouts resolve it with kw_kv_type_auto). from_name
 * returns -1 for any other name. */
#define KW_KV_TYPE_AUTO 100u
const char *kw_kv_type_name(uint32_t type);       /* "?" for a type a pool does not take */
int kw_kv_type_from_name(const char *name);
#define KW_KV_TYPE_NAMES "auto, i16, i8, f16, q8_0 or f32"
/* What "auto" (the default everywhere) is for these head dims, block size
 * and query heads per KV head (group) with the active kernel family
 * (KW_KERNEL, tensor.h kw_kernel_name): i16 where the family has integer
 * attention kernels (avx512: AVX-512 VNNI, avx2: AVX2 + FMA) and the shapes
 * fit (tensor.h; the kernels take up to 16 queries, so a group above 16
 * would run the slow portable path), else f16. The scalar family has no
 * such kernel and so picks f16, as a CPU without AVX2 does. i16 is closer
 * to an F32 cache than f16 and its attention is about twice as fast
 * (docs/MODEL.md). */
uint32_t kw_kv_type_auto(int32_t head_dim_k, int32_t head_dim_v, int32_t block_tokens, int32_t group);

/* Bytes of KV per token for a layout (all layers, K and V). */
size_t kw_kv_bytes_per_token(const kw_kv_layout *lay);
size_t kw_kv_block_bytes(const kw_kv_layout *lay);

kw_kv_pool *kw_kv_pool_create(const kw_kv_layout *lay, int32_t n_blocks, kw_err *err);
void kw_kv_pool_destroy(kw_kv_pool *p);

int32_t kw_kv_alloc(kw_kv_pool *p);                 /* -1 when none free; refs = 1 */
void kw_kv_ref(kw_kv_pool *p, int32_t id);
void kw_kv_unref(kw_kv_pool *p, int32_t id);        /* back to the free list at 0 */
void kw_kv_block_copy(kw_kv_pool *p, int32_t dst, int32_t src);

/* Blocks per chunk: 256 (8192 positions at 32-token blocks). Chunk c holds
 * blocks [256c, 256c + 256) (the last one fewer, n_blocks % 256): first
 * K[layer][head][block] regions, then V[layer][head][block] regions, each
 * region block_tokens rows of one head, so one head's K (and V) over
 * consecutive blocks is one run the hardware prefetcher follows; the
 * larger the chunk, the longer the runs (docs/PERFORMANCE.md, Attention).
 * A chunk is
 * also the unit the pool's pages are touched in: a block's first write
 * touches its chunk's regions of every head (Llama-3.2-1B shape, i16: 277
 * MB per chunk). */
#define KW_KV_CHUNK_BLOCKS 256

/* Where K (or V) of head h at slot s (0..block_tokens-1) of layer l lives in
 * block id: the head's region of the block (block_tokens rows, one per slot,
 * in the layout's element type; i16 and i8: scales, then integers, below),
 * plus s rows. */
void *kw_kv_k(kw_kv_pool *p, int32_t id, int32_t layer, int32_t head, int32_t slot);
void *kw_kv_v(kw_kv_pool *p, int32_t id, int32_t layer, int32_t head, int32_t slot);
/* Layer `layer` of the sequence whose blocks are ids[] as the attention
 * kernels read it (tensor.h kw_attn_kv; its region is kw_kv_k / kw_kv_v at
 * slot 0). Valid while the pool and ids are. */
kw_attn_kv kw_kv_attn_view(kw_kv_pool *p, const int32_t *ids, int32_t layer);

/* The i16 and i8 types store a head's region of a block (what kw_kv_k /
 * kw_kv_v return for slot 0) in the integer row format of tensor.h
 * (kw_kv_i16_put, kw_kv_i8_put; the attention kernels read it there). */

/* Block tables. ensure() grows the table with fresh blocks so that it
 * covers n_positions; returns -1 (table unchanged beyond what fit) if the
 * pool runs out. release() unrefs every block, last first (so the free
 * stack hands them out again in order: consecutive ids stay consecutive
 * for the next sequence, kv.h's chunked layout), and empties the table. */
int kw_block_table_ensure(kw_block_table *t, kw_kv_pool *p, int32_t n_positions);
void kw_block_table_release(kw_block_table *t, kw_kv_pool *p);
void kw_block_table_free(kw_block_table *t);        /* frees ids[] (after release) */
int kw_block_table_push(kw_block_table *t, int32_t id); /* appends a block id (takes its ref) */

#endif
