/* plan_hf.c - a kw_plan_model from a Hugging Face config.json (plan.h), so a
 * model can be planned before it is downloaded.
 *
 * Owns: reading the shape keys (num_hidden_layers, num_attention_heads,
 * num_key_value_heads, head_dim, hidden_size, intermediate_size,
 * vocab_size, max_position_embeddings; a nested "text_config" is used when
 * the top level has no layers), the architecture's descriptor by model_type
 * (arch.h; none for a model kvwise cannot run yet: it is still planned),
 * deciding which layers keep a KV cache, and the fixed per-sequence state
 * of the others. Which layers are attention:
 *   layer_types: ["full_attention"|"attention"|"sliding_attention"|...,
 *                 "linear_attention"|"mamba"|...]  (one entry per layer)
 *   full_attention_interval: k   -> layer i is attention when (i+1) % k == 0
 *   attn_layer_period/offset: p, o -> layer i is attention when i % p == o
 *   hybrid_override_pattern: "M-M*..." -> '*' attention, 'M' mamba, '-' MLP only
 *   none of these               -> every layer is attention
 * State per linear layer, in float32 (what the recurrence keeps):
 *   gated delta net (Qwen3-Next / Qwen3.5: linear_num_value_heads Hv,
 *   linear_num_key_heads Hk, linear_key_head_dim dk, linear_value_head_dim dv,
 *   linear_conv_kernel_dim K):  Hv*dk*dv*4 + (K-1)*(2*Hk*dk + Hv*dv)*4
 *   mamba2 (mamba_num_heads H, mamba_head_dim P, ssm_state_size N, n_groups G,
 *   conv_kernel K):  H*P*N*4 + (K-1)*(H*P + 2*G*N)*4
 *   mamba1 (mamba_d_state N, mamba_d_conv K, mamba_expand e; d = e*hidden):
 *   d*N*4 + (K-1)*d*4 */
#include "plan_internal.h"
#include "kvwise/tensor.h"
#include <cjson/cJSON.h>
#include <string.h>
#include <strings.h>

static bool get_int(const cJSON *o, const char *key, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= 1e12) || d != (double)(int64_t)d) return false;
    *out = (int64_t)d;
    return true;
}

static int64_t get_int_or(const cJSON *o, const char *key, int64_t def) {
    int64_t v;
    return get_int(o, key, &v) ? v : def;
}

static double get_num_or(const cJSON *o, const char *key, double def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : def;
}

