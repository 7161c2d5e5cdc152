/* parser.c - tokens -> AST for the chat-template interpreter.
 *
 * Owns the grammar, with @huggingface/jinja's precedence (lowest first):
 *   a if c else b | a if c  >  or  >  and  >  not  >  comparisons, in, not in
 *   >  + - ~  >  * / // %  >  **  >  is [not] test  >  | filter  >  unary -/+
 *   >  member . [] [a:b:c], calls (args, k=v, *a, **kw)  >  literals, (…), […], {…}
 * and the statements if/elif/else, for/else (with `for x in xs if cond` and
 * tuple targets), set (`a = …`, `a, b = …`, `ns.x = …`, block set), macro,
 * call blocks, filter blocks, break/continue. Syntax errors name the line and
 * column; nesting depth is bounded so hostile input cannot overflow the stack. */
#include "template/tpl.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TPL_PARSE_MAX_DEPTH 200

typedef struct {
    tpl_arena *ar;
    const tpl_toks *t;
    size_t cur;
    int depth;
} parser;

typedef struct { tpl_node **v; int n, cap; } nvec;

static const tpl_tok *peek(const parser *P, size_t k) {
    size_t i = P->cur + k;
    return i < P->t->n ? &P->t->v[i] : &P->t->v[P->t->n - 1];  /* last is EOF */
}

_Noreturn static void fail_at(parser *P, uint32_t off, const char *fmt, ...) KW_PRINTF(3, 4);
_Noreturn static void fail_at(parser *P, uint32_t off, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line, col;
    tpl_srcmap_pos(P->t->map, off, &line, &col);
    tpl_failf(P->ar->fail, "line %d, col %d: %s", line, col, msg);
}

static const char *tok_desc(const tpl_tok *t) {
    switch (t->type) {
    case TK_EOF: return "end of template";
    case TK_TEXT: return "text";
    case TK_STR: return "a string";
    case TK_INT: case TK_FLOAT: return "a number";
    case TK_COMMENT: return "a comment";
    default: return NULL;
    }
}

_Noreturn static void fail_expected(parser *P, const char *what) {
    const tpl_tok *t = peek(P, 0);
    const char *d = tok_desc(t);
    if (d) fail_at(P, t->off, "expected %s, got %s", what, d);
    fail_at(P, t->off, "expected %s, got '%.*s'", what, (int)(t->len > 40 ? 40 : t->len), t->s);
}

static bool is(const parser *P, tpl_tok_type type) { return peek(P, 0)->type == type; }

static bool tok_is_word(const tpl_tok *t, const char *w) {
    return t->type == TK_IDENT && t->len == strlen(w) && memcmp(t->s, w, t->len) == 0;
}
static bool is_word(const parser *P, const char *w) { return tok_is_word(peek(P, 0), w); }

static const tpl_tok *expect(parser *P, tpl_tok_type type, const char *what) {
    if (!is(P, type)) fail_expected(P, what);
    return &P->t->v[P->cur++];
}

static void expect_word(parser *P, const char *w) {
    if (!is_word(P, w)) {
        char what[64];
        snprintf(what, sizeof what, "'%s'", w);
        fail_expected(P, what);
    }
    P->cur++;
}

/* {% name ... where name is one of the NULL-terminated list */
static bool is_statement(const parser *P, const char *const *names) {
    if (peek(P, 0)->type != TK_OPEN_STMT) return false;
    for (; *names; names++) if (tok_is_word(peek(P, 1), *names)) return true;
    return false;
}

static tpl_node *new_node(parser *P, tpl_node_kind kind, uint32_t off) {
    tpl_node *n = tpl_alloc(P->ar, sizeof *n);
    n->kind = kind;
    n->off = off;
    return n;
}

static void nvec_push(parser *P, nvec *v, tpl_node *n) {
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 4;
        tpl_node **nv = tpl_alloc(P->ar, (size_t)cap * sizeof *nv);
        if (v->n) memcpy(nv, v->v, (size_t)v->n * sizeof *nv);
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = n;
}

static void enter(parser *P) {
    if (++P->depth > TPL_PARSE_MAX_DEPTH) fail_at(P, peek(P, 0)->off, "template nesting is too deep");
}
static void leave(parser *P) { P->depth--; }

