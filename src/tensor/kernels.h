/* kernels.h - internal interface between the kernel families (scalar
 * reference, AVX2+FMA, AVX-512) and their callers: kw_matmul, the forward
 * pass's attention and activations (src/model/forward.c) and the KV type
 * "auto" (src/kv/pool.c), which ask only kw_kernels_active().
 *
 * A kernel set holds activation quantizers indexed by dot type (F16, BF16,
 * Q8_0, Q8_1, Q8_K), GEMM kernels indexed by weight type, and the
 * attention and activation entries (attn.h). Families start from the
 * scalar set and override what they implement, so every entry is always
 * callable. Activation quantizers give bit-identical bytes in every family
 * (same formula, same rounding); kernels differ only in float summation
 * order (and attention in its exp, attn.h). */
#ifndef KW_TENSOR_KERNELS_H
#define KW_TENSOR_KERNELS_H
#include "kvwise/tensor.h"
#include "tensor/attn.h"

/* Converts one row of n floats to the dot type (n a multiple of its block). */
typedef void (*kw_act_quant_fn)(const float *x, void *dst, int64_t n);

/* Y[i*ldy + r] = dot(W row r, X row i) for r in [r0, r1), i in [0, nx).
 * X rows are in W's dot type, x_stride bytes apart. Each output must be
 * computed by the same sequence of operations whatever r0/r1/nx are, so
 * that results do not depend on the thread split. */
typedef void (*kw_gemm_fn)(const kw_matrix *W, int64_t r0, int64_t r1, const void *X,
                           size_t x_stride, int64_t nx, float *Y, int64_t ldy);

/* Where kw_pack_alloc puts a packed copy. A NULL arena: a block of its own.
 * Otherwise the next slot of a block shared by several matrices (pack.c
 * kw_matrices_pack): with base set, the copy goes at base + used; with base
 * NULL the slot is only counted (used grows by its bytes, nothing is
 * allocated or written), so a first pass sizes the block. */
typedef struct kw_pack_arena {
    uint8_t *base;
    size_t cap, used;
} kw_pack_arena;

/* Makes W->packed for this family (in arena a, see above); returns 0, 1
 * (no packed form) or -1. A sizing pass (a->base NULL) returns 0 or 1 and
 * leaves W unchanged. */
typedef int (*kw_pack_fn)(kw_matrix *W, kw_pack_arena *a, kw_err *err);

/* A family's attention. The forward pass runs it through kw_attn_token /
 * kw_attn_tiles / kw_attn_tile (below), which ask these entries. ops: the
 * row operations and exp of the per-token path (F32, F16, Q8_0 KV). The
 * kernels run where their predicate holds, else the portable path:
 * decode: one token x the G heads, F32/F16 KV, the bits of the per-token
 * path with ops; tile: a prefill tile of F32/F16 KV (scr:
 * kw_attn_tile_floats), each token's output those bits too; integer:
 * i16/i8 KV, nq = a->n_tok * G queries (scr: kw_attn_i16_floats), the bits
 * of kw_attn_i16_ref. The scalar set's predicates say no; its kernels are
 * the portable paths. */
typedef struct kw_attn_kernels {
    kw_attn_ops ops;
    bool (*decode_supported)(uint32_t kv_type, int G, int hk, int hv);
    void (*decode)(const kw_attn_args *a, float *scr, int32_t max_ctx);
    bool (*tile_supported)(uint32_t kv_type, int G, int hk, int hv);
    void (*tile)(const kw_attn_args *a, float *scr, int32_t max_ctx);
    bool (*integer_supported)(int nq, int hk, int hv);
    void (*integer)(const kw_attn_args *a, float *scr, int32_t max_ctx);
    /* The KV type "auto" picks (kw_kv_type_auto, kv.h) where the shapes
     * allow it: an integer type where the family has integer kernels
     * (integer_supported for the query heads of a KV head), else
     * KW_TYPE_F16 (the portable integer path is much slower than F16
     * attention). */
    uint32_t kv_type_auto;
} kw_attn_kernels;
/* Each family's (attn.c, attn_avx2.c, attn_avx512.c) */
extern const kw_attn_kernels kw_attn_kernels_scalar, kw_attn_kernels_avx2, kw_attn_kernels_avx512;

