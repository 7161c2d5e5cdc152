/* session.c - single-sequence convenience over kw_forward (model.h).
 *
 * Owns: kw_session, which bundles a KV pool sized for one sequence of
 * n_ctx positions, its block table, a kw_ctx workspace, an optional thread
 * pool, the logits of the last eval, and for a model with recurrent layers
 * the sequence's recurrent state plus at most one saved copy of it
 * (kw_session_checkpoint: rewinding such a model needs a state saved at the
 * position it goes back to). The CLI (generate, logits, perplexity, bench)
 * and the tests use it; the server schedules kw_forward itself. */
#include "kvwise/model.h"
#include "kvwise/memory.h"
#include <stdlib.h>
#include <string.h>

struct kw_session {
    const kw_model *m;
    kw_session_opts o;
    kw_pool *own_pool;
    kw_kv_pool *kv;
    kw_block_table table;
    kw_ctx *ctx;
    int32_t n_past;
    float *logits;              /* rows of n_vocab (accounted) */
    int32_t logits_cap;         /* rows */
    int32_t n_logits;           /* rows of the last eval */
    int32_t *pos, *seq;         /* per-chunk batch arrays [max_batch] */
    bool *want;
    kw_rec_state state;         /* recurrent layers only (accounted as KV memory) */
    float *saved;               /* kw_session_checkpoint's copy of state.data, or NULL */
    int32_t saved_at;           /* the position it was taken at */
};

static void fill_defaults(const kw_model *m, const kw_session_opts *in, kw_session_opts *o) {
    memset(o, 0, sizeof *o);
    if (in) *o = *in;
    const kw_hparams *hp = kw_model_hparams(m);
    if (o->n_ctx <= 0) o->n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    if (o->max_batch <= 0) o->max_batch = 512;
    if (o->max_batch > o->n_ctx) o->max_batch = o->n_ctx;
    if (o->block_tokens <= 0) o->block_tokens = 32;
    if (o->n_threads <= 0) o->n_threads = kw_cpu_physical_cores();
    if (o->n_threads <= 0) o->n_threads = 1;
}

kw_session *kw_session_create(const kw_model *m, const kw_session_opts *opts, kw_err *err) {
    if (!m) { kw_err_set(err, "session: no model"); return NULL; }
    kw_session *s = calloc(1, sizeof *s);
    if (!s) { kw_err_set(err, "session: out of memory"); return NULL; }
    s->m = m;
    fill_defaults(m, opts, &s->o);
    kw_pool *pool = s->o.pool;
    if (!pool) {
        pool = s->own_pool = kw_pool_create(s->o.n_threads);
        if (!pool) { kw_err_set(err, "session: cannot start %d threads", s->o.n_threads); goto fail; }
    }
    kw_kv_layout lay = kw_model_kv_layout(m, s->o.kv_type, s->o.block_tokens);
    int32_t n_blocks = (s->o.n_ctx + s->o.block_tokens - 1) / s->o.block_tokens;
    s->kv = kw_kv_pool_create(&lay, n_blocks, err);
    if (!s->kv) goto fail;
    if (kw_block_table_ensure(&s->table, s->kv, s->o.n_ctx) != 0) {
        kw_err_set(err, "session: cannot reserve KV for %d positions", s->o.n_ctx);
        goto fail;
    }
    s->ctx = kw_ctx_create(m, pool, s->o.max_batch, s->o.n_ctx, err);
    if (!s->ctx) goto fail;
    uint64_t rec = kw_model_hparams(m)->rec_state_bytes;
    if (rec > 0 && !(s->state.data = kw_mem_alloc(KW_MEM_KV, (size_t)rec))) {
        kw_err_set(err, "session: cannot allocate the recurrent state (%llu bytes)", (unsigned long long)rec);
        goto fail;
    }
    s->pos = malloc((size_t)s->o.max_batch * sizeof *s->pos);
    s->seq = calloc((size_t)s->o.max_batch, sizeof *s->seq);
    s->want = malloc((size_t)s->o.max_batch * sizeof *s->want);
    if (!s->pos || !s->seq || !s->want) { kw_err_set(err, "session: out of memory"); goto fail; }
    return s;
fail:
    kw_session_free(s);
    return NULL;
}

