/* jsonschema.c - JSON Schema -> grammar IR of the JSON texts valid
 * against it (the subset and its decisions are in docs/GRAMMAR.md).
 *
 * Shape of the output: no whitespace before or after the value; between
 * structural tokens the whitespace of kw_json_schema_opts (bounded by
 * default). Object properties come in the order the schema lists them;
 * optional ones may be left out. Numbers have at most 16 integer and 16
 * fraction digits and a 3-digit exponent, so no number can grow without
 * end. Strings never contain lone surrogate escapes.
 *
 * Every keyword is either applied, ignored as an annotation (title,
 * description, examples, default, $schema, $id, $comment, deprecated,
 * readOnly, writeOnly, discriminator, contentEncoding, contentMediaType),
 * or rejected with an error that names it. */
#include "gram_internal.h"
#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct refent { const cJSON *node; uint32_t rule; } refent;

typedef struct js {
    gram_ir *ir;
    const cJSON *doc;
    kw_json_schema_opts o;
    uint32_t r_string, r_number, r_integer, r_value, r_object, r_array;
    refent *refs; uint32_t n_refs, cap_refs;
    cJSON **tmp; uint32_t n_tmp, cap_tmp;   /* merged schemas (allOf), freed at the end */
    uint32_t depth;
} js;

static uint32_t jerr(js *j, const char *fmt, const char *a) {
    return ir_fail(j->ir, fmt, a);
}

/* ---------- JSON text pieces ---------- */

static uint32_t ws(js *j) {
    gram_ir *ir = j->ir;
    if (j->o.whitespace == KW_JSON_WS_COMPACT) return ir_empty(ir);
    ir_range sp[2] = {{' ', ' '}, {'\t', '\t'}};
    uint32_t nl = ir_seq2(ir, ir_lit_str(ir, "\n"), ir_rep(ir, ir_class(ir, sp, 2, false), 0, 24));
    uint32_t one = ir_alt2(ir, ir_lit_str(ir, " "), nl);
    return ir_rep(ir, one, 0, 1);
}

static uint32_t lit(js *j, const char *s) { return ir_lit_str(j->ir, s); }

/* One character of a JSON string body (any, escapes included). */
static uint32_t json_char(js *j, bool allow_escapes) {
    gram_ir *ir = j->ir;
    ir_range ex[3] = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
    uint32_t plain = ir_class(ir, ex, 3, true);
    if (!allow_escapes) return plain;
    ir_range se[8] = {{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'b', 'b'}, {'f', 'f'}, {'n', 'n'}, {'r', 'r'}, {'t', 't'}};
    ir_range hex[3] = {{'0', '9'}, {'a', 'f'}, {'A', 'F'}};
    /* \uXXXX without surrogates: first digit not d/D, or d/D followed by 0-7 */
    ir_range h1[4] = {{'0', '9'}, {'a', 'c'}, {'A', 'C'}, {'e', 'f'}};
    ir_range h1b[1] = {{'E', 'F'}};
    uint32_t hx = ir_class(ir, hex, 3, false);
    uint32_t first = ir_alt2(ir, ir_class(ir, h1, 4, false), ir_class(ir, h1b, 1, false));
    ir_range dd[2] = {{'d', 'd'}, {'D', 'D'}};
    ir_range lo7[1] = {{'0', '7'}};
    uint32_t u1 = ir_seq2(ir, first, ir_rep(ir, hx, 3, 3));
    uint32_t u2 = ir_seq3(ir, ir_class(ir, dd, 2, false), ir_class(ir, lo7, 1, false), ir_rep(ir, hx, 2, 2));
    uint32_t uesc = ir_seq2(ir, lit(j, "u"), ir_alt2(ir, u1, u2));
    uint32_t esc = ir_seq2(ir, lit(j, "\\"), ir_alt2(ir, ir_class(ir, se, 8, false), uesc));
    return ir_alt2(ir, plain, esc);
}

static uint32_t string_rule(js *j) {
    if (j->r_string != G_NONE) return j->r_string;
    j->r_string = ir_rule_new(j->ir, "string");
    uint32_t e = ir_seq3(j->ir, lit(j, "\""), ir_rep(j->ir, json_char(j, true), 0, G_INF), lit(j, "\""));
    ir_rule_define(j->ir, j->r_string, e);
    return j->r_string;
}

static uint32_t digits(js *j, uint32_t min, uint32_t max) {
    ir_range d = {'0', '9'};
    return ir_rep(j->ir, ir_class(j->ir, &d, 1, false), min, max);
}

/* 0 | [1-9][0-9]{0,15} */
static uint32_t int_part(js *j) {
    ir_range d19 = {'1', '9'};
    return ir_alt2(j->ir, lit(j, "0"), ir_seq2(j->ir, ir_class(j->ir, &d19, 1, false), digits(j, 0, 15)));
}

static uint32_t integer_rule(js *j) {
    if (j->r_integer != G_NONE) return j->r_integer;
    j->r_integer = ir_rule_new(j->ir, "integer");
    ir_rule_define(j->ir, j->r_integer, ir_seq2(j->ir, ir_rep(j->ir, lit(j, "-"), 0, 1), int_part(j)));
    return j->r_integer;
}

static uint32_t number_rule(js *j) {
    if (j->r_number != G_NONE) return j->r_number;
    gram_ir *ir = j->ir;
    j->r_number = ir_rule_new(ir, "number");
    ir_range e[2] = {{'e', 'e'}, {'E', 'E'}}, pm[2] = {{'+', '+'}, {'-', '-'}};
    uint32_t frac = ir_rep(ir, ir_seq2(ir, lit(j, "."), digits(j, 1, 16)), 0, 1);
    uint32_t exp = ir_rep(ir, ir_seq3(ir, ir_class(ir, e, 2, false), ir_rep(ir, ir_class(ir, pm, 2, false), 0, 1), digits(j, 1, 3)), 0, 1);
    uint32_t parts[4] = {ir_rep(ir, lit(j, "-"), 0, 1), int_part(j), frac, exp};
    ir_rule_define(ir, j->r_number, ir_seq(ir, parts, 4));
    return j->r_number;
}

/* value, object and array of any JSON (mutually recursive rules) */
static uint32_t value_rule(js *j) {
    if (j->r_value != G_NONE) return j->r_value;
    gram_ir *ir = j->ir;
    j->r_value = ir_rule_new(ir, "value");
    j->r_object = ir_rule_new(ir, "object");
    j->r_array = ir_rule_new(ir, "array");
    uint32_t alts[7] = {ir_ref(ir, j->r_object), ir_ref(ir, j->r_array), ir_ref(ir, string_rule(j)),
                        ir_ref(ir, number_rule(j)), lit(j, "true"), lit(j, "false"), lit(j, "null")};
    ir_rule_define(ir, j->r_value, ir_alt(ir, alts, 7));
    uint32_t kv = ir_seq(ir, (uint32_t[]){ir_ref(ir, string_rule(j)), ws(j), lit(j, ":"), ws(j), ir_ref(ir, j->r_value)}, 5);
    uint32_t more = ir_rep(ir, ir_seq(ir, (uint32_t[]){ws(j), lit(j, ","), ws(j), kv}, 4), 0, G_INF);
    uint32_t body = ir_rep(ir, ir_seq3(ir, kv, more, ws(j)), 0, 1);
    ir_rule_define(ir, j->r_object, ir_seq(ir, (uint32_t[]){lit(j, "{"), ws(j), body, lit(j, "}")}, 4));
    uint32_t v = ir_ref(ir, j->r_value);
    uint32_t morev = ir_rep(ir, ir_seq(ir, (uint32_t[]){ws(j), lit(j, ","), ws(j), ir_ref(ir, j->r_value)}, 4), 0, G_INF);
    uint32_t abody = ir_rep(ir, ir_seq3(ir, v, morev, ws(j)), 0, 1);
    ir_rule_define(ir, j->r_array, ir_seq(ir, (uint32_t[]){lit(j, "["), ws(j), abody, lit(j, "]")}, 4));
    return j->r_value;
}

