/* plan.c - the arithmetic of `kvwise plan` and of the server's startup
 * ledger (plan.h): KV bytes per token, per-sequence KV and state, prefill
 * workspace, the budget, prompt-cache caps, the largest context that fits,
 * advice when the plan does not fit, and the decode ceiling.
 *
 * Every figure is in bytes (uint64) and every sum saturates, so absurd
 * inputs give "does not fit", never a wrapped small number. The formulas
 * are written out in docs/PLAN.md. */
#include "kvwise/plan.h"
#include "kvwise/kv.h"
#include "kvwise/server.h"
#include "kvwise/tensor.h"
#include "plan_internal.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define KIB 1024ULL
#define MIB (1024ULL * KIB)
#define GIB (1024ULL * MIB)

static uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
static uint64_t sat_mul(uint64_t a, uint64_t b) { return (b && a > UINT64_MAX / b) ? UINT64_MAX : a * b; }

void kw_plan_opts_default(kw_plan_opts *o) {
    memset(o, 0, sizeof *o);
    o->reserve = UINT64_MAX;
    o->concurrency = 1;
    o->prompt_concurrency = 1;
    o->prefill_step = KW_PLAN_DEFAULT_STEP;
    o->kv_type = KW_KV_TYPE_AUTO;
    o->block_tokens = KW_PLAN_DEFAULT_BLOCK;
    o->n_threads = 2;
    o->overhead = UINT64_MAX;
    o->max_connections = KW_SERVER_DEFAULT_MAX_CONNECTIONS;
    o->max_body = KW_SERVER_DEFAULT_MAX_BODY;
    o->http_threads = KW_SERVER_DEFAULT_HTTP_THREADS;
    o->request_memory = KW_SERVER_DEFAULT_REQUEST_MEMORY;
}

uint64_t kw_plan_default_memory_limit(uint64_t ram, bool measured, uint64_t reserve, uint64_t *reserve_out) {
    if (reserve == UINT64_MAX) {
        if (measured) {
            reserve = ram / 10;
            if (reserve < 256 * MIB) reserve = 256 * MIB;
        } else {
            reserve = ram / 4;
            if (reserve > 6 * GIB) reserve = 6 * GIB;
        }
    }
    if (reserve_out) *reserve_out = reserve;
    return ram > reserve ? ram - reserve : 0;
}

uint64_t kw_plan_measured_overhead(void) {
    return kw_ledger_baseline_bytes() + KW_PLAN_SERVER_ALLOWANCE;
}

uint64_t kw_plan_connections_bytes(int32_t n, uint64_t max_body, int32_t http_threads, uint64_t request_memory) {
    if (n <= 0) n = KW_SERVER_DEFAULT_MAX_CONNECTIONS;
    if (max_body == 0) max_body = KW_SERVER_DEFAULT_MAX_BODY;
    if (http_threads <= 0) http_threads = KW_SERVER_DEFAULT_HTTP_THREADS;
    if (request_memory == 0) request_memory = KW_SERVER_DEFAULT_REQUEST_MEMORY;
    /* + the places lent to new connections while shed ones close (server.h) */
    return sat_add(sat_add(sat_mul((uint64_t)n + KW_SERVER_SHED_MARGIN, KW_SERVER_CONN_BYTES), max_body),
                   sat_mul((uint64_t)http_threads, request_memory));
}

uint64_t kw_plan_kv_bytes_per_token(const kw_plan_model *m, uint32_t kv_type) {
    if (m->hp.n_kv_layers <= 0) return 0;
    kw_kv_layout lay = {
        .n_layer = m->hp.n_kv_layers, .n_head_kv = m->hp.n_head_kv,
        .head_dim_k = m->hp.head_dim_k, .head_dim_v = m->hp.head_dim_v,
        .type = kv_type, .block_tokens = KW_PLAN_DEFAULT_BLOCK,
    };
    return (uint64_t)plan_kv_bytes_per_token(&lay);
}

