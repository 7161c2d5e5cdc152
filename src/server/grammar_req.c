/* grammar_req.c - structured outputs in the server: the request fields that
 * ask for a grammar (chat response_format json_object / json_schema, a raw
 * GBNF `grammar`), the cache of compiled grammars with their vocab indexes,
 * and the per-request matcher the scheduler samples under (sched.h).
 *
 * Cache: entries keyed by (kind, strict, source text), shared by every
 * request with the same source (a grammar and its index are immutable),
 * least recently used first out when unreferenced. Memory: the grammar
 * vocab (built from the engine's pieces on first use, plus the bound of its
 * walk cache) and every cached entry are reserved on the ledger's grammar
 * line; a reservation that does not fit evicts unused entries first, then
 * fails the request with 503 out_of_memory. Compiles run one at a time (their
 * transient memory is bounded by kw_grammar_limits); their time is logged
 * and counted (kw_gcache_stats). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "internal.h"
#include "kvwise/grammar.h"
#include "kvwise/ledger.h"

#define GC_MAX_ENTRIES 64
#define GC_MAX_BYTES ((uint64_t)512 << 20)

typedef struct gc_entry {
    uint64_t h;
    char *key; size_t klen;
    kw_grammar *g;
    kw_grammar_index *ix;
    uint64_t bytes;             /* reserved on the ledger */
    int refs;                   /* jobs using it */
    uint64_t used;              /* LRU tick */
    struct gc_entry *next;
} gc_entry;

struct kw_gcache {
    pthread_mutex_t mu;         /* entries, counters */
    pthread_mutex_t compile_mu; /* one compile (and the vocab build) at a time */
    kw_engine *eng;
    kw_ledger *led;
    kw_grammar_vocab *v;
    uint64_t v_bytes;
    gc_entry *head;
    int n;
    uint64_t bytes, tick;
    kw_gcache_stats st;
};

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

kw_gcache *kw_gcache_new(kw_engine *eng, struct kw_ledger *led) {
    kw_gcache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->compile_mu, NULL);
    c->eng = eng;
    c->led = led;
    return c;
}

static void entry_free(kw_gcache *c, gc_entry *e) {
    kw_grammar_index_free(e->ix);
    kw_grammar_free(e->g);
    if (c->led && e->bytes) kw_ledger_release(c->led, KW_LEDGER_GRAMMAR, e->bytes);
    free(e->key);
    free(e);
}

void kw_gcache_free(kw_gcache *c) {
    if (!c) return;
    for (gc_entry *e = c->head, *n; e; e = n) { n = e->next; entry_free(c, e); }
    kw_grammar_vocab_free(c->v);
    if (c->led && c->v_bytes) kw_ledger_release(c->led, KW_LEDGER_GRAMMAR, c->v_bytes);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->compile_mu);
    free(c);
}

kw_gcache_stats kw_gcache_get_stats(kw_gcache *c) {
    pthread_mutex_lock(&c->mu);
    kw_gcache_stats s = c->st;
    s.entries = c->n;
    s.bytes = c->bytes + c->v_bytes;
    pthread_mutex_unlock(&c->mu);
    return s;
}

/* Evicts the least recently used unreferenced entry (under mu): true if one went. */
static bool evict_one(kw_gcache *c) {
    gc_entry **best = NULL;
    for (gc_entry **pp = &c->head; *pp; pp = &(*pp)->next)
        if ((*pp)->refs == 0 && (!best || (*pp)->used < (*best)->used)) best = pp;
    if (!best) return false;
    gc_entry *e = *best;
    *best = e->next;
    c->n--;
    c->bytes -= e->bytes;
    c->st.evictions++;
    entry_free(c, e);
    return true;
}

/* Reserves bytes on the ledger's grammar line, evicting unused entries to
 * make room (under mu). 0, or -1 when it cannot fit. */
static int reserve(kw_gcache *c, uint64_t bytes) {
    if (!c->led) return 0;
    while (kw_ledger_reserve(c->led, KW_LEDGER_GRAMMAR, bytes) < 0)
        if (!evict_one(c)) return -1;
    return 0;
}

/* The grammar vocab from the engine's token pieces (under compile_mu):
 * text tokens' bytes, EOG tokens as the engine says, tokens that render only
 * as special text as specials. */
