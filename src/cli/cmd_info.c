/* cmd_info.c - `kvwise info -m MODEL [--json]`: what a GGUF file holds.
 *
 * Owns the summary of a model file read straight from its metadata and
 * tensor table (no weights are touched): architecture and name, shapes,
 * RoPE settings, tensor type histogram, tokenizer, chat template presence,
 * parameter count, weight bytes and file size. A file the reader refuses
 * gives the reader's one-line error and exit code 2. */
#include <stdio.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "cli.h"
#include "kvwise/arch.h"
#include "kvwise/gguf.h"
#include "kvwise/model.h"
#include "kvwise/tensor.h"

typedef struct model_summary {
    const char *arch, *name, *tok_model, *tok_pre, *rope_scaling;
    int64_t n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx_train, rope_dim, file_type;
    double rope_base, rope_scale, rms_eps;
    bool has_eps, tied;
    int64_t bos, eos;
    uint64_t template_len;
    bool has_template;
    uint64_t weight_bytes, n_params;
    int64_t type_count[KW_TYPE_COUNT];
    uint64_t type_bytes[KW_TYPE_COUNT];
} model_summary;

static int64_t arch_int(const kw_gguf *g, const char *arch, const char *suffix, int64_t dflt) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t v;
    return kw_gguf_get_int(g, key, &v) ? v : dflt;
}

static double arch_float(const kw_gguf *g, const char *arch, const char *suffix, double dflt, bool *found) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    double v;
    bool ok = kw_gguf_get_float(g, key, &v);
    if (found) *found = ok;
    return ok ? v : dflt;
}

static const char *arch_str(const kw_gguf *g, const char *arch, const char *suffix) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return kw_gguf_get_str(g, key);
}

static void summarize(const kw_gguf *g, model_summary *s) {
    memset(s, 0, sizeof *s);
    s->arch = kw_gguf_get_str(g, "general.architecture");
    const char *a = s->arch ? s->arch : "?";
    s->name = kw_gguf_get_str(g, "general.name");
    s->n_layer = arch_int(g, a, "block_count", -1);
    s->n_embd = arch_int(g, a, "embedding_length", -1);
    s->n_head = arch_int(g, a, "attention.head_count", -1);
    s->n_head_kv = arch_int(g, a, "attention.head_count_kv", s->n_head);
    s->head_dim = arch_int(g, a, "attention.key_length",
                           s->n_head > 0 && s->n_embd > 0 ? s->n_embd / s->n_head : -1);
    s->n_ff = arch_int(g, a, "feed_forward_length", -1);
    s->n_ctx_train = arch_int(g, a, "context_length", -1);
    s->rope_dim = arch_int(g, a, "rope.dimension_count", s->head_dim);
    /* absent: the architecture's default (arch.h), else llama.cpp's */
    const kw_arch_desc *d = kw_arch_find(s->arch);
    s->rope_base = arch_float(g, a, "rope.freq_base", d ? d->defaults.rope_freq_base : 10000.0, NULL);
    s->rope_scaling = arch_str(g, a, "rope.scaling.type");
    s->rope_scale = arch_float(g, a, "rope.scaling.factor", 0.0, NULL);
    s->rms_eps = arch_float(g, a, "attention.layer_norm_rms_epsilon", 0.0, &s->has_eps);
    s->file_type = -1;
    kw_gguf_get_int(g, "general.file_type", &s->file_type);
    s->tok_model = kw_gguf_get_str(g, "tokenizer.ggml.model");
    s->tok_pre = kw_gguf_get_str(g, "tokenizer.ggml.pre");
    const kw_gguf_kv *toks = kw_gguf_find(g, "tokenizer.ggml.tokens");
    s->n_vocab = toks && toks->type == KW_GGUF_ARRAY ? (int64_t)toks->arr_n : arch_int(g, a, "vocab_size", -1);
    s->bos = s->eos = -1;
    kw_gguf_get_int(g, "tokenizer.ggml.bos_token_id", &s->bos);
    kw_gguf_get_int(g, "tokenizer.ggml.eos_token_id", &s->eos);
    const kw_gguf_kv *tpl = kw_gguf_find(g, "tokenizer.chat_template");
    s->has_template = tpl && tpl->type == KW_GGUF_STRING;
    s->template_len = s->has_template ? tpl->v.s.len : 0;
    s->tied = kw_gguf_find_tensor(g, "output.weight") == NULL;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kw_gguf_tensor *t = &g->tensors[i];
        s->weight_bytes += t->nbytes;
        s->n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        if (t->type < KW_TYPE_COUNT) { s->type_count[t->type]++; s->type_bytes[t->type] += t->nbytes; }
    }
}

