/* pool.c - the paged KV pool (kv.h).
 *
 * Owns: the one KW_MEM_KV allocation cut into fixed-size blocks, the
 * per-block reference counts, the free-id stack, the address arithmetic of
 * K/V rows, and per-sequence block tables (grow, push, release). A block
 * holds, for every layer and head, a K and a V region of block_tokens rows,
 * each row stored in the layout's element type (F32, F16 or Q8_0 blocks of
 * 32), or for the i16 and i8 types scales, then integers (tensor.h).
 *
 * Where the regions live (kv.h, KW_KV_CHUNK_BLOCKS): in chunks of 256
 * blocks, K[layer][head][block] then V[layer][head][block], so one head's
 * regions of blocks with consecutive ids follow each other. Attention reads
 * a head's K of every block of the sequence, then its V: in runs of
 * consecutive blocks the hardware prefetcher follows a head's K and V,
 * where a block-major layout (each block holding all its layers) made
 * every few-KiB region a new stream for software prefetch to carry. Not
 * thread-safe: one scheduler owns it. The allocation asks for transparent
 * huge pages (fewer TLB misses over ~130 MiB per decoded token at depth
 * 4096). Pages are touched chunk by chunk as blocks are first written; the
 * budget holds the whole pool either way. */
#include "kvwise/kv.h"
#include "kvwise/testctl.h"
#include "kvwise/memory.h"
#include "kvwise/tensor.h"
#include "tensor/kernels.h"
#include <stdlib.h>
#include <string.h>

/* Bytes of one head's row of n values (q8_0: blocks of 32 values, 2-byte
 * scale + 32 int8; i16: n int16 + one F32 scale; i8: n int8 + one F32 scale). */
static size_t kv_row_bytes(uint32_t type, int32_t n) {
    if (type == KW_TYPE_F32) return (size_t)n * 4;
    if (type == KW_TYPE_F16) return (size_t)n * 2;
    if (type == KW_TYPE_KV_I16) return (size_t)n * 2 + 4;
    if (type == KW_TYPE_KV_I8) return (size_t)n + 4;
    return (size_t)(n / 32) * 34;
}

const char *kw_kv_type_name(uint32_t type) {
    switch (type) {
    case KW_TYPE_F32: return "f32";
    case KW_TYPE_F16: return "f16";
    case KW_TYPE_Q8_0: return "q8_0";
    case KW_TYPE_KV_I16: return "i16";
    case KW_TYPE_KV_I8: return "i8";
    case KW_KV_TYPE_AUTO: return "auto";
    default: return "?";
    }
}

int kw_kv_type_from_name(const char *name) {
    static const uint32_t types[] = {KW_TYPE_F32, KW_TYPE_F16, KW_TYPE_Q8_0, KW_TYPE_KV_I16, KW_TYPE_KV_I8, KW_KV_TYPE_AUTO};
    for (size_t i = 0; name && i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(name, kw_kv_type_name(types[i]))) return (int)types[i];
    return -1;
}

/* The shapes the i16 and i8 types take (kv.h: the int32 bound needs head_dim_k <= 128). */
static bool i16_shapes_ok(int32_t hk, int32_t hv, int32_t bt) {
    return hk > 0 && hv > 0 && hk % 16 == 0 && hv % 16 == 0 && hk <= 128 && hv <= 1024 && bt > 0 && bt % 32 == 0;
}

/* The active kernel set's choice where the KV shapes and its integer
 * attention kernels (a KV head's group of query heads per call) take it. */
uint32_t kw_kv_type_auto(int32_t hk, int32_t hv, int32_t bt, int32_t group) {
    const kw_kernel_set *ks = kw_kernels_active();
    uint32_t t = ks->attn.kv_type_auto;
    if (kw_kv_type_is_int(t) && !(i16_shapes_ok(hk, hv, bt) && ks->attn.integer_supported(group, hk, hv))) return KW_TYPE_F16;
    return t;
}

