/* quantize_model.c - re-encoding a GGUF model's weights to another type
 * (`kvwise quantize IN OUT TYPE`, mkmodel.h).
 *
 * Owns: the row-by-row dequantize -> quantize conversion through the
 * reference (de)quantizers, and carrying the input's metadata over
 * (general.file_type updated). Which tensors change, and to what, is
 * mix.c's (kw_mk_mix_types).
 * Rows are streamed from the input mapping to the writer, so peak memory
 * is a few MiB plus the input's page cache. */
#include "mkmodel.h"
#include "kvwise/gguf.h"
#include "kvwise/memory.h"
#include "kvwise/progress.h"
#include "kvwise/tensor.h"
#include <stdio.h>
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

static int64_t arch_int(const kw_gguf *g, const char *arch, const char *key) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    int64_t v = 0;
    return kw_gguf_get_int(g, k, &v) ? v : 0;
}

/* The per-tensor types under the target (mix.c), from IN's names and metadata. */
static int choose_types(const kw_gguf *g, uint32_t target, uint32_t *types, kw_err *err) {
    int n = (int)g->n_tensors;
    const char **names = malloc((size_t)(n ? n : 1) * sizeof *names);
    uint32_t *dims = malloc((size_t)(n ? n : 1) * sizeof *dims);
    int64_t *ne0 = malloc((size_t)(n ? n : 1) * sizeof *ne0);
    int rc = names && dims && ne0 ? 0 : kw_err_set(err, "out of memory");
    for (int i = 0; i < n && !rc; i++) {
        names[i] = g->tensors[i].name.s;
        dims[i] = g->tensors[i].n_dims;
        ne0[i] = g->tensors[i].ne[0];
    }
    const char *arch = kw_gguf_get_str(g, "general.architecture");
    kw_mk_mix_model m = {arch, 0, 0, 0, 0};
    if (arch) {
        m.n_layer = (int)arch_int(g, arch, "block_count");
        m.n_head = (int)arch_int(g, arch, "attention.head_count");
        m.n_head_kv = (int)arch_int(g, arch, "attention.head_count_kv");
        m.n_expert = (int)arch_int(g, arch, "expert_count");
    }
    if (!rc) rc = kw_mk_mix_types(target, &m, n, names, dims, ne0, types, err);
    free(names);
    free(dims);
    free(ne0);
    return rc;
}

int kw_mk_quantize_file(const char *in, const char *out, uint32_t wtype, kw_progress *progress, kw_err *err) {
    if (kw_mk_target_file_type(wtype) < 0)
        return kw_err_set(err, "type %s is not a target type (f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k "
                          "q4_k_m q5_k_m q6_k)", kw_type_name(wtype));
    kw_gguf *g = kw_gguf_open(in, err);
    if (!g) return -1;
    kw_gguf_writer *w = kw_gguf_writer_create();
    requant *q = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *q);
    uint32_t *types = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *types);
    int64_t max_row = 1;
    for (uint64_t i = 0; i < g->n_tensors; i++) if (g->tensors[i].ne[0] > max_row) max_row = g->tensors[i].ne[0];
    rq_run run = {0};
    run.n_threads = kw_cpu_physical_cores();
    if (run.n_threads < 1) run.n_threads = 1;
    if (run.n_threads > RQ_MAX_THREADS) run.n_threads = RQ_MAX_THREADS;
    if (run.n_threads > 1) run.pool = kw_pool_create(run.n_threads);
    if (!run.pool) run.n_threads = 1;
    int rc = w && q && types ? 0 : kw_err_set(err, "out of memory");
    if (!rc) rc = choose_types(g, wtype, types, err);
    for (int k = 0; k < run.n_threads && !rc; k++) {
        run.rows[k] = kw_mem_alloc(KW_MEM_WORKSPACE, (size_t)max_row * sizeof(float));
        if (!run.rows[k]) rc = kw_err_set(err, "out of memory");
    }
    if (!rc) {
        kw_gguf_writer_copy_kvs(w, g);
        kw_gguf_writer_set_u32(w, "general.file_type", (uint32_t)kw_mk_target_file_type(wtype));
    }
    for (uint64_t i = 0; i < g->n_tensors && !rc; i++) {
        const kw_gguf_tensor *t = &g->tensors[i];
        q[i].src = t;
        q[i].run = &run;
        q[i].dst_type = t->type;
        if (types[i] != KW_MK_KEEP && types[i] != t->type) {
            const kw_type_traits *tr = kw_type_traits_get(t->type);
            if (!tr || !tr->supported)
                rc = kw_err_set(err, "tensor %s: cannot re-encode type %s", t->name.s, kw_type_name(t->type));
            q[i].dst_type = types[i];
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
    free(types);
    kw_gguf_close(g);
    return rc;
}