typedef struct kw_kernel_set {
    const char *name;
    kw_act_quant_fn quant[KW_TYPE_COUNT];
    /* Optional, per dot type: a quantizer for runs whose every matrix has
     * all its rows in packed format packed_fmt[dt]. Same layout as quant's,
     * but it writes only the parts the packed kernels read (the rest of
     * the row is left as it was), so a family whose unpacked kernels need
     * another form of the activations does not pay for it when no matrix
     * uses them. */
    kw_act_quant_fn quant_packed[KW_TYPE_COUNT];
    uint32_t packed_fmt[KW_TYPE_COUNT];
    kw_gemm_fn gemm[KW_TYPE_COUNT];
    /* Optional: W's packed copy stored in K-panels (each row's blocks cut
     * into panels of kw_pack_hdr.panel_nb, panel by panel over all rows):
     * panels(W) is how many (1: not in panels, and then gemm_panel is not
     * called), and gemm_panel[type] computes rows [r0, r1) over panel p
     * only, adding into Y's values when p > 0. Panels 0..n-1 of a row in
     * order give the bits gemm gives (the same operations: the sum is
     * carried through Y as the float it is). */
    int (*panels)(const kw_matrix *W);
    void (*gemm_panel[KW_TYPE_COUNT])(const kw_matrix *W, int p, int64_t r0, int64_t r1, const void *X,
                                       size_t x_stride, int64_t nx, float *Y, int64_t ldy);
    kw_pack_fn pack;
    /* Per weight type: the GEMM of matrices read in place as the file
     * stores them, never packed (the experts of a MoE block: kw_moe_experts,
     * moe.c); same contract as gemm. Every family has an entry for every
     * type it has a gemm for (the scalar one is the reference). */
    kw_gemm_fn gemm_experts[KW_TYPE_COUNT];
    /* Optional: a sum of the bytes [p, p + bytes) (p 64-byte aligned, bytes
     * a multiple of 256) read with non-temporal loads, as the family's
     * decode kernels read packed weights; the bandwidth probe times it. */
    uint64_t (*read_nt)(const void *p, size_t bytes);

    /* attention (kw_attn_kernels above) */
    kw_attn_kernels attn;
    /* gate = silu(gate) * up over n values (the FFN) */
    void (*swiglu)(float *gate, const float *up, int64_t n);
} kw_kernel_set;

/* Header at the start of every packed buffer: kernels use a packed copy
 * only when format matches theirs. Packed data starts 64 bytes in. */
typedef struct kw_pack_hdr {
    uint32_t magic;          /* KW_PACK_MAGIC */
    uint32_t format;         /* family-specific id */
    int64_t packed_rows;     /* rows [0, packed_rows) are in the packed form */
    int64_t nb;              /* blocks per row */
    uint32_t shared;         /* a slot of a shared block (kw_matrices_pack): not freed alone */
    uint32_t panel_nb;       /* 0, or the blocks of each K-panel when the rows are stored panel by panel */
    uint64_t block_off;      /* shared: the slot's offset in its block (kw_matrices_unpack knows its own) */
} kw_pack_hdr;
#define KW_PACK_MAGIC 0x6b77706bu
#define KW_PACK_HDR_BYTES 64

/* W's packed header if W has a packed copy in format fmt, else NULL. */
static inline const kw_pack_hdr *kw_packed_hdr(const kw_matrix *W, uint32_t fmt) {
    const kw_pack_hdr *h = W->packed;
    return h && h->magic == KW_PACK_MAGIC && h->format == fmt ? h : NULL;
}

/* pack.c: a packed copy of W with its header filled in, zero-filled, on
 * huge pages (KW_MEM_WEIGHTS; a block of its own or a slot of arena a);
 * its data starts KW_PACK_HDR_BYTES in. NULL with err set when out of
 * memory, and NULL without error in a sizing pass: the family's pack
 * function then returns kw_pack_missing(a). */
uint8_t *kw_pack_alloc(const kw_matrix *W, kw_pack_arena *a, uint32_t format, int64_t packed_rows, int64_t nb,
                       size_t data_bytes, kw_err *err);
/* The packed Q4_0 / Q8_0 group of `rows` rows (16: the AVX-512 family,
 * 8: AVX2), as a rows x (4 or 8) transpose of 32-bit words per block: part
 * k (4 * rows bytes) holds in word L row L's k-th quant word. Blocks go in
 * runs of 32 / rows (2 or 4), a run being the run's blocks' F16 row scales
 * (2 * rows bytes each: one 64-byte line in all) and then their quants, so
 * every block's quants start on a cache line and decode can read them with
 * non-temporal loads (vmovntdqa, which needs the alignment); a group's last
 * run is filled up with zero blocks. */
