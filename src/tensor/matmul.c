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
#include "kvwise/testctl.h"

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
#define KW_MM_STREAM_THREADS 64          /* most threads the streaming split serves (more: chunks) */
#define KW_MM_PIECES 8                   /* pieces per part: the grain at which idle threads help */

/* Streaming split (decode and small batches: up to KW_MM_STREAM_ROWS
 * activation rows, bound by reading the weights). Thread p's part of a
 * matrix is the p-th contiguous run of its 16-row groups, so each core
 * streams one run of memory per matrix: small chunks taken alternately
 * cost a sixth of the bandwidth (two threads reading packed Q8_0 in 278 KB
 * chunks alternating between them got 29-31 GB/s where each reading its
 * own half got 34-37; bench_kernels GEMV at a 56.6 GB/s probe: the Q8_0
 * layer matrices 41 -> 46-50 GB/s, Q4_0 86% -> 99% of the probe). The
 * owner takes its part a piece (at most 1/KW_MM_PIECES, smaller toward the
 * end: kw_mm_piece_groups) at a time from the front;
 * a thread done with its own parts helps from the back of the others', so
 * the owner keeps streaming forward and nobody idles while a part is
 * left: with fixed halves one thread waited for the other in 8-12% of the
 * decode matmul time (a trace of pool runs, Q8_0 1B), now 2-10 us per run
 * (+1% tok/s, alternating in one process). Which thread computes a row
 * never changes its result.
 *
 * A matrix whose packed copy is stored in K-panels (kernels.h panels /
 * gemm_panel: panel q adds into what panels 0..q-1 left in Y) is streamed
 * panel after panel, each over the owner's rows. A row's panels must run
 * in order, so a helper that takes rows from the back of a part while the
 * owner is in panel p computes panels p..np-1 of those rows itself, one
 * after the other, and the owner's later panels end where the helper's
 * rows begin. (Before, helpers joined only in the last panel and the
 * thread done first spun until the other reached it: 3.3% of all decode
 * samples of a Q4_0 token sat in that spin. On an idle host that cost
 * nothing measurable, the other thread streaming alone meanwhile: 1.000x
 * and 1.009x against 1.006x for the same build, bench_ab, 200 s; with a
 * busy loop on the second core Q4_0 decode 1.28-1.30x against 1.035x.) */
#define KW_MM_PART_BITS 28                       /* bits of front and back in mm_part.left */
#define KW_MM_PART_MAX (((uint64_t)1 << KW_MM_PART_BITS) - 1)
#define KW_MM_PANELS_MAX 255                     /* panels mm_part.left can count */

/* What is left of a part, one atomic word so owner and helpers never take
 * the same piece: the panel p the owner is in, and [front, back) of its
 * groups (indexes from g0) not yet taken in that panel. Rows from back on
 * were taken by helpers for panels p and later. */
typedef struct {
    _Atomic uint64_t left;
    int64_t g0;
    uint32_t piece;
} mm_part;

static uint64_t part_word(uint32_t p, uint32_t f, uint32_t e) {
    return (uint64_t)p << (2 * KW_MM_PART_BITS) | (uint64_t)e << KW_MM_PART_BITS | f;
}
static uint32_t part_panel(uint64_t v) { return (uint32_t)(v >> (2 * KW_MM_PART_BITS)); }
static uint32_t part_back(uint64_t v) { return (uint32_t)((v >> KW_MM_PART_BITS) & KW_MM_PART_MAX); }
static uint32_t part_front(uint64_t v) { return (uint32_t)(v & KW_MM_PART_MAX); }

/* What the streaming split streams: a matrix, in np K-panels or whole (np = 1). */
typedef struct {
    const kw_matrix *W;
    float *Y;
    int np;
} mm_unit;

/* One pool run over the rows of n_mats matrices of one type and width
 * (kw_matmul: n_mats = 1) against the same activations. Either chunks
 * through one counter ([first[m], first[m+1]) belong to matrix m), or,
 * when parts is set, the streaming split above (parts[m * nth + p]). */
typedef struct {
    const kw_kernel_set *ks;
    const float *X;
    int64_t n, cols;
    uint32_t dt;
    const void *xq;
    size_t xq_stride;
    kw_act_quant_fn quant;   /* ks->quant[dt], or quant_packed[dt] when every matrix is packed */
    _Atomic int64_t next_chunk;
    int n_mats;
    const kw_matrix *Ws[KW_MM_MULTI_MAX];
    float *Ys[KW_MM_MULTI_MAX];
    int64_t rows_per_chunk[KW_MM_MULTI_MAX], first[KW_MM_MULTI_MAX + 1];
    int n_units;                      /* the streaming split's units (one per matrix), parts[u * nth + p] */
    mm_unit units[KW_MM_MULTI_MAX];
    mm_part *parts;
} mm_task;