static int need_int(const cJSON *o, const char *key, int64_t lo, int64_t hi, int32_t *out, kw_err *err) {
    int64_t v;
    if (!get_int(o, key, &v)) return kw_err_set(err, "config.json: missing or non-integer \"%s\"", key);
    if (v < lo || v > hi) return kw_err_set(err, "config.json: \"%s\" = %lld is out of range %lld..%lld", key,
                                            (long long)v, (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return 0;
}

typedef enum { LAYER_ATTN, LAYER_SLIDING, LAYER_LINEAR, LAYER_MLP } layer_kind;

static bool is_attn_name(const char *s) {
    return !strcasecmp(s, "full_attention") || !strcasecmp(s, "attention") || !strcasecmp(s, "global_attention") ||
           !strcasecmp(s, "full") || !strcasecmp(s, "global");
}
static bool is_sliding_name(const char *s) {
    return !strcasecmp(s, "sliding_attention") || !strcasecmp(s, "local_attention") ||
           !strcasecmp(s, "chunked_attention") || !strcasecmp(s, "sliding") || !strcasecmp(s, "local");
}

/* Counts attention / linear layers; returns -1 with err on a malformed list. */
static int classify_layers(const cJSON *c, int32_t n_layer, int32_t *n_attn, int32_t *n_linear, bool *sliding, kw_err *err) {
    *n_attn = n_layer;
    *n_linear = 0;
    *sliding = false;
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(c, "layer_types");
    if (cJSON_IsArray(types)) {
        int n = cJSON_GetArraySize(types);
        if (n != n_layer)
            return kw_err_set(err, "config.json: layer_types has %d entries but num_hidden_layers is %d", n, n_layer);
        int32_t a = 0, l = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, types) {
            if (!cJSON_IsString(t)) return kw_err_set(err, "config.json: layer_types holds a non-string");
            if (is_attn_name(t->valuestring)) a++;
            else if (is_sliding_name(t->valuestring)) { a++; *sliding = true; }
            else l++;   /* linear_attention, mamba, recurrent, conv, ... */
        }
        *n_attn = a;
        *n_linear = l;
        return 0;
    }
    int64_t k;
    if (get_int(c, "full_attention_interval", &k) && k > 0) {
        int32_t a = 0;
        for (int32_t i = 0; i < n_layer; i++) a += ((i + 1) % k == 0);
        *n_attn = a;
        *n_linear = n_layer - a;
        return 0;
    }
    int64_t period, offset;
    if (get_int(c, "attn_layer_period", &period) && period > 0 && get_int(c, "attn_layer_offset", &offset)) {
        int32_t a = 0;
        for (int32_t i = 0; i < n_layer; i++) a += (i % period == offset);
        *n_attn = a;
        *n_linear = n_layer - a;
        return 0;
    }
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(c, "hybrid_override_pattern");
    if (cJSON_IsString(pat)) {
        int32_t a = 0, l = 0;
        for (const char *s = pat->valuestring; *s; s++) {
            if (*s == '*') a++;
            else if (*s == 'M') l++;
        }
        if ((int32_t)strlen(pat->valuestring) != n_layer)
            return kw_err_set(err, "config.json: hybrid_override_pattern has %zu layers but num_hidden_layers is %d",
                              strlen(pat->valuestring), n_layer);
        *n_attn = a;
        *n_linear = l;
    }
    return 0;
}

/* Fixed state of one linear layer, in bytes; 0 (and formula "") if unknown. */
static uint64_t linear_state_per_layer(const cJSON *c, int64_t hidden, char *formula, size_t cap) {
    int64_t hv, hk, dk, dv, K;
    if (get_int(c, "linear_num_value_heads", &hv) && get_int(c, "linear_key_head_dim", &dk) &&
        get_int(c, "linear_value_head_dim", &dv)) {
        hk = get_int_or(c, "linear_num_key_heads", hv);
        K = get_int_or(c, "linear_conv_kernel_dim", 4);
        uint64_t rec = (uint64_t)hv * (uint64_t)dk * (uint64_t)dv * 4;
        uint64_t conv = (uint64_t)(K > 0 ? K - 1 : 0) * (uint64_t)(2 * hk * dk + hv * dv) * 4;
        snprintf(formula, cap, "gated delta net: %lld*%lld*%lld*4 + (%lld-1)*(2*%lld*%lld + %lld*%lld)*4 = %llu bytes/layer",
                 (long long)hv, (long long)dk, (long long)dv, (long long)K, (long long)hk, (long long)dk,
                 (long long)hv, (long long)dv, (unsigned long long)(rec + conv));
        return rec + conv;
    }
    int64_t H, P, N, G;
    if (get_int(c, "mamba_num_heads", &H) && get_int(c, "mamba_head_dim", &P) &&
        (get_int(c, "ssm_state_size", &N) || get_int(c, "mamba_d_state", &N))) {
        G = get_int_or(c, "n_groups", 1);
        K = get_int_or(c, "conv_kernel", get_int_or(c, "mamba_d_conv", 4));
        uint64_t ssm = (uint64_t)H * (uint64_t)P * (uint64_t)N * 4;
        uint64_t conv = (uint64_t)(K > 0 ? K - 1 : 0) * (uint64_t)(H * P + 2 * G * N) * 4;
        snprintf(formula, cap, "mamba2: %lld*%lld*%lld*4 + (%lld-1)*(%lld*%lld + 2*%lld*%lld)*4 = %llu bytes/layer",
                 (long long)H, (long long)P, (long long)N, (long long)K, (long long)H, (long long)P,
                 (long long)G, (long long)N, (unsigned long long)(ssm + conv));
        return ssm + conv;
    }
    if (get_int(c, "mamba_d_state", &N)) {
        int64_t e = get_int_or(c, "mamba_expand", 2);
        K = get_int_or(c, "mamba_d_conv", 4);
        uint64_t d = (uint64_t)(e * hidden);
        uint64_t st = d * (uint64_t)N * 4 + (uint64_t)(K > 0 ? K - 1 : 0) * d * 4;
        snprintf(formula, cap, "mamba: d=%lld*%lld; d*%lld*4 + (%lld-1)*d*4 = %llu bytes/layer", (long long)e,
                 (long long)hidden, (long long)N, (long long)K, (unsigned long long)st);
        return st;
    }
    formula[0] = 0;
    return 0;
}

/* The descriptor of model_type and what it fixes: the RoPE pairing and the
 * optional tensor groups (q/k/v biases also when config says attention_bias). */
static void set_arch(kw_hparams *hp, const cJSON *c) {
    hp->arch = kw_arch_find_hf(hp->arch_name);
    if (!hp->arch) return;
    hp->rope_neox = hp->arch->rope == KW_ROPE_NEOX;
    kw_presence bias = kw_arch_presence(hp->arch, KW_FEAT_QKV_BIAS);
    hp->has_qkv_bias = bias == KW_REQUIRED ||
                       (bias == KW_OPTIONAL && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "attention_bias")));
    hp->has_qk_norm = kw_arch_presence(hp->arch, KW_FEAT_QK_NORM) == KW_REQUIRED;
}

