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
#include "kvwise/tensor.h"
#include <stdlib.h>
#include <string.h>

typedef struct requant {
    const kw_gguf_tensor *src;
    uint32_t dst_type;
    float *row;          /* shared scratch row (F32) */
} requant;

static int fill_copy(void *ctx, int64_t first, int64_t n, void *dst, kw_err *err) {
    const requant *q = ctx;
    size_t rb = kw_row_bytes(q->src->type, q->src->ne[0]);
    memcpy(dst, (const uint8_t *)q->src->data + (size_t)first * rb, (size_t)n * rb);
    return 0;
}

static int fill_convert(void *ctx, int64_t first, int64_t n, void *dst, kw_err *err) {
    const requant *q = ctx;
    int64_t cols = q->src->ne[0];
    size_t in_rb = kw_row_bytes(q->src->type, cols), out_rb = kw_row_bytes(q->dst_type, cols);
    for (int64_t r = 0; r < n; r++) {
        kw_dequantize_row(q->src->type, (const uint8_t *)q->src->data + (size_t)(first + r) * in_rb, q->row, cols);
        if (kw_quantize_row(q->dst_type, q->row, (uint8_t *)dst + (size_t)r * out_rb, cols) != out_rb)
            return kw_err_set(err, "cannot encode type %s", kw_type_name(q->dst_type));
    }
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

int kw_mk_quantize_file(const char *in, const char *out, uint32_t wtype, kw_err *err) {
    if (file_type_for(wtype) < 0)
        return kw_err_set(err, "type %s is not a target type (f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k)",
                          kw_type_name(wtype));
    kw_gguf *g = kw_gguf_open(in, err);
    if (!g) return -1;
    kw_gguf_writer *w = kw_gguf_writer_create();
    requant *q = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *q);
    int64_t max_row = 1;
    for (uint64_t i = 0; i < g->n_tensors; i++) if (g->tensors[i].ne[0] > max_row) max_row = g->tensors[i].ne[0];
    float *row = kw_mem_alloc(KW_MEM_WORKSPACE, (size_t)max_row * sizeof(float));
    int rc = w && q && row ? 0 : kw_err_set(err, "out of memory");
    if (!rc) {
        kw_gguf_writer_copy_kvs(w, g);
        kw_gguf_writer_set_u32(w, "general.file_type", (uint32_t)file_type_for(wtype));
    }
    for (uint64_t i = 0; i < g->n_tensors && !rc; i++) {
        const kw_gguf_tensor *t = &g->tensors[i];
        q[i].src = t;
        q[i].row = row;
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
    if (!rc) rc = kw_gguf_writer_write(w, out, err);
    kw_gguf_writer_destroy(w);
    kw_mem_free(row);
    free(q);
    kw_gguf_close(g);
    return rc;
}