static inline size_t kw_q0_quant_bytes(int rows, int q4) { return (size_t)rows * (q4 ? 16 : 32); }
static inline int64_t kw_q0_run_blocks(int rows) { return 32 / rows; }
static inline size_t kw_q0_run_bytes(int rows, int q4) {
    return 64 + (size_t)kw_q0_run_blocks(rows) * kw_q0_quant_bytes(rows, q4);
}
static inline size_t kw_q0_group_bytes(int rows, int q4, int64_t nb) {
    return (size_t)((nb + kw_q0_run_blocks(rows) - 1) / kw_q0_run_blocks(rows)) * kw_q0_run_bytes(rows, q4);
}
static inline const uint8_t *kw_q0_quants(const uint8_t *grp, int rows, int q4, int64_t b) {
    const int64_t R = kw_q0_run_blocks(rows);
    return grp + (size_t)(b / R) * kw_q0_run_bytes(rows, q4) + 64 + (size_t)(b % R) * kw_q0_quant_bytes(rows, q4);
}
static inline const uint16_t *kw_q0_scales(const uint8_t *grp, int rows, int q4, int64_t b) {
    const int64_t R = kw_q0_run_blocks(rows);
    return (const uint16_t *)(grp + (size_t)(b / R) * kw_q0_run_bytes(rows, q4)) + (size_t)rows * (size_t)(b % R);
}
/* Asks for the 64-byte lines of [p, p + bytes) into L2 (prefetcht1 on
 * x86): the one-row decode prefetch of both packed families, p being
 * kw_decode_prefetch_bytes ahead of what they read. Changes no result. */
static inline void kw_prefetch_l2(const void *p, size_t bytes) {
    for (size_t l = 0; l < bytes; l += 64) __builtin_prefetch((const char *)p + l, 0, 2);
}
/* The decode lanes of the packed families (kernels_avx512.c x16_q8_lanes,
 * kernels_avx2.c x8_lanes): groups [g0, g1) cut into S contiguous lanes,
 * lane s starting at first[s]. Returns the groups every lane has; the first
 * *extra lanes ((g1 - g0) % S) have one more, at first[s] + the result. */
static inline int64_t kw_lanes_split(int64_t g0, int64_t g1, int S, int64_t *first, int64_t *extra) {
    int64_t len = (g1 - g0) / S;
    *extra = (g1 - g0) % S;
    for (int s = 0; s < S; s++) first[s] = g0 + s * len + (s < *extra ? s : *extra);
    return len;
}
/* pack.c: block b of Q4_0/Q8_0 rows rows*g .. rows*g + rows-1 (W's type)
 * into the group at grp (the layout above), each quant word xor xor_word.
 * For Q4_0 the byte holding values 4j+t (low nibble) and 16+4j+t (high) is
 * exactly stored byte 4j+t. The AVX-512 (16 rows, Q8_0 words xor
 * 0x80808080: +128 per byte) and AVX2 (8 rows, as stored) families pack
 * with it. */
void kw_pack_q0_group_block(const kw_matrix *W, int rows, int64_t g, int64_t b, uint32_t xor_word, uint8_t *grp);
/* The same, stored as block `at` of the group at grp (a K-panel of the
 * group, whose first block is b - at: kw_pack_hdr.panel_nb). */
void kw_pack_q0_group_block_at(const kw_matrix *W, int rows, int64_t g, int64_t b, int64_t at, uint32_t xor_word,
                               uint8_t *grp);

/* What a pack function returns when kw_pack_alloc gave NULL: 0 in a sizing pass, else -1. */
static inline int kw_pack_missing(const kw_pack_arena *a) { return a && !a->base ? 0 : -1; }

/* bandwidth.c: thread ith's part of span s in kw_measure_spans_bandwidth:
 * the span's 64-byte aligned interior cut into 256-byte units, one
 * contiguous run of units per thread (the last ones may get none). Sets
 * *p and returns the bytes (0: nothing for this thread). */
size_t kw_span_slice(kw_mem_span s, int ith, int nth, const char **p);

/* matmul.c: the groups a streaming part's next piece takes when `left`
 * remain (1..min(left, piece)); exposed for its test. */
