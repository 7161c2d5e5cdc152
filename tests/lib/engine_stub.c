/* engine_stub.c - a deterministic stand-in engine (engine_stub.h: tests,
 * `serve --stub-engine` in test builds, the overhead bench).
 * Vocabulary: ids 0..255 are the bytes, then <|im_start|>, <|im_end|>,
 * <|endoftext|>. Logits are a hash of (token, position) favouring lower-
 * case letters and spaces, so greedy output is reproducible and looks like
 * words. step_us simulates the cost of a forward call.
 * With kw_engine_stub_enable_kv the stub also keeps real KV memory: a paged
 * pool of a fixed toy layout (4 KiB per token) behind kvmem.h, so that the
 * prompt cache, admission control and the memory budget run exactly as with
 * a model (forward writes every K/V row it "computes", so the pages are
 * really resident). Owns kw_engine_stub_create, kw_engine_stub_enable_kv. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "engine_stub.h"
#include "kvwise/kvmem.h"
#include "kvwise/tensor.h"

#define STUB_IM_START 256
#define STUB_IM_END 257
#define STUB_EOS 258
#define STUB_VOCAB 259

static const char *const stub_special[3] = {"<|im_start|>", "<|im_end|>", "<|endoftext|>"};

typedef struct stub {
    int32_t step_us;
    kw_kv_pool *pool;           /* NULL unless kw_engine_stub_enable_kv */
    kw_kvmem *kvmem;
} stub;

static int stub_tokenize(kw_engine *e, const char *text, size_t len, bool add_special,
                         int parse_special, int32_t **ids, size_t *n_ids, kw_err *err) {
    (void)e; (void)add_special;
    int32_t *out = malloc(sizeof(int32_t) * (len + 1));
    if (!out) return kw_err_set(err, "tokenize: out of memory");
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        int sp = -1;
        for (int k = 0; parse_special && k < 3; k++) {
            size_t sl = strlen(stub_special[k]);
            if (i + sl <= len && !memcmp(text + i, stub_special[k], sl)) { sp = k; break; }
        }
        if (sp >= 0) { out[n++] = 256 + sp; i += strlen(stub_special[sp]); }
        else out[n++] = (unsigned char)text[i++];
    }
    *ids = out;
    *n_ids = n;
    return 0;
}

static size_t stub_piece(kw_engine *e, int32_t id, char *buf, size_t cap, bool render_special) {
    (void)e;
    if (id >= 0 && id < 256) { if (cap) buf[0] = (char)id; return 1; }
    if (id < STUB_VOCAB && render_special) {
        const char *s = stub_special[id - 256];
        size_t n = strlen(s);
        memcpy(buf, s, n < cap ? n : cap);
        return n;
    }
    return 0;
}

static bool stub_is_eog(kw_engine *e, int32_t id) { (void)e; return id == STUB_IM_END || id == STUB_EOS; }
static int32_t stub_seq_begin(kw_engine *e, int32_t slot, const int32_t *p, int32_t n, int32_t r) {
    stub *st = e->impl;
    return st->kvmem ? kw_kvmem_begin(st->kvmem, slot, p, n, r) : 0;
}
static int stub_seq_ensure(kw_engine *e, int32_t slot, int32_t n) {
    stub *st = e->impl;
    return st->kvmem ? kw_kvmem_ensure(st->kvmem, slot, n) : 0;
}
static void stub_seq_end(kw_engine *e, int32_t slot, const int32_t *t, int32_t n, bool keep) {
    stub *st = e->impl;
    if (st->kvmem) kw_kvmem_end(st->kvmem, slot, t, n, keep);
}

/* Writes K and V of every layer and head for one position (the pages become resident). */
static void stub_write_kv(stub *st, int32_t slot, int32_t pos, int32_t token) {
    kw_block_table *t = kw_kvmem_table(st->kvmem, slot);
    int32_t bt = st->pool->lay.block_tokens;
    if (!t || pos / bt >= t->n) return;
    int32_t id = t->ids[pos / bt];
    for (int32_t l = 0; l < st->pool->lay.n_layer; l++)
        for (int32_t h = 0; h < st->pool->lay.n_head_kv; h++) {
            memset(kw_kv_k(st->pool, id, l, h, pos % bt), token & 0xff, st->pool->k_row_bytes);
            memset(kw_kv_v(st->pool, id, l, h, pos % bt), (token >> 8) & 0xff, st->pool->v_row_bytes);
        }
}

static uint32_t mix(uint32_t x) {
    x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
    return x;
}

