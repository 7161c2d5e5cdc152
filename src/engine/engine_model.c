/* engine_model.c - the real-model engine behind the scheduler: the loaded
 * kw_model, one kw_ctx workspace sized for the largest step, the paged KV
 * pool and, through kvmem (kvmem.h), one block table per slot with prefix
 * matching, reservation and prompt-cache insertion; for a hybrid model
 * (recurrent layers) one recurrent state per slot and the checkpoints it
 * leaves in the prompt cache: at the end of the prompt, every
 * --checkpoint-interval prompt tokens on the way, and at the end of the
 * sequence. Owns kw_engine_model_create (engine.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kvwise/engine.h"
#include "kvwise/kvmem.h"
#include "kvwise/ledger.h"
#include "kvwise/memory.h"
#include "kvwise/model.h"
#include "kvwise/plan.h"
#include "kvwise/tensor.h"
#include "kvwise/tokenizer.h"

typedef struct model_engine {
    kw_model *m;
    const kw_tokenizer *tok;
    kw_tokenizer *own_tok;      /* loaded here when the model does not carry one */
    kw_kv_pool *pool;
    kw_kvmem *kvm;
    kw_ctx *ctx;
    kw_pool *threads;
    kw_block_table **tables;    /* [n_slots], refreshed every forward */
    kw_rec_state *states;       /* [n_slots] recurrent models: each slot's state, in state_mem */
    kw_rec_state **state_ptrs;  /* [n_slots] -> states, the batch's view */
    float *state_mem;           /* n_slots x rec_state_bytes, one accounted block (ledger rec_state) */
    int32_t **prompts;          /* [n_slots] recurrent models: the slot's prompt (for its checkpoints) */
    int32_t *n_prompt;          /* [n_slots] */
    int32_t *next_ckpt;         /* [n_slots] the position of the slot's next checkpoint */
    int32_t *branch_at;         /* [n_slots] where its prompt left the cached KV (kvmem's kv_prefix) */
    char bos[64], eos[64];
    uint32_t kv_type;
} model_engine;

static int me_tokenize(kw_engine *e, const char *text, size_t len, bool add_special, int parse_special,
                       int32_t **ids, size_t *n_ids, kw_err *err) {
    model_engine *me = e->impl;
    return kw_tokenize(me->tok, text, len, add_special, parse_special, ids, n_ids, err);
}

static int me_defuse(kw_engine *e, const char *s, size_t len, char **out, size_t *out_len) {
    model_engine *me = e->impl;
    return kw_tokenizer_defuse(me->tok, s, len, out, out_len);
}

static size_t me_piece(kw_engine *e, int32_t id, char *buf, size_t cap, bool render_special) {
    model_engine *me = e->impl;
    return kw_token_to_piece(me->tok, id, buf, cap, render_special);
}

static bool me_is_eog(kw_engine *e, int32_t id) {
    model_engine *me = e->impl;
    return kw_token_is_eog(me->tok, id);
}

/* A recurrent model's next checkpoint of slot after position `after`:
 * where its prompt branched off the cached KV (so the next prompt that
 * shares that prefix resumes there), the next --checkpoint-interval mark,
 * or the end of its prompt. */
static int32_t next_checkpoint(const model_engine *me, int32_t slot, int32_t after) {
    int32_t best = me->n_prompt[slot], iv = kw_kvmem_checkpoint_interval(me->kvm);
    if (me->branch_at[slot] > after && me->branch_at[slot] < best) best = me->branch_at[slot];
    if (iv > 0 && (after / iv + 1) * (int64_t)iv < best) best = (after / iv + 1) * iv;
    return best > after ? best : INT32_MAX;
}

/* A recurrent model's slot: its prompt kept for the checkpoints, its state
 * at the checkpoint it resumes from (kvmem copied it in). */