static int vocab_build(kw_gcache *c, kw_http_error *e) {
    if (c->v) return 0;
    kw_engine *eng = c->eng;
    int32_t n = eng->n_vocab;
    char **b = calloc((size_t)n, sizeof *b);
    uint32_t *lens = calloc((size_t)n, sizeof *lens);
    uint8_t *kinds = calloc((size_t)n, 1);
    kw_sbuf pool = {0};
    size_t *offs = calloc((size_t)n, sizeof *offs);
    char piece[1024];
    int rc = -1;
    if (!b || !lens || !kinds || !offs) goto out;
    for (int32_t i = 0; i < n; i++) {
        size_t len = eng->piece(eng, i, piece, sizeof piece, false);
        if (len > sizeof piece) len = sizeof piece;
        if (eng->is_eog(eng, i)) { kinds[i] = KW_GTOK_EOG; len = 0; }
        else if (!len && eng->piece(eng, i, piece + 512, 512, true) > 0) kinds[i] = KW_GTOK_SPECIAL;
        offs[i] = pool.len;
        lens[i] = (uint32_t)len;
        kw_sbuf_add(&pool, piece, len);
    }
    kw_sbuf_add(&pool, "", 0);
    if (pool.oom) goto out;
    for (int32_t i = 0; i < n; i++) b[i] = pool.p + offs[i];
    kw_err err = {{0}};
    kw_grammar_vocab *v = kw_grammar_vocab_new(n, (const char *const *)b, lens, kinds, &err);
    if (!v) { kw_http_error_set(e, 503, NULL, "out_of_memory", "grammar vocab: %s", err.msg); rc = -2; goto out; }
    uint64_t bytes = kw_grammar_vocab_bytes(v);
    pthread_mutex_lock(&c->mu);
    int fit = reserve(c, bytes);
    pthread_mutex_unlock(&c->mu);
    if (fit < 0) {
        kw_grammar_vocab_free(v);
        kw_http_error_set(e, 503, NULL, "out_of_memory",
                          "structured outputs need %llu MiB for the grammar vocab, more than the memory budget has free",
                          (unsigned long long)(bytes >> 20));
        rc = -2;
        goto out;
    }
    c->v = v;
    c->v_bytes = bytes;
    rc = 0;
out:
    free(b); free(lens); free(kinds); free(offs);
    kw_sbuf_free(&pool);
    if (rc == -1) kw_http_error_set(e, 503, NULL, "out_of_memory", "out of memory building the grammar vocab");
    return rc < 0 ? -1 : 0;
}

static uint64_t key_hash(const char *k, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)k[i]) * 1099511628211ull;
    return h;
}

static gc_entry *lookup(kw_gcache *c, uint64_t h, const char *key, size_t klen) {
    for (gc_entry *e = c->head; e; e = e->next)
        if (e->h == h && e->klen == klen && !memcmp(e->key, key, klen)) return e;
    return NULL;
}

static const char *kind_name(int kind) {
    switch (kind) {
    case KW_GK_JSON_SCHEMA: return "json_schema";
    case KW_GK_JSON_OBJECT: return "json_object";
    case KW_GK_GBNF: return "gbnf";
    case KW_GK_REGEX: return "regex";
    case KW_GK_LARK: return "lark";
    case KW_GK_TOOLS: return "tool call";
    default: return "?";
    }
}

/* KW_GK_TOOLS source: {"open","close","key","args_only","auto","bare","max_calls",
 * "tools":[{"name","parameters","strict"}]} (written by kw_job_set_tool_grammar,
 * so its shape is trusted). Text under tool_choice auto never holds a tag
 * the call parser (toolcall.c) reads as the start of a call. */
static const char *const k_call_tags[] = {"<tool_call>", "<|python_tag|>", "[TOOL_CALLS]"};
#define TOOL_GRAMMAR_MAX 128
static kw_grammar *compile_tools(const char *text, size_t len, const kw_json_schema_opts *jo, kw_err *err) {
    cJSON *spec = cJSON_ParseWithLength(text, len);
    const cJSON *tl = cJSON_GetObjectItemCaseSensitive(spec, "tools");
    int n = cJSON_GetArraySize(tl);
    if (!spec || n <= 0 || n > TOOL_GRAMMAR_MAX) {
        cJSON_Delete(spec);
        if (n > TOOL_GRAMMAR_MAX) kw_err_set(err, "more than %d tools", TOOL_GRAMMAR_MAX);
        else kw_err_set(err, "no tools");
        return NULL;
    }
    kw_grammar_tool tools[TOOL_GRAMMAR_MAX];
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tl) {
        tools[i].name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "name"));
        tools[i].parameters = cJSON_GetObjectItemCaseSensitive(t, "parameters");
        tools[i].strict = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "strict"));
        i++;
    }
    kw_grammar_call_format f = {
        .open = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "open")),
        .close = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "close")),
        .args_key = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "key")),
        .args_only = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(spec, "args_only")),
        .auto_text = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(spec, "auto")),
        .bare = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(spec, "bare")),
        .text_excl = k_call_tags,
        .n_text_excl = (uint32_t)(sizeof k_call_tags / sizeof *k_call_tags),
    };
    /* max_calls is written only when bounded; absent means no bound (0). */
    const cJSON *mc = cJSON_GetObjectItemCaseSensitive(spec, "max_calls");
    if (cJSON_IsNumber(mc) && mc->valuedouble >= 1 && mc->valuedouble <= 1e6) f.max_calls = (uint32_t)mc->valuedouble;
    kw_grammar *g = kw_grammar_tool_call(tools, (uint32_t)n, &f, jo, NULL, err);
    cJSON_Delete(spec);
    return g;
}

