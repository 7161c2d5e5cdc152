/* test_hparams.c - kw_hparams_from_gguf and the tensor checks of
 * kw_model_load: every conformance model of a supported architecture has
 * the shape of its manifest entry (../shared/conformance/models/
 * manifest.json), a model of an architecture the table (arch.h) lacks is
 * refused naming the supported ones, and broken files (unknown
 * architecture, missing / misshapen / wrongly typed tensors, missing keys)
 * are refused with a message naming the problem. */
#include "testutil.h"
#include "kvwise/model.h"
#include <cJSON.h>
#include <string.h>

static const char *g_models;

static int jint(const cJSON *o, const char *k) { return cJSON_GetObjectItem(o, k)->valueint; }

static void check_manifest_entry(const cJSON *e) {
    const char *file = cJSON_GetObjectItem(e, "file")->valuestring;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", g_models, file);
    kw_err err = {{0}};
    kw_gguf *g = kw_gguf_open(path, &err);
    KW_CHECK_MSG(g != NULL, "%s: %s", file, err.msg);
    if (!g) return;
    kw_hparams hp;
    KW_CHECK_MSG(kw_hparams_from_gguf(g, &hp, &err) == 0, "%s: %s", file, err.msg);
    KW_CHECK_MSG(!strcmp(hp.arch_name, cJSON_GetObjectItem(e, "arch")->valuestring), "%s arch %s", file, hp.arch_name);
    KW_CHECK_EQ_INT(hp.n_layer, jint(e, "n_layer"));
    KW_CHECK_EQ_INT(hp.n_embd, jint(e, "n_embd"));
    KW_CHECK_EQ_INT(hp.n_head, jint(e, "n_head"));
    KW_CHECK_EQ_INT(hp.n_head_kv, jint(e, "n_head_kv"));
    KW_CHECK_EQ_INT(hp.head_dim_k, jint(e, "head_dim"));
    KW_CHECK_EQ_INT(hp.head_dim_v, jint(e, "head_dim"));
    /* partial rotary (qwen35): the file's rope.dimension_count, else the whole head */
    const cJSON *rd = cJSON_GetObjectItem(e, "rope_dimension_count");
    KW_CHECK_EQ_INT(hp.rope_dim, rd ? jint(e, "rope_dimension_count") : jint(e, "head_dim"));
    KW_CHECK_EQ_INT(hp.n_ff, jint(e, "n_ff"));
    KW_CHECK_EQ_INT(hp.n_vocab, jint(e, "n_vocab"));
    KW_CHECK_EQ_INT(hp.n_ctx_train, jint(e, "n_ctx_train"));
    KW_CHECK_EQ_INT(hp.tied_output, cJSON_IsTrue(cJSON_GetObjectItem(e, "tied")));
    KW_CHECK_EQ_INT(hp.has_qkv_bias, cJSON_IsTrue(cJSON_GetObjectItem(e, "qkv_bias")));
    KW_CHECK_NEAR(hp.rope_base, cJSON_GetObjectItem(e, "rope_freq_base")->valuedouble, 1e-3);
    KW_CHECK_NEAR(hp.rms_eps, cJSON_GetObjectItem(e, "rms_eps")->valuedouble, 1e-12);
    KW_CHECK_EQ_INT(hp.n_params, (uint64_t)cJSON_GetObjectItem(e, "n_params")->valuedouble);
    /* llama pairs RoPE dims (2i, 2i+1), the qwen family (i, i+d/2); only the qwen3 family has q/k norms */
    KW_CHECK_EQ_INT(hp.rope_neox, strcmp(hp.arch_name, "llama") != 0);
    KW_CHECK_EQ_INT(hp.has_qk_norm, !strncmp(hp.arch_name, "qwen3", 5));
    /* qwen35moe: the gated shared expert and its width from the manifest */
    KW_CHECK_EQ_INT(hp.has_shared_expert, !strcmp(hp.arch_name, "qwen35moe"));
    if (hp.has_shared_expert) KW_CHECK_EQ_INT(hp.n_ff_shexp, 256);
    /* hybrids: the recurrent layers and their state per sequence as the manifest counts them */
    const cJSON *rs = cJSON_GetObjectItem(e, "recurrent_state_per_seq");
    KW_CHECK_EQ_INT(hp.n_rec_layers, rs ? jint(rs, "n_recurrent_layers") : 0);
    KW_CHECK_EQ_INT(hp.rec_state_bytes, rs ? (uint64_t)jint(rs, "bytes_f32") : 0);
    const cJSON *kvt = cJSON_GetObjectItem(e, "kv_per_token");
    if (kvt) KW_CHECK_EQ_INT(hp.n_kv_layers, jint(kvt, "n_kv_layers"));
    const cJSON *moe = cJSON_GetObjectItem(e, "moe");   /* mixture of experts: the expert shape */
    KW_CHECK_EQ_INT(hp.n_expert, moe ? jint(moe, "n_expert") : 0);
    KW_CHECK_EQ_INT(hp.n_expert_used, moe ? jint(moe, "n_expert_used") : 0);
    KW_CHECK_EQ_INT(hp.n_ff_exp, moe ? jint(moe, "n_ff_exp") : 0);
    if (moe) KW_CHECK(hp.expert_bytes > 0 && hp.expert_bytes < hp.weight_bytes);
    KW_CHECK(hp.rope_scale == 1.0f);
    kw_gguf_close(g);
    kw_model *m = kw_model_load(path, NULL, &err);
    KW_CHECK_MSG(m != NULL, "%s: %s", file, err.msg);
    kw_model_free(m);
}

