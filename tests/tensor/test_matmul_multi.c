/* test_matmul_multi.c - kw_matmul_multi (several matrices, one pool run)
 * gives exactly what separate kw_matmul calls give: same type (packed and
 * not), mixed types (falls back), F32 (no quantized activations), 1 and 2
 * threads, decode / small-batch / prefill row counts. */
#include "testutil.h"
#include "kvwise/memory.h"
#include "kvwise/tensor.h"
#include <string.h>

static uint32_t g_seed = 4242u;
static float frand(void) {
    g_seed = g_seed * 1664525u + 1013904223u;
    return (float)((g_seed >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static int make(kw_matrix *W, uint32_t type, int64_t rows, int64_t cols) {
    memset(W, 0, sizeof *W);
    W->type = type; W->rows = rows; W->cols = cols;
    W->row_bytes = kw_row_bytes(type, cols);
    uint8_t *d = kw_mem_alloc(KW_MEM_WEIGHTS, W->row_bytes * (size_t)rows);
    float *tmp = malloc(sizeof(float) * (size_t)cols);
    if (!d || !tmp) { free(tmp); kw_mem_free(d); return -1; }
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t j = 0; j < cols; j++) tmp[j] = frand();
        kw_quantize_row(type, tmp, d + (size_t)r * W->row_bytes, cols);
    }
    free(tmp);
    W->data = d;
    return 0;
}

static void check(const char *what, const uint32_t types[3], bool pack, int64_t n, kw_pool *pool) {
    const int64_t rows[3] = {197, 64, 33}, cols = 256;
    kw_matrix W[3];
    for (int m = 0; m < 3; m++) {
        KW_CHECK(make(&W[m], types[m], rows[m], cols) == 0);
        if (pack) kw_matrix_pack(&W[m], NULL);
    }
    float *X = malloc(sizeof(float) * (size_t)(n * cols));
    for (int64_t i = 0; i < n * cols; i++) X[i] = frand();
    size_t sb = 0;
    for (int m = 0; m < 3; m++) {
        size_t s = kw_matmul_scratch_bytes(&W[m], n);
        if (s > sb) sb = s;
    }
    void *scratch = kw_mem_alloc(KW_MEM_SCRATCH, sb + 64);
    float *want[3], *got[3];
    for (int m = 0; m < 3; m++) {
        want[m] = calloc((size_t)(n * rows[m]), sizeof(float));
        got[m] = malloc(sizeof(float) * (size_t)(n * rows[m]));
        memset(got[m], 0xff, sizeof(float) * (size_t)(n * rows[m]));   /* NaN: every output must be written */
        kw_matmul(pool, &W[m], X, n, want[m], scratch);
    }
    const kw_matrix *Wp[3] = {&W[0], &W[1], &W[2]};
    kw_matmul_multi(pool, Wp, 3, X, n, got, scratch);
    for (int m = 0; m < 3; m++) {
        KW_CHECK_MSG(memcmp(want[m], got[m], sizeof(float) * (size_t)(n * rows[m])) == 0,
                     "%s %s n=%lld threads=%d matrix %d differs from kw_matmul", what, kw_type_name(types[m]),
                     (long long)n, kw_pool_size(pool), m);
        free(want[m]);
        free(got[m]);
        kw_matrix_unpack(&W[m]);
        kw_mem_free((void *)W[m].data);
    }
    kw_mem_free(scratch);
    free(X);
}

int main(void) {
    kw_pool *p1 = kw_pool_create(1), *p2 = kw_pool_create(2);
    const int64_t ns[] = {1, 4, 11};
    const uint32_t same[][3] = {{KW_TYPE_Q4_0, KW_TYPE_Q4_0, KW_TYPE_Q4_0}, {KW_TYPE_Q8_0, KW_TYPE_Q8_0, KW_TYPE_Q8_0},
                                {KW_TYPE_Q4_K, KW_TYPE_Q4_K, KW_TYPE_Q4_K}, {KW_TYPE_F16, KW_TYPE_F16, KW_TYPE_F16},
                                {KW_TYPE_F32, KW_TYPE_F32, KW_TYPE_F32}};
    const uint32_t mixed[3] = {KW_TYPE_Q4_0, KW_TYPE_Q8_0, KW_TYPE_Q6_K};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
        for (int pi = 0; pi < 2; pi++) {
            kw_pool *p = pi ? p2 : p1;
            for (size_t t = 0; t < sizeof same / sizeof same[0]; t++) {
                check("same", same[t], false, ns[k], p);
                check("same packed", same[t], true, ns[k], p);
            }
            check("mixed", mixed, true, ns[k], p);
        }
    kw_pool_destroy(p1);
    kw_pool_destroy(p2);
    return kw_test_finish();
}