static kw_grammar *compile(int kind, const char *text, size_t len, bool strict, kw_err *err) {
    kw_json_schema_opts jo = {.strict = strict, .whitespace = KW_JSON_WS_BOUNDED};
    switch (kind) {
    case KW_GK_TOOLS: return compile_tools(text, len, &jo, err);
    case KW_GK_JSON_SCHEMA: return kw_grammar_from_json_schema(text, len, &jo, NULL, err);
    case KW_GK_JSON_OBJECT: return kw_grammar_json_object(&jo, err);
    case KW_GK_GBNF: return kw_grammar_from_gbnf(text, len, NULL, err);
    case KW_GK_REGEX: return kw_grammar_from_regex(text, len, NULL, err);
    case KW_GK_LARK: return kw_grammar_from_lark(text, len, NULL, err);
    default: kw_err_set(err, "unknown grammar kind"); return NULL;
    }
}

/* The cached entry for the source (a reference taken), compiling it on a
 * miss. NULL + e: 400 naming what the compiler refused, 503 for memory. */
static gc_entry *gcache_get(kw_gcache *c, int kind, const char *text, size_t len, bool strict, const char *param,
                            kw_http_error *e) {
    size_t klen = len + 2;
    char *key = malloc(klen);
    if (!key) { kw_http_error_set(e, 503, NULL, "out_of_memory", "out of memory"); return NULL; }
    key[0] = (char)kind; key[1] = strict ? 1 : 0;
    if (len) memcpy(key + 2, text, len);
    uint64_t h = key_hash(key, klen);
    pthread_mutex_lock(&c->mu);
    gc_entry *hit = lookup(c, h, key, klen);
    if (hit) { hit->refs++; hit->used = ++c->tick; c->st.hits++; }
    pthread_mutex_unlock(&c->mu);
    if (hit) { free(key); return hit; }

    pthread_mutex_lock(&c->compile_mu);
    pthread_mutex_lock(&c->mu);       /* another request may have compiled it meanwhile */
    hit = lookup(c, h, key, klen);
    if (hit) { hit->refs++; hit->used = ++c->tick; c->st.hits++; }
    pthread_mutex_unlock(&c->mu);
    if (hit) { pthread_mutex_unlock(&c->compile_mu); free(key); return hit; }
    if (vocab_build(c, e) < 0) { pthread_mutex_unlock(&c->compile_mu); free(key); return NULL; }
    double t0 = mono();
    kw_err err = {{0}};
    kw_grammar *g = compile(kind, text, len, strict, &err);
    double t1 = mono();
    kw_grammar_index *ix = g ? kw_grammar_index_new(g, c->v, NULL, &err) : NULL;
    double t2 = mono();
    pthread_mutex_unlock(&c->compile_mu);
    if (!ix) {
        kw_grammar_free(g);
        free(key);
        pthread_mutex_lock(&c->mu);
        c->st.refused++;
        pthread_mutex_unlock(&c->mu);
        if (strstr(err.msg, "out of memory")) {
            kw_http_error_set(e, 503, NULL, "out_of_memory", "%s: %s", param, err.msg);
        } else {
            kw_http_error_set(e, 400, param, "invalid_value", "%s: %s", param, err.msg);
        }
        return NULL;
    }
    gc_entry *ne = calloc(1, sizeof *ne);
    uint64_t bytes = kw_grammar_bytes(g) + kw_grammar_index_bytes(ix);
    pthread_mutex_lock(&c->mu);
    if (!ne || reserve(c, bytes) < 0) {
        pthread_mutex_unlock(&c->mu);
        kw_grammar_index_free(ix);
        kw_grammar_free(g);
        free(key);
        free(ne);
        kw_http_error_set(e, 503, NULL, "out_of_memory",
                          "the compiled grammar needs %llu KiB, more than the memory budget has free; retry later",
                          (unsigned long long)(bytes >> 10));
        return NULL;
    }
    *ne = (gc_entry){.h = h, .key = key, .klen = klen, .g = g, .ix = ix, .bytes = bytes, .refs = 1,
                     .used = ++c->tick, .next = c->head};
    c->head = ne;
    c->n++;
    c->bytes += bytes;
    c->st.compiles++;
    c->st.compile_seconds += t2 - t0;
    while ((c->n > GC_MAX_ENTRIES || c->bytes > GC_MAX_BYTES) && evict_one(c)) {}
    pthread_mutex_unlock(&c->mu);
    fprintf(stderr, "grammar: compiled %s (%u states) in %.1f ms, vocab index %.1f ms, %llu KiB\n", kind_name(kind),
            kw_grammar_n_states(g), (t1 - t0) * 1e3, (t2 - t1) * 1e3, (unsigned long long)(bytes >> 10));
    return ne;
}

