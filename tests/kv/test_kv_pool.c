/* test_kv_pool.c - the paged KV pool (kv.h): layout arithmetic, the one
 * accounted allocation, alloc/ref/unref/free list, block copy, row
 * addressing, the chunked layout (regions tile the pool, a head's regions
 * of consecutive ids adjacent), block tables (and the order release gives
 * blocks back in), and the q8_0 head_dim check. */
#include "testutil.h"
#include "kvwise/kv.h"
#include "kvwise/memory.h"
#include "kvwise/tensor.h"
#include <stdlib.h>
#include <string.h>

static kw_kv_layout layout(uint32_t type, int hd, int bt) {
    kw_kv_layout l = {.n_layer = 3, .n_head_kv = 2, .head_dim_k = hd, .head_dim_v = hd, .type = type, .block_tokens = bt};
    return l;
}

static void test_sizes(void) {
    kw_kv_layout f32 = layout(KW_TYPE_F32, 64, 16), f16 = layout(KW_TYPE_F16, 64, 16), q8 = layout(KW_TYPE_Q8_0, 64, 16);
    /* bytes/token = layers x 2 x kv_heads x head_dim x bytes/element */
    KW_CHECK_EQ_INT(kw_kv_bytes_per_token(&f32), 3 * 2 * 2 * 64 * 4);
    KW_CHECK_EQ_INT(kw_kv_bytes_per_token(&f16), 3 * 2 * 2 * 64 * 2);
    KW_CHECK_EQ_INT(kw_kv_bytes_per_token(&q8), 3 * 2 * 2 * (64 / 32) * 34);
    KW_CHECK_EQ_INT(kw_kv_block_bytes(&f16), 16 * 3 * 2 * 2 * 64 * 2);
    kw_kv_layout bad = layout(KW_TYPE_Q8_0, 8, 16);
    KW_CHECK_EQ_INT(kw_kv_bytes_per_token(&bad), 0);
}

static void test_q8_head_dim_error(void) {
    kw_err err = {{0}};
    kw_kv_layout bad = layout(KW_TYPE_Q8_0, 8, 16);
    kw_kv_pool *p = kw_kv_pool_create(&bad, 4, &err);
    KW_CHECK(p == NULL);
    KW_CHECK_MSG(strstr(err.msg, "head_dim") != NULL, "%s", err.msg);
    kw_kv_layout bt0 = layout(KW_TYPE_F32, 8, 0);
    KW_CHECK(kw_kv_pool_create(&bt0, 4, &err) == NULL);
    kw_kv_layout q4 = layout(KW_TYPE_Q4_0, 32, 16);
    KW_CHECK(kw_kv_pool_create(&q4, 4, &err) == NULL);
    KW_CHECK(kw_kv_pool_create(&bad, 0, &err) == NULL);
}

static void test_alloc_refs(void) {
    kw_err err = {{0}};
    kw_kv_layout l = layout(KW_TYPE_F16, 32, 8);
    uint64_t before = kw_mem_current(KW_MEM_KV);
    kw_kv_pool *p = kw_kv_pool_create(&l, 4, &err);
    KW_CHECK(p != NULL);
    if (!p) return;
    KW_CHECK_EQ_INT(kw_mem_current(KW_MEM_KV) - before, 4 * kw_kv_block_bytes(&l));
    KW_CHECK_EQ_INT(p->block_bytes, kw_kv_block_bytes(&l));
    int32_t ids[4];
    for (int i = 0; i < 4; i++) ids[i] = kw_kv_alloc(p);
    KW_CHECK_EQ_INT(ids[0], 0);
    KW_CHECK_EQ_INT(ids[3], 3);
    KW_CHECK_EQ_INT(kw_kv_alloc(p), -1);
    KW_CHECK_EQ_INT(p->n_free, 0);
    kw_kv_ref(p, ids[1]);
    KW_CHECK_EQ_INT(p->refs[ids[1]], 2);
    kw_kv_unref(p, ids[1]);
    KW_CHECK_EQ_INT(p->n_free, 0);
    kw_kv_unref(p, ids[1]);
    KW_CHECK_EQ_INT(p->n_free, 1);
    kw_kv_unref(p, ids[1]);                       /* extra unref is ignored */
    KW_CHECK_EQ_INT(p->n_free, 1);
    KW_CHECK_EQ_INT(kw_kv_alloc(p), ids[1]);
    for (int i = 0; i < 4; i++) kw_kv_unref(p, ids[i]);
    KW_CHECK_EQ_INT(p->n_free, 4);
    kw_kv_pool_destroy(p);
    KW_CHECK_EQ_INT(kw_mem_current(KW_MEM_KV), before);
}

