/* kvwise/tensor.h - weight/KV element types (with the integer KV row
 * format), conversions, and the matmul entry point that the forward pass
 * calls.
 *
 * Type ids and block layouts are GGUF's (ggml's): one struct per block
 * format in src/tensor/quant_blocks.h. kw_matmul() quantizes the
 * activations to the weight type's "dot type" the way llama.cpp's CPU
 * backend does (F16 weights -> F16 activations, Q4_0/Q5_0/Q8_0 -> Q8_0,
 * Q4_1/Q5_1 -> Q8_1, K-quants -> Q8_K, BF16 -> BF16, F32 -> F32), then runs
 * the best kernel the CPU supports (chosen at run time; scalar reference
 * always available). */
#ifndef KVWISE_TENSOR_H
#define KVWISE_TENSOR_H
#include "kvwise/common.h"
#include <stdatomic.h>

typedef enum kw_type {
    KW_TYPE_F32 = 0, KW_TYPE_F16 = 1, KW_TYPE_Q4_0 = 2, KW_TYPE_Q4_1 = 3,
    KW_TYPE_Q5_0 = 6, KW_TYPE_Q5_1 = 7, KW_TYPE_Q8_0 = 8, KW_TYPE_Q8_1 = 9,
    KW_TYPE_Q2_K = 10, KW_TYPE_Q3_K = 11, KW_TYPE_Q4_K = 12, KW_TYPE_Q5_K = 13,
    KW_TYPE_Q6_K = 14, KW_TYPE_Q8_K = 15, KW_TYPE_BF16 = 30,
    KW_TYPE_KV_I16 = 39,   /* kvwise's own KV-cache types (kv.h), never valid in a GGUF file */
    KW_TYPE_KV_I8 = 40,
    KW_TYPE_COUNT = 41
} kw_type;

typedef struct kw_type_traits {
    const char *name;     /* "q4_0" */
    int32_t block_size;   /* values per block */
    int32_t type_size;    /* bytes per block */
    bool supported;       /* kvwise can compute with it */
} kw_type_traits;

/* NULL for ids that are not a known GGUF type. Unknown-but-valid ggml types
 * (e.g. IQ formats) return traits with supported = false. */
const kw_type_traits *kw_type_traits_get(uint32_t type);
const char *kw_type_name(uint32_t type);          /* "?" if unknown */
int kw_type_from_name(const char *name);          /* -1 if unknown; case-insensitive */
/* Bytes of a row of n values; 0 if n is not a multiple of the block size. */
size_t kw_row_bytes(uint32_t type, int64_t n);

float kw_f16_to_f32(uint16_t h);
uint16_t kw_f32_to_f16(float f);
float kw_bf16_to_f32(uint16_t h);
uint16_t kw_f32_to_bf16(float f);   /* round to nearest even */

/* Reference (scalar) conversions of one row of n values. */
void kw_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);
/* Quantizes with the reference quantizer (ggml's reference rounding). Returns bytes written. */
size_t kw_quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

/* ---- the i16 KV type (KW_TYPE_KV_I16, "--kv-type i16") ----
 * Each position's K (or V) row of one head is stored as integers with one
 * F32 scale: x ~= scale * x_int, scale = max|x| / QMAX, K with QMAX 4095 and
 * V with 8191 (the bounds that keep attention's integer dot products exact
 * in int32: see src/tensor/attn_i16.c). The head's region of a KV block (kv.h:
 * kw_kv_k/kw_kv_v for slot 0; block_tokens * row bytes) holds the
 * block_tokens scales first, then the integers laid out for 16-lane dot
 * products: K in groups of 16 slots, each group its dimension pairs in order,
 * each pair the group's 16 slots (so one group's K is head_dim_k * 32
 * contiguous bytes, read in address order); V pairs of slots across
 * dimensions. 16 keys of one dimension pair (K) or one slot pair of 16
 * dimensions (V) are 64 contiguous bytes. Needs block_tokens % 32 == 0,
 * head dims % 16 == 0 and head_dim_k <= 128. */
#define KW_KV_I16_KMAX 4095
#define KW_KV_I16_VMAX 8191