static int32_t rec_seq_begin(model_engine *me, int32_t slot, const int32_t *prompt, int32_t n, int32_t n_reserve) {
    free(me->prompts[slot]);
    me->prompts[slot] = malloc((size_t)n * sizeof *prompt);
    if (!me->prompts[slot]) return KW_KVMEM_NOMEM;
    memcpy(me->prompts[slot], prompt, (size_t)n * sizeof *prompt);
    me->n_prompt[slot] = n;
    kw_rec_state *st = &me->states[slot];
    int32_t kv_prefix = 0;
    int32_t r = kw_kvmem_begin_state(me->kvm, slot, prompt, n, n_reserve, st->data, &kv_prefix);
    if (r >= 0) {
        st->n_past = r;
        me->branch_at[slot] = kv_prefix;
        me->next_ckpt[slot] = next_checkpoint(me, slot, r);
    }
    return r;
}

/* The batch index at which a recurrent slot reaches its next checkpoint
 * (a token at that position: the state before it is the one to save),
 * after `from`; n when none does. */
static int32_t checkpoint_cut(const model_engine *me, int32_t from, int32_t n, const int32_t *pos, const int32_t *slot) {
    for (int32_t i = from + 1; i < n; i++)
        if (pos[i] == me->next_ckpt[slot[i]]) return i;
    return n;
}

/* After a part of a step: every slot of it whose state stands at its next
 * checkpoint saves it. */
static void save_checkpoints(model_engine *me, int32_t from, int32_t to, const int32_t *slot) {
    for (int32_t i = from; i < to; i++) {
        int32_t s = slot[i];
        const kw_rec_state *st = &me->states[s];
        if (st->n_past != me->next_ckpt[s]) continue;
        bool interior = st->n_past != me->n_prompt[s] && st->n_past != me->branch_at[s];
        kw_kvmem_checkpoint(me->kvm, me->prompts[s], st->n_past, st->data, interior);
        me->next_ckpt[s] = next_checkpoint(me, s, st->n_past);
    }
}

static int32_t me_seq_begin(kw_engine *e, int32_t slot, const int32_t *prompt, int32_t n, int32_t n_reserve) {
    model_engine *me = e->impl;
    int32_t r = me->states ? rec_seq_begin(me, slot, prompt, n, n_reserve) : kw_kvmem_begin(me->kvm, slot, prompt, n, n_reserve);
    if (r == KW_KVMEM_NEVER) return KW_ENGINE_NEVER;
    if (r == KW_KVMEM_NOMEM) return KW_ENGINE_NOMEM;
    if (r < 0) return KW_ENGINE_WAIT;
    return r;
}

static int me_seq_ensure(kw_engine *e, int32_t slot, int32_t n_positions) {
    model_engine *me = e->impl;
    return kw_kvmem_ensure(me->kvm, slot, n_positions);
}

static void me_seq_end(kw_engine *e, int32_t slot, const int32_t *tokens, int32_t n, bool keep) {
    model_engine *me = e->impl;
    if (me->states && keep && n > me->n_prompt[slot] && me->states[slot].n_past == n)
        kw_kvmem_checkpoint(me->kvm, tokens, n, me->states[slot].data, false);   /* the end of the sequence */
    kw_kvmem_end(me->kvm, slot, tokens, n, keep);
    if (me->states) {
        free(me->prompts[slot]);
        me->prompts[slot] = NULL;
        me->n_prompt[slot] = 0;
    }
}

/* A recurrent model's step runs in parts cut where a slot reaches its next
 * checkpoint, so that the state at exactly that position can be saved;
 * each part writes its logit rows after the previous part's. */