uint64_t kw_plan_workspace_bytes(const kw_plan_model *m, int32_t tokens, int32_t ctx, int n_threads) {
    if (tokens < 1 || ctx < 1 || m->hp.n_embd < 1) return 0;    /* no embedding: no forward pass (a KV layout only) */
    return (uint64_t)plan_ctx_workspace_bytes(&m->hp, tokens, ctx, n_threads);
}

/* Bytes of one sequence's KV at ctx positions, in whole blocks. */
static uint64_t seq_kv(uint64_t kv_bpt, int32_t block, int64_t ctx) {
    uint64_t blocks = (uint64_t)((ctx + block - 1) / block);
    return sat_mul(sat_mul(blocks, (uint64_t)block), kv_bpt);
}

/* Tokens in one forward step, as the server sizes it: every decoding
 * sequence's token plus a prefill chunk per prompt being read. */
static int32_t batch_tokens(const kw_plan *p, int32_t step, int32_t conc) {
    return conc + p->o.prompt_concurrency * step;
}

/* What a configuration needs (no prompt cache). */
typedef struct cfg {
    int32_t ctx, conc, step;
    uint32_t kv_type;
} cfg;

static uint64_t cfg_needed(const kw_plan_model *m, const kw_plan *p, cfg c) {
    uint64_t bpt = kw_plan_kv_bytes_per_token(m, c.kv_type);
    if (bpt == 0 && m->hp.n_kv_layers > 0) return UINT64_MAX;
    int32_t tokens = batch_tokens(p, c.step, c.conc);
    uint64_t ws = kw_plan_workspace_bytes(m, tokens, c.ctx, p->o.n_threads);
    uint64_t per_seq = sat_add(seq_kv(bpt, p->o.block_tokens, c.ctx), m->linear_state_bytes);
    uint64_t fixed = sat_add(sat_add(sat_add(p->weights, ws), sat_add(p->tokenizer, p->overhead)), p->connections);
    return sat_add(fixed, sat_mul((uint64_t)c.conc, per_seq));
}

/* Largest ctx in [1, cap] with cfg_needed <= limit; 0 if even 1 does not fit. */
static int32_t largest_ctx(const kw_plan_model *m, const kw_plan *p, cfg c, int32_t cap) {
    c.ctx = 1;
    if (cfg_needed(m, p, c) > p->memory_limit) return 0;
    int32_t lo = 1, hi = cap;
    c.ctx = hi;
    if (cfg_needed(m, p, c) <= p->memory_limit) return hi;
    while (hi - lo > 1) {               /* invariant: lo fits, hi does not */
        int32_t mid = lo + (hi - lo) / 2;
        c.ctx = mid;
        if (cfg_needed(m, p, c) <= p->memory_limit) lo = mid; else hi = mid;
    }
    return lo;
}

static void warn(kw_plan *p, const char *fmt, ...) KW_PRINTF(2, 3);
static void warn(kw_plan *p, const char *fmt, ...) {
    if (p->n_warnings >= KW_PLAN_MAX_WARNINGS) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->warnings[p->n_warnings++], sizeof p->warnings[0], fmt, ap);
    va_end(ap);
}

static int set_budget(kw_plan *p, const kw_plan_opts *o, kw_err *err) {
    if (o->memory_limit) {
        p->memory_limit = o->memory_limit;
        p->ram = o->ram ? o->ram : o->mem_available;
        p->ram_measured = o->ram == 0;
        p->reserve = p->ram > p->memory_limit ? p->ram - p->memory_limit : 0;
    } else if (o->ram) {
        p->ram = o->ram;
        p->memory_limit = kw_plan_default_memory_limit(o->ram, false, o->reserve, &p->reserve);
    } else if (o->mem_available) {
        p->ram = o->mem_available;
        p->ram_measured = true;
        p->memory_limit = kw_plan_default_memory_limit(o->mem_available, true, o->reserve, &p->reserve);
    } else {
        return kw_err_set(err, "plan: no RAM figure (pass --ram, e.g. --ram 32GiB)");
    }
    if (p->memory_limit == 0)
        return kw_err_set(err, "plan: the reserve leaves no memory for the server (RAM %llu bytes, reserve %llu bytes)",
                          (unsigned long long)p->ram, (unsigned long long)p->reserve);
    return 0;
}