static inline float *kw_kv_i16_scales(void *region) { return (float *)region; }
static inline int16_t *kw_kv_i16_ints(void *region, int32_t block_tokens) {
    return (int16_t *)((uint8_t *)region + (size_t)block_tokens * sizeof(float));
}
/* Index of element (slot s, dimension d) within the integers of K rows of
 * hk values, and of V rows of hv values. */
static inline size_t kw_kv_i16_k_index(int32_t hk, int32_t s, int32_t d) {
    return (((size_t)(s / 16) * (size_t)(hk / 2) + (size_t)(d / 2)) * 16 + (size_t)(s % 16)) * 2 + (size_t)(d & 1);
}
static inline size_t kw_kv_i16_v_index(int32_t hv, int32_t s, int32_t d) {
    return ((size_t)(s / 2) * (size_t)hv + (size_t)d) * 2 + (size_t)(s & 1);
}
/* The one rounding rule of the type: out[i] = round-half-even(x[i] * (qmax / m)),
 * m = max |x|; returns the scale m / qmax (0, with all ints 0, for a zero
 * row or one whose qmax / m is not a finite float, m below ~1e-35; NaN,
 * with all ints 0, for a row holding a NaN or an infinity). qmax <= 8191. */
float kw_kv_i16_quantize(const float *x, int32_t n, float qmax, int16_t *out);
/* Writes position slot's K (v = 0) or V (v = 1) row x[0..n) of one head into its region. */
void kw_kv_i16_put(void *region, int32_t block_tokens, int32_t slot, const float *x, int32_t n, int v);
/* Reads it back as floats (scale * x_int); for tests and tools. */
void kw_kv_i16_get(const void *region, int32_t block_tokens, int32_t slot, float *x, int32_t n, int v);

/* ---- the i8 KV type (KW_TYPE_KV_I8, "--kv-type i8") ----
 * The i16 type's arithmetic with one byte per integer: K and V with QMAX
 * 127 (rounded as kw_kv_i16_quantize), the same block_tokens scales first,
 * then int8 integers: V at the i16 indexes (kw_kv_i16_v_index: pairs of
 * slots across dimensions), K in groups of 16 slots as i16 but in quads of
 * dimensions (kw_kv_i8_k_index), so that 16 keys of one quad are 64
 * contiguous bytes, one vpdpbusd operand. Attention quantizes q to 127 as
 * well (as llama.cpp quantizes q to q8_0 for a q8_0 K cache) and keeps the
 * probabilities' 13 bits (src/tensor/attn_i16.c). Half the bytes of i16
 * (and of f16) per token: the memory-saving type, about as precise as q8_0
 * (one scale per row of a head instead of per 32 values) and faster than
 * i16 at depth. Same shape limits as i16. */
#define KW_KV_I8_MAX 127
static inline size_t kw_kv_i8_k_index(int32_t hk, int32_t s, int32_t d) {
    return (((size_t)(s / 16) * (size_t)(hk / 4) + (size_t)(d / 4)) * 16 + (size_t)(s % 16)) * 4 + (size_t)(d & 3);
}
void kw_kv_i8_put(void *region, int32_t block_tokens, int32_t slot, const float *x, int32_t n, int v);
void kw_kv_i8_get(const void *region, int32_t block_tokens, int32_t slot, float *x, int32_t n, int v);
/* True for the two integer types (i16, i8): the same layout and kernels. */
static inline bool kw_kv_type_is_int(uint32_t type) { return type == KW_TYPE_KV_I16 || type == KW_TYPE_KV_I8; }
/* For either integer type (w8: i8), in a region's integers (kw_kv_i16_ints,
 * the same place for both): the index of element (slot, d) of K (v = 0) or
 * V (v = 1) rows of n values, and the integer at index e. */
static inline size_t kw_kv_int_index(int32_t slot, int32_t d, int32_t n, int v, bool w8) {
    return v ? kw_kv_i16_v_index(n, slot, d) : w8 ? kw_kv_i8_k_index(n, slot, d) : kw_kv_i16_k_index(n, slot, d);
}
/* Byte offset, in a region's integers, of the 16-slot K group holding slot
 * s: each group is its hk / 2 dimension pairs (i16) or hk / 4 quads (i8) of
 * 64 bytes, in order (kw_kv_i16_k_index, kw_kv_i8_k_index). */
