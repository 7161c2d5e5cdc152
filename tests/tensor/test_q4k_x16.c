/* test_q4k_x16.c - packed Q4_K, Q5_K and Q6_K (kquant_avx512.c, formats
 * KW_FMT_Q4_K_X16 / Q5_K_X16 / Q6_K_X16) against a double-precision reference
 * computed here from the same weight blocks and Q8_K activation blocks
 * (kvwise's own quantizers on random data), for 1, 2..8 and 64 activation rows, 256 / 2048 / 8192
 * columns and row counts with a partial 16-row group (its rows go through
 * the unpacked kernel). Also: each activation row gives the same bytes
 * whether it is computed alone or inside a batch of 2..8 or 64 rows, with 1
 * or 2 threads, and the scalar family stays within its own bound.
 * Skips (77) without AVX-512 VNNI. */
#include "testutil.h"
#include <float.h>
#include <string.h>
#include "kvwise/memory.h"
#include "kvwise/tensor.h"
#include "tensor/quant_blocks.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * 0x1p-24 * 2.0 - 1.0);
}

/* Exact value (double) and magnitude of one output: per super-block and
 * sub-block s the kernel forms dx*(d*sc_s*sum q*x - dmin*m_s*sum x); mag is
 * the same sum with every term taken in absolute value. */
/* Q6_K: per 16-value sub-block j, dx*d*sc_j*(sum u*x - 32*sum x), u = q + 32. */
static void ref_dot_q6(const kw_block_q6_K *w, const kw_block_q8_K *x, int64_t nb, double *val, double *mag) {
    double v = 0, m = 0;
    for (int64_t i = 0; i < nb; i++) {
        double d = kw_f16_to_f32(w[i].d), dx = x[i].d;
        for (int j = 0; j < 16; j++) {
            long long dot = 0, adot = 0, sum = 0;
            for (int t = 0; t < 16; t++) {
                int e = 16 * j + t, h = e / 128, l = e % 128;   /* value e: half h, index l */
                int lo = (w[i].ql[64 * h + l % 64] >> (4 * (l / 64))) & 15;
                int hi = (w[i].qh[32 * h + l % 32] >> (2 * (l / 32))) & 3;
                int u = lo | hi << 4, xq = x[i].qs[e];
                dot += u * xq;
                adot += u * (xq < 0 ? -xq : xq);
                sum += xq;
            }
            double f = dx * d * w[i].scales[j];
            v += f * ((double)dot - 32.0 * (double)sum);
            m += fabs(f) * ((double)adot + 32.0 * fabs((double)sum));
        }
    }
    *val = v;
    *mag = m;
}

/* Q4_K, or Q5_K (q5: bit s of qh[t] adds 16 to value 32s+t). */
static void ref_dot(const uint8_t *row, int q5, const kw_block_q8_K *x, int64_t nb, double *val, double *mag) {
    double v = 0, m = 0;
    for (int64_t i = 0; i < nb; i++) {
        const kw_block_q4_K *w4 = (const kw_block_q4_K *)row + i;
        const kw_block_q5_K *w5 = (const kw_block_q5_K *)row + i;
        const uint8_t *qs = q5 ? w5->qs : w4->qs, *scales = q5 ? w5->scales : w4->scales;
        double d = kw_f16_to_f32(q5 ? w5->d : w4->d), dmin = kw_f16_to_f32(q5 ? w5->dmin : w4->dmin), dx = x[i].d;
        for (int s = 0; s < 8; s++) {
            uint8_t sc, mn;
            kw_get_scale_min_k4(s, scales, &sc, &mn);
            long long dot = 0, adot = 0, sum = 0;
            for (int t = 0; t < 32; t++) {
                int q = (qs[32 * (s / 2) + t] >> (4 * (s & 1))) & 15;
                if (q5) q |= ((w5->qh[t] >> s) & 1) << 4;
                int xq = x[i].qs[32 * s + t];
                dot += q * xq;
                adot += q * (xq < 0 ? -xq : xq);
                sum += xq;
            }
            v += dx * (d * sc * (double)dot - dmin * mn * (double)sum);
            m += fabs(dx) * (d * sc * (double)adot + dmin * mn * fabs((double)sum));
        }
    }
    *val = v;
    *mag = m;
}

/* Tolerances (|y - exact| <= K * FLT_EPSILON * mag; FLT_EPSILON = 2u, so
 * each is twice Higham's gamma_k = k u / (1 - k u) bound for k roundings):
 * packed rows: every dot_s and the min sum are exact integers and sc*dot_s
 * is exact in float, so a term meets at most 7 roundings in the sum over the
 * 8 sub-blocks, 2 forming d*dx / dmin*dx, and 2 per super-block in the
 * accumulator FMAs: k <= 2 nb + 9 (K = 2 nb + 16 below; Q5_K the same,
 * sc*dot_s < 63*32*31*128 < 2^24). Q6_K: sc_j*dot_j is
 * exact too (< 2^24), 15 roundings over the 16 sub-blocks, 1 forming
 * d*dx (32*d*dx is exact), 2 per super-block: k <= 2 nb + 16 (K = 2 nb + 24).
 * Unpacked rows (partial group, scalar family): the bound test_tensor_matmul
 * uses for every kernel, k = cols + 8. */
#define PACKED_K(nb, q6) (2.0 * (double)(nb) + ((q6) ? 24.0 : 16.0))
#define ROWS_K(cols) ((double)(cols) + 8.0)

