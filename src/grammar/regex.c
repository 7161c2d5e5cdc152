/* regex.c - a regex subset -> grammar IR (for JSON Schema "pattern", for
 * Responses' {type:"grammar", syntax:"regex"} and for Lark terminals).
 *
 * Supported: literals (UTF-8), '.', classes [...] / [^...] with ranges and
 * escapes, \d \D \w \W \s \S, \n \r \t \f \v \0 \xHH \x{H..} \uHHHH \u{H..},
 * escaped punctuation, groups (...) (?:...) (?<name>...) (?P<name>...),
 * alternation, quantifiers * + ? {n} {n,} {n,m} (lazy/possessive suffixes
 * mean the same language). '^' at the start and '$' at the end of a
 * top-level alternative. Everything else (lookaround, backreferences,
 * \b, \p{...}, inline flags, anchors elsewhere) is an error naming it.
 *
 * RX_JSON_STRING mode compiles to the text of a JSON string body: a
 * character that JSON must escape (", \, control characters) is emitted
 * in one canonical escaped form. */
#include "gram_internal.h"
#include <stdio.h>

typedef struct rp {
    gram_ir *ir;
    const char *s, *p, *end;
    int mode, dot;
    uint32_t depth;
    bool search;          /* unanchored sides allow any text around the match */
} rp;

static uint32_t rerr(rp *q, const char *what) {
    return ir_fail(q->ir, "regex: %s at offset %d", what, (int)(q->p - q->s));
}

/* ranges helper */
typedef struct rset { ir_range *r; uint32_t n, cap; } rset;
static int rs_add(rset *s, uint32_t lo, uint32_t hi) { return G_PUSH(s->r, s->n, s->cap, ((ir_range){lo, hi})); }

static int add_named_class(rset *s, char k) {
    switch (k) {
    case 'd': return rs_add(s, '0', '9');
    case 'w': return rs_add(s, '0', '9') || rs_add(s, 'A', 'Z') || rs_add(s, 'a', 'z') || rs_add(s, '_', '_');
    case 's': {
        static const uint32_t sp[][2] = {{9, 13}, {32, 32}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                                         {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
                                         {0xFEFF, 0xFEFF}};
        for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++)
            if (rs_add(s, sp[i][0], sp[i][1])) return -1;
        return 0;
    }
    }
    return -1;
}

/* complement of a range set within Unicode */
static int rs_negate(rset *s) {
    uint32_t n = s->n;
    ir_range *r = s->r;
    /* sort + merge (insertion sort: sets are small) */
    for (uint32_t i = 1; i < n; i++)
        for (uint32_t j = i; j > 0 && r[j - 1].lo > r[j].lo; j--) { ir_range t = r[j]; r[j] = r[j - 1]; r[j - 1] = t; }
    rset o = {0};
    uint32_t next = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (r[i].lo > next && rs_add(&o, next, r[i].lo - 1)) return -1;
        if (r[i].hi + 1 > next) next = r[i].hi + 1;
    }
    if (next <= 0x10FFFF && rs_add(&o, next, 0x10FFFF)) return -1;
    kw_mem_free(s->r);
    *s = o;
    return 0;
}

/* An IR expression for the code point set, in the parser's mode. */
static uint32_t emit_set(rp *q, rset *s) {
    if (q->mode == RX_RAW) return ir_class(q->ir, s->r, s->n, false);
    /* JSON string body: plain chars as a class, the rest as their escapes */
    static const char *esc[32] = {"\\u0000", "\\u0001", "\\u0002", "\\u0003", "\\u0004", "\\u0005", "\\u0006",
                                  "\\u0007", "\\b", "\\t", "\\n", "\\u000b", "\\f", "\\r", "\\u000e", "\\u000f",
                                  "\\u0010", "\\u0011", "\\u0012", "\\u0013", "\\u0014", "\\u0015", "\\u0016",
                                  "\\u0017", "\\u0018", "\\u0019", "\\u001a", "\\u001b", "\\u001c", "\\u001d",
                                  "\\u001e", "\\u001f"};
    uint32_t parts[40], np = 0;
    rset plain = {0};
    bool special[34] = {0};
    for (uint32_t i = 0; i < s->n; i++) {
        uint32_t lo = s->r[i].lo, hi = s->r[i].hi;
        for (uint32_t c = lo; c <= hi && c < 0x20; c++) special[c] = true;
        if (lo <= '"' && hi >= '"') special[32] = true;
        if (lo <= '\\' && hi >= '\\') special[33] = true;
        /* the plain part: [lo,hi] minus 0-1F, '"', '\' */
        uint32_t a = lo < 0x20 ? 0x20 : lo;
        uint32_t cuts[3] = {'"', '\\', 0x110000};
        for (int k = 0; k < 3 && a <= hi; k++) {
            uint32_t b = cuts[k] - 1 < hi ? cuts[k] - 1 : hi;
            if (a <= b && rs_add(&plain, a, b)) { kw_mem_free(plain.r); return ir_fail(q->ir, "regex: out of memory"); }
            if (cuts[k] + 1 > a) a = cuts[k] + 1;
        }
    }
    if (plain.n) parts[np++] = ir_class(q->ir, plain.r, plain.n, false);
    kw_mem_free(plain.r);
    for (int c = 0; c < 32; c++)
        if (special[c]) parts[np++] = ir_lit_str(q->ir, esc[c]);
    if (special[32]) parts[np++] = ir_lit_str(q->ir, "\\\"");
    if (special[33]) parts[np++] = ir_lit_str(q->ir, "\\\\");
    if (!np) return ir_class(q->ir, NULL, 0, false);   /* matches nothing */
    return ir_alt(q->ir, parts, np);
}

