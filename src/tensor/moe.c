/* moe.c - the routed experts of a mixture-of-experts block
 * (tensor.h kw_moe_experts).
 *
 * Owns the grouped expert products of one step: the tokens' activations
 * quantized once per dot type, grouped by expert (a counting sort over
 * the (token, choice) pairs, tokens in batch order within an expert), the
 * gate and up products of every used expert in one pool run, SiLU-gating
 * and the down activations row by row, the down products in a second run,
 * and each token's weighted sum over its choices in choice order. Every
 * product is the active set's gemm_experts kernel over the expert's packed
 * copy when it has one (made at first use: kw_experts_pack, below), else
 * over its rows as the file stores them: an expert no token chose is never
 * read.
 *
 * The work split: the used experts' matrices are cut into 16-row groups,
 * laid end to end; each thread owns a contiguous run of them (cut by work:
 * groups times activation rows) and takes its run a piece at a time from
 * the front, and a thread done with its own run takes pieces from the back
 * of the others', one atomic word per run, so the threads stream long runs
 * of memory and finish together. Which thread computes an output never
 * changes it (the gemm contract), nor does which other tokens share an
 * expert, so results do not depend on the batch or the thread count. */
#include "tensor/kernels.h"
#include "kvwise/memory.h"
#include <stdatomic.h>
#include <string.h>

#define KW_MOE_ROWS 16                  /* weight rows per group: the grain of the split */
#define KW_MOE_PIECES 8                 /* pieces per thread's run */
#define KW_MOE_MAX_THREADS 256          /* the pool's largest size */
#define KW_MOE_PARALLEL_MIN 65536       /* values; below this the row-wise steps run on one thread */

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Bytes of one activation row of `cols` values against weights of `type`. */
static size_t act_stride(uint32_t type, int64_t cols) {
    if (kw_dot_type(type) == KW_TYPE_F32) return round64((size_t)cols * sizeof(float));
    kw_matrix W = {.type = type, .rows = 1, .cols = cols, .row_bytes = kw_row_bytes(type, cols)};
    return kw_matmul_scratch_bytes(&W, 1);
}

/* Activation row x (cols values) into dst in the dot type of `type`. */
static void act_row(const kw_kernel_set *ks, uint32_t type, const float *x, void *dst, int64_t cols) {
    uint32_t dt = kw_dot_type(type);
    if (dt == KW_TYPE_F32) memcpy(dst, x, (size_t)cols * sizeof(float));
    else ks->quant[dt](x, dst, cols);
}

/* ---- scratch ---- */

typedef struct moe_unit {
    kw_matrix W;
    const void *xq;
    size_t xs;
    int64_t nx;
    float *Y;
    int64_t g0;                 /* its first group in the run of all units' groups */
} moe_unit;

typedef struct moe_layout {
    size_t off, pos, tok, units, xg, xu, xgg, xug, g, u, hq, d, total;
    size_t sg, su, sd;          /* activation row bytes: gate, up, down */
} moe_layout;

static size_t take(size_t *at, size_t bytes) {
    size_t o = *at;
    *at += round64(bytes);
    return o;
}

/* The scratch layout for activation rows of sg (gate), su (up) and sd
 * (down) bytes; su is 0 when up shares gate's rows. */
static void moe_plan(int64_t ff, int64_t n_out, int32_t n_expert, int64_t n, int k, size_t sg, size_t su,
                     size_t sd, moe_layout *L) {
    size_t nk = (size_t)n * (size_t)k, at = 0;
    memset(L, 0, sizeof *L);
    L->sg = sg;
    L->su = su;
    L->sd = sd;
    L->off = take(&at, ((size_t)n_expert + 1) * sizeof(int32_t));
    L->pos = take(&at, nk * sizeof(int32_t));
    L->tok = take(&at, nk * sizeof(int32_t));
    L->units = take(&at, 2 * (size_t)n_expert * sizeof(moe_unit));
    L->xg = take(&at, (size_t)n * sg);
    L->xu = take(&at, (size_t)n * su);
    L->xgg = take(&at, nk * sg);
    L->xug = take(&at, nk * su);
    L->g = take(&at, nk * (size_t)ff * sizeof(float));
    L->u = take(&at, nk * (size_t)ff * sizeof(float));
    L->hq = take(&at, nk * sd);
    L->d = take(&at, nk * (size_t)n_out * sizeof(float));
    L->total = at;
}