static int me_forward(kw_engine *e, int32_t n, const int32_t *tokens, const int32_t *pos, const int32_t *slot,
                      const bool *want, float *logits, kw_err *err) {
    model_engine *me = e->impl;
    for (int32_t i = 0; i < n; i++) me->tables[slot[i]] = kw_kvmem_table(me->kvm, slot[i]);
    size_t rows = 0;
    for (int32_t done = 0; done < n;) {
        int32_t cut = me->states && want ? checkpoint_cut(me, done, n, pos, slot) : n;
        kw_batch b = {.n_tokens = cut - done, .tokens = tokens + done, .pos = pos + done, .seq = slot + done,
                      .tables = me->tables, .want_logits = want ? want + done : NULL, .states = me->state_ptrs};
        if (kw_forward(me->ctx, me->pool, &b, logits ? logits + rows * (size_t)e->n_vocab : NULL, err)) return -1;
        for (int32_t i = done; want && i < cut; i++) rows += want[i];
        if (me->states) save_checkpoints(me, done, cut, slot);
        done = cut;
    }
    return 0;
}

static void me_describe(kw_engine *e, char *buf, size_t cap) {
    model_engine *me = e->impl;
    char sz[32];
    size_t per_tok = kw_kv_bytes_per_token(&me->pool->lay);
    snprintf(buf, cap, "%d blocks x %d tokens, %s (%s), %zu bytes/token",
             me->pool->n_blocks, me->pool->lay.block_tokens,
             kw_format_bytes((uint64_t)me->pool->n_blocks * me->pool->block_bytes, sz, sizeof sz),
             kw_kv_type_name(me->kv_type), per_tok);
}

static void me_destroy(kw_engine *e) {
    if (!e) return;
    model_engine *me = e->impl;
    if (me) {
        kw_ctx_free(me->ctx);
        if (me->threads) kw_pool_destroy(me->threads);
        kw_kvmem_destroy(me->kvm);
        kw_kv_pool_destroy(me->pool);
        kw_tokenizer_free(me->own_tok);
        kw_model_free(me->m);
        free(me->tables);
        kw_mem_free(me->state_mem);
        free(me->states);
        free(me->state_ptrs);
        for (int32_t i = 0; me->prompts && i < e->n_slots; i++) free(me->prompts[i]);
        free(me->prompts);
        free(me->n_prompt);
        free(me->next_ckpt);
        free(me->branch_at);
        free(me);
    }
    free(e);
}

/* A budget line, refused with the server's one "--memory-limit is too small" message. */
static int set_line(kw_ledger *l, kw_ledger_kind kind, uint64_t bytes, kw_err *err) {
    if (!l || kw_ledger_set(l, kind, bytes, NULL) == 0) return 0;
    return kw_plan_limit_error(err, kw_ledger_limit(l), "the lines already set", kw_ledger_used(l) - kw_ledger_line(l, kind),
                               kw_ledger_kind_label(kind), bytes);
}

/* The pool: the blocks asked for (the plan's), never more than the budget
 * has room for now that the model is loaded; at least one sequence of n_ctx. */
static int32_t pool_blocks(const kw_engine_model_opts *o, int32_t n_ctx, uint64_t block_bytes, int32_t bt, kw_err *err) {
    int64_t per_seq = (n_ctx + bt - 1) / bt, blocks = o->kv_blocks;
    if (o->ledger) {
        int64_t fit = (int64_t)(kw_ledger_available(o->ledger) / block_bytes);
        if (fit < blocks) blocks = fit;
    }
    if (blocks < per_seq) {
        char what[160];
        snprintf(what, sizeof what, "one sequence of --ctx-size %d (%lld KV blocks of %llu bytes)", n_ctx,
                 (long long)per_seq, (unsigned long long)block_bytes);
        if (!o->ledger) return kw_err_set(err, "engine: %d KV blocks cannot hold %s", o->kv_blocks, what);
        return kw_plan_limit_error(err, kw_ledger_limit(o->ledger), "the weights, workspace and fixed lines",
                                   kw_ledger_used(o->ledger), what, (uint64_t)per_seq * block_bytes);
    }
    return (int32_t)blocks;
}

