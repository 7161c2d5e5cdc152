/* kvwise/model.h - hyper-parameters, loading and the forward pass.
 *
 * kw_hparams_from_gguf() reads the shape of a model from metadata only (the
 * planner uses it without loading weights), as the architecture's
 * descriptor (arch.h) says. kw_model_load() maps the weights and binds every
 * tensor the descriptor lists. kw_forward() runs a batch of tokens that
 * may belong to different sequences (continuous batching): each token
 * writes its K/V at its position into its sequence's block table in the
 * paged pool (kv.h), then attends causally over positions 0..pos of that
 * sequence. The workspace (kw_ctx) is sized once for the largest batch and
 * context, through the accounted allocator. */
#ifndef KVWISE_MODEL_H
#define KVWISE_MODEL_H
#include "kvwise/arch.h"
#include "kvwise/common.h"
#include "kvwise/gguf.h"
#include "kvwise/kv.h"
#include "kvwise/tensor.h"
#include "kvwise/tokenizer.h"

typedef struct kw_hparams {
    const kw_arch_desc *arch;   /* its descriptor; NULL only for a config.json plan of an unknown model_type */
    char arch_name[32];         /* general.architecture, or the config.json model_type */
    char name[128];             /* general.name or "" */
    int32_t n_vocab;
    int32_t n_ctx_train;
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim_k;         /* attention.key_length (default n_embd / n_head) */
    int32_t head_dim_v;
    int32_t n_ff;
    int32_t n_kv_layers;        /* layers whose mixer keeps a KV cache */
    int32_t layer_interval;     /* N of the descriptor's every-Nth-layer rule (0: every layer runs the same mixer) */
    float rms_eps;
    float rope_base;
    float rope_scale;           /* linear scaling factor (1 = none) */
    int32_t rope_dim;
    bool rope_neox;             /* pairs (i, i+d/2) instead of (2i, 2i+1) */
    bool tied_output;           /* no output.weight: token_embd is the LM head */
    bool has_qkv_bias;          /* layers have attn_q/k/v.bias (required, or optional and present) */
    bool has_qk_norm;           /* layers have attn_q_norm / attn_k_norm */
    uint64_t weight_bytes;      /* sum of tensor data sizes */
    uint64_t n_params;
    /* mixture of experts (the descriptor's ffn is KW_FFN_MOE); 0 for a dense model */
    int32_t n_expert;           /* expert_count */
    int32_t n_expert_used;      /* expert_used_count: experts per token */
    int32_t n_ff_exp;           /* expert_feed_forward_length (default n_ff / n_expert_used) */
    int32_t n_ff_shexp;         /* expert_shared_feed_forward_length (default n_ff); 0 without a shared expert */
    bool has_shared_expert;     /* layers have the gated shared expert (KW_FEAT_SHARED_EXPERT) */
    uint64_t expert_bytes;      /* bytes of all expert tensors (KW_ROLE_EXPERTS) of all layers */
    /* gated delta net layers (KW_MIXER_GDN); 0 when the schedule has none */
    int32_t n_rec_layers;       /* layers with a recurrent state */
    int32_t ssm_d_state;        /* ssm.state_size: head dim of keys and values */
    int32_t ssm_n_group;        /* ssm.group_count: key heads */
    int32_t ssm_dt_rank;        /* ssm.time_step_rank: value heads (a multiple of the key heads) */
    int32_t ssm_d_inner;        /* ssm.inner_size = ssm_dt_rank * ssm_d_state */
    int32_t ssm_d_conv;         /* ssm.conv_kernel: convolution taps */
    uint64_t rec_state_bytes;   /* F32 recurrent state of one sequence over all GDN layers:
                                   (d_conv-1)*conv_dim + dt_rank*d_state^2 values per layer */
    int32_t rope_sections[4];   /* rope.dimension_sections (0s when absent) */
    int32_t n_nextn_layers;     /* nextn_predict_layers: trailing MTP blocks, not bound and not run */
} kw_hparams;

int kw_hparams_from_gguf(const kw_gguf *g, kw_hparams *hp, kw_err *err);

/* How a mixture of experts holds its expert tensors (dense models ignore it). */
typedef enum kw_experts_mode {
    KW_EXPERTS_FIRST_USE = 0,   /* packed the first time a token picks one (default): unused experts stay
                                   mapped, not resident */
    KW_EXPERTS_LOAD,            /* every expert packed at load: all resident from the start, no first-use
                                   cost (what ik_llama.cpp's -rtr does) */
    KW_EXPERTS_MAPPED,          /* read in place from the mapping, never packed (slower prefill) */
} kw_experts_mode;
/* "first-use", "load", "mapped" -> the mode; -1 for anything else. */
int kw_experts_mode_from_name(const char *name);
const char *kw_experts_mode_name(kw_experts_mode mode);