static int layout_check(const kw_kv_layout *lay, kw_err *err) {
    if (!lay) return kw_err_set(err, "kv pool: no layout");
    if (lay->n_layer <= 0 || lay->n_head_kv <= 0 || lay->head_dim_k <= 0 || lay->head_dim_v <= 0)
        return kw_err_set(err, "kv pool: bad layout (layers %d, kv heads %d, head dims %d/%d)",
                          lay->n_layer, lay->n_head_kv, lay->head_dim_k, lay->head_dim_v);
    if (lay->block_tokens <= 0 || lay->block_tokens > 4096)
        return kw_err_set(err, "kv pool: block_tokens %d out of range (1..4096)", lay->block_tokens);
    if (lay->type != KW_TYPE_F32 && lay->type != KW_TYPE_F16 && lay->type != KW_TYPE_Q8_0 &&
        !kw_kv_type_is_int(lay->type))
        return kw_err_set(err, "kv pool: unsupported KV type %u (use " KW_KV_TYPE_NAMES ")", lay->type);
    if (kw_kv_type_is_int(lay->type) && !i16_shapes_ok(lay->head_dim_k, lay->head_dim_v, lay->block_tokens))
        return kw_err_set(err, "kv pool: %s KV needs head dims %% 16 == 0, head_dim_k <= 128, head_dim_v <= 1024 and "
                          "blocks of a multiple of 32 tokens (head dims %d/%d, block %d); use f16",
                          kw_kv_type_name(lay->type), lay->head_dim_k, lay->head_dim_v, lay->block_tokens);
    if (lay->type == KW_TYPE_Q8_0 && (lay->head_dim_k % 32 || lay->head_dim_v % 32))
        return kw_err_set(err, "kv pool: q8_0 KV needs head_dim %% 32 == 0 (head_dim_k %d, head_dim_v %d); use f16",
                          lay->head_dim_k, lay->head_dim_v);
    return 0;
}

size_t kw_kv_bytes_per_token(const kw_kv_layout *lay) {
    if (layout_check(lay, NULL) != 0) return 0;
    size_t per_layer = (size_t)lay->n_head_kv *
        (kv_row_bytes(lay->type, lay->head_dim_k) + kv_row_bytes(lay->type, lay->head_dim_v));
    return per_layer * (size_t)lay->n_layer;
}

size_t kw_kv_block_bytes(const kw_kv_layout *lay) {
    return kw_kv_bytes_per_token(lay) * (size_t)(lay ? lay->block_tokens : 0);
}

