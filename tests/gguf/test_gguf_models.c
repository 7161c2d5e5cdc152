/* test_gguf_models.c - opens every model of shared/conformance/models and
 * checks what the reader sees against models/manifest.json: file size,
 * tensor count and type histogram, the per-kind tensor types, the
 * architecture's shape keys, tokenizer model and vocab size. */
#include "testutil.h"
#include <string.h>
#include <dirent.h>
#include <cjson/cJSON.h>
#include "kvwise/gguf.h"
#include "kvwise/tensor.h"

static int64_t arch_int(const kw_gguf *g, const char *arch, const char *suffix) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t v = -1;
    return kw_gguf_get_int(g, key, &v) ? v : -1;
}

static void upper(char *s) { for (; *s; s++) if (*s >= 'a' && *s <= 'z') *s = (char)(*s - 32); }

/* "blk.3.attn_q.weight" -> "attn_q.weight"; others unchanged */
static const char *tensor_kind(const char *name) {
    if (strncmp(name, "blk.", 4)) return name;
    const char *dot = strchr(name + 4, '.');
    return dot ? dot + 1 : name;
}

static void check_model(const char *dir, const cJSON *m) {
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItem(m, "file"));
    if (!file) { KW_CHECK(0); return; }
    kw_err e = {{0}};
    kw_gguf *g = kw_gguf_open(kw_test_path(dir, file), &e);
    KW_CHECK_MSG(g != NULL, "%s: %s", file, e.msg);
    if (!g) return;
    KW_CHECK_EQ_INT(g->size, (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(m, "bytes")));
    const char *arch = cJSON_GetStringValue(cJSON_GetObjectItem(m, "arch"));
    KW_CHECK(arch && kw_gguf_get_str(g, "general.architecture") && !strcmp(kw_gguf_get_str(g, "general.architecture"), arch));
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(m, "general.name"));
    KW_CHECK_MSG(name && kw_gguf_get_str(g, "general.name") && !strcmp(kw_gguf_get_str(g, "general.name"), name), "%s", file);
    if (arch) {
        KW_CHECK_EQ_INT(arch_int(g, arch, "block_count"), cJSON_GetNumberValue(cJSON_GetObjectItem(m, "n_layer")));
        KW_CHECK_EQ_INT(arch_int(g, arch, "embedding_length"), cJSON_GetNumberValue(cJSON_GetObjectItem(m, "n_embd")));
        KW_CHECK_EQ_INT(arch_int(g, arch, "attention.head_count"), cJSON_GetNumberValue(cJSON_GetObjectItem(m, "n_head")));
        KW_CHECK_EQ_INT(arch_int(g, arch, "attention.head_count_kv"), cJSON_GetNumberValue(cJSON_GetObjectItem(m, "n_head_kv")));
        KW_CHECK_EQ_INT(arch_int(g, arch, "feed_forward_length"), cJSON_GetNumberValue(cJSON_GetObjectItem(m, "n_ff")));
        KW_CHECK_EQ_INT(arch_int(g, arch, "context_length"), cJSON_GetNumberValue(cJSON_GetObjectItem(m, "n_ctx_train")));
        char key[128];
        snprintf(key, sizeof key, "%s.rope.freq_base", arch);
        double base = 10000.0;   /* llama.cpp's default when the key is absent */
        kw_gguf_get_float(g, key, &base);
        KW_CHECK_NEAR(base, cJSON_GetNumberValue(cJSON_GetObjectItem(m, "rope_freq_base")), 0.0);
    }
    const char *tok = cJSON_GetStringValue(cJSON_GetObjectItem(m, "tokenizer"));
    KW_CHECK(tok && kw_gguf_get_str(g, "tokenizer.ggml.model") && !strcmp(kw_gguf_get_str(g, "tokenizer.ggml.model"), tok));
    const kw_gguf_kv *toks = kw_gguf_find(g, "tokenizer.ggml.tokens");
    KW_CHECK(toks && toks->type == KW_GGUF_ARRAY && toks->arr_type == KW_GGUF_STRING);
    if (toks) KW_CHECK_EQ_INT(toks->arr_n, cJSON_GetNumberValue(cJSON_GetObjectItem(m, "n_vocab")));

    /* tensor type histogram and per-kind types */
    const cJSON *counts = cJSON_GetObjectItem(m, "tensor_type_counts");
    int64_t total = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, counts) {
        int64_t n = 0;
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            char tn[16];
            snprintf(tn, sizeof tn, "%s", kw_type_name(g->tensors[i].type));
            upper(tn);
            if (!strcmp(tn, c->string)) n++;
        }
        KW_CHECK_MSG(n == (int64_t)c->valuedouble, "%s: %s count %lld vs %g", file, c->string, (long long)n, c->valuedouble);
        total += (int64_t)c->valuedouble;
    }
    KW_CHECK_EQ_INT(g->n_tensors, total);
    const cJSON *kinds = cJSON_GetObjectItem(m, "tensor_types");
    int mismatches = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const cJSON *allowed = cJSON_GetObjectItem(kinds, tensor_kind(g->tensors[i].name.s));
        if (!allowed) continue;
        char tn[16];
        snprintf(tn, sizeof tn, "%s", kw_type_name(g->tensors[i].type));
        upper(tn);
        int ok = 0;
        const cJSON *a;
        cJSON_ArrayForEach(a, allowed) if (a->valuestring && !strcmp(a->valuestring, tn)) ok = 1;
        if (!ok) { mismatches++; fprintf(stderr, "%s: %s is %s\n", file, g->tensors[i].name.s, tn); }
    }
    KW_CHECK_EQ_INT(mismatches, 0);
    /* every tensor's data lies inside the mapping, aligned */
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kw_gguf_tensor *t = &g->tensors[i];
        KW_CHECK((const uint8_t *)t->data + t->nbytes <= g->base + g->size);
        KW_CHECK(((const uint8_t *)t->data - g->base) % g->alignment == 0);
    }
    kw_gguf_close(g);
}