static void test_addressing_and_copy(void) {
    kw_err err = {{0}};
    kw_kv_layout l = layout(KW_TYPE_F32, 16, 4);
    l.head_dim_v = 8;
    kw_kv_pool *p = kw_kv_pool_create(&l, 3, &err);
    KW_CHECK(p != NULL);
    if (!p) return;
    /* every (layer, head, slot) K and V row of two blocks is distinct and inside the pool */
    int32_t a = kw_kv_alloc(p), b = kw_kv_alloc(p);
    uint8_t *lo = p->data, *hi = lo + (size_t)p->n_blocks * p->block_bytes;
    size_t total = 0;
    for (int il = 0; il < 3; il++)
        for (int h = 0; h < 2; h++)
            for (int s = 0; s < 4; s++)
                for (int32_t id = a; id <= b; id++) {
                    float *k = kw_kv_k(p, id, il, h, s), *v = kw_kv_v(p, id, il, h, s);
                    KW_CHECK((uint8_t *)k >= lo && (uint8_t *)(k + 16) <= hi);
                    KW_CHECK((uint8_t *)v >= lo && (uint8_t *)(v + 8) <= hi);
                    float tag = (float)(id * 10000 + il * 1000 + h * 100 + s * 10);
                    for (int d = 0; d < 16; d++) k[d] = tag + (float)d;
                    for (int d = 0; d < 8; d++) v[d] = -(tag + (float)d);
                    if (id == a) total += 16 + 8;
                }
    KW_CHECK_EQ_INT(total * 4, p->block_bytes);
    int ok = 1;
    for (int il = 0; il < 3; il++)
        for (int h = 0; h < 2; h++)
            for (int s = 0; s < 4; s++)
                for (int32_t id = a; id <= b; id++) {
                    float *k = kw_kv_k(p, id, il, h, s), *v = kw_kv_v(p, id, il, h, s);
                    float tag = (float)(id * 10000 + il * 1000 + h * 100 + s * 10);
                    ok &= k[3] == tag + 3.0f && v[7] == -(tag + 7.0f);
                }
    KW_CHECK_MSG(ok, "rows overlap");
    kw_kv_block_copy(p, b, a);
    ok = 1;
    for (int il = 0; il < 3; il++)
        for (int h = 0; h < 2; h++) {
            ok &= memcmp(kw_kv_k(p, b, il, h, 0), kw_kv_k(p, a, il, h, 0), 4 * 16 * 4) == 0;
            ok &= memcmp(kw_kv_v(p, b, il, h, 0), kw_kv_v(p, a, il, h, 0), 4 * 8 * 4) == 0;
        }
    KW_CHECK_MSG(ok, "block copy differs");
    kw_kv_pool_destroy(p);
}

/* The chunked layout (kv.h, KW_KV_CHUNK_BLOCKS): the K and V regions of all
 * blocks, heads and layers tile the allocation exactly, with a partial last
 * chunk too, and within a chunk one head's regions of consecutive ids follow
 * each other (what attention's prefetch policy relies on). */
static void test_chunk_layout(void) {
    for (int nb = 1; nb <= 2 * KW_KV_CHUNK_BLOCKS + 3; nb += 6) {
        kw_err err = {{0}};
        kw_kv_layout l = layout(KW_TYPE_F16, 16, 4);
        l.head_dim_v = 32;
        kw_kv_pool *p = kw_kv_pool_create(&l, nb, &err);
        KW_CHECK(p != NULL);
        if (!p) return;
        size_t kb = 4 * p->k_row_bytes, vb = 4 * p->v_row_bytes, bytes = (size_t)nb * p->block_bytes;
        uint8_t *seen = calloc(bytes, 1);
        int inside = 1, overlap = 0, runs = 1;
        for (int32_t id = 0; id < nb; id++)
            for (int il = 0; il < 3; il++)
                for (int h = 0; h < 2; h++)
                    for (int v = 0; v < 2; v++) {
                        uint8_t *r = v ? kw_kv_v(p, id, il, h, 0) : kw_kv_k(p, id, il, h, 0);
                        size_t n = v ? vb : kb;
                        if (r < p->data || r + n > p->data + bytes) { inside = 0; continue; }
                        for (size_t i = 0; i < n; i++) overlap |= seen[(size_t)(r - p->data) + i]++;
                        if (id % KW_KV_CHUNK_BLOCKS != 0) {
                            uint8_t *prev = v ? kw_kv_v(p, id - 1, il, h, 0) : kw_kv_k(p, id - 1, il, h, 0);
                            runs &= prev + n == r;
                        }
                    }
        size_t covered = 0;
        for (size_t i = 0; i < bytes; i++) covered += seen[i] != 0;
        KW_CHECK_MSG(inside && !overlap && covered == bytes, "%d blocks: regions inside %d, overlap %d, %zu of %zu bytes",
                     nb, inside, overlap, covered, bytes);
        KW_CHECK_MSG(runs, "%d blocks: a head's regions of consecutive ids are not adjacent", nb);
        free(seen);
        kw_kv_pool_destroy(p);
    }
}