static tpl_node *parse_expression(parser *P);
static tpl_node *parse_primary(parser *P);
static tpl_node *parse_any(parser *P);

/* ---- expressions ---------------------------------------------------------- */
/* Consumes token t (the current one) as a node of the given kind holding
 * its text. */
static tpl_node *take_leaf(parser *P, tpl_node_kind kind, const tpl_tok *t) {
    P->cur++;
    tpl_node *n = new_node(P, kind, t->off);
    n->s = t->s;
    n->slen = t->len;
    return n;
}

/* The items of a list literal [a, b, ...] (vals NULL) or of a dict literal
 * {k: v, ...}, from the opening bracket (the current token) to the closing
 * one; a trailing comma is allowed. */
static void parse_items(parser *P, tpl_tok_type close, nvec *keys, nvec *vals) {
    P->cur++;
    while (!is(P, close)) {
        nvec_push(P, keys, parse_expression(P));
        if (vals) {
            expect(P, TK_COLON, "':' between key and value");
            nvec_push(P, vals, parse_expression(P));
        }
        if (is(P, TK_COMMA)) P->cur++;
    }
    P->cur++;
}

static tpl_node *parse_sequence(parser *P, bool primary) {
    uint32_t off = peek(P, 0)->off;
    tpl_node *first = primary ? parse_primary(P) : parse_expression(P);
    if (!is(P, TK_COMMA)) return first;
    nvec items = {0};
    nvec_push(P, &items, first);
    while (is(P, TK_COMMA)) {
        P->cur++;
        nvec_push(P, &items, primary ? parse_primary(P) : parse_expression(P));
    }
    tpl_node *t = new_node(P, N_TUPLE, off);
    t->v = items.v;
    t->nv = items.n;
    return t;
}

/* ( args ) ; params = true for macro / call-block parameter lists */
static void parse_args(parser *P, bool params, nvec *out) {
    expect(P, TK_LPAREN, "'('");
    bool saw_kw = false, saw_spread = false;
    while (!is(P, TK_RPAREN)) {
        const tpl_tok *t = peek(P, 0);
        bool kwspread = t->type == TK_POW;
        bool spread = t->type == TK_MUL && t->len == 1 && t->s[0] == '*';
        if (params && (kwspread || spread)) fail_at(P, t->off, "argument unpacking is not allowed in parameters");
        if (kwspread) {
            P->cur++;
            tpl_node *n = new_node(P, N_KWSPREAD, t->off);
            n->a = parse_expression(P);
            nvec_push(P, out, n);
            if (is(P, TK_COMMA)) P->cur++;
            if (!is(P, TK_RPAREN)) fail_at(P, peek(P, 0)->off, "'**' must be applied to the final argument");
            break;
        }
        tpl_node *arg;
        if (spread) {
            if (saw_spread) fail_at(P, t->off, "only one '*' argument unpacking is allowed");
            saw_spread = true;
            P->cur++;
            arg = new_node(P, N_SPREAD, t->off);
            arg->a = parse_expression(P);
        } else {
            arg = parse_expression(P);
            if (is(P, TK_ASSIGN)) {
                P->cur++;
                if (arg->kind != N_IDENT) fail_at(P, arg->off, "expected an identifier before '='");
                tpl_node *kw = new_node(P, N_KWARG, arg->off);
                kw->s = arg->s;
                kw->slen = arg->slen;
                kw->a = parse_expression(P);
                arg = kw;
            }
            if (params) {
                if (arg->kind != N_IDENT && arg->kind != N_KWARG) fail_at(P, arg->off, "expected a parameter name");
                for (int i = 0; i < out->n; i++)
                    if (out->v[i]->slen == arg->slen && memcmp(out->v[i]->s, arg->s, arg->slen) == 0)
                        fail_at(P, arg->off, "duplicate parameter name '%.*s'", (int)arg->slen, arg->s);
            }
            if (arg->kind == N_KWARG) saw_kw = true;
            else if (saw_kw)
                fail_at(P, arg->off, params ? "non-default parameter follows a default one"
                                            : "positional argument follows keyword argument");
            else if (saw_spread) fail_at(P, arg->off, "positional argument follows '*' unpacking");
        }
        nvec_push(P, out, arg);
        if (is(P, TK_COMMA)) P->cur++;
    }
    expect(P, TK_RPAREN, "')'");
}