static uint32_t emit_cp(rp *q, uint32_t cp) {
    rset s = {0};
    if (rs_add(&s, cp, cp)) return ir_fail(q->ir, "regex: out of memory");
    uint32_t id;
    if (q->mode == RX_RAW || (cp >= 0x20 && cp != '"' && cp != '\\')) id = ir_char(q->ir, cp);
    else id = emit_set(q, &s);
    kw_mem_free(s.r);
    return id;
}

static int dot_set(rset *s, int dot) {
    if (dot == RX_DOT_ALL) return rs_negate(s);
    if (dot == RX_DOT_PYTHON) return rs_add(s, '\n', '\n') || rs_negate(s);
    return rs_add(s, '\n', '\n') || rs_add(s, '\r', '\r') || rs_add(s, 0x2028, 0x2029) || rs_negate(s);
}

uint32_t rx_any_char(gram_ir *ir, int mode, bool dot_like, int dot) {
    rp q = {ir, "", "", "", mode, dot, 0, false};
    rset s = {0};
    int rc = dot_like ? dot_set(&s, dot) : rs_negate(&s);
    uint32_t id = rc ? ir_fail(ir, "regex: out of memory") : emit_set(&q, &s);
    kw_mem_free(s.r);
    return id;
}

/* The code point at q->p, stepped past; -2 (recorded) when it is not valid UTF-8. */
static int64_t next_cp(rp *q) {
    uint32_t cp;
    if (!g_utf8_next(&q->p, q->end, &cp)) { rerr(q, "invalid UTF-8"); return -2; }
    return cp;
}

/* Parses an escape after '\' (q->p at the escaped char). in_class: \b is a
   backspace there. Adds to set (a class escape) or returns a code point. */
static int64_t parse_escape(rp *q, rset *set, bool in_class) {
    if (q->p >= q->end) { rerr(q, "trailing backslash"); return -2; }
    char c = *q->p++;
    switch (c) {
    case 'd': case 'w': case 's':
        if (add_named_class(set, c)) { ir_fail(q->ir, "regex: out of memory"); return -2; }
        return -1;
    case 'D': case 'W': case 'S': {
        rset t = {0};
        if (add_named_class(&t, (char)(c + 32)) || rs_negate(&t)) { kw_mem_free(t.r); ir_fail(q->ir, "regex: out of memory"); return -2; }
        for (uint32_t i = 0; i < t.n; i++)
            if (rs_add(set, t.r[i].lo, t.r[i].hi)) { kw_mem_free(t.r); return -2; }
        kw_mem_free(t.r);
        return -1;
    }
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case 'f': return '\f';
    case 'v': return '\v';
    case '0': return 0;
    case 'b':
        if (in_class) return 8;
        rerr(q, "word boundary \\b is not supported");
        return -2;
    case 'B': rerr(q, "\\B is not supported"); return -2;
    case 'p': case 'P': rerr(q, "Unicode property classes \\p{...} are not supported"); return -2;
    case 'k': rerr(q, "named backreferences \\k<...> are not supported"); return -2;
    case 'x': case 'u': {
        uint32_t v = 0;
        int want = c == 'x' ? 2 : 4;
        if (q->p < q->end && *q->p == '{') {
            q->p++;
            int n = 0;
            while (q->p < q->end && *q->p != '}') {
                int h = g_hex_digit(*q->p);
                if (h < 0 || ++n > 6) { rerr(q, "bad \\x{...}/\\u{...} escape"); return -2; }
                v = v * 16 + (uint32_t)h;
                q->p++;
            }
            if (q->p >= q->end || n == 0) { rerr(q, "unterminated \\x{...}/\\u{...} escape"); return -2; }
            q->p++;
        } else if (g_hex_digits(&q->p, q->end, want, &v)) {
            rerr(q, "bad hex escape");
            return -2;
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) { rerr(q, "escape is not a Unicode scalar value"); return -2; }
        return v;
    }
    default:
        if (c >= '1' && c <= '9') { rerr(q, "backreferences are not supported"); return -2; }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) { rerr(q, "unknown escape"); return -2; }
        if ((unsigned char)c >= 0x80) { q->p--; return next_cp(q); }
        return (uint8_t)c;
    }
}


