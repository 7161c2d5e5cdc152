/* matmul.c - kw_matmul: Y = X . W^T on the thread pool.
 *
 * Owns the two phases of a matmul: (1) the activations X are converted to
 * the weight type's dot type into the caller's scratch (split over
 * activation rows when there are many), (2) the output rows are handed out
 * to the threads in chunks through an atomic counter, each chunk computed
 * by the active family's GEMM kernel against all activation rows. Every
 * output value is computed by the same operations whatever the thread
 * count, so 1 and N threads give bit-identical results. */
#include "tensor/kernels.h"
#include <stdatomic.h>
#include <string.h>
#include "kvwise/memory.h"

#define KW_MM_QUANT_PARALLEL_MIN 65536   /* values; below this thread 0 quantizes alone */
#define KW_MM_ROW_ALIGN 16               /* chunk boundaries are multiples of this */

/* Bytes per quantized activation row: the dot type's row plus room for
 * per-block extras some families keep (Q8_0: float d + int32 sum; F16: the
 * values widened to F32). */
static size_t act_row_stride(uint32_t dt, int64_t cols) {
    size_t b = kw_row_bytes(dt, cols);
    if (dt == KW_TYPE_Q8_0) b += (size_t)(cols / 32) * 8;
    if (dt == KW_TYPE_F16) b = (size_t)cols * 4 + (size_t)(cols / 32) * 68;   /* F32 copies + int16 blocks (AVX-512) */
    return (b + 63) & ~(size_t)63;
}

size_t kw_matmul_scratch_bytes(const kw_matrix *W, int64_t n) {
    if (!W || n <= 0) return 0;
    uint32_t dt = kw_dot_type(W->type);
    if (dt == KW_TYPE_F32) return 0;
    return (size_t)n * act_row_stride(dt, W->cols);
}

#define KW_MM_MULTI_MAX 4                /* matrices one kw_matmul_multi run takes */

/* One pool run over the row chunks of n_mats matrices of one type and width
 * (kw_matmul: n_mats = 1) against the same activations: chunks
 * [first[m], first[m+1]) belong to matrix m. */
typedef struct {
    const kw_kernel_set *ks;
    const float *X;
    int64_t n, cols;
    uint32_t dt;
    const void *xq;
    size_t xq_stride;
    _Atomic int64_t next_chunk;
    int n_mats;
    const kw_matrix *Ws[KW_MM_MULTI_MAX];
    float *Ys[KW_MM_MULTI_MAX];
    int64_t rows_per_chunk[KW_MM_MULTI_MAX], first[KW_MM_MULTI_MAX + 1];
} mm_task;

static void quantize_task(void *v, int ith, int nth) {
    mm_task *t = v;
    kw_act_quant_fn q = t->ks->quant[t->dt];
    for (int64_t i = ith; i < t->n; i += nth) q(t->X + i * t->cols, (char *)t->xq + (size_t)i * t->xq_stride, t->cols);
}

static void dot_task(void *v, int ith, int nth) {
    (void)ith; (void)nth;
    mm_task *t = v;
    for (;;) {
        int64_t c = atomic_fetch_add_explicit(&t->next_chunk, 1, memory_order_relaxed);
        if (c >= t->first[t->n_mats]) break;
        int m = 0;
        while (c >= t->first[m + 1]) m++;
        const kw_matrix *W = t->Ws[m];
        int64_t r0 = (c - t->first[m]) * t->rows_per_chunk[m], r1 = r0 + t->rows_per_chunk[m];
        if (r1 > W->rows) r1 = W->rows;
        t->ks->gemm[W->type](W, r0, r1, t->xq, t->xq_stride, t->n, t->Ys[m], W->rows);
    }
}

/* Rows per chunk. Prefill (many activation rows, compute-bound): 8 chunks
 * per thread through the counter, for balance. Decode and small batches
 * (up to KW_MM_STREAM_ROWS activation rows, bound by reading the weights):
 * one contiguous part per thread, so each core streams one run of memory
 * per matrix. Small chunks taken alternately cost a sixth of the bandwidth:
 * two threads reading 544-byte blocks (packed Q8_0) in 278 KB chunks
 * alternating between them got 29-31 GB/s where each reading its own half
 * got 34-37 (2.2 MB chunks: 34). In the GEMV benchmark (bench_kernels -t 2
 * --types q8_0,q4_0 --no-gemm, probe at 56.6 GB/s) the 16-layer Q8_0
 * matrices went from 41 to 46-50 GB/s, Q4_0 from 86% to 99% of the probe;
 * kvwise bench Q8_0 tg128 at ~56 GB/s 29.4 -> 32.7 tok/s, at ~38 GB/s no
 * change. Chunking never changes results. */