static int check_opts(const kw_plan_model *m, kw_plan_opts *o, kw_err *err) {
    if (o->ctx == 0) {
        o->ctx = m->hp.n_ctx_train > 0 ? m->hp.n_ctx_train : KW_PLAN_DEFAULT_CTX;
        if (o->ctx > KW_PLAN_DEFAULT_CTX) o->ctx = KW_PLAN_DEFAULT_CTX;
    }
    if (o->ctx < 1 || o->ctx > KW_PLAN_MAX_CTX) return kw_err_set(err, "plan: --ctx must be 1..%d (got %d)", KW_PLAN_MAX_CTX, o->ctx);
    if (o->max_connections == 0) o->max_connections = KW_SERVER_DEFAULT_MAX_CONNECTIONS;
    if (o->max_body == 0) o->max_body = KW_SERVER_DEFAULT_MAX_BODY;
    if (o->http_threads == 0) o->http_threads = KW_SERVER_DEFAULT_HTTP_THREADS;
    if (o->request_memory == 0) o->request_memory = KW_SERVER_DEFAULT_REQUEST_MEMORY;
    if (o->http_threads < 1 || o->http_threads > 64) return kw_err_set(err, "plan: --http-threads must be 1..64 (got %d)", o->http_threads);
    if (o->max_connections < 1 || o->max_connections > 100000)
        return kw_err_set(err, "plan: --max-connections must be 1..100000 (got %d)", o->max_connections);
    if (o->concurrency < 1 || o->concurrency > 4096) return kw_err_set(err, "plan: --concurrency must be 1..4096 (got %d)", o->concurrency);
    if (o->prompt_concurrency < 1 || o->prompt_concurrency > 256)
        return kw_err_set(err, "plan: --prompt-concurrency must be 1..256 (got %d)", o->prompt_concurrency);
    if (o->prefill_step < 1 || o->prefill_step > 65536)
        return kw_err_set(err, "plan: --prefill-step-size must be 1..65536 (got %d)", o->prefill_step);
    if (o->block_tokens < 1 || o->block_tokens > 4096) return kw_err_set(err, "plan: block size must be 1..4096");
    if (o->n_threads < 1 || o->n_threads > 1024) return kw_err_set(err, "plan: threads must be 1..1024");
    if (kw_kv_type_from_name(kw_kv_type_name(o->kv_type)) < 0)
        return kw_err_set(err, "plan: --kv-type must be " KW_KV_TYPE_NAMES);
    o->kv_type = kw_hparams_kv_type(&m->hp, o->kv_type, o->block_tokens);   /* auto -> what it resolves to */
    if (o->cache_seqs < 0) return kw_err_set(err, "plan: --prompt-cache-size must be >= 0");
    if (!(o->bandwidth >= 0) || o->bandwidth > 1e15) return kw_err_set(err, "plan: bandwidth out of range");
    if (m->hp.n_kv_layers > 0 && kw_plan_kv_bytes_per_token(m, o->kv_type) == 0)
        return kw_err_set(err, "plan: KV type %s cannot hold head_dim %d/%d (q8_0 needs multiples of 32)",
                          kw_plan_type_name(o->kv_type), m->hp.head_dim_k, m->hp.head_dim_v);
    return 0;
}

static void fill_workspace_rows(const kw_plan_model *m, kw_plan *p) {
    static const int32_t steps[KW_PLAN_STEP_ROWS] = {128, 256, 512, 1024, 2048, 4096};
    for (int i = 0; i < KW_PLAN_STEP_ROWS; i++) {
        p->ws_step[i] = steps[i];
        p->ws_bytes[i] = kw_plan_workspace_bytes(m, batch_tokens(p, steps[i], p->o.concurrency), p->o.ctx, p->o.n_threads);
    }
}

