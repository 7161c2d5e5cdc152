/* test_attn_i16.c - the i16 and i8 KV types (kv.h) and their attention
 * (attn_i16.c, attn_i16_avx512.c, attn_i16_avx2.c).
 *
 *  1. rows: kw_kv_i16_put/get round trip within half a step of the row's
 *     scale; a zero row stays zero; a row with a NaN or an infinity gets a
 *     NaN scale (attention turns NaN, as it would over f16).
 *  2. the AVX-512 VNNI kernel and the AVX2 kernel are each bit-identical
 *     (memcmp) to the portable path for decode (one token) and prefill
 *     tiles (several tokens, uneven positions, mid-sequence, G = 1, 4, 7,
 *     8), blocks of 32 and 64 in reverse order, head dims 64 and 128, hv 48
 *     (a partial 64-column block); the AVX2 cases stress its blocking of
 *     the queries (6 per pass over keys, 2 per V block): 16, 14, 8, 4
 *     queries, positions ending mid-chunk and mid-group of 16 keys.
 *  3. accuracy: against a double-precision softmax attention over the
 *     original F32 rows, the i16 path is at least as close as the same
 *     attention over an f16 cache (K, V, q and the probabilities rounded to
 *     f16, as the f16 attention path does), within 1.25x. i8: the same
 *     cases with i8 rows (4) are bit-identical across the paths too, and
 *     within 1.25x of an exact attention of q rounded to 8 bits over the
 *     rows rounded to 8 bits (the type's own roundings, as llama.cpp's
 *     q8_0 K cache with its q8_0 q).
 *  4. i8 rows: put/get round trip within half a step of max / 127, NaN
 *     and zero rows as i16.
 * Each kernel's part skips (prints so) without its ISA (AVX-512 VNNI, AVX2 +
 * FMA); 1 and 3 always run. */
#include "attn_ref.h"
#include <math.h>
#include <stdlib.h>

static uint32_t g_seed = 777u;
static float frand(void) { return attn_ref_frand(&g_seed); }

#define MAXPOS 1024   /* positions exact() holds; the cases stay below */
#define HMAX 128

/* i16 is compared with f16 (test 3); this much worse than f16 fails. The
 * measured ratio on these cases is printed (0.3-0.8 when written). */
static const double I16_VS_F16 = 1.25;
/* i8 is compared with an exact attention of the 8-bit q over its 8-bit rows. */
static const double I8_VS_ROWS8 = 1.25;

/* The integer types' rounding rule written out in scalar C (kw_kv_i16_quantize
 * in pool.c is vectorized): m = max|x| over the row, a NaN or an infinity
 * anywhere gives a NaN scale and zeros, a row whose qmax / m is not a
 * finite float (m zero or below ~1e-35) zeros and scale 0, else
 * q = rint(x * (qmax / m)), scale m / qmax. */
static float quant_rule(const float *x, int n, float qmax, int16_t *q) {
    float m = 0.0f;
    for (int d = 0; d < n; d++) {
        if (!isfinite(x[d])) { memset(q, 0, sizeof(int16_t) * (size_t)n); return NAN; }
        if (fabsf(x[d]) > m) m = fabsf(x[d]);
    }
    if (m == 0.0f || isinf(qmax / m)) { memset(q, 0, sizeof(int16_t) * (size_t)n); return 0.0f; }
    float inv = qmax / m;
    for (int d = 0; d < n; d++) q[d] = (int16_t)rintf(x[d] * inv);
    return m / qmax;
}

/* x (n <= HMAX) rounded as the i8 type stores it: the rule with qmax 127. */
static void round_row8(const float *x, int n, float *out) {
    int16_t q[HMAX];
    float s = quant_rule(x, n, 127.0f, q);
    for (int d = 0; d < n; d++) out[d] = (float)q[d] * s;
}

/* kw_kv_i16_put/get (i8 = false) or kw_kv_i8_put/get: the round trip of
 * rows of one region. */