void kw_session_free(kw_session *s) {
    if (!s) return;
    kw_ctx_free(s->ctx);
    kw_block_table_release(&s->table, s->kv);
    kw_block_table_free(&s->table);
    kw_kv_pool_destroy(s->kv);
    if (s->own_pool) kw_pool_destroy(s->own_pool);
    kw_mem_free(s->logits);
    kw_mem_free(s->state.data);
    kw_mem_free(s->saved);
    free(s->pos);
    free(s->seq);
    free(s->want);
    free(s);
}

static int reserve_logits(kw_session *s, int32_t rows, kw_err *err) {
    if (rows <= s->logits_cap) return 0;
    size_t n_vocab = (size_t)kw_model_hparams(s->m)->n_vocab;
    float *p = kw_mem_alloc(KW_MEM_OTHER, (size_t)rows * n_vocab * sizeof(float));
    if (!p) return kw_err_set(err, "session: cannot allocate logits for %d rows", rows);
    kw_mem_free(s->logits);
    s->logits = p;
    s->logits_cap = rows;
    return 0;
}

int kw_session_eval(kw_session *s, const int32_t *tokens, int32_t n, bool all_logits, kw_err *err) {
    if (!s || !tokens || n < 1) return kw_err_set(err, "session: nothing to evaluate");
    if (n > s->o.n_ctx - s->n_past)
        return kw_err_set(err, "context is full: %d + %d tokens exceed --ctx %d", s->n_past, n, s->o.n_ctx);
    if (reserve_logits(s, all_logits ? n : 1, err)) return -1;
    s->n_logits = 0;
    size_t n_vocab = (size_t)kw_model_hparams(s->m)->n_vocab;
    kw_block_table *tables[1] = {&s->table};
    kw_rec_state *states[1] = {&s->state};
    int32_t rows = 0;
    for (int32_t done = 0; done < n;) {
        int32_t len = n - done < s->o.max_batch ? n - done : s->o.max_batch;
        for (int32_t i = 0; i < len; i++) {
            s->pos[i] = s->n_past + done + i;
            s->want[i] = all_logits || done + i == n - 1;
        }
        kw_batch b = {.n_tokens = len, .tokens = tokens + done, .pos = s->pos, .seq = s->seq,
                      .tables = tables, .want_logits = s->want, .states = s->state.data ? states : NULL};
        if (kw_forward(s->ctx, s->kv, &b, s->logits + (size_t)rows * n_vocab, err)) return -1;
        rows += all_logits ? len : (done + len == n);
        done += len;
    }
    s->n_past += n;
    s->n_logits = rows;
    return 0;
}

const float *kw_session_logits(const kw_session *s, int32_t i) {
    if (!s || s->n_logits == 0) return NULL;
    if (i < 0) i = s->n_logits - 1;
    if (i >= s->n_logits) return NULL;
    return s->logits + (size_t)i * (size_t)kw_model_hparams(s->m)->n_vocab;
}

int32_t kw_session_n_logits(const kw_session *s) { return s ? s->n_logits : 0; }
int32_t kw_session_n_past(const kw_session *s) { return s ? s->n_past : 0; }
int32_t kw_session_n_ctx(const kw_session *s) { return s ? s->o.n_ctx : 0; }
uint64_t kw_session_weight_bytes_read(const kw_session *s) { return s ? kw_ctx_weight_bytes_read(s->ctx) : 0; }
const kw_model *kw_session_model(const kw_session *s) { return s ? s->m : NULL; }

void kw_session_rewind(kw_session *s, int32_t n_past) {
    if (!s || n_past < 0 || n_past > s->n_past) return;
    s->n_past = n_past;
    if (s->saved && n_past == s->saved_at && s->state.n_past != n_past) {
        memcpy(s->state.data, s->saved, (size_t)kw_model_hparams(s->m)->rec_state_bytes);
        s->state.n_past = n_past;
    }
}

int kw_session_checkpoint(kw_session *s, kw_err *err) {
    if (!s) return kw_err_set(err, "session: none");
    size_t bytes = (size_t)kw_model_hparams(s->m)->rec_state_bytes;
    if (bytes == 0) return 0;
    if (!s->saved && !(s->saved = kw_mem_alloc(KW_MEM_KV, bytes)))
        return kw_err_set(err, "session: cannot allocate a saved recurrent state (%zu bytes)", bytes);
    if (s->state.n_past != s->n_past)
        return kw_err_set(err, "session: the recurrent state is at position %d, not at %d", s->state.n_past, s->n_past);
    memcpy(s->saved, s->state.data, bytes);
    s->saved_at = s->n_past;
    return 0;
}