/* The layer layout of a hybrid (a descriptor whose schedule mixes two
 * mixers): which layers keep a KV cache, which a recurrent state. Nothing
 * for a file the loader would refuse or a single-mixer architecture. */
static void print_layout(const kw_gguf *g) {
    kw_hparams hp;
    kw_err err = {{0}};
    if (kw_hparams_from_gguf(g, &hp, &err) != 0 || hp.n_rec_layers == 0) return;
    printf("layout        %d attention (KV cache):", hp.n_kv_layers);
    for (int32_t il = 0; il < hp.n_layer; il++)
        if (kw_mixer_has_kv(kw_arch_layer_mixer(hp.arch, hp.layer_interval, il))) printf(" %d", il);
    printf("\n              %d gated delta net (recurrent state, %s per sequence):", hp.n_rec_layers,
           kw_format_bytes(hp.rec_state_bytes, (char[32]){0}, 32));
    for (int32_t il = 0; il < hp.n_layer; il++)
        if (!kw_mixer_has_kv(kw_arch_layer_mixer(hp.arch, hp.layer_interval, il))) printf(" %d", il);
    printf("\n");
    if (hp.n_nextn_layers) printf("              %d MTP (nextn) layers after them: loaded, not run\n", hp.n_nextn_layers);
    printf("ssm           state %d, key heads %d, value heads %d, conv %d\n", hp.ssm_d_state, hp.ssm_n_group,
           hp.ssm_dt_rank, hp.ssm_d_conv);
}

/* A mixture of experts: how many, how many a token uses, their width (and
 * the shared expert's); feed_forward_length is then not what runs. */
static void print_experts(const kw_gguf *g) {
    kw_hparams hp;
    kw_err err = {{0}};
    if (kw_hparams_from_gguf(g, &hp, &err) != 0 || hp.n_expert == 0) return;
    printf("experts       %d (%d per token), width %d", hp.n_expert, hp.n_expert_used, hp.n_ff_exp);
    if (hp.has_shared_expert) printf("; gated shared expert, width %d", hp.n_ff_shexp);
    printf("\n");
}

static void print_text(const kw_gguf *g, const char *path, const model_summary *s) {
    char b1[32], b2[32];
    printf("file          %s\n", path);
    printf("gguf          v%u, %llu tensors, %llu metadata keys, alignment %u\n", g->version,
           (unsigned long long)g->n_tensors, (unsigned long long)g->n_kv, g->alignment);
    printf("architecture  %s\n", s->arch ? s->arch : "(missing general.architecture)");
    printf("name          %s\n", s->name ? s->name : "(none)");
    printf("layers        %lld\n", (long long)s->n_layer);
    print_layout(g);
    printf("embedding     %lld\n", (long long)s->n_embd);
    printf("heads         %lld (kv %lld), head_dim %lld\n", (long long)s->n_head, (long long)s->n_head_kv, (long long)s->head_dim);
    printf("ffn           %lld\n", (long long)s->n_ff);
    print_experts(g);
    printf("vocab         %lld\n", (long long)s->n_vocab);
    printf("ctx_train     %lld\n", (long long)s->n_ctx_train);
    printf("rope          base %g, dims %lld", s->rope_base, (long long)s->rope_dim);
    if (s->rope_scaling) printf(", scaling %s x%g", s->rope_scaling, s->rope_scale);
    printf("\n");
    if (s->has_eps) printf("rms_eps       %g\n", s->rms_eps);
    printf("output        %s\n", s->tied ? "tied to token_embd" : "output.weight");
    printf("tokenizer     %s, pre %s, bos %lld, eos %lld\n", s->tok_model ? s->tok_model : "(none)",
           s->tok_pre ? s->tok_pre : "(none)", (long long)s->bos, (long long)s->eos);
    if (s->has_template) printf("chat template yes (%llu bytes)\n", (unsigned long long)s->template_len);
    else printf("chat template no\n");
    printf("tensor types ");
    for (int t = 0; t < KW_TYPE_COUNT; t++)
        if (s->type_count[t]) printf(" %s:%lld", kw_type_name((uint32_t)t), (long long)s->type_count[t]);
    printf("\n");
    printf("parameters    %llu (%.3f B)\n", (unsigned long long)s->n_params, (double)s->n_params / 1e9);
    printf("weight bytes  %llu (%s)\n", (unsigned long long)s->weight_bytes, kw_format_bytes(s->weight_bytes, b1, sizeof b1));
    printf("file size     %llu (%s)\n", (unsigned long long)g->size, kw_format_bytes(g->size, b2, sizeof b2));
}

