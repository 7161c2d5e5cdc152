/* mix.c - quantization targets and llama-quantize's per-tensor mixes
 * (`kvwise quantize IN OUT Q4_K_M`, `kvwise mkmodel --type q4_k_m`, mkmodel.h).
 *
 * Owns: target names and general.file_type values; which tensors a
 * quantization touches (2-D+ "*weight" tensors except norms, the MoE
 * router, ssm_conv1d and positional embeddings); and the type each touched
 * tensor gets. A plain type gives every such tensor that type (with the
 * K-quant row fallbacks of kw_mk_matrix_type). A mix gives the base type
 * with llama-quantize's exceptions:
 *   output.weight (token_embd.weight when tied)  Q6_K (Q8_0 if rows % 256)
 *   attn_v.weight   Q6_K on "more bits" layers (Q4_K_M, Q5_K_M); Q5_K for
 *                   the other Q4_K layers of a 70B-class model; Q8_0 with
 *                   8 experts
 *   attn_k.weight   Q8_0 with 8 experts
 *   ffn_down*       Q6_K on "more bits" layers (Q4_K_M, Q5_K_M)
 *   attn_output     Q5_K with 8 experts (Q4_K_M)
 *   attn_qkv        Q5_K (Q4_K_M), Q6_K (Q5_K_M)
 * "More bits" layers: the first and last eighth and every third in between
 * (i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2). attn_v counts attention
 * layers in (layer, name) order; ffn_down counts the layer of its name
 * with experts, its rank in that order without. A K-quant whose rows are
 * not a multiple of 256 falls back to Q5_0 / Q5_1 / Q8_0, then F16. */
#include "mkmodel.h"
#include "kvwise/tensor.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const struct { const char *name; uint32_t target, base; int file_type; } k_mixes[] = {
    {"q4_k_m", KW_MK_MIX_Q4_K_M, KW_TYPE_Q4_K, 15},
    {"q5_k_m", KW_MK_MIX_Q5_K_M, KW_TYPE_Q5_K, 17},
    {"q6_k", KW_MK_MIX_Q6_K, KW_TYPE_Q6_K, 18},
};
#define N_MIXES (int)(sizeof k_mixes / sizeof k_mixes[0])

/* llama.cpp's general.file_type for "mostly <type>" files. */
static const struct { uint32_t type; int ft; } k_plain[] = {
    {KW_TYPE_F32, 0}, {KW_TYPE_F16, 1}, {KW_TYPE_Q4_0, 2}, {KW_TYPE_Q4_1, 3}, {KW_TYPE_Q8_0, 7},
    {KW_TYPE_Q5_0, 8}, {KW_TYPE_Q5_1, 9}, {KW_TYPE_Q4_K, 14}, {KW_TYPE_Q5_K, 16}, {KW_TYPE_Q6_K, 18},
    {KW_TYPE_BF16, 32}};

static int mix_index(uint32_t target) {
    for (int i = 0; i < N_MIXES; i++) if (k_mixes[i].target == target) return i;
    return -1;
}

int64_t kw_mk_target_from_name(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < N_MIXES; i++) if (!strcasecmp(k_mixes[i].name, name)) return k_mixes[i].target;
    int t = kw_type_from_name(name);
    return t >= 0 && kw_mk_target_file_type((uint32_t)t) >= 0 ? t : -1;
}

const char *kw_mk_target_name(uint32_t target) {
    static const char *const upper[] = {"Q4_K_M", "Q5_K_M", "Q6_K"};
    int m = mix_index(target);
    return m >= 0 ? upper[m] : kw_type_name(target);
}