typedef struct kw_model_opts {
    bool mlock;                 /* lock weight pages in RAM (experts are then read in place: mapped) */
    bool no_repack;             /* keep weights as stored (no load-time repacking; experts mapped) */
    kw_experts_mode experts;    /* KW_EXPERTS_LOAD with mlock is an error */
    struct kw_progress *progress; /* NULL, or where the repacking reports layers done (progress.h) */
} kw_model_opts;

typedef struct kw_model kw_model;
kw_model *kw_model_load(const char *path, const kw_model_opts *opts, kw_err *err);
void kw_model_free(kw_model *m);
const kw_hparams *kw_model_hparams(const kw_model *m);
/* The tokenizer, or NULL when the file has none kvwise can use (the forward
 * pass still works; kw_model_tokenizer_error() says why). */
const kw_tokenizer *kw_model_tokenizer(const kw_model *m);
const char *kw_model_tokenizer_error(const kw_model *m);
const kw_gguf *kw_model_gguf(const kw_model *m);
/* The memory a decoded token streams: every layer's matrices and the LM
 * head, as their matmuls read them (packed copies where made: kw_matrix_span),
 * in the order the forward pass reads them; of a mixture-of-experts layer
 * n_expert_used experts of each expert tensor (experts 0..k-1 stand for the
 * ones a token picks). Writes at most max spans and returns how many there are. */
int kw_model_decode_spans(const kw_model *m, kw_mem_span *out, int max);
/* kw_measure_spans_bandwidth over those spans: how fast pool's threads read
 * the very pages decode reads (0 if none). */
double kw_model_read_bandwidth(const kw_model *m, kw_pool *pool, double seconds);
/* Mixture of experts: the expert tensors stay in the file mapping until a
 * token first chooses an expert; then the expert's three matrices are
 * packed for the active kernel family (one accounted KW_MEM_WEIGHTS block)
 * and the mapped pages they served are dropped. So an expert no token has
 * chosen is mapped but not resident, and a used one is held once, as its
 * packed copy. Under --no-repack or --mlock experts are read in place.
 * The forward pass marks each expert the first time a token uses it. */
typedef struct kw_expert_stats {
    uint64_t mapped_bytes;      /* every expert tensor of every layer */
    uint64_t used_bytes;        /* the experts some token has used (read at least once) */
    uint64_t resident_bytes;    /* what this process holds of the experts now: the mapped pages the
                                   kernel's page tables say are resident (kw_footprint_resident_bytes)
                                   plus packed_bytes; UINT64_MAX if it cannot tell */
    uint64_t packed_bytes;      /* the packed copies made so far (accounted, resident) */
    uint64_t pack_growth;       /* the most that packing the experts not packed yet can still add to the
                                   accounted weights: the budget's allowance (kw_experts_pack_growth over
                                   every expert, less what the copies made so far added); 0 when
                                   experts are not packed */
    int32_t n_experts;          /* layers x experts per layer */
    int32_t n_used;
    int32_t n_packed;           /* experts with packed copies */
    bool packing;               /* experts are packed at first use */
    bool locked;                /* --mlock: every expert is locked resident */
} kw_expert_stats;
/* false (and zeros) for a dense model. */
bool kw_model_expert_stats(const kw_model *m, kw_expert_stats *out);

/* The weight bytes one decode step reads, from the file's tensor table
 * (no weight is loaded; `kvwise plan` and the bench both use it): every
 * tensor except the token embedding, of which one row (the embedding is
 * read whole when it is also the LM head), and of a mixture of experts'
 * expert tensors n_expert_used / n_expert (the k experts a token picks).
 * With KW_DECODE_PACKED a matrix the model repacks at load (layer matrices,
 * the LM head) counts as its packed copy for the active kernel family
 * (kw_matrix_pack_bytes: the K-quant layouts are 2-3% larger than the
 * file's blocks), and with KW_DECODE_PACKED_EXPERTS so do the experts. */
enum { KW_DECODE_PACKED = 1, KW_DECODE_PACKED_EXPERTS = 2 };
/* Whether kw_model_load() repacks tensor t of a file of architecture a: every
 * layer matrix the descriptor lists and the LM head (output.weight, or the
 * token embedding when the output is tied to it). Experts are packed at first
 * use instead (kw_experts_pack). */
bool kw_model_repacks_tensor(const kw_arch_desc *a, const kw_gguf_tensor *t, bool tied);
uint64_t kw_decode_weight_bytes(const kw_gguf *g, const kw_hparams *hp, unsigned packed);

/* The KV layout this model needs for a given element type and block size. */
kw_kv_layout kw_model_kv_layout(const kw_model *m, uint32_t kv_type, int32_t block_tokens);
/* kv_type, or for KW_KV_TYPE_AUTO what it resolves to for this shape
 * (kw_kv_type_auto with the head dims and query heads per KV head). */
