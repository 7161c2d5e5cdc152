/* kernels_testctl.c - test builds only (KW_TESTCTL): a counting copy of the
 * active kernel set (kernels.h kw_kernels_count_start).
 *
 * Every function entry of the copy bumps the count of (entry, family of
 * the real function) and calls the real one, so a test sees which
 * families' code ran: KW_KERNEL=scalar must leave every non-scalar count
 * at zero. Array entries (per dot type or weight type) are wrapped per
 * index: gemm, gemm_panel and pack by the matrix's type, the activation
 * quantizers by one wrapper per dot type below. The family of an entry is
 * the first family whose set holds the same function. */
#ifdef KW_TESTCTL
#include "tensor/kernels.h"
#include <stdatomic.h>

static kw_kernel_set g_real, g_counting;
static const kw_kernel_set *g_wrapped;             /* the set active before start() */
static uint8_t g_family[KW_KSLOT_COUNT][KW_TYPE_COUNT];
static _Atomic uint64_t g_calls[KW_KSLOT_COUNT][KW_KERNEL_FAMILIES];

static void bump(int slot, uint32_t idx) {
    atomic_fetch_add_explicit(&g_calls[slot][g_family[slot][idx]], 1, memory_order_relaxed);
}

/* ---- the wrappers ---- */

