/* gbnf.c - llama.cpp's GBNF grammar syntax -> grammar IR.
 *
 *   name ::= alternatives          (name: letters, digits, '-', '_'; start rule "root")
 *   alternatives: sequences separated by '|'
 *   items: "literal"  [class] [^class]  .  name  ( alternatives )
 *   postfix: * + ? {m} {m,} {m,n}
 *   escapes: \n \r \t \\ \" \[ \] \- \^ \xHH \uHHHH \UHHHHHHHH
 *   comments: # to end of line
 * A rule ends at a newline outside parentheses, unless the line ends with
 * '|' or the next line starts with '|'. Terminals are code points (UTF-8).
 * Token references (<...>, !<...>) are llama.cpp token-level matches; the
 * engine is byte-level, so they are rejected with an error. */
#include "gram_internal.h"
#include <stdio.h>

typedef struct gp {
    gram_ir *ir;
    const char *s, *end, *p;
    uint32_t depth;
} gp;

static uint32_t perr(gp *q, const char *what) {
    int line = 1, col = 1;
    for (const char *t = q->s; t < q->p && t < q->end; t++) {
        if (*t == '\n') { line++; col = 1; } else col++;
    }
    return ir_fail(q->ir, "GBNF: %s at line %d column %d", what, line, col);
}

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Skips blanks and comments; newlines too when nested. */
static void skip_space(gp *q, bool nested) {
    while (q->p < q->end) {
        char c = *q->p;
        if (c == ' ' || c == '\t') q->p++;
        else if (c == '#') {
            while (q->p < q->end && *q->p != '\n') q->p++;
        } else if ((c == '\n' || c == '\r') && nested) q->p++;
        else break;
    }
}

/* At a newline outside parentheses: does the rule go on (next line starts with '|')? */
static bool continues_on_next_line(gp *q) {
    const char *save = q->p;
    skip_space(q, true);
    if (q->p < q->end && *q->p == '|') return true;
    q->p = save;
    return false;
}

/* One (possibly escaped) code point; -1 on error. */
static int64_t parse_char(gp *q) {
    if (q->p >= q->end) return -1;
    if (*q->p == '\\') {
        q->p++;
        if (q->p >= q->end) return -1;
        char e = *q->p++;
        int nhex = 0;
        switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'': return (uint8_t)e;
        case 'x': nhex = 2; break;
        case 'u': nhex = 4; break;
        case 'U': nhex = 8; break;
        default: perr(q, "unknown escape"); return -1;
        }
        uint32_t v;
        if (g_hex_digits(&q->p, q->end, nhex, &v)) { perr(q, "bad hex escape"); return -1; }
        if (v > 0x10FFFF) { perr(q, "escape beyond U+10FFFF"); return -1; }
        return v;
    }
    uint32_t cp;
    if (!g_utf8_next(&q->p, q->end, &cp)) { perr(q, "invalid UTF-8"); return -1; }
    return cp;
}

static uint32_t parse_literal(gp *q) {
    q->p++;   /* opening quote */
    uint8_t *buf = kw_mem_alloc(KW_MEM_OTHER, (size_t)(q->end - q->p) * 4 + 4);
    if (!buf) return ir_fail(q->ir, "GBNF: out of memory");
    size_t n = 0;
    while (q->p < q->end && *q->p != '"') {
        if (*q->p == '\n') { kw_mem_free(buf); return perr(q, "newline inside a string literal"); }
        int64_t cp = parse_char(q);
        if (cp < 0) { kw_mem_free(buf); return perr(q, "bad character in a string literal"); }
        int k = g_utf8_encode((uint32_t)cp, buf + n);
        if (!k) { kw_mem_free(buf); return perr(q, "surrogate code point in a string literal"); }
        n += (size_t)k;
    }
    if (q->p >= q->end) { kw_mem_free(buf); return perr(q, "unterminated string literal"); }
    q->p++;
    uint32_t id = ir_lit(q->ir, buf, n);
    kw_mem_free(buf);
    return id;
}

static uint32_t parse_class(gp *q) {
    q->p++;   /* '[' */
    bool neg = false;
    if (q->p < q->end && *q->p == '^') { neg = true; q->p++; }
    ir_range *r = NULL;
    uint32_t n = 0, cap = 0;
    while (q->p < q->end && *q->p != ']') {
        int64_t lo = parse_char(q);
        if (lo < 0) { kw_mem_free(r); return perr(q, "bad character in a class"); }
        int64_t hi = lo;
        if (q->p + 1 < q->end && *q->p == '-' && q->p[1] != ']') {
            q->p++;
            hi = parse_char(q);
            if (hi < 0) { kw_mem_free(r); return perr(q, "bad range end in a class"); }
            if (hi < lo) { kw_mem_free(r); return perr(q, "class range out of order"); }
        }
        if (G_PUSH(r, n, cap, ((ir_range){(uint32_t)lo, (uint32_t)hi}))) { kw_mem_free(r); return ir_fail(q->ir, "GBNF: out of memory"); }
    }
    if (q->p >= q->end) { kw_mem_free(r); return perr(q, "unterminated character class"); }
    q->p++;
    uint32_t id = ir_class(q->ir, r, n, neg);
    kw_mem_free(r);
    return id;
}