int kw_plan_model_from_hf_config(const char *json, size_t len, uint64_t weight_bytes, kw_plan_model *m, kw_err *err) {
    memset(m, 0, sizeof *m);
    if (!json) return kw_err_set(err, "config.json: no text");
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return kw_err_set(err, "config.json: not a JSON object");
    }
    const cJSON *c = root;
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    if (!cJSON_GetObjectItemCaseSensitive(root, "num_hidden_layers") && cJSON_IsObject(tc)) c = tc;

    kw_hparams *hp = &m->hp;
    int rc = -1;
    if (need_int(c, "num_hidden_layers", 1, 100000, &hp->n_layer, err) ||
        need_int(c, "num_attention_heads", 1, 100000, &hp->n_head, err) ||
        need_int(c, "hidden_size", 1, 10000000, &hp->n_embd, err))
        goto done;
    int64_t kvh = get_int_or(c, "num_key_value_heads", hp->n_head);
    int64_t hd = get_int_or(c, "head_dim", hp->n_embd / hp->n_head);
    if (kvh < 1 || kvh > hp->n_head || hd < 1 || hd > 65536) {
        kw_err_set(err, "config.json: num_key_value_heads %lld / head_dim %lld out of range", (long long)kvh, (long long)hd);
        goto done;
    }
    hp->n_head_kv = (int32_t)kvh;
    hp->head_dim_k = hp->head_dim_v = (int32_t)hd;
    int64_t ff = get_int_or(c, "intermediate_size", 0);
    int64_t n_exp = get_int_or(c, "num_experts", get_int_or(c, "num_local_experts", get_int_or(c, "n_routed_experts", 0)));
    int64_t n_used = get_int_or(c, "num_experts_per_tok", 0);
    if (n_exp > 0 && n_exp < 1000000 && n_used > 0 && n_used <= n_exp) {
        m->n_experts = (int32_t)n_exp;
        m->n_experts_used = (int32_t)n_used;
    }
    int64_t moe_ff = get_int_or(c, "moe_intermediate_size", 0) * get_int_or(c, "num_experts_per_tok", 0);
    if (moe_ff > ff) ff = moe_ff;
    if (ff == 0) ff = 4 * (int64_t)hp->n_embd;
    hp->n_ff = ff > 0 && ff < 100000000 ? (int32_t)ff : 4 * hp->n_embd;
    int64_t vocab = get_int_or(c, "vocab_size", get_int_or(root, "vocab_size", 32000));
    hp->n_vocab = vocab > 0 && vocab < 100000000 ? (int32_t)vocab : 32000;
    int64_t ctx = get_int_or(c, "max_position_embeddings", 0);
    hp->n_ctx_train = ctx > 0 && ctx <= KW_PLAN_MAX_CTX ? (int32_t)ctx : (ctx > 0 ? KW_PLAN_MAX_CTX : 0);
    double prf = get_num_or(c, "partial_rotary_factor", 1.0);
    hp->rope_dim = (int32_t)(hd * (prf > 0 && prf <= 1 ? prf : 1.0));
    hp->rms_eps = (float)get_num_or(c, "rms_norm_eps", 1e-6);
    hp->rope_base = (float)get_num_or(c, "rope_theta", 10000.0);
    hp->rope_scale = 1.0f;
    hp->tied_output = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "tie_word_embeddings")) ||
                      cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "tie_word_embeddings"));
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(c, "model_type");
    if (!cJSON_IsString(mt)) mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    snprintf(hp->arch_name, sizeof hp->arch_name, "%s", cJSON_IsString(mt) ? mt->valuestring : "unknown");
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(root, "_name_or_path");
    snprintf(hp->name, sizeof hp->name, "%s", cJSON_IsString(nm) ? nm->valuestring : "");
    set_arch(hp, c);

    bool sliding;
    if (classify_layers(c, hp->n_layer, &hp->n_kv_layers, &m->n_linear_layers, &sliding, err) != 0) goto done;
    m->kv_layers_sliding_as_full = sliding;
    if (m->n_linear_layers > 0) {
        uint64_t per = linear_state_per_layer(c, hp->n_embd, m->linear_formula, sizeof m->linear_formula);
        m->linear_state_bytes = per * (uint64_t)m->n_linear_layers;
    }

    snprintf(m->source, sizeof m->source, "hf-config");
    hp->weight_bytes = weight_bytes;
    m->weight_bytes = weight_bytes;
    m->resident_bytes = weight_bytes;
    m->read_bytes_per_token = weight_bytes;   /* all weights once per token (MoE: an upper bound) */
    m->main_type = KW_TYPE_COUNT;
    m->tokenizer_bytes = (uint64_t)hp->n_vocab * KW_PLAN_TOKENIZER_BYTES_PER_TOKEN;
    rc = 0;
done:
    cJSON_Delete(root);
    return rc;
}
