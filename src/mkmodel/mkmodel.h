/* mkmodel.h - random-weight GGUF models of a named or custom shape, with a
 * working byte-level BPE tokenizer trained on an embedded text, and the
 * re-encoding of a model's weights to another type (`kvwise mkmodel`,
 * `kvwise quantize`; also used by tests and benchmarks).
 *
 * Everything is deterministic: the same shape, type and seed give a
 * byte-identical file. Tensors are streamed to the writer row by row, so
 * peak memory is a few MiB whatever the model size. */
#ifndef KW_MKMODEL_H
#define KW_MKMODEL_H
#include "kvwise/common.h"
#include <stddef.h>

typedef struct kw_mk_shape {
    char arch[16];          /* a general.architecture of the table (arch.h) */
    char name[64];          /* general.name */
    int32_t n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
    float rope_base, rms_eps;
    bool tied;              /* no output.weight: token_embd is the LM head */
    /* The optional tensor groups the file gets: those the architecture's
     * descriptor requires (set by kw_mk_preset and kw_mk_shape_check). */
    bool qkv_bias;          /* attn_q/k/v biases */
    bool qk_norm;           /* per-head RMSNorm of q and k */
    /* mixture of experts (an architecture whose ffn is KW_FFN_MOE); 0 otherwise */
    int32_t n_expert, n_expert_used, n_ff_exp;
    int32_t n_ff_shexp;     /* the gated shared expert's width (qwen35moe; 0: n_ff); 0 without one */
    /* gated-delta-net hybrids (qwen35, hybrid.h; named as the loader's hparams); 0 for
     * the other architectures */
    int32_t ssm_d_state;    /* head dim of the delta net's keys and values (ssm.state_size) */
    int32_t ssm_n_group;    /* its key heads (ssm.group_count) */
    int32_t ssm_dt_rank;    /* its value heads (ssm.time_step_rank), a multiple of ssm_n_group */
    int32_t ssm_d_conv;     /* taps of its causal convolution (ssm.conv_kernel) */
    int32_t attn_interval;  /* layer i is full attention when (i + 1) % attn_interval == 0 */
    int32_t rope_dim;       /* rotated dims per attention head (rope.dimension_count); 0: head_dim */
    int32_t n_mtp;          /* multi-token-prediction layers after the n_layer main ones (0 or 1):
                               block_count = n_layer + n_mtp, nextn_predict_layers = n_mtp */
    const char *hf_tokenizer; /* NULL, or a directory with a Hugging Face tokenizer.json
                                 (+ tokenizer_config.json): its vocab, specials and chat
                                 template replace the trained ones; n_vocab becomes its size */
    struct kw_progress *progress; /* NULL, or where the writer reports the tensor bytes written (progress.h) */
} kw_mk_shape;

/* Fills *out with a preset ("tiny", "llama3.2-1b", "qwen2.5-0.5b",
 * "qwen3-0.6b", "tiny-moe", "qwen3-30b-a3b", "qwen3moe-bench", and the
 * Qwen3.5 hybrids "qwen35-tiny", "qwen3.5-0.8b", "qwen3.5-9b",
 * "qwen3.5-27b"); returns -1 (err lists the names) if unknown. */
int kw_mk_preset(const char *name, kw_mk_shape *out, kw_err *err);
/* Sets the tensor-group flags from the architecture's descriptor (after
 * --arch changed); checks the shape is consistent. An architecture the
 * table lacks is refused with the list of those it has. */
int kw_mk_shape_check(kw_mk_shape *s, kw_err *err);

/* The byte-level BPE vocabulary (GPT-2 byte-to-unicode strings). */
typedef struct kw_mk_vocab {
    char **tokens;          /* n_tokens strings */
    int32_t *types;         /* 1 normal, 3 control */
    char **merges;          /* n_merges "A B" strings */
    int32_t n_tokens, n_merges;
    int32_t eos, im_start, im_end;   /* <|endoftext|> is BOS and EOS */
} kw_mk_vocab;
/* Trains merges on the embedded text and pads with <|reserved_N|> up to
 * n_vocab (at least 259: 256 bytes + 3 specials). */
int kw_mk_vocab_build(int32_t n_vocab, kw_mk_vocab *v, kw_err *err);
void kw_mk_vocab_free(kw_mk_vocab *v);
const char *kw_mk_corpus(size_t *len);
extern const char kw_mk_chatml_template[];

/* Quantization targets (the `wtype` of kw_mk_write and kw_mk_quantize_file):
 * a kw_type (every quantized tensor that type, with the K-quant row
 * fallbacks of kw_mk_matrix_type) or a llama-quantize mix KW_MK_MIX_* (a
 * base type with higher-precision exceptions per tensor, mix.c). */
#define KW_MK_MIX_Q4_K_M 0x10000Fu
#define KW_MK_MIX_Q5_K_M 0x100011u
#define KW_MK_MIX_Q6_K   0x100012u
/* A mix name (q4_k_m q5_k_m q6_k, any case; "q6_k" is the mix) or a plain
 * type a file can be written in; -1 if neither. */
int64_t kw_mk_target_from_name(const char *name);
const char *kw_mk_target_name(uint32_t target);        /* "Q4_K_M", "q8_0", ... */
int kw_mk_target_file_type(uint32_t target);           /* general.file_type; -1: not a target */

/* Whether a quantization touches a tensor: 2-D+ "*weight" tensors except
 * norms, the MoE router (ffn_gate_inp), ssm_conv1d and positional ones. */
bool kw_mk_quantizes(const char *name, uint32_t n_dims);

/* What the mix rules read of the model. */
typedef struct kw_mk_mix_model {
    const char *arch;
    int n_layer, n_head, n_head_kv, n_expert;
} kw_mk_mix_model;

#define KW_MK_KEEP 0xFFFFFFFFu
/* The type of each of n tensors (any order) under target: types[i] is the
 * type to write, or KW_MK_KEEP for a tensor a quantization leaves as it is
 * (kw_mk_quantizes false). -1 (err) for an unknown target or an expert
 * tensor whose name has no layer. */
int kw_mk_mix_types(uint32_t target, const kw_mk_mix_model *m, int n, const char *const *names,
                    const uint32_t *n_dims, const int64_t *ne0, uint32_t *types, kw_err *err);

/* Writes the model. wtype: a quantization target for the weight matrices;
 * 1-D tensors (norms, biases) and the MoE router are F32. A K-quant type
 * falls back for matrices whose rows are not a multiple of 256 (Q4_K->Q5_0,
 * Q5_K->Q5_1, Q6_K->Q8_0, as llama.cpp does), a 32-block type to F16 when
 * rows are not a multiple of 32. */
int kw_mk_write(const kw_mk_shape *s, uint32_t wtype, uint64_t seed, const char *path, kw_err *err);

/* The type a matrix with rows of ncols values gets when `want` is asked. */
uint32_t kw_mk_matrix_type(uint32_t want, int64_t ncols);

/* Re-encodes IN's tensors that a quantization touches (kw_mk_quantizes) to
 * the target `wtype` (kw_mk_mix_types; the others are copied as they are)
 * and writes OUT with IN's metadata (general.file_type updated). progress
 * (NULL: none) gets the tensor bytes written (progress.h). */
struct kw_progress;
int kw_mk_quantize_file(const char *in, const char *out, uint32_t wtype, struct kw_progress *progress, kw_err *err);

#endif
