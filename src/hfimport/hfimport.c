/* hfimport.c - reads a Hugging Face tokenizer.json + tokenizer_config.json
 * (cJSON) and turns a byte-level BPE tokenizer into GGUF vocab metadata:
 * tokens in id order (model.vocab plus added_tokens; gaps padded with
 * "[PADn]" unused tokens), token types (added tokens: special -> control,
 * others -> user-defined), merges (either the "a b" string or the ["a","b"]
 * array form), the pre-tokenizer name recognised from its Split regex, the
 * BOS/EOS/PAD ids and add_bos rule from the config / post-processor, and the
 * chat template. Everything that is not supported is a one-line error.
 * Facts about the formats come from the tokenizers library's JSON and
 * llama.cpp's converter (names of pre-tokenizers); the code is ours. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cjson/cJSON.h>
#include "kvwise/hfimport.h"
#include "kvwise/memory.h"

#define HF_MAX_VOCAB (1 << 22)   /* same bound as mkmodel's vocab size */
#define HF_MAX_FILE (1ull << 30) /* tokenizer.json files are tens of MB at most */

/* The Split regexes of known pre-tokenizers -> tokenizer.ggml.pre. */
static const struct { const char *name, *regex; } k_pre_regex[] = {
    {"qwen2", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
              "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    {"llama-bpe", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                  "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
};

/* ---- small helpers ---- */

static const cJSON *obj_get(const cJSON *o, const char *key) {
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
}

static const char *str_get(const cJSON *o, const char *key) {
    const cJSON *s = obj_get(o, key);
    return cJSON_IsString(s) ? s->valuestring : NULL;
}

static bool json_id(const cJSON *n, int32_t *out) {
    if (!cJSON_IsNumber(n)) return false;
    double d = n->valuedouble;
    if (!(d >= 0 && d < HF_MAX_VOCAB) || d != floor(d)) return false;
    *out = (int32_t)d;
    return true;
}

typedef struct pool { char *p; size_t used, cap; } pool;

/* Copies a (and " " b when b is given) into the pool; NUL-terminated. */
static const char *pool_put(pool *pl, const char *a, const char *b) {
    size_t la = strlen(a), lb = b ? strlen(b) + 1 : 0;
    if (pl->used + la + lb + 1 > pl->cap) return NULL;
    char *d = pl->p + pl->used;
    memcpy(d, a, la);
    if (b) { d[la] = ' '; memcpy(d + la + 1, b, lb - 1); }
    d[la + lb] = 0;
    pl->used += la + lb + 1;
    return d;
}

static char *read_all(const char *path, size_t *len, bool *missing, kw_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) { *missing = true; kw_err_set(err, "cannot open %s", path); return NULL; }
    *missing = false;
    char *buf = NULL;
    long sz = -1;
    if (fseek(f, 0, SEEK_END) == 0) sz = ftell(f);
    if (sz < 0 || (unsigned long long)sz > HF_MAX_FILE || fseek(f, 0, SEEK_SET) != 0) {
        kw_err_set(err, "%s: cannot read (size %ld)", path, sz);
    } else if (!(buf = kw_mem_alloc(KW_MEM_TOKENIZER, (size_t)sz + 1))) {
        kw_err_set(err, "%s: out of memory", path);
    } else if (fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
        kw_err_set(err, "%s: read error", path);
        kw_mem_free(buf);
        buf = NULL;
    } else {
        buf[sz] = 0;
        *len = (size_t)sz;
    }
    fclose(f);
    return buf;
}

/* ---- pre-tokenizer ---- */

typedef struct pre_scan {
    int n_bytelevel, n_split, n_other;
    bool use_regex;           /* of the ByteLevel step */
    const char *regex;        /* the Split pattern */
    const char *other;        /* first unsupported type */
} pre_scan;