/* The largest activation row of `cols` values over every weight type kvwise computes with. */
static size_t act_stride_any(int64_t cols) {
    size_t best = 0;
    for (uint32_t t = 0; t < KW_TYPE_COUNT; t++) {
        const kw_type_traits *tr = kw_type_traits_get(t);
        if (!tr || !tr->supported || kw_row_bytes(t, cols) == 0) continue;
        size_t b = act_stride(t, cols);
        if (b > best) best = b;
    }
    return best;
}

size_t kw_moe_scratch_bytes(int64_t n_embd, int64_t n_ff_exp, int32_t n_expert, int64_t n, int k) {
    if (n_embd < 1 || n_ff_exp < 1 || n_expert < 1 || n < 1 || k < 1) return 0;
    moe_layout L;
    size_t s_in = act_stride_any(n_embd);
    moe_plan(n_ff_exp, n_embd, n_expert, n, k, s_in, s_in, act_stride_any(n_ff_exp), &L);
    return L.total;
}

/* ---- the work split over units ---- */

typedef struct moe_run {
    const kw_kernel_set *ks;
    const moe_unit *u;
    int n_units;
    int64_t n_groups;
    _Atomic uint64_t part[KW_MOE_MAX_THREADS];   /* back << 32 | front, in groups */
    uint32_t piece[KW_MOE_MAX_THREADS];
} moe_run;

static uint64_t part_word(uint32_t front, uint32_t back) { return (uint64_t)back << 32 | front; }

/* Groups [g0, g1) of the run, unit by unit. */
static void run_groups(const moe_run *r, int64_t g0, int64_t g1) {
    int lo = 0, hi = r->n_units - 1;
    while (lo < hi) {   /* the unit holding g0 */
        int mid = (lo + hi + 1) / 2;
        if (r->u[mid].g0 <= g0) lo = mid;
        else hi = mid - 1;
    }
    for (int i = lo; i < r->n_units && g0 < g1; i++) {
        const moe_unit *u = &r->u[i];
        int64_t ug = (u->W.rows + KW_MOE_ROWS - 1) / KW_MOE_ROWS, e = u->g0 + ug < g1 ? u->g0 + ug : g1;
        int64_t r0 = (g0 - u->g0) * KW_MOE_ROWS, r1 = (e - u->g0) * KW_MOE_ROWS;
        if (r1 > u->W.rows) r1 = u->W.rows;
        r->ks->gemm_experts[u->W.type](&u->W, r0, r1, u->xq, u->xs, u->nx, u->Y, u->W.rows);
        g0 = e;
    }
}

/* Runs part p's groups until none is left, a piece at a time: its owner takes
 * pieces from the front, a helper from the back, so the two meet without
 * sharing a piece (each piece is claimed by one compare-and-swap). */
static void drain_part(moe_run *r, int p, bool from_back) {
    uint64_t v = atomic_load_explicit(&r->part[p], memory_order_acquire);
    for (;;) {
        uint32_t f = (uint32_t)v, e = (uint32_t)(v >> 32);
        if (f >= e) return;
        uint32_t n = kw_mm_piece_groups(e - f, r->piece[p]);
        uint64_t rest = from_back ? part_word(f, e - n) : part_word(f + n, e);
        if (atomic_compare_exchange_weak_explicit(&r->part[p], &v, rest, memory_order_acq_rel,
                                                  memory_order_acquire)) {
            if (from_back) run_groups(r, e - n, e);
            else run_groups(r, f, f + n);
            v = atomic_load_explicit(&r->part[p], memory_order_acquire);
        }
    }
}