static inline size_t kw_kv_int_k_group(int32_t hk, int32_t s, bool w8) {
    return (size_t)(s / 16) * (size_t)(w8 ? hk / 4 : hk / 2) * 64;
}
static inline int32_t kw_kv_int_at(const void *ints, bool w8, size_t e) {
    return w8 ? (int32_t)((const int8_t *)ints)[e] : (int32_t)((const int16_t *)ints)[e];
}

/* ---- a paged KV cache as the attention kernels read it ----
 * One layer of one sequence's KV blocks (the KV pool fills it:
 * kw_kv_attn_view, kv.h). Block b of the sequence, positions
 * [b * block_tokens, (b + 1) * block_tokens), is ids[b]; region(kv, ids[b],
 * head, v) is that block's K (v = 0) or V (v = 1) region of one KV head:
 * block_tokens rows of k_row_bytes / v_row_bytes (F32, F16, Q8_0), or the
 * integer row format above (i16, i8). */
typedef struct kw_attn_kv kw_attn_kv;
struct kw_attn_kv {
    uint32_t type;              /* KW_TYPE_F32, F16, Q8_0, KV_I16 or KV_I8 */
    int32_t block_tokens;
    size_t k_row_bytes, v_row_bytes;
    const int32_t *ids;
    int32_t layer;
    void *(*region)(const kw_attn_kv *kv, int32_t id, int32_t head, int v);
    void *pool;                 /* what region reads */
};

/* ---- thread pool ----
 * A fixed set of worker threads. kw_pool_run() runs fn(arg, ith, nth) once
 * per thread (the caller is thread 0) and returns when all are done.
 * Workers spin briefly, then sleep; no thread is created per call. */
typedef struct kw_pool kw_pool;
kw_pool *kw_pool_create(int n_threads);
void kw_pool_destroy(kw_pool *p);
int kw_pool_size(const kw_pool *p);
typedef void (*kw_task_fn)(void *arg, int ith, int nth);
void kw_pool_run(kw_pool *p, kw_task_fn fn, void *arg);
int kw_cpu_physical_cores(void);

/* ---- matmul ----
 * A weight matrix as stored in GGUF: `rows` output features, each a row of
 * `cols` input features (ne[0] = cols, ne[1] = rows). */
typedef struct kw_matrix {
    uint32_t type;
    int64_t rows, cols;
    size_t row_bytes;
    const void *data;
    void *packed;           /* optional repacked copy made at load time (accounted) */
} kw_matrix;

/* Load-time repacking. kw_matrix_pack() makes W->packed, a copy of the
 * weights laid out for the active kernel family (e.g. 16 rows interleaved
 * for AVX-512 VNNI), allocated as KW_MEM_WEIGHTS on huge pages; W->data
 * stays valid and is still read for rows the packed form does not cover.
 * Returns 0 when packed, 1 when this type/family has no packed form (W
 * unchanged), -1 on allocation failure (err set). kw_matmul uses a packed
 * copy only if it was made for the family running now. kw_matrix_unpack()
 * frees it. */
int kw_matrix_pack(kw_matrix *W, kw_err *err);
void kw_matrix_unpack(kw_matrix *W);
/* Bytes kw_matrix_pack() allocates for W (0: no packed form for this type,
 * shape and family). Reads W's shape only, never its data. */
size_t kw_matrix_pack_bytes(const kw_matrix *W);
/* The same for a rows x cols matrix of `type` named by its shape only (0
 * also when cols is not a whole number of the type's blocks or rows < 1):
 * what the planner and the byte counts use for a tensor of a file. */
size_t kw_shape_pack_bytes(uint32_t type, int64_t cols, int64_t rows);
/* Packs the n matrices (NULL entries and already packed ones skipped) into
 * one block, in order, each copy exactly as kw_matrix_pack makes it, so a
 * group read one after the other (a layer's matrices) is one run of huge
 * pages: no small-page head and tail per matrix. The block is the sum of
 * the kw_matrix_pack_bytes of the matrices that have a packed form. Sets
 * *block (NULL when none has one); returns 0, 1 (none has one) or -1 (err
 * set; nothing stays packed). kw_matrix_unpack() on a member only forgets
 * its copy; kw_matrices_unpack() frees the block and forgets the copies of
 * the matrices in Ws that live in it (those packed alone or into another
 * block keep theirs). */