/* A JSON value as compact text (enum / const). */
static uint32_t json_literal(js *j, const cJSON *v) {
    char *s = cJSON_PrintUnformatted(v);
    if (!s) return ir_fail(j->ir, "JSON Schema: out of memory");
    uint32_t id = lit(j, s);
    cJSON_free(s);
    return id;
}

/* "name" as JSON text */
static uint32_t json_key(js *j, const char *name) {
    cJSON *s = cJSON_CreateString(name);
    uint32_t id = s ? json_literal(j, s) : ir_fail(j->ir, "JSON Schema: out of memory");
    cJSON_Delete(s);
    return id;
}

/* ---------- integers and number ranges ---------- */

static void u64str(uint64_t v, char *b) { snprintf(b, 24, "%llu", (unsigned long long)v); }

static bool all_of(const char *x, char c, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (x[i] != c) return false;
    return true;
}

/* decimal strings of the same length between x and y (x <= y) */
static uint32_t same_len(js *j, const char *x, const char *y, size_t n) {
    gram_ir *ir = j->ir;
    if (n == 0) return ir_empty(ir);
    if (memcmp(x, y, n) == 0) return ir_lit(ir, x, n);
    if (all_of(x, '0', n) && all_of(y, '9', n)) return digits(j, (uint32_t)n, (uint32_t)n);
    if (x[0] == y[0]) return ir_seq2(ir, ir_lit(ir, x, 1), same_len(j, x + 1, y + 1, n - 1));
    char nines[24], zeros[24];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    uint32_t alts[3], na = 0;
    alts[na++] = ir_seq2(ir, ir_lit(ir, x, 1), same_len(j, x + 1, nines, n - 1));
    if (x[0] + 1 <= y[0] - 1) {
        ir_range r = {(uint32_t)x[0] + 1, (uint32_t)y[0] - 1};
        alts[na++] = ir_seq2(ir, ir_class(ir, &r, 1, false), digits(j, (uint32_t)n - 1, (uint32_t)n - 1));
    }
    alts[na++] = ir_seq2(ir, ir_lit(ir, y, 1), same_len(j, zeros, y + 1, n - 1));
    return ir_alt(ir, alts, na);
}

/* canonical decimal integers in [a, b], 0 <= a <= b */
static uint32_t uint_range(js *j, uint64_t a, uint64_t b) {
    uint32_t alts[20], na = 0;
    uint64_t p = 1;
    for (int len = 1; len <= 19 && a <= b; len++) {
        uint64_t lo_len = len == 1 ? 0 : p, hi_len = p * 10 - 1;
        if (len == 19) hi_len = UINT64_MAX / 2;
        if (b >= lo_len && a <= hi_len) {
            uint64_t lo = a > lo_len ? a : lo_len, hi = b < hi_len ? b : hi_len;
            char x[24], y[24];
            u64str(lo, x);
            u64str(hi, y);
            alts[na++] = same_len(j, x, y, strlen(x));
        }
        p *= 10;
    }
    return ir_alt(j->ir, alts, na);
}

#define JS_BIG 9999999999999999.0   /* 16 digits: the widest integer part generated */

static uint32_t int_range(js *j, double lo, double hi) {
    gram_ir *ir = j->ir;
    uint32_t alts[2], na = 0;
    if (lo < 0) {   /* negatives: "-" then [max(1,-hi), -lo] */
        double a = hi < 0 ? -hi : 1;
        alts[na++] = ir_seq2(ir, lit(j, "-"), uint_range(j, (uint64_t)a, (uint64_t)-lo));
    }
    if (hi >= 0) alts[na++] = uint_range(j, (uint64_t)(lo > 0 ? lo : 0), (uint64_t)hi);
    return ir_alt(ir, alts, na);
}

/* non-negative decimals y with c <= y <= d (strict where the flags say); integer c, d */
static uint32_t unum_range(js *j, uint64_t c, bool cx, uint64_t d, bool dx) {
    gram_ir *ir = j->ir;
    ir_range d19 = {'1', '9'};
    uint32_t opt_frac = ir_rep(ir, ir_seq2(ir, lit(j, "."), digits(j, 1, 16)), 0, 1);
    uint32_t nz_frac = ir_seq3(ir, lit(j, "."), digits(j, 0, 15), ir_class(ir, &d19, 1, false));
    uint32_t zero_frac = ir_rep(ir, ir_seq2(ir, lit(j, "."), ir_rep(ir, lit(j, "0"), 1, 16)), 0, 1);
    uint32_t alts[3], na = 0;
    char b[24];
    if (c == d) {
        if (cx || dx) return ir_fail(ir, "JSON Schema: %s range is empty", "number");
        u64str(c, b);
        return ir_seq2(ir, lit(j, b), zero_frac);
    }
    if (c + 1 <= d - 1) alts[na++] = ir_seq2(ir, uint_range(j, c + 1, d - 1), opt_frac);
    u64str(c, b);
    alts[na++] = ir_seq2(ir, lit(j, b), cx ? nz_frac : opt_frac);
    if (!dx) {
        u64str(d, b);
        alts[na++] = ir_seq2(ir, lit(j, b), zero_frac);
    }
    return ir_alt(ir, alts, na);
}

static bool is_int_value(double v) { return isfinite(v) && floor(v) == v && fabs(v) <= JS_BIG; }

/* Reads minimum/maximum/exclusive* (draft 4 booleans or draft 6+ numbers). 0 or -1. */
static int read_bounds(js *j, const cJSON *s, double *lo, bool *lox, double *hi, bool *hix) {
    *lo = -JS_BIG; *hi = JS_BIG; *lox = *hix = false;
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "minimum");
    const cJSON *mx = cJSON_GetObjectItemCaseSensitive(s, "maximum");
    const cJSON *emn = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum");
    const cJSON *emx = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMaximum");
    if ((mn && !cJSON_IsNumber(mn)) || (mx && !cJSON_IsNumber(mx))) {
        jerr(j, "JSON Schema: %s must be a number", mn && !cJSON_IsNumber(mn) ? "minimum" : "maximum");
        return -1;
    }
    if (mn) *lo = mn->valuedouble;
    if (mx) *hi = mx->valuedouble;
    if (emn) {
        if (cJSON_IsBool(emn)) *lox = cJSON_IsTrue(emn);
        else if (cJSON_IsNumber(emn)) { if (!mn || emn->valuedouble >= *lo) { *lo = emn->valuedouble; *lox = true; } }
        else { jerr(j, "JSON Schema: %s must be a number", "exclusiveMinimum"); return -1; }
    }
    if (emx) {
        if (cJSON_IsBool(emx)) *hix = cJSON_IsTrue(emx);
        else if (cJSON_IsNumber(emx)) { if (!mx || emx->valuedouble <= *hi) { *hi = emx->valuedouble; *hix = true; } }
        else { jerr(j, "JSON Schema: %s must be a number", "exclusiveMaximum"); return -1; }
    }
    return 0;
}

