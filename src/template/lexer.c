/* lexer.c - template text -> tokens, the way Hugging Face renders it.
 *
 * Owns: the preprocessing HF applies before lexing (drop one trailing
 * newline; lstrip_blocks: spaces/tabs before `{%` `{#` `{-` at a line start;
 * trim_blocks: the newline right after `%}` `#}` `-}`; removal of
 * `{% generation %}` markers), whitespace control (`{%-` `-%}` `{{-` `-}}`
 * `{#-` `-#}`), and the tokens of statements and expressions (string escapes,
 * numbers with a glued sign, operators). Every token keeps the line and
 * column of the ORIGINAL template text through an offset map. */
#include "template/tpl.h"
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *s;
    uint32_t *map;     /* original offset of each byte */
    size_t n;
} pp_text;

typedef struct {
    tpl_arena *ar;
    const tpl_srcmap *map;
    const char *orig;
    size_t orig_len;
    pp_text t;
    tpl_toks toks;
    size_t cap;
    int brace_depth;
} lexer;

tpl_srcmap *tpl_srcmap_new(tpl_arena *a, const char *src, size_t len) {
    tpl_srcmap *m = tpl_alloc(a, sizeof *m);
    m->src = src;
    m->len = len;
    size_t nl = 1;
    for (size_t i = 0; i < len; i++) if (src[i] == '\n') nl++;
    m->line_starts = tpl_alloc(a, nl * sizeof(size_t));
    m->nlines = 1;
    for (size_t i = 0; i < len; i++) if (src[i] == '\n') m->line_starts[m->nlines++] = i + 1;
    return m;
}

void tpl_srcmap_pos(const tpl_srcmap *m, uint32_t off, int *line, int *col) {
    if (off > m->len) off = (uint32_t)m->len;
    size_t lo = 0, hi = m->nlines;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (m->line_starts[mid] <= off) lo = mid; else hi = mid;
    }
    *line = (int)lo + 1;
    int c = 1;   /* column in characters, not bytes */
    for (size_t i = m->line_starts[lo]; i < off; i += tpl_utf8_len((unsigned char)m->src[i])) c++;
    *col = c;
}

static uint32_t orig_off(const lexer *L, size_t pp_off) {
    return pp_off < L->t.n ? L->t.map[pp_off] : (uint32_t)L->orig_len;
}

_Noreturn static void lex_fail(lexer *L, size_t at, const char *what) {
    int line, col;
    tpl_srcmap_pos(L->map, orig_off(L, at), &line, &col);
    tpl_failf(L->ar->fail, "line %d, col %d: %s", line, col, what);
}

/* ---- preprocessing passes (each keeps the offset map) ------------------- */
static void pp_emit(pp_text *o, const pp_text *in, size_t i, size_t n) {
    memcpy(o->s + o->n, in->s + i, n);
    memcpy(o->map + o->n, in->map + i, n * sizeof(uint32_t));
    o->n += n;
}

static pp_text pp_new(tpl_arena *a, size_t n) {
    pp_text o;
    o.s = tpl_alloc(a, n + 1);
    o.map = tpl_alloc(a, (n + 1) * sizeof(uint32_t));
    o.n = 0;
    return o;
}

static bool at_line_start(const pp_text *in, size_t i) {
    if (i == 0) return true;
    char c = in->s[i - 1];
    if (c == '\n' || c == '\r') return true;
    /* U+2028 / U+2029 are line terminators for JavaScript's multiline ^ */
    return i >= 3 && (unsigned char)in->s[i - 3] == 0xE2 && (unsigned char)in->s[i - 2] == 0x80 &&
           ((unsigned char)in->s[i - 1] == 0xA8 || (unsigned char)in->s[i - 1] == 0xA9);
}

static pp_text pp_lstrip_blocks(tpl_arena *a, const pp_text *in) {
    pp_text o = pp_new(a, in->n);
    size_t i = 0;
    while (i < in->n) {
        if (at_line_start(in, i) && (in->s[i] == ' ' || in->s[i] == '\t')) {
            size_t j = i;
            while (j < in->n && (in->s[j] == ' ' || in->s[j] == '\t')) j++;
            if (j + 1 < in->n && in->s[j] == '{' && (in->s[j + 1] == '#' || in->s[j + 1] == '%' || in->s[j + 1] == '-')) {
                i = j;  /* drop the indentation */
                continue;
            }
            pp_emit(&o, in, i, j - i);
            i = j;
            continue;
        }
        pp_emit(&o, in, i, 1);
        i++;
    }
    return o;
}

