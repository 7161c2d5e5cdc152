/* plan_gguf.c - a kw_plan_model from an opened GGUF file (plan.h).
 *
 * Owns: what the planner needs beyond the shape (kw_hparams_from_gguf,
 * model.h, is the one reader of shape keys): the exact weight bytes (sum of
 * tensor sizes), the resident size of the weights (the mapped file plus
 * the load-time repacked copies, measured below), the bytes one
 * decode step reads (kw_decode_weight_bytes: of a mixture of experts, the
 * k experts a token picks), the dominant tensor type, and the tokenizer's heap:
 * measured by building the tokenizer (it lives in metadata) and reading the
 * accounted allocator's tokenizer counter, or estimated from the vocab and
 * merges arrays when it cannot be built. Only metadata and tensor
 * descriptors are read; no tensor data page is touched. */
#include "plan_internal.h"
#include "kvwise/memory.h"
#include "kvwise/tensor.h"
#include "kvwise/tokenizer.h"
#include <string.h>

/* Tokenizer heap per vocab entry beyond its text (score, type, hash slot,
 * lookup index) and per merge beyond its text (rank table entry). */
#define KW_PLAN_TOK_ENTRY_BYTES 32
#define KW_PLAN_MERGE_ENTRY_BYTES 24

static uint64_t string_array_bytes(const kw_gguf *g, const char *key, uint64_t per_entry) {
    const kw_gguf_kv *kv = kw_gguf_find(g, key);
    if (!kv || kv->type != KW_GGUF_ARRAY || kv->arr_type != KW_GGUF_STRING || !kv->arr_str) return 0;
    uint64_t sum = 0;
    for (uint64_t i = 0; i < kv->arr_n; i++) sum += kv->arr_str[i].len + 1 + per_entry;
    return sum;
}

/* The tokenizer's accounted heap, built from the metadata and freed again. */
static uint64_t measure_tokenizer(const kw_gguf *g, bool *measured) {
    uint64_t before = kw_mem_current(KW_MEM_TOKENIZER);
    kw_tokenizer *t = kw_tokenizer_load(g, NULL);
    uint64_t after = kw_mem_current(KW_MEM_TOKENIZER);
    kw_tokenizer_free(t);
    *measured = t != NULL && after > before;
    if (*measured) return after - before;
    return string_array_bytes(g, "tokenizer.ggml.tokens", KW_PLAN_TOK_ENTRY_BYTES) +
           string_array_bytes(g, "tokenizer.ggml.merges", KW_PLAN_MERGE_ENTRY_BYTES);
}

/* ---- load-time repacking ----
 * kw_model_load() gives every layer matrix and the LM head a repacked copy
 * for the active kernel family (model.c pack_weights; tensor.h
 * kw_matrix_pack, kw_matrices_pack), accounted as weights beside the
 * mapped file. Its size is what the packing code itself says it allocates
 * (kw_shape_pack_bytes, which reads only the shape), so the line is exact.
 * A family that does not pack gives 0. Which matrices those are is
 * model.h kw_model_repacks_tensor. */
static uint64_t repack_bytes(const kw_gguf *g, const kw_arch_desc *a) {
    bool tied = kw_gguf_find_tensor(g, "output.weight") == NULL;
    uint64_t total = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kw_gguf_tensor *t = &g->tensors[i];
        if (kw_model_repacks_tensor(a, t, tied)) total += kw_shape_pack_bytes(t->type, t->ne[0], t->ne[1]);
    }
    return total;
}

/* Rows per packing group of the active kernel family for a type (0: no
 * packed form): packing 1023 rows serves 1024 - group of them. */
static int64_t pack_row_group(uint32_t type) {
    /* 256 values per row: a multiple of every block size (and of the 32 that packed F16 needs) */
    size_t rb = kw_row_bytes(type, 256);
    if (rb == 0) return 0;
    void *buf = kw_mem_calloc(KW_MEM_OTHER, rb * 1023);
    if (!buf) return 0;
    kw_matrix W = {.type = type, .rows = 1023, .cols = 256, .row_bytes = rb, .data = buf};
    int64_t served = kw_matrix_pack(&W, NULL) == 0 ? kw_matrix_packed_rows(&W) : 0;
    kw_matrix_unpack(&W);
    kw_mem_free(buf);
    return served > 0 ? 1024 - served : 0;
}

/* The mapped pages kw_model_load() drops after packing (model.c
 * release_packed_source): the whole pages inside the rows a packed copy
 * serves, for every packed matrix but a tied embedding. */