static bool has_bounds(const cJSON *s) {
    return cJSON_GetObjectItemCaseSensitive(s, "minimum") || cJSON_GetObjectItemCaseSensitive(s, "maximum") ||
           cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum") || cJSON_GetObjectItemCaseSensitive(s, "exclusiveMaximum");
}

static uint32_t integer_schema(js *j, const cJSON *s) {
    if (!has_bounds(s)) return ir_ref(j->ir, integer_rule(j));
    double lo, hi;
    bool lox, hix;
    if (read_bounds(j, s, &lo, &lox, &hi, &hix)) return G_NONE;
    lo = lox ? floor(lo) + 1 : ceil(lo);
    hi = hix ? ceil(hi) - 1 : floor(hi);
    if (lo < -JS_BIG) lo = -JS_BIG;
    if (hi > JS_BIG) hi = JS_BIG;
    if (lo > hi) return jerr(j, "JSON Schema: integer %s/maximum range is empty", "minimum");
    return int_range(j, lo, hi);
}

static uint32_t number_schema(js *j, const cJSON *s) {
    if (!has_bounds(s)) return ir_ref(j->ir, number_rule(j));
    double lo, hi;
    bool lox, hix;
    if (read_bounds(j, s, &lo, &lox, &hi, &hix)) return G_NONE;
    if (!is_int_value(lo) || !is_int_value(hi))
        return jerr(j, "JSON Schema: %s/maximum on a number: only integer bounds (up to 16 digits) are supported",
                    "minimum");
    if (lo > hi || (lo == hi && (lox || hix))) return jerr(j, "JSON Schema: number %s/maximum range is empty", "minimum");
    gram_ir *ir = j->ir;
    uint32_t alts[2], na = 0;
    if (lo < 0) {   /* x in [lo, min(hi,0)) as "-" y, y in (max(-hi,0), -lo] */
        uint64_t c = hi < 0 ? (uint64_t)-hi : 0;
        bool cx = hi < 0 ? hix : true;
        uint64_t d = (uint64_t)-lo;
        if (!(c == d && (cx || lox))) alts[na++] = ir_seq2(ir, lit(j, "-"), unum_range(j, c, cx, d, lox));
    }
    if (hi > 0 || (hi == 0 && !hix)) {
        uint64_t c = lo > 0 ? (uint64_t)lo : 0;
        bool cx = lo >= 0 ? lox : false;
        alts[na++] = unum_range(j, c, cx, (uint64_t)hi, hix);
    }
    if (!na) return jerr(j, "JSON Schema: number %s/maximum range is empty", "minimum");
    return ir_alt(ir, alts, na);
}

/* ---------- strings ---------- */

static const char *format_regex(const char *f) {
    static const char *date =
        "[0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))";
    static const char *time = "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
    static char dt[512];
    if (!strcmp(f, "date")) return date;
    if (!strcmp(f, "time")) return time;
    if (!strcmp(f, "date-time")) {
        snprintf(dt, sizeof dt, "%sT%s", date, time);
        return dt;
    }
    if (!strcmp(f, "uuid")) return "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
    if (!strcmp(f, "email"))
        return "[a-zA-Z0-9_+-]{1,32}(\\.[a-zA-Z0-9_+-]{1,32}){0,3}@([a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?\\.){1,3}[a-z]{2,12}";
    if (!strcmp(f, "ipv4")) return "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}";
    if (!strcmp(f, "hostname")) return "[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?){0,4}";
    if (!strcmp(f, "uri"))
        return "https?://[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?){0,4}(/[a-zA-Z0-9._~-]{0,32}){0,8}";
    return NULL;
}

static int get_count(js *j, const cJSON *s, const char *key, uint32_t *out, uint32_t dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
    *out = dflt;
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || floor(v->valuedouble) != v->valuedouble) {
        jerr(j, "JSON Schema: %s must be a non-negative integer", key);
        return -1;
    }
    if (v->valuedouble > j->ir->lim.max_repeat) {
        ir_fail(j->ir, "JSON Schema: %s %.0f is over the limit of %u (max_repeat)", key, v->valuedouble, j->ir->lim.max_repeat);
        return -1;
    }
    *out = (uint32_t)v->valuedouble;
    return 0;
}

static uint32_t string_schema(js *j, const cJSON *s) {
    gram_ir *ir = j->ir;
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(s, "format");
    bool has_len = cJSON_GetObjectItemCaseSensitive(s, "minLength") || cJSON_GetObjectItemCaseSensitive(s, "maxLength");
    if (pat && fmt) return jerr(j, "JSON Schema: %s combined with format is not supported", "pattern");
    if ((pat || fmt) && has_len)
        return jerr(j, "JSON Schema: minLength/maxLength combined with %s is not supported", pat ? "pattern" : "format");
    if (pat) {
        if (!cJSON_IsString(pat)) return jerr(j, "JSON Schema: %s must be a string", "pattern");
        uint32_t body = rx_compile(ir, pat->valuestring, strlen(pat->valuestring), RX_JSON_STRING, RX_DOT_ECMA, true);
        return ir_seq3(ir, lit(j, "\""), body, lit(j, "\""));
    }
    if (fmt) {
        if (!cJSON_IsString(fmt)) return jerr(j, "JSON Schema: %s must be a string", "format");
        const char *re = format_regex(fmt->valuestring);
        if (!re) return jerr(j, "JSON Schema: format '%s' is not supported", fmt->valuestring);
        uint32_t body = rx_compile(ir, re, strlen(re), RX_JSON_STRING, RX_DOT_ECMA, false);
        return ir_seq3(ir, lit(j, "\""), body, lit(j, "\""));
    }
    if (!has_len) return ir_ref(ir, string_rule(j));
    uint32_t mn, mx;
    if (get_count(j, s, "minLength", &mn, 0) || get_count(j, s, "maxLength", &mx, G_INF)) return G_NONE;
    if (mx != G_INF && mn > mx) return jerr(j, "JSON Schema: %s > maxLength", "minLength");
    return ir_seq3(ir, lit(j, "\""), ir_rep(ir, json_char(j, true), mn, mx), lit(j, "\""));
}

/* ---------- keywords ---------- */

static const char *const k_annot[] = {"title", "description", "examples", "default", "$schema", "$id", "$comment",
                                       "deprecated", "readOnly", "writeOnly", "discriminator", "contentEncoding",
                                       "contentMediaType", "$defs", "definitions", "example", NULL};
static const char *const k_known[] = {"type", "properties", "required", "additionalProperties", "enum", "const",
                                      "items", "prefixItems", "minItems", "maxItems", "anyOf", "oneOf", "allOf",
                                      "$ref", "minLength", "maxLength", "pattern", "format", "minimum", "maximum",
                                      "exclusiveMinimum", "exclusiveMaximum", "nullable", "unevaluatedProperties",
                                      "uniqueItems", NULL};

static bool in_list(const char *const *l, const char *k) {
    for (; *l; l++)
        if (!strcmp(*l, k)) return true;
    return false;
}

static bool is_structural(const char *k) { return !in_list(k_annot, k); }