static tpl_node *parse_member_index(parser *P, uint32_t off) {
    tpl_node *parts[4] = {0};
    int n = 0;
    bool slice = false;
    while (!is(P, TK_RBRACKET)) {
        if (n >= 4) fail_at(P, off, "a slice takes at most 3 parts");
        if (is(P, TK_COLON)) {
            parts[n++] = NULL;
            P->cur++;
            slice = true;
        } else {
            parts[n++] = parse_expression(P);
            if (is(P, TK_COLON)) { P->cur++; slice = true; }
        }
    }
    if (n == 0) fail_at(P, off, "expected an index or slice inside []");
    if (!slice) return parts[0];
    if (n > 3) fail_at(P, off, "a slice takes at most 3 parts");
    tpl_node *s = new_node(P, N_SLICE, off);
    s->a = parts[0];
    s->b = n > 1 ? parts[1] : NULL;
    s->c = n > 2 ? parts[2] : NULL;
    return s;
}

static tpl_node *parse_member(parser *P, tpl_node *obj) {
    while (is(P, TK_DOT) || is(P, TK_LBRACKET)) {
        const tpl_tok *op = &P->t->v[P->cur++];
        tpl_node *m = new_node(P, N_MEMBER, op->off);
        m->a = obj;
        if (op->type == TK_LBRACKET) {
            m->b = parse_member_index(P, op->off);
            m->flag = 1;
            expect(P, TK_RBRACKET, "']'");
        } else {
            tpl_node *prop = parse_primary(P);
            if (prop->kind != N_IDENT && prop->kind != N_INT)
                fail_at(P, prop->off, "expected a name or an integer after '.'");
            m->b = prop;
        }
        obj = m;
    }
    return obj;
}

static tpl_node *parse_call(parser *P, tpl_node *callee) {
    enter(P);
    tpl_node *c = new_node(P, N_CALL, callee->off);
    c->a = callee;
    nvec args = {0};
    parse_args(P, false, &args);
    c->v = args.v;
    c->nv = args.n;
    tpl_node *e = parse_member(P, c);
    if (is(P, TK_LPAREN)) e = parse_call(P, e);
    leave(P);
    return e;
}

static tpl_node *parse_call_member(parser *P) {
    tpl_node *m = parse_member(P, parse_primary(P));
    if (is(P, TK_LPAREN)) return parse_call(P, m);
    return m;
}

static tpl_node *parse_unary_sign(parser *P) {
    const tpl_tok *t = peek(P, 0);
    if (t->type == TK_ADD && t->len == 1 && (t->s[0] == '-' || t->s[0] == '+')) {
        enter(P);
        P->cur++;
        tpl_node *u = new_node(P, N_UNARY, t->off);
        u->op = t->s[0] == '-' ? OP_NEG : OP_POS;
        u->a = parse_unary_sign(P);
        leave(P);
        return u;
    }
    return parse_call_member(P);
}

static tpl_node *parse_filter(parser *P) {
    tpl_node *operand = parse_unary_sign(P);
    while (is(P, TK_PIPE)) {
        P->cur++;
        tpl_node *f = parse_primary(P);
        if (f->kind != N_IDENT) fail_at(P, f->off, "expected a filter name after '|'");
        if (is(P, TK_LPAREN)) f = parse_call(P, f);
        tpl_node *n = new_node(P, N_FILTER, f->off);
        n->a = operand;
        n->b = f;
        operand = n;
    }
    return operand;
}

static tpl_node *parse_test(parser *P) {
    tpl_node *operand = parse_filter(P);
    while (is_word(P, "is")) {
        P->cur++;
        bool neg = is_word(P, "not");
        if (neg) P->cur++;
        tpl_node *name = parse_primary(P);
        if (name->kind != N_IDENT) fail_at(P, name->off, "expected a test name after 'is'");
        tpl_node *n = new_node(P, N_TEST, name->off);
        n->a = operand;
        n->s = name->s;
        n->slen = name->slen;
        n->flag = neg;
        operand = n;
    }
    return operand;
}