static uint64_t released_bytes(const kw_gguf *g, const kw_arch_desc *a) {
    bool tied = kw_gguf_find_tensor(g, "output.weight") == NULL;
    int64_t groups[KW_TYPE_COUNT];
    for (int i = 0; i < KW_TYPE_COUNT; i++) groups[i] = -1;
    uint64_t total = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kw_gguf_tensor *t = &g->tensors[i];
        if (!kw_model_repacks_tensor(a, t, tied) || !strcmp(t->name.s, "token_embd.weight") || t->type >= KW_TYPE_COUNT) continue;
        if (groups[t->type] < 0) groups[t->type] = pack_row_group(t->type);
        int64_t grp = groups[t->type], rows = t->ne[1];
        if (grp <= 0 || rows < 16) continue;
        uint64_t start = 0;
        total += kw_whole_pages(g->data_offset + t->offset, (uint64_t)(rows - rows % grp) * kw_row_bytes(t->type, t->ne[0]), &start);
    }
    return total;
}

/* The most the model's packing of experts at first use can add (model.c
 * kw_model_pack_experts), from the expert tensors' shapes and offsets. */
static uint64_t expert_pack_bytes(const kw_gguf *g, const kw_arch_desc *a) {
    uint64_t total = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kw_gguf_tensor *t = &g->tensors[i];
        if (t->n_dims != 3 || !t->name.s || !kw_arch_is_layer_experts(a, t->name.s) || t->type >= KW_TYPE_COUNT) continue;
        size_t rb = kw_row_bytes(t->type, t->ne[0]);
        if (rb == 0) continue;
        kw_experts E = {.type = t->type, .rows = t->ne[1], .cols = t->ne[0], .row_bytes = rb, .n = (int32_t)t->ne[2],
                        .stride = rb * (size_t)t->ne[1]};
        total += kw_experts_pack_growth(&E, g->data_offset + t->offset);
    }
    return total;
}

/* Bytes of the tensor type that holds the most weight bytes. */
static uint32_t dominant_type(const kw_gguf *g) {
    uint64_t by_type[KW_TYPE_COUNT] = {0};
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].type < KW_TYPE_COUNT) by_type[g->tensors[i].type] += g->tensors[i].nbytes;
    uint32_t best = KW_TYPE_COUNT;
    uint64_t most = 0;
    for (uint32_t t = 0; t < KW_TYPE_COUNT; t++)
        if (by_type[t] > most) { most = by_type[t]; best = t; }
    return best;
}

int kw_plan_model_from_gguf(const kw_gguf *g, kw_plan_model *m, kw_err *err) {
    memset(m, 0, sizeof *m);
    if (!g) return kw_err_set(err, "plan: no GGUF file");
    if (kw_hparams_from_gguf(g, &m->hp, err) != 0) return -1;
    snprintf(m->source, sizeof m->source, "gguf");
    uint64_t w = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) w += g->tensors[i].nbytes;
    m->weight_bytes = w;
    m->repack_bytes = repack_bytes(g, m->hp.arch);
    m->released_bytes = released_bytes(g, m->hp.arch);
    m->expert_pack_bytes = expert_pack_bytes(g, m->hp.arch);
    m->resident_bytes = (g->size > w ? g->size : w) + m->repack_bytes - m->released_bytes + m->expert_pack_bytes;
    m->read_bytes_per_token = kw_decode_weight_bytes(g, &m->hp, KW_DECODE_PACKED | KW_DECODE_PACKED_EXPERTS);
    m->n_experts = m->hp.n_expert;
    m->n_experts_used = m->hp.n_expert_used;
    m->expert_bytes = m->hp.expert_bytes;
    if (m->hp.n_rec_layers > 0) {   /* gated delta net layers: conv inputs + one d x d state per value head, F32 */
        m->n_linear_layers = m->hp.n_rec_layers;
        m->linear_state_bytes = m->hp.rec_state_bytes;
        snprintf(m->linear_formula, sizeof m->linear_formula,
                 "4 B x ((%d-1) x %lld conv + %d x %d^2 state) per layer", m->hp.ssm_d_conv,
                 (long long)kw_dim_size(KW_DIM_SSM_CONV, &m->hp), m->hp.ssm_dt_rank, m->hp.ssm_d_state);
    }
    m->main_type = dominant_type(g);
    m->tokenizer_bytes = measure_tokenizer(g, &m->tokenizer_measured);
    return 0;
}