static void scan_pre_step(const cJSON *step, pre_scan *ps) {
    const char *type = str_get(step, "type");
    if (type && !strcmp(type, "ByteLevel")) {
        const cJSON *ur = obj_get(step, "use_regex");
        ps->n_bytelevel++;
        ps->use_regex = !cJSON_IsBool(ur) || cJSON_IsTrue(ur);
    } else if (type && !strcmp(type, "Split")) {
        ps->n_split++;
        const char *behavior = str_get(step, "behavior");
        const cJSON *inv = obj_get(step, "invert");
        if ((behavior && strcmp(behavior, "Isolated")) || cJSON_IsTrue(inv)) {
            ps->n_other++;
            if (!ps->other) ps->other = "Split (not Isolated)";
        }
        ps->regex = str_get(obj_get(step, "pattern"), "Regex");
    } else {
        ps->n_other++;
        if (!ps->other) ps->other = type ? type : "(no type)";
    }
}

static int detect_pre(const cJSON *pt, char *out, size_t cap, kw_err *err) {
    if (!cJSON_IsObject(pt)) return kw_err_set(err, "tokenizer.json: no pre_tokenizer (only byte-level BPE is supported)");
    pre_scan ps = {0};
    const char *type = str_get(pt, "type");
    if (type && !strcmp(type, "Sequence")) {
        const cJSON *step;
        const cJSON *steps = obj_get(pt, "pretokenizers");
        cJSON_ArrayForEach(step, steps) scan_pre_step(step, &ps);
    } else {
        scan_pre_step(pt, &ps);
    }
    if (ps.n_other) return kw_err_set(err, "tokenizer.json: pre-tokenizer '%s' is not supported (only Split + ByteLevel)", ps.other);
    if (ps.n_bytelevel != 1) return kw_err_set(err, "tokenizer.json: no ByteLevel pre-tokenizer (only byte-level BPE is supported)");
    if (ps.n_split == 0) {
        if (!ps.use_regex) return kw_err_set(err, "tokenizer.json: ByteLevel pre-tokenizer without a regex is not supported");
        snprintf(out, cap, "gpt-2");
        return 0;
    }
    if (ps.n_split > 1 || ps.use_regex || !ps.regex)
        return kw_err_set(err, "tokenizer.json: this combination of Split/ByteLevel pre-tokenizers is not supported");
    for (size_t i = 0; i < sizeof k_pre_regex / sizeof k_pre_regex[0]; i++)
        if (!strcmp(ps.regex, k_pre_regex[i].regex)) { snprintf(out, cap, "%s", k_pre_regex[i].name); return 0; }
    return kw_err_set(err, "tokenizer.json: pre-tokenizer regex not recognised (known: qwen2, llama-bpe): %.80s", ps.regex);
}

static int check_model(const cJSON *root, const cJSON *model, kw_err *err) {
    const char *type = str_get(model, "type");
    if (!cJSON_IsObject(model)) return kw_err_set(err, "tokenizer.json: no \"model\" object");
    if (!type) type = obj_get(model, "merges") ? "BPE" : "(unknown)";
    if (strcmp(type, "BPE"))
        return kw_err_set(err, "tokenizer.json: model type '%s' is not supported (only byte-level BPE)", type);
    const char *cont = str_get(model, "continuing_subword_prefix"), *suffix = str_get(model, "end_of_word_suffix");
    if ((cont && *cont) || (suffix && *suffix))
        return kw_err_set(err, "tokenizer.json: BPE with a subword prefix/suffix is not supported");
    const cJSON *norm = obj_get(root, "normalizer");
    const char *ntype = str_get(norm, "type");
    /* NFC is a no-op on NFC input; llama.cpp does not apply it either. */
    if (norm && !cJSON_IsNull(norm) && !(ntype && !strcmp(ntype, "NFC")))
        return kw_err_set(err, "tokenizer.json: normalizer '%s' is not supported", ntype ? ntype : "(no type)");
    if (!cJSON_IsObject(obj_get(model, "vocab"))) return kw_err_set(err, "tokenizer.json: model.vocab is not an object");
    if (!cJSON_IsArray(obj_get(model, "merges"))) return kw_err_set(err, "tokenizer.json: model.merges is not an array");
    return 0;
}