kw_kv_pool *kw_kv_pool_create(const kw_kv_layout *lay, int32_t n_blocks, kw_err *err) {
    if (layout_check(lay, err) != 0) return NULL;
    if (n_blocks <= 0) { kw_err_set(err, "kv pool: need at least one block (got %d)", n_blocks); return NULL; }
    kw_kv_pool *p = calloc(1, sizeof *p);
    if (!p) { kw_err_set(err, "kv pool: out of memory"); return NULL; }
    p->lay = *lay;
    p->n_blocks = n_blocks;
    p->k_row_bytes = kv_row_bytes(lay->type, lay->head_dim_k);
    p->v_row_bytes = kv_row_bytes(lay->type, lay->head_dim_v);
    p->block_bytes = (size_t)lay->n_layer * (size_t)lay->n_head_kv * (size_t)lay->block_tokens *
                     (p->k_row_bytes + p->v_row_bytes);
    if (p->block_bytes == 0 || (size_t)n_blocks > ((size_t)1 << 46) / p->block_bytes) {
        free(p);
        kw_err_set(err, "kv pool: %d blocks of %zu bytes is too large", n_blocks, kw_kv_block_bytes(lay));
        return NULL;
    }
    p->data = kw_mem_alloc_huge(KW_MEM_KV, p->block_bytes * (size_t)n_blocks);
    p->refs = calloc((size_t)n_blocks, sizeof *p->refs);
    p->free_ids = malloc((size_t)n_blocks * sizeof *p->free_ids);
    if (!p->data || !p->refs || !p->free_ids) {
        kw_err_set(err, "kv pool: cannot allocate %d blocks (%zu bytes)", n_blocks, p->block_bytes * (size_t)n_blocks);
        kw_kv_pool_destroy(p);
        return NULL;
    }
    /* Stack: lowest ids pop first. */
    for (int32_t i = 0; i < n_blocks; i++) p->free_ids[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    return p;
}

void kw_kv_pool_destroy(kw_kv_pool *p) {
    if (!p) return;
    kw_mem_free(p->data);
    free(p->refs);
    free(p->free_ids);
    free(p);
}

static bool valid_id(const kw_kv_pool *p, int32_t id) {
    return p && id >= 0 && id < p->n_blocks;
}

int32_t kw_kv_alloc(kw_kv_pool *p) {
    if (!p || p->n_free <= 0 || kw_fault_hit(KW_FAULT_KV_BLOCK, -1)) return -1;   /* (testctl.h: tests only) */
    int32_t id = p->free_ids[--p->n_free];
    p->refs[id] = 1;
    return id;
}

void kw_kv_ref(kw_kv_pool *p, int32_t id) {
    if (valid_id(p, id) && p->refs[id] > 0) p->refs[id]++;
}

void kw_kv_unref(kw_kv_pool *p, int32_t id) {
    if (!valid_id(p, id) || p->refs[id] <= 0) return;
    if (--p->refs[id] == 0) p->free_ids[p->n_free++] = id;
}

void kw_kv_block_copy(kw_kv_pool *p, int32_t dst, int32_t src) {
    if (!valid_id(p, dst) || !valid_id(p, src) || dst == src) return;
    size_t kb = (size_t)p->lay.block_tokens * p->k_row_bytes, vb = (size_t)p->lay.block_tokens * p->v_row_bytes;
    for (int32_t l = 0; l < p->lay.n_layer; l++)
        for (int32_t h = 0; h < p->lay.n_head_kv; h++) {
            memcpy(kw_kv_k(p, dst, l, h, 0), kw_kv_k(p, src, l, h, 0), kb);
            memcpy(kw_kv_v(p, dst, l, h, 0), kw_kv_v(p, src, l, h, 0), vb);
        }
}

/* Head (layer, head)'s K (v false) or V region of block id: its chunk's
 * start, then `before` bytes (V: the chunk's K regions), then the head's
 * run of its chunk's nb blocks, block_tokens rows of row_bytes per block. */
static uint8_t *region(kw_kv_pool *p, int32_t id, int32_t layer, int32_t head, size_t row_bytes, bool v) {
    int32_t c0 = id - id % KW_KV_CHUNK_BLOCKS;
    int32_t nb = p->n_blocks - c0 < KW_KV_CHUNK_BLOCKS ? p->n_blocks - c0 : KW_KV_CHUNK_BLOCKS;   /* in this chunk */
    size_t heads = (size_t)p->lay.n_layer * (size_t)p->lay.n_head_kv, bt = (size_t)p->lay.block_tokens;
    size_t before = v ? heads * (size_t)nb * bt * p->k_row_bytes : 0;
    size_t run = ((size_t)layer * (size_t)p->lay.n_head_kv + (size_t)head) * (size_t)nb + (size_t)(id - c0);
    return p->data + (size_t)c0 * p->block_bytes + before + run * bt * row_bytes;
}

void *kw_kv_k(kw_kv_pool *p, int32_t id, int32_t layer, int32_t head, int32_t slot) {
    return region(p, id, layer, head, p->k_row_bytes, false) + (size_t)slot * p->k_row_bytes;
}

void *kw_kv_v(kw_kv_pool *p, int32_t id, int32_t layer, int32_t head, int32_t slot) {
    return region(p, id, layer, head, p->v_row_bytes, true) + (size_t)slot * p->v_row_bytes;
}

static void *attn_region(const kw_attn_kv *kv, int32_t id, int32_t head, int v) {
    kw_kv_pool *p = kv->pool;
    return region(p, id, kv->layer, head, v ? p->v_row_bytes : p->k_row_bytes, v != 0);
}

kw_attn_kv kw_kv_attn_view(kw_kv_pool *p, const int32_t *ids, int32_t layer) {
    return (kw_attn_kv){.type = p->lay.type, .block_tokens = p->lay.block_tokens, .k_row_bytes = p->k_row_bytes,
                        .v_row_bytes = p->v_row_bytes, .ids = ids, .layer = layer, .region = attn_region, .pool = p};
}

static int table_reserve(kw_block_table *t, int32_t n) {
    if (n <= t->cap) return 0;
    int32_t cap = t->cap ? t->cap : 8;
    while (cap < n) cap *= 2;
    int32_t *ids = realloc(t->ids, (size_t)cap * sizeof *ids);
    if (!ids) return -1;
    t->ids = ids;
    t->cap = cap;
    return 0;
}

int kw_block_table_ensure(kw_block_table *t, kw_kv_pool *p, int32_t n_positions) {
    if (!t || !p || n_positions < 0) return -1;
    int32_t bt = p->lay.block_tokens;
    int32_t need = (int32_t)(((int64_t)n_positions + bt - 1) / bt);
    if (table_reserve(t, need) != 0) return -1;
    while (t->n < need) {
        int32_t id = kw_kv_alloc(p);
        if (id < 0) return -1;
        t->ids[t->n++] = id;
    }
    return 0;
}

void kw_block_table_release(kw_block_table *t, kw_kv_pool *p) {
    if (!t) return;
    for (int32_t i = t->n - 1; i >= 0; i--) kw_kv_unref(p, t->ids[i]);
    t->n = 0;
}

void kw_block_table_free(kw_block_table *t) {
    if (!t) return;
    free(t->ids);
    t->ids = NULL;
    t->n = t->cap = 0;
}

int kw_block_table_push(kw_block_table *t, int32_t id) {
    if (!t || table_reserve(t, t->n + 1) != 0) return -1;
    t->ids[t->n++] = id;
    return 0;
}