uint32_t kw_mm_piece_groups(uint32_t left, uint32_t piece);
/* matmul.c: the groups a helper takes from the back of a part of a matrix
 * in np panels whose owner is in panel p with groups [f, e) left there
 * (f < e); the helper computes panels p..np-1 of them. Exposed for its test. */
uint32_t kw_mm_help_groups(uint32_t p, uint32_t f, uint32_t e, int np, uint32_t piece);

/* One step of a spin-wait (x86 `pause`; nothing elsewhere): the pool's
 * waits and the streaming split's wait for an owner between panels. */
static inline void kw_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* The activation type llama.cpp's CPU backend uses for a weight type. */
uint32_t kw_dot_type(uint32_t wtype);

/* Each family's matmul entries (cpu.c adds its attention and SwiGLU). */
void kw_kernels_scalar_init(kw_kernel_set *k);
void kw_kernels_avx2_init(kw_kernel_set *k);
void kw_kernels_avx512_init(kw_kernel_set *k);

/* attn.c: the forward pass's attention through set ks (scr as the entries
 * above say; the forward pass sizes it for all). kw_attn_token: one token
 * (a->n_tok 1) x the G heads of a->kvh, any KV type. kw_attn_tiles: whether
 * prefill attention of this shape runs in tiles of kw_attn_tile_tokens(G)
 * consecutive tokens of one sequence (else token by token); kw_attn_tile
 * runs one where it does, each token's output the bits kw_attn_token gives. */
void kw_attn_token(const kw_kernel_set *ks, const kw_attn_args *a, float *scr, int32_t max_ctx);
bool kw_attn_tiles(const kw_kernel_set *ks, uint32_t kv_type, int G, int hk, int hv);
void kw_attn_tile(const kw_kernel_set *ks, const kw_attn_args *a, float *scr, int32_t max_ctx);

/* The active set (chosen from CPU features, or forced). */
const kw_kernel_set *kw_kernels_active(void);

#define KW_KERNEL_FAMILIES 3   /* family index: 0 scalar, 1 avx2, 2 avx512 */

#ifdef KW_TESTCTL
/* cpu.c, test builds: family i's set (NULL when this CPU or build has
 * none), and a set made active in place of the chosen one. */
const kw_kernel_set *kw_kernels_family(int i);
void kw_kernels_install(const kw_kernel_set *k);

/* kernels_testctl.c, test builds: counts the calls made through the active
 * set by entry and by the family that provides the entry (the first family
 * whose set holds that function: an entry the AVX-512 family inherits from
 * the scalar one counts as scalar). start() installs a counting copy of the
 * set active now (each entry wraps the real one; results unchanged) and
 * zeroes the counts; it returns -1, installing nothing, when the set has an
 * entry the copy cannot wrap. stop() makes the wrapped set active again. */
enum {
    KW_KSLOT_QUANT, KW_KSLOT_QUANT_PACKED, KW_KSLOT_GEMM, KW_KSLOT_GEMM_PANEL, KW_KSLOT_PANELS, KW_KSLOT_PACK,
    KW_KSLOT_READ_NT, KW_KSLOT_ATTN_DOT_F32, KW_KSLOT_ATTN_DOT_F16, KW_KSLOT_ATTN_DOT_Q8_0, KW_KSLOT_ATTN_AXPY_F32,
    KW_KSLOT_ATTN_AXPY_F16, KW_KSLOT_ATTN_AXPY_Q8_0, KW_KSLOT_ATTN_ROUND_F16, KW_KSLOT_ATTN_EXP,
    KW_KSLOT_ATTN_DECODE_SUPPORTED, KW_KSLOT_ATTN_DECODE, KW_KSLOT_ATTN_TILE_SUPPORTED, KW_KSLOT_ATTN_TILE,
    KW_KSLOT_ATTN_INT_SUPPORTED, KW_KSLOT_ATTN_INT, KW_KSLOT_SWIGLU, KW_KSLOT_GEMM_EXPERTS, KW_KSLOT_COUNT
};
int kw_kernels_count_start(void);
void kw_kernels_count_stop(void);
uint64_t kw_kernels_count(int slot, int family);
const char *kw_kernels_slot_name(int slot);
#endif

/* The detected features, without the one-time init (for family init code
 * that runs inside it). */
const kw_cpu_info *kw_cpu_info_raw(void);
size_t kw_decode_prefetch_raw(void);   /* kw_decode_prefetch_bytes, for the families' init (inside the once) */

