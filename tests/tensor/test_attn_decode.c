/* test_attn_decode.c - the AVX-512 decode attention (attn_decode_avx512.c)
 * against (1) the AVX-512 family's per-token arithmetic (attn.c), which
 * runs where it does not apply (rebuilt here from the attn_avx2.c helpers:
 * the two must agree bit for bit, so decode, batched decode and prefill
 * tiles give the same logits)
 * and (2) a double-precision reference (softmax attention from scratch).
 * F32 and F16 caches; block_tokens 16, 24 and 32 (blocks in reverse order);
 * G = 1, 4, 7, 8 and 12 (head groups beyond 8 and not a multiple of 4);
 * contexts of 1..161 keys (partial groups of 16, pairs with one key);
 * head dims 64/64, 128/128, 40/48. Skips (77) without AVX-512F. */
#include "attn_ref.h"

/* Float arithmetic with F16/F32 products against a double reference over
 * <= 161 keys of <= 128 dims: a few float ulps of outputs |out| <= 1;
 * 2e-5 leaves ~100x margin (the tile test's 1e-5 is for <= 80 keys). */
static const double TOL_REF = 2e-5;

static uint32_t g_seed = 777u;
static float frand(void) { return attn_ref_frand(&g_seed); }

static void run_case(uint32_t type, int bt, int G, int n_head_kv, int hk, int hv, int32_t n) {
    const int n_head = G * n_head_kv;
    kw_err err = {{0}};
    kw_kv_layout lay = {.n_layer = 1, .n_head_kv = n_head_kv, .head_dim_k = hk, .head_dim_v = hv, .type = type,
                        .block_tokens = bt};
    int32_t nb = (n + bt - 1) / bt;
    kw_kv_pool *kv = kw_kv_pool_create(&lay, nb + 1, &err);
    KW_CHECK_MSG(kv != NULL, "%s", err.msg);
    if (!kv) return;
    int32_t ids[MAXN];
    for (int32_t i = 0; i < nb; i++) ids[nb - 1 - i] = kw_kv_alloc(kv);   /* blocks in reverse order */
    kw_block_table t = {.ids = ids, .n = nb, .cap = MAXN};
    float row[MAXD];
    for (int32_t j = 0; j < n; j++)
        for (int h = 0; h < n_head_kv; h++) {
            for (int d = 0; d < hk; d++) row[d] = frand();
            put_row(type, kw_kv_k(kv, ids[j / bt], 0, h, j % bt), row, hk);
            for (int d = 0; d < hv; d++) row[d] = frand();
            put_row(type, kw_kv_v(kv, ids[j / bt], 0, h, j % bt), row, hv);
        }
    /* batch of 3 tokens; the one under test is index 1 at position n - 1 */
    int32_t pos[3] = {0, n - 1, 0};
    float *q = malloc(sizeof(float) * 3 * (size_t)n_head * (size_t)hk);
    float *out = calloc(3 * (size_t)n_head * (size_t)hv, sizeof(float));
    float *scr = malloc(sizeof(float) * (size_t)G * (size_t)(n + 16));
    float got[MAXD];
    double ref[MAXD];
    for (int i = 0; i < 3 * n_head * hk; i++) q[i] = 2.0f * frand();
    double worst = 0.0;
    int identical = 1;
    for (int kvh = 0; kvh < n_head_kv; kvh++) {
        kw_attn_args a = {.q = q, .out = out, .kv = kw_kv_attn_view(kv, t.ids, 0), .pos = pos, .i0 = 1, .n_tok = 1,
                           .kvh = kvh, .n_head = n_head, .G = G, .hk = hk, .hv = hv};
        kw_attn_decode_avx512(&a, scr, n + 16);
        for (int g = 0; g < G; g++) {
            int h = kvh * G + g;
            const float *qh = q + ((size_t)n_head + (size_t)h) * (size_t)hk;
            const float *o = out + ((size_t)n_head + (size_t)h) * (size_t)hv;
            per_token(kv, &t, kvh, qh, n, hk, hv, got);
            if (memcmp(got, o, sizeof(float) * (size_t)hv) != 0) identical = 0;
            reference(kv, &t, kvh, qh, n, hk, hv, ref);
            for (int d = 0; d < hv; d++) {
                double e = fabs(ref[d] - o[d]);
                if (e > worst) worst = e;
            }
        }
    }
    /* tokens 0 and 2 are not touched */
    int untouched = 1;
    for (int i = 0; i < n_head * hv; i++)
        if (out[i] != 0.0f || out[(size_t)2 * n_head * hv + i] != 0.0f) untouched = 0;
    KW_CHECK_MSG(identical, "%s bt %d G %d hk %d hv %d n %d: differs from the per-token AVX2 path",
                 kw_type_name(type), bt, G, hk, hv, n);
    KW_CHECK_MSG(worst <= TOL_REF, "%s bt %d G %d n %d: |out - double reference| %.3g", kw_type_name(type), bt, G, n,
                 worst);
    KW_CHECK_MSG(untouched, "%s bt %d G %d n %d: wrote another token's output", kw_type_name(type), bt, G, n);
    free(q);
    free(out);
    free(scr);
    kw_kv_pool_destroy(kv);
}

int main(void) {
    const kw_cpu_info *ci = kw_cpu_info_get();
    if (!ci || !ci->avx512f || !ci->avx2 || !ci->fma || !ci->f16c) {
        printf("no AVX-512F: skipped\n");
        return 77;
    }
    KW_CHECK(kw_attn_decode_supported(KW_TYPE_F16, 4, 64, 64));
    KW_CHECK(!kw_attn_decode_supported(KW_TYPE_Q8_0, 4, 64, 64));
    KW_CHECK(!kw_attn_decode_supported(KW_TYPE_F16, 4, 60, 64));
    KW_CHECK(!kw_attn_decode_supported(KW_TYPE_F16, 4, 64, 40));
    const uint32_t types[] = {KW_TYPE_F32, KW_TYPE_F16};
    const int32_t ns[] = {1, 2, 15, 16, 17, 33, 80, 161};
    for (int ti = 0; ti < 2; ti++)
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
            run_case(types[ti], 32, 4, 2, 64, 64, ns[k]);
            run_case(types[ti], 24, 7, 1, 64, 64, ns[k]);
            run_case(types[ti], 16, 12, 1, 40, 48, ns[k]);
        }
    for (int ti = 0; ti < 2; ti++) {
        run_case(types[ti], 16, 1, 3, 128, 128, 50);
        run_case(types[ti], 32, 8, 1, 128, 128, 100);
        run_case(types[ti], 32, 4, 2, 64, 128, 47);
    }
    return kw_test_finish();
}
