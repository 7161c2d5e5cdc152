/* hybrid.c - the Qwen3.5 hybrid layout mkmodel writes (hybrid.h): which
 * layers are gated delta nets and which gated full attention, the tensors
 * of each with their shapes and initial distributions, the shape checks,
 * the optional multi-token-prediction (MTP) layer after the main ones, and
 * the qwen35.* metadata (rotary sections, ssm.*, the attention interval,
 * nextn_predict_layers), as ../shared/conformance/ARCHITECTURES.md describes them and
 * ik_llama.cpp loads them.
 *
 * Initial values: matrices N(0, 0.02^2) and norm gains 1 + N(0, 0.05^2) as
 * for every architecture; the delta net's decay rate ssm_a is -1 +
 * N(0, 0.2^2), negative everywhere (the Irwin-Hall draws stop at 3.46
 * sigma), so the decay exp(softplus(.) * a) stays in (0, 1); ssm_dt.bias is
 * N(0, 0.02^2) like the other biases; the convolution taps ssm_conv1d are
 * N(0, 0.3^2), about a 4-tap kernel's default initial scale, so the
 * convolution does not shrink its input 50-fold. */
#include "hybrid.h"
#include "kvwise/gguf.h"
#include <stdio.h>
#include <string.h>

#define STD_MATRIX 0.02f
#define STD_BIAS 0.02f
#define STD_NORM_GAIN 0.05f
#define STD_CONV 0.3f
#define MEAN_DECAY -1.0f
#define STD_DECAY 0.2f

bool kw_mk_is_hybrid(const char *arch) { return arch && !strcmp(arch, "qwen35"); }

int32_t kw_mk_hybrid_rope_dim(const kw_mk_shape *s) { return s->rope_dim > 0 ? s->rope_dim : s->head_dim; }

bool kw_mk_hybrid_is_attention(const kw_mk_shape *s, int il) {
    return il >= s->n_layer || (s->attn_interval > 0 && (il + 1) % s->attn_interval == 0);
}

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

/* blk.<il>.<what> into n. */
static const char *lname(char *n, size_t cap, int il, const char *what) {
    snprintf(n, cap, "blk.%d.%s", il, what);
    return n;
}

/* The gated delta net: fused q/k/v projection, the z gate, the causal
 * convolution, the decay and update-rate inputs, the output norm and
 * projection. */
static int emit_delta_net(const kw_mk_shape *s, int il, kw_mk_emit_fn emit, void *ctx) {
    int64_t E = s->n_embd, d = s->ssm_d_state, key_dim = d * s->ssm_n_group, value_dim = d * s->ssm_dt_rank;
    int64_t conv_dim = 2 * key_dim + value_dim, Hv = s->ssm_dt_rank;
    char n[64];
    int rc = emit(ctx, lname(n, sizeof n, il, "attn_qkv.weight"), E, conv_dim, 0, STD_MATRIX);
    rc |= emit(ctx, lname(n, sizeof n, il, "attn_gate.weight"), E, value_dim, 0, STD_MATRIX);
    rc |= emit(ctx, lname(n, sizeof n, il, "ssm_conv1d.weight"), s->ssm_d_conv, conv_dim, 0, STD_CONV);
    rc |= emit(ctx, lname(n, sizeof n, il, "ssm_dt.bias"), Hv, 1, 0, STD_BIAS);
    rc |= emit(ctx, lname(n, sizeof n, il, "ssm_a"), Hv, 1, MEAN_DECAY, STD_DECAY);
    rc |= emit(ctx, lname(n, sizeof n, il, "ssm_beta.weight"), E, Hv, 0, STD_MATRIX);
    rc |= emit(ctx, lname(n, sizeof n, il, "ssm_alpha.weight"), E, Hv, 0, STD_MATRIX);
    rc |= emit(ctx, lname(n, sizeof n, il, "ssm_norm.weight"), d, 1, 1, STD_NORM_GAIN);
    rc |= emit(ctx, lname(n, sizeof n, il, "ssm_out.weight"), value_dim, E, 0, STD_MATRIX);
    return rc;
}

/* Gated full attention: attn_q holds each head's query and gate values. */
static int emit_attention(const kw_mk_shape *s, int il, kw_mk_emit_fn emit, void *ctx) {
    int64_t E = s->n_embd, hd = s->head_dim, q = (int64_t)s->n_head * hd, kv = (int64_t)s->n_head_kv * hd;
    char n[64];
    int rc = emit(ctx, lname(n, sizeof n, il, "attn_q.weight"), E, 2 * q, 0, STD_MATRIX);
    rc |= emit(ctx, lname(n, sizeof n, il, "attn_k.weight"), E, kv, 0, STD_MATRIX);
    rc |= emit(ctx, lname(n, sizeof n, il, "attn_v.weight"), E, kv, 0, STD_MATRIX);
    rc |= emit(ctx, lname(n, sizeof n, il, "attn_output.weight"), q, E, 0, STD_MATRIX);
    rc |= emit(ctx, lname(n, sizeof n, il, "attn_q_norm.weight"), hd, 1, 1, STD_NORM_GAIN);
    rc |= emit(ctx, lname(n, sizeof n, il, "attn_k_norm.weight"), hd, 1, 1, STD_NORM_GAIN);
    return rc;
}

int kw_mk_hybrid_layer(const kw_mk_shape *s, int il, kw_mk_emit_fn emit, void *ctx) {
    int64_t E = s->n_embd, F = s->n_ff;
    char n[64];
    int rc = emit(ctx, lname(n, sizeof n, il, "attn_norm.weight"), E, 1, 1, STD_NORM_GAIN);
    rc |= kw_mk_hybrid_is_attention(s, il) ? emit_attention(s, il, emit, ctx) : emit_delta_net(s, il, emit, ctx);
    /* the pre-FFN norm, named post_attention_norm in these files */
    rc |= emit(ctx, lname(n, sizeof n, il, "post_attention_norm.weight"), E, 1, 1, STD_NORM_GAIN);
    rc |= emit(ctx, lname(n, sizeof n, il, "ffn_gate.weight"), E, F, 0, STD_MATRIX);
    rc |= emit(ctx, lname(n, sizeof n, il, "ffn_up.weight"), E, F, 0, STD_MATRIX);
    rc |= emit(ctx, lname(n, sizeof n, il, "ffn_down.weight"), F, E, 0, STD_MATRIX);
    if (il >= s->n_layer) {   /* MTP: the projection of [embedding, hidden] and its norms */
        rc |= emit(ctx, lname(n, sizeof n, il, "nextn.eh_proj.weight"), 2 * E, E, 0, STD_MATRIX);
        rc |= emit(ctx, lname(n, sizeof n, il, "nextn.enorm.weight"), E, 1, 1, STD_NORM_GAIN);
        rc |= emit(ctx, lname(n, sizeof n, il, "nextn.hnorm.weight"), E, 1, 1, STD_NORM_GAIN);
        rc |= emit(ctx, lname(n, sizeof n, il, "nextn.shared_head_norm.weight"), E, 1, 1, STD_NORM_GAIN);
    }
    return rc;
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