/* A model whose architecture has no descriptor: refused by name, with the list. */
static void check_unsupported_entry(const cJSON *e) {
    const char *file = cJSON_GetObjectItem(e, "file")->valuestring, *arch = cJSON_GetObjectItem(e, "arch")->valuestring;
    char path[1024], want[128];
    snprintf(path, sizeof path, "%s/%s", g_models, file);
    snprintf(want, sizeof want, "unsupported architecture '%s' (supported: %s)", arch, kw_arch_supported_list());
    kw_err err = {{0}};
    kw_model *m = kw_model_load(path, NULL, &err);
    KW_CHECK_MSG(m == NULL && strstr(err.msg, want) != NULL, "%s: '%s'", file, err.msg);
    kw_model_free(m);
}

static void test_manifest(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/manifest.json", g_models);
    char *text = kw_test_read_file(path, NULL);
    cJSON *arr = text ? cJSON_Parse(text) : NULL;
    KW_CHECK_MSG(cJSON_IsArray(arr), "cannot parse %s", path);
    int n = 0, unsupported = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        if (kw_arch_find(cJSON_GetObjectItem(e, "arch")->valuestring)) { check_manifest_entry(e); n++; }
        else { check_unsupported_entry(e); unsupported++; }
    }
    KW_CHECK_EQ_INT(n, 13);   /* every model in the folder: no architecture there is refused now */
    KW_CHECK_EQ_INT(unsupported, 0);
    cJSON_Delete(arr);
    free(text);
}

/* Writes a copy of stories260K (or of `src` in the models folder) with edits: `arch` overrides the architecture,
 * `drop` omits a tensor, `reshape` gives a tensor a wrong first dimension,
 * `bad_key` sets that u32 key to bad_val, `f16_norm` stores a norm as F16. */
typedef struct edit { const char *arch, *drop, *reshape, *bad_key; int64_t bad_val; bool f16_norm; const char *src; } edit;

static const char *write_variant(const edit *ed, const char *name) {
    static char out[1024];
    char src[1024];
    snprintf(src, sizeof src, "%s/%s.gguf", g_models, ed->src ? ed->src : "stories260K");
    snprintf(out, sizeof out, "%s/%s.gguf", kw_test_tmpdir(), name);
    kw_err err = {{0}};
    kw_gguf *g = kw_gguf_open(src, &err);
    if (!g) return NULL;
    kw_gguf_writer *w = kw_gguf_writer_create();
    kw_gguf_writer_copy_kvs(w, g);
    if (ed->arch) kw_gguf_writer_set_str(w, "general.architecture", ed->arch);
    if (ed->bad_key) kw_gguf_writer_set_u32(w, ed->bad_key, (uint32_t)ed->bad_val);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kw_gguf_tensor *t = &g->tensors[i];
        if (ed->drop && !strcmp(t->name.s, ed->drop)) continue;
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        const void *data = t->data;
        uint32_t type = t->type;
        uint16_t half[64];
        if (ed->reshape && !strcmp(t->name.s, ed->reshape)) {
            if (t->n_dims == 3) { ne[1] = t->ne[2]; ne[2] = t->ne[1]; }   /* experts and rows swapped */
            else { ne[0] = t->ne[1]; ne[1] = t->ne[0]; }
        }
        if (ed->f16_norm && !strcmp(t->name.s, "blk.1.ffn_norm.weight")) {
            for (int k = 0; k < 64; k++) half[k] = kw_f32_to_f16(((const float *)t->data)[k]);
            data = half;
            type = KW_TYPE_F16;
        }
        kw_gguf_writer_add_tensor(w, t->name.s, type, t->n_dims, ne, data, &err);
    }
    int rc = kw_gguf_writer_write(w, out, &err);
    kw_gguf_writer_destroy(w);
    kw_gguf_close(g);
    return rc == 0 ? out : NULL;
}

static void expect_load_error(const edit *ed, const char *name, const char *needle) {
    const char *path = write_variant(ed, name);
    KW_CHECK_MSG(path != NULL, "could not write variant %s", name);
    if (!path) return;
    kw_err err = {{0}};
    kw_model *m = kw_model_load(path, NULL, &err);
    KW_CHECK_MSG(m == NULL, "%s: loaded although broken", name);
    KW_CHECK_MSG(strstr(err.msg, needle) != NULL, "%s: error '%s' lacks '%s'", name, err.msg, needle);
    kw_model_free(m);
}

