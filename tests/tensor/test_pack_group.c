/* test_pack_group.c - packed copies (tensor.h): kw_matrix_pack_bytes says
 * what kw_matrix_pack allocates, reading only the shape; kw_matrices_pack
 * puts a group's copies in one block, in order, 64-byte aligned, each with
 * the bytes kw_matrix_pack gives the same matrix alone (so kw_matmul gives
 * identical results), skipping matrices without a packed form; unpacking
 * a member alone frees nothing, kw_matrices_unpack frees the block and
 * every byte of accounting and forgets only the copies in that block; an
 * allocation failure packs nothing and says why. On a CPU whose kernels do
 * not pack, every size is 0 and the group call returns 1 without a block. */
#include "testutil.h"
#include "kvwise/memory.h"
#include "kvwise/tensor.h"
#include <stdint.h>
#include <string.h>

static uint32_t g_seed = 777u;
static float frand(void) { return kw_test_frand(&g_seed); }
static int make(kw_matrix *W, uint32_t type, int64_t rows, int64_t cols) {
    return kw_test_random_matrix(W, type, rows, cols, &g_seed);
}

#define N 6
static const uint32_t types[N] = {KW_TYPE_Q8_0, KW_TYPE_Q4_0, KW_TYPE_F32, KW_TYPE_F16, KW_TYPE_Q4_K, KW_TYPE_Q8_0};
static const int64_t rows[N] = {200, 48, 64, 33, 40, 8};   /* F32: no packed form; 8 rows: too few to pack */
static const int64_t cols[N] = {256, 512, 256, 256, 256, 256};

static void test_sizes(void) {
    kw_matrix W;
    for (int i = 0; i < N; i++) {
        if (make(&W, types[i], rows[i], cols[i])) { KW_CHECK(0); return; }
        size_t want = kw_matrix_pack_bytes(&W);
        kw_matrix shape = W;
        shape.data = NULL;   /* sizing must not read the weights */
        KW_CHECK_EQ_INT(kw_matrix_pack_bytes(&shape), want);
        uint64_t w0 = kw_mem_current(KW_MEM_WEIGHTS);
        int rc = kw_matrix_pack(&W, NULL);
        KW_CHECK_EQ_INT(rc, want ? 0 : 1);
        KW_CHECK_EQ_INT(kw_mem_current(KW_MEM_WEIGHTS) - w0, want);
        KW_CHECK_EQ_INT(want % 64, 0);
        kw_matrix_unpack(&W);
        KW_CHECK_EQ_INT(kw_mem_current(KW_MEM_WEIGHTS), w0);
        kw_mem_free((void *)W.data);
    }
}

