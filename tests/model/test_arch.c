/* test_arch.c - the architecture table (arch.h): its llama / qwen2 / qwen3
 * entries against facts written out here, lookups by GGUF name and by
 * config.json model_type, the supported list in every refusal, the
 * invariants of every entry, and a round trip per entry: mkmodel writes a
 * tiny model of the architecture, the file holds exactly the tensors the
 * descriptor requires with the shapes it gives, and the loader loads it
 * back (with optional groups taken when present, absent ones ignored,
 * required ones enforced) and runs it. */
#include "testutil.h"
#include "kvwise/arch.h"
#include "kvwise/model.h"
#include "kvwise/plan.h"
#include "kvwise/tensor.h"
#include "mkmodel/mkmodel.h"
#include <string.h>

static const char *tmp(const char *name) { return kw_test_path(kw_test_tmpdir(), name); }

/* ---- the facts of llama, qwen2 and qwen3 ---- */

/* The layer tensors of the llama / qwen2 / qwen3 layout as llama.cpp names
 * and shapes them ([ne0, ne1], ne0 the input), written out independently of
 * the table. */
static const struct { const char *name; kw_dim ne0, ne1; kw_tensor_role role; } k_attention_layout[] = {
    {"attn_norm.weight", KW_DIM_EMBD, KW_DIM_1, KW_ROLE_NORM},
    {"attn_q.weight", KW_DIM_EMBD, KW_DIM_Q, KW_ROLE_MATRIX},
    {"attn_k.weight", KW_DIM_EMBD, KW_DIM_K, KW_ROLE_MATRIX},
    {"attn_v.weight", KW_DIM_EMBD, KW_DIM_V, KW_ROLE_MATRIX},
    {"attn_q.bias", KW_DIM_Q, KW_DIM_1, KW_ROLE_BIAS},
    {"attn_k.bias", KW_DIM_K, KW_DIM_1, KW_ROLE_BIAS},
    {"attn_v.bias", KW_DIM_V, KW_DIM_1, KW_ROLE_BIAS},
    {"attn_q_norm.weight", KW_DIM_HEAD_K, KW_DIM_1, KW_ROLE_NORM},
    {"attn_k_norm.weight", KW_DIM_HEAD_K, KW_DIM_1, KW_ROLE_NORM},
    {"attn_output.weight", KW_DIM_ATTN_OUT, KW_DIM_EMBD, KW_ROLE_MATRIX},
    {"ffn_norm.weight", KW_DIM_EMBD, KW_DIM_1, KW_ROLE_NORM},
    {"ffn_gate.weight", KW_DIM_EMBD, KW_DIM_FF, KW_ROLE_MATRIX},
    {"ffn_up.weight", KW_DIM_EMBD, KW_DIM_FF, KW_ROLE_MATRIX},
    {"ffn_down.weight", KW_DIM_FF, KW_DIM_EMBD, KW_ROLE_MATRIX},
};

static void check_attention_layout(const kw_arch_desc *a) {
    const kw_tensor_spec *parts[2] = {kw_arch_mixer_tensors(a, KW_MIXER_ATTENTION), a->ffn_tensors};
    int k = 0, n = (int)(sizeof k_attention_layout / sizeof *k_attention_layout);
    for (int p = 0; p < 2; p++)
        for (const kw_tensor_spec *t = parts[p]; t && t->name; t++, k++) {
            KW_CHECK_MSG(k < n && !strcmp(t->name, k_attention_layout[k].name), "%s: tensor %d is %s", a->gguf_name, k, t->name);
            if (k >= n) continue;
            KW_CHECK_MSG(t->ne0 == k_attention_layout[k].ne0 && t->ne1 == k_attention_layout[k].ne1 &&
                         t->role == k_attention_layout[k].role, "%s: %s", a->gguf_name, t->name);
        }
    KW_CHECK_EQ_INT(k, n);
}

/* The qwen3moe block as ik_llama.cpp names and shapes it (ARCHITECTURES.md):
 * ffn_norm, the router [n_embd, n_expert], the experts [.., .., n_expert]. */
static const struct { const char *name; kw_dim ne0, ne1; kw_tensor_role role; } k_moe_layout[] = {
    {"ffn_norm.weight", KW_DIM_EMBD, KW_DIM_1, KW_ROLE_NORM},
    {"ffn_gate_inp.weight", KW_DIM_EMBD, KW_DIM_EXPERTS, KW_ROLE_MATRIX},
    {"ffn_gate_exps.weight", KW_DIM_EMBD, KW_DIM_FF_EXP, KW_ROLE_EXPERTS},
    {"ffn_up_exps.weight", KW_DIM_EMBD, KW_DIM_FF_EXP, KW_ROLE_EXPERTS},
    {"ffn_down_exps.weight", KW_DIM_FF_EXP, KW_DIM_EMBD, KW_ROLE_EXPERTS},
};