/* Prompt cache: `wanted` sequences at full ctx, as many as the remainder holds. */
static void recommend_cache(const kw_plan_model *m, kw_plan *p) {
    int32_t wanted = p->o.cache_seqs ? p->o.cache_seqs : p->o.concurrency + 1;
    uint64_t per = p->seq_bytes ? p->seq_bytes : 1;
    uint64_t fit = p->remainder / per;
    uint64_t blk = p->kv_block_bytes ? p->kv_block_bytes : 1;
    uint64_t seq_blocks = p->seq_kv_bytes / blk;
    uint64_t cache_blocks;
    if (fit >= (uint64_t)wanted) {
        p->prompt_cache_size = wanted;
        p->prompt_cache_bytes = sat_mul((uint64_t)wanted, p->seq_bytes);
        cache_blocks = sat_mul((uint64_t)wanted, seq_blocks);
    } else if (fit >= 1) {
        p->prompt_cache_size = (int32_t)fit;
        p->prompt_cache_bytes = sat_mul(fit, p->seq_bytes);
        cache_blocks = sat_mul(fit, seq_blocks);
    } else {
        /* less than one whole conversation: still worth a shared system prompt */
        p->prompt_cache_size = p->remainder >= blk ? 1 : 0;
        p->prompt_cache_bytes = p->remainder / blk * blk;
        cache_blocks = p->remainder / blk;
    }
    /* the pool holds live sequences and the cache (one pool, docs/MEMORY.md) */
    uint64_t blocks = sat_add(sat_mul((uint64_t)p->o.concurrency, seq_blocks), cache_blocks);
    p->kv_pool_blocks = blocks > INT32_MAX ? INT32_MAX : (int32_t)blocks;
    p->headroom = p->remainder - p->prompt_cache_bytes;
    (void)m;
}

