/* test_matmul_multi.c - kw_matmul_multi (several matrices, one pool run)
 * gives exactly what separate kw_matmul calls give: same type (packed and
 * not), mixed types (falls back), F32 (no quantized activations), 1, 2, 3
 * and 5 threads, decode / small-batch / prefill row counts. Up to 16
 * activation rows each thread streams its own part and then helps with
 * the others' (matmul.c take_piece), a piece of 1-4 row groups at a time
 * (smaller toward a part's end; the rule itself is checked first):
 * the 1001-row matrix's 63 groups (the last one partial) split unevenly
 * over 2, 3 and 5 threads, so parts and pieces end mid-matrix and on the
 * partial group, and the 33-row one has fewer groups than 5 threads have
 * parts (empty parts); the outputs must still be
 * those of kw_matmul on one thread. Each case runs again with every thread
 * helping first (kw_matmul_test_help_first), so pieces taken from the back
 * of a part are checked on every call, not only when timing allows.
 * Every call gets its scratch filled with NaN first and every output must
 * be finite: a family may skip writing the parts of the activation rows
 * that no matrix of the run reads (kernels.h quant_packed, F16 packed as
 * int16 on AVX-512), so a run with one packed and two unpacked matrices
 * ("partly packed") must still write what the unpacked ones read. */
#include "testutil.h"
#include "kvwise/memory.h"
#include "kvwise/tensor.h"
#include "tensor/kernels.h"
#include <math.h>
#include <string.h>

static uint32_t g_seed = 4242u;
static float frand(void) { return kw_test_frand(&g_seed); }

static void check(const char *what, const uint32_t types[3], unsigned pack_mask, int64_t n, kw_pool *pool,
                  kw_pool *ref) {
    const int64_t rows[3] = {1001, 64, 33}, cols = 256;
    kw_matrix W[3];
    for (int m = 0; m < 3; m++) {
        KW_CHECK(kw_test_random_matrix(&W[m], types[m], rows[m], cols, &g_seed) == 0);
        if (pack_mask & (1u << m)) kw_matrix_pack(&W[m], NULL);
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
        memset(scratch, 0xff, sb);
        kw_matmul(ref, &W[m], X, n, want[m], scratch);
        int64_t bad = 0;
        for (int64_t i = 0; i < n * rows[m]; i++) bad += !isfinite(want[m][i]);
        KW_CHECK_MSG(bad == 0, "%s %s n=%lld matrix %d: %lld outputs not finite (read unwritten scratch?)", what,
                     kw_type_name(types[m]), (long long)n, m, (long long)bad);
    }
    memset(scratch, 0xff, sb);
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

/* The piece rule of the streaming split: pieces taken from the front of a
 * 256-group part with pieces of 32 cover it exactly, start full, shrink
 * toward the end (the last one is a single group, so threads finish a run
 * together) and never exceed the cap; 1..3 groups left still give a piece. */
static void check_piece_rule(void) {
    uint32_t left = 256, taken = 0, count = 0, first = 0, last = 0, prev = 32;
    int grew = 0;
    while (left > 0) {
        uint32_t n = kw_mm_piece_groups(left, 32);
        KW_CHECK(n >= 1 && n <= 32 && n <= left);
        if (count == 0) first = n;
        if (n > prev) grew = 1;
        prev = n;
        last = n;
        left -= n;
        taken += n;
        count++;
    }
    KW_CHECK(taken == 256);
    KW_CHECK(first == 32);
    KW_CHECK(last == 1);
    KW_CHECK(!grew);
    KW_CHECK(count > 8 && count < 32);
    KW_CHECK(kw_mm_piece_groups(1, 32) == 1 && kw_mm_piece_groups(2, 32) == 1 && kw_mm_piece_groups(3, 1) == 1);
    KW_CHECK(kw_mm_piece_groups(9, 32) == 3 && kw_mm_piece_groups(1000, 4) == 4);
}

/* The helper's rule (kw_mm_help_groups): for a whole matrix it is the
 * owner's piece rule; for a matrix in np panels whose owner is in panel p,
 * what it takes times the panels it computes (np - p) is at most a third
 * of the owner's remaining group-panels (or one group), never more than a
 * piece or what is left in the panel, and at least one group. */
static void check_help_rule(void) {
    for (uint32_t left = 1; left <= 300; left++) KW_CHECK(kw_mm_help_groups(0, 0, left, 1, 32) == kw_mm_piece_groups(left, 32));
    KW_CHECK(kw_mm_help_groups(0, 10, 19, 1, 32) == kw_mm_piece_groups(9, 32));
    int bad = 0;
    for (int np = 2; np <= 8; np++)
        for (uint32_t p = 0; p < (uint32_t)np; p++)
            for (uint32_t e = 1; e <= 80; e++)
                for (uint32_t f = 0; f < e; f++) {
                    uint32_t n = kw_mm_help_groups(p, f, e, np, 8);
                    uint64_t k = (uint64_t)np - p, rem = (uint64_t)(e - f) + (uint64_t)e * (k - 1);
                    if (n < 1 || n > 8 || n > e - f || (n > 1 && (uint64_t)n * k * 3 > rem)) bad++;
                }
    KW_CHECK_MSG(bad == 0, "%d helper takes break the rule", bad);
    /* owner in panel 0 of 4 with all 64 groups left: a third of 256 group-panels is 85, i.e. 21 groups, capped at 8 */
    KW_CHECK(kw_mm_help_groups(0, 0, 64, 4, 8) == 8);
    /* owner in panel 2 of 4 with 2 groups left of 30: rem = 2 + 30 = 32 group-panels, a third over 2 panels is 5, capped at 2 */
    KW_CHECK(kw_mm_help_groups(2, 28, 30, 4, 8) == 2);
    /* last panel, 9 left: the piece rule's third */
    KW_CHECK(kw_mm_help_groups(3, 0, 9, 4, 8) == 3);
}

int main(void) {
    check_piece_rule();
    check_help_rule();
    kw_pool *pools[] = {kw_pool_create(1), kw_pool_create(2), kw_pool_create(3), kw_pool_create(5)};
    const int64_t ns[] = {1, 4, 11, 16, 17};
    const uint32_t same[][3] = {{KW_TYPE_Q4_0, KW_TYPE_Q4_0, KW_TYPE_Q4_0}, {KW_TYPE_Q8_0, KW_TYPE_Q8_0, KW_TYPE_Q8_0},
                                {KW_TYPE_Q4_K, KW_TYPE_Q4_K, KW_TYPE_Q4_K}, {KW_TYPE_F16, KW_TYPE_F16, KW_TYPE_F16},
                                {KW_TYPE_F32, KW_TYPE_F32, KW_TYPE_F32}};
    const uint32_t mixed[3] = {KW_TYPE_Q4_0, KW_TYPE_Q8_0, KW_TYPE_Q6_K};
    for (int help_first = 0; help_first < 2; help_first++)
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
        for (size_t pi = 0; pi < sizeof pools / sizeof pools[0]; pi++) {
            kw_matmul_test_help_first(help_first);
            kw_pool *p = pools[pi];
            for (size_t t = 0; t < sizeof same / sizeof same[0]; t++) {
                check("same", same[t], 0, ns[k], p, pools[0]);
                check("same packed", same[t], 7, ns[k], p, pools[0]);
                check("partly packed", same[t], 1, ns[k], p, pools[0]);
            }
            check("mixed", mixed, 7, ns[k], p, pools[0]);
        }
    for (size_t pi = 0; pi < sizeof pools / sizeof pools[0]; pi++) kw_pool_destroy(pools[pi]);
    return kw_test_finish();
}
