/* test_attn_tiles.c - the AVX-512 prefill attention tiles (attn_avx512.c)
 * against (1) the AVX-512 family's per-token arithmetic (attn.c) for single
 * tokens (rebuilt here from the attn_avx2.c helpers: the two must agree bit
 * for bit, so a prompt gives the same logits in one batch or token by token)
 * and (2) a double-precision reference (softmax attention from scratch).
 * F32 and F16 caches, block_tokens 16 and 24 (tiles cross blocks), G = 4, 7
 * and 1, tiles that start mid-sequence and have uneven positions.
 * Skips (77) without AVX-512F. */
#include "attn_ref.h"

/* The tile computes in float with products of F16/F32 values; against a
 * double reference over <= 80 keys of 64 dims the error is a few float ulps
 * of the output (|out| <= 1): 1e-5 leaves ~100x margin. */
static const double TOL_REF = 1e-5;

static uint32_t g_seed = 12345u;
static float frand(void) { return attn_ref_frand(&g_seed); }

static void run_case(uint32_t type, int bt, int n_head, int n_head_kv, int n_tok, int32_t first_pos) {
    const int hk = 64, hv = 64, G = n_head / n_head_kv, n_pos = first_pos + 2 * n_tok + 1;
    kw_err err = {{0}};
    kw_kv_layout lay = {.n_layer = 1, .n_head_kv = n_head_kv, .head_dim_k = hk, .head_dim_v = hv, .type = type,
                        .block_tokens = bt};
    int32_t nb = (n_pos + bt - 1) / bt;
    kw_kv_pool *kv = kw_kv_pool_create(&lay, nb + 2, &err);
    KW_CHECK_MSG(kv != NULL, "%s", err.msg);
    if (!kv) return;
    int32_t ids[16];
    for (int32_t i = 0; i < nb; i++) ids[nb - 1 - i] = kw_kv_alloc(kv);   /* blocks in reverse order */
    kw_block_table t = {.ids = ids, .n = nb, .cap = 16};
    float row[64];
    for (int32_t j = 0; j < n_pos; j++)
        for (int h = 0; h < n_head_kv; h++) {
            for (int d = 0; d < hk; d++) row[d] = frand();
            put_row(type, kw_kv_k(kv, ids[j / bt], 0, h, j % bt), row, hk);
            for (int d = 0; d < hv; d++) row[d] = frand();
            put_row(type, kw_kv_v(kv, ids[j / bt], 0, h, j % bt), row, hv);
        }
    /* batch: 2 filler tokens, then the tile's tokens at uneven positions */
    int n_batch = n_tok + 2;
    int32_t pos[24];
    float *q = malloc(sizeof(float) * (size_t)n_batch * n_head * hk);
    float *out = calloc((size_t)n_batch * n_head * hv, sizeof(float));
    float *scr = malloc(sizeof(float) * kw_attn_tile_floats(hk, hv, n_pos));
    for (int i = 0; i < n_batch; i++) pos[i] = i < 2 ? 0 : first_pos + 2 * (i - 2) + (i % 2);
    for (int i = 0; i < n_batch * n_head * hk; i++) q[i] = 2.0f * frand();
    double worst = 0.0;
    int identical = 1;
    for (int kvh = 0; kvh < n_head_kv; kvh++) {
        kw_attn_args a = {.q = q, .out = out, .kv = kw_kv_attn_view(kv, t.ids, 0), .pos = pos, .i0 = 2, .n_tok = n_tok,
                           .kvh = kvh, .n_head = n_head, .G = G, .hk = hk, .hv = hv};
        kw_attn_tile_avx512(&a, scr, n_pos);
        for (int ti = 0; ti < n_tok; ti++)
            for (int g = 0; g < G; g++) {
                int i = 2 + ti, h = kvh * G + g;
                const float *qi = q + ((size_t)i * n_head + h) * hk;
                const float *oi = out + ((size_t)i * n_head + h) * hv;
                float pt[64];
                double ref[64];
                per_token(kv, &t, kvh, qi, pos[i] + 1, hk, hv, pt);
                reference(kv, &t, kvh, qi, pos[i] + 1, hk, hv, ref);
                if (memcmp(pt, oi, sizeof pt) != 0) identical = 0;
                for (int d = 0; d < hv; d++) if (fabs(oi[d] - ref[d]) > worst) worst = fabs(oi[d] - ref[d]);
            }
    }
    /* rows of the filler tokens are not written by the tile */
    int untouched = 1;
    for (int i = 0; i < 2 * n_head * hv; i++) if (out[i] != 0.0f) untouched = 0;
    KW_CHECK_MSG(identical, "%s bt %d G %d tokens %d from %d: tile != per-token path", kw_type_name(type), bt, G, n_tok, first_pos);
    KW_CHECK_MSG(worst <= TOL_REF, "%s bt %d G %d: max |tile - double ref| %.3g", kw_type_name(type), bt, G, worst);
    KW_CHECK(untouched);
    printf("%s bt %2d G %d tokens %2d from %2d: identical to per-token %d, max |delta| vs double %.3g\n",
           kw_type_name(type), bt, G, n_tok, first_pos, identical, worst);
    free(q); free(out); free(scr);
    kw_kv_pool_destroy(kv);
}

int main(void) {
    const kw_cpu_info *ci = kw_cpu_info_get();
    if (!ci || !ci->avx512f || !ci->avx2 || !ci->fma || !ci->f16c) {
        printf("SKIPPED: no AVX-512F\n");
        return 77;
    }
    KW_CHECK(kw_attn_tile_supported(KW_TYPE_F16, 4, 64, 64));
    KW_CHECK(!kw_attn_tile_supported(KW_TYPE_Q8_0, 4, 64, 64));
    KW_CHECK(!kw_attn_tile_supported(KW_TYPE_F32, 17, 64, 64));
    KW_CHECK_EQ_INT(kw_attn_tile_tokens(4), 4);
    KW_CHECK_EQ_INT(kw_attn_tile_tokens(7), 2);
    static const uint32_t types[] = {KW_TYPE_F32, KW_TYPE_F16};
    for (int ti = 0; ti < 2; ti++) {
        run_case(types[ti], 16, 8, 2, 4, 0);     /* G 4: from position 0 */
        run_case(types[ti], 24, 8, 2, 4, 37);    /* tile mid-sequence, blocks of 24 */
        run_case(types[ti], 16, 14, 2, 2, 5);    /* G 7: 14 of 16 lanes */
        run_case(types[ti], 16, 2, 2, 16, 3);    /* G 1: 16 tokens */
        run_case(types[ti], 32, 8, 2, 3, 1);     /* partial tile, odd key count */
    }
    return kw_test_finish();
}