/* Every key must be known or an annotation; a few values are checked here. */
static int check_keywords(js *j, const cJSON *s) {
    for (const cJSON *c = s->child; c; c = c->next) {
        const char *k = c->string;
        if (in_list(k_annot, k)) continue;
        if (!in_list(k_known, k)) {
            jerr(j, "JSON Schema: keyword '%s' is not supported", k);
            return -1;
        }
        if (!strcmp(k, "uniqueItems") && cJSON_IsTrue(c)) {
            jerr(j, "JSON Schema: keyword '%s' (true) is not supported", k);
            return -1;
        }
    }
    return 0;
}

/* ---------- schema -> expression ---------- */

static uint32_t schema(js *j, const cJSON *s);

/* A rule holding expression e (so that big values are shared, not copied). */
static uint32_t as_ref(js *j, uint32_t e, const char *hint) {
    if (e == G_NONE) return G_NONE;
    if (j->ir->nodes[e].kind == IR_REF || j->ir->nodes[e].kind == IR_LIT) return e;
    uint32_t r = ir_rule_new(j->ir, hint);
    if (r == G_NONE || ir_rule_define(j->ir, r, e)) return G_NONE;
    return ir_ref(j->ir, r);
}

static const cJSON *resolve_pointer(js *j, const char *ref) {
    if (ref[0] != '#') {
        jerr(j, "JSON Schema: $ref '%s': only local references (#...) are supported", ref);
        return NULL;
    }
    const cJSON *cur = j->doc;
    const char *p = ref + 1;
    if (*p && *p != '/') {
        jerr(j, "JSON Schema: $ref '%s': anchors are not supported", ref);
        return NULL;
    }
    char tok[256];
    while (*p == '/') {
        p++;
        size_t n = 0;
        while (*p && *p != '/') {
            char ch = *p++;
            if (ch == '~' && (*p == '0' || *p == '1')) ch = *p++ == '0' ? '~' : '/';
            else if (ch == '%' && isxdigit((unsigned char)p[0]) && isxdigit((unsigned char)p[1])) {
                char hx[3] = {p[0], p[1], 0};
                ch = (char)strtol(hx, NULL, 16);
                p += 2;
            }
            if (n + 1 >= sizeof tok) { jerr(j, "JSON Schema: $ref '%s' is too long", ref); return NULL; }
            tok[n++] = ch;
        }
        tok[n] = 0;
        if (cJSON_IsArray(cur)) {
            char *end;
            long idx = strtol(tok, &end, 10);
            cur = (*end || idx < 0) ? NULL : cJSON_GetArrayItem(cur, (int)idx);
        } else if (cJSON_IsObject(cur)) {
            cur = cJSON_GetObjectItemCaseSensitive(cur, tok);
        } else cur = NULL;
        if (!cur) { jerr(j, "JSON Schema: $ref '%s' does not resolve", ref); return NULL; }
    }
    return cur;
}

static uint32_t ref_schema(js *j, const cJSON *s) {
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    if (!cJSON_IsString(ref)) return jerr(j, "JSON Schema: %s must be a string", "$ref");
    for (const cJSON *c = s->child; c; c = c->next)
        if (strcmp(c->string, "$ref") && is_structural(c->string))
            return jerr(j, "JSON Schema: '$ref' combined with '%s' is not supported", c->string);
    const cJSON *t = resolve_pointer(j, ref->valuestring);
    if (!t) return G_NONE;
    for (uint32_t i = 0; i < j->n_refs; i++)
        if (j->refs[i].node == t) return ir_ref(j->ir, j->refs[i].rule);
    uint32_t r = ir_rule_new(j->ir, "ref");
    if (r == G_NONE) return G_NONE;
    if (G_PUSH(j->refs, j->n_refs, j->cap_refs, ((refent){t, r}))) return ir_fail(j->ir, "JSON Schema: out of memory");
    uint32_t e = schema(j, t);
    if (e == G_NONE || ir_rule_define(j->ir, r, e)) return G_NONE;
    return ir_ref(j->ir, r);
}

/* Key text of an additional property: a plain string (no escapes) that is
   none of the declared names. names[] sorted by code points. */
static uint32_t key_except(js *j, char **names, uint32_t n, size_t depth) {
    gram_ir *ir = j->ir;
    /* names all share their first `depth` bytes */
    uint32_t *alts = kw_mem_alloc(KW_MEM_OTHER, ((size_t)n + 3) * sizeof *alts);
    ir_range *ex = kw_mem_alloc(KW_MEM_OTHER, ((size_t)n + 3) * sizeof *ex);
    if (!alts || !ex) { kw_mem_free(alts); kw_mem_free(ex); return ir_fail(ir, "JSON Schema: out of memory"); }
    uint32_t na = 0, ne = 0;
    bool terminal = false;
    ex[ne++] = (ir_range){0, 0x1F};
    ex[ne++] = (ir_range){'"', '"'};
    ex[ne++] = (ir_range){'\\', '\\'};
    uint32_t i = 0;
    while (i < n) {
        const char *s = names[i] + depth;
        if (!*s) { terminal = true; i++; continue; }
        uint32_t cp;
        int len = g_utf8_decode((const uint8_t *)s, strlen(s), &cp);
        if (!len) { kw_mem_free(alts); kw_mem_free(ex); return ir_fail(ir, "JSON Schema: property name is not valid UTF-8"); }
        uint32_t k = i;
        while (k < n && strncmp(names[k] + depth, s, (size_t)len) == 0) k++;
        ex[ne++] = (ir_range){cp, cp};
        alts[na++] = ir_seq2(ir, ir_lit(ir, s, (size_t)len), key_except(j, names + i, k - i, depth + (size_t)len));
        i = k;
    }
    uint32_t plain = json_char(j, false);
    alts[na++] = ir_seq2(ir, ir_class(ir, ex, ne, true), ir_rep(ir, plain, 0, G_INF));
    if (!terminal) alts[na++] = ir_empty(ir);
    uint32_t id = ir_alt(ir, alts, na);
    kw_mem_free(alts);
    kw_mem_free(ex);
    return id;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

typedef struct prop { const char *name; const cJSON *schema; bool req; } prop;

static uint32_t object_schema(js *j, const cJSON *s) {
    gram_ir *ir = j->ir;
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *ap = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    const cJSON *uep = cJSON_GetObjectItemCaseSensitive(s, "unevaluatedProperties");
    if (props && !cJSON_IsObject(props)) return jerr(j, "JSON Schema: %s must be an object", "properties");
    if (req && !cJSON_IsArray(req)) return jerr(j, "JSON Schema: %s must be an array", "required");
    if (uep && !cJSON_IsFalse(uep)) return jerr(j, "JSON Schema: %s other than false is not supported", "unevaluatedProperties");
    if (ap && !cJSON_IsBool(ap) && !cJSON_IsObject(ap))
        return jerr(j, "JSON Schema: %s must be a boolean or a schema", "additionalProperties");
    /* additional properties allowed? (see docs/GRAMMAR.md for the default) */
    const cJSON *ap_schema = NULL;
    bool ap_on;
    if (uep && !ap) ap_on = false;
    else if (!ap) ap_on = !j->o.strict && !props && !req;
    else if (cJSON_IsBool(ap)) ap_on = cJSON_IsTrue(ap);
    else { ap_on = true; ap_schema = ap; }
    uint32_t np = 0, cap = 0;
    prop *pl = NULL;
    uint32_t res = G_NONE;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next)
        if (G_PUSH(pl, np, cap, ((prop){p->string, p, false}))) goto oom;
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
        if (!cJSON_IsString(r)) { res = jerr(j, "JSON Schema: %s entries must be strings", "required"); goto out; }
        uint32_t k;
        for (k = 0; k < np && strcmp(pl[k].name, r->valuestring); k++) {}
        if (k == np) {
            if (!ap_on) { res = jerr(j, "JSON Schema: required property '%s' is not allowed (additionalProperties is false)", r->valuestring); goto out; }
            if (G_PUSH(pl, np, cap, ((prop){r->valuestring, ap_schema, true}))) goto oom;
        } else pl[k].req = true;
    }
    /* extra key/value pairs */
    uint32_t extra = G_NONE;
    if (ap_on) {
        char **names = kw_mem_alloc(KW_MEM_OTHER, ((size_t)np + 1) * sizeof *names);
        if (!names) goto oom;
        for (uint32_t i = 0; i < np; i++) names[i] = (char *)pl[i].name;
        if (np > 1) qsort(names, np, sizeof *names, cmp_str);
        uint32_t key = ir_seq3(ir, lit(j, "\""), key_except(j, names, np, 0), lit(j, "\""));
        kw_mem_free(names);
        uint32_t val = ap_schema ? as_ref(j, schema(j, ap_schema), "extra") : ir_ref(ir, value_rule(j));
        extra = as_ref(j, ir_seq(ir, (uint32_t[]){key, ws(j), lit(j, ":"), ws(j), val}, 5), "extra-kv");
    }
    /* SOME[i]: the rest after at least one pair; NONE[i]: nothing written yet */
    uint32_t *some = kw_mem_alloc(KW_MEM_OTHER, ((size_t)np + 1) * sizeof *some);
    uint32_t *none = kw_mem_alloc(KW_MEM_OTHER, ((size_t)np + 1) * sizeof *none);
    if (!some || !none) { kw_mem_free(some); kw_mem_free(none); goto oom; }
    uint32_t comma = ir_seq3(ir, ws(j), lit(j, ","), ws(j));
    some[np] = extra == G_NONE ? ir_empty(ir) : ir_rep(ir, ir_seq2(ir, comma, extra), 0, G_INF);
    none[np] = extra == G_NONE ? ir_empty(ir)
                               : ir_rep(ir, ir_seq2(ir, extra, ir_rep(ir, ir_seq2(ir, comma, extra), 0, G_INF)), 0, 1);
    for (uint32_t i = np; i-- > 0;) {
        if (++j->depth > ir->lim.max_depth) { kw_mem_free(some); kw_mem_free(none); res = ir_fail(ir, "JSON Schema: nested deeper than %u levels (limit max_depth)", ir->lim.max_depth); goto out; }
        uint32_t val = pl[i].schema ? as_ref(j, schema(j, pl[i].schema), "prop") : ir_ref(ir, value_rule(j));
        j->depth--;
        uint32_t kv = ir_seq(ir, (uint32_t[]){json_key(j, pl[i].name), ws(j), lit(j, ":"), ws(j), val}, 5);
        uint32_t next_some = as_ref(j, some[i + 1], "obj-rest");
        uint32_t g = ir_seq2(ir, comma, kv);
        some[i] = ir_seq2(ir, pl[i].req ? g : ir_rep(ir, g, 0, 1), next_some);
        uint32_t first = ir_seq2(ir, kv, next_some);
        none[i] = pl[i].req ? first : ir_alt2(ir, first, as_ref(j, none[i + 1], "obj-opt"));
    }
    res = ir_seq(ir, (uint32_t[]){lit(j, "{"), ws(j), none[0], ws(j), lit(j, "}")}, 5);
    kw_mem_free(some);
    kw_mem_free(none);
