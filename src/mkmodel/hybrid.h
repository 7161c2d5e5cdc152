/* hybrid.h - the layer layout, checks and metadata of the gated-delta-net
 * hybrids mkmodel writes (qwen35: Qwen3.5 dense), kept inside mkmodel
 * (hybrid.c) rather than read from the architecture table (arch.h), whose
 * mixer and dimension kinds do not describe a delta-net layer. */
#ifndef KW_MK_HYBRID_H
#define KW_MK_HYBRID_H
#include "mkmodel.h"

struct kw_gguf_writer;

/* Whether mkmodel writes `arch` with the hybrid layout of hybrid.c. */
bool kw_mk_is_hybrid(const char *arch);
/* Checks the delta-net and rotary fields of a hybrid shape (the common
 * fields are checked by kw_mk_shape_check). */
int kw_mk_hybrid_check(const kw_mk_shape *s, kw_err *err);
/* Whether layer il runs full attention (the others are delta nets); an
 * MTP layer (il >= n_layer) always does. */
bool kw_mk_hybrid_is_attention(const kw_mk_shape *s, int il);
/* The rotary dims of an attention head (rope_dim, or head_dim when 0). */
int32_t kw_mk_hybrid_rope_dim(const kw_mk_shape *s);
/* rope.dimension_sections for n_rot rotated dims: the n_rot/2 pairs split
 * in thirds over the t, h and w channels, none on e ([11, 11, 10, 0] for
 * 64 dims, as Qwen3.5's mrope_section), so that every pair rotates with
 * the token position. */
void kw_mk_hybrid_sections(int32_t n_rot, int32_t out[4]);

/* One tensor of a layer: name, [ne0, ne1], and its initial distribution
 * mean + std * N(0, 1). Called in file order; a non-zero return stops. */
typedef int (*kw_mk_emit_fn)(void *ctx, const char *name, int64_t ne0, int64_t ne1, float mean, float std);
/* Emits blk.<il>.* of a hybrid layer: attn_norm, the mixer's tensors,
 * post_attention_norm, the dense SwiGLU (ARCHITECTURES.md order); an MTP
 * layer (il >= n_layer) adds nextn.eh_proj, .enorm, .hnorm and
 * .shared_head_norm, as ik_llama.cpp reads them. */
int kw_mk_hybrid_layer(const kw_mk_shape *s, int il, kw_mk_emit_fn emit, void *ctx);
/* The <arch>.* keys of the hybrid beyond the common ones. */
void kw_mk_hybrid_kvs(struct kw_gguf_writer *w, const kw_mk_shape *s);

#endif