/* Recurrent models: one state per slot, on its own ledger line. */
static int alloc_states(model_engine *me, int32_t n_slots, kw_ledger *led, kw_err *err) {
    uint64_t per = kw_model_hparams(me->m)->rec_state_bytes;
    if (per == 0) return 0;
    if (set_line(led, KW_LEDGER_REC_STATE, per * (uint64_t)n_slots, err) < 0) return -1;
    me->state_mem = kw_mem_alloc(KW_MEM_KV, (size_t)(per * (uint64_t)n_slots));
    me->states = calloc((size_t)n_slots, sizeof *me->states);
    me->state_ptrs = calloc((size_t)n_slots, sizeof *me->state_ptrs);
    me->prompts = calloc((size_t)n_slots, sizeof *me->prompts);
    me->n_prompt = calloc((size_t)n_slots, sizeof *me->n_prompt);
    me->next_ckpt = calloc((size_t)n_slots, sizeof *me->next_ckpt);
    me->branch_at = calloc((size_t)n_slots, sizeof *me->branch_at);
    if (!me->state_mem || !me->states || !me->state_ptrs || !me->prompts || !me->n_prompt || !me->next_ckpt ||
        !me->branch_at)
        return kw_err_set(err, "engine: cannot allocate %d recurrent states of %llu bytes", n_slots, (unsigned long long)per);
    for (int32_t i = 0; i < n_slots; i++) {
        me->states[i].data = me->state_mem + (size_t)i * (per / sizeof(float));
        me->state_ptrs[i] = &me->states[i];
    }
    return 0;
}

static void token_text_or_empty(const kw_tokenizer *t, int32_t id, char *buf, size_t cap) {
    const char *s = id >= 0 ? kw_token_text(t, id) : NULL;
    snprintf(buf, cap, "%s", s ? s : "");
}

