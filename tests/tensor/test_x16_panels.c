/* test_x16_panels.c - packed Q4_0 in K-panels (kernels_avx512.c: rows of
 * at least 128 blocks, a multiple of 64, in whole groups of 16 rows, are
 * stored panel by panel) computes what the whole rows do:
 *   - the layout: 8192- and 4096-value Q4_0 rows get panels of 64 blocks,
 *     2048-value rows, a 200-row matrix (not whole groups) and Q8_0 none;
 *   - every path gives the same bytes: one row on one thread (the panels
 *     one after the other in the kernel, the sum carried through Y), one
 *     row and 2..16 rows on 2 and 3 threads (kw_matmul's streaming split:
 *     the owner panel after panel, a helper computing panels p..np-1 of
 *     the rows it takes), the same with helpers first
 *     (kw_matmul_test_help_first: every helper takes rows in panel 0 and
 *     computes all their panels), and 17..20 rows (the prefill GEMM, the
 *     sum in registers across panels);
 *   - against the same matrix unpacked (the per-row kernel over the GGUF
 *     blocks) within float-order tolerance.
 * Skips (77) without AVX-512 VNNI. */
#include "testutil.h"
#include <math.h>
#include <string.h>
#include "kvwise/memory.h"
#include "kvwise/tensor.h"
#include "tensor/kernels.h"

static uint32_t g_seed = 12345;

static uint32_t panel_nb_of(const kw_matrix *W) {
    const kw_pack_hdr *h = W->packed;
    return h ? h->panel_nb : 0;
}

static void check_layout(uint32_t type, int64_t rows, int64_t cols, uint32_t want) {
    kw_matrix W;
    KW_CHECK(kw_test_random_matrix(&W, type, rows, cols, &g_seed) == 0);
    kw_err err = {{0}};
    KW_CHECK_EQ_INT(kw_matrix_pack(&W, &err), 0);
    KW_CHECK_MSG(panel_nb_of(&W) == want, "%s %lldx%lld: panel_nb %u, want %u", kw_type_name(type), (long long)rows,
                 (long long)cols, panel_nb_of(&W), want);
    kw_matrix_unpack(&W);
    kw_mem_free((void *)W.data);
}

static int same(const float *a, const float *b, int64_t n) { return memcmp(a, b, sizeof(float) * (size_t)n) == 0; }

static void run(int64_t rows, int64_t cols, int max_n, kw_pool *const *pools) {
    kw_matrix W, U;
    KW_CHECK(kw_test_random_matrix(&W, KW_TYPE_Q4_0, rows, cols, &g_seed) == 0);
    U = W;   /* the same blocks, never packed */
    kw_err err = {{0}};
    KW_CHECK_EQ_INT(kw_matrix_pack(&W, &err), 0);
    KW_CHECK_MSG(panel_nb_of(&W) == 64, "%lldx%lld: not in panels", (long long)rows, (long long)cols);
    float *x = malloc(sizeof(float) * (size_t)(max_n * cols));
    float *y1 = malloc(sizeof(float) * (size_t)(max_n * rows)), *y = malloc(sizeof(float) * (size_t)(max_n * rows));
    for (int64_t i = 0; i < max_n * cols; i++) x[i] = kw_test_frand(&g_seed) * ((i / 32) % 5 == 2 ? 3.0f : 1.0f);
    void *scr = kw_mem_alloc(KW_MEM_SCRATCH, kw_matmul_scratch_bytes(&W, max_n));
    /* reference: each activation row alone on one thread */
    for (int64_t i = 0; i < max_n; i++) kw_matmul(pools[0], &W, x + i * cols, 1, y1 + i * rows, scr);
    /* the unpacked rows agree to float-order tolerance */
    kw_matmul(pools[0], &U, x, 1, y, scr);
    double worst = 0;
    for (int64_t r = 0; r < rows; r++) {
        double d = fabs((double)y[r] - (double)y1[r]) / (1.0 + fabs((double)y1[r]));
        if (d > worst) worst = d;
    }
    KW_CHECK_MSG(worst < 1e-4, "%lldx%lld: packed in panels vs unpacked: relative difference %g", (long long)rows,
                 (long long)cols, worst);
    for (int help = 0; help < 2; help++) {
        kw_matmul_test_help_first(help);
        for (int pi = 1; pi < 3; pi++)
            for (int n = 1; n <= max_n; n++) {
                kw_matmul(pools[pi], &W, x, n, y, scr);
                KW_CHECK_MSG(same(y, y1, (int64_t)n * rows), "%lldx%lld: %d rows on %d threads%s != one row at a time",
                             (long long)rows, (long long)cols, n, kw_pool_size(pools[pi]), help ? " (helpers first)" : "");
            }
    }
    kw_matmul_test_help_first(false);
    for (int n = 2; n <= max_n; n++) {   /* batches on one thread: the tile and the GEMM */
        kw_matmul(pools[0], &W, x, n, y, scr);
        KW_CHECK_MSG(same(y, y1, (int64_t)n * rows), "%lldx%lld: %d rows on 1 thread != one row at a time",
                     (long long)rows, (long long)cols, n);
    }
    kw_matrix_unpack(&W);
    kw_mem_free(scr);
    kw_mem_free((void *)W.data);
    free(x); free(y1); free(y);
}

int main(void) {
    kw_test_need_avx512_vnni();
    check_layout(KW_TYPE_Q4_0, 64, 8192, 64);
    check_layout(KW_TYPE_Q4_0, 64, 4096, 64);
    check_layout(KW_TYPE_Q4_0, 64, 2048, 0);    /* 64 blocks: one panel */
    check_layout(KW_TYPE_Q4_0, 200, 8192, 0);   /* not whole groups of 16 */
    check_layout(KW_TYPE_Q4_0, 64, 8224, 0);    /* 257 blocks */
    check_layout(KW_TYPE_Q8_0, 64, 8192, 0);    /* Q8_0 keeps whole rows (its lanes stream down better) */
    kw_pool *pools[3] = {kw_pool_create(1), kw_pool_create(2), kw_pool_create(3)};
    run(96, 8192, 20, pools);      /* 4 panels; 6 groups: 3 / 2 per thread */
    run(1040, 4096, 18, pools);    /* 2 panels; 65 groups: uneven parts, pieces that shrink */
    for (int i = 0; i < 3; i++) kw_pool_destroy(pools[i]);
    return kw_test_finish();
}