static pp_text pp_trim_blocks(tpl_arena *a, const pp_text *in) {
    pp_text o = pp_new(a, in->n);
    size_t i = 0;
    while (i < in->n) {
        char c = in->s[i];
        if ((c == '#' || c == '%' || c == '-') && i + 2 < in->n + 0 && in->s[i + 1] == '}' && in->s[i + 2] == '\n') {
            pp_emit(&o, in, i, 2);
            i += 3;
            continue;
        }
        pp_emit(&o, in, i, 1);
        i++;
    }
    return o;
}

static size_t skip_ws(const char *s, size_t i, size_t n) {
    size_t l;
    while (i < n && (l = tpl_ws_at(s, i, n)) > 0) i += l;
    return i;
}

/* matches `{%-? \s* (end)?generation \s* -?%}` at i; returns end or 0 */
static size_t match_generation(const char *s, size_t i, size_t n, bool *lstrip, bool *rstrip) {
    if (i + 2 > n || s[i] != '{' || s[i + 1] != '%') return 0;
    size_t j = i + 2;
    *lstrip = j < n && s[j] == '-';
    if (*lstrip) j++;
    j = skip_ws(s, j, n);
    if (j + 3 <= n && memcmp(s + j, "end", 3) == 0 && j + 13 <= n && memcmp(s + j + 3, "generation", 10) == 0) j += 3;
    if (j + 10 > n || memcmp(s + j, "generation", 10) != 0) return 0;
    j = skip_ws(s, j + 10, n);
    *rstrip = j < n && s[j] == '-';
    if (*rstrip) j++;
    if (j + 2 > n || s[j] != '%' || s[j + 1] != '}') return 0;
    return j + 2;
}

static pp_text pp_generation(tpl_arena *a, const pp_text *in) {
    pp_text o = pp_new(a, in->n);
    size_t i = 0;
    while (i < in->n) {
        size_t ws_end = skip_ws(in->s, i, in->n);
        bool ls, rs;
        size_t tag_end = match_generation(in->s, ws_end, in->n, &ls, &rs);
        if (tag_end) {
            size_t after = skip_ws(in->s, tag_end, in->n);
            if (!ls) pp_emit(&o, in, i, ws_end - i);
            if (!rs) pp_emit(&o, in, tag_end, after - tag_end);
            i = after;
            continue;
        }
        if (ws_end > i) { pp_emit(&o, in, i, ws_end - i); i = ws_end; continue; }
        size_t l = tpl_utf8_len((unsigned char)in->s[i]);
        if (i + l > in->n) l = in->n - i;
        pp_emit(&o, in, i, l);
        i += l;
    }
    return o;
}

static void preprocess(lexer *L) {
    tpl_arena *a = L->ar;
    size_t n = L->orig_len;
    if (n > 0x7fffffffu) tpl_failf(a->fail, "template too large");
    pp_text t = pp_new(a, n);
    memcpy(t.s, L->orig, n);
    for (size_t i = 0; i < n; i++) t.map[i] = (uint32_t)i;
    t.n = n;
    if (t.n > 0 && t.s[t.n - 1] == '\n') t.n--;
    t = pp_lstrip_blocks(a, &t);
    t = pp_trim_blocks(a, &t);
    if (memmem(t.s, t.n, "generation", 10)) t = pp_generation(a, &t);
    t.s[t.n] = 0;
    L->t = t;
}

/* ---- tokens --------------------------------------------------------------- */
static tpl_tok *push(lexer *L, tpl_tok_type type, const char *s, size_t len, size_t at) {
    if (L->toks.n == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        tpl_tok *v = tpl_alloc(L->ar, cap * sizeof *v);
        if (L->toks.n) memcpy(v, L->toks.v, L->toks.n * sizeof *v);
        L->toks.v = v;
        L->cap = cap;
    }
    tpl_tok *t = &L->toks.v[L->toks.n++];
    t->type = type;
    t->s = s;
    t->len = len;
    t->off = orig_off(L, at);
    return t;
}

static tpl_tok_type last_type(const lexer *L) {
    return L->toks.n ? L->toks.v[L->toks.n - 1].type : TK_EOF;
}