static int print_json(const kw_gguf *g, const char *path, const model_summary *s, bool tensors) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "file", path);
    kw_json_add_nums(o, (kw_json_num[]){{"gguf_version", g->version}, {"n_tensors", (double)g->n_tensors},
        {"n_kv", (double)g->n_kv}, {"alignment", g->alignment}, {NULL, 0}});
    if (s->arch) cJSON_AddStringToObject(o, "arch", s->arch); else cJSON_AddNullToObject(o, "arch");
    if (s->name) cJSON_AddStringToObject(o, "name", s->name); else cJSON_AddNullToObject(o, "name");
    kw_json_add_nums(o, (kw_json_num[]){
        {"n_layer", (double)s->n_layer}, {"n_embd", (double)s->n_embd}, {"n_head", (double)s->n_head},
        {"n_head_kv", (double)s->n_head_kv}, {"head_dim", (double)s->head_dim}, {"n_ff", (double)s->n_ff},
        {"n_vocab", (double)s->n_vocab}, {"n_ctx_train", (double)s->n_ctx_train},
        {"rope_freq_base", s->rope_base}, {"rope_dim", (double)s->rope_dim}, {NULL, 0}});
    if (s->rope_scaling) {
        cJSON_AddStringToObject(o, "rope_scaling", s->rope_scaling);
        cJSON_AddNumberToObject(o, "rope_scaling_factor", s->rope_scale);
    }
    if (s->has_eps) cJSON_AddNumberToObject(o, "rms_eps", s->rms_eps);
    cJSON_AddBoolToObject(o, "tied", s->tied);
    if (s->file_type >= 0) cJSON_AddNumberToObject(o, "file_type", (double)s->file_type);
    if (s->tok_model) cJSON_AddStringToObject(o, "tokenizer", s->tok_model); else cJSON_AddNullToObject(o, "tokenizer");
    if (s->tok_pre) cJSON_AddStringToObject(o, "tokenizer_pre", s->tok_pre); else cJSON_AddNullToObject(o, "tokenizer_pre");
    cJSON_AddNumberToObject(o, "bos_token_id", (double)s->bos);
    cJSON_AddNumberToObject(o, "eos_token_id", (double)s->eos);
    cJSON_AddBoolToObject(o, "chat_template", s->has_template);
    cJSON_AddNumberToObject(o, "chat_template_bytes", (double)s->template_len);
    cJSON *counts = cJSON_AddObjectToObject(o, "tensor_type_counts");
    cJSON *bytes = cJSON_AddObjectToObject(o, "tensor_type_bytes");
    for (int t = 0; t < KW_TYPE_COUNT; t++) {
        if (!s->type_count[t]) continue;
        char up[16];
        snprintf(up, sizeof up, "%s", kw_type_name((uint32_t)t));
        for (char *c = up; *c; c++) if (*c >= 'a' && *c <= 'z') *c = (char)(*c - 32);
        cJSON_AddNumberToObject(counts, up, (double)s->type_count[t]);
        cJSON_AddNumberToObject(bytes, up, (double)s->type_bytes[t]);
    }
    cJSON_AddNumberToObject(o, "n_params", (double)s->n_params);
    cJSON_AddNumberToObject(o, "weight_bytes", (double)s->weight_bytes);
    cJSON_AddNumberToObject(o, "file_bytes", (double)g->size);
    if (tensors) {
        cJSON *arr = cJSON_AddArrayToObject(o, "tensors");
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const kw_gguf_tensor *t = &g->tensors[i];
            cJSON *x = cJSON_CreateObject();
            cJSON_AddStringToObject(x, "name", t->name.s);
            cJSON_AddStringToObject(x, "type", kw_type_name(t->type));
            cJSON *ne = cJSON_AddArrayToObject(x, "ne");
            for (uint32_t d = 0; d < t->n_dims; d++) cJSON_AddItemToArray(ne, cJSON_CreateNumber((double)t->ne[d]));
            cJSON_AddNumberToObject(x, "offset", (double)(g->data_offset + t->offset));
            cJSON_AddNumberToObject(x, "bytes", (double)t->nbytes);
            cJSON_AddItemToArray(arr, x);
        }
    }
    char *txt = cJSON_Print(o);
    cJSON_Delete(o);
    if (!txt) { fprintf(stderr, "kvwise info: out of memory\n"); return 1; }
    printf("%s\n", txt);
    cJSON_free(txt);
    return 0;
}

