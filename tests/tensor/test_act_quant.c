/* test_act_quant.c - every kernel family's activation quantizer for the
 * K-quant weights (Q8_K) writes exactly the bytes of the reference
 * (kw_quantize_row, ggml's numerics), so a family's own quantizer never
 * changes a result: Gaussian rows, rows whose largest magnitude appears
 * twice with both signs (the first one sets the scale's sign), rounding
 * ties (max 127: iscale -1, values k + 0.5 round to even), an all-zero
 * block between others, a negative maximum, and magnitudes from 1e-30 to
 * 1e30. */
#include "testutil.h"
#include <string.h>
#include "kvwise/tensor.h"
#include "tensor/kernels.h"
#include "tensor/quant_blocks.h"

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static float frand(void) {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * 0x1p-24 * 2.0 - 1.0);
}

#define NB 6
#define N (NB * KW_QK_K)

static void fill(int kind, float *x) {
    for (int j = 0; j < N; j++) x[j] = (frand() + frand() + frand()) * 0.7f;
    switch (kind) {
    case 1:   /* the largest magnitude twice, negative first in block 0, positive first in block 1 */
        x[17] = -9.0f; x[200] = 9.0f;
        x[KW_QK_K + 3] = 9.0f; x[KW_QK_K + 250] = -9.0f;
        break;
    case 2:   /* max 127 -> iscale -1: every k + 0.5 is a tie */
        for (int j = 0; j < N; j++) x[j] = (float)((int)(frand() * 120.0f)) + 0.5f;
        for (int b = 0; b < NB; b++) x[b * KW_QK_K + 7] = 127.0f;
        break;
    case 3:   /* block 2 all zero, block 4 negative maximum */
        memset(x + 2 * KW_QK_K, 0, sizeof(float) * KW_QK_K);
        x[4 * KW_QK_K + 100] = -50.0f;
        break;
    case 4:   /* per-block scales from tiny to huge */
        for (int b = 0; b < NB; b++) {
            float s = b == 0 ? 1e-30f : b == 1 ? 1e-10f : b == 2 ? 1e-3f : b == 3 ? 1e3f : b == 4 ? 1e10f : 1e30f;
            for (int j = 0; j < KW_QK_K; j++) x[b * KW_QK_K + j] *= s;
        }
        break;
    default: break;
    }
}

int main(void) {
    const char *families[] = {"scalar", "avx2", "avx512"};
    static float x[N];
    static kw_block_q8_K want[NB], got[NB];
    int ran = 0;
    for (size_t f = 0; f < 3; f++) {
        if (kw_kernel_force(families[f]) != 0) continue;
        ran++;
        kw_act_quant_fn q = kw_kernels_active()->quant[KW_TYPE_Q8_K];
        KW_CHECK(q != NULL);
        if (!q) continue;
        for (int kind = 0; kind < 5; kind++)
            for (int rep = 0; rep < 20; rep++) {
                fill(kind, x);
                kw_quantize_row(KW_TYPE_Q8_K, x, want, N);
                memset(got, 0x55, sizeof got);
                q(x, got, N);
                for (int b = 0; b < NB; b++)
                    KW_CHECK_MSG(memcmp(&want[b], &got[b], sizeof want[b]) == 0,
                                 "%s Q8_K quantizer differs from the reference: case %d rep %d block %d (d %g vs %g)",
                                 families[f], kind, rep, b, (double)want[b].d, (double)got[b].d);
            }
    }
    KW_CHECK(ran >= 1);
    return kw_test_finish();
}