static void own_part(moe_run *r, int p) { drain_part(r, p, false); }
static void help_part(moe_run *r, int p) { drain_part(r, p, true); }

static void units_task(void *arg, int ith, int nth) {
    moe_run *r = arg;
    own_part(r, ith);
    for (int k = 1; k < nth; k++) help_part(r, (ith + k) % nth);
}

/* Every unit's product, the groups cut into one run per thread by work
 * (groups x activation rows). */
static void run_units(kw_pool *pool, const kw_kernel_set *ks, moe_unit *u, int n_units) {
    if (n_units == 0) return;
    static _Thread_local moe_run r;   /* ~6 KiB: off the stack of the engine thread */
    int nth = kw_pool_size(pool);
    if (nth > KW_MOE_MAX_THREADS) nth = KW_MOE_MAX_THREADS;
    r.ks = ks;
    r.u = u;
    r.n_units = n_units;
    int64_t g = 0, work = 0;
    for (int i = 0; i < n_units; i++) {
        u[i].g0 = g;
        int64_t ug = (u[i].W.rows + KW_MOE_ROWS - 1) / KW_MOE_ROWS;
        g += ug;
        work += ug * u[i].nx;
    }
    r.n_groups = g;
    /* thread p's run starts at the first group whose work before it reaches work * p / nth */
    int64_t starts[KW_MOE_MAX_THREADS + 1];
    int p = 0, i = 0;
    int64_t before = 0, gi = 0;
    for (p = 0; p < nth; p++) {
        int64_t want = work * p / nth;
        while (i < n_units) {
            int64_t ug = (u[i].W.rows + KW_MOE_ROWS - 1) / KW_MOE_ROWS, left = u[i].g0 + ug - gi;
            if (before + left * u[i].nx <= want) { before += left * u[i].nx; gi += left; i++; continue; }
            int64_t skip = (want - before + u[i].nx - 1) / u[i].nx;
            gi += skip;
            before += skip * u[i].nx;
            break;
        }
        starts[p] = gi < g ? gi : g;
    }
    starts[nth] = g;
    for (p = 0; p < nth; p++) {
        uint32_t f = (uint32_t)starts[p], e = (uint32_t)(starts[p + 1] > starts[p] ? starts[p + 1] : starts[p]);
        r.piece[p] = (e - f + KW_MOE_PIECES - 1) / KW_MOE_PIECES;
        if (r.piece[p] < 1) r.piece[p] = 1;
        atomic_store_explicit(&r.part[p], part_word(f, e), memory_order_relaxed);
    }
    if (nth > 1) kw_pool_run(pool, units_task, &r);
    else units_task(&r, 0, 1);
}

/* ---- row-wise steps ---- */

typedef struct rows_job {
    const kw_kernel_set *ks;
    const kw_moe_args *a;
    const moe_layout *L;
    uint8_t *s;
    int64_t rows;
} rows_job;

/* Token rows of x in the gate's (and up's) dot types. */
static void quant_x_task(void *arg, int ith, int nth) {
    rows_job *j = arg;
    const kw_moe_args *a = j->a;
    for (int64_t i = ith; i < a->n; i += nth) {
        const float *x = a->x + i * a->gate->cols;
        act_row(j->ks, a->gate->type, x, j->s + j->L->xg + (size_t)i * j->L->sg, a->gate->cols);
        if (j->L->su)
            act_row(j->ks, a->up->type, x, j->s + j->L->xu + (size_t)i * j->L->su, a->up->cols);
    }
}

/* Grouped rows: gate = silu(gate) * up, then in the down's dot type. */
static void swiglu_task(void *arg, int ith, int nth) {
    rows_job *j = arg;
    const kw_moe_args *a = j->a;
    int64_t ff = a->gate->rows, lo = j->rows * ith / nth, hi = j->rows * (ith + 1) / nth;
    float *g = (float *)(j->s + j->L->g), *u = (float *)(j->s + j->L->u);
    for (int64_t p = lo; p < hi; p++) {
        j->ks->swiglu(g + p * ff, u + p * ff, ff);
        act_row(j->ks, a->down->type, g + p * ff, j->s + j->L->hq + (size_t)p * j->L->sd, ff);
    }
}