static void check(const char *what, uint32_t type, const float *y, const uint8_t *wq, size_t rb,
                  const kw_block_q8_K *xq, int64_t rows, int64_t cols, int n, int64_t packed_rows) {
    const int q6 = type == KW_TYPE_Q6_K;
    int64_t nb = cols / KW_QK_K;
    int bad = 0;
    double worst = 0;
    for (int i = 0; i < n; i++)
        for (int64_t r = 0; r < rows; r++) {
            double v, mag;
            const void *wr = wq + (size_t)r * rb;
            if (q6) ref_dot_q6(wr, xq + (size_t)i * (size_t)nb, nb, &v, &mag);
            else ref_dot(wr, type == KW_TYPE_Q5_K, xq + (size_t)i * (size_t)nb, nb, &v, &mag);
            double tol = (r < packed_rows ? PACKED_K(nb, q6) : ROWS_K(cols)) * FLT_EPSILON * mag + 1e-30;
            double e = fabs((double)y[(size_t)i * (size_t)rows + (size_t)r] - v);
            if (e > tol) bad++;
            if (e / tol > worst) worst = e / tol;
        }
    KW_CHECK_MSG(bad == 0, "%s %s %lldx%lld n=%d: %d outputs beyond the rounding bound (worst %.2fx)", what,
                 kw_type_name(type), (long long)rows, (long long)cols, n, bad, worst);
}

static void run(uint32_t type, int64_t rows, int64_t cols, kw_pool *p1, kw_pool *p2) {
    enum { MAXN = 64 };
    static const int ns[] = {2, 3, 4, 5, 6, 7, 8, 64};
    int64_t nb = cols / KW_QK_K;
    size_t rb = kw_row_bytes(type, cols);
    uint8_t *wd = malloc(rb * (size_t)rows);
    float *x = malloc(sizeof(float) * (size_t)(MAXN * cols)), *tmp = malloc(sizeof(float) * (size_t)cols);
    kw_block_q8_K *xq = malloc(sizeof(kw_block_q8_K) * (size_t)(MAXN * nb));
    float *y1 = malloc(sizeof(float) * (size_t)(MAXN * rows)), *yb = malloc(sizeof(float) * (size_t)(MAXN * rows));
    if (!wd || !x || !tmp || !xq || !y1 || !yb) { KW_CHECK(!"alloc"); goto out; }
    for (int64_t r = 0; r < rows; r++) {
        /* a per-row offset so the mins are not all zero */
        float off = frand() * 0.05f;
        for (int64_t j = 0; j < cols; j++) tmp[j] = off + frand() * 0.1f * ((j / 32) % 5 == 2 ? 3.0f : 1.0f);
        kw_quantize_row(type, tmp, wd + (size_t)r * rb, cols);
    }
    for (int64_t i = 0; i < MAXN * cols; i++) x[i] = frand() * ((i / 32) % 7 == 3 ? 4.0f : 1.0f) + 0.1f;
    for (int i = 0; i < MAXN; i++) kw_quantize_row(KW_TYPE_Q8_K, x + (size_t)i * (size_t)cols, xq + (size_t)i * (size_t)nb, cols);
    kw_matrix W = {.type = type, .rows = rows, .cols = cols, .row_bytes = rb, .data = wd};
    void *scr = kw_mem_alloc(KW_MEM_SCRATCH, kw_matmul_scratch_bytes(&W, MAXN));

    /* the scalar family, unpacked: its own (looser) bound */
    if (kw_kernel_force("scalar") == 0) {
        kw_matmul(p1, &W, x, 4, yb, scr);
        check("scalar", type, yb, wd, rb, xq, rows, cols, 4, 0);
    }
    KW_CHECK_EQ_INT(kw_kernel_force("avx512"), 0);
    kw_err err = {{0}};
    KW_CHECK_EQ_INT(kw_matrix_pack(&W, &err), 0);
    KW_CHECK_EQ_INT(kw_matrix_packed_rows(&W), rows / 16 * 16);
    /* bytes per row and super-block: Q4_K 148 (the original block is 144), Q5_K 180 (176), Q6_K 212 (210) */
    size_t per = type == KW_TYPE_Q6_K ? 212 : type == KW_TYPE_Q5_K ? 180 : 148;
    KW_CHECK_EQ_INT(kw_mem_size(W.packed), 64 + (size_t)(rows / 16 * 16) * (size_t)nb * per);
    for (int i = 0; i < MAXN; i++) kw_matmul(p1, &W, x + (size_t)i * (size_t)cols, 1, y1 + (size_t)i * (size_t)rows, scr);
    check("packed n=1", type, y1, wd, rb, xq, rows, cols, MAXN, rows / 16 * 16);
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        int n = ns[k];
        kw_matmul(n % 2 ? p1 : p2, &W, x, n, yb, scr);
        KW_CHECK_MSG(memcmp(yb, y1, sizeof(float) * (size_t)(n * rows)) == 0,
                     "%s %lldx%lld: %d rows together != one at a time", kw_type_name(type), (long long)rows, (long long)cols, n);
    }
    check("packed n=64", type, yb, wd, rb, xq, rows, cols, MAXN, rows / 16 * 16);
    kw_matrix_unpack(&W);
    kw_mem_free(scr);
out:
    free(wd); free(x); free(tmp); free(xq); free(y1); free(yb);
}

int main(void) {
    kw_test_need_avx512_vnni();
    kw_pool *p1 = kw_pool_create(1), *p2 = kw_pool_create(2);
    static const uint32_t types[] = {KW_TYPE_Q4_K, KW_TYPE_Q5_K, KW_TYPE_Q6_K};
    for (int t = 0; t < 3; t++) {
        run(types[t], 37, 256, p1, p2);     /* one super-block; 2 groups + a 5-row tail */
        run(types[t], 64, 2048, p1, p2);    /* whole groups only */
        run(types[t], 40, 8192, p1, p2);    /* 32 super-blocks; an 8-row tail */
    }
    kw_pool_destroy(p1);
    kw_pool_destroy(p2);
    return kw_test_finish();
}