static tpl_node *binary(parser *P, tpl_op op, uint32_t off, tpl_node *l, tpl_node *r) {
    tpl_node *n = new_node(P, N_BINARY, off);
    n->op = op;
    n->a = l;
    n->b = r;
    return n;
}

static tpl_node *parse_power(parser *P) {
    tpl_node *l = parse_test(P);
    while (is(P, TK_POW)) {
        uint32_t off = P->t->v[P->cur++].off;
        l = binary(P, OP_POW, off, l, parse_test(P));
    }
    return l;
}

static tpl_node *parse_multiplicative(parser *P) {
    tpl_node *l = parse_power(P);
    while (is(P, TK_MUL)) {
        const tpl_tok *t = &P->t->v[P->cur++];
        tpl_op op = t->s[0] == '*' ? OP_MUL : t->s[0] == '%' ? OP_MOD : t->len == 2 ? OP_FLOORDIV : OP_DIV;
        l = binary(P, op, t->off, l, parse_power(P));
    }
    return l;
}

static tpl_node *parse_additive(parser *P) {
    tpl_node *l = parse_multiplicative(P);
    while (is(P, TK_ADD)) {
        const tpl_tok *t = &P->t->v[P->cur++];
        tpl_op op = t->s[0] == '+' ? OP_ADD : t->s[0] == '-' ? OP_SUB : OP_CONCAT;
        l = binary(P, op, t->off, l, parse_multiplicative(P));
    }
    return l;
}

static tpl_node *parse_comparison(parser *P) {
    tpl_node *l = parse_additive(P);
    for (;;) {
        const tpl_tok *t = peek(P, 0);
        tpl_op op;
        if (tok_is_word(t, "not") && tok_is_word(peek(P, 1), "in")) { op = OP_NOTIN; P->cur += 2; }
        else if (tok_is_word(t, "in")) { op = OP_IN; P->cur++; }
        else if (t->type == TK_CMP) {
            P->cur++;
            if (t->len == 2) op = t->s[0] == '<' ? OP_LE : t->s[0] == '>' ? OP_GE : t->s[0] == '=' ? OP_EQ : OP_NE;
            else op = t->s[0] == '<' ? OP_LT : OP_GT;
        } else break;
        l = binary(P, op, t->off, l, parse_additive(P));
    }
    return l;
}

static tpl_node *parse_not(parser *P) {
    if (is_word(P, "not")) {
        enter(P);
        uint32_t off = P->t->v[P->cur++].off;
        tpl_node *u = new_node(P, N_UNARY, off);
        u->op = OP_NOT;
        u->a = parse_not(P);
        leave(P);
        return u;
    }
    return parse_comparison(P);
}

/* operand (word operand)*: a left-associative chain of a keyword operator. */
static tpl_node *parse_word_chain(parser *P, const char *word, tpl_op op, tpl_node *(*operand)(parser *)) {
    tpl_node *l = operand(P);
    while (is_word(P, word)) {
        uint32_t off = P->t->v[P->cur++].off;
        l = binary(P, op, off, l, operand(P));
    }
    return l;
}

static tpl_node *parse_and(parser *P) { return parse_word_chain(P, "and", OP_AND, parse_not); }
static tpl_node *parse_or(parser *P) { return parse_word_chain(P, "or", OP_OR, parse_and); }

static tpl_node *parse_expression(parser *P) {
    enter(P);
    tpl_node *a = parse_or(P);
    if (is_word(P, "if")) {
        uint32_t off = P->t->v[P->cur++].off;
        tpl_node *test = parse_or(P);
        if (is_word(P, "else")) {
            P->cur++;
            tpl_node *t = new_node(P, N_TERNARY, off);
            t->a = test;
            t->b = a;
            t->c = parse_expression(P);
            a = t;
        } else {
            tpl_node *s = new_node(P, N_SELECT, off);
            s->a = a;
            s->b = test;
            a = s;
        }
    }
    leave(P);
    return a;
}