static void test_rows(bool i8) {
    const int bt = 32, n = 64;
    float region[32 + 32 * 64 / 2], x[64], y[64];
    void (*put)(void *, int32_t, int32_t, const float *, int32_t, int) = i8 ? kw_kv_i8_put : kw_kv_i16_put;
    void (*get)(const void *, int32_t, int32_t, float *, int32_t, int) = i8 ? kw_kv_i8_get : kw_kv_i16_get;
    for (int v = 0; v < 2; v++) {
        float worst = 0.0f, m = 0.0f;
        for (int d = 0; d < n; d++) { x[d] = 3.0f * frand(); if (fabsf(x[d]) > m) m = fabsf(x[d]); }
        put(region, bt, 5, x, n, v);
        get(region, bt, 5, y, n, v);
        for (int d = 0; d < n; d++) if (fabsf(x[d] - y[d]) > worst) worst = fabsf(x[d] - y[d]);
        float step = m / (float)(i8 ? KW_KV_I8_MAX : v ? KW_KV_I16_VMAX : KW_KV_I16_KMAX);
        KW_CHECK_MSG(worst <= 0.5f * step * 1.001f, "%s %s round trip error %g > half step %g", i8 ? "i8" : "i16",
                     v ? "V" : "K", worst, 0.5f * step);
        if (i8) KW_CHECK(worst > 0.0f);   /* 8 bits do not hold these values exactly */
        memset(x, 0, sizeof x);
        put(region, bt, 6, x, n, v);
        get(region, bt, 6, y, n, v);
        KW_CHECK(memcmp(x, y, sizeof x) == 0);
        x[7] = NAN;
        put(region, bt, 7, x, n, v);
        KW_CHECK(isnan(kw_kv_i16_scales(region)[7]));
        x[7] = INFINITY;
        put(region, bt, 8, x, n, v);
        KW_CHECK(isnan(kw_kv_i16_scales(region)[8]));
        get(region, bt, 5, y, n, v);   /* neighbours untouched */
        float again = 0.0f;
        for (int d = 0; d < n; d++) if (fabsf(y[d]) > again) again = fabsf(y[d]);
        KW_CHECK(again > 0.0f);
    }
}

/* double softmax attention of q over rows kf/vf[0..n) (f16 = 1: everything
 * rounded to f16 first, probabilities too, as the f16 cache path). */
static void exact(const float *q, const float *kf, const float *vf, int n, int hk, int hv, int f16, double *out) {
    static double s[MAXPOS];
    double mx = -INFINITY, sum = 0.0;
    for (int j = 0; j < n; j++) {
        double d = 0.0;
        for (int i = 0; i < hk; i++) {
            double a = f16 ? round_f16(q[i]) : q[i], b = f16 ? round_f16(kf[(size_t)j * hk + i]) : kf[(size_t)j * hk + i];
            d += a * b;
        }
        s[j] = d / sqrt((double)hk);
        if (s[j] > mx) mx = s[j];
    }
    for (int j = 0; j < n; j++) { s[j] = exp(s[j] - mx); sum += s[j]; }
    for (int j = 0; j < n; j++) s[j] = f16 ? round_f16((float)(s[j] / sum)) : s[j] / sum;
    for (int d = 0; d < hv; d++) {
        double o = 0.0;
        for (int j = 0; j < n; j++) o += s[j] * (f16 ? round_f16(vf[(size_t)j * hv + d]) : vf[(size_t)j * hv + d]);
        out[d] = o;
    }
}

static double g_worst_ratio = 0.0, g_worst_ratio8 = 0.0;

static bool g_avx2;   /* the CPU has AVX2 + FMA: kw_attn_i16_avx2 runs too */