void kw_gcache_release(kw_gcache *c, struct gc_entry *e) {
    if (!c || !e) return;
    pthread_mutex_lock(&c->mu);
    e->refs--;
    pthread_mutex_unlock(&c->mu);
}

int kw_job_set_grammar(kw_job *j, int kind, const char *text, size_t len, bool strict, const char *param,
                       kw_http_error *e) {
    kw_gcache *c = kw_server_gcache(j->srv);
    if (!c) return kw_http_error_set(e, 400, param, "unsupported_parameter", "'%s': structured outputs are not available on this server", param);
    if (j->gent) return kw_http_error_set(e, 400, param, "invalid_value", "'%s': only one output grammar per request", param);
    gc_entry *ent = gcache_get(c, kind, text, len, strict, param, e);
    if (!ent) return -1;
    kw_err err = {{0}};
    kw_grammar_matcher *m = kw_grammar_matcher_new(ent->g, ent->ix, &err);
    if (!m) {
        kw_gcache_release(c, ent);
        return kw_http_error_set(e, 503, NULL, "out_of_memory", "out of memory for the grammar matcher");
    }
    j->gent = ent;
    j->gparam = param;
    j->req.grammar = m;
    return 0;
}

void kw_job_grammar_free(kw_job *j) {
    if (j->req.grammar) kw_grammar_matcher_free(j->req.grammar);
    j->req.grammar = NULL;
    if (j->gent) kw_gcache_release(kw_server_gcache(j->srv), j->gent);
    j->gent = NULL;
}

/* response_format: {type: text | json_object | json_schema, json_schema: {name, schema, strict, description}}. */
static int parse_response_format(kw_job *j, const cJSON *rf, const char *param, kw_http_error *e) {
    if (!cJSON_IsObject(rf)) return kw_http_error_set(e, 400, param, "invalid_type", "'%s' must be an object", param);
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(rf, "type");
    if (!cJSON_IsString(ty)) return kw_http_error_set(e, 400, param, "invalid_type", "'%s.type' must be a string", param);
    if (!strcmp(ty->valuestring, "text")) return 0;
    if (!strcmp(ty->valuestring, "json_object")) return kw_job_set_grammar(j, KW_GK_JSON_OBJECT, "", 0, false, param, e);
    if (strcmp(ty->valuestring, "json_schema"))
        return kw_http_error_set(e, 400, param, "invalid_value", "'%s.type' must be text, json_object or json_schema (got '%.40s')",
                                 param, ty->valuestring);
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
    if (!cJSON_IsObject(js))
        return kw_http_error_set(e, 400, param, "invalid_type", "'%s.json_schema' must be an object with a 'schema'", param);
    return kw_job_set_schema(j, cJSON_GetObjectItemCaseSensitive(js, "schema"), cJSON_GetObjectItemCaseSensitive(js, "strict"),
                             param, e);
}