static int stub_forward(kw_engine *e, int32_t n, const int32_t *tokens, const int32_t *pos,
                        const int32_t *slot, const bool *want, float *logits, kw_err *err) {
    (void)err;
    stub *st = e->impl;
    int32_t row = 0;
    if (st->kvmem)
        for (int32_t i = 0; i < n; i++) stub_write_kv(st, slot[i], pos[i], tokens[i]);
    for (int32_t i = 0; i < n; i++) {
        if (want ? !want[i] : i != n - 1) continue;
        float *l = logits + (size_t)row++ * STUB_VOCAB;
        uint32_t h = mix((uint32_t)tokens[i] * 2654435761U ^ mix((uint32_t)pos[i] + 1));
        for (int32_t j = 0; j < STUB_VOCAB; j++) {
            float v = (float)(mix(h ^ (uint32_t)j * 0x9E3779B9U) % 1000u) / 250.0f - 8.0f;
            if ((j >= 'a' && j <= 'z') || j == ' ') v += 6.0f;
            l[j] = v;
        }
        l[STUB_EOS] = -4.0f;
    }
    if (st->step_us > 0) {
        struct timespec ts = {st->step_us / 1000000, (long)(st->step_us % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static void stub_describe(kw_engine *e, char *buf, size_t cap) {
    stub *st = e->impl;
    if (!st->pool) {
        snprintf(buf, cap, "stub engine (test only): byte vocabulary, no KV, step %d us", st->step_us);
        return;
    }
    char b[32];
    snprintf(buf, cap, "stub engine (test only): KV pool %d blocks x %d tokens = %s, step %d us",
             st->pool->n_blocks, st->pool->lay.block_tokens,
             kw_format_bytes((uint64_t)st->pool->n_blocks * st->pool->block_bytes, b, sizeof b), st->step_us);
}

static void stub_destroy(kw_engine *e) {
    if (!e) return;
    stub *st = e->impl;
    if (st) {
        kw_kvmem_destroy(st->kvmem);
        kw_kv_pool_destroy(st->pool);
    }
    free(e->impl);
    free(e);
}

kw_engine *kw_engine_stub_create(int32_t n_ctx, int32_t n_slots, int32_t max_batch, int32_t step_us) {
    kw_engine *e = calloc(1, sizeof *e);
    stub *st = calloc(1, sizeof *st);
    if (!e || !st) { free(e); free(st); return NULL; }
    st->step_us = step_us;
    e->impl = st;
    snprintf(e->model_id, sizeof e->model_id, "kvwise-stub");
    e->n_vocab = STUB_VOCAB;
    e->n_ctx = n_ctx;
    e->n_slots = n_slots;
    e->max_batch = max_batch;
    e->chat_template = "{% for message in messages %}<|im_start|>{{ message.role }}\n"
                       "{{ message.content }}<|im_end|>\n{% endfor %}"
                       "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    e->bos_text = "";
    e->eos_text = "<|endoftext|>";
    e->tokenize = stub_tokenize;
    e->piece = stub_piece;
    e->is_eog = stub_is_eog;
    e->seq_begin = stub_seq_begin;
    e->seq_ensure = stub_seq_ensure;
    e->seq_end = stub_seq_end;
    e->forward = stub_forward;
    e->describe = stub_describe;
    e->destroy = stub_destroy;
    return e;
}

kw_kv_layout kw_engine_stub_kv_layout(int32_t block_tokens) {
    kw_kv_layout lay = {.n_layer = 4, .n_head_kv = 2, .head_dim_k = 128, .head_dim_v = 128,
                        .type = KW_TYPE_F16, .block_tokens = block_tokens > 0 ? block_tokens : 32};
    return lay;
}

void kw_engine_stub_plan_model(kw_plan_model *m) {
    kw_kv_layout lay = kw_engine_stub_kv_layout(0);
    memset(m, 0, sizeof *m);
    snprintf(m->source, sizeof m->source, "stub");
    snprintf(m->hp.arch_name, sizeof m->hp.arch_name, "stub");
    m->hp.n_layer = m->hp.n_kv_layers = lay.n_layer;
    m->hp.n_head = m->hp.n_head_kv = lay.n_head_kv;
    m->hp.head_dim_k = lay.head_dim_k;
    m->hp.head_dim_v = lay.head_dim_v;
    m->hp.n_vocab = STUB_VOCAB;       /* n_embd 0: no forward pass, no workspace */
    m->main_type = KW_TYPE_COUNT;
}

int kw_engine_stub_enable_kv(kw_engine *e, const kw_engine_stub_kv_opts *o, kw_err *err) {
    stub *st = e->impl;
    if (st->pool) return kw_err_set(err, "stub engine: KV already enabled");
    kw_kv_layout lay = kw_engine_stub_kv_layout(o->block_tokens);
    st->pool = kw_kv_pool_create(&lay, o->kv_blocks, err);
    if (!st->pool) return -1;
    kw_kvmem_opts ko = {.n_slots = e->n_slots, .n_ctx = e->n_ctx, .cache_max_seqs = o->cache_max_seqs,
                        .cache_max_bytes = o->cache_max_bytes, .ledger = o->ledger,
                        .log_interval_s = o->log_interval_s};
    st->kvmem = kw_kvmem_create(st->pool, &ko, err);
    if (!st->kvmem) { kw_kv_pool_destroy(st->pool); st->pool = NULL; return -1; }
    e->kvmem = st->kvmem;
    return 0;
}