static void strip_trailing_ws(lexer *L) {
    if (!L->toks.n) return;
    tpl_tok *t = &L->toks.v[L->toks.n - 1];
    if (t->type != TK_TEXT) return;
    size_t l;
    while (t->len > 0 && (l = tpl_ws_before(t->s, t->len)) > 0) t->len -= l;
    if (t->len == 0) L->toks.n--;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_word(char c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

static void put_utf8(tpl_buf *b, uint32_t cp) {
    char o[4];
    if (cp < 0x80) { o[0] = (char)cp; tpl_buf_put(b, o, 1); }
    else if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); tpl_buf_put(b, o, 2); }
    else if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[2] = (char)(0x80 | (cp & 0x3F));
        tpl_buf_put(b, o, 3);
    } else {
        o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
        tpl_buf_put(b, o, 4);
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool read_hex(const char *s, size_t n, size_t i, int digits, uint32_t *out) {
    if (i + (size_t)digits > n) return false;
    uint32_t v = 0;
    for (int k = 0; k < digits; k++) {
        int h = hexval(s[i + (size_t)k]);
        if (h < 0) return false;
        v = v * 16 + (uint32_t)h;
    }
    *out = v;
    return true;
}

/* string literal body after the opening quote; returns position after the closing quote */
static size_t lex_string(lexer *L, size_t pos, char quote, size_t start) {
    const char *s = L->t.s;
    size_t n = L->t.n;
    tpl_buf b;
    tpl_buf_init(&b, L->ar, 0);
    while (pos < n && s[pos] != quote) {
        if (s[pos] == '\\') {
            if (++pos >= n) lex_fail(L, start, "unexpected end of template in a string");
            char e = s[pos++];
            if (e == 'x' || e == 'u') {
                uint32_t cp;
                if (!read_hex(s, n, pos, e == 'x' ? 2 : 4, &cp)) lex_fail(L, pos - 2, "invalid hexadecimal escape sequence");
                pos += e == 'x' ? 2 : 4;
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    uint32_t lo;
                    if (pos + 1 < n && s[pos] == '\\' && s[pos + 1] == 'u' && read_hex(s, n, pos + 2, 4, &lo) &&
                        lo >= 0xDC00 && lo <= 0xDFFF) {
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        pos += 6;
                    } else cp = 0xFFFD;
                } else if (cp >= 0xDC00 && cp <= 0xDFFF) cp = 0xFFFD;
                put_utf8(&b, cp);
                continue;
            }
            /* the JSON escapes, and \v and \' as Python strings have them */
            char c = e == 'v' ? '\v' : e == '\'' ? '\'' : tpl_escape_char(e);
            if (!c) lex_fail(L, pos - 2, "unexpected escaped character in a string");
            tpl_buf_putc(&b, c);
            continue;
        }
        tpl_buf_putc(&b, s[pos++]);
        if (pos >= n) lex_fail(L, start, "unterminated string literal");
    }
    if (pos >= n) lex_fail(L, start, "unterminated string literal");
    push(L, TK_STR, b.p ? b.p : "", b.n, start);
    return pos + 1;
}

static size_t lex_number(lexer *L, size_t pos, size_t start, bool neg) {
    const char *s = L->t.s;
    size_t n = L->t.n;
    size_t d0 = pos;
    while (pos < n && is_digit(s[pos])) pos++;
    bool frac = false;
    if (pos + 1 < n && s[pos] == '.' && is_digit(s[pos + 1]) && (neg || last_type(L) != TK_DOT)) {
        frac = true;
        pos++;
        while (pos < n && is_digit(s[pos])) pos++;
    }
    size_t len = pos - d0 + (neg ? 1 : 0);
    char *txt = tpl_alloc(L->ar, len + 1);
    if (neg) txt[0] = '-';
    memcpy(txt + (neg ? 1 : 0), s + d0, pos - d0);
    push(L, frac ? TK_FLOAT : TK_INT, txt, len, start);
    return pos;
}

typedef struct { const char *seq; tpl_tok_type type; } op_entry;
static const op_entry OPS[] = {
    {"{%", TK_OPEN_STMT}, {"%}", TK_CLOSE_STMT}, {"{{", TK_OPEN_EXPR}, {"}}", TK_CLOSE_EXPR},
    {"(", TK_LPAREN}, {")", TK_RPAREN}, {"{", TK_LBRACE}, {"}", TK_RBRACE},
    {"[", TK_LBRACKET}, {"]", TK_RBRACKET}, {",", TK_COMMA}, {".", TK_DOT}, {":", TK_COLON},
    {"|", TK_PIPE}, {"<=", TK_CMP}, {">=", TK_CMP}, {"==", TK_CMP}, {"!=", TK_CMP},
    {"<", TK_CMP}, {">", TK_CMP}, {"+", TK_ADD}, {"-", TK_ADD}, {"~", TK_ADD},
    {"**", TK_POW}, {"*", TK_MUL}, {"//", TK_MUL}, {"/", TK_MUL}, {"%", TK_MUL}, {"=", TK_ASSIGN},
};

static bool starts(const lexer *L, size_t pos, const char *seq) {
    if (pos >= L->t.n || L->t.s[pos] != seq[0]) return false;
    size_t l = strlen(seq);
    return pos + l <= L->t.n && memcmp(L->t.s + pos, seq, l) == 0;
}

