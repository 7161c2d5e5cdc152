/* test_kernel_families.c - the forward pass runs its kernels through the
 * active kernel set, and only that family's (test builds: kernels.h
 * kw_kernels_count_start counts every call made through the set by entry
 * and by the family that provides the entry).
 *
 * For conformance models and every KV type, a 37-token prefill and a
 * one-token decode on one thread, counted:
 *   - attention: per (token, KV head, layer) one ask of the set whether its
 *     kernel takes it, then that kernel or the per-token path's softmax exp
 *     once per head (float KV) or the portable integer path; per prefill
 *     tile of several tokens one tile (float) or integer kernel call, tiles
 *     where the family has them (scalar: none; avx2: the integer KV types;
 *     avx512: F32, F16 and the integer types); one SwiGLU call per layer;
 *     so no attention or activation runs beside the set;
 *   - every call made through the set went to the active family's code or
 *     to code it inherits: KW_KERNEL=scalar (CTest test_kernel_families_scalar)
 *     leaves every avx2 and avx512 count at zero, KW_KERNEL=avx2 every
 *     avx512 count; the kernels that ran are the family's own where it has
 *     them;
 *   - KV type auto is f16 for the scalar family, i16 for the others;
 *   - counting changes no result (logits identical with and without). */
#include "testutil.h"
#include "kvwise/kv.h"
#include "kvwise/model.h"
#include "tensor/kernels.h"
#include <string.h>

#define N_PROMPT 37

static const char *const FAMILY_NAMES[KW_KERNEL_FAMILIES] = {"scalar", "avx2", "avx512"};
static int g_family;   /* index of the active family */

static int family_index(const char *name) {
    for (int f = 0; f < KW_KERNEL_FAMILIES; f++)
        if (name && !strcmp(name, FAMILY_NAMES[f])) return f;
    return -1;
}

static uint64_t slot_total(int slot) {
    uint64_t n = 0;
    for (int f = 0; f < KW_KERNEL_FAMILIES; f++) n += kw_kernels_count(slot, f);
    return n;
}

/* Whether the active family runs prefill attention in tiles for this KV
 * type (and the kernels' shape limits, attn.h). */
static bool family_tiles(uint32_t kv_type, int G, int hk, int hv) {
    bool int_tiles = kw_kv_type_is_int(kv_type) && kw_attn_i16_tiles(G, hk, hv);
    if (g_family == 2) return int_tiles || kw_attn_tile_supported(kv_type, G, hk, hv);
    if (g_family == 1) return int_tiles;
    return false;
}

/* The family whose code an entry that ran must be: the active family's own
 * kernels where it has them (AVX-512: decode, tile, integer attention,
 * exp, SwiGLU; AVX2: integer attention and the row operations, which
 * AVX-512 inherits), else the scalar ones. -1: not checked (matmul). */
static int want_family(int slot) {
    switch (slot) {
    case KW_KSLOT_ATTN_DECODE: case KW_KSLOT_ATTN_TILE: return 2;
    case KW_KSLOT_ATTN_INT: return g_family;
    case KW_KSLOT_SWIGLU: case KW_KSLOT_ATTN_EXP: return g_family == 2 ? 2 : 0;
    case KW_KSLOT_ATTN_DOT_F32: case KW_KSLOT_ATTN_DOT_F16: case KW_KSLOT_ATTN_DOT_Q8_0: case KW_KSLOT_ATTN_AXPY_F32:
    case KW_KSLOT_ATTN_AXPY_F16: case KW_KSLOT_ATTN_AXPY_Q8_0: case KW_KSLOT_ATTN_ROUND_F16: return g_family >= 1 ? 1 : 0;
    default: return -1;
    }
}

/* No count in a family above the active one; the kernels that ran are the ones want_family names. */
static void check_families(const char *what) {
    for (int s = 0; s < KW_KSLOT_COUNT; s++) {
        for (int f = g_family + 1; f < KW_KERNEL_FAMILIES; f++)
            KW_CHECK_MSG(kw_kernels_count(s, f) == 0, "%s: %s ran %llu calls of the %s family under %s", what,
                         kw_kernels_slot_name(s), (unsigned long long)kw_kernels_count(s, f), FAMILY_NAMES[f],
                         FAMILY_NAMES[g_family]);
        int w = want_family(s);
        if (w >= 0 && slot_total(s) > 0)
            KW_CHECK_MSG(kw_kernels_count(s, w) == slot_total(s), "%s: %s not all %s", what, kw_kernels_slot_name(s),
                         FAMILY_NAMES[w]);
    }
    KW_CHECK_MSG(slot_total(KW_KSLOT_GEMM) > 0, "%s: no gemm through the set", what);
}