static void run_case_t(uint32_t type, int bt, int n_head, int n_head_kv, int hk, int hv, int n_tok, int32_t first_pos,
                       bool kernel) {
    const int G = n_head / n_head_kv, n_pos = first_pos + 2 * n_tok + 1;
    const bool i8 = type == KW_TYPE_KV_I8;
    if (n_pos > MAXPOS || (n_pos + bt - 1) / bt > 32) { KW_CHECK_MSG(0, "case beyond the test's arrays"); return; }
    kw_err err = {{0}};
    kw_kv_layout lay = {.n_layer = 1, .n_head_kv = n_head_kv, .head_dim_k = hk, .head_dim_v = hv,
                        .type = type, .block_tokens = bt};
    int32_t nb = (n_pos + bt - 1) / bt;
    kw_kv_pool *kv = kw_kv_pool_create(&lay, nb + 2, &err);
    KW_CHECK_MSG(kv != NULL, "%s", err.msg);
    if (!kv) return;
    int32_t ids[32];
    for (int32_t i = 0; i < nb; i++) ids[nb - 1 - i] = kw_kv_alloc(kv);   /* blocks in reverse order */
    kw_block_table t = {.ids = ids, .n = nb, .cap = 32};
    float *kf = malloc(sizeof(float) * (size_t)n_head_kv * n_pos * hk);
    float *vf = malloc(sizeof(float) * (size_t)n_head_kv * n_pos * hv);
    for (int h = 0; h < n_head_kv; h++)
        for (int32_t j = 0; j < n_pos; j++) {
            float *kr = kf + ((size_t)h * n_pos + j) * hk, *vr = vf + ((size_t)h * n_pos + j) * hv;
            float kscale = 0.5f + 2.0f * (float)(j % 7) / 7.0f;   /* rows of different magnitudes */
            for (int d = 0; d < hk; d++) kr[d] = kscale * frand();
            for (int d = 0; d < hv; d++) vr[d] = frand();
            (i8 ? kw_kv_i8_put : kw_kv_i16_put)(kw_kv_k(kv, ids[j / bt], 0, h, 0), bt, j % bt, kr, hk, 0);
            (i8 ? kw_kv_i8_put : kw_kv_i16_put)(kw_kv_v(kv, ids[j / bt], 0, h, 0), bt, j % bt, vr, hv, 1);
        }
    float *kf8 = malloc(sizeof(float) * (size_t)n_head_kv * n_pos * hk);   /* the rows as i8 stores them */
    float *vf8 = malloc(sizeof(float) * (size_t)n_head_kv * n_pos * hv);
    for (size_t r = 0; r < (size_t)n_head_kv * n_pos; r++) {
        round_row8(kf + r * hk, hk, kf8 + r * hk);
        round_row8(vf + r * hv, hv, vf8 + r * hv);
    }
    int n_batch = n_tok + 2;
    int32_t pos[24];
    for (int i = 0; i < n_batch; i++) pos[i] = i < 2 ? 0 : first_pos + 2 * (i - 2) + (i % 2);
    size_t nq = (size_t)n_batch * n_head;
    float *q = malloc(sizeof(float) * nq * hk);
    float *o_ref = calloc(nq * hv, sizeof(float)), *o_ker = calloc(nq * hv, sizeof(float));
    float *o_avx2 = calloc(nq * hv, sizeof(float));
    float *scr = malloc(sizeof(float) * kw_attn_i16_floats(n_tok * G, hk, hv, n_pos));
    for (size_t i = 0; i < nq * hk; i++) q[i] = 2.0f * frand();
    int identical = 1, identical2 = 1;
    double e_i16 = 0.0, e_f16 = 0.0;
    for (int kvh = 0; kvh < n_head_kv; kvh++) {
        kw_attn_args a = {.q = q, .out = o_ref, .kv = kw_kv_attn_view(kv, t.ids, 0), .pos = pos, .i0 = 2, .n_tok = n_tok,
                           .kvh = kvh, .n_head = n_head, .G = G, .hk = hk, .hv = hv};
        kw_attn_i16_ref(&a, scr, n_pos);
        if (kernel) {
            a.out = o_ker;
            kw_attn_i16_avx512(&a, scr, n_pos);
        }
        if (g_avx2) {
            a.out = o_avx2;
            kw_attn_i16_avx2(&a, scr, n_pos);
        }
        for (int ti = 0; ti < n_tok; ti++)
            for (int g = 0; g < G; g++) {
                int i = 2 + ti, h = kvh * G + g;
                const float *qi = q + ((size_t)i * n_head + h) * hk;
                const float *ri = o_ref + ((size_t)i * n_head + h) * hv;
                if (kernel && memcmp(ri, o_ker + ((size_t)i * n_head + h) * hv, sizeof(float) * hv) != 0) identical = 0;
                if (g_avx2 && memcmp(ri, o_avx2 + ((size_t)i * n_head + h) * hv, sizeof(float) * hv) != 0) identical2 = 0;
                double ex[HMAX], e16[HMAX];
                const float *kh = kf + (size_t)kvh * n_pos * hk, *vh = vf + (size_t)kvh * n_pos * hv;
                exact(qi, kh, vh, pos[i] + 1, hk, hv, 0, ex);
                if (i8) {   /* the comparison: exact attention of the 8-bit q over the 8-bit rows */
                    float q8[HMAX];
                    round_row8(qi, hk, q8);
                    exact(q8, kf8 + (size_t)kvh * n_pos * hk, vf8 + (size_t)kvh * n_pos * hv, pos[i] + 1, hk, hv, 0, e16);
                }
                else
                    exact(qi, kh, vh, pos[i] + 1, hk, hv, 1, e16);
                for (int d = 0; d < hv; d++) {
                    if (fabs(ri[d] - ex[d]) > e_i16) e_i16 = fabs(ri[d] - ex[d]);
                    if (fabs(e16[d] - ex[d]) > e_f16) e_f16 = fabs(e16[d] - ex[d]);
                }
            }
    }
    int untouched = 1;   /* the two filler tokens' rows */
    for (size_t i = 0; i < 2 * (size_t)n_head * hv; i++)
        if (o_ref[i] != 0.0f || (kernel && o_ker[i] != 0.0f) || (g_avx2 && o_avx2[i] != 0.0f)) untouched = 0;
    KW_CHECK(untouched);
    KW_CHECK_MSG(identical, "bt %d G %d hk %d hv %d tokens %d from %d: kernel != portable", bt, G, hk, hv, n_tok, first_pos);
    KW_CHECK_MSG(identical2, "bt %d G %d hk %d hv %d tokens %d from %d: avx2 != portable", bt, G, hk, hv, n_tok, first_pos);
    if (i8)
        KW_CHECK_MSG(e_i16 <= I8_VS_ROWS8 * e_f16, "bt %d G %d hk %d hv %d: i8 error %.3g vs 8-bit q and rows %.3g", bt, G, hk, hv,
                     e_i16, e_f16);
    else
        KW_CHECK_MSG(e_i16 <= I16_VS_F16 * e_f16, "bt %d G %d hk %d hv %d: i16 error %.3g vs f16 %.3g", bt, G, hk, hv, e_i16,
                     e_f16);
    double ratio = e_f16 > 0 ? e_i16 / e_f16 : 0.0;
    double *worst = i8 ? &g_worst_ratio8 : &g_worst_ratio;
    if (ratio > *worst) *worst = ratio;
    printf("%s bt %2d G %d hk %3d hv %3d tokens %2d from %3d: kernel %s, avx2 %s, max |%s - exact| %.3g, %s %.3g\n",
           kw_kv_type_name(type), bt, G, hk, hv, n_tok, first_pos,
           kernel ? (identical ? "identical" : "DIFFERS") : "skipped", g_avx2 ? (identical2 ? "identical" : "DIFFERS") : "skipped",
           kw_kv_type_name(type), e_i16, i8 ? "8-bit q and rows" : "f16", e_f16);
    free(kf); free(vf); free(kf8); free(vf8); free(q); free(o_ref); free(o_ker); free(o_avx2); free(scr);
    kw_kv_pool_destroy(kv);
}