/* ---- tokens and merges ---- */

static int max_token_id(const cJSON *vocab, const cJSON *added, int32_t *n, kw_err *err) {
    int32_t mx = -1, id;
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        if (!json_id(it, &id)) return kw_err_set(err, "tokenizer.json: vocab entry '%.40s' has a bad id", it->string);
        if (id > mx) mx = id;
    }
    cJSON_ArrayForEach(it, added) {
        if (!json_id(obj_get(it, "id"), &id) || !str_get(it, "content"))
            return kw_err_set(err, "tokenizer.json: an added_tokens entry lacks a valid id or content");
        if (id > mx) mx = id;
    }
    if (mx < 0) return kw_err_set(err, "tokenizer.json: empty vocabulary");
    *n = mx + 1;
    return 0;
}

/* Points tokens[] at the JSON strings (copied into the pool later). */
static int place_tokens(const cJSON *vocab, const cJSON *added, kw_hf_vocab *v, kw_err *err) {
    const cJSON *it;
    int32_t id = 0;
    cJSON_ArrayForEach(it, vocab) {
        json_id(it, &id);
        if (v->tokens[id]) return kw_err_set(err, "tokenizer.json: id %d is used twice in model.vocab", id);
        v->tokens[id] = it->string;
        v->types[id] = KW_HF_TOK_NORMAL;
    }
    cJSON_ArrayForEach(it, added) {
        json_id(obj_get(it, "id"), &id);
        v->tokens[id] = str_get(it, "content");
        v->types[id] = cJSON_IsTrue(obj_get(it, "special")) ? KW_HF_TOK_CONTROL : KW_HF_TOK_USER_DEFINED;
    }
    return 0;
}

/* A merge as its two sides; neither may contain a space (GGUF stores "a b"). */
static int merge_sides(const cJSON *m, int64_t i, const char **a, const char **b, size_t *bytes, kw_err *err) {
    if (cJSON_IsString(m)) {
        const char *sp = strchr(m->valuestring, ' ');
        if (!sp || sp == m->valuestring || !sp[1] || strchr(sp + 1, ' '))
            return kw_err_set(err, "tokenizer.json: merge %lld '%.40s' is not \"a b\"", (long long)i, m->valuestring);
        *a = m->valuestring;
        *b = NULL;
        *bytes = strlen(m->valuestring) + 1;
        return 0;
    }
    const cJSON *x = cJSON_GetArrayItem(m, 0), *y = cJSON_GetArrayItem(m, 1);
    if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) != 2 || !cJSON_IsString(x) || !cJSON_IsString(y) ||
        !*x->valuestring || !*y->valuestring)
        return kw_err_set(err, "tokenizer.json: merge %lld is neither \"a b\" nor [\"a\", \"b\"]", (long long)i);
    if (strchr(x->valuestring, ' ') || strchr(y->valuestring, ' '))
        return kw_err_set(err, "tokenizer.json: merge %lld has a space inside a side (not representable in GGUF)", (long long)i);
    *a = x->valuestring;
    *b = y->valuestring;
    *bytes = strlen(*a) + strlen(*b) + 2;
    return 0;
}

