/* hybrid.c - what mkmodel adds for the gated-delta-net hybrids (qwen35,
 * Qwen3.5 dense) beyond the layers the architecture table lists (arch.c
 * gives their tensors, shapes and order; mkmodel.c writes them): the shape
 * checks of the delta-net and rotary fields, the rotary sections, and the
 * qwen35.* metadata (rope.dimension_sections, ssm.*, the attention
 * interval, nextn_predict_layers), as ../shared/conformance/ARCHITECTURES.md
 * describes them and ik_llama.cpp loads them. */
#include "hybrid.h"
#include "kvwise/arch.h"
#include "kvwise/gguf.h"
#include <stdio.h>
#include <string.h>

bool kw_mk_is_hybrid(const char *arch) {
    const kw_arch_desc *a = arch ? kw_arch_find(arch) : NULL;
    return a && (a->layers.mixer == KW_MIXER_GDN || a->layers.every_nth == KW_MIXER_GDN);
}

int32_t kw_mk_hybrid_rope_dim(const kw_mk_shape *s) { return s->rope_dim > 0 ? s->rope_dim : s->head_dim; }

void kw_mk_hybrid_sections(int32_t n_rot, int32_t out[4]) {
    int32_t pairs = n_rot / 2;
    out[0] = (pairs + 2) / 3;
    out[1] = (pairs + 1) / 3;
    out[2] = pairs / 3;
    out[3] = 0;
}

int kw_mk_hybrid_check(const kw_mk_shape *s, kw_err *err) {
    if (s->ssm_d_state < 1 || s->ssm_n_group < 1 || s->ssm_dt_rank < 1 || s->ssm_d_conv < 1)
        return kw_err_set(err, "%s needs positive --ssm-state, --ssm-groups, --ssm-heads (delta-net shape)", s->arch);
    if (s->ssm_dt_rank % s->ssm_n_group)
        return kw_err_set(err, "ssm heads (%d) must be a multiple of ssm groups (%d): value heads share key heads",
                          s->ssm_dt_rank, s->ssm_n_group);
    if (s->ssm_d_conv > 16) return kw_err_set(err, "ssm conv kernel %d out of range (1..16)", s->ssm_d_conv);
    if ((int64_t)s->ssm_d_state * s->ssm_dt_rank > (1 << 20) || (int64_t)s->ssm_d_state * s->ssm_n_group > (1 << 20))
        return kw_err_set(err, "shape too large");
    if (s->n_mtp < 0 || s->n_mtp > 1)
        return kw_err_set(err, "mtp layers %d out of range (0..1: the MTP tensors are read from the last layer)", s->n_mtp);
    if (s->attn_interval < 1 || s->attn_interval > 1024)
        return kw_err_set(err, "attention interval %d out of range (1..1024)", s->attn_interval);
    int32_t n_rot = kw_mk_hybrid_rope_dim(s);
    if (n_rot % 2 || n_rot > s->head_dim)
        return kw_err_set(err, "rope dims %d must be even and at most head_dim %d", n_rot, s->head_dim);
    return 0;
}

static void set_u32(kw_gguf_writer *w, const char *arch, const char *key, uint32_t v) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    kw_gguf_writer_set_u32(w, k, v);
}

void kw_mk_hybrid_kvs(kw_gguf_writer *w, const kw_mk_shape *s) {
    const char *a = s->arch;
    int32_t sec[4];
    kw_mk_hybrid_sections(kw_mk_hybrid_rope_dim(s), sec);
    char k[128];
    snprintf(k, sizeof k, "%s.rope.dimension_sections", a);
    kw_gguf_writer_set_arr(w, k, KW_GGUF_INT32, sec, 4);
    set_u32(w, a, "ssm.conv_kernel", (uint32_t)s->ssm_d_conv);
    set_u32(w, a, "ssm.state_size", (uint32_t)s->ssm_d_state);
    set_u32(w, a, "ssm.group_count", (uint32_t)s->ssm_n_group);
    set_u32(w, a, "ssm.time_step_rank", (uint32_t)s->ssm_dt_rank);
    set_u32(w, a, "ssm.inner_size", (uint32_t)(s->ssm_d_state * s->ssm_dt_rank));
    set_u32(w, a, "full_attention_interval", (uint32_t)s->attn_interval);
    if (s->n_mtp > 0) set_u32(w, a, "nextn_predict_layers", (uint32_t)s->n_mtp);
}