int kw_job_set_schema(kw_job *j, const cJSON *schema, const cJSON *strict, const char *param, kw_http_error *e) {
    if (strict && !cJSON_IsNull(strict) && !cJSON_IsBool(strict))
        return kw_http_error_set(e, 400, param, "invalid_type", "'%s': 'strict' must be a boolean", param);
    if (!schema || cJSON_IsNull(schema)) return kw_job_set_grammar(j, KW_GK_JSON_SCHEMA, "{}", 2, cJSON_IsTrue(strict), param, e);
    if (!cJSON_IsObject(schema) && !cJSON_IsBool(schema))
        return kw_http_error_set(e, 400, param, "invalid_type", "'%s': the schema must be a JSON object", param);
    char *text = cJSON_PrintUnformatted(schema);
    if (!text) return kw_http_error_set(e, 503, NULL, "out_of_memory", "out of memory");
    int rc = kw_job_set_grammar(j, KW_GK_JSON_SCHEMA, text, strlen(text), cJSON_IsTrue(strict), param, e);
    free(text);
    return rc;
}

int kw_job_parse_format(kw_job *j, const cJSON *root, kw_http_error *e) {
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(root, "response_format");
    const cJSON *gb = cJSON_GetObjectItemCaseSensitive(root, "grammar");
    bool has_rf = rf && !cJSON_IsNull(rf), has_gb = gb && !cJSON_IsNull(gb);
    if (has_rf && has_gb)
        return kw_http_error_set(e, 400, "grammar", "invalid_value", "'grammar' and 'response_format' cannot both be given");
    if (has_gb) {
        if (!cJSON_IsString(gb)) return kw_http_error_set(e, 400, "grammar", "invalid_type", "'grammar' must be a string (GBNF)");
        if (!gb->valuestring[0]) return 0;
        return kw_job_set_grammar(j, KW_GK_GBNF, gb->valuestring, strlen(gb->valuestring), false, "grammar", e);
    }
    if (has_rf) return parse_response_format(j, rf, "response_format", e);
    return 0;
}

/* The function object of an OpenAI tool entry named name (NULL: any). */
static const cJSON *tool_function(const cJSON *tool) {
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tool, "function");
    return cJSON_IsObject(fn) ? fn : NULL;
}

int kw_job_set_tool_grammar(kw_job *j, const kw_tool_grammar_req *r, const char *param, kw_http_error *e) {
    cJSON *spec = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(spec, "tools");
    if (r->open) cJSON_AddStringToObject(spec, "open", r->open);
    if (r->close) cJSON_AddStringToObject(spec, "close", r->close);
    if (r->args_key) cJSON_AddStringToObject(spec, "key", r->args_key);
    if (r->args_only) cJSON_AddTrueToObject(spec, "args_only");
    if (r->auto_text) cJSON_AddTrueToObject(spec, "auto");
    if (r->bare) cJSON_AddTrueToObject(spec, "bare");
    if (r->max_calls) cJSON_AddNumberToObject(spec, "max_calls", r->max_calls);
    const cJSON *t;
    int i = 0;
    cJSON_ArrayForEach(t, r->tools) {
        const cJSON *fn = tool_function(t);
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fn, "name"));
        if (!name || !name[0]) {
            cJSON_Delete(spec);
            return kw_http_error_set(e, 400, "tools", "invalid_value", "tools[%d] needs a function with a string 'name'", i);
        }
        i++;
        if (r->only && strcmp(name, r->only)) continue;
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        const cJSON *strict = cJSON_GetObjectItemCaseSensitive(fn, "strict");
        if (!strict) strict = cJSON_GetObjectItemCaseSensitive(t, "strict");
        if (params && !cJSON_IsNull(params) && !cJSON_IsObject(params)) {
            cJSON_Delete(spec);
            return kw_http_error_set(e, 400, "tools", "invalid_type", "tools[%d].function.parameters must be a JSON Schema object", i - 1);
        }
        if (strict && !cJSON_IsNull(strict) && !cJSON_IsBool(strict)) {
            cJSON_Delete(spec);
            return kw_http_error_set(e, 400, "tools", "invalid_type", "tools[%d].function.strict must be a boolean", i - 1);
        }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", name);
        bool schema = cJSON_IsObject(params) && (!r->auto_text || cJSON_IsTrue(strict));
        if (schema) cJSON_AddItemToObject(o, "parameters", cJSON_Duplicate(params, true));
        if (cJSON_IsTrue(strict)) cJSON_AddTrueToObject(o, "strict");
        cJSON_AddItemToArray(list, o);
        if (r->args_only) break;
    }
    char *text = cJSON_PrintUnformatted(spec);
    cJSON_Delete(spec);
    if (!text) return kw_http_error_set(e, 503, NULL, "out_of_memory", "out of memory");
    int rc = kw_job_set_grammar(j, KW_GK_TOOLS, text, strlen(text), false, param, e);
    free(text);
    return rc;
}