/* kw_kv_i16_quantize against quant_rule, bit for bit, over lengths 1..130
 * (every tail length), rows with negative zeros, subnormal, tiny (1e-36,
 * where qmax / m overflows), small (1e-30) and huge magnitudes, and a NaN
 * or an infinity at every position of a 40-value row. */
static void check_quant(const float *x, int n, float qmax, int *bad) {
    int16_t a[160], b[160];
    float sa = kw_kv_i16_quantize(x, n, qmax, a), sb = quant_rule(x, n, qmax, b);
    bool same = (isnan(sa) ? isnan(sb) : memcmp(&sa, &sb, sizeof sa) == 0) && memcmp(a, b, sizeof(int16_t) * (size_t)n) == 0;
    if (!same && (*bad)++ < 3) fprintf(stderr, "quantize n %d qmax %g: scale %g vs %g\n", n, qmax, (double)sa, (double)sb);
}

static void test_quantize_rule(void) {
    float x[160];
    int bad = 0;
    const float qmaxes[] = {KW_KV_I16_KMAX, KW_KV_I16_VMAX, KW_KV_I8_MAX};
    for (int n = 1; n <= 130; n++)
        for (int k = 0; k < 5; k++) {
            float mag = k == 0 ? 1.0f : k == 1 ? 1e30f : k == 2 ? 1e-41f : k == 3 ? 1e-36f : 1e-30f;
            for (int d = 0; d < n; d++) x[d] = mag * frand();
            if (n > 3) x[n / 2] = -0.0f;
            check_quant(x, n, qmaxes[(n + k) % 3], &bad);
        }
    for (int n = 1; n <= 20; n++) {   /* zero rows */
        for (int d = 0; d < n; d++) x[d] = d % 2 ? -0.0f : 0.0f;
        check_quant(x, n, KW_KV_I16_KMAX, &bad);
    }
    for (int p = 0; p < 40; p++)
        for (int s = 0; s < 3; s++) {
            for (int d = 0; d < 40; d++) x[d] = frand();
            x[p] = s == 0 ? NAN : s == 1 ? INFINITY : -INFINITY;
            check_quant(x, 40, KW_KV_I16_VMAX, &bad);
        }
    KW_CHECK_MSG(bad == 0, "%d rows differ from the rule", bad);
}