static int64_t parse_int_text(const char *s) {
    errno = 0;
    long long v = strtoll(s, NULL, 10);
    return (int64_t)v;   /* saturates on overflow */
}

static tpl_node *parse_primary(parser *P) {
    enter(P);
    const tpl_tok *t = peek(P, 0);
    tpl_node *n = NULL;
    switch (t->type) {
    case TK_INT:
        P->cur++;
        n = new_node(P, N_INT, t->off);
        n->i = parse_int_text(t->s);
        break;
    case TK_FLOAT:
        P->cur++;
        n = new_node(P, N_FLOAT, t->off);
        n->f = strtod(t->s, NULL);
        break;
    case TK_STR: {
        P->cur++;
        n = new_node(P, N_STR, t->off);
        if (!is(P, TK_STR)) { n->s = t->s; n->slen = t->len; break; }
        tpl_buf b;
        tpl_buf_init(&b, P->ar, 0);
        tpl_buf_put(&b, t->s, t->len);
        while (is(P, TK_STR)) { const tpl_tok *u = &P->t->v[P->cur++]; tpl_buf_put(&b, u->s, u->len); }
        n->s = b.p ? b.p : "";
        n->slen = b.n;
        break;
    }
    case TK_IDENT: n = take_leaf(P, N_IDENT, t); break;
    case TK_LPAREN:
        P->cur++;
        n = parse_sequence(P, false);
        expect(P, TK_RPAREN, "')'");
        break;
    case TK_LBRACKET: {
        nvec items = {0};
        parse_items(P, TK_RBRACKET, &items, NULL);
        n = new_node(P, N_LIST, t->off);
        n->v = items.v;
        n->nv = items.n;
        break;
    }
    case TK_LBRACE: {
        nvec keys = {0}, vals = {0};
        parse_items(P, TK_RBRACE, &keys, &vals);
        n = new_node(P, N_DICT, t->off);
        n->v = keys.v;
        n->nv = keys.n;
        n->w = vals.v;
        n->nw = vals.n;
        break;
    }
    default:
        fail_expected(P, "an expression");
    }
    leave(P);
    return n;
}

/* ---- statements ----------------------------------------------------------- */
/* parses nodes until one of `stops` ({% stop ...); fails at end of template */
static void parse_until(parser *P, const char *const *stops, const char *opener, uint32_t open_off, nvec *body) {
    while (!is_statement(P, stops)) {
        if (is(P, TK_EOF)) {
            int line, col;
            tpl_srcmap_pos(P->t->map, open_off, &line, &col);
            fail_at(P, peek(P, 0)->off, "unexpected end of template: '%s' opened at line %d, col %d is not closed (missing {%% %s %%})",
                    opener, line, col, stops[0]);
        }
        tpl_node *n = parse_any(P);
        if (n) nvec_push(P, body, n);
    }
}

static void expect_end(parser *P, const char *word) {
    expect(P, TK_OPEN_STMT, "'{%'");
    expect_word(P, word);
    expect(P, TK_CLOSE_STMT, "'%}'");
}

static tpl_node *parse_if(parser *P, uint32_t off) {
    static const char *const stops[] = {"endif", "elif", "else", NULL};
    static const char *const endif_only[] = {"endif", NULL};
    tpl_node *n = new_node(P, N_IF, off);
    n->a = parse_expression(P);
    expect(P, TK_CLOSE_STMT, "'%}'");
    nvec body = {0}, alt = {0};
    parse_until(P, stops, "if", off, &body);
    if (tok_is_word(peek(P, 1), "elif")) {
        uint32_t eoff = peek(P, 0)->off;
        P->cur += 2;
        enter(P);
        nvec_push(P, &alt, parse_if(P, eoff));
        leave(P);
    } else if (tok_is_word(peek(P, 1), "else")) {
        P->cur += 2;
        expect(P, TK_CLOSE_STMT, "'%}'");
        parse_until(P, endif_only, "if", off, &alt);
    }
    n->v = body.v; n->nv = body.n;
    n->w = alt.v; n->nw = alt.n;
    return n;
}