static void test_broken_models(void) {
    edit e = {0};
    e.arch = "mamba";
    expect_load_error(&e, "arch", "llama, qwen2, qwen3");
    memset(&e, 0, sizeof e);
    e.drop = "blk.2.ffn_up.weight";
    expect_load_error(&e, "missing", "blk.2.ffn_up.weight");
    memset(&e, 0, sizeof e);
    e.reshape = "blk.0.attn_k.weight";
    expect_load_error(&e, "shape", "blk.0.attn_k.weight");
    memset(&e, 0, sizeof e);
    e.drop = "output_norm.weight";
    expect_load_error(&e, "outnorm", "output_norm.weight");
    memset(&e, 0, sizeof e);
    e.f16_norm = true;
    expect_load_error(&e, "f16norm", "blk.1.ffn_norm.weight");
    memset(&e, 0, sizeof e);
    e.bad_key = "llama.attention.head_count_kv";
    e.bad_val = 3;                                  /* 8 heads are not a multiple of 3 */
    expect_load_error(&e, "kvheads", "head_count_kv");
    memset(&e, 0, sizeof e);
    e.bad_key = "llama.block_count";
    e.bad_val = 6;                                  /* layer 5 does not exist */
    expect_load_error(&e, "layers", "blk.5.");
    /* the shape alone passes, and an intact copy loads */
    memset(&e, 0, sizeof e);
    const char *ok = write_variant(&e, "intact");
    kw_err err = {{0}};
    kw_model *m = ok ? kw_model_load(ok, NULL, &err) : NULL;
    KW_CHECK_MSG(m != NULL, "intact copy: %s", err.msg);
    kw_model_free(m);
}

/* A mixture of experts: a missing or misshapen expert tensor, a missing
 * router, missing or impossible expert keys, each refused by name. */
static void test_broken_moe(void) {
    edit e = {.src = "qwen3moe-q8_0", .drop = "blk.1.ffn_up_exps.weight"};
    expect_load_error(&e, "moe-missing", "blk.1.ffn_up_exps.weight is missing");
    e = (edit){.src = "qwen3moe-q8_0", .reshape = "blk.0.ffn_down_exps.weight"};
    expect_load_error(&e, "moe-shape", "blk.0.ffn_down_exps.weight has shape [128, 8, 256, 1], expected [128, 256, 8]");
    e = (edit){.src = "qwen3moe-q8_0", .drop = "blk.3.ffn_gate_inp.weight"};
    expect_load_error(&e, "moe-router", "blk.3.ffn_gate_inp.weight");
    e = (edit){.src = "qwen3moe-q8_0", .bad_key = "qwen3moe.expert_used_count", .bad_val = 9};
    expect_load_error(&e, "moe-used", "qwen3moe.expert_used_count = 9 is out of range (1..8)");
    e = (edit){.src = "qwen3moe-q8_0", .bad_key = "qwen3moe.expert_count", .bad_val = 16};
    expect_load_error(&e, "moe-count", "blk.0.ffn_gate_inp.weight has shape");
    e = (edit){.src = "qwen3moe-q8_0"};
    const char *ok = write_variant(&e, "moe-intact");
    kw_err err = {{0}};
    kw_model *m = ok ? kw_model_load(ok, NULL, &err) : NULL;
    KW_CHECK_MSG(m != NULL, "intact qwen3moe copy: %s", err.msg);
    kw_model_free(m);
}

static void test_missing_keys(void) {
    kw_gguf_writer *w = kw_gguf_writer_create();
    kw_gguf_writer_set_str(w, "general.architecture", "qwen2");
    kw_gguf_writer_set_u32(w, "qwen2.block_count", 2);
    char path[1024];
    snprintf(path, sizeof path, "%s/keys.gguf", kw_test_tmpdir());
    kw_err err = {{0}};
    KW_CHECK(kw_gguf_writer_write(w, path, &err) == 0);
    kw_gguf_writer_destroy(w);
    kw_gguf *g = kw_gguf_open(path, &err);
    KW_CHECK_MSG(g != NULL, "%s", err.msg);
    kw_hparams hp;
    if (g) {
        KW_CHECK(kw_hparams_from_gguf(g, &hp, &err) == -1);
        KW_CHECK_MSG(strstr(err.msg, "qwen2.embedding_length") != NULL, "%s", err.msg);
    }
    kw_gguf_close(g);
}

int main(void) {
    const char *shared = kw_test_shared_dir();
    static char models[1024];
    snprintf(models, sizeof models, "%s/conformance/models", shared);
    g_models = models;
    test_manifest();
    test_broken_models();
    test_broken_moe();
    test_missing_keys();
    return kw_test_finish();
}
