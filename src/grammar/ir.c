/* ir.c - the grammar IR every front-end builds: rules of expressions
 * (literal bytes, code point classes, sequences, alternatives, bounded or
 * unbounded repetition, rule references), the limits kw_grammar_limits
 * puts on their size, accounted growable buffers, the node lists and
 * digit readers the front-ends share, and UTF-8 helpers.
 *
 * Builders never fail silently: the first error is written to ir->err and
 * every later builder returns G_NONE, so a front-end can build a whole
 * expression and check once. */
#include "gram_internal.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void kw_grammar_limits_default(kw_grammar_limits *l) {
    l->max_source_bytes = 1u << 20;
    l->max_depth = 64;
    l->max_ir_nodes = 400000;
    l->max_rules = 20000;
    l->max_nfa_states = 200000;
    l->max_dfa_states = 200000;
    l->max_compile_steps = 100000000ull;
    l->max_enum_values = 10000;
    l->max_repeat = 1000000;
    l->max_index_steps = 400000000ull;
    l->max_index_bytes = 512ull << 20;
    l->max_stack_depth = 2048;
    l->max_heads = 2048;
}

int g_reserve(void **p, uint32_t *cap, uint64_t need, size_t elem) {
    if (need <= *cap) return 0;
    uint64_t nc = *cap ? (uint64_t)*cap * 2 : 16;
    while (nc < need) nc *= 2;
    if (nc > 0xFFFFFFF0u) {
        if (need > 0xFFFFFFF0u) return -1;
        nc = 0xFFFFFFF0u;
    }
    void *q = kw_mem_alloc(KW_MEM_OTHER, (size_t)nc * elem);
    if (!q) return -1;
    if (*p) {
        memcpy(q, *p, (size_t)*cap * elem);
        kw_mem_free(*p);
    }
    *p = q;
    *cap = (uint32_t)nc;
    return 0;
}

void ir_init(gram_ir *ir, const kw_grammar_limits *lim, kw_err *err) {
    memset(ir, 0, sizeof *ir);
    if (lim) ir->lim = *lim;
    else kw_grammar_limits_default(&ir->lim);
    ir->err = err;
    ir->root = G_NONE;
}

void ir_free(gram_ir *ir) {
    kw_mem_free(ir->nodes);
    kw_mem_free(ir->kids);
    kw_mem_free(ir->ranges);
    kw_mem_free(ir->bytes);
    kw_mem_free(ir->names);
    kw_mem_free(ir->rules);
    memset(ir, 0, sizeof *ir);
}

int ir_init_source(gram_ir *ir, const kw_grammar_limits *lim, kw_err *err, size_t len, const char *who) {
    ir_init(ir, lim, err);
    if (len <= ir->lim.max_source_bytes) return 0;
    kw_err_set(err, "%s: grammar of %zu bytes is over the limit of %u (max_source_bytes)", who, len,
               ir->lim.max_source_bytes);
    ir_free(ir);
    return -1;
}

void ir_check_rules(gram_ir *ir, const char *who, const char *kind, const char *root) {
    for (uint32_t r = 0; r < ir->n_rules && !ir->failed; r++)
        if (ir->rules[r].expr == G_NONE) ir_fail(ir, "%s: %s'%s' is used but never defined", who, kind, ir_rule_name(ir, r));
    if (ir->failed) return;
    uint32_t found = G_NONE;
    for (uint32_t r = 0; r < ir->n_rules; r++)
        if (strcmp(ir_rule_name(ir, r), root) == 0) found = r;
    if (found == G_NONE) ir_fail(ir, "%s: no '%s' rule", who, root);
    ir->root = found;
}

kw_grammar *ir_compile_free(gram_ir *ir) {
    kw_grammar *g = ir->failed ? NULL : gram_compile(ir, ir->err);
    ir_free(ir);
    return g;
}

uint32_t ir_fail(gram_ir *ir, const char *fmt, ...) {
    if (!ir->failed && ir->err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ir->err->msg, sizeof ir->err->msg, fmt, ap);
        va_end(ap);
    }
    ir->failed = 1;
    return G_NONE;
}