/* Every vocab-only GGUF of conformance/tokenizer opens and carries a
 * vocabulary whose tokens/scores/types arrays agree in length. */
static void check_vocab_files(const char *shared) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/conformance/tokenizer", shared);
    DIR *d = opendir(dir);
    KW_CHECK(d != NULL);
    if (!d) return;
    int n_files = 0;
    struct dirent *ent;
    while ((ent = readdir(d))) {
        size_t l = strlen(ent->d_name);
        if (l < 5 || strcmp(ent->d_name + l - 5, ".gguf")) continue;
        n_files++;
        kw_err e = {{0}};
        kw_gguf *g = kw_gguf_open(kw_test_path(dir, ent->d_name), &e);
        KW_CHECK_MSG(g != NULL, "%s: %s", ent->d_name, e.msg);
        if (!g) continue;
        const kw_gguf_kv *toks = kw_gguf_find(g, "tokenizer.ggml.tokens");
        KW_CHECK_MSG(toks && toks->arr_type == KW_GGUF_STRING && toks->arr_n > 0, "%s", ent->d_name);
        const kw_gguf_kv *types = kw_gguf_find(g, "tokenizer.ggml.token_type");
        if (toks && types) KW_CHECK_EQ_INT(types->arr_n, toks->arr_n);
        const kw_gguf_kv *scores = kw_gguf_find(g, "tokenizer.ggml.scores");
        if (toks && scores) KW_CHECK(scores->arr_type == KW_GGUF_FLOAT32 && scores->arr_n == toks->arr_n);
        KW_CHECK(kw_gguf_get_str(g, "tokenizer.ggml.model") != NULL);
        kw_gguf_close(g);
    }
    closedir(d);
    KW_CHECK(n_files >= 11);
}

int main(void) {
    const char *shared = kw_test_shared_dir();
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/conformance/models", shared);
    char *json = kw_test_read_file(kw_test_path(dir, "manifest.json"), NULL);
    KW_CHECK(json != NULL);
    if (!json) return kw_test_finish();
    cJSON *root = cJSON_Parse(json);
    KW_CHECK(cJSON_IsArray(root) && cJSON_GetArraySize(root) >= 9);
    const cJSON *m;
    cJSON_ArrayForEach(m, root) check_model(dir, m);
    cJSON_Delete(root);
    free(json);
    check_vocab_files(shared);
    return kw_test_finish();
}
