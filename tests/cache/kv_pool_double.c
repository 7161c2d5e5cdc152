/* kv_pool_double.c - a minimal stand-in for the paged KV pool (kv.h), linked
 * into the cache tests only while src/kv/pool.c has not landed. It keeps the
 * same contract the cache relies on: refcounts, a free stack, block copy,
 * block tables. Once pool.c exists, tests/cache/CMakeLists.txt drops this
 * file and the tests run against the real pool. */
#include "kvwise/kv.h"
#include "kvwise/memory.h"
#include <stdlib.h>
#include <string.h>

size_t kw_kv_bytes_per_token(const kw_kv_layout *lay) {
    size_t el = lay->type == 0 ? 4 : 2;   /* the double only models f32/f16 */
    return (size_t)lay->n_layer * (size_t)lay->n_head_kv * (size_t)(lay->head_dim_k + lay->head_dim_v) * el;
}

size_t kw_kv_block_bytes(const kw_kv_layout *lay) {
    return kw_kv_bytes_per_token(lay) * (size_t)lay->block_tokens;
}

kw_kv_pool *kw_kv_pool_create(const kw_kv_layout *lay, int32_t n_blocks, kw_err *err) {
    if (!lay || n_blocks <= 0 || lay->block_tokens <= 0) { kw_err_set(err, "bad pool layout"); return NULL; }
    kw_kv_pool *p = calloc(1, sizeof *p);
    if (!p) { kw_err_set(err, "out of memory"); return NULL; }
    p->lay = *lay;
    p->n_blocks = n_blocks;
    p->block_bytes = kw_kv_block_bytes(lay);
    p->data = kw_mem_calloc(KW_MEM_KV, p->block_bytes * (size_t)n_blocks);
    p->refs = calloc((size_t)n_blocks, sizeof(int32_t));
    p->free_ids = calloc((size_t)n_blocks, sizeof(int32_t));
    if (!p->data || !p->refs || !p->free_ids) { kw_kv_pool_destroy(p); kw_err_set(err, "out of memory"); return NULL; }
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

int32_t kw_kv_alloc(kw_kv_pool *p) {
    if (p->n_free == 0) return -1;
    int32_t id = p->free_ids[--p->n_free];
    p->refs[id] = 1;
    return id;
}

void kw_kv_ref(kw_kv_pool *p, int32_t id) { p->refs[id]++; }

void kw_kv_unref(kw_kv_pool *p, int32_t id) {
    if (p->refs[id] <= 0) abort();        /* a double unref is a bug the tests must see */
    if (--p->refs[id] == 0) p->free_ids[p->n_free++] = id;
}

void kw_kv_block_copy(kw_kv_pool *p, int32_t dst, int32_t src) {
    memcpy(p->data + (size_t)dst * p->block_bytes, p->data + (size_t)src * p->block_bytes, p->block_bytes);
}

int kw_block_table_push(kw_block_table *t, int32_t id) {
    if (t->n == t->cap) {
        int32_t cap = t->cap ? t->cap * 2 : 8;
        int32_t *ids = realloc(t->ids, (size_t)cap * sizeof *ids);
        if (!ids) return -1;
        t->ids = ids;
        t->cap = cap;
    }
    t->ids[t->n++] = id;
    return 0;
}

int kw_block_table_ensure(kw_block_table *t, kw_kv_pool *p, int32_t n_positions) {
    int32_t need = (n_positions + p->lay.block_tokens - 1) / p->lay.block_tokens;
    while (t->n < need) {
        int32_t id = kw_kv_alloc(p);
        if (id < 0) return -1;
        if (kw_block_table_push(t, id) != 0) { kw_kv_unref(p, id); return -1; }
    }
    return 0;
}

void kw_block_table_release(kw_block_table *t, kw_kv_pool *p) {
    for (int32_t i = 0; i < t->n; i++) kw_kv_unref(p, t->ids[i]);
    t->n = 0;
}

void kw_block_table_free(kw_block_table *t) {
    free(t->ids);
    t->ids = NULL;
    t->n = t->cap = 0;
}