static void advise(const kw_plan_model *m, kw_plan *p) {
    char a[32], b[32], c[32];
    cfg cur = {p->o.ctx, p->o.concurrency, p->o.prefill_step, p->o.kv_type};
    if (p->fits) {
        if (m->hp.n_ctx_train > 0 && p->o.ctx > m->hp.n_ctx_train)
            warn(p, "--ctx %d is beyond the model's training context (%d): quality past it is not guaranteed",
                 p->o.ctx, m->hp.n_ctx_train);
        if (p->prompt_cache_size == 0)
            warn(p, "no room for a prompt cache: every request prefills its whole prompt (costs time, not quality)");
        else if (p->remainder < p->seq_bytes)
            warn(p, "the prompt cache (%s) holds less than one conversation at --ctx %d (%s): long prefixes will be recomputed",
                 kw_format_bytes(p->prompt_cache_bytes, a, sizeof a), p->o.ctx, kw_format_bytes(p->seq_bytes, b, sizeof b));
    } else {
        uint64_t others = sat_add(sat_add(sat_add(p->workspace_bytes, p->tokenizer), p->overhead), p->connections);
        if (sat_add(sat_add(sat_add(p->weights, p->tokenizer), p->overhead), p->connections) > p->memory_limit) {
            warn(p, "the weights alone (%s) do not fit in the %s limit: use a smaller quant (weights under %s) or more RAM",
                 kw_format_bytes(p->weights, a, sizeof a), kw_format_bytes(p->memory_limit, b, sizeof b),
                 kw_format_bytes(p->memory_limit > sat_add(others, p->live_kv) ? p->memory_limit - sat_add(others, p->live_kv) : 0, c, sizeof c));
            return;
        }
        warn(p, "does not fit: needs %s, limit %s (short by %s). Any one of these would fit:",
             kw_format_bytes(p->needed, a, sizeof a), kw_format_bytes(p->memory_limit, b, sizeof b),
             kw_format_bytes(p->shortfall, c, sizeof c));
        if (p->max_ctx >= 1)
            warn(p, "  a smaller context: --ctx %d (the largest that fits with %d sequence%s)", p->max_ctx,
                 p->o.concurrency, p->o.concurrency == 1 ? "" : "s");
        /* i8 where the integer attention kernels run for this shape (about
         * q8_0's bytes and precision, faster attention); q8_0 anywhere */
        bool i8 = kw_hparams_kv_type(&m->hp, KW_KV_TYPE_AUTO, p->o.block_tokens) == KW_TYPE_KV_I16;
        if (p->o.kv_type != KW_TYPE_Q8_0 && p->o.kv_type != KW_TYPE_KV_I8 && p->max_ctx_q8 >= p->o.ctx)
            warn(p, "  8-bit KV: %s (KV %s -> %s per token; shrinks decode memory, not the prefill peak)",
                 i8 ? "--kv-type i8 (or --kv-type q8_0)" : "--kv-type q8_0",
                 kw_format_bytes(p->kv_bytes_per_token, a, sizeof a),
                 kw_format_bytes(kw_plan_kv_bytes_per_token(m, i8 ? KW_TYPE_KV_I8 : KW_TYPE_Q8_0), b, sizeof b));
        if (p->o.concurrency > 1 && p->max_concurrency >= 1)
            warn(p, "  fewer concurrent sequences: --concurrency %d", p->max_concurrency);
        for (int32_t s = p->o.prefill_step / 2; s >= 64; s /= 2) {
            cfg t = cur;
            t.step = s;
            if (cfg_needed(m, p, t) <= p->memory_limit) {
                warn(p, "  a smaller prefill step: --prefill-step-size %d (workspace %s -> %s)", s,
                     kw_format_bytes(p->workspace_bytes, a, sizeof a),
                     kw_format_bytes(kw_plan_workspace_bytes(m, batch_tokens(p, s, p->o.concurrency), p->o.ctx, p->o.n_threads), b, sizeof b));
                break;
            }
        }
        if (p->weights > p->shortfall)
            warn(p, "  a smaller quant: weights of at most %s (now %s)",
                 kw_format_bytes(p->weights - p->shortfall, a, sizeof a), kw_format_bytes(p->weights, b, sizeof b));
        warn(p, "  or more memory: a limit of %s (--ram %s with this reserve)", kw_format_bytes(p->needed, a, sizeof a),
             kw_format_bytes(sat_add(p->needed, p->reserve), b, sizeof b));
    }
    if (m->n_linear_layers > 0 && m->linear_state_bytes == 0)
        warn(p, "%d linear-attention layers but no state-size keys in the config: their per-sequence state is not counted",
             m->n_linear_layers);
    if (m->n_experts > 0 && m->expert_bytes == 0)
        warn(p, "mixture of experts: a token reads only %d of %d experts, so decode can beat the ceiling shown "
             "(it divides by all weights)", m->n_experts_used, m->n_experts);
    if (!strcmp(m->source, "hf-config")) {
        /* the types this CPU's kernel family repacks, as the family's own pack function says */
        static const uint32_t types[] = {KW_TYPE_Q4_0, KW_TYPE_Q8_0, KW_TYPE_F16, KW_TYPE_Q4_K, KW_TYPE_Q5_K, KW_TYPE_Q6_K};
        char list[96] = "";
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
            if (kw_shape_pack_bytes(types[i], 256, 64) > 0)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", list[0] ? "/" : "", kw_type_name(types[i]));
        if (list[0])
            warn(p, "on this CPU (%s kernels) %s weights get a repacked heap copy at load (about their size; "
                 "the mapped pages it replaces are dropped), not counted in --weights-bytes: plan the GGUF file for the "
                 "exact weights line", kw_kernel_name(), list);
    }
    if (m->kv_layers_sliding_as_full)
        warn(p, "sliding-window layers are counted as full attention (an upper bound on KV)");
}