out:
    kw_mem_free(pl);
    return res;
oom:
    kw_mem_free(pl);
    return ir_fail(ir, "JSON Schema: out of memory");
}

static uint32_t array_schema(js *j, const cJSON *s) {
    gram_ir *ir = j->ir;
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
    if (cJSON_IsArray(items)) {   /* draft 4-7 tuple form */
        if (prefix) return jerr(j, "JSON Schema: %s as an array together with prefixItems", "items");
        prefix = items;
        items = NULL;
    }
    if (prefix && !cJSON_IsArray(prefix)) return jerr(j, "JSON Schema: %s must be an array", "prefixItems");
    if (items && !cJSON_IsObject(items) && !cJSON_IsBool(items)) return jerr(j, "JSON Schema: %s must be a schema", "items");
    uint32_t mn, mx;
    if (get_count(j, s, "minItems", &mn, 0) || get_count(j, s, "maxItems", &mx, G_INF)) return G_NONE;
    uint32_t k = prefix ? (uint32_t)cJSON_GetArraySize(prefix) : 0;
    bool more = !cJSON_IsFalse(items);
    if (!more && (mx == G_INF || mx > k)) mx = k;
    if (mx != G_INF && mn > mx) return jerr(j, "JSON Schema: %s > maxItems (or beyond the prefixItems)", "minItems");
    uint32_t comma = ir_seq3(ir, ws(j), lit(j, ","), ws(j));
    uint32_t item = G_NONE;
    if (more && (mx == G_INF || mx > k))
        item = (items && cJSON_IsObject(items)) ? as_ref(j, schema(j, items), "item") : ir_ref(ir, value_rule(j));
    if (k > ir->lim.max_rules) return jerr(j, "JSON Schema: %s too long", "prefixItems");
    /* rest(i): what may follow once i elements are written */
    uint32_t tail = ir_empty(ir);
    if (item != G_NONE) {
        uint32_t lo = mn > k ? mn - k : 0, hi = mx == G_INF ? G_INF : mx - k;
        if (k == 0) {   /* the first element has no comma */
            uint32_t rest = ir_rep(ir, ir_seq2(ir, comma, item), lo > 0 ? lo - 1 : 0, hi == G_INF ? G_INF : hi - 1);
            uint32_t body = ir_seq2(ir, item, rest);
            uint32_t all = lo == 0 ? ir_rep(ir, body, 0, 1) : body;
            return ir_seq(ir, (uint32_t[]){lit(j, "["), ws(j), all, ws(j), lit(j, "]")}, 5);
        }
        tail = ir_rep(ir, ir_seq2(ir, comma, item), lo, hi);
    }
    uint32_t rest = tail;
    for (uint32_t i = k; i-- > 0;) {
        if (++j->depth > ir->lim.max_depth) return ir_fail(ir, "JSON Schema: nested deeper than %u levels (limit max_depth)", ir->lim.max_depth);
        uint32_t pi = as_ref(j, schema(j, cJSON_GetArrayItem(prefix, (int)i)), "prefix");
        j->depth--;
        if (mx != G_INF && i >= mx) continue;
        uint32_t el = ir_seq2(ir, pi, rest);
        if (i == 0) rest = mn >= 1 ? el : ir_rep(ir, el, 0, 1);
        else {
            uint32_t g = ir_seq2(ir, comma, el);
            rest = as_ref(j, i < mn ? g : ir_rep(ir, g, 0, 1), "tuple");
        }
    }
    if (k == 0) rest = ir_empty(ir);
    return ir_seq(ir, (uint32_t[]){lit(j, "["), ws(j), rest, ws(j), lit(j, "]")}, 5);
}