static uint32_t oom(gram_ir *ir) { return ir_fail(ir, "grammar: out of memory"); }

static uint32_t new_node(gram_ir *ir, uint8_t kind, uint32_t a, uint32_t n) {
    if (ir->failed) return G_NONE;
    if (ir->n_nodes >= ir->lim.max_ir_nodes)
        return ir_fail(ir, "grammar too large: more than %u IR nodes (limit max_ir_nodes)", ir->lim.max_ir_nodes);
    ir_node nd = {kind, a, n, 0, 0};
    if (G_PUSH(ir->nodes, ir->n_nodes, ir->cap_nodes, nd)) return oom(ir);
    return ir->n_nodes - 1;
}

uint32_t ir_empty(gram_ir *ir) { return new_node(ir, IR_EMPTY, 0, 0); }

uint32_t ir_lit(gram_ir *ir, const void *bytes, size_t n) {
    if (ir->failed) return G_NONE;
    if (n == 0) return ir_empty(ir);
    if (n > ir->lim.max_source_bytes || (uint64_t)ir->n_bytes + n > 16u * ir->lim.max_source_bytes)
        return ir_fail(ir, "grammar too large: literal text over the limit (max_source_bytes)");
    if (g_reserve((void **)&ir->bytes, &ir->cap_bytes, (uint64_t)ir->n_bytes + n, 1)) return oom(ir);
    memcpy(ir->bytes + ir->n_bytes, bytes, n);
    uint32_t id = new_node(ir, IR_LIT, ir->n_bytes, (uint32_t)n);
    if (id != G_NONE) ir->n_bytes += (uint32_t)n;
    return id;
}

uint32_t ir_lit_str(gram_ir *ir, const char *s) { return ir_lit(ir, s, strlen(s)); }

static int cmp_range(const void *a, const void *b) {
    const ir_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

uint32_t ir_class(gram_ir *ir, const ir_range *r, uint32_t n, bool negate) {
    if (ir->failed) return G_NONE;
    /* normalise: sorted, merged, surrogates removed, clipped to Unicode */
    ir_range *tmp = kw_mem_alloc(KW_MEM_OTHER, (size_t)(n + 2) * 2 * sizeof *tmp);
    if (!tmp) return oom(ir);
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t lo = r[i].lo, hi = r[i].hi > 0x10FFFF ? 0x10FFFF : r[i].hi;
        if (lo > hi) continue;
        tmp[m++] = (ir_range){lo, hi};
    }
    if (m > 1) qsort(tmp, m, sizeof *tmp, cmp_range);
    uint32_t k = 0;
    for (uint32_t i = 0; i < m; i++) {
        if (k && tmp[i].lo <= tmp[k - 1].hi + 1) {
            if (tmp[i].hi > tmp[k - 1].hi) tmp[k - 1].hi = tmp[i].hi;
        } else tmp[k++] = tmp[i];
    }
    if (negate) {
        ir_range *neg = tmp + n + 2;   /* second half of the buffer */
        uint32_t nn = 0, next = 0;
        for (uint32_t i = 0; i < k; i++) {
            if (tmp[i].lo > next) neg[nn++] = (ir_range){next, tmp[i].lo - 1};
            next = tmp[i].hi + 1;
        }
        if (next <= 0x10FFFF) neg[nn++] = (ir_range){next, 0x10FFFF};
        memmove(tmp, neg, nn * sizeof *tmp);
        k = nn;
    }
    /* cut out the surrogates D800-DFFF */
    ir_range *out = kw_mem_alloc(KW_MEM_OTHER, (size_t)(k * 2 + 1) * sizeof *out);
    if (!out) {
        kw_mem_free(tmp);
        return oom(ir);
    }
    uint32_t o = 0;
    for (uint32_t i = 0; i < k; i++) {
        uint32_t lo = tmp[i].lo, hi = tmp[i].hi;
        if (hi < 0xD800 || lo > 0xDFFF) out[o++] = tmp[i];
        else {
            if (lo < 0xD800) out[o++] = (ir_range){lo, 0xD7FF};
            if (hi > 0xDFFF) out[o++] = (ir_range){0xE000, hi};
        }
    }
    kw_mem_free(tmp);
    if (g_reserve((void **)&ir->ranges, &ir->cap_ranges, (uint64_t)ir->n_ranges + o + 1, sizeof(ir_range))) {
        kw_mem_free(out);
        return oom(ir);
    }
    g_copy(ir->ranges + ir->n_ranges, out, o * sizeof *out);
    kw_mem_free(out);
    uint32_t id = new_node(ir, IR_CLASS, ir->n_ranges, o);
    if (id != G_NONE) ir->n_ranges += o;
    return id;
}

