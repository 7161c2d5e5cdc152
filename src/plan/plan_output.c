/* plan_output.c - what `kvwise plan` shows (plan.h): the human report, the
 * JSON document (schema "kvwise.plan/1", docs/PLAN.md), the ready-to-paste
 * `kvwise serve` line, and the server's startup ledger from the same plan. */
#include "plan_internal.h"
#include "kvwise/server.h"
#include "kvwise/kv.h"
#include "kvwise/kvmem.h"
#include "kvwise/tensor.h"
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <string.h>

/* A weight or KV type's name: the KV-only types (i16, i8) by kv.h, every
 * other by the GGUF type table ("?" for an id it does not know). */
const char *kw_plan_type_name(uint32_t type) {
    return kw_kv_type_is_int(type) ? kw_kv_type_name(type) : kw_type_name(type);
}

/* 147456 -> "147,456" */
static const char *commas(uint64_t v, char *buf, size_t cap) {
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%" PRIu64, v), o = 0;
    for (int i = 0; i < n && (size_t)o + 2 < cap; i++) {
        if (i > 0 && (n - i) % 3 == 0) buf[o++] = ',';
        buf[o++] = tmp[i];
    }
    buf[o] = 0;
    return buf;
}

/* A size kw_parse_bytes reads back, rounded down to whole MiB: "26GiB", "3584MiB". */
static const char *flag_bytes(uint64_t b, char *buf, size_t cap) {
    const uint64_t MiB = 1ULL << 20, GiB = 1ULL << 30;
    if (b >= GiB && b % GiB == 0) snprintf(buf, cap, "%" PRIu64 "GiB", b / GiB);
    else if (b >= MiB) snprintf(buf, cap, "%" PRIu64 "MiB", b / MiB);
    else snprintf(buf, cap, "%" PRIu64, b);
    return buf;
}

static const char *elem_text(uint32_t kv_type) {
    switch (kv_type) {
    case KW_TYPE_F32: return "4 bytes";
    case KW_TYPE_Q8_0: return "34/32 bytes (q8_0: 32 values + f16 scale)";
    case KW_TYPE_KV_I16: return "2 bytes + a 4-byte scale per row (i16)";
    case KW_TYPE_KV_I8: return "1 byte + a 4-byte scale per row (i8)";
    default: return "2 bytes";
    }
}

void kw_plan_serve_line(const kw_plan *p, const char *model_path, char *buf, size_t cap) {
    char lim[32], cb[32];
    const kw_plan_opts *o = &p->o;
    int n = snprintf(buf, cap, "kvwise serve -m %s --memory-limit %s --ctx-size %d --kv-type %s "
                     "--decode-concurrency %d --prompt-concurrency %d --prefill-step-size %d --threads %d",
                     model_path ? model_path : "MODEL.gguf", flag_bytes(p->memory_limit, lim, sizeof lim),
                     o->ctx, kw_plan_type_name(o->kv_type), o->concurrency, o->prompt_concurrency, o->prefill_step,
                     o->n_threads);
    if (n >= 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, " --prompt-cache-size %d --prompt-cache-bytes %s --kv-block-size %d --kv-blocks %d",
                      p->prompt_cache_size, flag_bytes(p->prompt_cache_bytes, cb, sizeof cb), o->block_tokens,
                      p->kv_pool_blocks);
    if (n >= 0 && (size_t)n < cap && o->max_connections != KW_SERVER_DEFAULT_MAX_CONNECTIONS)
        n += snprintf(buf + n, cap - (size_t)n, " --max-connections %d", o->max_connections);
    if (n >= 0 && (size_t)n < cap && o->max_body != KW_SERVER_DEFAULT_MAX_BODY)
        n += snprintf(buf + n, cap - (size_t)n, " --max-body %" PRIu64, o->max_body);
    if (n >= 0 && (size_t)n < cap && o->http_threads != KW_SERVER_DEFAULT_HTTP_THREADS)
        n += snprintf(buf + n, cap - (size_t)n, " --http-threads %d", o->http_threads);
    if (n >= 0 && (size_t)n < cap && o->request_memory != KW_SERVER_DEFAULT_REQUEST_MEMORY)
        snprintf(buf + n, cap - (size_t)n, " --request-memory %" PRIu64, o->request_memory);
}