int kw_mk_target_file_type(uint32_t target) {
    int m = mix_index(target);
    if (m >= 0) return k_mixes[m].file_type;
    for (size_t i = 0; i < sizeof k_plain / sizeof k_plain[0]; i++) if (k_plain[i].type == target) return k_plain[i].ft;
    return -1;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

bool kw_mk_quantizes(const char *name, uint32_t n_dims) {
    return n_dims >= 2 && ends_with(name, "weight") && !strstr(name, "_norm.weight") &&
           !strstr(name, "ffn_gate_inp.weight") && !strstr(name, "ssm_conv1d.weight") &&
           strcmp(name, "position_embd.weight") && strcmp(name, "token_types.weight");
}

static int layer_of(const char *name) {
    int l = -1;
    if (sscanf(name, "blk.%d.", &l) != 1) return -1;
    return l;
}

/* llama.cpp's tensor order: by layer (non-layer tensors first), then name. */
typedef struct mix_ord { int layer, idx; const char *name; } mix_ord;
static int cmp_order(const void *pa, const void *pb) {
    const mix_ord *a = pa, *b = pb;
    if (a->layer != b->layer) return a->layer < b->layer ? -1 : 1;
    return strcmp(a->name, b->name);
}

static bool more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

/* A 70B-class model, where llama.cpp gives the narrow attn_v one step more. */
static bool is_70b(const kw_mk_mix_model *m) {
    if (!m->arch || m->n_layer != 80) return false;
    if (!strcmp(m->arch, "llama")) return m->n_head != m->n_head_kv;
    return !strcmp(m->arch, "qwen2");
}

int kw_mk_mix_types(uint32_t target, const kw_mk_mix_model *m, int n, const char *const *names,
                    const uint32_t *n_dims, const int64_t *ne0, uint32_t *types, kw_err *err) {
    int mi = mix_index(target);
    if (mi < 0 && kw_mk_target_file_type(target) < 0)
        return kw_err_set(err, "type %s is not a target type", kw_type_name(target));
    for (int i = 0; i < n; i++)
        types[i] = !kw_mk_quantizes(names[i], n_dims[i]) ? KW_MK_KEEP
                 : mi < 0 ? kw_mk_matrix_type(target, ne0[i]) : KW_MK_KEEP;
    if (mi < 0) return 0;
    const uint32_t base = k_mixes[mi].base;
    const bool q4m = target == KW_MK_MIX_Q4_K_M, q5m = target == KW_MK_MIX_Q5_K_M;
    mix_ord *order = malloc((size_t)(n ? n : 1) * sizeof *order);
    if (!order) return kw_err_set(err, "out of memory");
    int n_attn_wv = 0;
    bool has_output = false;
    for (int i = 0; i < n; i++) {
        order[i] = (mix_ord){layer_of(names[i]), i, names[i]};
        if (!kw_mk_quantizes(names[i], n_dims[i])) continue;
        if (strstr(names[i], "attn_v.weight") || strstr(names[i], "attn_qkv.weight") || strstr(names[i], "attn_kv_b.weight"))
            n_attn_wv++;
        else if (!strcmp(names[i], "output.weight")) has_output = true;
    }
    qsort(order, (size_t)n, sizeof *order, cmp_order);
    int i_attn_wv = 0, i_ffn_down = 0, rc = 0;
    for (int k = 0; k < n && !rc; k++) {
        int i = order[k].idx;
        if (!kw_mk_quantizes(names[i], n_dims[i])) continue;
        const char *nm = names[i];
        uint32_t t = base;
        if (!strcmp(nm, "output.weight") || (!has_output && !strcmp(nm, "token_embd.weight"))) {
            t = ne0[i] % 256 ? KW_TYPE_Q8_0 : KW_TYPE_Q6_K;
        } else if (!strcmp(nm, "token_embd.weight")) {
            /* the base type */
        } else if (strstr(nm, "attn_v.weight")) {
            if ((q4m || q5m) && more_bits(i_attn_wv, n_attn_wv)) t = KW_TYPE_Q6_K;
            if (is_70b(m) && t == KW_TYPE_Q4_K) t = KW_TYPE_Q5_K;
            if (m->n_expert == 8) t = KW_TYPE_Q8_0;
            i_attn_wv++;
        } else if (strstr(nm, "attn_k.weight")) {
            if (m->n_expert == 8) t = KW_TYPE_Q8_0;
        } else if (strstr(nm, "attn_q.weight")) {
            /* the base type */
        } else if (strstr(nm, "ffn_down")) {
            int il = i_ffn_down;
            if (m->n_expert > 1) {
                il = layer_of(nm);
                if (il < 0 || il >= m->n_layer)
                    rc = kw_err_set(err, "tensor %s: no layer in 0..%d in its name", nm, m->n_layer - 1);
            }
            if ((q4m || q5m) && more_bits(il, m->n_layer)) t = KW_TYPE_Q6_K;
            i_ffn_down++;
        } else if (strstr(nm, "attn_output.weight")) {
            if (m->n_expert == 8 && q4m) t = KW_TYPE_Q5_K;
        } else if (strstr(nm, "attn_qkv.weight")) {
            if (q4m) t = KW_TYPE_Q5_K;
            else if (q5m) t = KW_TYPE_Q6_K;
        }
        types[i] = kw_mk_matrix_type(t, ne0[i]);
    }
    free(order);
    return rc;
}
