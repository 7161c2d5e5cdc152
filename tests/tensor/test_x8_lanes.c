/* test_x8_lanes.c - the AVX2 family's decode lanes (kernels_avx2.c
 * x8_lanes: one activation row against a run of packed 8-row Q4_0 / Q8_0
 * groups cut into 2..4 contiguous lanes computed side by side) give exactly
 * the bytes of the one-group tile. The reference is the same activation
 * row as row 0 of a two-row batch, which always goes through x8_tile.
 * Shapes: 2048 columns with 30, 45 and 67 groups (Q4_0: 2, 3 and 4 lanes
 * of at least 128 KiB on one thread; Q8_0, twice the bytes: 4 lanes in
 * each; 67 leaves 3 lanes one group longer), a
 * 3-row tail past the last whole group (the unpacked tile), 4104 rows on
 * two threads (lanes per piece of the streaming split), and 480 columns
 * (15 blocks: the last quad of each group part zeros). Skips (77) when the
 * CPU has no AVX2 family. */
#include "testutil.h"
#include <stdio.h>
#include <string.h>
#include "kvwise/memory.h"
#include "kvwise/tensor.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * 0x1p-24 * 2.0 - 1.0);
}

static void run(uint32_t type, int64_t rows, int64_t cols, kw_pool *pool) {
    size_t rb = kw_row_bytes(type, cols);
    uint8_t *wd = malloc(rb * (size_t)rows);
    float *tmp = malloc(sizeof(float) * (size_t)cols), *x = malloc(sizeof(float) * (size_t)(2 * cols));
    float *y1 = malloc(sizeof(float) * (size_t)rows), *y2 = malloc(sizeof(float) * (size_t)(2 * rows));
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t j = 0; j < cols; j++) tmp[j] = frand() * 0.1f;
        kw_quantize_row(type, tmp, wd + (size_t)r * rb, cols);
    }
    for (int64_t i = 0; i < cols; i++) x[i] = frand() * ((i / 32) % 5 == 2 ? 4.0f : 1.0f);
    for (int64_t i = 0; i < cols; i++) x[cols + i] = frand();
    kw_matrix W = {.type = type, .rows = rows, .cols = cols, .row_bytes = rb, .data = wd};
    kw_err err = {{0}};
    KW_CHECK_EQ_INT(kw_matrix_pack(&W, &err), 0);
    KW_CHECK_EQ_INT(kw_matrix_packed_rows(&W), rows / 8 * 8);
    void *scr = kw_mem_alloc(KW_MEM_SCRATCH, kw_matmul_scratch_bytes(&W, 2));
    kw_matmul(pool, &W, x, 1, y1, scr);   /* one row: lanes */
    kw_matmul(pool, &W, x, 2, y2, scr);   /* two rows: the tile */
    KW_CHECK_MSG(memcmp(y1, y2, sizeof(float) * (size_t)rows) == 0, "%s %lldx%lld on %d threads: lanes != tile",
                 kw_type_name(type), (long long)rows, (long long)cols, kw_pool_size(pool));
    /* and not merely equal by accident: the outputs are not all zero */
    int nonzero = 0;
    for (int64_t r = 0; r < rows && !nonzero; r++) nonzero = y1[r] != 0.0f;
    KW_CHECK(nonzero);
    kw_matrix_unpack(&W);
    kw_mem_free(scr);
    free(wd); free(tmp); free(x); free(y1); free(y2);
}

int main(void) {
    if (kw_kernel_force("avx2") != 0) {
        printf("SKIPPED: no AVX2 kernel family on this CPU\n");
        return 77;
    }
    kw_pool *p1 = kw_pool_create(1), *p2 = kw_pool_create(2);
    static const uint32_t types[] = {KW_TYPE_Q4_0, KW_TYPE_Q8_0};
    for (int t = 0; t < 2; t++) {
        run(types[t], 8 * 30, 2048, p1);
        run(types[t], 8 * 45, 2048, p1);
        run(types[t], 8 * 67 + 3, 2048, p1);
        run(types[t], 4104, 2048, p2);
        run(types[t], 8 * 300, 480, p1);
        run(types[t], 8 * 300 + 5, 480, p2);
    }
    kw_pool_destroy(p1);
    kw_pool_destroy(p2);
    return kw_test_finish();
}