kw_engine *kw_engine_model_create(const kw_engine_model_opts *o, kw_err *err) {
    kw_engine *e = calloc(1, sizeof *e);
    model_engine *me = calloc(1, sizeof *me);
    if (!e || !me) { free(e); free(me); kw_err_set(err, "engine: out of memory"); return NULL; }
    e->impl = me;
    e->destroy = me_destroy;
    kw_model_opts mo = {.mlock = o->mlock, .experts = o->experts, .progress = o->progress};
    me->m = kw_model_load(o->model_path, &mo, err);
    if (!me->m) { me_destroy(e); return NULL; }
    const kw_hparams *hp = kw_model_hparams(me->m);
    me->tok = kw_model_tokenizer(me->m);
    if (!me->tok) {
        me->tok = me->own_tok = kw_tokenizer_load(kw_model_gguf(me->m), err);
        if (!me->tok) { me_destroy(e); return NULL; }
    }
    int32_t n_ctx = o->n_ctx;
    int32_t bt = o->kv_block_tokens > 0 ? o->kv_block_tokens : 32;
    if (n_ctx < 1 || o->kv_blocks < 1) {
        kw_err_set(err, "engine: needs a context (%d) and a KV pool (%d blocks)", n_ctx, o->kv_blocks);
        me_destroy(e);
        return NULL;
    }
    uint32_t kt = o->kv_type == KW_TYPE_Q8_0 || kw_kv_type_is_int(o->kv_type) || o->kv_type == KW_KV_TYPE_AUTO
        ? o->kv_type : KW_TYPE_F16;
    kw_kv_layout lay = kw_model_kv_layout(me->m, kt, bt);   /* resolves auto */
    me->kv_type = lay.type;
    int32_t n_slots = o->n_slots > 0 ? o->n_slots : 1;
    int32_t max_batch = o->max_batch > 0 ? o->max_batch : 512;
    /* The budget's fixed lines first: what the weights and tokenizer hold now. */
    /* A mixture of experts packs each expert at first use: the line holds what that can add. */
    kw_expert_stats xs;
    uint64_t w = kw_mem_current(KW_MEM_WEIGHTS), growth = kw_model_expert_stats(me->m, &xs) ? xs.pack_growth : 0;
    if (set_line(o->ledger, KW_LEDGER_WEIGHTS, (w ? w : hp->weight_bytes) + growth, err) < 0 ||
        set_line(o->ledger, KW_LEDGER_TOKENIZER, kw_mem_current(KW_MEM_TOKENIZER), err) < 0) {
        me_destroy(e);
        return NULL;
    }
    int n_threads = o->n_threads > 0 ? o->n_threads : kw_cpu_physical_cores();
    me->threads = kw_pool_create(n_threads > 0 ? n_threads : 1);
    if (!me->threads) { kw_err_set(err, "engine: cannot start %d threads", n_threads); me_destroy(e); return NULL; }
    uint64_t ws0 = kw_mem_current(KW_MEM_WORKSPACE), sc0 = kw_mem_current(KW_MEM_SCRATCH);
    me->ctx = kw_ctx_create(me->m, me->threads, max_batch, n_ctx, err);
    if (!me->ctx) { me_destroy(e); return NULL; }
    /* The prefill workbench, as allocated (sized for the largest step). */
    if (set_line(o->ledger, KW_LEDGER_WORKSPACE, kw_mem_current(KW_MEM_WORKSPACE) - ws0, err) < 0 ||
        set_line(o->ledger, KW_LEDGER_SCRATCH, kw_mem_current(KW_MEM_SCRATCH) - sc0, err) < 0) {
        me_destroy(e);
        return NULL;
    }
    if (alloc_states(me, n_slots, o->ledger, err) < 0) { me_destroy(e); return NULL; }
    int32_t blocks = pool_blocks(o, n_ctx, kw_kv_block_bytes(&lay), bt, err);
    if (blocks < 1) { me_destroy(e); return NULL; }
    me->pool = kw_kv_pool_create(&lay, blocks, err);
    if (!me->pool) { me_destroy(e); return NULL; }
    kw_kvmem_opts ko = {.n_slots = n_slots, .n_ctx = n_ctx, .cache_max_seqs = o->cache_max_seqs,
                        .cache_max_bytes = o->cache_max_bytes, .ledger = o->ledger,
                        .log_interval_s = o->cache_log_interval_s, .state_bytes = hp->rec_state_bytes,
                        .checkpoint_interval = o->checkpoint_interval};
    me->kvm = kw_kvmem_create(me->pool, &ko, err);
    if (!me->kvm) { me_destroy(e); return NULL; }
    e->kvmem = me->kvm;
    e->model = me->m;
    me->tables = calloc((size_t)n_slots, sizeof *me->tables);
    if (!me->tables) { kw_err_set(err, "engine: out of memory"); me_destroy(e); return NULL; }
    token_text_or_empty(me->tok, kw_token_bos(me->tok), me->bos, sizeof me->bos);
    token_text_or_empty(me->tok, kw_token_eos(me->tok), me->eos, sizeof me->eos);
    const char *base = strrchr(o->model_path, '/');
    snprintf(e->model_id, sizeof e->model_id, "%s", hp->name[0] ? hp->name : base ? base + 1 : o->model_path);
    e->n_vocab = hp->n_vocab;
    e->n_ctx = n_ctx;
    e->n_slots = n_slots;
    e->max_batch = max_batch;
    e->chat_template = kw_gguf_get_str(kw_model_gguf(me->m), "tokenizer.chat_template");
    e->bos_text = me->bos;
    e->eos_text = me->eos;
    e->tokenize = me_tokenize;
    e->defuse = me_defuse;
    e->max_token_text = kw_tokenizer_max_text(me->tok);
    e->piece = me_piece;
    e->is_eog = me_is_eog;
    e->seq_begin = me_seq_begin;
    e->seq_ensure = me_seq_ensure;
    e->seq_end = me_seq_end;
    e->forward = me_forward;
    e->describe = me_describe;
    return e;
}