#define KW_COUNT_QUANT(T)                                                          \
    static void quant_##T(const float *x, void *dst, int64_t n) {                  \
        bump(KW_KSLOT_QUANT, KW_TYPE_##T);                                         \
        g_real.quant[KW_TYPE_##T](x, dst, n);                                      \
    }                                                                              \
    static void quant_packed_##T(const float *x, void *dst, int64_t n) {           \
        bump(KW_KSLOT_QUANT_PACKED, KW_TYPE_##T);                                  \
        g_real.quant_packed[KW_TYPE_##T](x, dst, n);                               \
    }
KW_COUNT_QUANT(F32)
KW_COUNT_QUANT(F16)
KW_COUNT_QUANT(BF16)
KW_COUNT_QUANT(Q8_0)
KW_COUNT_QUANT(Q8_1)
KW_COUNT_QUANT(Q8_K)
#undef KW_COUNT_QUANT

static const kw_act_quant_fn g_quant_wrap[KW_TYPE_COUNT] = {
    [KW_TYPE_F32] = quant_F32, [KW_TYPE_F16] = quant_F16, [KW_TYPE_BF16] = quant_BF16,
    [KW_TYPE_Q8_0] = quant_Q8_0, [KW_TYPE_Q8_1] = quant_Q8_1, [KW_TYPE_Q8_K] = quant_Q8_K};
static const kw_act_quant_fn g_quant_packed_wrap[KW_TYPE_COUNT] = {
    [KW_TYPE_F32] = quant_packed_F32, [KW_TYPE_F16] = quant_packed_F16, [KW_TYPE_BF16] = quant_packed_BF16,
    [KW_TYPE_Q8_0] = quant_packed_Q8_0, [KW_TYPE_Q8_1] = quant_packed_Q8_1, [KW_TYPE_Q8_K] = quant_packed_Q8_K};

static void gemm(const kw_matrix *W, int64_t r0, int64_t r1, const void *X, size_t xs, int64_t nx, float *Y,
                 int64_t ldy) {
    bump(KW_KSLOT_GEMM, W->type);
    g_real.gemm[W->type](W, r0, r1, X, xs, nx, Y, ldy);
}

static void gemm_experts(const kw_matrix *W, int64_t r0, int64_t r1, const void *X, size_t xs, int64_t nx, float *Y,
                         int64_t ldy) {
    bump(KW_KSLOT_GEMM_EXPERTS, W->type);
    g_real.gemm_experts[W->type](W, r0, r1, X, xs, nx, Y, ldy);
}

static void gemm_panel(const kw_matrix *W, int p, int64_t r0, int64_t r1, const void *X, size_t xs, int64_t nx,
                       float *Y, int64_t ldy) {
    bump(KW_KSLOT_GEMM_PANEL, W->type);
    g_real.gemm_panel[W->type](W, p, r0, r1, X, xs, nx, Y, ldy);
}

/* The entries of one function: a wrapper that counts (slot, family) and calls the real one. */
#define KW_COUNT_RET(SLOT, RET, NAME, MEMBER, PARAMS, ARGS) \
    static RET NAME PARAMS { bump(SLOT, 0); return g_real.MEMBER ARGS; }
#define KW_COUNT_VOID(SLOT, NAME, MEMBER, PARAMS, ARGS) \
    static void NAME PARAMS { bump(SLOT, 0); g_real.MEMBER ARGS; }
KW_COUNT_RET(KW_KSLOT_PANELS, int, panels, panels, (const kw_matrix *W), (W))
KW_COUNT_RET(KW_KSLOT_PACK, int, pack, pack, (kw_matrix *W, kw_pack_arena *a, kw_err *err), (W, a, err))
KW_COUNT_RET(KW_KSLOT_READ_NT, uint64_t, read_nt, read_nt, (const void *p, size_t bytes), (p, bytes))
KW_COUNT_RET(KW_KSLOT_ATTN_DOT_F32, float, dot_f32, attn.ops.dot_f32, (const float *q, const float *k, int n), (q, k, n))
KW_COUNT_RET(KW_KSLOT_ATTN_DOT_F16, float, dot_f16, attn.ops.dot_f16, (const float *q, const uint16_t *k, int n),
             (q, k, n))
KW_COUNT_RET(KW_KSLOT_ATTN_DOT_Q8_0, float, dot_q8_0, attn.ops.dot_q8_0, (const uint8_t *q, const uint8_t *k, int n),
             (q, k, n))
KW_COUNT_VOID(KW_KSLOT_ATTN_AXPY_F32, axpy_f32, attn.ops.axpy_f32, (float *acc, float p, const float *v, int n),
              (acc, p, v, n))
KW_COUNT_VOID(KW_KSLOT_ATTN_AXPY_F16, axpy_f16, attn.ops.axpy_f16, (float *acc, float p, const uint16_t *v, int n),
              (acc, p, v, n))
KW_COUNT_VOID(KW_KSLOT_ATTN_AXPY_Q8_0, axpy_q8_0, attn.ops.axpy_q8_0, (float *acc, float p, const uint8_t *v, int n),
              (acc, p, v, n))
KW_COUNT_VOID(KW_KSLOT_ATTN_ROUND_F16, round_f16, attn.ops.round_f16, (float *x, int n), (x, n))
KW_COUNT_VOID(KW_KSLOT_ATTN_EXP, attn_exp, attn.ops.exp, (float *x, int64_t n), (x, n))
KW_COUNT_RET(KW_KSLOT_ATTN_DECODE_SUPPORTED, bool, decode_supported, attn.decode_supported,
             (uint32_t t, int G, int hk, int hv), (t, G, hk, hv))
KW_COUNT_VOID(KW_KSLOT_ATTN_DECODE, decode, attn.decode, (const kw_attn_args *a, float *scr, int32_t c), (a, scr, c))
KW_COUNT_RET(KW_KSLOT_ATTN_TILE_SUPPORTED, bool, tile_supported, attn.tile_supported,
             (uint32_t t, int G, int hk, int hv), (t, G, hk, hv))
KW_COUNT_VOID(KW_KSLOT_ATTN_TILE, tile, attn.tile, (const kw_attn_args *a, float *scr, int32_t c), (a, scr, c))
KW_COUNT_RET(KW_KSLOT_ATTN_INT_SUPPORTED, bool, int_supported, attn.integer_supported, (int nq, int hk, int hv),
             (nq, hk, hv))
KW_COUNT_VOID(KW_KSLOT_ATTN_INT, integer, attn.integer, (const kw_attn_args *a, float *scr, int32_t c), (a, scr, c))
KW_COUNT_VOID(KW_KSLOT_SWIGLU, swiglu, swiglu, (float *gate, const float *up, int64_t n), (gate, up, n))
#undef KW_COUNT_RET
#undef KW_COUNT_VOID

/* ---- families ---- */

/* The first family whose set has fn at this entry (fn_of reads the entry of a set). */
typedef const void *(*entry_fn)(const kw_kernel_set *k, int idx);
static uint8_t family_of(entry_fn fn_of, int idx, const void *fn) {
    for (int f = 0; f < KW_KERNEL_FAMILIES; f++) {
        const kw_kernel_set *k = kw_kernels_family(f);
        if (k && fn_of(k, idx) == fn) return (uint8_t)f;
    }
    return KW_KERNEL_FAMILIES - 1;   /* not any family's: counted as the last (never scalar) */
}

/* Function pointers as data pointers for the comparison above (POSIX dlsym's assumption). */
#define KW_ENTRY(NAME, EXPR) \
    static const void *NAME(const kw_kernel_set *k, int i) { (void)i; return (const void *)(EXPR); }
KW_ENTRY(e_quant, k->quant[i])
KW_ENTRY(e_quant_packed, k->quant_packed[i])
KW_ENTRY(e_gemm, k->gemm[i])
KW_ENTRY(e_gemm_panel, k->gemm_panel[i])
KW_ENTRY(e_gemm_experts, k->gemm_experts[i])
KW_ENTRY(e_panels, k->panels)
KW_ENTRY(e_pack, k->pack)
KW_ENTRY(e_read_nt, k->read_nt)
KW_ENTRY(e_dot_f32, k->attn.ops.dot_f32)
KW_ENTRY(e_dot_f16, k->attn.ops.dot_f16)
KW_ENTRY(e_dot_q8_0, k->attn.ops.dot_q8_0)
KW_ENTRY(e_axpy_f32, k->attn.ops.axpy_f32)
KW_ENTRY(e_axpy_f16, k->attn.ops.axpy_f16)
KW_ENTRY(e_axpy_q8_0, k->attn.ops.axpy_q8_0)
KW_ENTRY(e_round_f16, k->attn.ops.round_f16)
KW_ENTRY(e_exp, k->attn.ops.exp)
KW_ENTRY(e_decode_supported, k->attn.decode_supported)
KW_ENTRY(e_decode, k->attn.decode)
KW_ENTRY(e_tile_supported, k->attn.tile_supported)
KW_ENTRY(e_tile, k->attn.tile)
KW_ENTRY(e_int_supported, k->attn.integer_supported)
KW_ENTRY(e_int, k->attn.integer)
KW_ENTRY(e_swiglu, k->swiglu)
#undef KW_ENTRY

/* Per slot (kernels.h KW_KSLOT_*): how to read the entry of a set, and its name. */
static const struct {
    entry_fn entry;
    const char *name;
} g_slots[KW_KSLOT_COUNT] = {
    [KW_KSLOT_QUANT] = {e_quant, "quant"}, [KW_KSLOT_QUANT_PACKED] = {e_quant_packed, "quant_packed"},
    [KW_KSLOT_GEMM] = {e_gemm, "gemm"}, [KW_KSLOT_GEMM_PANEL] = {e_gemm_panel, "gemm_panel"},
    [KW_KSLOT_PANELS] = {e_panels, "panels"}, [KW_KSLOT_PACK] = {e_pack, "pack"},
    [KW_KSLOT_READ_NT] = {e_read_nt, "read_nt"}, [KW_KSLOT_ATTN_DOT_F32] = {e_dot_f32, "attn.ops.dot_f32"},
    [KW_KSLOT_ATTN_DOT_F16] = {e_dot_f16, "attn.ops.dot_f16"}, [KW_KSLOT_ATTN_DOT_Q8_0] = {e_dot_q8_0, "attn.ops.dot_q8_0"},
    [KW_KSLOT_ATTN_AXPY_F32] = {e_axpy_f32, "attn.ops.axpy_f32"},
    [KW_KSLOT_ATTN_AXPY_F16] = {e_axpy_f16, "attn.ops.axpy_f16"},
    [KW_KSLOT_ATTN_AXPY_Q8_0] = {e_axpy_q8_0, "attn.ops.axpy_q8_0"},
    [KW_KSLOT_ATTN_ROUND_F16] = {e_round_f16, "attn.ops.round_f16"}, [KW_KSLOT_ATTN_EXP] = {e_exp, "attn.ops.exp"},
    [KW_KSLOT_ATTN_DECODE_SUPPORTED] = {e_decode_supported, "attn.decode_supported"},
    [KW_KSLOT_ATTN_DECODE] = {e_decode, "attn.decode"},
    [KW_KSLOT_ATTN_TILE_SUPPORTED] = {e_tile_supported, "attn.tile_supported"},
    [KW_KSLOT_ATTN_TILE] = {e_tile, "attn.tile"},
    [KW_KSLOT_ATTN_INT_SUPPORTED] = {e_int_supported, "attn.integer_supported"},
    [KW_KSLOT_ATTN_INT] = {e_int, "attn.integer"}, [KW_KSLOT_SWIGLU] = {e_swiglu, "swiglu"},
    [KW_KSLOT_GEMM_EXPERTS] = {e_gemm_experts, "gemm_experts"}};
/* Entries indexed by type; the others are one function (index 0). */
static bool per_type(int slot) {
    return slot == KW_KSLOT_QUANT || slot == KW_KSLOT_QUANT_PACKED || slot == KW_KSLOT_GEMM ||
           slot == KW_KSLOT_GEMM_PANEL || slot == KW_KSLOT_GEMM_EXPERTS;
}

/* The families of g_real's entries; false if a non-NULL quantizer has no wrapper. */
static bool map_families(void) {
    for (int s = 0; s < KW_KSLOT_COUNT; s++)
        for (int t = 0; t < (per_type(s) ? KW_TYPE_COUNT : 1); t++) {
            const void *fn = g_slots[s].entry(&g_real, t);
            g_family[s][t] = fn ? family_of(g_slots[s].entry, t, fn) : 0;
            if (fn && s == KW_KSLOT_QUANT && !g_quant_wrap[t]) return false;
            if (fn && s == KW_KSLOT_QUANT_PACKED && !g_quant_packed_wrap[t]) return false;
        }
    return true;
}

/* g_counting: g_real with every non-NULL entry wrapped (NULL stays NULL: callers test some). */
static void wrap_entries(void) {
    const kw_kernel_set *r = &g_real;
    kw_kernel_set *c = &g_counting;
    *c = *r;
    for (int t = 0; t < KW_TYPE_COUNT; t++) {
        if (r->quant[t]) c->quant[t] = g_quant_wrap[t];
        if (r->quant_packed[t]) c->quant_packed[t] = g_quant_packed_wrap[t];
        if (r->gemm[t]) c->gemm[t] = gemm;
        if (r->gemm_panel[t]) c->gemm_panel[t] = gemm_panel;
        if (r->gemm_experts[t]) c->gemm_experts[t] = gemm_experts;
    }
    if (r->panels) c->panels = panels;
    if (r->pack) c->pack = pack;
    if (r->read_nt) c->read_nt = read_nt;
    c->attn = (kw_attn_kernels){{dot_f32, dot_f16, dot_q8_0, axpy_f32, axpy_f16, axpy_q8_0, round_f16, attn_exp},
                                decode_supported, decode, tile_supported, tile, int_supported, integer,
                                r->attn.kv_type_auto};
    c->swiglu = swiglu;
}

int kw_kernels_count_start(void) {
    const kw_kernel_set *active = kw_kernels_active();
    if (active != &g_counting) {   /* (already counting: only the counts restart) */
        g_real = *active;
        if (!map_families()) return -1;
        wrap_entries();
        g_wrapped = active;
    }
    for (int s = 0; s < KW_KSLOT_COUNT; s++)
        for (int f = 0; f < KW_KERNEL_FAMILIES; f++) atomic_store(&g_calls[s][f], 0);
    kw_kernels_install(&g_counting);
    return 0;
}

void kw_kernels_count_stop(void) {
    if (g_wrapped && kw_kernels_active() == &g_counting) kw_kernels_install(g_wrapped);
    g_wrapped = NULL;
}

uint64_t kw_kernels_count(int slot, int family) {
    if (slot < 0 || slot >= KW_KSLOT_COUNT || family < 0 || family >= KW_KERNEL_FAMILIES) return 0;
    return atomic_load(&g_calls[slot][family]);
}

const char *kw_kernels_slot_name(int slot) {
    return slot >= 0 && slot < KW_KSLOT_COUNT ? g_slots[slot].name : "?";
}
#else
typedef int kw_kernels_count_not_built;   /* an empty unit is not ISO C */
#endif