static void check_qwen3moe(const kw_arch_desc *m) {
    KW_CHECK(m && kw_arch_find_hf("qwen3_moe") == m && m->rope == KW_ROPE_NEOX && m->ffn == KW_FFN_MOE);
    if (!m) return;
    KW_CHECK(kw_arch_presence(m, KW_FEAT_QK_NORM) == KW_REQUIRED && kw_arch_presence(m, KW_FEAT_QKV_BIAS) == KW_OPTIONAL);
    KW_CHECK(kw_arch_presence(m, KW_FEAT_SHARED_EXPERT) == KW_ABSENT);
    KW_CHECK(m->layers.mixer == KW_MIXER_ATTENTION && m->layers.every_nth == KW_MIXER_ATTENTION);
    int n = (int)(sizeof k_moe_layout / sizeof *k_moe_layout), k = 0;
    for (const kw_tensor_spec *t = m->ffn_tensors; t && t->name; t++, k++) {
        KW_CHECK_MSG(k < n && !strcmp(t->name, k_moe_layout[k].name), "qwen3moe: ffn tensor %d is %s", k, t->name);
        if (k < n)
            KW_CHECK_MSG(t->ne0 == k_moe_layout[k].ne0 && t->ne1 == k_moe_layout[k].ne1 && t->role == k_moe_layout[k].role,
                         "qwen3moe: %s", t->name);
    }
    KW_CHECK_EQ_INT(k, n);
    /* its attention is qwen3's */
    KW_CHECK(kw_arch_mixer_tensors(m, KW_MIXER_ATTENTION) == kw_arch_mixer_tensors(kw_arch_find("qwen3"), KW_MIXER_ATTENTION));
    KW_CHECK(kw_arch_is_layer_experts(m, "blk.7.ffn_down_exps.weight") && !kw_arch_is_layer_matrix(m, "blk.7.ffn_down_exps.weight"));
    KW_CHECK(kw_arch_is_layer_matrix(m, "blk.0.ffn_gate_inp.weight") && !kw_arch_is_layer_experts(m, "blk.0.ffn_gate_inp.weight"));
    KW_CHECK(!kw_arch_is_layer_experts(kw_arch_find("qwen3"), "blk.0.ffn_up_exps.weight"));
    KW_CHECK(!strcmp(kw_feature_label(KW_FEAT_SHARED_EXPERT), "gated shared expert"));
}

static void test_known_facts(void) {
    check_qwen3moe(kw_arch_find("qwen3moe"));
    const kw_arch_desc *l = kw_arch_find("llama"), *q2 = kw_arch_find("qwen2"), *q3 = kw_arch_find("qwen3");
    KW_CHECK(l && q2 && q3);
    if (!l || !q2 || !q3) return;
    KW_CHECK(!strcmp(l->gguf_name, "llama") && !strcmp(q2->gguf_name, "qwen2") && !strcmp(q3->gguf_name, "qwen3"));
    KW_CHECK(kw_arch_find_hf("llama") == l && kw_arch_find_hf("qwen2") == q2 && kw_arch_find_hf("qwen3") == q3);
    KW_CHECK(l->rope == KW_ROPE_NORMAL && q2->rope == KW_ROPE_NEOX && q3->rope == KW_ROPE_NEOX);
    KW_CHECK(kw_arch_presence(q2, KW_FEAT_QKV_BIAS) == KW_REQUIRED);
    KW_CHECK(kw_arch_presence(l, KW_FEAT_QKV_BIAS) == KW_OPTIONAL && kw_arch_presence(q3, KW_FEAT_QKV_BIAS) == KW_OPTIONAL);
    KW_CHECK(kw_arch_presence(q3, KW_FEAT_QK_NORM) == KW_REQUIRED);
    KW_CHECK(kw_arch_presence(l, KW_FEAT_QK_NORM) == KW_ABSENT && kw_arch_presence(q2, KW_FEAT_QK_NORM) == KW_ABSENT);
    KW_CHECK(!strcmp(kw_feature_label(KW_FEAT_QKV_BIAS), "q/k/v biases") && !strcmp(kw_feature_label(KW_FEAT_QK_NORM), "q/k norm"));
    const kw_arch_desc *all[3] = {l, q2, q3};
    for (int i = 0; i < 3; i++) {
        KW_CHECK(all[i]->layers.mixer == KW_MIXER_ATTENTION && all[i]->layers.every_nth == KW_MIXER_ATTENTION);
        KW_CHECK(all[i]->layers.interval_key == NULL && all[i]->layers.interval_default == 0 && all[i]->ffn == KW_FFN_DENSE);
        check_attention_layout(all[i]);
    }
}