int kw_plan_fill_ledger(const kw_plan *p, kw_ledger *l, kw_err *err) {
    if (kw_ledger_set(l, KW_LEDGER_WEIGHTS, p->weights, err) || kw_ledger_set(l, KW_LEDGER_WORKSPACE, p->workspace_bytes, err) ||
        kw_ledger_set(l, KW_LEDGER_TOKENIZER, p->tokenizer, err) || kw_ledger_set(l, KW_LEDGER_OVERHEAD, p->overhead, err) ||
        kw_ledger_set(l, KW_LEDGER_CONNECTIONS, p->connections, err))
        return -1;
    return 0;
}

static void print_model(const kw_plan_model *m, const kw_plan *p, const char *path, FILE *out) {
    const kw_hparams *hp = &m->hp;
    char a[32], b[32], c[32], d[32];
    fprintf(out, "kvwise plan: %s (%s%s%s, from %s)\n", path ? path : "(config)", hp->arch_name,
            hp->name[0] ? ", " : "", hp->name, m->source);
    fprintf(out, "\nModel\n");
    fprintf(out, "  %d layers (%d keep a KV cache", hp->n_layer, hp->n_kv_layers);
    if (m->n_linear_layers) fprintf(out, ", %d linear-attention with a fixed state", m->n_linear_layers);
    fprintf(out, "), %d heads (%d KV) x head_dim %d", hp->n_head, hp->n_head_kv, hp->head_dim_k);
    if (hp->head_dim_v != hp->head_dim_k) fprintf(out, "/%d", hp->head_dim_v);
    fprintf(out, ", embd %d, ff %d, vocab %d", hp->n_embd, hp->n_ff, hp->n_vocab);
    if (hp->n_ctx_train) fprintf(out, ", trained ctx %d", hp->n_ctx_train);
    fprintf(out, "\n  weights %s (%s bytes%s%s); read per decoded token: %s (%s bytes)\n",
            kw_format_bytes(m->weight_bytes, a, sizeof a), commas(m->weight_bytes, b, sizeof b),
            m->main_type < KW_TYPE_COUNT ? ", mostly " : "", m->main_type < KW_TYPE_COUNT ? kw_plan_type_name(m->main_type) : "",
            kw_format_bytes(p->bytes_per_token, c, sizeof c), commas(p->bytes_per_token, d, sizeof d));
    if (m->expert_bytes)
    {
        fprintf(out, "  mixture of experts: %d of %d experts per token; experts %s of the weights (stay mapped, "
                "resident once used); active per token: %s = the rest + %d/%d of the experts\n", m->n_experts_used,
                m->n_experts, kw_format_bytes(m->expert_bytes, a, sizeof a), kw_format_bytes(p->bytes_per_token, b, sizeof b),
                m->n_experts_used, m->n_experts);
        if (m->expert_pack_bytes)
            fprintf(out, "  experts are packed for the %s kernels at first use (their mapped pages dropped): "
                    "the weights line holds %s for that\n", kw_kernel_name(), kw_format_bytes(m->expert_pack_bytes, a, sizeof a));
    }
    if (m->repack_bytes)
        fprintf(out, "  load-time repack for the %s kernels: %s heap copy; %s of mapped pages it replaces are dropped\n",
                kw_kernel_name(), kw_format_bytes(m->repack_bytes, a, sizeof a), kw_format_bytes(m->released_bytes, b, sizeof b));
}

