/* hybrid.h - the checks and metadata of the gated-delta-net hybrids
 * mkmodel writes (qwen35: Qwen3.5 dense) beyond their layers, which come
 * from the architecture table (arch.h) as every architecture's do. */
#ifndef KW_MK_HYBRID_H
#define KW_MK_HYBRID_H
#include "mkmodel.h"

struct kw_gguf_writer;

/* Whether `arch`'s layer schedule has gated delta nets (the table says). */
bool kw_mk_is_hybrid(const char *arch);
/* Checks the delta-net and rotary fields of a hybrid shape (the common
 * fields are checked by kw_mk_shape_check). */
int kw_mk_hybrid_check(const kw_mk_shape *s, kw_err *err);
/* The rotary dims of an attention head (rope_dim, or head_dim when 0). */
int32_t kw_mk_hybrid_rope_dim(const kw_mk_shape *s);
/* rope.dimension_sections for n_rot rotated dims: the n_rot/2 pairs split
 * in thirds over the t, h and w channels, none on e ([11, 11, 10, 0] for
 * 64 dims, as Qwen3.5's mrope_section), so that every pair rotates with
 * the token position. */
void kw_mk_hybrid_sections(int32_t n_rot, int32_t out[4]);

/* The <arch>.* keys of the hybrid beyond the common ones. */
void kw_mk_hybrid_kvs(struct kw_gguf_writer *w, const kw_mk_shape *s);

#endif