static int copy_strings(const cJSON *merges, kw_hf_vocab *v, kw_err *err) {
    size_t bytes = 0, mb;
    const char *a, *b;
    for (int32_t i = 0; i < v->n_tokens; i++) bytes += v->tokens[i] ? strlen(v->tokens[i]) + 1 : 24;
    int64_t i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        if (merge_sides(m, i++, &a, &b, &mb, err)) return -1;
        bytes += mb;
    }
    v->n_merges = i;
    pool pl = {kw_mem_alloc(KW_MEM_TOKENIZER, bytes + 1), 0, bytes + 1};
    v->merges = kw_mem_calloc(KW_MEM_TOKENIZER, (size_t)(v->n_merges + 1) * sizeof *v->merges);
    v->pool = pl.p;
    if (!pl.p || !v->merges) return kw_err_set(err, "out of memory importing the tokenizer");
    for (int32_t t = 0; t < v->n_tokens; t++) {
        char pad[24];
        if (!v->tokens[t]) { snprintf(pad, sizeof pad, "[PAD%d]", t); v->types[t] = KW_HF_TOK_UNUSED; }
        v->tokens[t] = pool_put(&pl, v->tokens[t] ? v->tokens[t] : pad, NULL);
    }
    i = 0;
    cJSON_ArrayForEach(m, merges) {
        merge_sides(m, i, &a, &b, &mb, err);
        v->merges[i++] = pool_put(&pl, a, b);
    }
    return 0;
}

/* ---- tokenizer_config.json ---- */

/* bos_token / eos_token / pad_token: a string, {"content": ...} or null. */
static int special_id(const kw_hf_vocab *v, const cJSON *cfg, const char *key, int32_t *out, kw_err *err) {
    const cJSON *x = obj_get(cfg, key);
    const char *text = cJSON_IsString(x) ? x->valuestring : str_get(x, "content");
    *out = -1;
    if (!text) return 0;
    for (int32_t i = v->n_tokens - 1; i >= 0; i--)
        if (!strcmp(v->tokens[i], text)) { *out = i; return 0; }
    return kw_err_set(err, "tokenizer_config.json: %s '%.60s' is not in the vocabulary", key, text);
}

/* Does the post-processor put a special token in front of a single text? */
static bool post_adds_bos(const cJSON *pp) {
    const char *type = str_get(pp, "type");
    if (type && !strcmp(type, "Sequence")) {
        const cJSON *p;
        cJSON_ArrayForEach(p, obj_get(pp, "processors")) if (post_adds_bos(p)) return true;
        return false;
    }
    if (!type || strcmp(type, "TemplateProcessing")) return false;
    const cJSON *first = cJSON_GetArrayItem(obj_get(pp, "single"), 0);
    return obj_get(first, "SpecialToken") != NULL;
}

static char *dup_template(const cJSON *cfg) {
    const cJSON *t = obj_get(cfg, "chat_template");
    const char *s = cJSON_IsString(t) ? t->valuestring : NULL;
    if (cJSON_IsArray(t)) { /* [{"name": "default", "template": ...}, ...] */
        const cJSON *e;
        cJSON_ArrayForEach(e, t) {
            const char *name = str_get(e, "name"), *tt = str_get(e, "template");
            if (tt && (!s || (name && !strcmp(name, "default")))) s = tt;
        }
    }
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = kw_mem_alloc(KW_MEM_TOKENIZER, n);
    if (d) memcpy(d, s, n);
    return d;
}

static int read_config(const cJSON *cfg, const cJSON *root, kw_hf_vocab *v, kw_err *err) {
    if (special_id(v, cfg, "bos_token", &v->bos, err) || special_id(v, cfg, "eos_token", &v->eos, err) ||
        special_id(v, cfg, "pad_token", &v->pad, err))
        return -1;
    const cJSON *ab = obj_get(cfg, "add_bos_token");
    v->add_bos = cJSON_IsBool(ab) ? cJSON_IsTrue(ab) : post_adds_bos(obj_get(root, "post_processor"));
    if (obj_get(cfg, "chat_template") && !(v->chat_template = dup_template(cfg)) &&
        (cJSON_IsString(obj_get(cfg, "chat_template")) || cJSON_IsArray(obj_get(cfg, "chat_template"))))
        return kw_err_set(err, "out of memory importing the chat template");
    return 0;
}

/* ---- entry points ---- */