static void check_count(const char *what, int slot, int64_t want) {
    KW_CHECK_MSG((int64_t)slot_total(slot) == want, "%s: %s %llu calls, want %lld", what, kw_kernels_slot_name(slot),
                 (unsigned long long)slot_total(slot), (long long)want);
}

/* The attention and activation calls of one eval of n tokens (one thread). */
static void check_calls(const char *what, const kw_hparams *hp, uint32_t kv_type, int32_t n) {
    int64_t L = hp->n_layer, nkv = hp->n_head_kv, G = hp->n_head / hp->n_head_kv;
    int hk = hp->head_dim_k, hv = hp->head_dim_v;
    int64_t per = kw_attn_tile_tokens((int)G), tiles = 0, tokens = n;
    if (n >= 2 && per > 0 && family_tiles(kv_type, (int)G, hk, hv)) {   /* a last tile of one token goes alone */
        tiles = n / per + (n % per > 1);
        tokens = n % per == 1;
    }
    tiles *= nkv * L;
    tokens *= nkv * L;
    int64_t queries = n >= 2 && per > 0 ? L : 0;   /* the forward pass asks whether to tile, once a layer */
    if (kw_kv_type_is_int(kv_type)) {
        check_count(what, KW_KSLOT_ATTN_INT_SUPPORTED, queries + tiles + tokens);
        check_count(what, KW_KSLOT_ATTN_INT, g_family >= 1 ? tiles + tokens : 0);   /* scalar: the portable path */
        check_count(what, KW_KSLOT_ATTN_DECODE_SUPPORTED, 0);
        check_count(what, KW_KSLOT_ATTN_TILE_SUPPORTED, 0);
        check_count(what, KW_KSLOT_ATTN_EXP, 0);
    } else {
        bool kernel = g_family == 2 && kw_attn_decode_supported(kv_type, (int)G, hk, hv);
        check_count(what, KW_KSLOT_ATTN_TILE_SUPPORTED, queries + tiles);
        check_count(what, KW_KSLOT_ATTN_TILE, tiles);
        check_count(what, KW_KSLOT_ATTN_DECODE_SUPPORTED, tokens);
        check_count(what, KW_KSLOT_ATTN_DECODE, kernel ? tokens : 0);
        check_count(what, KW_KSLOT_ATTN_EXP, kernel ? 0 : tokens * G);   /* the per-token softmax: one per head */
        check_count(what, KW_KSLOT_ATTN_INT, 0);
    }
    check_count(what, KW_KSLOT_SWIGLU, L);
}

/* Evaluates the prompt (then one token) counted; the same evals uncounted
 * give the same logits. Returns false when the KV type does not fit the model. */
