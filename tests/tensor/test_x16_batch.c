/* test_x16_batch.c - batch composition never changes a packed Q4_0 / Q8_0
 * result: the small-batch path of the 16-row interleaved kernel
 * (kernels_avx512.c, 2..16 activation rows, the batched decode step) gives
 * exactly the bytes of the per-row packed kernel (1 row) for every row, in
 * any position of the batch and with 1 or 2 threads. For Q4_0 the one-row
 * kernel is its own loop (x16_q4_rows1: pair steps, high nibbles in place),
 * so this also checks that loop against the tile's. Shapes: 70 blocks per
 * row (prefetch runs past the end of each group and of the matrix), 3
 * blocks (odd block count), 203 rows (11-row tail through the unpacked
 * kernel), and 1032 blocks per row, where the prefill GEMM declines (its
 * offset table holds 1024) and the small-batch path also takes 17..20 rows;
 * for Q8_0 also 1000 and 4104 rows of 2048, where 1..4 rows go through
 * the lanes of x16_q8_lanes and 5..6 through x16_tile, and one row on two
 * threads equals one row on one. Skips (77) without AVX-512 VNNI. */
#include "testutil.h"
#include <string.h>
#include "kvwise/memory.h"
#include "kvwise/tensor.h"

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static float frand(void) {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * 0x1p-24 * 2.0 - 1.0);
}

/* Rows of x in reverse order (row i of the result is row n-1-i of x). */
static void reverse_rows(const float *x, float *xr, int64_t n, int64_t cols) {
    for (int64_t i = 0; i < n; i++) memcpy(xr + i * cols, x + (n - 1 - i) * cols, sizeof(float) * (size_t)cols);
}

static void run(uint32_t type, int64_t rows, int64_t cols, int max_n, kw_pool *p1, kw_pool *p2) {
    size_t rb = kw_row_bytes(type, cols);
    uint8_t *wd = malloc(rb * (size_t)rows);
    float *tmp = malloc(sizeof(float) * (size_t)cols);
    float *x = malloc(sizeof(float) * (size_t)(max_n * cols)), *xr = malloc(sizeof(float) * (size_t)(max_n * cols));
    float *y1 = malloc(sizeof(float) * (size_t)(max_n * rows)), *yb = malloc(sizeof(float) * (size_t)(max_n * rows));
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t j = 0; j < cols; j++) tmp[j] = frand() * 0.1f;
        kw_quantize_row(type, tmp, wd + (size_t)r * rb, cols);
    }
    for (int64_t i = 0; i < max_n * cols; i++) x[i] = frand() * ((i / 32) % 7 == 3 ? 4.0f : 1.0f);
    kw_matrix W = {.type = type, .rows = rows, .cols = cols, .row_bytes = rb, .data = wd};
    kw_err err = {{0}};
    KW_CHECK_EQ_INT(kw_matrix_pack(&W, &err), 0);
    KW_CHECK_EQ_INT(kw_matrix_packed_rows(&W), rows / 16 * 16);
    void *scr = kw_mem_alloc(KW_MEM_SCRATCH, kw_matmul_scratch_bytes(&W, max_n));
    /* the reference: every activation row alone (per-row packed kernel) */
    for (int64_t i = 0; i < max_n; i++) kw_matmul(p1, &W, x + i * cols, 1, y1 + i * rows, scr);
    /* one row on two threads (each thread's part in pieces, Q8_0 decode in lanes per piece) */
    kw_matmul(p2, &W, x, 1, yb, scr);
    KW_CHECK_MSG(memcmp(yb, y1, sizeof(float) * (size_t)rows) == 0, "%s %lldx%lld: one row on 2 threads != on 1",
                 kw_type_name(type), (long long)rows, (long long)cols);
    for (int n = 2; n <= max_n; n++) {
        kw_pool *p = n % 2 ? p1 : p2;
        kw_matmul(p, &W, x, n, yb, scr);
        KW_CHECK_MSG(memcmp(yb, y1, sizeof(float) * (size_t)(n * rows)) == 0, "%s %lldx%lld: %d rows together != one at a time",
                     kw_type_name(type), (long long)rows, (long long)cols, n);
        /* the same rows in reverse order: each row's output must not depend on its position */
        reverse_rows(x, xr, n, cols);
        kw_matmul(n % 2 ? p2 : p1, &W, xr, n, yb, scr);
        int same = 1;
        for (int i = 0; i < n && same; i++)
            same = memcmp(yb + (int64_t)i * rows, y1 + (int64_t)(n - 1 - i) * rows, sizeof(float) * (size_t)rows) == 0;
        KW_CHECK_MSG(same, "%s %lldx%lld: %d rows in reverse order differ", kw_type_name(type), (long long)rows,
                     (long long)cols, n);
    }
    kw_matrix_unpack(&W);
    kw_mem_free(scr);
    free(wd); free(tmp); free(x); free(xr); free(y1); free(yb);
}

int main(void) {
    kw_test_need_avx512_vnni();
    kw_pool *p1 = kw_pool_create(1), *p2 = kw_pool_create(2);
    static const uint32_t types[] = {KW_TYPE_Q4_0, KW_TYPE_Q8_0};
    for (int t = 0; t < 2; t++) {
        run(types[t], 203, 2240, 17, p1, p2);    /* 70 blocks; tiles of 8 + 1..8 rows; 17 rows: the prefill GEMM */
        run(types[t], 96, 96, 8, p1, p2);        /* 3 blocks */
        run(types[t], 48, 33024, 20, p1, p2);    /* 1032 blocks: the GEMM declines, the small-batch path takes 17..20 */
    }
    /* Q8_0 in lanes (kernels_avx512.c x16_q8_lanes: runs of >= 2 x 128 KiB, 1..4 activation rows): one
     * thread takes all 62 groups, one row in 4 lanes of 15 plus 2 lanes' extra group, 2..4 rows in 2 lanes
     * of 31; 257 groups on two threads: lanes per piece; 5 and 6 rows through x16_tile, the same bytes */
    run(KW_TYPE_Q8_0, 1000, 2048, 6, p1, p2);
    run(KW_TYPE_Q8_0, 4104, 2048, 6, p1, p2);
    kw_pool_destroy(p1);
    kw_pool_destroy(p2);
    return kw_test_finish();
}