#define KW_MM_STREAM_ROWS 16
static int64_t choose_chunk_rows(int64_t rows, int nth, int64_t n) {
    if (nth <= 1) return rows;
    if (n <= KW_MM_STREAM_ROWS) {
        int64_t c = (rows + nth - 1) / nth;
        return (c + KW_MM_ROW_ALIGN - 1) / KW_MM_ROW_ALIGN * KW_MM_ROW_ALIGN;
    }
    int64_t c = rows / ((int64_t)nth * 8);
    c = (c + KW_MM_ROW_ALIGN - 1) / KW_MM_ROW_ALIGN * KW_MM_ROW_ALIGN;
    if (c < 4 * KW_MM_ROW_ALIGN) c = 4 * KW_MM_ROW_ALIGN;
    return c;
}

/* Runs n_mats matrices (same type and width, each with a kernel and a dot
 * type that has rows) against X: activations quantized once (or read in
 * place for F32), then every matrix's row chunks in one pool run. Each
 * matrix is chunked the same whatever the other matrices, so results do not
 * depend on which matrices share a run. */
static void run_mats(kw_pool *pool, const kw_kernel_set *ks, const kw_matrix *const *W, int n_mats, const float *X,
                     int64_t n, float *const *Y, void *scratch) {
    mm_task t;
    memset(&t, 0, sizeof t);
    t.ks = ks;
    t.X = X;
    t.n = n;
    t.cols = W[0]->cols;
    t.dt = kw_dot_type(W[0]->type);
    if (t.dt == KW_TYPE_F32) {
        t.xq = X;
        t.xq_stride = (size_t)t.cols * sizeof(float);
    } else {
        t.xq = scratch;
        t.xq_stride = act_row_stride(t.dt, t.cols);
        if (n * t.cols >= KW_MM_QUANT_PARALLEL_MIN && kw_pool_size(pool) > 1) kw_pool_run(pool, quantize_task, &t);
        else quantize_task(&t, 0, 1);
    }
    int nth = kw_pool_size(pool);
    t.n_mats = n_mats;
    for (int m = 0; m < n_mats; m++) {
        t.Ws[m] = W[m];
        t.Ys[m] = Y[m];
        t.rows_per_chunk[m] = choose_chunk_rows(W[m]->rows, nth, n);
        t.first[m + 1] = t.first[m] + (W[m]->rows + t.rows_per_chunk[m] - 1) / t.rows_per_chunk[m];
    }
    atomic_store(&t.next_chunk, 0);
    if (nth > 1 && t.first[n_mats] > 1) kw_pool_run(pool, dot_task, &t);
    else dot_task(&t, 0, 1);
}

void kw_matmul(kw_pool *pool, const kw_matrix *W, const float *X, int64_t n, float *Y, void *scratch) {
    if (!W || !X || !Y || n <= 0 || W->rows <= 0) return;
    const kw_kernel_set *ks = kw_kernels_active();
    uint32_t dt = kw_dot_type(W->type);
    if (!ks->gemm[W->type] || (dt != KW_TYPE_F32 && kw_row_bytes(dt, W->cols) == 0)) {
        memset(Y, 0, (size_t)n * (size_t)W->rows * sizeof(float));   /* unsupported: defined output */
        return;
    }
    run_mats(pool, ks, &W, 1, X, n, &Y, scratch);
}

/* Several matrices of one type and width against the same activations (Q/K/V,
 * gate/up): the activations are quantized once and every matrix's row chunks
 * go through one pool run, so a decode step pays one wake-up and barrier
 * instead of one per matrix. Each output row is computed by the same kernel
 * call sequence as kw_matmul would use (same chunking per matrix), so results
 * are identical to separate kw_matmul calls. */
void kw_matmul_multi(kw_pool *pool, const kw_matrix *const *W, int n_mats, const float *X, int64_t n, float *const *Y,
                     void *scratch) {
    if (!W || n_mats <= 0 || !X || !Y || n <= 0) return;
    const kw_kernel_set *ks = kw_kernels_active();
    bool same = n_mats <= KW_MM_MULTI_MAX;
    for (int m = 0; m < n_mats && same; m++)
        same = W[m] && Y[m] && W[m]->rows > 0 && W[m]->type == W[0]->type && W[m]->cols == W[0]->cols &&
               ks->gemm[W[m]->type] != NULL;
    uint32_t dt = same ? kw_dot_type(W[0]->type) : 0;
    if (!same || dt == KW_TYPE_F32 || kw_row_bytes(dt, W[0]->cols) == 0) {
        for (int m = 0; m < n_mats; m++) kw_matmul(pool, W[m], X, n, Y[m], scratch);
        return;
    }
    run_mats(pool, ks, W, n_mats, X, n, Y, scratch);
}