static bool type_ok(const char *t, const cJSON *v) {
    if (!strcmp(t, "string")) return cJSON_IsString(v);
    if (!strcmp(t, "number")) return cJSON_IsNumber(v);
    if (!strcmp(t, "integer")) return cJSON_IsNumber(v) && floor(v->valuedouble) == v->valuedouble;
    if (!strcmp(t, "boolean")) return cJSON_IsBool(v);
    if (!strcmp(t, "null")) return cJSON_IsNull(v);
    if (!strcmp(t, "object")) return cJSON_IsObject(v);
    if (!strcmp(t, "array")) return cJSON_IsArray(v);
    return false;
}

static bool types_allow(const cJSON *type, const cJSON *v) {
    if (!type) return true;
    if (cJSON_IsString(type)) return type_ok(type->valuestring, v);
    for (const cJSON *t = type->child; t; t = t->next)
        if (cJSON_IsString(t) && type_ok(t->valuestring, v)) return true;
    return false;
}

static uint32_t enum_schema(js *j, const cJSON *s, const cJSON *en) {
    if (!cJSON_IsArray(en)) return jerr(j, "JSON Schema: %s must be an array", "enum");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    uint32_t n = 0, cap = 0, *alts = NULL;
    for (const cJSON *v = en->child; v; v = v->next) {
        if (n >= j->ir->lim.max_enum_values) {
            kw_mem_free(alts);
            return ir_fail(j->ir, "JSON Schema: enum with more than %u values (limit max_enum_values)", j->ir->lim.max_enum_values);
        }
        if (!types_allow(type, v)) continue;
        uint32_t l = json_literal(j, v);
        if (l == G_NONE || G_PUSH(alts, n, cap, l)) { kw_mem_free(alts); return ir_fail(j->ir, "JSON Schema: out of memory"); }
    }
    if (!n) { kw_mem_free(alts); return jerr(j, "JSON Schema: %s has no value of the schema's type", "enum"); }
    uint32_t id = ir_alt(j->ir, alts, n);
    kw_mem_free(alts);
    return id;
}

/* allOf: every part must describe an object; properties and required are merged */
static uint32_t allof_schema(js *j, const cJSON *s, const cJSON *all) {
    if (!cJSON_IsArray(all) || !all->child) return jerr(j, "JSON Schema: %s must be a non-empty array", "allOf");
    bool siblings = false;
    for (const cJSON *c = s->child; c; c = c->next)
        if (strcmp(c->string, "allOf") && is_structural(c->string)) siblings = true;
    if (!siblings && !all->child->next) return schema(j, all->child);
    cJSON *m = cJSON_CreateObject();
    cJSON *mp = cJSON_CreateObject(), *mr = cJSON_CreateArray();
    if (!m || !mp || !mr || G_PUSH(j->tmp, j->n_tmp, j->cap_tmp, m)) {
        cJSON_Delete(m); cJSON_Delete(mp); cJSON_Delete(mr);
        return ir_fail(j->ir, "JSON Schema: out of memory");
    }
    cJSON_AddItemToObject(m, "type", cJSON_CreateString("object"));
    cJSON_AddItemToObject(m, "properties", mp);
    cJSON_AddItemToObject(m, "required", mr);
    bool closed = false;
    const cJSON *parts[64];
    uint32_t n = 0;
    if (siblings) parts[n++] = s;
    for (const cJSON *c = all->child; c && n < 64; c = c->next) parts[n++] = c;
    for (uint32_t i = 0; i < n; i++) {
        const cJSON *p = parts[i];
        for (int hop = 0; cJSON_IsObject(p) && cJSON_GetObjectItemCaseSensitive(p, "$ref") && hop < 16; hop++) {
            p = resolve_pointer(j, cJSON_GetObjectItemCaseSensitive(p, "$ref")->valuestring);
            if (!p) return G_NONE;
        }
        if (!cJSON_IsObject(p)) return jerr(j, "JSON Schema: %s parts must be schemas", "allOf");
        for (const cJSON *c = p->child; c; c = c->next) {
            const char *k = c->string;
            if (!is_structural(k) || (p == s && !strcmp(k, "allOf"))) continue;
            if (!strcmp(k, "type") && cJSON_IsString(c) && !strcmp(c->valuestring, "object")) continue;
            if (!strcmp(k, "properties") && cJSON_IsObject(c)) {
                for (const cJSON *q = c->child; q; q = q->next) {
                    if (cJSON_GetObjectItemCaseSensitive(mp, q->string))
                        return jerr(j, "JSON Schema: allOf parts both define property '%s' (not supported)", q->string);
                    cJSON_AddItemReferenceToObject(mp, q->string, (cJSON *)q);
                }
            } else if (!strcmp(k, "required") && cJSON_IsArray(c)) {
                for (const cJSON *q = c->child; q; q = q->next)
                    if (cJSON_IsString(q)) cJSON_AddItemToArray(mr, cJSON_CreateString(q->valuestring));
            } else if (!strcmp(k, "additionalProperties") && cJSON_IsFalse(c)) {
                closed = true;
            } else {
                return jerr(j, "JSON Schema: allOf with '%s' in a part (only object properties/required merge)", k);
            }
        }
    }
    if (closed) {
        /* each closed part must declare every merged property, or its validation would fail */
        for (uint32_t i = 0; i < n; i++) {
            const cJSON *p = parts[i];
            while (cJSON_IsObject(p) && cJSON_GetObjectItemCaseSensitive(p, "$ref"))
                p = resolve_pointer(j, cJSON_GetObjectItemCaseSensitive(p, "$ref")->valuestring);
            if (!p || !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(p, "additionalProperties"))) continue;
            const cJSON *pp = cJSON_GetObjectItemCaseSensitive(p, "properties");
            for (const cJSON *q = mp->child; q; q = q->next)
                if (!pp || !cJSON_GetObjectItemCaseSensitive(pp, q->string))
                    return jerr(j, "JSON Schema: allOf: a part with additionalProperties false lacks property '%s'", q->string);
        }
    }
    cJSON_AddItemToObject(m, "additionalProperties", cJSON_CreateFalse());
    return schema(j, m);
}

static uint32_t type_branch(js *j, const cJSON *s, const char *t) {
    if (!strcmp(t, "string")) return string_schema(j, s);
    if (!strcmp(t, "integer")) return integer_schema(j, s);
    if (!strcmp(t, "number")) return number_schema(j, s);
    if (!strcmp(t, "boolean")) return ir_alt2(j->ir, lit(j, "true"), lit(j, "false"));
    if (!strcmp(t, "null")) return lit(j, "null");
    if (!strcmp(t, "object")) return object_schema(j, s);
    if (!strcmp(t, "array")) return array_schema(j, s);
    return jerr(j, "JSON Schema: unknown type '%s'", t);
}

static bool has_any(const cJSON *s, const char *const *keys) {
    for (; *keys; keys++)
        if (cJSON_GetObjectItemCaseSensitive(s, *keys)) return true;
    return false;
}