static tpl_node *parse_for(parser *P, uint32_t off) {
    static const char *const stops[] = {"endfor", "else", NULL};
    static const char *const endfor_only[] = {"endfor", NULL};
    tpl_node *n = new_node(P, N_FOR, off);
    n->a = parse_sequence(P, true);
    if (n->a->kind != N_IDENT && n->a->kind != N_TUPLE) fail_at(P, n->a->off, "expected a loop variable name or tuple");
    if (n->a->kind == N_TUPLE)
        for (int i = 0; i < n->a->nv; i++)
            if (n->a->v[i]->kind != N_IDENT) fail_at(P, n->a->v[i]->off, "loop variables must be names");
    expect_word(P, "in");
    tpl_node *it = parse_expression(P);
    if (it->kind == N_SELECT) { n->b = it->a; n->c = it->b; }
    else n->b = it;
    expect(P, TK_CLOSE_STMT, "'%}'");
    nvec body = {0}, alt = {0};
    parse_until(P, stops, "for", off, &body);
    if (tok_is_word(peek(P, 1), "else")) {
        P->cur += 2;
        expect(P, TK_CLOSE_STMT, "'%}'");
        parse_until(P, endfor_only, "for", off, &alt);
    }
    expect_end(P, "endfor");
    n->v = body.v; n->nv = body.n;
    n->w = alt.v; n->nw = alt.n;
    return n;
}

static tpl_node *parse_set(parser *P, uint32_t off) {
    static const char *const stops[] = {"endset", NULL};
    tpl_node *n = new_node(P, N_SET, off);
    n->a = parse_sequence(P, false);
    tpl_node *tg = n->a;
    bool ok = tg->kind == N_IDENT || (tg->kind == N_MEMBER && !tg->flag && tg->b->kind == N_IDENT);
    if (tg->kind == N_TUPLE) {
        ok = true;
        for (int i = 0; i < tg->nv; i++) if (tg->v[i]->kind != N_IDENT) ok = false;
    }
    if (!ok) fail_at(P, tg->off, "cannot assign to this expression");
    if (is(P, TK_ASSIGN)) {
        P->cur++;
        n->b = parse_sequence(P, false);
    } else {
        expect(P, TK_CLOSE_STMT, "'=' or '%}'");
        nvec body = {0};
        parse_until(P, stops, "set", off, &body);
        n->v = body.v; n->nv = body.n;
        P->cur++;
        expect_word(P, "endset");
    }
    expect(P, TK_CLOSE_STMT, "'%}'");
    return n;
}

/* does the subtree read the special name `kwargs` (1) / `varargs` (2)? */
static int special_names(const tpl_node *n, int depth) {
    if (!n || depth > 400) return 0;
    int r = 0;
    if (n->kind == N_IDENT) {
        if (n->slen == 6 && memcmp(n->s, "kwargs", 6) == 0) r |= 1;
        if (n->slen == 7 && memcmp(n->s, "varargs", 7) == 0) r |= 2;
        return r;
    }
    if (n->kind == N_MACRO) return 0;   /* a nested macro has its own */
    r |= special_names(n->a, depth + 1) | special_names(n->b, depth + 1) | special_names(n->c, depth + 1);
    for (int i = 0; i < n->nv; i++) r |= special_names(n->v[i], depth + 1);
    for (int i = 0; i < n->nw; i++) r |= special_names(n->w[i], depth + 1);
    return r;
}

static int body_special_names(tpl_node **v, int n) {
    int r = 0;
    for (int i = 0; i < n; i++) r |= special_names(v[i], 0);
    return r;
}

/* The rest of a block statement after its head: '%}', the body into n->v,
 * and {% end %}; opener names the block in errors. */
static void parse_block_body(parser *P, tpl_node *n, const char *opener, const char *end, uint32_t off) {
    const char *const stops[] = {end, NULL};
    expect(P, TK_CLOSE_STMT, "'%}'");
    nvec body = {0};
    parse_until(P, stops, opener, off, &body);
    expect_end(P, end);
    n->v = body.v; n->nv = body.n;
}

/* A macro's or call block's parameters, and which special names its body reads. */
static void set_callable(tpl_node *n, const nvec *params) {
    n->w = params->v; n->nw = params->n;
    n->flag = body_special_names(n->v, n->nv);
}