static void test_group(kw_pool *pool) {
    kw_matrix G[N], S[N];
    kw_matrix *gp[N];
    size_t total = 0;
    for (int i = 0; i < N; i++) {
        g_seed = 1000u + (uint32_t)i;
        if (make(&G[i], types[i], rows[i], cols[i])) { KW_CHECK(0); return; }
        g_seed = 1000u + (uint32_t)i;
        if (make(&S[i], types[i], rows[i], cols[i])) { KW_CHECK(0); return; }
        kw_matrix_pack(&S[i], NULL);
        gp[i] = &G[i];
        total += kw_matrix_pack_bytes(&G[i]);
    }
    uint64_t w0 = kw_mem_current(KW_MEM_WEIGHTS);
    void *block = (void *)1;
    kw_err err = {{0}};
    int rc = kw_matrices_pack(gp, N, &block, &err);
    KW_CHECK_EQ_INT(rc, total ? 0 : 1);
    KW_CHECK(total ? block != NULL : block == NULL);
    KW_CHECK_EQ_INT(kw_mem_current(KW_MEM_WEIGHTS) - w0, total);
    if (block) KW_CHECK_EQ_INT(kw_mem_size(block), total);
    /* in order, one after the other, each with its own size */
    uintptr_t at = (uintptr_t)block;
    for (int i = 0; i < N; i++) {
        size_t b = kw_matrix_pack_bytes(&G[i]);
        KW_CHECK_EQ_INT(G[i].packed != NULL, b != 0);
        KW_CHECK_EQ_INT(kw_matrix_packed_rows(&G[i]), kw_matrix_packed_rows(&S[i]));
        if (!b) continue;
        KW_CHECK_MSG((uintptr_t)G[i].packed == at, "matrix %d is not in its slot", i);
        at += b;
        /* same copy as a matrix packed alone (past the 64-byte header, whose 'shared' word differs) */
        KW_CHECK(memcmp((const uint8_t *)G[i].packed + 64, (const uint8_t *)S[i].packed + 64, b - 64) == 0);
    }
    /* kw_matmul over a member = over the lone copy, bit for bit, decode and prefill */
    for (int64_t n = 1; n <= 33; n += 32)
        for (int i = 0; i < N; i++) {
            float *X = malloc(sizeof(float) * (size_t)(n * cols[i]));
            float *y1 = malloc(sizeof(float) * (size_t)(n * rows[i])), *y2 = malloc(sizeof(float) * (size_t)(n * rows[i]));
            void *scratch = kw_mem_alloc(KW_MEM_SCRATCH, kw_matmul_scratch_bytes(&G[i], n) + 64);
            for (int64_t k = 0; k < n * cols[i]; k++) X[k] = frand();
            kw_matmul(pool, &G[i], X, n, y1, scratch);
            kw_matmul(pool, &S[i], X, n, y2, scratch);
            KW_CHECK_MSG(memcmp(y1, y2, sizeof(float) * (size_t)(n * rows[i])) == 0, "matrix %d n=%lld", i, (long long)n);
            kw_mem_free(scratch);
            free(X); free(y1); free(y2);
        }
    /* a member unpacked alone frees nothing; the group call frees the block */
    kw_matrix_unpack(&G[0]);
    KW_CHECK(G[0].packed == NULL);
    KW_CHECK_EQ_INT(kw_mem_current(KW_MEM_WEIGHTS) - w0, total);
    kw_matrices_unpack(gp, N, block);
    for (int i = 0; i < N; i++) KW_CHECK(G[i].packed == NULL);
    KW_CHECK_EQ_INT(kw_mem_current(KW_MEM_WEIGHTS), w0);

    /* two blocks: kw_matrices_unpack forgets only the copies in the block it frees */
    {
        kw_matrix *ga[3] = {&G[0], &G[1], &G[2]}, *gb[3] = {&G[3], &G[4], &G[5]};
        void *ba = NULL, *bb = NULL;
        size_t sb = 0;
        for (int i = 3; i < N; i++) sb += kw_matrix_pack_bytes(&G[i]);
        KW_CHECK(kw_matrices_pack(ga, 3, &ba, &err) >= 0);
        KW_CHECK(kw_matrices_pack(gb, 3, &bb, &err) >= 0);
        kw_matrices_unpack(gp, N, ba);   /* every matrix named, one block freed */
        for (int i = 0; i < N; i++)
            KW_CHECK_MSG((G[i].packed != NULL) == (i >= 3 && kw_matrix_pack_bytes(&G[i]) != 0),
                         "matrix %d after freeing the first block", i);
        KW_CHECK_EQ_INT(kw_mem_current(KW_MEM_WEIGHTS) - w0, sb);
        kw_matrices_unpack(gp, N, bb);
        for (int i = 0; i < N; i++) KW_CHECK(G[i].packed == NULL);
        KW_CHECK_EQ_INT(kw_mem_current(KW_MEM_WEIGHTS), w0);
    }

    /* out of memory: nothing packed, nothing accounted, a message */
    kw_mem_fail_nth(1);
    block = (void *)1;
    rc = kw_matrices_pack(gp, N, &block, &err);
    kw_mem_fail_nth(0);
    if (total) {
        KW_CHECK_EQ_INT(rc, -1);
        KW_CHECK(strstr(err.msg, "out of memory") != NULL);
    }
    KW_CHECK(block == NULL);
    for (int i = 0; i < N; i++) KW_CHECK(G[i].packed == NULL);
    KW_CHECK_EQ_INT(kw_mem_current(KW_MEM_WEIGHTS), w0);
    for (int i = 0; i < N; i++) {
        kw_matrix_unpack(&S[i]);
        kw_mem_free((void *)G[i].data);
        kw_mem_free((void *)S[i].data);
    }
}

int main(void) {
    kw_pool *pool = kw_pool_create(2);
    test_sizes();
    test_group(pool);
    kw_pool_destroy(pool);
    return kw_test_finish();
}
