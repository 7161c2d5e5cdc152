/* lark.c - a subset of Lark's grammar syntax -> grammar IR (enough for
 * Codex's apply_patch tool grammar and grammars written like it).
 *
 *   rule: expansion | expansion ...       (start rule: "start")
 *   TERMINAL: expansion                   (same meaning: the grammar is one CFG over text)
 *   items: "literal" "literal"i  "a".."z"  /regex/flags  name  (...)  [...]
 *   postfix: ? * + ~ n  ~ n..m
 *   "-> alias", rule prefixes ? ! _ and ".priority" only shape Lark's parse
 *   tree or break ties, so they do not change the language: ignored.
 *   %import common.NAME [-> NEW] and %import common (A, B): the usual
 *   common.lark terminals (LF, CR, NEWLINE, WS, WS_INLINE, DIGIT, INT,
 *   NUMBER, LETTER, WORD, CNAME, ESCAPED_STRING, ...).
 *   Comments: // and #. Continuation lines start with '|'.
 * Rejected with an error: %ignore (it lets text appear between every two
 * terminals), %declare, %override, %extend, templates, regex flags other
 * than i/s/u (i only on literals). Regexes follow Python: '.' stops at \n. */
#include "gram_internal.h"
#include <stdio.h>

typedef struct lp {
    gram_ir *ir;
    const char *s, *p, *end;
    uint32_t depth;
} lp;

static uint32_t lerr(lp *q, const char *what) {
    int line = 1;
    for (const char *t = q->s; t < q->p && t < q->end; t++) line += *t == '\n';
    return ir_fail(q->ir, "Lark: %s at line %d", what, line);
}