/* ---- lookups and the supported list ---- */

static void test_lookups(void) {
    int n = kw_arch_count();
    KW_CHECK(n >= 3);
    KW_CHECK(kw_arch_at(-1) == NULL && kw_arch_at(n) == NULL);
    const char *list = kw_arch_supported_list();
    int commas = 0;
    for (const char *p = list; (p = strstr(p, ", ")) != NULL; p += 2) commas++;
    KW_CHECK_EQ_INT(commas, n - 1);
    for (int i = 0; i < n; i++) {
        const kw_arch_desc *a = kw_arch_at(i);
        KW_CHECK_MSG(kw_arch_find(a->gguf_name) == a, "find(%s)", a->gguf_name);
        KW_CHECK_MSG(strstr(list, a->gguf_name) != NULL, "%s not in '%s'", a->gguf_name, list);
        KW_CHECK_MSG(a->hf_model_types[0] != NULL, "%s has no model_type", a->gguf_name);
        for (int k = 0; k < KW_ARCH_MAX_HF_TYPES && a->hf_model_types[k]; k++)
            KW_CHECK_MSG(kw_arch_find_hf(a->hf_model_types[k]) == a, "find_hf(%s)", a->hf_model_types[k]);
    }
    KW_CHECK(kw_arch_find("mamba") == NULL && kw_arch_find("") == NULL && kw_arch_find(NULL) == NULL);
    KW_CHECK(kw_arch_find("LLAMA") == NULL);   /* general.architecture is matched exactly */
    KW_CHECK(kw_arch_find_hf("mamba") == NULL && kw_arch_find_hf(NULL) == NULL);
}

/* A metadata-only file with general.architecture = arch (NULL: none). */
static const char *write_arch_only(const char *arch, const char *name) {
    kw_gguf_writer *w = kw_gguf_writer_create();
    if (arch) kw_gguf_writer_set_str(w, "general.architecture", arch);
    kw_gguf_writer_set_u32(w, "x.block_count", 1);
    kw_err err = {{0}};
    int rc = kw_gguf_writer_write(w, tmp(name), &err);
    kw_gguf_writer_destroy(w);
    return rc == 0 ? tmp(name) : NULL;
}

static void expect_list_in_refusal(const char *arch, const char *name) {
    const char *path = write_arch_only(arch, name);
    KW_CHECK(path != NULL);
    if (!path) return;
    kw_err err = {{0}};
    kw_model *m = kw_model_load(path, NULL, &err);
    char want[256];
    snprintf(want, sizeof want, "(supported: %s)", kw_arch_supported_list());
    KW_CHECK_MSG(m == NULL && strstr(err.msg, want), "%s: '%s'", name, err.msg);
    if (arch) KW_CHECK_MSG(strstr(err.msg, arch) != NULL, "'%s' lacks %s", err.msg, arch);
    kw_model_free(m);
}

static void test_unknown_names(void) {
    expect_list_in_refusal("mamba", "mamba.gguf");
    expect_list_in_refusal(NULL, "noarch.gguf");
    kw_mk_shape s;
    kw_err e = {{0}};
    KW_CHECK(kw_mk_preset("tiny", &s, &e) == 0);
    snprintf(s.arch, sizeof s.arch, "mamba");
    char want[256];
    snprintf(want, sizeof want, "unknown architecture 'mamba' (supported: %s)", kw_arch_supported_list());
    KW_CHECK_MSG(kw_mk_shape_check(&s, &e) == -1 && strstr(e.msg, want), "'%s'", e.msg);
}

/* ---- invariants of every entry ---- */

static int list_len(const kw_tensor_spec *l) {
    int n = 0;
    while (l && l[n].name) n++;
    return n;
}

/* The tensors of one layer (mixer list + ffn list): valid fields, unique
 * names and slots, matrices 2-D, norms and biases 1-D. */