uint32_t ir_char(gram_ir *ir, uint32_t cp) {
    uint8_t b[4];
    int n = g_utf8_encode(cp, b);
    if (!n) return ir_fail(ir, "grammar: invalid code point U+%04X", cp);
    return ir_lit(ir, b, (size_t)n);
}

static uint32_t list_node(gram_ir *ir, uint8_t kind, const uint32_t *kids, uint32_t n) {
    if (ir->failed) return G_NONE;
    for (uint32_t i = 0; i < n; i++)
        if (kids[i] == G_NONE) return ir_fail(ir, "grammar: internal error (missing node)");
    if (n == 0) return kind == IR_SEQ ? ir_empty(ir) : ir_fail(ir, "grammar: empty alternative list");
    if (n == 1) return kids[0];
    if (g_reserve((void **)&ir->kids, &ir->cap_kids, (uint64_t)ir->n_kids + n, sizeof(uint32_t))) return oom(ir);
    memcpy(ir->kids + ir->n_kids, kids, n * sizeof *kids);
    uint32_t id = new_node(ir, kind, ir->n_kids, n);
    if (id != G_NONE) ir->n_kids += n;
    return id;
}

uint32_t ir_seq(gram_ir *ir, const uint32_t *kids, uint32_t n) { return list_node(ir, IR_SEQ, kids, n); }
uint32_t ir_alt(gram_ir *ir, const uint32_t *kids, uint32_t n) { return list_node(ir, IR_ALT, kids, n); }

int ir_list_push(gram_ir *ir, ir_list *l, uint32_t id, const char *who) {
    if (id != G_NONE && !G_PUSH(l->v, l->n, l->cap, id)) return 0;
    if (id != G_NONE) ir_fail(ir, "%s: out of memory", who);
    ir_list_drop(l, G_NONE);
    return -1;
}

uint32_t ir_list_seq(gram_ir *ir, ir_list *l) { return ir_list_drop(l, ir_seq(ir, l->v, l->n)); }
uint32_t ir_list_alt(gram_ir *ir, ir_list *l) { return ir_list_drop(l, ir_alt(ir, l->v, l->n)); }

uint32_t ir_list_drop(ir_list *l, uint32_t res) {
    kw_mem_free(l->v);
    *l = (ir_list){0};
    return res;
}

uint32_t ir_seq2(gram_ir *ir, uint32_t a, uint32_t b) {
    uint32_t k[2] = {a, b};
    return ir_seq(ir, k, 2);
}
uint32_t ir_seq3(gram_ir *ir, uint32_t a, uint32_t b, uint32_t c) {
    uint32_t k[3] = {a, b, c};
    return ir_seq(ir, k, 3);
}
uint32_t ir_alt2(gram_ir *ir, uint32_t a, uint32_t b) {
    uint32_t k[2] = {a, b};
    return ir_alt(ir, k, 2);
}

uint32_t ir_rep(gram_ir *ir, uint32_t kid, uint32_t min, uint32_t max) {
    if (ir->failed || kid == G_NONE) return ir_fail(ir, "grammar: internal error (missing node)");
    if (max != G_INF && min > max) return ir_fail(ir, "grammar: repetition {%u,%u} has min > max", min, max);
    if (min > ir->lim.max_repeat || (max != G_INF && max > ir->lim.max_repeat))
        return ir_fail(ir, "grammar: repetition bound over %u (limit max_repeat)", ir->lim.max_repeat);
    if (min == 1 && max == 1) return kid;
    if (max == 0) return ir_empty(ir);
    uint32_t id = new_node(ir, IR_REP, kid, 0);
    if (id != G_NONE) {
        ir->nodes[id].min = min;
        ir->nodes[id].max = max;
    }
    return id;
}