static uint32_t parse_class(rp *q) {
    q->p++;   /* '[' */
    bool neg = false;
    if (q->p < q->end && *q->p == '^') { neg = true; q->p++; }
    rset s = {0};
    bool first = true;
    while (q->p < q->end && (*q->p != ']' || first)) {
        first = false;
        int64_t lo;
        if (*q->p == '\\') { q->p++; lo = parse_escape(q, &s, true); }
        else if (*q->p == '[' && q->p + 1 < q->end && q->p[1] == ':') { kw_mem_free(s.r); return rerr(q, "POSIX classes [:name:] are not supported"); }
        else lo = next_cp(q);
        if (lo == -2) { kw_mem_free(s.r); return G_NONE; }
        if (lo == -1) continue;   /* a class escape was added */
        int64_t hi = lo;
        if (q->p + 1 < q->end && *q->p == '-' && q->p[1] != ']') {
            q->p++;
            if (*q->p == '\\') {
                q->p++;
                rset dummy = {0};
                hi = parse_escape(q, &dummy, true);
                kw_mem_free(dummy.r);
                if (hi == -1) { kw_mem_free(s.r); return rerr(q, "a class escape cannot end a range"); }
            } else hi = next_cp(q);
            if (hi == -2) { kw_mem_free(s.r); return G_NONE; }
            if (hi < lo) { kw_mem_free(s.r); return rerr(q, "class range out of order"); }
        }
        if (rs_add(&s, (uint32_t)lo, (uint32_t)hi)) { kw_mem_free(s.r); return ir_fail(q->ir, "regex: out of memory"); }
    }
    if (q->p >= q->end) { kw_mem_free(s.r); return rerr(q, "unterminated character class"); }
    q->p++;
    if (neg && rs_negate(&s)) { kw_mem_free(s.r); return ir_fail(q->ir, "regex: out of memory"); }
    uint32_t id = emit_set(q, &s);
    kw_mem_free(s.r);
    return id;
}

static uint32_t parse_alt(rp *q, bool top);

static uint32_t parse_quant(rp *q, uint32_t atom) {
    while (q->p < q->end && atom != G_NONE) {
        char c = *q->p;
        uint32_t min, max;
        if (c == '*') { min = 0; max = G_INF; q->p++; }
        else if (c == '+') { min = 1; max = G_INF; q->p++; }
        else if (c == '?') { min = 0; max = 1; q->p++; }
        else if (c == '{') {
            const char *save = q->p;
            q->p++;
            if (!g_parse_count(&q->p, q->end, &min)) { q->p = save; return atom; }   /* a literal '{' */
            max = min;
            if (q->p < q->end && *q->p == ',') {
                q->p++;
                if (!g_parse_count(&q->p, q->end, &max)) max = G_INF;
            }
            if (q->p >= q->end || *q->p != '}') return rerr(q, "bad {m,n} quantifier");
            q->p++;
        } else return atom;
        if (q->p < q->end && (*q->p == '?' || *q->p == '+')) q->p++;   /* lazy / possessive: same language */
        atom = ir_rep(q->ir, atom, min, max);
    }
    return atom;
}