uint32_t kw_hparams_kv_type(const kw_hparams *hp, uint32_t kv_type, int32_t block_tokens);

/* The recurrent state of one sequence of a model with gated delta net
 * layers: hp->rec_state_bytes of F32 at `data` (per such layer, in layer
 * order: the last d_conv-1 convolution inputs, oldest first, [d_conv-1]
 * [conv_dim]; then one [d_state][d_state] matrix per value head, rows
 * indexing value dims), and how many tokens it has taken in. A state
 * moves only forward: a batch continues a sequence at exactly n_past, or
 * starts it again at position 0 (which zeroes it). Resuming elsewhere
 * means copying in a state saved at that position. */
typedef struct kw_rec_state {
    float *data;
    int32_t n_past;
} kw_rec_state;

typedef struct kw_batch {
    int32_t n_tokens;
    const int32_t *tokens;          /* [n_tokens] */
    const int32_t *pos;             /* [n_tokens] position in its sequence */
    const int32_t *seq;             /* [n_tokens] index into tables[] */
    kw_block_table *const *tables;  /* per sequence; must already cover every pos */
    const bool *want_logits;        /* [n_tokens]; NULL = only the last token */
    kw_rec_state *const *states;    /* per sequence, as tables[]: required when the model has
                                       recurrent layers (hp.n_rec_layers > 0), else unused */
} kw_batch;

typedef struct kw_ctx kw_ctx;
/* Workspace bytes for a batch of up to max_tokens tokens attending over up to max_ctx positions. */
size_t kw_ctx_workspace_bytes(const kw_hparams *hp, int32_t max_tokens, int32_t max_ctx, int n_threads);
kw_ctx *kw_ctx_create(const kw_model *m, kw_pool *pool, int32_t max_tokens, int32_t max_ctx, kw_err *err);
void kw_ctx_free(kw_ctx *c);
/* Runs the batch. Writes one row of n_vocab logits per token with
 * want_logits set, in batch order, to logits_out. Returns 0 or -1. */
int kw_forward(kw_ctx *c, kw_kv_pool *kv, const kw_batch *b, float *logits_out, kw_err *err);
/* The weight bytes c's forward passes have read so far (the bench's byte
 * counter): per pass every layer matrix and, when logits were asked for,
 * the LM head once, plus each expert the batch chose once (its gate, up and
 * down matrices); the embedding rows of the tokens are not counted. */
uint64_t kw_ctx_weight_bytes_read(const kw_ctx *c);

/* ---- single-sequence convenience (CLI, tests) ----
 * A session owns a KV pool, a block table, a workspace and (unless one is
 * given) a thread pool for one sequence of up to n_ctx positions. eval()
 * appends tokens at positions n_past.. in chunks of max_batch; the logits
 * of the last eval stay readable until the next one. */
typedef struct kw_session_opts {
    int32_t n_ctx;              /* positions (default: min(n_ctx_train, 4096)) */
    int32_t max_batch;          /* tokens per forward call (default 512) */
    uint32_t kv_type;           /* KW_TYPE_F32 (default 0 = F32), F16, Q8_0, KV_I16, KV_I8 or KW_KV_TYPE_AUTO */
    int32_t block_tokens;       /* default 32 */
    int n_threads;              /* default: physical cores */
    kw_pool *pool;              /* optional: use this thread pool (not owned) */
} kw_session_opts;

typedef struct kw_session kw_session;
kw_session *kw_session_create(const kw_model *m, const kw_session_opts *o, kw_err *err);
void kw_session_free(kw_session *s);
/* Runs tokens[0..n) at positions n_past..n_past+n-1. all_logits: keep a
 * row per token (else only the last token's). Returns 0 or -1. */
int kw_session_eval(kw_session *s, const int32_t *tokens, int32_t n, bool all_logits, kw_err *err);
/* Row i of the last eval (all_logits), or the last row when i < 0; NULL if none. */
const float *kw_session_logits(const kw_session *s, int32_t i);
int32_t kw_session_n_logits(const kw_session *s);   /* rows kept by the last eval */
int32_t kw_session_n_past(const kw_session *s);
int32_t kw_session_n_ctx(const kw_session *s);
/* kw_ctx_weight_bytes_read of the session's workspace. */
uint64_t kw_session_weight_bytes_read(const kw_session *s);
/* Forgets positions >= n_past (n_past <= current); the KV blocks are kept.
 * A model with recurrent layers can go back only to 0 or to the position
 * of the last kw_session_checkpoint (the next eval elsewhere fails). */
void kw_session_rewind(kw_session *s, int32_t n_past);
/* Saves the recurrent state at the current position, for kw_session_rewind
 * to restore (one saved copy, accounted; a no-op without recurrent layers). */
int kw_session_checkpoint(kw_session *s, kw_err *err);
const kw_model *kw_session_model(const kw_session *s);

#endif