static uint32_t parse_alternatives(gp *q, bool nested);

static uint32_t parse_postfix(gp *q, uint32_t item) {
    for (;;) {
        if (q->p >= q->end || item == G_NONE) return item;
        char c = *q->p;
        if (c == '*') { q->p++; item = ir_rep(q->ir, item, 0, G_INF); }
        else if (c == '+') { q->p++; item = ir_rep(q->ir, item, 1, G_INF); }
        else if (c == '?') { q->p++; item = ir_rep(q->ir, item, 0, 1); }
        else if (c == '{') {
            q->p++;
            skip_space(q, true);
            uint32_t m, n = 0;
            if (!g_parse_count(&q->p, q->end, &m)) return perr(q, "expected a number after '{'");
            skip_space(q, true);
            uint32_t max = m;
            if (q->p < q->end && *q->p == ',') {
                q->p++;
                skip_space(q, true);
                max = g_parse_count(&q->p, q->end, &n) ? n : G_INF;
                skip_space(q, true);
            }
            if (q->p >= q->end || *q->p != '}') return perr(q, "expected '}'");
            q->p++;
            item = ir_rep(q->ir, item, m, max);
        } else return item;
    }
}

static uint32_t parse_sequence(gp *q, bool nested) {
    ir_list items = {0};
    for (;;) {
        skip_space(q, nested);
        if (q->p >= q->end) break;
        char c = *q->p;
        uint32_t item;
        if (c == '"') item = parse_literal(q);
        else if (c == '[') item = parse_class(q);
        else if (c == '.') {
            q->p++;
            item = ir_class(q->ir, NULL, 0, true);
        } else if (c == '(') {
            if (++q->depth > q->ir->lim.max_depth) return ir_list_drop(&items, perr(q, "parentheses nested too deeply (limit max_depth)"));
            q->p++;
            item = parse_alternatives(q, true);
            q->depth--;
            skip_space(q, true);
            if (item == G_NONE) return ir_list_drop(&items, G_NONE);
            if (q->p >= q->end || *q->p != ')') return ir_list_drop(&items, perr(q, "expected ')'"));
            q->p++;
        } else if (c == '<' || c == '!') {
            return ir_list_drop(&items, perr(q, "token references (<...>) are not supported; use text"));
        } else if (is_name_char(c)) {
            const char *nm = q->p;
            while (q->p < q->end && is_name_char(*q->p)) q->p++;
            size_t len = (size_t)(q->p - nm);
            /* "name ::=" starts the next rule: stop here */
            const char *save = q->p;
            skip_space(q, true);
            if (q->end - q->p >= 3 && memcmp(q->p, "::=", 3) == 0) { q->p = nm; break; }
            q->p = save;
            item = ir_ref(q->ir, ir_rule_get(q->ir, nm, len));
        } else if (c == '\n' || c == '\r') {
            if (continues_on_next_line(q)) break;
            break;
        } else break;
        if (ir_list_push(q->ir, &items, parse_postfix(q, item), "GBNF")) return G_NONE;
    }
    return ir_list_seq(q->ir, &items);
}

static uint32_t parse_alternatives(gp *q, bool nested) {
    ir_list alts = {0};
    for (;;) {
        if (ir_list_push(q->ir, &alts, parse_sequence(q, nested), "GBNF")) return G_NONE;
        skip_space(q, nested);
        if (!nested && q->p < q->end && (*q->p == '\n' || *q->p == '\r')) continues_on_next_line(q);
        if (q->p < q->end && *q->p == '|') {
            q->p++;
            skip_space(q, true);
            continue;
        }
        break;
    }
    return ir_list_alt(q->ir, &alts);
}

kw_grammar *kw_grammar_from_gbnf(const char *text, size_t len, const kw_grammar_limits *lim, kw_err *err) {
    gram_ir ir;
    if (ir_init_source(&ir, lim, err, len, "GBNF")) return NULL;
    gp q = {&ir, text, text + len, text, 0};
    for (;;) {
        skip_space(&q, true);
        if (q.p >= q.end || ir.failed) break;
        const char *nm = q.p;
        while (q.p < q.end && is_name_char(*q.p)) q.p++;
        if (q.p == nm) { perr(&q, "expected a rule name"); break; }
        size_t nlen = (size_t)(q.p - nm);
        skip_space(&q, false);
        if (q.end - q.p < 3 || memcmp(q.p, "::=", 3) != 0) { perr(&q, "expected '::='"); break; }
        q.p += 3;
        uint32_t rule = ir_rule_get(&ir, nm, nlen);
        if (rule == G_NONE) break;
        if (ir.rules[rule].expr != G_NONE) {
            char b[80];
            snprintf(b, sizeof b, "rule '%.*s' defined twice", (int)(nlen > 40 ? 40 : nlen), nm);
            perr(&q, b);
            break;
        }
        skip_space(&q, true);   /* the body may start on the next line */
        uint32_t e = parse_alternatives(&q, false);
        if (e == G_NONE) break;
        ir_rule_define(&ir, rule, e);
        skip_space(&q, false);
        if (q.p < q.end && *q.p != '\n' && *q.p != '\r') { perr(&q, "unexpected character"); break; }
    }
    ir_check_rules(&ir, "GBNF", "rule ", "root");
    return ir_compile_free(&ir);
}