static void check_layer_lists(const kw_arch_desc *a, const kw_tensor_spec *mix, const kw_tensor_spec *ffn) {
    const kw_tensor_spec *parts[2] = {mix, ffn};
    int seen[KW_LT_COUNT] = {0}, n_matrix = 0, n_experts = 0;
    const char *names[64];
    int n = 0;
    for (int p = 0; p < 2; p++) {
        KW_CHECK_MSG(list_len(parts[p]) > 0, "%s: empty tensor list", a->gguf_name);
        for (const kw_tensor_spec *t = parts[p]; t && t->name; t++) {
            KW_CHECK_MSG(t->what < KW_LT_COUNT && t->feature < KW_FEATURES && t->role <= KW_ROLE_CONV, "%s %s", a->gguf_name, t->name);
            if (t->what >= KW_LT_COUNT) continue;
            KW_CHECK_MSG(seen[t->what]++ == 0, "%s: %s binds a slot twice", a->gguf_name, t->name);
            for (int k = 0; k < n; k++) KW_CHECK_MSG(strcmp(names[k], t->name) != 0, "%s: %s twice", a->gguf_name, t->name);
            if (n < 64) names[n++] = t->name;
            if (t->role == KW_ROLE_MATRIX || t->role == KW_ROLE_EXPERTS) {
                n_matrix += t->role == KW_ROLE_MATRIX;
                n_experts += t->role == KW_ROLE_EXPERTS;
                KW_CHECK_MSG(t->ne0 != KW_DIM_1 && t->ne1 != KW_DIM_1, "%s: matrix %s is not 2-D", a->gguf_name, t->name);
                KW_CHECK_MSG(strstr(t->name, ".weight") != NULL, "%s: %s", a->gguf_name, t->name);
            } else if (t->role == KW_ROLE_CONV) {
                KW_CHECK_MSG(t->ne0 != KW_DIM_1 && t->ne1 != KW_DIM_1, "%s: filters %s are not 2-D", a->gguf_name, t->name);
            } else {
                KW_CHECK_MSG(t->ne0 != KW_DIM_1 && t->ne1 == KW_DIM_1, "%s: vector %s is not 1-D", a->gguf_name, t->name);
            }
        }
    }
    KW_CHECK_MSG(n_matrix > 0 && n_matrix <= 16, "%s: %d matrices per layer", a->gguf_name, n_matrix);
    /* expert tensors exactly in a mixture-of-experts block: gate, up and down */
    KW_CHECK_MSG(n_experts == (a->ffn == KW_FFN_MOE ? 3 : 0), "%s: %d expert tensors", a->gguf_name, n_experts);
}

static void test_entries_consistent(void) {
    for (int i = 0; i < kw_arch_count(); i++) {
        const kw_arch_desc *a = kw_arch_at(i);
        KW_CHECK_MSG(a->gguf_name && *a->gguf_name && strlen(a->gguf_name) < 16, "entry %d name", i);
        for (int j = 0; j < i; j++) {
            const kw_arch_desc *b = kw_arch_at(j);
            KW_CHECK_MSG(strcmp(a->gguf_name, b->gguf_name) != 0, "%s twice", a->gguf_name);
            for (int k = 0; k < KW_ARCH_MAX_HF_TYPES && a->hf_model_types[k]; k++)
                for (int m = 0; m < KW_ARCH_MAX_HF_TYPES && b->hf_model_types[m]; m++)
                    KW_CHECK_MSG(strcmp(a->hf_model_types[k], b->hf_model_types[m]) != 0, "model_type %s twice", a->hf_model_types[k]);
        }
        KW_CHECK(a->presence[KW_FEAT_CORE] == KW_REQUIRED && kw_arch_presence(a, KW_FEAT_CORE) == KW_REQUIRED);
        for (int f = 0; f < KW_FEATURES; f++) KW_CHECK(a->presence[f] <= KW_REQUIRED);
        KW_CHECK(a->rope == KW_ROPE_NORMAL || a->rope == KW_ROPE_NEOX);
        KW_CHECK(a->ffn < KW_FFN_KINDS);
        const kw_layer_schedule *ls = &a->layers;
        KW_CHECK(ls->mixer < KW_MIXER_KINDS && ls->every_nth < KW_MIXER_KINDS && ls->interval_default >= 0);
        KW_CHECK_MSG(ls->interval_key || ls->interval_default > 0 || ls->every_nth == ls->mixer,
                     "%s: every_nth differs but no layer can run it", a->gguf_name);
        /* every mixer the schedule can pick has its tensors */
        check_layer_lists(a, kw_arch_mixer_tensors(a, ls->mixer), a->ffn_tensors);
        if (ls->every_nth != ls->mixer) check_layer_lists(a, kw_arch_mixer_tensors(a, ls->every_nth), a->ffn_tensors);
        KW_CHECK(a->defaults.context_length > 0 && a->defaults.rms_eps > 0 && a->defaults.rms_eps < 1 && a->defaults.rope_freq_base > 0);
    }
}