static bool run_kv_type(const kw_model *m, const char *name, uint32_t kv_type, const int32_t *tokens) {
    const kw_hparams *hp = kw_model_hparams(m);
    kw_session_opts o = {.n_ctx = 128, .max_batch = 64, .kv_type = kv_type, .block_tokens = 32, .n_threads = 1};
    kw_err err = {{0}};
    kw_session *s = kw_session_create(m, &o, &err);
    if (!s) {   /* only the shape limits of the quantized KV types may refuse (kv.h) */
        KW_CHECK_MSG(kv_type == KW_TYPE_Q8_0 || kw_kv_type_is_int(kv_type), "%s kv %s: %s", name,
                     kw_kv_type_name(kv_type), err.msg);
        return false;
    }
    uint32_t resolved = kv_type == KW_KV_TYPE_AUTO ? kw_kv_type_auto(hp->head_dim_k, hp->head_dim_v, 32, hp->n_head / hp->n_head_kv)
                                                   : kv_type;
    int32_t nv = hp->n_vocab;
    float *ref = malloc(sizeof(float) * (size_t)nv * 2);
    char what[160];
    for (int counted = 0; counted < 2 && ref; counted++) {
        kw_session_rewind(s, 0);
        for (int step = 0; step < 2; step++) {   /* prefill, then decode one token */
            int32_t n = step == 0 ? N_PROMPT : 1;
            snprintf(what, sizeof what, "%s kv %s %s", name, kw_kv_type_name(kv_type), step == 0 ? "prefill" : "decode");
            if (counted) KW_CHECK_EQ_INT(kw_kernels_count_start(), 0);
            int rc = kw_session_eval(s, tokens + (step == 0 ? 0 : N_PROMPT), n, false, &err);
            if (counted) kw_kernels_count_stop();
            KW_CHECK_MSG(rc == 0, "%s: %s", what, err.msg);
            if (rc != 0) break;
            const float *lg = kw_session_logits(s, -1);
            if (!counted) { memcpy(ref + (size_t)step * nv, lg, sizeof(float) * (size_t)nv); continue; }
            KW_CHECK_MSG(memcmp(ref + (size_t)step * nv, lg, sizeof(float) * (size_t)nv) == 0,
                         "%s: logits changed under counting", what);
            check_calls(what, hp, resolved, n);
            check_families(what);
        }
    }
    printf("%-14s kv %-4s (%s): counted %s\n", name, kw_kv_type_name(kv_type), kw_kv_type_name(resolved),
           kw_test_failed ? "with failures" : "ok");
    free(ref);
    kw_session_free(s);
    return true;
}

static void run_model(const char *dir, const char *name, int *kv_runs) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.gguf", dir, name);
    kw_err err = {{0}};
    kw_model *m = kw_model_load(path, NULL, &err);
    KW_CHECK_MSG(m != NULL, "%s: %s", name, err.msg);
    if (!m) return;
    int32_t tokens[N_PROMPT + 1];
    uint32_t seed = 7;
    for (int i = 0; i <= N_PROMPT; i++) {
        seed = seed * 1664525u + 1013904223u;
        tokens[i] = 1 + (int32_t)((seed >> 8) % (uint32_t)(kw_model_hparams(m)->n_vocab - 1));
    }
    static const uint32_t kv_types[] = {KW_TYPE_F32, KW_TYPE_F16, KW_TYPE_Q8_0, KW_TYPE_KV_I16, KW_TYPE_KV_I8,
                                        KW_KV_TYPE_AUTO};
    for (size_t i = 0; i < sizeof kv_types / sizeof *kv_types; i++) *kv_runs += run_kv_type(m, name, kv_types[i], tokens);
    kw_model_free(m);
}

int main(void) {
    const char *dir = kw_test_path(kw_test_shared_dir(), "conformance/models");
    g_family = family_index(kw_kernel_name());
    KW_CHECK_MSG(g_family >= 0, "unknown family %s", kw_kernel_name());
    if (g_family < 0) return kw_test_finish();
    const char *forced = getenv("KW_KERNEL");   /* a family this CPU has is the one that runs */
    int want = family_index(forced);
    if (want >= 0 && kw_kernels_family(want)) KW_CHECK_MSG(g_family == want, "KW_KERNEL=%s, active %s", forced, kw_kernel_name());
    printf("active family: %s\n", kw_kernel_name());
    KW_CHECK_EQ_INT(kw_kv_type_auto(32, 32, 32, 4), g_family == 0 ? KW_TYPE_F16 : KW_TYPE_KV_I16);
    KW_CHECK_EQ_INT(kw_kv_type_auto(32, 32, 32, 17), KW_TYPE_F16);   /* a group no integer kernel takes */
    int kv_runs = 0;
    /* Q4_0 (packed, K-panels under AVX-512), F16 (packed int16 activations), Q8_0 with qwen3's
     * head dim 64, and stories260K's head dim 8 (only f32, f16 and auto fit it) */
    const char *models[] = {"llama-q4_0", "llama-f16", "qwen3-q8_0", "stories260K"};
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) run_model(dir, models[i], &kv_runs);
    KW_CHECK_EQ_INT(kv_runs, 3 * 6 + 3);
    return kw_test_finish();
}