static void quantize_task(void *v, int ith, int nth) {
    mm_task *t = v;
    kw_act_quant_fn q = t->quant;
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

/* Rows per chunk of the counter split. Prefill (many activation rows,
 * compute-bound): 8 chunks per thread, for balance. Small batches on more
 * threads than the streaming split serves: one contiguous part per thread.
 * Chunking never changes results. */
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

/* Groups the next piece of a part takes when `left` groups of it remain:
 * a third of what is left, at most `piece` (1/KW_MM_PIECES of the part) and
 * at least one. Full pieces while the owner streams its part; smaller ones
 * toward its end, so the threads finish a run together: with fixed pieces
 * the thread done first waited for the other's last piece, on average half
 * a piece per pool run (a decode token of the 1B shape, Q4_0, two threads:
 * 0.3-0.7 ms of ~15 ms in the driver's wait at the end of runs, ~0.9-1.5 ms
 * of worker idle time; with this rule 0.1-0.35 and 0.7-0.95 ms). Measured
 * on the same pages (bench_ab knob variants, 16-token decode bursts, 2
 * threads): Q4_0 1.017x and 1.032x (a quarter: 1.020x, a half: 1.011x),
 * Q8_0 1.039x; 4-token prefill bursts (the batch-of-4 step) 1.009x against
 * 1.005x for the same build; logits identical. */
uint32_t kw_mm_piece_groups(uint32_t left, uint32_t piece) {
    uint32_t n = left / 3;
    if (n > piece) n = piece;
    if (n < 1) n = 1;
    return n < left ? n : left;
}

/* Rows [a, b) (groups from the part's g0) of unit u over panel q (the whole matrix when np = 1). */
static void stream_piece(const mm_task *t, const mm_unit *u, const mm_part *pt, int q, uint32_t a, uint32_t b) {
    const kw_matrix *W = u->W;
    int64_t r0 = (pt->g0 + a) * KW_MM_ROW_ALIGN, r1 = (pt->g0 + b) * KW_MM_ROW_ALIGN;
    if (r1 > W->rows) r1 = W->rows;
    if (u->np > 1) t->ks->gemm_panel[W->type](W, q, r0, r1, t->xq, t->xq_stride, t->n, u->Y, W->rows);
    else t->ks->gemm[W->type](W, r0, r1, t->xq, t->xq_stride, t->n, u->Y, W->rows);
}

/* The owner streams its part of unit u: pieces from the front of each
 * panel in turn. Its pieces are computed before it moves to the next
 * panel (a release store, so a helper taking rows of the next panel sees
 * their sums in Y); nobody else writes the word while nothing is left in
 * the panel (helpers take only when front < back). */
static void own_part(const mm_task *t, const mm_unit *u, mm_part *pt) {
    uint64_t v = atomic_load_explicit(&pt->left, memory_order_acquire);
    for (;;) {
        uint32_t p = part_panel(v), f = part_front(v), e = part_back(v);
        if (f < e) {
            uint32_t n = kw_mm_piece_groups(e - f, pt->piece);
            if (atomic_compare_exchange_weak_explicit(&pt->left, &v, part_word(p, f + n, e), memory_order_acquire,
                                                      memory_order_acquire)) {
                stream_piece(t, u, pt, (int)p, f, f + n);
                v = atomic_load_explicit(&pt->left, memory_order_acquire);
            }
            continue;
        }
        if ((int)p + 1 >= u->np) return;
        v = part_word(p + 1, 0, e);
        atomic_store_explicit(&pt->left, v, memory_order_release);
    }
}

static void own_parts(mm_task *t, int ith, int nth) {
    for (int u = 0; u < t->n_units; u++) own_part(t, &t->units[u], &t->parts[u * nth + ith]);
}

/* The groups a helper takes from the back of a part whose owner is in
 * panel p with [f, e) left there: at most a piece and what is left in
 * the panel, and at most a third of the owner's remaining work counted in
 * group-panels (the helper computes panels p..np-1 of what it takes). For
 * a whole matrix this is kw_mm_piece_groups. */
uint32_t kw_mm_help_groups(uint32_t p, uint32_t f, uint32_t e, int np, uint32_t piece) {
    uint64_t k = (uint64_t)np - p, rem = (uint64_t)(e - f) + (uint64_t)e * (k - 1);
    uint64_t n = rem / (3 * k);
    if (n > piece) n = piece;
    if (n < 1) n = 1;
    return n < e - f ? (uint32_t)n : e - f;
}

/* Pieces from the back of another thread's part of unit u until nothing
 * is left. With wait, a part whose owner is finishing its last piece of a
 * panel before a later one is waited for (a piece, short at a panel's
 * end: kw_mm_piece_groups); without, it is left to the owner. */
static void help_part(const mm_task *t, const mm_unit *u, mm_part *pt, bool wait) {
    uint64_t v = atomic_load_explicit(&pt->left, memory_order_acquire);
    for (;;) {
        uint32_t p = part_panel(v), f = part_front(v), e = part_back(v);
        if (f >= e) {
            if (!wait || e == 0 || (int)p + 1 >= u->np) return;
            kw_cpu_relax();
            v = atomic_load_explicit(&pt->left, memory_order_acquire);
            continue;
        }
        uint32_t n = kw_mm_help_groups(p, f, e, u->np, pt->piece);
        if (!atomic_compare_exchange_weak_explicit(&pt->left, &v, part_word(p, f, e - n), memory_order_acquire,
                                                   memory_order_acquire))
            continue;
        for (int q = (int)p; q < u->np; q++) stream_piece(t, u, pt, q, e - n, e);
        v = atomic_load_explicit(&pt->left, memory_order_acquire);
    }
}

static void help_others(mm_task *t, int ith, int nth, bool wait) {
    for (int u = 0; u < t->n_units; u++)
        for (int k = 1; k < nth; k++) help_part(t, &t->units[u], &t->parts[u * nth + (ith + k) % nth], wait);
}

/* Thread ith streams its own part of every unit front to back, then
 * helps with what the others have left, from the back of their parts. */
static void stream_task(void *v, int ith, int nth) {
    mm_task *t = v;
    if (kw_testctl_matmul_help_first()) help_others(t, ith, nth, false);   /* a test order (testctl.h) */
    own_parts(t, ith, nth);
    help_others(t, ith, nth, true);
}

/* The units of t's matrices: one per matrix, in its K-panels when the
 * family stores it so (else whole: the family's gemm takes the panels
 * itself). */
static void stream_units(mm_task *t) {
    t->n_units = t->n_mats;
    for (int m = 0; m < t->n_mats; m++) {
        const kw_matrix *W = t->Ws[m];
        int np = t->ks->panels && t->ks->gemm_panel[W->type] ? t->ks->panels(W) : 1;
        t->units[m] = (mm_unit){.W = W, .Y = t->Ys[m], .np = np >= 1 && np <= KW_MM_PANELS_MAX ? np : 1};
    }
}

/* Sets up the streaming split of t's units over nth threads. */
static void stream_parts(mm_task *t, mm_part *parts, int nth) {
    t->parts = parts;
    for (int u = 0; u < t->n_units; u++) {
        int64_t groups = (t->units[u].W->rows + KW_MM_ROW_ALIGN - 1) / KW_MM_ROW_ALIGN;
        int64_t per = (groups + nth - 1) / nth;
        for (int p = 0; p < nth; p++) {
            mm_part *pt = &parts[u * nth + p];
            int64_t g0 = per * p < groups ? per * p : groups, g1 = g0 + per < groups ? g0 + per : groups;
            pt->g0 = g0;
            pt->piece = (uint32_t)((per + KW_MM_PIECES - 1) / KW_MM_PIECES);
            atomic_store_explicit(&pt->left, part_word(0, 0, (uint32_t)(g1 - g0)), memory_order_relaxed);
        }
    }
}

/* Whether every matrix's parts fit mm_part.left (always, short of 2^28 groups per thread). */
static bool stream_fits(const kw_matrix *const *W, int n_mats, int nth) {
    for (int m = 0; m < n_mats; m++)
        if ((uint64_t)((W[m]->rows + KW_MM_ROW_ALIGN - 1) / KW_MM_ROW_ALIGN) / (uint64_t)nth >= KW_MM_PART_MAX)
            return false;
    return true;
}

/* Whether the family has a packed-only quantizer for dt and every matrix
 * has all its rows in that family's packed format. */
static bool all_packed(const kw_kernel_set *ks, uint32_t dt, const kw_matrix *const *W, int n_mats) {
    if (!ks->quant_packed[dt]) return false;
    for (int m = 0; m < n_mats; m++) {
        const kw_pack_hdr *h = kw_packed_hdr(W[m], ks->packed_fmt[dt]);
        if (!h || h->packed_rows < W[m]->rows) return false;
    }
    return true;
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
        t.quant = all_packed(ks, t.dt, W, n_mats) ? ks->quant_packed[t.dt] : ks->quant[t.dt];
        if (n * t.cols >= KW_MM_QUANT_PARALLEL_MIN && kw_pool_size(pool) > 1) kw_pool_run(pool, quantize_task, &t);
        else quantize_task(&t, 0, 1);
    }
    int nth = kw_pool_size(pool);
    t.n_mats = n_mats;
    for (int m = 0; m < n_mats; m++) {
        t.Ws[m] = W[m];
        t.Ys[m] = Y[m];
    }
    if (nth > 1 && n <= KW_MM_STREAM_ROWS && nth <= KW_MM_STREAM_THREADS && stream_fits(W, n_mats, nth)) {
        mm_part parts[KW_MM_MULTI_MAX * KW_MM_STREAM_THREADS];
        stream_units(&t);
        stream_parts(&t, parts, nth);
        kw_pool_run(pool, stream_task, &t);
        return;
    }
    for (int m = 0; m < n_mats; m++) {   /* the counter split */
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