static uint32_t parse_seq(rp *q, bool top, bool *anch_s, bool *anch_e) {
    ir_list items = {0};
    if (top && q->p < q->end && *q->p == '^') { q->p++; *anch_s = true; }
    while (q->p < q->end && *q->p != '|' && *q->p != ')') {
        char c = *q->p;
        uint32_t atom;
        if (c == '(') {
            q->p++;
            if (q->p < q->end && *q->p == '?') {
                q->p++;
                if (q->p < q->end && *q->p == ':') q->p++;
                else if (q->p < q->end && (*q->p == '<' || *q->p == 'P') &&
                         !(q->p + 1 < q->end && *q->p == '<' && (q->p[1] == '=' || q->p[1] == '!'))) {
                    if (*q->p == 'P') q->p++;
                    if (q->p >= q->end || *q->p != '<') return ir_list_drop(&items, rerr(q, "bad group"));
                    while (q->p < q->end && *q->p != '>') q->p++;
                    if (q->p >= q->end) return ir_list_drop(&items, rerr(q, "unterminated group name"));
                    q->p++;
                } else if (q->p < q->end && (*q->p == '=' || *q->p == '!' || *q->p == '<')) {
                    return ir_list_drop(&items, rerr(q, "lookaround (?=...) (?!...) (?<=...) is not supported"));
                } else {
                    return ir_list_drop(&items, rerr(q, "inline flags / special groups (?...) are not supported"));
                }
            }
            if (++q->depth > q->ir->lim.max_depth) return ir_list_drop(&items, rerr(q, "groups nested too deeply (limit max_depth)"));
            atom = parse_alt(q, false);
            q->depth--;
            if (atom == G_NONE) return ir_list_drop(&items, G_NONE);
            if (q->p >= q->end || *q->p != ')') return ir_list_drop(&items, rerr(q, "missing ')'"));
            q->p++;
        } else if (c == '[') atom = parse_class(q);
        else if (c == '.') {
            q->p++;
            rset s = {0};
            atom = dot_set(&s, q->dot) ? ir_fail(q->ir, "regex: out of memory") : emit_set(q, &s);
            kw_mem_free(s.r);
        } else if (c == '\\') {
            q->p++;
            rset s = {0};
            int64_t cp = parse_escape(q, &s, false);
            if (cp == -2) atom = G_NONE;
            else if (cp == -1) atom = emit_set(q, &s);
            else atom = emit_cp(q, (uint32_t)cp);
            kw_mem_free(s.r);
        } else if (c == '$') {
            q->p++;
            if (top && (q->p >= q->end || *q->p == '|')) { *anch_e = true; break; }
            return ir_list_drop(&items, rerr(q, "'$' is only supported at the end of the pattern"));
        } else if (c == '^') {
            return ir_list_drop(&items, rerr(q, "'^' is only supported at the start of the pattern"));
        } else if (c == '*' || c == '+' || c == '?') {
            return ir_list_drop(&items, rerr(q, "quantifier without an operand"));
        } else {
            int64_t cp = next_cp(q);
            atom = cp < 0 ? G_NONE : emit_cp(q, (uint32_t)cp);
        }
        if (ir_list_push(q->ir, &items, parse_quant(q, atom), "regex")) return G_NONE;
    }
    return ir_list_seq(q->ir, &items);
}

static uint32_t parse_alt(rp *q, bool top) {
    ir_list alts = {0};
    for (;;) {
        bool as = false, ae = false;
        uint32_t s = parse_seq(q, top, &as, &ae);
        if (s == G_NONE) return ir_list_drop(&alts, G_NONE);
        if (top && q->search) {
            uint32_t any = G_NONE;
            if (!as || !ae) any = ir_rep(q->ir, rx_any_char(q->ir, q->mode, false, q->dot), 0, G_INF);
            if (!as) s = ir_seq2(q->ir, any, s);
            if (!ae) s = ir_seq2(q->ir, s, any);
        }
        if (ir_list_push(q->ir, &alts, s, "regex")) return G_NONE;
        if (q->p < q->end && *q->p == '|') { q->p++; continue; }
        break;
    }
    return ir_list_alt(q->ir, &alts);
}

uint32_t rx_compile(gram_ir *ir, const char *re, size_t len, int mode, int dot, bool search) {
    rp q = {ir, re, re, re + len, mode, dot, 0, search};
    if (len > ir->lim.max_source_bytes) return ir_fail(ir, "regex: pattern over the limit of %u bytes", ir->lim.max_source_bytes);
    uint32_t id = parse_alt(&q, true);
    if (id != G_NONE && q.p < q.end) return rerr(&q, "unbalanced ')'");
    return id;
}

kw_grammar *kw_grammar_from_regex(const char *re, size_t len, const kw_grammar_limits *lim, kw_err *err) {
    gram_ir ir;
    ir_init(&ir, lim, err);
    uint32_t e = rx_compile(&ir, re, len, RX_RAW, RX_DOT_ECMA, false);
    uint32_t root = ir_rule_get(&ir, "root", 4);
    if (e != G_NONE && root != G_NONE) ir_rule_define(&ir, root, e);
    ir.root = root;
    return ir_compile_free(&ir);
}