void tpl_lex(tpl_arena *a, const tpl_srcmap *map, tpl_toks *out) {
    lexer L;
    memset(&L, 0, sizeof L);
    L.ar = a;
    L.map = map;
    L.orig = map->src;
    L.orig_len = map->len;
    preprocess(&L);

    const char *s = L.t.s;
    size_t n = L.t.n, pos = 0;
    while (pos < n) {
        tpl_tok_type lt = last_type(&L);
        if (lt == TK_EOF || lt == TK_CLOSE_STMT || lt == TK_CLOSE_EXPR || lt == TK_COMMENT) {
            size_t st = pos;
            while (pos < n && !(s[pos] == '{' && pos + 1 < n && (s[pos + 1] == '%' || s[pos + 1] == '{' || s[pos + 1] == '#')))
                pos++;
            if (pos > st) { push(&L, TK_TEXT, s + st, pos - st, st); continue; }
        }
        if (starts(&L, pos, "{#")) {
            size_t st = pos;
            pos += 2;
            bool strip_before = pos < n && s[pos] == '-';
            if (strip_before) pos++;
            size_t cst = pos;
            while (!(pos + 1 < n && s[pos] == '#' && s[pos + 1] == '}')) {
                if (pos + 2 >= n) lex_fail(&L, st, "missing end of comment tag");
                pos++;
            }
            bool strip_after = pos > cst && s[pos - 1] == '-';
            if (strip_before) strip_trailing_ws(&L);
            push(&L, TK_COMMENT, s + cst, pos - cst, st);
            pos += 2;
            if (strip_after) pos = skip_ws(s, pos, n);
            continue;
        }
        if (starts(&L, pos, "{%-")) { strip_trailing_ws(&L); push(&L, TK_OPEN_STMT, "{%", 2, pos); pos += 3; continue; }
        if (starts(&L, pos, "{{-")) {
            strip_trailing_ws(&L); push(&L, TK_OPEN_EXPR, "{{", 2, pos); L.brace_depth = 0; pos += 3; continue;
        }
        pos = skip_ws(s, pos, n);
        if (pos >= n) lex_fail(&L, pos, "unexpected end of template inside a tag");
        if (starts(&L, pos, "-%}")) { push(&L, TK_CLOSE_STMT, "%}", 2, pos); pos = skip_ws(s, pos + 3, n); continue; }
        if (starts(&L, pos, "-}}")) { push(&L, TK_CLOSE_EXPR, "}}", 2, pos); pos = skip_ws(s, pos + 3, n); continue; }
        char c = s[pos];
        if (c == '-' || c == '+') {
            tpl_tok_type t = last_type(&L);
            if (t == TK_TEXT || t == TK_EOF) lex_fail(&L, pos, "unexpected character");
            if (!(t == TK_IDENT || t == TK_INT || t == TK_FLOAT || t == TK_STR || t == TK_RPAREN || t == TK_RBRACKET)) {
                size_t st = pos++;
                if (pos < n && is_digit(s[pos])) {
                    if (c == '-') pos = lex_number(&L, pos, st, true);
                    else pos = lex_number(&L, pos, st, false);
                } else {
                    push(&L, TK_ADD, c == '-' ? "-" : "+", 1, st);
                }
                continue;
            }
        }
        bool matched = false;
        for (size_t k = 0; k < sizeof OPS / sizeof OPS[0]; k++) {
            if (OPS[k].type == TK_CLOSE_EXPR && L.brace_depth > 0) continue;
            if (!starts(&L, pos, OPS[k].seq)) continue;
            push(&L, OPS[k].type, OPS[k].seq, strlen(OPS[k].seq), pos);
            if (OPS[k].type == TK_OPEN_EXPR) L.brace_depth = 0;
            else if (OPS[k].type == TK_LBRACE) L.brace_depth++;
            else if (OPS[k].type == TK_RBRACE) L.brace_depth--;
            pos += strlen(OPS[k].seq);
            matched = true;
            break;
        }
        if (matched) continue;
        if (c == '\'' || c == '"') { pos = lex_string(&L, pos + 1, c, pos); continue; }
        if (is_digit(c)) { pos = lex_number(&L, pos, pos, false); continue; }
        if (is_word(c)) {
            size_t st = pos;
            while (pos < n && is_word(s[pos])) pos++;
            push(&L, TK_IDENT, s + st, pos - st, st);
            continue;
        }
        lex_fail(&L, pos, "unexpected character in a tag");
    }
    push(&L, TK_EOF, "", 0, n);
    *out = L.toks;
    out->map = map;
}