static void test_helpers(void) {
    const kw_arch_desc *l = kw_arch_find("llama");
    if (!l) return;
    KW_CHECK(kw_arch_is_layer_matrix(l, "blk.0.attn_q.weight") && kw_arch_is_layer_matrix(l, "blk.12.ffn_down.weight"));
    KW_CHECK(kw_arch_is_layer_matrix(l, "blk.3.attn_output.weight"));
    KW_CHECK(!kw_arch_is_layer_matrix(l, "blk.0.attn_q.bias") && !kw_arch_is_layer_matrix(l, "blk.0.attn_norm.weight"));
    KW_CHECK(!kw_arch_is_layer_matrix(l, "attn_q.weight") && !kw_arch_is_layer_matrix(l, "blk.x.attn_q.weight"));
    KW_CHECK(!kw_arch_is_layer_matrix(l, "blk.0attn_q.weight") && !kw_arch_is_layer_matrix(l, "output.weight"));
    KW_CHECK(!kw_arch_is_layer_matrix(NULL, "blk.0.attn_q.weight"));
    /* the every-Nth rule: layer i runs every_nth when (i + 1) % N == 0 */
    kw_arch_desc d = *l;
    d.layers.every_nth = (kw_mixer_kind)(KW_MIXER_KINDS);   /* a marker, only compared */
    int hits = 0;
    for (int il = 0; il < 8; il++) hits += kw_arch_layer_mixer(&d, 4, il) == d.layers.every_nth ? 1 << il : 0;
    KW_CHECK_EQ_INT(hits, (1 << 3) | (1 << 7));
    for (int il = 0; il < 8; il++) KW_CHECK(kw_arch_layer_mixer(&d, 0, il) == d.layers.mixer);
    KW_CHECK(kw_mixer_has_kv(KW_MIXER_ATTENTION));
    kw_hparams hp = {.n_embd = 96, .n_head = 6, .n_head_kv = 2, .head_dim_k = 20, .head_dim_v = 24, .n_ff = 200};
    KW_CHECK(kw_dim_size(KW_DIM_1, &hp) == 1 && kw_dim_size(KW_DIM_EMBD, &hp) == 96 && kw_dim_size(KW_DIM_FF, &hp) == 200);
    KW_CHECK(kw_dim_size(KW_DIM_Q, &hp) == 120 && kw_dim_size(KW_DIM_K, &hp) == 40 && kw_dim_size(KW_DIM_V, &hp) == 48);
    KW_CHECK(kw_dim_size(KW_DIM_ATTN_OUT, &hp) == 144 && kw_dim_size(KW_DIM_HEAD_K, &hp) == 20);
}

/* config.json model_type -> descriptor, and what it fixes in the plan's hparams */
static void test_hf_config(void) {
    static const char *cfg =
        "{\"model_type\":\"%s\",\"num_hidden_layers\":2,\"num_attention_heads\":4,\"hidden_size\":64%s}";
    const char *types[] = {"llama", "qwen2", "qwen3", "llama", "mamba"};
    const char *extra[] = {"", "", "", ",\"attention_bias\":true", ""};
    for (int i = 0; i < 5; i++) {
        char json[512];
        snprintf(json, sizeof json, cfg, types[i], extra[i]);
        kw_plan_model pm;
        kw_err e = {{0}};
        KW_CHECK_MSG(kw_plan_model_from_hf_config(json, strlen(json), 1 << 20, &pm, &e) == 0, "%s", e.msg);
        const kw_arch_desc *a = kw_arch_find_hf(types[i]);
        KW_CHECK(pm.hp.arch == a && !strcmp(pm.hp.arch_name, types[i]));
        KW_CHECK_EQ_INT(pm.hp.rope_neox, a && a->rope == KW_ROPE_NEOX);
        KW_CHECK_EQ_INT(pm.hp.has_qkv_bias, i == 1 || i == 3);
        KW_CHECK_EQ_INT(pm.hp.has_qk_norm, i == 2);
    }
}

/* ---- round trip through mkmodel and the loader ---- */

