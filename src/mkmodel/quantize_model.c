/* quantize_model.c - re-encoding a GGUF model's weights to another type
 * (`kvwise quantize IN OUT TYPE`, mkmodel.h).
 *
 * Owns: choosing which tensors change (2-D+ tensors named "*.weight"; 1-D
 * tensors such as norms and biases keep their type), the row-by-row
 * dequantize -> quantize conversion through the reference (de)quantizers,
 * and carrying the input's metadata over (general.file_type updated).
 * Rows are streamed from the input mapping to the writer, so peak memory
 * is a few MiB plus the input's page cache. */
#include "mkmodel.h"
#include "kvwise/gguf.h"
#include "kvwise/memory.h"
#include "kvwise/progress.h"
#include "kvwise/tensor.h"
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define RQ_MAX_THREADS 16

/* Shared by all tensors: the pool and one F32 scratch row per thread. */
typedef struct rq_run { kw_pool *pool; int n_threads; float *rows[RQ_MAX_THREADS]; } rq_run;

typedef struct requant {
    const kw_gguf_tensor *src;
    uint32_t dst_type;
    rq_run *run;
} requant;

/* Once a tensor is written, its input pages are dropped from this
 * process's mapping (they are file-backed: the kernel re-reads them if
 * needed), so RSS does not grow to the input file's size. */
static void drop_pages(const uint8_t *from, const uint8_t *to) {
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) return;
    uintptr_t lo = ((uintptr_t)from + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    uintptr_t hi = (uintptr_t)to & ~((uintptr_t)page - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/* After rows [first, first+n) are consumed: drop their whole pages, and
 * the entire tensor (boundary pages included) after its last chunk. */
static void drop_source_pages(const kw_gguf_tensor *t, int64_t first, int64_t n) {
    const uint8_t *base = t->data;
    size_t rb = (size_t)(t->nbytes / (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]));
    if (first + n == t->ne[1] * t->ne[2] * t->ne[3]) drop_pages(base, base + t->nbytes);
    else drop_pages(base + (size_t)first * rb, base + (size_t)(first + n) * rb);
}

static int fill_copy(void *ctx, int64_t first, int64_t n, void *dst, kw_err *err) {
    const requant *q = ctx;
    size_t rb = kw_row_bytes(q->src->type, q->src->ne[0]);
    memcpy(dst, (const uint8_t *)q->src->data + (size_t)first * rb, (size_t)n * rb);
    drop_source_pages(q->src, first, n);
    return 0;
}

typedef struct convert_job { const requant *q; int64_t first, n; uint8_t *dst; } convert_job;

static void convert_task(void *arg, int ith, int nth) {
    const convert_job *j = arg;
    const requant *q = j->q;
    int64_t cols = q->src->ne[0];
    size_t in_rb = kw_row_bytes(q->src->type, cols), out_rb = kw_row_bytes(q->dst_type, cols);
    int64_t per = (j->n + nth - 1) / nth, lo = ith * per, hi = lo + per < j->n ? lo + per : j->n;
    float *row = q->run->rows[ith];
    for (int64_t r = lo; r < hi; r++) {
        kw_dequantize_row(q->src->type, (const uint8_t *)q->src->data + (size_t)(j->first + r) * in_rb, row, cols);
        kw_quantize_row(q->dst_type, row, j->dst + (size_t)r * out_rb, cols);
    }
}

static int fill_convert(void *ctx, int64_t first, int64_t n, void *dst, kw_err *err) {
    const requant *q = ctx;
    convert_job j = {q, first, n, dst};
    if (q->run->pool && n > 1) kw_pool_run(q->run->pool, convert_task, &j);
    else convert_task(&j, 0, 1);
    drop_source_pages(q->src, first, n);
    return 0;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

static int file_type_for(uint32_t t) {
    static const struct { uint32_t type; int ft; } map[] = {
        {KW_TYPE_F32, 0}, {KW_TYPE_F16, 1}, {KW_TYPE_Q4_0, 2}, {KW_TYPE_Q4_1, 3}, {KW_TYPE_Q8_0, 7},
        {KW_TYPE_Q5_0, 8}, {KW_TYPE_Q5_1, 9}, {KW_TYPE_Q4_K, 14}, {KW_TYPE_Q5_K, 16}, {KW_TYPE_Q6_K, 18},
        {KW_TYPE_BF16, 32}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) if (map[i].type == t) return map[i].ft;
    return -1;
}

int kw_mk_quantize_file(const char *in, const char *out, uint32_t wtype, kw_progress *progress, kw_err *err) {
    if (file_type_for(wtype) < 0)
        return kw_err_set(err, "type %s is not a target type (f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k)",
                          kw_type_name(wtype));
    kw_gguf *g = kw_gguf_open(in, err);
    if (!g) return -1;
    kw_gguf_writer *w = kw_gguf_writer_create();
    requant *q = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *q);
    int64_t max_row = 1;
    for (uint64_t i = 0; i < g->n_tensors; i++) if (g->tensors[i].ne[0] > max_row) max_row = g->tensors[i].ne[0];
    rq_run run = {0};
    run.n_threads = kw_cpu_physical_cores();
    if (run.n_threads < 1) run.n_threads = 1;
    if (run.n_threads > RQ_MAX_THREADS) run.n_threads = RQ_MAX_THREADS;
    if (run.n_threads > 1) run.pool = kw_pool_create(run.n_threads);
    if (!run.pool) run.n_threads = 1;
    int rc = w && q ? 0 : kw_err_set(err, "out of memory");
    for (int k = 0; k < run.n_threads && !rc; k++) {
        run.rows[k] = kw_mem_alloc(KW_MEM_WORKSPACE, (size_t)max_row * sizeof(float));
        if (!run.rows[k]) rc = kw_err_set(err, "out of memory");
    }
    if (!rc) {
        kw_gguf_writer_copy_kvs(w, g);
        kw_gguf_writer_set_u32(w, "general.file_type", (uint32_t)file_type_for(wtype));
    }
    for (uint64_t i = 0; i < g->n_tensors && !rc; i++) {
        const kw_gguf_tensor *t = &g->tensors[i];
        q[i].src = t;
        q[i].run = &run;
        q[i].dst_type = t->type;
        bool matrix = t->n_dims >= 2 && ends_with(t->name.s, ".weight");
        if (matrix) {
            const kw_type_traits *tr = kw_type_traits_get(t->type);
            if (!tr || !tr->supported)
                rc = kw_err_set(err, "tensor %s: cannot re-encode type %s", t->name.s, kw_type_name(t->type));
            q[i].dst_type = kw_mk_matrix_type(wtype, t->ne[0]);
        }
        if (!rc)
            rc = kw_gguf_writer_add_tensor_fill(w, t->name.s, q[i].dst_type, t->n_dims, t->ne,
                                                q[i].dst_type == t->type ? fill_copy : fill_convert, &q[i], err);
    }
    if (!rc) rc = kw_gguf_writer_write_progress(w, out, progress, err);
    kw_gguf_writer_destroy(w);
    for (int k = 0; k < RQ_MAX_THREADS; k++) kw_mem_free(run.rows[k]);
    kw_pool_destroy(run.pool);
    free(q);
    kw_gguf_close(g);
    return rc;
}