double kw_plan_step_weight_bytes(const kw_plan_model *m, int32_t n) {
    double all = (double)m->read_bytes_per_token;
    if (m->expert_bytes == 0 || m->n_experts < 1 || n <= 1) return all;
    double share = (double)m->n_experts_used / m->n_experts, e = (double)m->expert_bytes;
    return all - e * share + e * (1.0 - pow(1.0 - share, n));
}

int kw_plan_compute(const kw_plan_model *m, const kw_plan_opts *opts, kw_plan *p, kw_err *err) {
    memset(p, 0, sizeof *p);
    p->o = *opts;
    if (check_opts(m, &p->o, err) != 0) return -1;
    if (set_budget(p, &p->o, err) != 0) return -1;
    const kw_plan_opts *o = &p->o;

    p->kv_bytes_per_token = kw_plan_kv_bytes_per_token(m, o->kv_type);
    p->kv_bytes_per_token_f16 = kw_plan_kv_bytes_per_token(m, KW_TYPE_F16);
    p->kv_block_bytes = sat_mul(p->kv_bytes_per_token, (uint64_t)o->block_tokens);
    p->seq_kv_bytes = seq_kv(p->kv_bytes_per_token, o->block_tokens, o->ctx);
    p->seq_state_bytes = m->linear_state_bytes;
    p->seq_bytes = sat_add(p->seq_kv_bytes, p->seq_state_bytes);

    p->workspace_bytes = kw_plan_workspace_bytes(m, batch_tokens(p, o->prefill_step, o->concurrency), o->ctx, o->n_threads);
    fill_workspace_rows(m, p);

    p->weights = m->resident_bytes;
    p->tokenizer = m->tokenizer_bytes;
    p->overhead = o->overhead == UINT64_MAX ? KW_PLAN_DEFAULT_OVERHEAD : o->overhead;
    p->connections = kw_plan_connections_bytes(o->max_connections, o->max_body, o->http_threads, o->request_memory);
    p->live_kv = sat_mul((uint64_t)o->concurrency, p->seq_bytes);
    p->fixed = sat_add(sat_add(sat_add(p->weights, p->workspace_bytes), sat_add(p->tokenizer, p->overhead)),
                       p->connections);
    p->needed = sat_add(p->fixed, p->live_kv);
    p->fits = p->needed <= p->memory_limit;
    p->remainder = p->fits ? p->memory_limit - p->needed : 0;
    p->shortfall = p->fits ? 0 : p->needed - p->memory_limit;
    if (p->fits) recommend_cache(m, p);

    cfg cur = {o->ctx, o->concurrency, o->prefill_step, o->kv_type};
    int32_t cap = KW_PLAN_MAX_CTX;
    p->max_ctx = largest_ctx(m, p, cur, cap);
    cfg q8 = cur;
    q8.kv_type = KW_TYPE_Q8_0;
    p->max_ctx_q8 = kw_plan_kv_bytes_per_token(m, KW_TYPE_Q8_0) || m->hp.n_kv_layers == 0 ? largest_ctx(m, p, q8, cap) : 0;
    uint64_t fixed = p->fixed;
    if (fixed > p->memory_limit) p->max_concurrency = 0;
    else if (p->seq_bytes == 0) p->max_concurrency = 4096;
    else {
        uint64_t c = (p->memory_limit - fixed) / p->seq_bytes;
        p->max_concurrency = c > 4096 ? 4096 : (int32_t)c;
    }

    p->bytes_per_token = m->read_bytes_per_token;
    if (o->bandwidth > 0 && p->bytes_per_token > 0) {
        double w = (double)p->bytes_per_token;
        double kv_seq = (double)p->kv_bytes_per_token * o->ctx + (double)p->seq_state_bytes;
        p->decode_tok_s = o->bandwidth / w;
        p->decode_tok_s_full_ctx = o->bandwidth / (w + kv_seq);
        p->decode_aggregate_tok_s = o->concurrency * o->bandwidth / (kw_plan_step_weight_bytes(m, o->concurrency) +
                                                                     o->concurrency * kv_seq);
    }
    advise(m, p);
    return 0;
}