/* Every case for both integer types. */
static void run_case(int bt, int n_head, int n_head_kv, int hk, int hv, int n_tok, int32_t first_pos, bool kernel) {
    run_case_t(KW_TYPE_KV_I16, bt, n_head, n_head_kv, hk, hv, n_tok, first_pos, kernel);
    run_case_t(KW_TYPE_KV_I8, bt, n_head, n_head_kv, hk, hv, n_tok, first_pos, kernel);
}

int main(void) {
    test_rows(false);
    test_rows(true);
    test_quantize_rule();
    const kw_cpu_info *ci = kw_cpu_info_get();
    bool kernel = ci && ci->avx512f && ci->avx512bw && ci->avx512vnni;
    if (!kernel) printf("no AVX-512 VNNI: kernel comparisons skipped\n");
    g_avx2 = ci && ci->avx2 && ci->fma;
    if (!g_avx2) printf("no AVX2 + FMA: avx2 comparisons skipped\n");
    KW_CHECK(kw_attn_i16_supported(16, 64, 64));
    KW_CHECK(!kw_attn_i16_supported(17, 64, 64));
    KW_CHECK(!kw_attn_i16_supported(4, 256, 64));   /* the int32 bound holds to hk 128 */
    kw_err err = {{0}};
    kw_kv_layout bad = {.n_layer = 1, .n_head_kv = 1, .head_dim_k = 64, .head_dim_v = 64, .type = KW_TYPE_KV_I16,
                        .block_tokens = 16};
    KW_CHECK(kw_kv_pool_create(&bad, 4, &err) == NULL && strstr(err.msg, "i16"));
    run_case(32, 8, 2, 64, 64, 1, 0, kernel);      /* decode at position 0 */
    run_case(32, 8, 2, 64, 64, 1, 150, kernel);    /* decode across blocks */
    run_case(32, 8, 2, 64, 64, 4, 37, kernel);     /* G 4 tile mid-sequence */
    run_case(64, 8, 2, 64, 64, 4, 100, kernel);    /* blocks of 64 */
    run_case(32, 14, 2, 64, 64, 2, 5, kernel);     /* G 7: 14 queries */
    run_case(32, 2, 2, 64, 64, 16, 3, kernel);     /* G 1: 16 tokens */
    run_case(32, 8, 2, 128, 128, 3, 61, kernel);   /* head dim 128 */
    run_case(32, 4, 1, 64, 48, 4, 17, kernel);     /* hv 48 */
    /* the AVX2 kernel's query blocks (6 per pass over 16 keys, 2 per V block) */
    run_case(32, 1, 1, 64, 64, 16, 40, kernel);    /* G 1: 16 queries = 5 + 5 + 6 */
    run_case(64, 14, 2, 64, 64, 2, 75, kernel);    /* G 7: 14 queries = 4 + 5 + 5, ends mid-chunk */
    run_case(32, 8, 2, 64, 64, 1, 203, kernel);    /* decode G 4 ending mid-chunk, mid-group */
    run_case(32, 8, 1, 64, 64, 1, 116, kernel);    /* decode G 8: 4 + 4 queries */
    run_case(32, 8, 1, 128, 48, 2, 9, kernel);     /* hk 128, hv 48: 16 queries */
    run_case(64, 4, 2, 128, 128, 5, 90, kernel);   /* G 2, hk and hv 128, 10 queries */
    /* the sums' spans of 256 keys (lanes flushed into the double parts) */
    run_case(32, 8, 2, 64, 64, 1, 600, kernel);    /* decode over 601 keys: two spans and a tail */
    run_case(32, 8, 2, 64, 64, 1, 511, kernel);    /* 512 keys: ends exactly on a span */
    run_case(32, 2, 2, 64, 64, 16, 248, kernel);   /* G 1 tile whose queries end before and after key 256 */
    run_case(64, 8, 2, 64, 64, 4, 509, kernel);    /* G 4 tile across key 512, blocks of 64 */
    printf("worst i16 / f16 error ratio %.2f, worst i8 / 8-bit q and rows error ratio %.2f\n", g_worst_ratio, g_worst_ratio8);
    KW_CHECK(g_worst_ratio8 > 0.0);
    return kw_test_finish();
}