static void print_kv(const kw_plan_model *m, const kw_plan *p, FILE *out) {
    const kw_hparams *hp = &m->hp;
    const kw_plan_opts *o = &p->o;
    char a[32], b[32], c[32];
    fprintf(out, "\nKV cache (%s, blocks of %d tokens)\n", kw_plan_type_name(o->kv_type), o->block_tokens);
    fprintf(out, "  per token: %d attention layers x 2 (K,V) x %d KV heads x %d x %s = %s bytes (%s)\n",
            hp->n_kv_layers, hp->n_head_kv, hp->head_dim_k, elem_text(o->kv_type),
            commas(p->kv_bytes_per_token, a, sizeof a), kw_format_bytes(p->kv_bytes_per_token, b, sizeof b));
    if (o->kv_type == KW_TYPE_F16) {
        uint64_t q8 = kw_plan_kv_bytes_per_token(m, KW_TYPE_Q8_0);
        if (q8) fprintf(out, "  with --kv-type q8_0: %s bytes per token (34/64 of f16)\n", commas(q8, a, sizeof a));
    }
    if (o->kv_type == KW_TYPE_KV_I16) {
        uint64_t i8 = kw_plan_kv_bytes_per_token(m, KW_TYPE_KV_I8);
        if (i8) fprintf(out, "  with --kv-type i8: %s bytes per token (about half; q8_0-like precision)\n", commas(i8, a, sizeof a));
    }
    if (m->n_linear_layers)
        fprintf(out, "  linear-attention state: %s per sequence (%d layers; %s)\n",
                kw_format_bytes(m->linear_state_bytes, a, sizeof a), m->n_linear_layers,
                m->linear_formula[0] ? m->linear_formula : "size unknown");
    if (m->linear_state_bytes && p->kv_bytes_per_token)
        fprintf(out, "  prompt-cache checkpoints: a copy of that state each (the KV of %" PRIu64 " tokens), saved at prompt\n"
                     "    ends, sequence ends, branch points and every --checkpoint-interval (default %d) prompt tokens;\n"
                     "    at most half of --prompt-cache-bytes and %d per cached conversation (docs/MEMORY.md)\n",
                (uint64_t)(m->linear_state_bytes / p->kv_bytes_per_token), KW_KVMEM_CHECKPOINT_INTERVAL,
                KW_KVMEM_CHECKPOINTS_PER_SEQ);
    fprintf(out, "  one sequence at ctx %d: %s", o->ctx, kw_format_bytes(p->seq_kv_bytes, a, sizeof a));
    if (p->seq_state_bytes) fprintf(out, " + state %s = %s", kw_format_bytes(p->seq_state_bytes, b, sizeof b),
                                    kw_format_bytes(p->seq_bytes, c, sizeof c));
    fprintf(out, "\n");
}

static void print_workspace(const kw_plan *p, FILE *out) {
    const kw_plan_opts *o = &p->o;
    char a[32];
    fprintf(out, "\nPrefill workspace (transient; a cache cap does not bound it)\n");
    fprintf(out, "  --prefill-step-size %d x %d prompt%s at ctx %d, %d threads: %s\n", o->prefill_step,
            o->prompt_concurrency, o->prompt_concurrency == 1 ? "" : "s", o->ctx, o->n_threads,
            kw_format_bytes(p->workspace_bytes, a, sizeof a));
    fprintf(out, "  by step size:");
    for (int i = 0; i < KW_PLAN_STEP_ROWS; i++)
        fprintf(out, "%s %d -> %s", i ? "," : "", p->ws_step[i], kw_format_bytes(p->ws_bytes[i], a, sizeof a));
    fprintf(out, "\n");
}

