/* fuzz_gguf.c - libFuzzer target for the GGUF reader (kw_gguf_open_mem).
 *
 * Any input must either open (then every kv, string, array and tensor the
 * reader hands out is touched, so an out-of-range pointer is caught by
 * ASan) or fail with a non-empty one-line message. Built by scripts/fuzz.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kvwise/gguf.h"

static volatile uint64_t g_sink;

static void touch_kv(const kw_gguf_kv *kv) {
    g_sink += kv->key.len + (uint8_t)kv->key.s[kv->key.len];
    if (kv->type == KW_GGUF_STRING) g_sink += kv->v.s.len + (uint8_t)kv->v.s.s[kv->v.s.len];
    if (kv->type != KW_GGUF_ARRAY) return;
    if (kv->arr_type == KW_GGUF_STRING) {
        for (uint64_t i = 0; i < kv->arr_n; i++)
            if (kv->arr_str[i].len) g_sink += (uint8_t)kv->arr_str[i].s[kv->arr_str[i].len - 1];
    } else if (kv->arr_type != KW_GGUF_ARRAY && kv->arr_n) {
        g_sink += ((const uint8_t *)kv->arr_data)[0];
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kw_err err = {{0}};
    kw_gguf *g = kw_gguf_open_mem(data, size, &err);
    if (!g) {
        if (!err.msg[0] || strchr(err.msg, '\n')) {
            fprintf(stderr, "reader failed without a one-line message: '%s'\n", err.msg);
            abort();
        }
        return 0;
    }
    for (uint64_t i = 0; i < g->n_kv; i++) {
        touch_kv(&g->kv[i]);
        if (kw_gguf_find(g, g->kv[i].key.s) == NULL && strlen(g->kv[i].key.s) == g->kv[i].key.len) abort();
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kw_gguf_tensor *t = &g->tensors[i];
        const uint8_t *p = t->data;
        g_sink += p[0] + p[t->nbytes - 1];
        if ((const uint8_t *)t->data + t->nbytes > g->base + g->size) abort();
    }
    int64_t iv; double fv; bool bv;
    g_sink += kw_gguf_get_int(g, "general.alignment", &iv) + kw_gguf_get_float(g, "llama.rope.freq_base", &fv) +
              kw_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &bv) + (kw_gguf_get_str(g, "general.name") != NULL);
    kw_gguf_close(g);
    return 0;
}