/* gemm_avx512.c: packed Q4_0 (q4 = 1) / Q8_0 16-row groups [r0, end) x nx
 * activation rows (split Q8_0 layout); returns the first row not done.
 * Rows of nb blocks, stored in K-panels of pnb blocks pstride bytes apart
 * (pnb = nb: one panel; kernels_avx512.c). */
int64_t kw_gemm_x16_avx512(const uint8_t *packed, int q4, int64_t nb, int64_t pnb, size_t pstride, int64_t r0,
                           int64_t end, const void *X, size_t xs, int64_t nx, float *Y, int64_t ldy);

/* gemm_avx512.c: F16 matrices as packed int16 blocks (format KW_FMT_F16_I16),
 * F16 activations as F32 values followed by int16 blocks (kw_act_f16_i16;
 * kw_act_f16_i16_only writes the int16 blocks alone, for runs that use no
 * unpacked F16 kernel). */
#define KW_FMT_F16_I16 0x10u
int kw_pack_f16_i16(kw_matrix *W, kw_pack_arena *a, kw_err *err);
void kw_act_f16_i16(const float *x, void *dst, int64_t n);
void kw_act_f16_i16_only(const float *x, void *dst, int64_t n);
size_t kw_act_f16_i16_bytes(int64_t n);
int64_t kw_gemm_f16_i16(const kw_matrix *W, int64_t r0, int64_t r1, const void *X, size_t xs, int64_t nx, float *Y,
                        int64_t ldy);

/* kquant_avx512.c: Q4_K, Q5_K and Q6_K as 16-row interleaved groups with
 * unpacked scales (formats KW_FMT_Q4_K_X16, KW_FMT_Q5_K_X16,
 * KW_FMT_Q6_K_X16). The pack takes a matrix of any of the three types (1:
 * another type); the gemm returns the first row not done. */
#define KW_FMT_Q4_K_X16 0x20u
#define KW_FMT_Q5_K_X16 0x22u
#define KW_FMT_Q6_K_X16 0x21u
int kw_pack_k_x16(kw_matrix *W, kw_pack_arena *a, kw_err *err);
int64_t kw_gemm_k_x16(const kw_matrix *W, int64_t r0, int64_t r1, const void *X, size_t xs, int64_t nx, float *Y,
                      int64_t ldy);

/* quant_ref.c */
void kw_quantize_q8_K_ref(const float *x, void *dst, int64_t nb);

/* Calls NAME##_tile(..., R, C) with R and C (1..4, in scope as ints) as
 * constants, so each tile shape is its own unrolled code (AVX2 and AVX-512 GEMMs). */
#define KW_TILE_SWITCH(NAME, ...)                          \
    switch (R * 8 + C) {                                   \
    case 8 * 1 + 1: NAME##_tile(__VA_ARGS__, 1, 1); break; \
    case 8 * 1 + 2: NAME##_tile(__VA_ARGS__, 1, 2); break; \
    case 8 * 1 + 3: NAME##_tile(__VA_ARGS__, 1, 3); break; \
    case 8 * 1 + 4: NAME##_tile(__VA_ARGS__, 1, 4); break; \
    case 8 * 2 + 1: NAME##_tile(__VA_ARGS__, 2, 1); break; \
    case 8 * 2 + 2: NAME##_tile(__VA_ARGS__, 2, 2); break; \
    case 8 * 2 + 3: NAME##_tile(__VA_ARGS__, 2, 3); break; \
    case 8 * 2 + 4: NAME##_tile(__VA_ARGS__, 2, 4); break; \
    case 8 * 3 + 1: NAME##_tile(__VA_ARGS__, 3, 1); break; \
    case 8 * 3 + 2: NAME##_tile(__VA_ARGS__, 3, 2); break; \
    case 8 * 3 + 3: NAME##_tile(__VA_ARGS__, 3, 3); break; \
    case 8 * 3 + 4: NAME##_tile(__VA_ARGS__, 3, 4); break; \
    case 8 * 4 + 1: NAME##_tile(__VA_ARGS__, 4, 1); break; \
    case 8 * 4 + 2: NAME##_tile(__VA_ARGS__, 4, 2); break; \
    case 8 * 4 + 3: NAME##_tile(__VA_ARGS__, 4, 3); break; \
    default: NAME##_tile(__VA_ARGS__, 4, 4); break;        \
    }

#endif