static void print_budget(const kw_plan_model *m, const kw_plan *p, FILE *out) {
    const kw_plan_opts *o = &p->o;
    char a[32], b[32], c[32];
    fprintf(out, "\nBudget\n");
    fprintf(out, "  RAM %s%s - reserve %s for the OS and other apps = --memory-limit %s\n",
            kw_format_bytes(p->ram, a, sizeof a), p->ram_measured ? " (MemAvailable now)" : "",
            kw_format_bytes(p->reserve, b, sizeof b), kw_format_bytes(p->memory_limit, c, sizeof c));
    struct { const char *what; uint64_t v; } rows[] = {
        {m->repack_bytes ? "weights (mapped file + load-time repack)" : "weights (mapped file)", p->weights},
        {"prefill workspace", p->workspace_bytes},
        {m->tokenizer_measured ? "tokenizer (measured)" : "tokenizer (estimate)", p->tokenizer},
        {"fixed overhead (process, libraries, server)", p->overhead},
        {"HTTP connections (max x 68 KiB + bodies + requests)", p->connections},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        fprintf(out, "  %-46s %12s\n", rows[i].what, kw_format_bytes(rows[i].v, a, sizeof a));
    snprintf(c, sizeof c, "live KV: %d seq x ctx %d", o->concurrency, o->ctx);
    fprintf(out, "  %-46s %12s\n", c, kw_format_bytes(p->live_kv, a, sizeof a));
    fprintf(out, "  %-46s %12s of %s\n", "needed", kw_format_bytes(p->needed, a, sizeof a),
            kw_format_bytes(p->memory_limit, b, sizeof b));
    if (p->fits) {
        fprintf(out, "  %-46s %12s\n", "remainder", kw_format_bytes(p->remainder, a, sizeof a));
        int32_t wanted = o->cache_seqs ? o->cache_seqs : o->concurrency + 1;
        const char *why = p->prompt_cache_size < wanted ? "all that remains"
                          : o->cache_seqs ? "as asked" : "concurrency + 1 conversations";
        fprintf(out, "  -> prompt cache: --prompt-cache-size %d --prompt-cache-bytes %s (%s; one conversation at ctx %d = %s)\n",
                p->prompt_cache_size, kw_format_bytes(p->prompt_cache_bytes, a, sizeof a), why, o->ctx,
                kw_format_bytes(p->seq_bytes, b, sizeof b));
        if (p->headroom) fprintf(out, "  -> left unused as headroom: %s\n", kw_format_bytes(p->headroom, a, sizeof a));
    } else {
        fprintf(out, "  DOES NOT FIT: short by %s\n", kw_format_bytes(p->shortfall, a, sizeof a));
    }
    fprintf(out, "  largest context that fits with %d sequence%s: %d (q8_0 KV: %d)%s\n", o->concurrency,
            o->concurrency == 1 ? "" : "s", p->max_ctx, p->max_ctx_q8,
            m->hp.n_ctx_train && p->max_ctx > m->hp.n_ctx_train ? "; beyond the trained context" : "");
    fprintf(out, "  most sequences at ctx %d: %d\n", o->ctx, p->max_concurrency);
}

static void print_ceiling(const kw_plan *p, FILE *out) {
    const kw_plan_opts *o = &p->o;
    double bpt = (double)p->bytes_per_token;
    fprintf(out, "  %.1f GB/s (%s) / %.2f %s per token = %.2f tok/s\n", o->bandwidth / 1e9,
            o->bandwidth_measured ? "measured here" : "given", bpt >= 1e9 ? bpt / 1e9 : bpt / 1e6,
            bpt >= 1e9 ? "GB" : "MB", p->decode_tok_s);
    fprintf(out, "  at ctx %d (its KV is read too): %.2f tok/s", o->ctx, p->decode_tok_s_full_ctx);
    if (o->concurrency > 1)
        fprintf(out, "; %d sequences together: %.2f tok/s in total", o->concurrency, p->decode_aggregate_tok_s);
    fprintf(out, "\n");
}

static void print_speed(const kw_plan_model *m, const kw_plan *p, FILE *out) {
    if (m->expert_bytes) fprintf(out, "\nDecode ceiling (each token reads its active weights once: %d of %d experts)\n",
                                 m->n_experts_used, m->n_experts);
    else fprintf(out, "\nDecode ceiling (each token reads every weight once)\n");
    if (p->o.bandwidth <= 0) fprintf(out, "  bandwidth unknown (pass --bandwidth GB/s or drop --no-bandwidth-probe)\n");
    else print_ceiling(p, out);
    if (p->decode_measured_tok_s > 0) {
        fprintf(out, "  measured here (--probe): decode %.2f tok/s", p->decode_measured_tok_s);
        if (p->decode_tok_s > 0) fprintf(out, " = %.0f%% of the ceiling", 100.0 * p->decode_measured_tok_s / p->decode_tok_s);
        fprintf(out, "\n");
    }
    if (p->prefill_tok_s > 0)
        fprintf(out, "  prefill (--probe, %d tokens): %.1f tok/s -> time to first token for a %d-token prompt: "
                "at least %.1f s\n", p->probe_tokens, p->prefill_tok_s, p->ttft_tokens, p->ttft_tokens / p->prefill_tok_s);
}

void kw_plan_print(const kw_plan_model *m, const kw_plan *p, const char *model_path, FILE *out) {
    print_model(m, p, model_path, out);
    print_kv(m, p, out);
    print_workspace(p, out);
    print_budget(m, p, out);
    print_speed(m, p, out);
    if (p->n_warnings) {
        fprintf(out, "\nWarnings\n");
        for (int i = 0; i < p->n_warnings; i++) fprintf(out, "  %s\n", p->warnings[i]);
    }
    char line[1024];
    kw_plan_serve_line(p, model_path, line, sizeof line);
    fprintf(out, "\n%s:\n  %s\n", p->fits ? "Serve with" : "Serve with (after changing what the warnings say)", line);
}

static void num(cJSON *o, const char *k, double v) { cJSON_AddNumberToObject(o, k, v); }

cJSON *kw_plan_to_cjson(const kw_plan_model *m, const kw_plan *p, const char *model_path) {
    const kw_hparams *hp = &m->hp;
    const kw_plan_opts *o = &p->o;
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    cJSON_AddStringToObject(root, "schema", "kvwise.plan/1");

    cJSON *jm = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(jm, "source", m->source);
    if (model_path) cJSON_AddStringToObject(jm, "path", model_path); else cJSON_AddNullToObject(jm, "path");
    cJSON_AddStringToObject(jm, "name", hp->name);
    cJSON_AddStringToObject(jm, "arch", hp->arch_name);
    kw_json_add_nums(jm, (kw_json_num[]){
        {"n_layer", hp->n_layer}, {"n_kv_layers", hp->n_kv_layers}, {"n_linear_layers", m->n_linear_layers},
        {"n_head", hp->n_head}, {"n_head_kv", hp->n_head_kv}, {"head_dim_k", hp->head_dim_k},
        {"head_dim_v", hp->head_dim_v}, {"n_embd", hp->n_embd}, {"n_ff", hp->n_ff}, {"n_vocab", hp->n_vocab},
        {"n_ctx_train", hp->n_ctx_train}, {"weight_bytes", (double)m->weight_bytes},
        {"resident_bytes", (double)m->resident_bytes}, {"repack_bytes", (double)m->repack_bytes},
        {"released_bytes", (double)m->released_bytes},
        {"read_bytes_per_token", (double)m->read_bytes_per_token}, {"n_experts", m->n_experts},
        {"n_experts_used", m->n_experts_used}, {"expert_bytes", (double)m->expert_bytes},
        {"expert_pack_bytes", (double)m->expert_pack_bytes}, {NULL, 0}});
    if (m->main_type < KW_TYPE_COUNT) cJSON_AddStringToObject(jm, "main_type", kw_plan_type_name(m->main_type));
    else cJSON_AddNullToObject(jm, "main_type");
    num(jm, "tokenizer_bytes", (double)m->tokenizer_bytes);
    cJSON_AddBoolToObject(jm, "tokenizer_measured", m->tokenizer_measured);
    num(jm, "linear_state_bytes", (double)m->linear_state_bytes);
    cJSON_AddStringToObject(jm, "linear_state_formula", m->linear_formula);

    cJSON *js = cJSON_AddObjectToObject(root, "settings");
    num(js, "ram", (double)p->ram);
    cJSON_AddBoolToObject(js, "ram_measured", p->ram_measured);
    num(js, "reserve", (double)p->reserve);
    num(js, "memory_limit", (double)p->memory_limit);
    num(js, "ctx", o->ctx);
    num(js, "concurrency", o->concurrency);
    num(js, "prompt_concurrency", o->prompt_concurrency);
    num(js, "prefill_step_size", o->prefill_step);
    cJSON_AddStringToObject(js, "kv_type", kw_plan_type_name(o->kv_type));
    num(js, "block_tokens", o->block_tokens);
    num(js, "threads", o->n_threads);

    cJSON *jk = cJSON_AddObjectToObject(root, "kv");
    kw_json_add_nums(jk, (kw_json_num[]){
        {"bytes_per_token", (double)p->kv_bytes_per_token},
        {"bytes_per_token_f16", (double)p->kv_bytes_per_token_f16},
        {"bytes_per_token_q8_0", (double)kw_plan_kv_bytes_per_token(m, KW_TYPE_Q8_0)},
        {"block_bytes", (double)p->kv_block_bytes}, {"per_sequence_kv_bytes", (double)p->seq_kv_bytes},
        {"per_sequence_state_bytes", (double)p->seq_state_bytes}, {"per_sequence_bytes", (double)p->seq_bytes},
        {"checkpoint_bytes", (double)m->linear_state_bytes},
        {"checkpoints_per_cached_sequence", m->linear_state_bytes ? KW_KVMEM_CHECKPOINTS_PER_SEQ : 0},
        {NULL, 0}});

    cJSON *jw = cJSON_AddObjectToObject(root, "workspace");
    num(jw, "bytes", (double)p->workspace_bytes);
    cJSON *steps = cJSON_AddArrayToObject(jw, "by_step");
    for (int i = 0; i < KW_PLAN_STEP_ROWS && steps; i++) {
        cJSON *r = cJSON_CreateObject();
        num(r, "step", p->ws_step[i]);
        num(r, "bytes", (double)p->ws_bytes[i]);
        cJSON_AddItemToArray(steps, r);
    }

    cJSON *jb = cJSON_AddObjectToObject(root, "budget");
    kw_json_add_nums(jb, (kw_json_num[]){
        {"memory_limit", (double)p->memory_limit}, {"weights", (double)p->weights},
        {"workspace", (double)p->workspace_bytes}, {"tokenizer", (double)p->tokenizer},
        {"overhead", (double)p->overhead}, {"connections", (double)p->connections},
        {"max_connections", (double)p->o.max_connections}, {"max_body", (double)p->o.max_body},
        {"http_threads", (double)p->o.http_threads}, {"request_memory", (double)p->o.request_memory},
        {"live_kv", (double)p->live_kv}, {"fixed", (double)p->fixed}, {"needed", (double)p->needed}, {NULL, 0}});
    cJSON_AddBoolToObject(jb, "fits", p->fits);
    kw_json_add_nums(jb, (kw_json_num[]){
        {"remainder", (double)p->remainder}, {"shortfall", (double)p->shortfall},
        {"prompt_cache_bytes", (double)p->prompt_cache_bytes}, {"prompt_cache_size", p->prompt_cache_size},
        {"kv_pool_blocks", p->kv_pool_blocks}, {"headroom", (double)p->headroom}, {"max_ctx", p->max_ctx},
        {"max_ctx_q8_0", p->max_ctx_q8}, {"max_concurrency", p->max_concurrency}, {NULL, 0}});

    cJSON *jp = cJSON_AddObjectToObject(root, "speed");
    num(jp, "bytes_per_token", (double)p->bytes_per_token);
    num(jp, "bandwidth_bytes_per_s", o->bandwidth);
    cJSON_AddBoolToObject(jp, "bandwidth_measured", o->bandwidth_measured);
    kw_json_add_nums(jp, (kw_json_num[]){
        {"decode_tok_s", p->decode_tok_s}, {"decode_tok_s_full_ctx", p->decode_tok_s_full_ctx},
        {"decode_aggregate_tok_s", p->decode_aggregate_tok_s}, {"prefill_tok_s", p->prefill_tok_s},
        {"decode_measured_tok_s", p->decode_measured_tok_s}, {"probe_tokens", p->probe_tokens},
        {"ttft_tokens", p->ttft_tokens},
        {"ttft_s", p->prefill_tok_s > 0 ? p->ttft_tokens / p->prefill_tok_s : 0.0}, {NULL, 0}});

    cJSON *jwarn = cJSON_AddArrayToObject(root, "warnings");
    for (int i = 0; i < p->n_warnings && jwarn; i++) cJSON_AddItemToArray(jwarn, cJSON_CreateString(p->warnings[i]));
    char line[1024];
    kw_plan_serve_line(p, model_path, line, sizeof line);
    cJSON_AddStringToObject(root, "serve", line);
    return root;
}