/* out[i] = sum_j w_ij * D[pos(i, j)], j in order. */
static void combine_task(void *arg, int ith, int nth) {
    rows_job *j = arg;
    const kw_moe_args *a = j->a;
    int64_t E = a->down->rows, lo = a->n * ith / nth, hi = a->n * (ith + 1) / nth;
    const int32_t *pos = (const int32_t *)(j->s + j->L->pos);
    const float *d = (const float *)(j->s + j->L->d);
    for (int64_t i = lo; i < hi; i++) {
        float *o = a->out + i * E;
        for (int c = 0; c < a->k; c++) {
            const float *di = d + (int64_t)pos[i * a->k + c] * E;
            float w = a->w[i * a->k + c];
            if (c == 0) for (int64_t r = 0; r < E; r++) o[r] = w * di[r];
            else for (int64_t r = 0; r < E; r++) o[r] += w * di[r];
        }
    }
}

static void run_rows(kw_pool *pool, kw_task_fn fn, rows_job *j, int64_t rows, int64_t width) {
    if (kw_pool_size(pool) > 1 && rows > 1 && rows * width >= KW_MOE_PARALLEL_MIN) kw_pool_run(pool, fn, j);
    else fn(j, 0, 1);
}

/* ---- the block ---- */

/* Counting sort of the (token, choice) pairs by expert: off[e] the first
 * grouped row of expert e, tok[p] the token of grouped row p, pos[i*k+c]
 * the grouped row of token i's choice c. */
static void group_by_expert(const kw_moe_args *a, int32_t *off, int32_t *pos, int32_t *tok) {
    int32_t E = a->gate->n;
    int64_t nk = a->n * a->k;
    memset(off, 0, ((size_t)E + 1) * sizeof *off);
    for (int64_t q = 0; q < nk; q++) off[a->sel[q] + 1]++;
    for (int32_t e = 0; e < E; e++) off[e + 1] += off[e];
    for (int64_t q = 0; q < nk; q++) {   /* off[e] runs to the next expert's start, then is restored below */
        int32_t p = off[a->sel[q]]++;
        pos[q] = p;
        tok[p] = (int32_t)(q / a->k);
    }
    for (int32_t e = E; e > 0; e--) off[e] = off[e - 1];
    off[0] = 0;
}

/* The activation rows of expert e's tokens in one dot type: a single token
 * is read where it was quantized, several are gathered in group order. */
static const uint8_t *expert_rows(const uint8_t *xq, uint8_t *gathered, size_t stride, const int32_t *tok, int32_t p0,
                                  int32_t p1) {
    if (p1 - p0 == 1) return xq + (size_t)tok[p0] * stride;
    for (int32_t p = p0; p < p1; p++) memcpy(gathered + (size_t)p * stride, xq + (size_t)tok[p] * stride, stride);
    return gathered + (size_t)p0 * stride;
}