int kw_matrices_pack(kw_matrix *const *Ws, int n, void **block, kw_err *err);
void kw_matrices_unpack(kw_matrix *const *Ws, int n, void *block);
/* Rows [0, n) of W served by its packed copy (0 when W is not packed). */
int64_t kw_matrix_packed_rows(const kw_matrix *W);
/* The whole pages inside [addr, addr + bytes): what can be dropped from a
 * mapping once a packed copy serves those bytes. Sets *start; returns the
 * length (0 if no whole page). Pure arithmetic: the planner calls it with
 * file offsets (the mapping is page aligned), the model with addresses. */
size_t kw_whole_pages(uint64_t addr, uint64_t bytes, uint64_t *start);

/* Scratch bytes kw_matmul needs for n activation rows against W. */
size_t kw_matmul_scratch_bytes(const kw_matrix *W, int64_t n);
/* Y[n][rows] = X[n][cols] . W^T. X and Y are row-major F32. scratch must
 * hold kw_matmul_scratch_bytes(W, n) bytes (64-byte aligned). */
void kw_matmul(kw_pool *pool, const kw_matrix *W, const float *X, int64_t n, float *Y, void *scratch);
/* Y[m] = X . W[m]^T for up to 4 matrices of one type and width in one pool
 * run (activations quantized once); same results as separate kw_matmul
 * calls, which it falls back to when the matrices differ. Scratch as for W[0]. */
void kw_matmul_multi(kw_pool *pool, const kw_matrix *const *W, int n_mats, const float *X, int64_t n, float *const *Y,
                     void *scratch);

/* ---- mixture of experts ----
 * A 3-D expert tensor as GGUF stores it ([cols, rows, n]): n matrices of
 * `rows` x `cols`, one after the other, expert e's rows starting at
 * data + e * stride. Experts are read in place from the mapping until they
 * are packed: the model packs an expert the first time a token chooses it
 * (kw_experts_pack), so the experts no token has used stay mapped but not
 * resident, and the used ones are read as the active kernel family's
 * packed copies (prefill through the tiled GEMM, decode through the packed
 * one-row tiles). `packed` is NULL (never packed) or n slots, each NULL or
 * expert e's packed copy, set once and read with acquire loads. */
typedef struct kw_experts {
    uint32_t type;
    int64_t rows, cols;
    size_t row_bytes;
    int32_t n;
    size_t stride;              /* bytes of one expert: rows * row_bytes */
    const void *data;
    void *_Atomic *packed;      /* NULL, or [n]: expert e's packed copy (kw_matrix.packed) or NULL */
} kw_experts;

/* Expert e as a matrix: its stored rows, with its packed copy if it has one. */
static inline kw_matrix kw_expert_matrix(const kw_experts *E, int32_t e) {
    kw_matrix m = {E->type, E->rows, E->cols, E->row_bytes, (const uint8_t *)E->data + (size_t)e * E->stride,
                   E->packed ? atomic_load_explicit(&E->packed[e], memory_order_acquire) : NULL};
    return m;
}

/* Packs expert e of the n_t expert tensors E (a layer's gate, up and down:
 * up to 3, each with its packed slots) for the active kernel family into one
 * accounted KW_MEM_WEIGHTS block (kw_matrices_pack), and publishes each
 * copy in its slot. Only a copy that serves every row is kept. Returns the
 * block (the caller owns it: kw_mem_free), or NULL when nothing was packed:
 * no packed form for these types here (*err untouched), out of memory (err
 * set), or expert e already has copies. Safe to call from several threads
 * for different experts; for the same expert the caller makes sure only
 * one does. */
void *kw_experts_pack(kw_experts *const *E, int n_t, int32_t e, kw_err *err);
/* The most that packing every expert of E adds to the process: per expert,
 * its packed copy plus a page (the block's header page and its rounding to
 * pages, counted for each tensor though the three share one), less the whole pages
 * of its stored rows the copy lets go (dropped from the mapping); addr is
 * where E's data starts, as an address or a file offset (the mapping is
 * page aligned, so both give the same pages). 0 when E's type has no packed
 * form for the active family. */