/* release() frees a table's blocks last first, so the free stack hands
 * them to the next table in their order: consecutive ids stay consecutive
 * (the chunked layout's runs); a forward release with the LIFO stack gave
 * them out reversed. The stack reuses freed blocks before untouched ones,
 * so the pool's touched pages do not grow with uptime. */
static void test_consecutive_ids(void) {
    kw_err err = {{0}};
    kw_kv_layout l = layout(KW_TYPE_F16, 32, 16);
    kw_kv_pool *p = kw_kv_pool_create(&l, 12, &err);
    KW_CHECK(p != NULL);
    if (!p) return;
    kw_block_table a = {0}, b = {0}, c = {0};
    KW_CHECK_EQ_INT(kw_block_table_ensure(&a, p, 4 * 16), 0);   /* 0 1 2 3 */
    KW_CHECK_EQ_INT(kw_block_table_ensure(&b, p, 2 * 16), 0);   /* 4 5 */
    KW_CHECK(a.ids[3] == 3 && b.ids[0] == 4 && b.ids[1] == 5);
    kw_block_table_release(&a, p);
    KW_CHECK_EQ_INT(kw_block_table_ensure(&c, p, 3 * 16), 0);
    KW_CHECK_MSG(c.ids[0] == 0 && c.ids[1] == 1 && c.ids[2] == 2, "released blocks came back as %d %d %d", c.ids[0],
                 c.ids[1], c.ids[2]);
    KW_CHECK_EQ_INT(kw_block_table_ensure(&c, p, 5 * 16), 0);
    KW_CHECK_EQ_INT(c.ids[3], 3);   /* the last freed block before any untouched one */
    KW_CHECK_EQ_INT(c.ids[4], 6);
    KW_CHECK_EQ_INT(p->n_free, 12 - 7);
    kw_block_table_release(&b, p);
    kw_block_table_release(&c, p);
    KW_CHECK_EQ_INT(p->n_free, 12);
    kw_block_table_free(&a);
    kw_block_table_free(&b);
    kw_block_table_free(&c);
    kw_kv_pool_destroy(p);
}

static void test_tables(void) {
    kw_err err = {{0}};
    kw_kv_layout l = layout(KW_TYPE_Q8_0, 32, 16);
    kw_kv_pool *p = kw_kv_pool_create(&l, 5, &err);
    KW_CHECK(p != NULL);
    if (!p) return;
    kw_block_table t = {0}, u = {0};
    KW_CHECK_EQ_INT(kw_block_table_ensure(&t, p, 33), 0);
    KW_CHECK_EQ_INT(t.n, 3);
    KW_CHECK_EQ_INT(kw_block_table_ensure(&t, p, 48), 0);
    KW_CHECK_EQ_INT(t.n, 3);
    KW_CHECK_EQ_INT(kw_block_table_ensure(&t, p, 200), -1);   /* only 5 blocks */
    KW_CHECK_EQ_INT(p->n_free, 0);
    /* share the first block with a second table */
    kw_kv_ref(p, t.ids[0]);
    KW_CHECK_EQ_INT(kw_block_table_push(&u, t.ids[0]), 0);
    kw_block_table_release(&t, p);
    KW_CHECK_EQ_INT(t.n, 0);
    KW_CHECK_EQ_INT(p->n_free, 4);
    KW_CHECK_EQ_INT(p->refs[u.ids[0]], 1);
    kw_block_table_release(&u, p);
    KW_CHECK_EQ_INT(p->n_free, 5);
    kw_block_table_free(&t);
    kw_block_table_free(&u);
    kw_kv_pool_destroy(p);
}

int main(void) {
    test_sizes();
    test_q8_head_dim_error();
    test_alloc_refs();
    test_addressing_and_copy();
    test_chunk_layout();
    test_consecutive_ids();
    test_tables();
    return kw_test_finish();
}