static kw_mk_shape tiny_shape(const char *arch) {
    kw_mk_shape s;
    kw_err e;
    kw_mk_preset("tiny", &s, &e);
    snprintf(s.arch, sizeof s.arch, "%s", arch);
    s.n_layer = 2;
    s.n_embd = 64;
    s.n_ff = 96;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.head_dim = 16;
    s.n_vocab = 300;
    s.tied = false;
    /* a hybrid: one full cycle of its schedule (delta net layers, then attention) */
    if (kw_arch_find(arch) && kw_arch_find(arch)->layers.interval_default > s.n_layer)
        s.n_layer = kw_arch_find(arch)->layers.interval_default;
    if (kw_arch_find(arch) && kw_arch_find(arch)->ffn == KW_FFN_MOE) {
        s.n_expert = 4;
        s.n_expert_used = 2;
        s.n_ff_exp = 32;
    }
    return s;
}

static kw_hparams shape_hp(const kw_mk_shape *s) {
    kw_hparams hp = {.n_embd = s->n_embd, .n_head = s->n_head, .n_head_kv = s->n_head_kv,
                     .head_dim_k = s->head_dim, .head_dim_v = s->head_dim, .n_ff = s->n_ff,
                     .n_expert = s->n_expert, .n_expert_used = s->n_expert_used, .n_ff_exp = s->n_ff_exp,
                     .n_ff_shexp = s->n_ff_shexp, .has_shared_expert = s->n_ff_shexp > 0,
                     .ssm_d_state = s->ssm_d_state, .ssm_n_group = s->ssm_n_group, .ssm_dt_rank = s->ssm_dt_rank,
                     .ssm_d_inner = s->ssm_dt_rank * s->ssm_d_state, .ssm_d_conv = s->ssm_d_conv};
    return hp;
}

/* The file holds exactly the global tensors and, per layer, every tensor
 * the descriptor requires, with its shape. */
static void check_file_tensors(const kw_arch_desc *a, const kw_mk_shape *s, const kw_gguf *g) {
    kw_hparams hp = shape_hp(s);
    uint64_t want = 3;   /* token_embd, output_norm, output */
    for (int il = 0; il < s->n_layer; il++) {
        const kw_tensor_spec *parts[2] = {kw_arch_mixer_tensors(a, kw_arch_layer_mixer(a, a->layers.interval_default, il)),
                                          a->ffn_tensors};
        for (int p = 0; p < 2; p++)
            for (const kw_tensor_spec *t = parts[p]; t && t->name; t++) {
                char n[96];
                snprintf(n, sizeof n, "blk.%d.%s", il, t->name);
                const kw_gguf_tensor *x = kw_gguf_find_tensor(g, n);
                bool required = kw_arch_presence(a, t->feature) == KW_REQUIRED;
                KW_CHECK_MSG((x != NULL) == required, "%s: %s %s", a->gguf_name, n, x ? "written" : "missing");
                if (!x) continue;
                want++;
                KW_CHECK_MSG(x->ne[0] == kw_dim_size(t->ne0, &hp) && x->ne[1] == kw_dim_size(t->ne1, &hp),
                             "%s: %s is [%lld, %lld]", a->gguf_name, n, (long long)x->ne[0], (long long)x->ne[1]);
                KW_CHECK_MSG((t->role == KW_ROLE_MATRIX || t->role == KW_ROLE_CONV) == (x->n_dims == 2), "%s: %s dims",
                             a->gguf_name, n);
                KW_CHECK_MSG((t->role == KW_ROLE_EXPERTS) == (x->n_dims == 3 && x->ne[2] == s->n_expert), "%s: %s experts",
                             a->gguf_name, n);
            }
    }
    KW_CHECK_EQ_INT(g->n_tensors, want);
}

/* The decode spans of every layer: the matrices the descriptor requires
 * and, of each expert tensor, the n_expert_used experts a token reads. */
static int required_matrices(const kw_arch_desc *a, const kw_hparams *hp) {
    int n = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        const kw_tensor_spec *parts[2] = {kw_arch_mixer_tensors(a, kw_arch_layer_mixer(a, hp->layer_interval, il)), a->ffn_tensors};
        for (int p = 0; p < 2; p++)
            for (const kw_tensor_spec *t = parts[p]; t && t->name; t++)
                n += (t->role == KW_ROLE_MATRIX ? 1 : t->role == KW_ROLE_EXPERTS ? hp->n_expert_used : 0) *
                     (kw_arch_presence(a, t->feature) == KW_REQUIRED);
    }
    return n;
}