static tpl_node *parse_macro(parser *P, uint32_t off) {
    tpl_node *n = new_node(P, N_MACRO, off);
    tpl_node *name = parse_primary(P);
    if (name->kind != N_IDENT) fail_at(P, name->off, "expected a macro name");
    n->s = name->s;
    n->slen = name->slen;
    nvec params = {0};
    parse_args(P, true, &params);
    parse_block_body(P, n, "macro", "endmacro", off);
    set_callable(n, &params);
    return n;
}

static tpl_node *parse_callblock(parser *P, uint32_t off) {
    tpl_node *n = new_node(P, N_CALLBLOCK, off);
    nvec params = {0}, args = {0};
    if (is(P, TK_LPAREN)) parse_args(P, true, &params);
    tpl_node *callee = parse_primary(P);
    if (callee->kind != N_IDENT) fail_at(P, callee->off, "expected a macro name after 'call'");
    parse_args(P, false, &args);
    tpl_node *call = new_node(P, N_CALL, callee->off);
    call->a = callee;
    call->v = args.v;
    call->nv = args.n;
    n->a = call;
    parse_block_body(P, n, "call", "endcall", off);
    set_callable(n, &params);
    return n;
}

static tpl_node *parse_filterblock(parser *P, uint32_t off) {
    tpl_node *n = new_node(P, N_FILTERBLOCK, off);
    tpl_node *f = parse_primary(P);
    if (f->kind != N_IDENT) fail_at(P, f->off, "expected a filter name");
    if (is(P, TK_LPAREN)) f = parse_call(P, f);
    n->a = f;
    parse_block_body(P, n, "filter", "endfilter", off);
    return n;
}

static tpl_node *parse_statement(parser *P) {
    uint32_t off = expect(P, TK_OPEN_STMT, "'{%'")->off;
    const tpl_tok *kw = peek(P, 0);
    if (kw->type != TK_IDENT) fail_expected(P, "a statement name");
    P->cur++;
    tpl_node *n;
    if (tok_is_word(kw, "set")) n = parse_set(P, off);
    else if (tok_is_word(kw, "if")) { n = parse_if(P, off); expect_end(P, "endif"); }
    else if (tok_is_word(kw, "for")) n = parse_for(P, off);
    else if (tok_is_word(kw, "macro")) n = parse_macro(P, off);
    else if (tok_is_word(kw, "call")) n = parse_callblock(P, off);
    else if (tok_is_word(kw, "filter")) n = parse_filterblock(P, off);
    else if (tok_is_word(kw, "break") || tok_is_word(kw, "continue")) {
        n = new_node(P, tok_is_word(kw, "break") ? N_BREAK : N_CONTINUE, off);
        expect(P, TK_CLOSE_STMT, "'%}'");
    } else {
        fail_at(P, kw->off, "unknown or unexpected statement '%.*s'", (int)(kw->len > 40 ? 40 : kw->len), kw->s);
    }
    return n;
}

static tpl_node *parse_any(parser *P) {
    enter(P);
    const tpl_tok *t = peek(P, 0);
    tpl_node *n = NULL;
    switch (t->type) {
    case TK_COMMENT: P->cur++; break;
    case TK_TEXT: n = take_leaf(P, N_TEXT, t); break;
    case TK_OPEN_STMT: n = parse_statement(P); break;
    case TK_OPEN_EXPR:
        P->cur++;
        n = new_node(P, N_OUTPUT, t->off);
        n->a = parse_expression(P);
        expect(P, TK_CLOSE_EXPR, "'}}'");
        break;
    default:
        fail_expected(P, "text, '{{' or '{%'");
    }
    leave(P);
    return n;
}

void tpl_parse(tpl_arena *a, const tpl_toks *toks, tpl_body *out) {
    parser P = {a, toks, 0, 0};
    nvec body = {0};
    while (!is(&P, TK_EOF)) {
        tpl_node *n = parse_any(&P);
        if (n) nvec_push(&P, &body, n);
    }
    out->v = body.v;
    out->n = body.n;
}