static uint32_t schema_body(js *j, const cJSON *s) {
    gram_ir *ir = j->ir;
    if (cJSON_IsTrue(s)) return ir_ref(ir, value_rule(j));
    if (cJSON_IsFalse(s)) return jerr(j, "JSON Schema: the schema %s accepts nothing", "false");
    if (!cJSON_IsObject(s)) return jerr(j, "JSON Schema: a schema must be an object or a boolean%s", "");
    if (check_keywords(j, s)) return G_NONE;
    const cJSON *v;
    if ((v = cJSON_GetObjectItemCaseSensitive(s, "$ref"))) return ref_schema(j, s);
    if ((v = cJSON_GetObjectItemCaseSensitive(s, "const"))) return json_literal(j, v);
    if ((v = cJSON_GetObjectItemCaseSensitive(s, "enum"))) return enum_schema(j, s, v);
    if ((v = cJSON_GetObjectItemCaseSensitive(s, "allOf"))) return allof_schema(j, s, v);
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    if (!any) any = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
    if (any) {
        if (cJSON_GetObjectItemCaseSensitive(s, "anyOf") && cJSON_GetObjectItemCaseSensitive(s, "oneOf"))
            return jerr(j, "JSON Schema: %s together with oneOf is not supported", "anyOf");
        for (const cJSON *c = s->child; c; c = c->next)
            if (strcmp(c->string, "anyOf") && strcmp(c->string, "oneOf") && is_structural(c->string))
                return jerr(j, "JSON Schema: anyOf/oneOf combined with '%s' is not supported", c->string);
        if (!cJSON_IsArray(any) || !any->child) return jerr(j, "JSON Schema: %s must be a non-empty array", any->string);
        uint32_t n = 0, cap = 0, *alts = NULL;
        for (const cJSON *c = any->child; c; c = c->next) {
            uint32_t e = schema(j, c);
            if (e == G_NONE || G_PUSH(alts, n, cap, e)) { kw_mem_free(alts); return G_NONE; }
        }
        uint32_t id = ir_alt(ir, alts, n);
        kw_mem_free(alts);
        return id;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (!type) {
        static const char *const objk[] = {"properties", "required", "additionalProperties", "unevaluatedProperties", NULL};
        static const char *const arrk[] = {"items", "prefixItems", "minItems", "maxItems", NULL};
        static const char *const strk[] = {"minLength", "maxLength", "pattern", "format", NULL};
        static const char *const numk[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
        if (has_any(s, objk)) return object_schema(j, s);
        if (has_any(s, arrk)) return array_schema(j, s);
        if (has_any(s, strk)) return string_schema(j, s);
        if (has_any(s, numk)) return number_schema(j, s);
        return ir_ref(ir, value_rule(j));
    }
    if (cJSON_IsString(type)) return type_branch(j, s, type->valuestring);
    if (!cJSON_IsArray(type) || !type->child) return jerr(j, "JSON Schema: %s must be a string or an array", "type");
    uint32_t alts[8], n = 0;
    for (const cJSON *t = type->child; t && n < 8; t = t->next) {
        if (!cJSON_IsString(t)) return jerr(j, "JSON Schema: %s entries must be strings", "type");
        uint32_t e = type_branch(j, s, t->valuestring);
        if (e == G_NONE) return G_NONE;
        alts[n++] = e;
    }
    return ir_alt(ir, alts, n);
}

static uint32_t schema(js *j, const cJSON *s) {
    if (j->ir->failed) return G_NONE;
    if (++j->depth > j->ir->lim.max_depth)
        return ir_fail(j->ir, "JSON Schema: nested deeper than %u levels (limit max_depth)", j->ir->lim.max_depth);
    uint32_t e = schema_body(j, s);
    const cJSON *nl = cJSON_IsObject(s) ? cJSON_GetObjectItemCaseSensitive(s, "nullable") : NULL;
    if (e != G_NONE && cJSON_IsTrue(nl)) e = ir_alt2(j->ir, e, lit(j, "null"));
    j->depth--;
    return e;
}

static kw_grammar *compile_doc(const cJSON *doc, const kw_json_schema_opts *opts, const kw_grammar_limits *lim,
                               kw_err *err, bool any_object) {
    kw_err dummy;
    if (!err) err = &dummy;
    gram_ir ir;
    ir_init(&ir, lim, err);
    js j;
    memset(&j, 0, sizeof j);
    j.ir = &ir;
    j.doc = doc;
    if (opts) j.o = *opts;
    j.r_string = j.r_number = j.r_integer = j.r_value = j.r_object = j.r_array = G_NONE;
    uint32_t root = ir_rule_get(&ir, "root", 4);
    uint32_t e;
    if (any_object) {
        value_rule(&j);
        e = ir_ref(&ir, j.r_object);
    } else e = schema(&j, doc);
    if (e != G_NONE) ir_rule_define(&ir, root, e);
    ir.root = root;
    for (uint32_t i = 0; i < j.n_tmp; i++) cJSON_Delete(j.tmp[i]);
    kw_mem_free(j.tmp);
    kw_mem_free(j.refs);
    return ir_compile_free(&ir);
}

kw_grammar *kw_grammar_from_json_schema_cjson(const void *schema_doc, const kw_json_schema_opts *opts,
                                              const kw_grammar_limits *lim, kw_err *err) {
    return compile_doc(schema_doc, opts, lim, err, false);
}

kw_grammar *kw_grammar_from_json_schema(const char *text, size_t len, const kw_json_schema_opts *opts,
                                        const kw_grammar_limits *lim, kw_err *err) {
    kw_grammar_limits dl;
    if (!lim) { kw_grammar_limits_default(&dl); lim = &dl; }
    if (len > lim->max_source_bytes) {
        kw_err_set(err, "JSON Schema: %zu bytes is over the limit of %u (max_source_bytes)", len, lim->max_source_bytes);
        return NULL;
    }
    cJSON *doc = cJSON_ParseWithLength(text, len);
    if (!doc) {
        kw_err_set(err, "JSON Schema: not valid JSON");
        return NULL;
    }
    kw_grammar *g = compile_doc(doc, opts, lim, err, false);
    cJSON_Delete(doc);
    return g;
}

/* One call object: {"name": "NAME", "KEY": ARGS} with the whitespace of
 * the options between its tokens; ARGS under the tool's parameters schema
 * (compiled with that schema as the document its $refs resolve in), any
 * object when it has none. */
static uint32_t call_object(js *j, const kw_grammar_tool *t, const char *key) {
    gram_ir *ir = j->ir;
    uint32_t args;
    j->doc = t->parameters;
    j->o.strict = t->strict;
    if (!t->parameters || cJSON_IsNull((const cJSON *)t->parameters)) {
        value_rule(j);
        args = ir_ref(ir, j->r_object);
    } else {
        args = as_ref(j, schema(j, t->parameters), "arguments");
    }
    if (args == G_NONE) return G_NONE;
    uint32_t kids[13] = {lit(j, "{"), ws(j), json_key(j, "name"), ws(j), lit(j, ":"), ws(j), json_key(j, t->name),
                         ws(j), lit(j, ","), ws(j), json_key(j, key), ws(j), lit(j, ":")};
    uint32_t head = ir_seq(ir, kids, 13);
    return ir_seq(ir, (uint32_t[]){head, ws(j), args, ws(j), lit(j, "}")}, 5);
}

/* Text that never contains one of the ASCII patterns pats, when no first
 * character of a pattern occurs at a later position of any pattern (a
 * partial match can then only restart at a first character). Regular:
 * (N | Seg* Exit)* Seg*, N a character that starts no pattern, Seg a first
 * character and what may follow it short of a whole pattern (a proper
 * prefix), Exit a Seg then a character that neither continues it nor starts
 * a pattern. bare: the text also may not start with '{' or whitespace (a
 * bare-JSON call parser would take it for a call): empty, or N minus those
 * then any text, or a text that starts with a pattern's first character
 * (Seg* Exit (N | Seg* Exit)* Seg*, or Seg+). */
#define TEXT_EXCL_MAX 8
#define TEXT_EXCL_LEN 32
static uint32_t text_without(js *j, const char *const *pats, uint32_t n, bool bare) {
    gram_ir *ir = j->ir;
    char first[TEXT_EXCL_MAX];
    if (n == 0 || n > TEXT_EXCL_MAX) return ir_fail(ir, "tool call grammar: 1 to %d excluded tags", TEXT_EXCL_MAX);
    for (uint32_t i = 0; i < n; i++) {
        size_t len = strlen(pats[i]);
        if (len < 2 || len > TEXT_EXCL_LEN) return ir_fail(ir, "tool call grammar: tag '%s' is not 2-%d bytes", pats[i], TEXT_EXCL_LEN);
        first[i] = pats[i][0];
    }
    for (uint32_t i = 0; i < n; i++)
        for (size_t k = 1; pats[i][k]; k++)
            if ((unsigned char)pats[i][k] >= 0x80 || memchr(first, pats[i][k], n))
                return ir_fail(ir, "tool call grammar: tag '%s' repeats a first character", pats[i]);
    ir_range fr[TEXT_EXCL_MAX];
    for (uint32_t i = 0; i < n; i++) fr[i] = (ir_range){(unsigned char)first[i], (unsigned char)first[i]};
    uint32_t segs = G_NONE, exits = G_NONE;
    for (uint32_t i = 0; i < n; i++) {
        for (size_t len = 1; pats[i][len]; len++) {          /* the node pats[i][0..len) */
            bool dup = false, whole = false;
            for (uint32_t k = 0; k < n; k++) {
                size_t lk = strlen(pats[k]);
                if (k < i && lk > len && !memcmp(pats[k], pats[i], len)) dup = true;   /* a node of pattern k too */
                if (lk <= len && !memcmp(pats[k], pats[i], lk)) whole = true;          /* holds pattern k */
            }
            if (dup || whole) continue;
            ir_range ex[TEXT_EXCL_MAX * 2];
            uint32_t ne = 0;
            for (uint32_t k = 0; k < n; k++) ex[ne++] = fr[k];
            for (uint32_t k = 0; k < n; k++)
                if (strlen(pats[k]) > len && !memcmp(pats[k], pats[i], len))
                    ex[ne++] = (ir_range){(unsigned char)pats[k][len], (unsigned char)pats[k][len]};
            uint32_t node = ir_lit(ir, pats[i], len);
            uint32_t ex_node = ir_seq2(ir, ir_lit(ir, pats[i], len), ir_class(ir, ex, ne, true));
            segs = segs == G_NONE ? node : ir_alt2(ir, segs, node);
            exits = exits == G_NONE ? ex_node : ir_alt2(ir, exits, ex_node);
        }
    }
    if (ir->failed || segs == G_NONE) return ir_fail(ir, "tool call grammar: no tag to exclude");
    uint32_t seg = segs, ext = exits;
    uint32_t item = ir_alt2(ir, ir_class(ir, fr, n, true), ir_seq2(ir, ir_rep(ir, seg, 0, G_INF), ext));
    uint32_t text = as_ref(j, ir_seq2(ir, ir_rep(ir, item, 0, G_INF), ir_rep(ir, seg, 0, G_INF)), "text");
    if (!bare) return text;
    ir_range nb[TEXT_EXCL_MAX + 5] = {{'{', '{'}, {' ', ' '}, {'\t', '\t'}, {'\n', '\n'}, {'\r', '\r'}};
    for (uint32_t i = 0; i < n; i++) nb[5 + i] = fr[i];
    uint32_t plain = ir_seq2(ir, ir_class(ir, nb, 5 + n, true), text);
    uint32_t tagged = ir_seq3(ir, ir_rep(ir, seg, 0, G_INF), ext, text);
    uint32_t partial = ir_rep(ir, seg, 1, G_INF);
    return ir_alt(ir, (uint32_t[]){ir_empty(ir), plain, tagged, partial}, 4);
}

/* tool_choice auto: the text (text_without the tags), then up to
 * max_calls calls, whitespace between calls and after the last; bare: the
 * call alone, or text that cannot be read as one. No whitespace rule
 * between the text and the first call: the text holds its own, and a text
 * that may end before every blank would make the index record a suffix for
 * every token with a blank in it. */
static uint32_t auto_output(js *j, uint32_t call, const kw_grammar_call_format *f) {
    gram_ir *ir = j->ir;
    uint32_t text = text_without(j, f->text_excl, f->n_text_excl, f->bare);
    if (text == G_NONE) return G_NONE;
    if (f->bare) return ir_alt2(ir, call, text);
    uint32_t more = f->max_calls == 1 ? ir_empty(ir)
                    : ir_rep(ir, ir_seq2(ir, ws(j), call), 0, f->max_calls ? f->max_calls - 1 : G_INF);
    uint32_t calls = ir_seq3(ir, call, more, ws(j));
    return ir_seq2(ir, text, ir_rep(ir, calls, 0, 1));
}

kw_grammar *kw_grammar_tool_call(const kw_grammar_tool *tools, uint32_t n_tools, const kw_grammar_call_format *f,
                                 const kw_json_schema_opts *opts, const kw_grammar_limits *lim, kw_err *err) {
    kw_err dummy;
    if (!err) err = &dummy;
    if (!tools || !n_tools || !f) { kw_err_set(err, "tool call grammar: no tools"); return NULL; }
    if (f->args_only && n_tools != 1) { kw_err_set(err, "tool call grammar: arguments alone need exactly one tool"); return NULL; }
    gram_ir ir;
    ir_init(&ir, lim, err);
    js j;
    memset(&j, 0, sizeof j);
    j.ir = &ir;
    if (opts) j.o = *opts;
    j.r_string = j.r_number = j.r_integer = j.r_value = j.r_object = j.r_array = G_NONE;
    uint32_t root = ir_rule_get(&ir, "root", 4);
    uint32_t e = G_NONE;
    if (f->args_only) {
        j.doc = tools[0].parameters;
        j.o.strict = tools[0].strict;
        if (!tools[0].parameters || cJSON_IsNull((const cJSON *)tools[0].parameters)) {
            value_rule(&j);
            e = ir_ref(&ir, j.r_object);
        } else e = schema(&j, tools[0].parameters);
    } else {
        uint32_t calls = G_NONE;
        for (uint32_t i = 0; i < n_tools && !ir.failed; i++) {
            if (!tools[i].name || !tools[i].name[0]) { ir_fail(&ir, "tool call grammar: a tool has no name"); break; }
            uint32_t c = as_ref(&j, call_object(&j, &tools[i], f->args_key ? f->args_key : "arguments"), "call");
            calls = calls == G_NONE ? c : ir_alt2(&ir, calls, c);
        }
        if (!ir.failed && calls != G_NONE)
            e = ir_seq3(&ir, lit(&j, f->open ? f->open : ""), calls, lit(&j, f->close ? f->close : ""));
        if (e != G_NONE && !ir.failed && f->auto_text) e = auto_output(&j, as_ref(&j, e, "tool_call"), f);
    }
    if (e != G_NONE && !ir.failed) ir_rule_define(&ir, root, e);
    ir.root = root;
    for (uint32_t i = 0; i < j.n_tmp; i++) cJSON_Delete(j.tmp[i]);
    kw_mem_free(j.tmp);
    kw_mem_free(j.refs);
    return ir_compile_free(&ir);
}

kw_grammar *kw_grammar_json_object(const kw_json_schema_opts *opts, kw_err *err) {
    return compile_doc(NULL, opts, NULL, err, true);
}