/* Loads path, checks what the descriptor fixes, runs 3 tokens. */
static void check_loads_and_runs(const kw_arch_desc *a, const char *path, bool want_bias, bool want_qk_norm) {
    kw_err e = {{0}};
    kw_model *m = kw_model_load(path, NULL, &e);
    KW_CHECK_MSG(m != NULL, "%s: %s", a->gguf_name, e.msg);
    if (!m) return;
    const kw_hparams *hp = kw_model_hparams(m);
    KW_CHECK(hp->arch == a && !strcmp(hp->arch_name, a->gguf_name));
    KW_CHECK_EQ_INT(hp->rope_neox, a->rope == KW_ROPE_NEOX);
    KW_CHECK_EQ_INT(hp->has_qkv_bias, want_bias);
    KW_CHECK_EQ_INT(hp->has_qk_norm, want_qk_norm);
    int kv = 0;
    for (int il = 0; il < hp->n_layer; il++) kv += kw_mixer_has_kv(kw_arch_layer_mixer(a, hp->layer_interval, il));
    KW_CHECK_EQ_INT(hp->n_kv_layers, kv);
    KW_CHECK_EQ_INT(kw_model_decode_spans(m, NULL, 0), required_matrices(a, hp) + 1);   /* the layers', then the LM head */
    kw_session_opts o = {.n_ctx = 16, .n_threads = 1};
    kw_session *s = kw_session_create(m, &o, &e);
    KW_CHECK_MSG(s != NULL, "%s", e.msg);
    int32_t toks[3] = {1, 50, 200};
    if (s && kw_session_eval(s, toks, 3, false, &e) == 0) {
        const float *lg = kw_session_logits(s, -1);
        int bad = 0;
        for (int i = 0; lg && i < hp->n_vocab; i++) bad += !isfinite(lg[i]);
        KW_CHECK(lg != NULL && bad == 0);
    } else {
        KW_CHECK_MSG(false, "%s: eval: %s", a->gguf_name, e.msg);
    }
    kw_session_free(s);
    kw_model_free(m);
}

/* Copies src to dst, adding for every layer the tensors of `feature` (F32
 * values 0.01, at most 4096 each; a first dimension of bad_len when
 * bad_len > 0), or, when drop is given, leaving out blk.1.<drop>. */
static int write_edited(const kw_arch_desc *a, const kw_mk_shape *s, const char *src, const char *dst,
                        kw_feature feature, int64_t bad_len, const char *drop) {
    kw_err e = {{0}};
    kw_gguf *g = kw_gguf_open(src, &e);
    if (!g) return -1;
    kw_gguf_writer *w = kw_gguf_writer_create();
    kw_gguf_writer_copy_kvs(w, g);
    int rc = 0;
    for (uint64_t i = 0; i < g->n_tensors && rc == 0; i++) {
        const kw_gguf_tensor *t = &g->tensors[i];
        char dn[96];
        snprintf(dn, sizeof dn, "blk.1.%s", drop ? drop : "");
        if (drop && !strcmp(t->name.s, dn)) continue;
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        rc = kw_gguf_writer_add_tensor(w, t->name.s, t->type, t->n_dims, ne, t->data, &e);
    }
    kw_hparams hp = shape_hp(s);
    static float vals[4096];
    for (int k = 0; k < 4096; k++) vals[k] = 0.01f;
    for (int il = 0; il < s->n_layer && !drop && rc == 0; il++)
        for (const kw_tensor_spec *t = kw_arch_mixer_tensors(a, a->layers.mixer); t->name && rc == 0; t++) {
            if (t->feature != feature) continue;
            char n[96];
            snprintf(n, sizeof n, "blk.%d.%s", il, t->name);
            int64_t ne[2] = {kw_dim_size(t->ne0, &hp), kw_dim_size(t->ne1, &hp)};
            if (bad_len > 0) ne[0] = bad_len;
            rc = ne[0] * ne[1] > 4096 ? -1 : kw_gguf_writer_add_tensor(w, n, KW_TYPE_F32, ne[1] == 1 ? 1 : 2, ne, vals, &e);
        }
    if (rc == 0) rc = kw_gguf_writer_write(w, dst, &e);
    kw_gguf_writer_destroy(w);
    kw_gguf_close(g);
    return rc;
}

static void expect_refused(const char *path, const char *needle) {
    kw_err e = {{0}};
    kw_model *m = kw_model_load(path, NULL, &e);
    KW_CHECK_MSG(m == NULL && strstr(e.msg, needle), "%s: '%s' lacks '%s'", path, e.msg, needle);
    kw_model_free(m);
}