static bool is_ident(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static void skip_blank(lp *q, bool nl) {
    while (q->p < q->end) {
        char c = *q->p;
        if (c == ' ' || c == '\t' || (nl && (c == '\n' || c == '\r'))) q->p++;
        else if (c == '#' || (c == '/' && q->p + 1 < q->end && q->p[1] == '/')) {
            while (q->p < q->end && *q->p != '\n') q->p++;
        } else break;
    }
}

/* At a newline: does the definition continue on a line starting with '|'? */
static bool continues(lp *q) {
    const char *save = q->p;
    skip_blank(q, true);
    if (q->p < q->end && *q->p == '|') return true;
    q->p = save;
    return false;
}

static const struct { const char *name, *re; } k_common[] = {
    {"LF", "\\n"}, {"CR", "\\r"}, {"NEWLINE", "(\\r?\\n)+"}, {"_NEWLINE", "(\\r?\\n)+"},
    {"WS", "[ \\t\\f\\r\\n]+"}, {"WS_INLINE", "[ \\t]+"}, {"DIGIT", "[0-9]"}, {"HEXDIGIT", "[0-9a-fA-F]"},
    {"INT", "[0-9]+"}, {"SIGNED_INT", "[+-]?[0-9]+"}, {"DECIMAL", "[0-9]+\\.[0-9]*|\\.[0-9]+"},
    {"FLOAT", "([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+"},
    {"NUMBER", "([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+([eE][+-]?[0-9]+)?"},
    {"SIGNED_NUMBER", "[+-]?(([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+([eE][+-]?[0-9]+)?)"},
    {"LETTER", "[A-Za-z]"}, {"LCASE_LETTER", "[a-z]"}, {"UCASE_LETTER", "[A-Z]"}, {"WORD", "[A-Za-z]+"},
    {"CNAME", "[A-Za-z_][A-Za-z0-9_]*"}, {"ESCAPED_STRING", "\"([^\"\\\\\\n]|\\\\.)*\""},
    {"SH_COMMENT", "#[^\\n]*"}, {"CPP_COMMENT", "//[^\\n]*"}, {NULL, NULL}};

static uint32_t import_common(lp *q, const char *name, size_t nlen, const char *as, size_t alen) {
    for (int i = 0; k_common[i].name; i++) {
        if (strlen(k_common[i].name) != nlen || memcmp(k_common[i].name, name, nlen)) continue;
        uint32_t r = ir_rule_get(q->ir, as, alen);
        if (r == G_NONE) return G_NONE;
        if (q->ir->rules[r].expr != G_NONE) return 0;   /* imported twice */
        uint32_t e = rx_compile(q->ir, k_common[i].re, strlen(k_common[i].re), RX_RAW, RX_DOT_PYTHON, false);
        return ir_rule_define(q->ir, r, e) ? G_NONE : 0;
    }
    char b[96];
    snprintf(b, sizeof b, "%%import of common.%.*s is not supported", (int)(nlen > 40 ? 40 : nlen), name);
    return lerr(q, b);
}

/* "..." with Python escapes into buf (UTF-8); returns length or -1 */
static long parse_string(lp *q, uint8_t *buf) {
    q->p++;
    long n = 0;
    while (q->p < q->end && *q->p != '"') {
        if (*q->p == '\n') { lerr(q, "newline in a string"); return -1; }
        uint32_t cp;
        if (*q->p == '\\') {
            q->p++;
            if (q->p >= q->end) break;
            char e = *q->p++;
            int nh = 0;
            switch (e) {
            case 'n': cp = '\n'; break;
            case 't': cp = '\t'; break;
            case 'r': cp = '\r'; break;
            case 'f': cp = '\f'; break;
            case 'v': cp = '\v'; break;
            case '0': cp = 0; break;
            case 'x': nh = 2; break;
            case 'u': nh = 4; break;
            case 'U': nh = 8; break;
            default: cp = (uint8_t)e; break;
            }
            if (nh && g_hex_digits(&q->p, q->end, nh, &cp)) { lerr(q, "bad escape in a string"); return -1; }
        } else if (!g_utf8_next(&q->p, q->end, &cp)) {
            lerr(q, "invalid UTF-8");
            return -1;
        }
        int k = g_utf8_encode(cp, buf + n);
        if (!k) { lerr(q, "bad code point in a string"); return -1; }
        n += k;
    }
    if (q->p >= q->end) { lerr(q, "unterminated string"); return -1; }
    q->p++;
    return n;
}

static uint32_t parse_expansions(lp *q, bool nested);

static uint32_t parse_atom(lp *q) {
    gram_ir *ir = q->ir;
    char c = *q->p;
    if (c == '(' || c == '[') {
        if (++q->depth > ir->lim.max_depth) return lerr(q, "nested too deeply (limit max_depth)");
        char close = c == '(' ? ')' : ']';
        q->p++;
        uint32_t e = parse_expansions(q, true);
        q->depth--;
        skip_blank(q, true);
        if (e == G_NONE) return G_NONE;
        if (q->p >= q->end || *q->p != close) return lerr(q, close == ')' ? "expected ')'" : "expected ']'");
        q->p++;
        return c == '[' ? ir_rep(ir, e, 0, 1) : e;
    }
    if (c == '"') {
        uint8_t *buf = kw_mem_alloc(KW_MEM_OTHER, (size_t)(q->end - q->p) * 4 + 4);
        if (!buf) return ir_fail(ir, "Lark: out of memory");
        long n = parse_string(q, buf);
        if (n < 0) { kw_mem_free(buf); return G_NONE; }
        uint32_t id;
        if (q->p + 1 < q->end && q->p[0] == '.' && q->p[1] == '.') {   /* "a".."z" */
            q->p += 2;
            skip_blank(q, false);
            uint8_t b2[16];
            uint32_t lo, hi;
            long n2 = (q->p < q->end && *q->p == '"') ? parse_string(q, b2) : -1;
            if (n2 < 0 || g_utf8_decode(buf, (size_t)n, &lo) != n || g_utf8_decode(b2, (size_t)n2, &hi) != n2 || lo > hi) {
                kw_mem_free(buf);
                return lerr(q, "bad \"a\"..\"z\" range");
            }
            ir_range r = {lo, hi};
            id = ir_class(ir, &r, 1, false);
        } else if (q->p < q->end && *q->p == 'i' && !(q->p + 1 < q->end && is_ident(q->p[1]))) {
            q->p++;   /* case-insensitive literal: each ASCII letter becomes a two-letter class */
            uint32_t *parts = kw_mem_alloc(KW_MEM_OTHER, ((size_t)n + 1) * sizeof *parts);
            if (!parts) { kw_mem_free(buf); return ir_fail(ir, "Lark: out of memory"); }
            for (long i = 0; i < n; i++) {
                uint8_t ch = buf[i];
                if ((ch | 32) >= 'a' && (ch | 32) <= 'z') {
                    ir_range r[2] = {{(uint32_t)(ch | 32), (uint32_t)(ch | 32)}, {(uint32_t)(ch & ~32), (uint32_t)(ch & ~32)}};
                    parts[i] = ir_class(ir, r, 2, false);
                } else parts[i] = ir_lit(ir, &buf[i], 1);
            }
            id = ir_seq(ir, parts, (uint32_t)n);
            kw_mem_free(parts);
        } else id = ir_lit(ir, buf, (size_t)n);
        kw_mem_free(buf);
        return id;
    }
    if (c == '/') {
        const char *start = ++q->p;
        while (q->p < q->end && *q->p != '/' && *q->p != '\n') {
            if (*q->p == '\\' && q->p + 1 < q->end) q->p++;
            q->p++;
        }
        if (q->p >= q->end || *q->p != '/') return lerr(q, "unterminated /regex/");
        const char *re_end = q->p++;
        int dot = RX_DOT_PYTHON;
        while (q->p < q->end && is_ident(*q->p)) {
            char f = *q->p++;
            if (f == 's') dot = RX_DOT_ALL;
            else if (f != 'u') return lerr(q, "regex flags other than s and u are not supported");
        }
        return rx_compile(ir, start, (size_t)(re_end - start), RX_RAW, dot, false);
    }
    if (is_ident(c)) {
        const char *nm = q->p;
        while (q->p < q->end && is_ident(*q->p)) q->p++;
        if (q->p < q->end && *q->p == '{') return lerr(q, "templates name{...} are not supported");
        return ir_ref(ir, ir_rule_get(ir, nm, (size_t)(q->p - nm)));
    }
    return lerr(q, "unexpected character");
}

static uint32_t parse_item(lp *q) {
    uint32_t a = parse_atom(q);
    while (a != G_NONE && q->p < q->end) {
        const char *save = q->p;
        skip_blank(q, false);
        if (q->p >= q->end || *q->p != '~') q->p = save;   /* only '~' may stand apart from its item */
        char c = *q->p;
        if (c == '?') { q->p++; a = ir_rep(q->ir, a, 0, 1); }
        else if (c == '*') { q->p++; a = ir_rep(q->ir, a, 0, G_INF); }
        else if (c == '+') { q->p++; a = ir_rep(q->ir, a, 1, G_INF); }
        else if (c == '~') {
            q->p++;
            skip_blank(q, false);
            uint64_t m = 0, n;
            if (q->p >= q->end || *q->p < '0' || *q->p > '9') return lerr(q, "expected a number after '~'");
            while (q->p < q->end && *q->p >= '0' && *q->p <= '9' && m < 0xFFFFFFF) m = m * 10 + (uint64_t)(*q->p++ - '0');
            n = m;
            if (q->end - q->p >= 2 && q->p[0] == '.' && q->p[1] == '.') {
                q->p += 2;
                n = 0;
                if (q->p >= q->end || *q->p < '0' || *q->p > '9') return lerr(q, "expected a number after '..'");
                while (q->p < q->end && *q->p >= '0' && *q->p <= '9' && n < 0xFFFFFFF) n = n * 10 + (uint64_t)(*q->p++ - '0');
            }
            a = ir_rep(q->ir, a, (uint32_t)m, (uint32_t)n);
        } else break;
    }
    return a;
}

static uint32_t parse_expansion(lp *q, bool nested) {
    ir_list items = {0};
    for (;;) {
        skip_blank(q, nested);
        if (q->p >= q->end) break;
        char c = *q->p;
        if (c == '|' || c == ')' || c == ']' || c == '\n' || c == '\r') break;
        if (c == '-' && q->p + 1 < q->end && q->p[1] == '>') {   /* -> alias: tree shaping only */
            q->p += 2;
            skip_blank(q, false);
            while (q->p < q->end && is_ident(*q->p)) q->p++;
            continue;
        }
        if (ir_list_push(q->ir, &items, parse_item(q), "Lark")) return G_NONE;
    }
    return ir_list_seq(q->ir, &items);
}

static uint32_t parse_expansions(lp *q, bool nested) {
    ir_list alts = {0};
    for (;;) {
        if (ir_list_push(q->ir, &alts, parse_expansion(q, nested), "Lark")) return G_NONE;
        skip_blank(q, nested);
        if (!nested && q->p < q->end && (*q->p == '\n' || *q->p == '\r')) continues(q);
        if (q->p < q->end && *q->p == '|') { q->p++; continue; }
        break;
    }
    return ir_list_alt(q->ir, &alts);
}

static void parse_directive(lp *q) {
    const char *d = q->p;
    while (q->p < q->end && (is_ident(*q->p) || *q->p == '%')) q->p++;
    size_t dl = (size_t)(q->p - d);
    if (dl != 7 || memcmp(d, "%import", 7)) {
        char b[64];
        snprintf(b, sizeof b, "directive %.*s is not supported", (int)(dl > 20 ? 20 : dl), d);
        lerr(q, b);
        return;
    }
    skip_blank(q, false);
    if (q->end - q->p < 7 || memcmp(q->p, "common", 6) || (q->p[6] != '.' && q->p[6] != ' ' && q->p[6] != '(')) {
        lerr(q, "only %import common... is supported");
        return;
    }
    q->p += 6;
    skip_blank(q, false);
    if (q->p < q->end && *q->p == '.') {
        q->p++;
        const char *nm = q->p;
        while (q->p < q->end && is_ident(*q->p)) q->p++;
        size_t nl = (size_t)(q->p - nm);
        const char *as = nm;
        size_t al = nl;
        skip_blank(q, false);
        if (q->end - q->p >= 2 && q->p[0] == '-' && q->p[1] == '>') {
            q->p += 2;
            skip_blank(q, false);
            as = q->p;
            while (q->p < q->end && is_ident(*q->p)) q->p++;
            al = (size_t)(q->p - as);
        }
        import_common(q, nm, nl, as, al);
        return;
    }
    if (q->p >= q->end || *q->p != '(') { lerr(q, "bad %import"); return; }
    q->p++;
    for (;;) {
        skip_blank(q, true);
        const char *nm = q->p;
        while (q->p < q->end && is_ident(*q->p)) q->p++;
        if (q->p == nm) { lerr(q, "bad %import list"); return; }
        if (import_common(q, nm, (size_t)(q->p - nm), nm, (size_t)(q->p - nm)) == G_NONE) return;
        skip_blank(q, true);
        if (q->p < q->end && *q->p == ',') { q->p++; continue; }
        if (q->p < q->end && *q->p == ')') { q->p++; return; }
        lerr(q, "bad %import list");
        return;
    }
}

kw_grammar *kw_grammar_from_lark(const char *text, size_t len, const kw_grammar_limits *lim, kw_err *err) {
    gram_ir ir;
    if (ir_init_source(&ir, lim, err, len, "Lark")) return NULL;
    lp q = {&ir, text, text, text + len, 0};
    while (!ir.failed) {
        skip_blank(&q, true);
        if (q.p >= q.end) break;
        if (*q.p == '%') { parse_directive(&q); continue; }
        if (*q.p == '?' || *q.p == '!') q.p++;
        const char *nm = q.p;
        while (q.p < q.end && is_ident(*q.p)) q.p++;
        if (q.p == nm) { lerr(&q, "expected a rule or terminal name"); break; }
        size_t nl = (size_t)(q.p - nm);
        if (q.p < q.end && *q.p == '.') {   /* priority */
            q.p++;
            if (q.p < q.end && *q.p == '-') q.p++;
            while (q.p < q.end && *q.p >= '0' && *q.p <= '9') q.p++;
        }
        if (q.p < q.end && *q.p == '{') { lerr(&q, "templates name{...} are not supported"); break; }
        skip_blank(&q, false);
        if (q.p >= q.end || *q.p != ':') { lerr(&q, "expected ':'"); break; }
        q.p++;
        uint32_t r = ir_rule_get(&ir, nm, nl);
        if (r == G_NONE) break;
        if (ir.rules[r].expr != G_NONE) {
            char b[96];
            snprintf(b, sizeof b, "'%.*s' defined twice", (int)(nl > 40 ? 40 : nl), nm);
            lerr(&q, b);
            break;
        }
        skip_blank(&q, false);
        uint32_t e = parse_expansions(&q, false);
        if (e == G_NONE) break;
        ir_rule_define(&ir, r, e);
    }
    ir_check_rules(&ir, "Lark", "", "start");
    return ir_compile_free(&ir);
}