static void print_tensors(const kw_gguf *g) {
    printf("\n%-40s %-6s %-28s %14s %14s\n", "tensor", "type", "shape (ne0 first)", "offset", "bytes");
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kw_gguf_tensor *t = &g->tensors[i];
        char shape[64];
        int o = 0;
        for (uint32_t d = 0; d < t->n_dims && o < (int)sizeof shape; d++)
            o += snprintf(shape + o, sizeof shape - (size_t)o, d ? " x %lld" : "%lld", (long long)t->ne[d]);
        printf("%-40s %-6s %-28s %14llu %14llu\n", t->name.s, kw_type_name(t->type), shape,
               (unsigned long long)(g->data_offset + t->offset), (unsigned long long)t->nbytes);
    }
}

static void usage(FILE *f) {
    fprintf(f, "usage: kvwise info -m MODEL [--json]\n\n"
               "Prints what a GGUF file holds, read from its metadata and tensor table\n"
               "(no weights are loaded): architecture and name, layers, embedding, heads\n"
               "(kv heads, head_dim), ffn, vocab, training context, RoPE, tensor type\n"
               "histogram, tokenizer model/pre-tokenizer, chat template, parameter count,\n"
               "weight bytes and file size.\n\n"
               "  -m, --model FILE   the GGUF file\n"
               "  --json             one JSON object instead of text\n"
               "  --tensors          also list every tensor (type, shape, file offset, bytes)\n"
               "  -h, --help         this help\n\n"
               "Exit codes: 0 ok, 2 bad usage or a file the reader refuses (the one-line\n"
               "reason is printed on stderr).\n");
}

int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    bool json = false, tensors = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return 0; }
        else if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc) path = argv[++i];
        else if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--tensors")) tensors = true;
        else { fprintf(stderr, "kvwise info: unknown or incomplete option '%s'\n", argv[i]); usage(stderr); return 2; }
    }
    if (!path) { fprintf(stderr, "kvwise info: -m MODEL is required\n"); usage(stderr); return 2; }
    kw_err err = {{0}};
    kw_gguf *g = kw_gguf_open(path, &err);
    if (!g) { fprintf(stderr, "kvwise info: %s\n", err.msg); return 2; }
    model_summary s;
    summarize(g, &s);
    int rc = 0;
    if (json) rc = print_json(g, path, &s, tensors);
    else print_text(g, path, &s);
    if (tensors && !json) print_tensors(g);
    kw_gguf_close(g);
    return rc;
}