/* Each tensor group as its presence says: optional ones are taken when the
 * file has them (and checked), absent ones are ignored, required ones must
 * be there. */
static void check_feature_presence(const kw_arch_desc *a, const kw_mk_shape *s, const char *path) {
    for (int f = KW_FEAT_CORE + 1; f < KW_FEATURES; f++) {
        kw_presence p = kw_arch_presence(a, (kw_feature)f);
        const kw_tensor_spec *first = NULL;
        for (const kw_tensor_spec *t = kw_arch_mixer_tensors(a, a->layers.mixer); t->name && !first; t++)
            if (t->feature == (kw_feature)f) first = t;
        if (!first) continue;
        char out[128], needle[96];
        snprintf(out, sizeof out, "%s-f%d.gguf", a->gguf_name, f);
        snprintf(needle, sizeof needle, "blk.0.%s", first->name);
        if (p == KW_REQUIRED) {
            KW_CHECK(write_edited(a, s, path, tmp(out), (kw_feature)f, 0, first->name) == 0);
            snprintf(needle, sizeof needle, "blk.1.%s", first->name);
            expect_refused(tmp(out), needle);
            continue;
        }
        KW_CHECK(write_edited(a, s, path, tmp(out), (kw_feature)f, 0, NULL) == 0);
        /* the groups the loaded model has: this one if it is taken, the others if required */
        bool bias = f == KW_FEAT_QKV_BIAS ? p == KW_OPTIONAL : kw_arch_presence(a, KW_FEAT_QKV_BIAS) == KW_REQUIRED;
        bool qkn = f == KW_FEAT_QK_NORM ? p == KW_OPTIONAL : kw_arch_presence(a, KW_FEAT_QK_NORM) == KW_REQUIRED;
        check_loads_and_runs(a, tmp(out), bias, qkn);
        snprintf(out, sizeof out, "%s-f%d-bad.gguf", a->gguf_name, f);
        KW_CHECK(write_edited(a, s, path, tmp(out), (kw_feature)f, 3, NULL) == 0);
        if (p == KW_OPTIONAL) expect_refused(tmp(out), needle);    /* taken, so its shape is checked */
        else check_loads_and_runs(a, tmp(out), bias, qkn);          /* never read */
    }
}

static void test_round_trip(void) {
    for (int i = 0; i < kw_arch_count(); i++) {
        const kw_arch_desc *a = kw_arch_at(i);
        kw_mk_shape s = tiny_shape(a->gguf_name);
        kw_err e = {{0}};
        char name[64];
        snprintf(name, sizeof name, "rt-%s.gguf", a->gguf_name);
        KW_CHECK_MSG(kw_mk_write(&s, KW_TYPE_F32, 3, tmp(name), &e) == 0, "%s: %s", a->gguf_name, e.msg);
        KW_CHECK(kw_mk_shape_check(&s, &e) == 0);
        KW_CHECK_EQ_INT(s.qkv_bias, kw_arch_presence(a, KW_FEAT_QKV_BIAS) == KW_REQUIRED);
        KW_CHECK_EQ_INT(s.qk_norm, kw_arch_presence(a, KW_FEAT_QK_NORM) == KW_REQUIRED);
        kw_gguf *g = kw_gguf_open(tmp(name), &e);
        KW_CHECK_MSG(g != NULL, "%s", e.msg);
        if (!g) continue;
        check_file_tensors(a, &s, g);
        kw_gguf_close(g);
        check_loads_and_runs(a, tmp(name), s.qkv_bias, s.qk_norm);
        check_feature_presence(a, &s, tmp(name));
        /* a core tensor is always required */
        const kw_tensor_spec *ffn = a->ffn_tensors;
        int last = list_len(ffn) - 1;
        snprintf(name, sizeof name, "rt-%s-nocore.gguf", a->gguf_name);
        char src[64], needle[96];
        snprintf(src, sizeof src, "rt-%s.gguf", a->gguf_name);
        snprintf(needle, sizeof needle, "blk.1.%s", ffn[last].name);
        KW_CHECK(write_edited(a, &s, tmp(src), tmp(name), KW_FEAT_CORE, 0, ffn[last].name) == 0);
        expect_refused(tmp(name), needle);
    }
}

int main(void) {
    test_known_facts();
    test_lookups();
    test_unknown_names();
    test_entries_consistent();
    test_helpers();
    test_hf_config();
    test_round_trip();
    return kw_test_finish();
}