uint64_t kw_moe_experts(kw_pool *pool, const kw_moe_args *a, void *scratch) {
    if (!a || a->n < 1 || a->k < 1) return 0;
    const kw_kernel_set *ks = kw_kernels_active();
    bool up_own = kw_dot_type(a->up->type) != kw_dot_type(a->gate->type);
    moe_layout L;
    moe_plan(a->gate->rows, a->down->rows, a->gate->n, a->n, a->k, act_stride(a->gate->type, a->gate->cols),
             up_own ? act_stride(a->up->type, a->up->cols) : 0, act_stride(a->down->type, a->down->cols), &L);
    uint8_t *s = scratch;
    int32_t *off = (int32_t *)(s + L.off), *pos = (int32_t *)(s + L.pos), *tok = (int32_t *)(s + L.tok);
    moe_unit *u = (moe_unit *)(s + L.units);
    int64_t ff = a->gate->rows, E = a->down->rows, nk = a->n * a->k;
    rows_job j = {.ks = ks, .a = a, .L = &L, .s = s, .rows = nk};
    run_rows(pool, quant_x_task, &j, a->n, a->gate->cols);
    group_by_expert(a, off, pos, tok);

    int n_units = 0;
    uint64_t bytes = 0;
    for (int32_t e = 0; e < a->gate->n; e++) {
        int32_t p0 = off[e], p1 = off[e + 1];
        if (p0 == p1) continue;
        const uint8_t *xg = expert_rows(s + L.xg, s + L.xgg, L.sg, tok, p0, p1);
        const uint8_t *xu = up_own ? expert_rows(s + L.xu, s + L.xug, L.su, tok, p0, p1) : xg;
        u[n_units++] = (moe_unit){kw_expert_matrix(a->gate, e), xg, L.sg, p1 - p0, (float *)(s + L.g) + p0 * ff, 0};
        u[n_units++] = (moe_unit){kw_expert_matrix(a->up, e), xu, up_own ? L.su : L.sg, p1 - p0,
                                  (float *)(s + L.u) + p0 * ff, 0};
    }
    for (int i = 0; i < n_units; i++) bytes += kw_matrix_span(&u[i].W).bytes;   /* gate and up: stored or packed */
    run_units(pool, ks, u, n_units);
    run_rows(pool, swiglu_task, &j, nk, ff);

    n_units = 0;
    for (int32_t e = 0; e < a->gate->n; e++) {
        int32_t p0 = off[e], p1 = off[e + 1];
        if (p0 == p1) continue;
        u[n_units++] = (moe_unit){kw_expert_matrix(a->down, e), s + L.hq + (size_t)p0 * L.sd, L.sd, p1 - p0,
                                  (float *)(s + L.d) + p0 * E, 0};
    }
    for (int i = 0; i < n_units; i++) bytes += kw_matrix_span(&u[i].W).bytes;   /* the down matrices */
    run_units(pool, ks, u, n_units);
    run_rows(pool, combine_task, &j, a->n, E * a->k);
    return bytes;
}

/* ---- packed copies at first use ---- */

void *kw_experts_pack(kw_experts *const *E, int n_t, int32_t e, kw_err *err) {
    if (n_t < 1 || n_t > 3) return NULL;
    kw_matrix m[3], *ws[3];
    for (int t = 0; t < n_t; t++) {
        if (!E[t]->packed || e < 0 || e >= E[t]->n || atomic_load_explicit(&E[t]->packed[e], memory_order_acquire))
            return NULL;
        m[t] = kw_expert_matrix(E[t], e);
        ws[t] = &m[t];
    }
    void *block = NULL;
    if (kw_matrices_pack(ws, n_t, &block, err) != 0 || !block) return NULL;
    for (int t = 0; t < n_t; t++)   /* a copy that leaves rows to the stored form is not worth a block */
        if (kw_matrix_packed_rows(&m[t]) != m[t].rows) {
            kw_matrices_unpack(ws, n_t, block);
            return NULL;
        }
    for (int t = 0; t < n_t; t++) atomic_store_explicit(&E[t]->packed[e], m[t].packed, memory_order_release);
    return block;
}

uint64_t kw_experts_pack_growth(const kw_experts *E, uint64_t addr) {
    if (!E || E->n < 1) return 0;
    uint64_t copy = kw_shape_pack_bytes(E->type, E->cols, E->rows);
    if (copy == 0) return 0;
    uint64_t total = 0;
    for (int32_t e = 0; e < E->n; e++) {
        uint64_t start, freed = kw_whole_pages(addr + (uint64_t)e * E->stride, E->stride, &start);
        uint64_t held = copy + 4096;
        total += held > freed ? held - freed : 0;
    }
    return total;
}