uint32_t ir_ref(gram_ir *ir, uint32_t rule) {
    if (rule == G_NONE) return ir_fail(ir, "grammar: internal error (missing rule)");
    return new_node(ir, IR_REF, rule, 0);
}

static uint32_t add_name(gram_ir *ir, const char *s, size_t len) {
    if (g_reserve((void **)&ir->names, &ir->cap_names, (uint64_t)ir->n_names + len + 1, 1)) return G_NONE;
    uint32_t off = ir->n_names;
    memcpy(ir->names + off, s, len);
    ir->names[off + len] = 0;
    ir->n_names += (uint32_t)len + 1;
    return off;
}

static uint32_t new_rule(gram_ir *ir, const char *name, size_t len) {
    if (ir->failed) return G_NONE;
    if (ir->n_rules >= ir->lim.max_rules)
        return ir_fail(ir, "grammar too large: more than %u rules (limit max_rules)", ir->lim.max_rules);
    uint32_t off = add_name(ir, name, len);
    if (off == G_NONE) return oom(ir);
    ir_rule r = {off, G_NONE, 0, 0, G_NONE, 0};
    if (G_PUSH(ir->rules, ir->n_rules, ir->cap_rules, r)) return oom(ir);
    return ir->n_rules - 1;
}

uint32_t ir_rule_get(gram_ir *ir, const char *name, size_t len) {
    if (ir->failed) return G_NONE;
    /* linear search is fine for hand-written grammars; front-ends that make
       many rules use ir_rule_new and keep the ids */
    for (uint32_t i = 0; i < ir->n_rules; i++) {
        const char *nm = ir->names + ir->rules[i].name;
        if (strlen(nm) == len && memcmp(nm, name, len) == 0) return i;
    }
    return new_rule(ir, name, len);
}

uint32_t ir_rule_new(gram_ir *ir, const char *hint) {
    char buf[96];
    snprintf(buf, sizeof buf, "%.60s-%u", hint, ir->n_rules);
    return new_rule(ir, buf, strlen(buf));
}

int ir_rule_define(gram_ir *ir, uint32_t rule, uint32_t expr) {
    if (ir->failed || rule == G_NONE || expr == G_NONE) {
        ir_fail(ir, "grammar: internal error (undefined rule)");
        return -1;
    }
    ir->rules[rule].expr = expr;
    return 0;
}

const char *ir_rule_name(const gram_ir *ir, uint32_t rule) { return ir->names + ir->rules[rule].name; }

int g_utf8_encode(uint32_t cp, uint8_t *o) {
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp <= 0x10FFFF) {
        o[0] = (uint8_t)(0xF0 | (cp >> 18));
        o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
        o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[3] = (uint8_t)(0x80 | (cp & 0x3F));
        return 4;
    }
    return 0;
}

int g_hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int g_hex_digits(const char **p, const char *end, int n, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < n; i++) {
        int h = *p < end ? g_hex_digit(**p) : -1;
        if (h < 0) return -1;
        *v = *v * 16 + (uint32_t)h;
        (*p)++;
    }
    return 0;
}

bool g_parse_count(const char **p, const char *end, uint32_t *out) {
    if (*p >= end || **p < '0' || **p > '9') return false;
    uint64_t v = 0;
    while (*p < end && **p >= '0' && **p <= '9') {
        v = v * 10 + (uint64_t)(*(*p)++ - '0');
        if (v > 0xFFFFFFF) v = 0xFFFFFFF;
    }
    *out = (uint32_t)v;
    return true;
}

int g_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    uint8_t c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int len;
    uint32_t v, min;
    if ((c & 0xE0) == 0xC0) { len = 2; v = c & 0x1F; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { len = 3; v = c & 0x0F; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { len = 4; v = c & 0x07; min = 0x10000; }
    else return 0;
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

bool g_utf8_next(const char **p, const char *end, uint32_t *cp) {
    int n = g_utf8_decode((const uint8_t *)*p, (size_t)(end - *p), cp);
    *p += n;
    return n > 0;
}