uint64_t kw_experts_pack_growth(const kw_experts *E, uint64_t addr);

/* The routed experts of a mixture-of-experts block for n tokens. Token i
 * chose the k experts sel[i*k + j] with weights w[i*k + j]; out[i] (n_embd
 * = down->rows values) is written, not added:
 *   out[i] = sum over j = 0..k-1 in order of w[i*k+j] * down_e(silu(gate_e . x_i) * (up_e . x_i)).
 * Tokens are grouped by expert, so each used expert's three matrices are
 * read once for all the tokens that chose it (decode reads only the k
 * selected experts; a batch reads each expert it uses once per step).
 * Activations are quantized to each expert type's dot type as kw_matmul
 * does; every product goes through the active set's gemm_experts kernels
 * (src/tensor/kernels.h), which compute each output the same whatever the
 * other rows, so a token's result does not depend on the rest of the batch
 * or the thread count. x and out may not overlap. */
typedef struct kw_moe_args {
    const kw_experts *gate, *up, *down;   /* gate/up: [n_ff_exp][n_embd] each; down: [n_embd][n_ff_exp] */
    const float *x;                       /* [n][n_embd] */
    int64_t n;
    int k;
    const int32_t *sel;                   /* [n][k] expert indices, each < gate->n */
    const float *w;                       /* [n][k] */
    float *out;                           /* [n][n_embd] */
} kw_moe_args;
/* Scratch bytes kw_moe_experts needs for up to n tokens with k of n_expert
 * experts each, whatever the experts' types (64-byte aligned). */
size_t kw_moe_scratch_bytes(int64_t n_embd, int64_t n_ff_exp, int32_t n_expert, int64_t n, int k);
/* Runs it; returns the bytes of expert weights read (each used expert's
 * three matrices once, as packed copies where they have them, else as
 * stored: kw_matrix_span), for the byte counters. */
uint64_t kw_moe_experts(kw_pool *pool, const kw_moe_args *a, void *scratch);

/* CPU features found at run time, and which kernel family is in use. */
typedef struct kw_cpu_info {
    bool avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512vnni, avx512bf16, avxvnni;
    bool intel;   /* cpuid vendor "GenuineIntel" */
} kw_cpu_info;
const kw_cpu_info *kw_cpu_info_get(void);
const char *kw_kernel_name(void);                 /* "avx512", "avx2", "scalar" */
/* How far ahead (bytes) one-row decode kernels (AVX-512 and AVX2 families)
 * prefetch packed Q4_0/Q8_0 weights into L2; 0: none. Chosen per CPU
 * vendor (Intel 4096, others 0; docs/PERFORMANCE.md, Decode);
 * KW_DECODE_PREFETCH=<bytes> (0..65536, a multiple of 64) overrides it,
 * read once with the CPU's features. */
size_t kw_decode_prefetch_bytes(void);
/* Forces a kernel family ("scalar", "avx2", "avx512"); for tests/bench. Returns -1 if unsupported here. */
int kw_kernel_force(const char *name);

/* Memory read bandwidth in bytes/s: the best pass of pool's threads (2 if
 * pool is NULL) streaming a buffer much larger than the caches for about
 * `seconds`. Returns 0 if the buffer cannot be allocated. */
double kw_measure_read_bandwidth(kw_pool *pool, double seconds);

/* The same measure over memory the caller names (e.g. a model's weights:
 * kw_model_decode_spans): pool's threads each read one contiguous slice of
 * every span (in 256-byte units on 64-byte aligned addresses; a span
 * shorter than that is skipped), spans in order, plain and non-temporal
 * passes alternating for about `seconds`; the best pass in bytes/s. 0 when
 * nothing is readable or pool is NULL. */
typedef struct kw_mem_span { const void *p; size_t bytes; } kw_mem_span;
double kw_measure_spans_bandwidth(kw_pool *pool, const kw_mem_span *spans, int n, double seconds);
/* The bytes a matmul against W reads: its packed copy when it has one,
 * else its rows as stored. */
kw_mem_span kw_matrix_span(const kw_matrix *W);

#endif