static int parse_tree(const cJSON *root, const cJSON *cfg, kw_hf_vocab *v, kw_err *err) {
    const cJSON *model = obj_get(root, "model");
    if (check_model(root, model, err) || detect_pre(obj_get(root, "pre_tokenizer"), v->pre, sizeof v->pre, err)) return -1;
    const cJSON *vocab = obj_get(model, "vocab"), *added = obj_get(root, "added_tokens");
    if (added && !cJSON_IsArray(added)) return kw_err_set(err, "tokenizer.json: added_tokens is not an array");
    if (max_token_id(vocab, added, &v->n_tokens, err)) return -1;
    v->tokens = kw_mem_calloc(KW_MEM_TOKENIZER, (size_t)v->n_tokens * sizeof *v->tokens);
    v->types = kw_mem_calloc(KW_MEM_TOKENIZER, (size_t)v->n_tokens * sizeof *v->types);
    if (!v->tokens || !v->types) return kw_err_set(err, "out of memory importing the tokenizer");
    if (place_tokens(vocab, added, v, err) || copy_strings(obj_get(model, "merges"), v, err)) return -1;
    return read_config(cfg, root, v, err);
}

int kw_hf_vocab_parse(const char *tokenizer_json, size_t len, const char *config_json, size_t config_len,
                      kw_hf_vocab *v, kw_err *err) {
    memset(v, 0, sizeof *v);
    v->bos = v->eos = v->pad = -1;
    cJSON *root = cJSON_ParseWithLength(tokenizer_json, len);
    cJSON *cfg = config_json ? cJSON_ParseWithLength(config_json, config_len) : NULL;
    int rc;
    if (!cJSON_IsObject(root)) rc = kw_err_set(err, "tokenizer.json: not a JSON object");
    else if (config_json && !cJSON_IsObject(cfg)) rc = kw_err_set(err, "tokenizer_config.json: not a JSON object");
    else rc = parse_tree(root, cfg, v, err);
    cJSON_Delete(root);
    cJSON_Delete(cfg);
    if (rc) kw_hf_vocab_free(v);
    return rc;
}

int kw_hf_vocab_load(const char *dir, kw_hf_vocab *v, kw_err *err) {
    char path[4096];
    size_t len = 0, clen = 0;
    bool missing;
    memset(v, 0, sizeof *v);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    char *tj = read_all(path, &len, &missing, err);
    if (!tj) return -1;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    kw_err cerr = {{0}};
    char *cj = read_all(path, &clen, &missing, &cerr);
    int rc;
    if (!cj && !missing) rc = kw_err_set(err, "%s", cerr.msg);
    else rc = kw_hf_vocab_parse(tj, len, cj, clen, v, err);
    kw_mem_free(tj);
    kw_mem_free(cj);
    return rc;
}

void kw_hf_vocab_write_kvs(const kw_hf_vocab *v, kw_gguf_writer *w) {
    kw_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    kw_gguf_writer_set_str(w, "tokenizer.ggml.pre", v->pre);
    kw_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", v->tokens, (uint64_t)v->n_tokens);
    kw_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", KW_GGUF_INT32, v->types, (uint64_t)v->n_tokens);
    kw_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", v->merges, (uint64_t)v->n_merges);
    if (v->bos >= 0) kw_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos);
    if (v->eos >= 0) kw_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos);
    if (v->pad >= 0) kw_gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)v->pad);
    kw_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos);
    if (v->chat_template) kw_gguf_writer_set_str(w, "tokenizer.chat_template", v->chat_template);
}

void kw_hf_vocab_free(kw_hf_vocab *v) {
    kw_mem_free(v->tokens);
    kw_mem_free(v->types);
    kw_mem_free(v->merges);
    kw_mem_free(v->pool);
    kw_mem_free(v->chat_template);
    memset(v, 0, sizeof *v);
    v->bos = v->eos = v->pad = -1;
}
