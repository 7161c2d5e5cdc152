/* eval.c - the chat-template interpreter and the public API (template.h).
 *
 * Owns: kw_template (the parsed AST in its own arena), rendering (one arena
 * per render, freed on success and on error), scopes (for-loops get their
 * own; if/set write to the enclosing one; macros run in a child of the
 * caller's scope, as @huggingface/jinja does), expression evaluation with
 * HF's operator semantics, statements (if/for/set/macro/call/filter blocks,
 * break/continue), macro argument binding, and the abuse limits (steps,
 * depth, memory, output size). */
#include "template/tpl.h"
#include "kvwise/memory.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kw_template {
    tpl_arena ar;
    tpl_fail fail;
    tpl_body body;
    tpl_srcmap *map;
};

enum { EX_OK = 0, EX_BREAK = 1, EX_CONTINUE = 2 };

kw_template_limits kw_template_default_limits(void) {
    kw_template_limits l;
    l.max_output_bytes = (size_t)16 << 20;
    l.max_memory_bytes = (size_t)256 << 20;
    l.max_steps = 20000000;
    l.max_depth = 500;
    return l;
}

_Noreturn void tpl_rt_fail(tpl_rt *rt, const char *fmt, ...) {
    char msg[440];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (rt->at) {
        int line, col;
        tpl_srcmap_pos(rt->map, rt->at->off, &line, &col);
        tpl_failf(rt->fail, "line %d, col %d: %s", line, col, msg);
    }
    tpl_failf(rt->fail, "%s", msg);
}

void tpl_step(tpl_rt *rt) {
    if (++rt->steps > rt->lim.max_steps)
        tpl_rt_fail(rt, "template exceeded %llu evaluation steps", (unsigned long long)rt->lim.max_steps);
}

/* ---- scopes ------------------------------------------------------------- */
static tpl_scope *scope_new(tpl_rt *rt, tpl_scope *parent) {
    tpl_scope *s = tpl_alloc(rt->ar, sizeof *s);
    s->parent = parent;
    return s;
}

static tv *scope_lookup(tpl_scope *s, const char *k, size_t n) {
    for (; s; s = s->parent) {
        tv *v = tdict_get(&s->vars, k, n);
        if (v) return v;
    }
    return NULL;
}

static void scope_set(tpl_rt *rt, tpl_scope *s, const char *k, size_t n, tv v) { tdict_set(rt->ar, &s->vars, k, n, v); }

/* ---- expressions ---------------------------------------------------------- */
static tv eval(tpl_rt *rt, tpl_scope *sc, const tpl_node *n);
static int exec_body(tpl_rt *rt, tpl_scope *sc, tpl_node *const *v, int nv);

static void enter(tpl_rt *rt, const tpl_node *n) {
    rt->at = n;
    if (++rt->depth > rt->lim.max_depth) tpl_rt_fail(rt, "template nesting exceeds %d levels", rt->lim.max_depth);
    tpl_step(rt);
}

#define FAIL_AT(node, ...) do { rt->at = (node); tpl_rt_fail(rt, __VA_ARGS__); } while (0)

static size_t utf8_count(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i += tpl_utf8_len((unsigned char)s[i])) c++;
    return c;
}

/* byte offsets of code points of s (cp+1 entries) */
static size_t *utf8_offsets(tpl_rt *rt, const tstr *s, size_t *count) {
    size_t n = utf8_count(s->s, s->len);
    size_t *off = tpl_alloc(rt->ar, (n + 1) * sizeof(size_t));
    size_t i = 0, k = 0;
    while (i < s->len) {
        off[k++] = i;
        size_t l = tpl_utf8_len((unsigned char)s->s[i]);
        i += l;
        if (i > s->len) i = s->len;
    }
    off[k] = s->len;
    *count = k;
    return off;
}

static void slice_bounds(int64_t len, bool has_start, int64_t start, bool has_stop, int64_t stop, int64_t step,
                         int64_t *o_start, int64_t *o_stop) {
    if (step >= 0) {
        if (!has_start) start = 0;
        start = start < 0 ? (len + start > 0 ? len + start : 0) : (start < len ? start : len);
        if (!has_stop) stop = len;
        stop = stop < 0 ? (len + stop > 0 ? len + stop : 0) : (stop < len ? stop : len);
    } else {
        if (!has_start) start = len - 1;
        start = start < 0 ? (len + start > -1 ? len + start : -1) : (start < len - 1 ? start : len - 1);
        if (!has_stop) stop = -1;
        stop = stop < -1 ? (len + stop > -1 ? len + stop : -1) : (stop < len - 1 ? stop : len - 1);
    }
    *o_start = start;
    *o_stop = stop;
}

/* How many elements s[st:en:step] takes, with st and en already clamped by
 * slice_bounds (both in [-1, len]). Counted in unsigned arithmetic so any
 * step, INT64_MIN included, is safe: k * step for k < count never exceeds
 * the span in magnitude. Step 0 takes nothing. */
static int64_t slice_count(int64_t st, int64_t en, int64_t step) {
    if (step > 0) return en > st ? (int64_t)(((uint64_t)(en - st) - 1) / (uint64_t)step) + 1 : 0;
    if (step < 0) return st > en ? (int64_t)(((uint64_t)(st - en) - 1) / (0 - (uint64_t)step)) + 1 : 0;
    return 0;
}

static tv eval_slice(tpl_rt *rt, tpl_scope *sc, tv obj, const tpl_node *s) {
    if (obj.t != TV_LIST && obj.t != TV_STR) FAIL_AT(s, "only lists and strings can be sliced, not %s", tv_type_name(obj));
    tv parts[3];
    const tpl_node *pn[3] = {s->a, s->b, s->c};
    for (int i = 0; i < 3; i++) {
        parts[i] = pn[i] ? eval(rt, sc, pn[i]) : tv_undef();
        if (parts[i].t != TV_INT && parts[i].t != TV_UNDEF) FAIL_AT(s, "slice indices must be integers");
    }
    int64_t step = parts[2].t == TV_INT ? parts[2].u.i : 1;
    size_t *offs = NULL;
    size_t len = obj.t == TV_LIST ? obj.u.l->n : 0;
    if (obj.t == TV_STR) offs = utf8_offsets(rt, obj.u.s, &len);
    int64_t st, en;
    slice_bounds((int64_t)len, parts[0].t == TV_INT, parts[0].u.i, parts[1].t == TV_INT, parts[1].u.i, step, &st, &en);
    int64_t n = slice_count(st, en, step);
    if (obj.t == TV_LIST) {
        tv out = tv_list(rt->ar, 0);
        for (int64_t k = 0; k < n; k++) { tpl_step(rt); tlist_push(rt->ar, out.u.l, obj.u.l->v[st + k * step]); }
        return out;
    }
    tpl_buf b;
    tpl_buf_init(&b, rt->ar, 0);
    for (int64_t k = 0; k < n; k++) {
        int64_t i = st + k * step;
        tpl_step(rt);
        tpl_buf_put(&b, obj.u.s->s + offs[i], offs[i + 1] - offs[i]);
    }
    return tv_str(rt->ar, b.p ? b.p : "", b.n);
}

static tv member_get(tpl_rt *rt, tv obj, tv prop) {
    if (obj.t == TV_DICT || obj.t == TV_NS) {
        if (prop.t != TV_STR) tpl_rt_fail(rt, "cannot look up a %s key in a %s", tv_type_name(prop), tv_type_name(obj));
        tv *v = tdict_get(obj.u.d, prop.u.s->s, prop.u.s->len);
        if (v) return *v;
        if (obj.t == TV_DICT) return tpl_method(rt, obj, prop.u.s->s, prop.u.s->len);
        return tv_undef();
    }
    if (obj.t == TV_LIST || obj.t == TV_STR) {
        if (prop.t == TV_INT) {
            if (obj.t == TV_LIST) {
                int64_t n = (int64_t)obj.u.l->n, i = prop.u.i < 0 ? prop.u.i + n : prop.u.i;
                return (i >= 0 && i < n) ? obj.u.l->v[i] : tv_undef();
            }
            size_t cnt;
            size_t *offs = utf8_offsets(rt, obj.u.s, &cnt);
            int64_t n = (int64_t)cnt, i = prop.u.i < 0 ? prop.u.i + n : prop.u.i;
            if (i < 0 || i >= n) return tv_undef();
            return tv_str(rt->ar, obj.u.s->s + offs[i], offs[i + 1] - offs[i]);
        }
        if (prop.t == TV_STR) return tpl_method(rt, obj, prop.u.s->s, prop.u.s->len);
        tpl_rt_fail(rt, "cannot index a %s with a %s", tv_type_name(obj), tv_type_name(prop));
    }
    if (prop.t != TV_STR) tpl_rt_fail(rt, "cannot index a %s with a %s", tv_type_name(obj), tv_type_name(prop));
    return tpl_method(rt, obj, prop.u.s->s, prop.u.s->len);
}

static tv eval_member(tpl_rt *rt, tpl_scope *sc, const tpl_node *n) {
    tv obj = eval(rt, sc, n->a);
    tv prop;
    if (n->flag) {
        if (n->b->kind == N_SLICE) return eval_slice(rt, sc, obj, n->b);
        prop = eval(rt, sc, n->b);
    } else if (n->b->kind == N_INT) {
        prop = tv_int(n->b->i);
    } else {
        prop = tv_str(rt->ar, n->b->s, n->b->slen);
    }
    rt->at = n;
    return member_get(rt, obj, prop);
}

/* evaluates call arguments: positional (with *spread) first, then keywords */
static void eval_args(tpl_rt *rt, tpl_scope *sc, tpl_node *const *v, int nv, tpl_args *out) {
    tv list = tv_list(rt->ar, (size_t)nv);
    out->kw = NULL;
    for (int i = 0; i < nv; i++) {
        const tpl_node *a = v[i];
        if (a->kind == N_SPREAD) {
            tv s = eval(rt, sc, a->a);
            if (s.t != TV_LIST) FAIL_AT(a, "cannot unpack a %s with '*'", tv_type_name(s));
            for (size_t k = 0; k < s.u.l->n; k++) tlist_push(rt->ar, list.u.l, s.u.l->v[k]);
        } else if (a->kind != N_KWARG && a->kind != N_KWSPREAD) {
            tlist_push(rt->ar, list.u.l, eval(rt, sc, a));
        }
    }
    for (int i = 0; i < nv; i++) {
        const tpl_node *a = v[i];
        if (a->kind != N_KWARG && a->kind != N_KWSPREAD) continue;
        if (!out->kw) out->kw = tv_dict(rt->ar, 4).u.d;
        if (a->kind == N_KWARG) {
            if (tdict_get(out->kw, a->s, a->slen)) FAIL_AT(a, "keyword argument '%.*s' given twice", (int)a->slen, a->s);
            tdict_set(rt->ar, out->kw, a->s, a->slen, eval(rt, sc, a->a));
        } else {
            tv d = eval(rt, sc, a->a);
            if (d.t != TV_DICT) FAIL_AT(a, "argument after ** must be a mapping, not %s", tv_type_name(d));
            for (size_t k = 0; k < d.u.d->n; k++) {
                if (tdict_get(out->kw, d.u.d->k[k]->s, d.u.d->k[k]->len))
                    FAIL_AT(a, "keyword argument '%s' given twice", d.u.d->k[k]->s);
                tdict_set_s(rt->ar, out->kw, d.u.d->k[k], d.u.d->v[k]);
            }
        }
    }
    out->pos = list.u.l->v;
    out->npos = (int)list.u.l->n;
}

static tv concat_js(tpl_rt *rt, tv a, tv b) {
    tpl_buf buf;
    tpl_buf_init(&buf, rt->ar, rt->lim.max_output_bytes);
    tv_jsstr(&buf, a);
    tv_jsstr(&buf, b);
    return tv_str(rt->ar, buf.p ? buf.p : "", buf.n);
}

static bool str_contains(const tstr *hay, const tstr *needle) {
    if (needle->len == 0) return true;
    return memmem(hay->s, hay->len, needle->s, needle->len) != NULL;
}

static const char *op_name(tpl_op op) {
    static const char *names[] = {"and", "or", "==", "!=", "<", ">", "<=", ">=", "in", "not in",
                                  "+", "-", "~", "*", "/", "//", "%", "**", "not", "-", "+"};
    return names[op];
}

static tv arith_int(tpl_rt *rt, tpl_op op, int64_t a, int64_t b) {
    int64_t r;
    switch (op) {
    case OP_ADD: if (!__builtin_add_overflow(a, b, &r)) return tv_int(r); return tv_float((double)a + (double)b);
    case OP_SUB: if (!__builtin_sub_overflow(a, b, &r)) return tv_int(r); return tv_float((double)a - (double)b);
    case OP_MUL: if (!__builtin_mul_overflow(a, b, &r)) return tv_int(r); return tv_float((double)a * (double)b);
    case OP_FLOORDIV:
        if (b == 0) tpl_rt_fail(rt, "integer division by zero");
        if (a == INT64_MIN && b == -1) return tv_float(-(double)a);
        r = a / b;
        if ((a % b != 0) && ((a < 0) != (b < 0))) r--;
        return tv_int(r);
    case OP_MOD:
        if (b == 0) tpl_rt_fail(rt, "integer modulo by zero");
        if (b == -1) return tv_int(0);
        r = a % b;                                   /* Python's sign: that of the divisor */
        if (r != 0 && ((r < 0) != (b < 0))) r += b;
        return tv_int(r);
    default: return tv_undef();
    }
}

static tv eval_binary(tpl_rt *rt, tpl_scope *sc, const tpl_node *n) {
    tv l = eval(rt, sc, n->a);
    if (n->op == OP_AND) return tv_truthy(l) ? eval(rt, sc, n->b) : l;
    if (n->op == OP_OR) return tv_truthy(l) ? l : eval(rt, sc, n->b);
    tv r = eval(rt, sc, n->b);
    rt->at = n;
    tpl_op op = n->op;
    if (op == OP_EQ) return tv_bool(tv_loose_eq(l, r));
    if (op == OP_NE) return tv_bool(!tv_loose_eq(l, r));
    if (l.t == TV_UNDEF || r.t == TV_UNDEF) {
        if (r.t == TV_UNDEF && (op == OP_IN || op == OP_NOTIN)) return tv_bool(op == OP_NOTIN);
        tpl_rt_fail(rt, "cannot apply '%s' to an undefined value", op_name(op));
    }
    if (l.t == TV_NONE || r.t == TV_NONE) tpl_rt_fail(rt, "cannot apply '%s' to none", op_name(op));
    if (op == OP_CONCAT) return concat_js(rt, l, r);
    if (op == OP_POW && tv_is_numeric(l) && tv_is_numeric(r)) {
        double a = tv_num(l), b = tv_num(r);
        if (a == 0 && b < 0) tpl_rt_fail(rt, "0 cannot be raised to a negative power");
        double x = pow(a, b);
        if (!isfinite(x)) tpl_rt_fail(rt, "'**' result is not a finite number");
        if (l.t == TV_FLOAT || r.t == TV_FLOAT || b < 0 || fabs(x) >= 9.2e18) return tv_float(x);
        return tv_int((int64_t)x);
    }
    bool ln = l.t == TV_INT || l.t == TV_FLOAT, rn = r.t == TV_INT || r.t == TV_FLOAT;
    if (ln && rn) {
        bool flt = l.t == TV_FLOAT || r.t == TV_FLOAT;
        double a = tv_num(l), b = tv_num(r);
        switch (op) {
        case OP_ADD: case OP_SUB: case OP_MUL:
            if (!flt) return arith_int(rt, op, l.u.i, r.u.i);
            return tv_float(op == OP_ADD ? a + b : op == OP_SUB ? a - b : a * b);
        case OP_DIV: return tv_float(a / b);
        case OP_FLOORDIV: if (!flt) return arith_int(rt, op, l.u.i, r.u.i); return tv_float(floor(a / b));
        case OP_MOD: {
            if (!flt) return arith_int(rt, op, l.u.i, r.u.i);
            double m = fmod(a, b);                   /* the divisor's sign, as for integers */
            return tv_float(m != 0 && ((m < 0) != (b < 0)) ? m + b : m);
        }
        case OP_LT: return tv_bool(a < b);
        case OP_GT: return tv_bool(a > b);
        case OP_LE: return tv_bool(a <= b);
        case OP_GE: return tv_bool(a >= b);
        default: break;
        }
    } else if (l.t == TV_LIST && r.t == TV_LIST) {
        if (op == OP_ADD) {
            tv out = tv_list(rt->ar, l.u.l->n + r.u.l->n);
            for (size_t i = 0; i < l.u.l->n; i++) tlist_push(rt->ar, out.u.l, l.u.l->v[i]);
            for (size_t i = 0; i < r.u.l->n; i++) tlist_push(rt->ar, out.u.l, r.u.l->v[i]);
            return out;
        }
    } else if (r.t == TV_LIST && (op == OP_IN || op == OP_NOTIN)) {
        bool found = false;
        for (size_t i = 0; i < r.u.l->n && !found; i++) found = tv_strict_eq(r.u.l->v[i], l);
        return tv_bool(op == OP_IN ? found : !found);
    }
    if ((l.t == TV_STR || r.t == TV_STR) && op == OP_ADD) return concat_js(rt, l, r);
    if (l.t == TV_STR && r.t == TV_STR && (op == OP_IN || op == OP_NOTIN)) {
        bool c = str_contains(r.u.s, l.u.s);
        return tv_bool(op == OP_IN ? c : !c);
    }
    if (l.t == TV_STR && r.t == TV_DICT && (op == OP_IN || op == OP_NOTIN)) {
        bool c = tdict_get(r.u.d, l.u.s->s, l.u.s->len) != NULL;
        return tv_bool(op == OP_IN ? c : !c);
    }
    tpl_rt_fail(rt, "unsupported operator '%s' between %s and %s", op_name(op), tv_type_name(l), tv_type_name(r));
}

static tv eval_filter(tpl_rt *rt, tpl_scope *sc, tv operand, const tpl_node *f) {
    tpl_args args = {NULL, 0, NULL};
    const char *name;
    size_t nlen;
    bool has_call = false;
    if (f->kind == N_CALL) {
        if (f->a->kind != N_IDENT) FAIL_AT(f, "a filter must be a name");
        name = f->a->s;
        nlen = f->a->slen;
        eval_args(rt, sc, f->v, f->nv, &args);
        has_call = true;
    } else if (f->kind == N_IDENT) {
        name = f->s;
        nlen = f->slen;
    } else {
        FAIL_AT(f, "a filter must be a name or a call of a name");
    }
    char nm[48];
    if (nlen >= sizeof nm) FAIL_AT(f, "unknown filter '%.*s'", 40, name);
    memcpy(nm, name, nlen);
    nm[nlen] = 0;
    rt->at = f;
    return tpl_apply_filter(rt, operand, nm, &args, has_call);
}

static tv eval(tpl_rt *rt, tpl_scope *sc, const tpl_node *n) {
    enter(rt, n);
    tv r = tv_undef();
    switch (n->kind) {
    case N_INT: r = tv_int(n->i); break;
    case N_FLOAT: r = tv_float(n->f); break;
    case N_STR: r = tv_str(rt->ar, n->s, n->slen); break;
    case N_IDENT: {
        tv *v = scope_lookup(sc, n->s, n->slen);
        r = v ? *v : tv_undef();
        break;
    }
    case N_LIST: case N_TUPLE:
        r = tv_list(rt->ar, (size_t)n->nv);
        for (int i = 0; i < n->nv; i++) tlist_push(rt->ar, r.u.l, eval(rt, sc, n->v[i]));
        break;
    case N_DICT:
        r = tv_dict(rt->ar, (size_t)n->nv);
        for (int i = 0; i < n->nv; i++) {
            tv k = eval(rt, sc, n->v[i]);
            if (k.t != TV_STR) FAIL_AT(n->v[i], "dict keys must be strings, not %s", tv_type_name(k));
            tdict_set_s(rt->ar, r.u.d, k.u.s, eval(rt, sc, n->w[i]));
        }
        break;
    case N_MEMBER: r = eval_member(rt, sc, n); break;
    case N_CALL: {
        tpl_args args;
        eval_args(rt, sc, n->v, n->nv, &args);
        tv fn = eval(rt, sc, n->a);
        rt->at = n;
        if (fn.t != TV_FUNC) tpl_rt_fail(rt, "cannot call a %s", tv_type_name(fn));
        r = tpl_call(rt, fn, &args, sc);
        break;
    }
    case N_UNARY: {
        tv a = eval(rt, sc, n->a);
        rt->at = n;
        if (n->op == OP_NOT) { r = tv_bool(!tv_truthy(a)); break; }
        if (!tv_is_numeric(a)) tpl_rt_fail(rt, "unary '%s' needs a number, not %s", op_name(n->op), tv_type_name(a));
        if (a.t == TV_FLOAT) r = tv_float(n->op == OP_NEG ? -a.u.f : a.u.f);
        else {
            int64_t v = a.t == TV_BOOL ? (int64_t)a.u.b : a.u.i;
            r = tv_int(n->op == OP_NEG ? (int64_t)(0 - (uint64_t)v) : v);
        }
        break;
    }
    case N_BINARY: r = eval_binary(rt, sc, n); break;
    case N_FILTER: r = eval_filter(rt, sc, eval(rt, sc, n->a), n->b); break;
    case N_TEST: {
        tv a = eval(rt, sc, n->a);
        char nm[48];
        if (n->slen >= sizeof nm) FAIL_AT(n, "unknown test '%.*s'", 40, n->s);
        memcpy(nm, n->s, n->slen);
        nm[n->slen] = 0;
        rt->at = n;
        bool res = tpl_apply_test(rt, a, nm, NULL);
        r = tv_bool(n->flag ? !res : res);
        break;
    }
    case N_SELECT: r = tv_truthy(eval(rt, sc, n->b)) ? eval(rt, sc, n->a) : tv_undef(); break;
    case N_TERNARY: r = tv_truthy(eval(rt, sc, n->a)) ? eval(rt, sc, n->b) : eval(rt, sc, n->c); break;
    case N_SLICE: FAIL_AT(n, "a slice is only allowed inside []");
    case N_KWARG: case N_SPREAD: case N_KWSPREAD: FAIL_AT(n, "keyword or unpacked argument outside a call");
    default: FAIL_AT(n, "a statement cannot be used as an expression");
    }
    rt->depth--;
    return r;
}

/* ---- calls ---------------------------------------------------------------- */
static void bind_params(tpl_rt *rt, const tpl_node *def, const char *display, tpl_node *const *params, int nparams,
                        const tpl_args *args, tpl_scope *scope) {
    tdict *kw = tv_dict(rt->ar, 4).u.d;
    if (args->kw)
        for (size_t i = 0; i < args->kw->n; i++) tdict_set_s(rt->ar, kw, args->kw->k[i], args->kw->v[i]);
    bool *pending = tpl_alloc(rt->ar, (size_t)(nparams + 1) * sizeof(bool));
    for (int i = 0; i < nparams; i++) {
        const tpl_node *p = params[i];
        tv v = tv_undef();
        bool have = false;
        if (i < args->npos) { v = args->pos[i]; have = true; }
        if (!have) {
            for (size_t k = 0; k < kw->n; k++) {
                if (kw->k[k]->len == p->slen && memcmp(kw->k[k]->s, p->s, p->slen) == 0) {
                    v = kw->v[k];
                    have = true;
                    memmove(kw->k + k, kw->k + k + 1, (kw->n - k - 1) * sizeof(tstr *));
                    memmove(kw->v + k, kw->v + k + 1, (kw->n - k - 1) * sizeof(tv));
                    kw->n--;
                    break;
                }
            }
        }
        pending[i] = !have && p->kind == N_KWARG;
        scope_set(rt, scope, p->s, p->slen, v);
    }
    if (def->flag & 1) {
        tv d = {TV_DICT, {0}};
        d.u.d = kw;
        scope_set(rt, scope, "kwargs", 6, d);
    } else if (kw->n > 0) {
        tpl_rt_fail(rt, "macro %s takes no keyword argument '%s'", display, kw->k[0]->s);
    }
    if (def->flag & 2) {
        tv l = tv_list(rt->ar, 0);
        for (int i = nparams; i < args->npos; i++) tlist_push(rt->ar, l.u.l, args->pos[i]);
        scope_set(rt, scope, "varargs", 7, l);
    } else if (args->npos > nparams) {
        tpl_rt_fail(rt, "macro %s takes not more than %d argument(s)", display, nparams);
    }
    for (int i = 0; i < nparams; i++)
        if (pending[i]) scope_set(rt, scope, params[i]->s, params[i]->slen, eval(rt, scope, params[i]->a));
}

/* runs a body into a fresh buffer and returns it as a string */
static tv capture(tpl_rt *rt, tpl_scope *sc, tpl_node *const *v, int nv, const char *what) {
    tpl_buf *saved = rt->out;
    tpl_buf b;
    tpl_buf_init(&b, rt->ar, rt->lim.max_output_bytes);
    rt->out = &b;
    const tpl_node *at = rt->at;
    int code = exec_body(rt, sc, v, nv);
    if (code != EX_OK) { rt->at = at; tpl_rt_fail(rt, "'break' or 'continue' outside a loop in %s", what); }
    rt->out = saved;
    return tv_str(rt->ar, b.p ? b.p : "", b.n);
}

tv tpl_call(tpl_rt *rt, tv fn, const tpl_args *args, tpl_scope *caller_scope) {
    tfunc *f = fn.u.fn;
    tpl_step(rt);
    switch (f->kind) {
    case FN_BUILTIN: return f->fn(rt, tv_undef(), args);
    case FN_METHOD: return f->fn(rt, f->self, args);
    case FN_MACRO: case FN_CALLER: {
        const tpl_node *def = f->node;
        if (++rt->depth > rt->lim.max_depth) tpl_rt_fail(rt, "macro calls nest deeper than %d levels", rt->lim.max_depth);
        tpl_scope *scope = scope_new(rt, f->kind == FN_MACRO ? caller_scope : f->scope);
        char display[80];
        if (f->kind == FN_MACRO) snprintf(display, sizeof display, "'%s'", f->name);
        else snprintf(display, sizeof display, "None");
        const tpl_node *at = rt->at;
        bind_params(rt, def, display, def->w, def->nw, args, scope);
        rt->at = at;
        tv r = capture(rt, scope, def->v, def->nv, f->kind == FN_MACRO ? "a macro" : "a call block");
        rt->depth--;
        return r;
    }
    }
    return tv_undef();
}

/* ---- statements ----------------------------------------------------------- */
static void set_target(tpl_rt *rt, tpl_scope *sc, const tpl_node *tg, tv v) {
    if (tg->kind == N_IDENT) { scope_set(rt, sc, tg->s, tg->slen, v); return; }
    if (tg->kind == N_TUPLE) {
        if (v.t != TV_LIST) FAIL_AT(tg, "cannot unpack a %s", tv_type_name(v));
        if ((int)v.u.l->n != tg->nv)
            FAIL_AT(tg, "too %s values to unpack (expected %d, got %zu)", (int)v.u.l->n < tg->nv ? "few" : "many", tg->nv, v.u.l->n);
        for (int i = 0; i < tg->nv; i++) scope_set(rt, sc, tg->v[i]->s, tg->v[i]->slen, v.u.l->v[i]);
        return;
    }
    /* ns.attr = v */
    tv obj = eval(rt, sc, tg->a);
    if (obj.t != TV_NS) FAIL_AT(tg, "cannot assign an attribute of a %s (only of a namespace)", tv_type_name(obj));
    tdict_set(rt->ar, obj.u.d, tg->b->s, tg->b->slen, v);
}

static void set_loop_vars(tpl_rt *rt, tpl_scope *sc, const tpl_node *target, tv item) {
    if (target->kind == N_IDENT) { scope_set(rt, sc, target->s, target->slen, item); return; }
    if (item.t != TV_LIST) FAIL_AT(target, "cannot unpack a %s into loop variables", tv_type_name(item));
    if ((int)item.u.l->n != target->nv)
        FAIL_AT(target, "too %s items to unpack (expected %d, got %zu)", (int)item.u.l->n < target->nv ? "few" : "many",
                target->nv, item.u.l->n);
    for (int i = 0; i < target->nv; i++) scope_set(rt, sc, target->v[i]->s, target->v[i]->slen, item.u.l->v[i]);
}

static tv make_loop(tpl_rt *rt, size_t i, size_t n, const tv *items) {
    tv d = tv_dict(rt->ar, 9);
    tpl_arena *a = rt->ar;
    tdict_set(a, d.u.d, "index", 5, tv_int((int64_t)i + 1));
    tdict_set(a, d.u.d, "index0", 6, tv_int((int64_t)i));
    tdict_set(a, d.u.d, "revindex", 8, tv_int((int64_t)(n - i)));
    tdict_set(a, d.u.d, "revindex0", 9, tv_int((int64_t)(n - i - 1)));
    tdict_set(a, d.u.d, "first", 5, tv_bool(i == 0));
    tdict_set(a, d.u.d, "last", 4, tv_bool(i == n - 1));
    tdict_set(a, d.u.d, "length", 6, tv_int((int64_t)n));
    tdict_set(a, d.u.d, "previtem", 8, i > 0 ? items[i - 1] : tv_undef());
    tdict_set(a, d.u.d, "nextitem", 8, i + 1 < n ? items[i + 1] : tv_undef());
    return d;
}

static void exec_for(tpl_rt *rt, tpl_scope *outer, const tpl_node *n) {
    tpl_scope *sc = scope_new(rt, outer);
    tv it = eval(rt, sc, n->b);
    rt->at = n;
    tv *src;
    size_t cnt;
    tv keys;
    if (it.t == TV_LIST) { src = it.u.l->v; cnt = it.u.l->n; }
    else if (it.t == TV_STR) {
        /* as Python Jinja (the reference refuses): a string iterates over its characters */
        keys = tpl_str_chars(rt, it.u.s);
        src = keys.u.l->v;
        cnt = keys.u.l->n;
    } else if (it.t == TV_DICT) {
        keys = tv_list(rt->ar, it.u.d->n);
        for (size_t i = 0; i < it.u.d->n; i++) tlist_push(rt->ar, keys.u.l, tv_strv(it.u.d->k[i]));
        src = keys.u.l->v;
        cnt = keys.u.l->n;
    } else tpl_rt_fail(rt, "cannot loop over a %s", tv_type_name(it));
    tv *items = tpl_alloc(rt->ar, (cnt + 1) * sizeof(tv));
    size_t n_items = 0;
    for (size_t i = 0; i < cnt; i++) {
        tv cur = src[i];
        if (n->c) {
            tpl_step(rt);
            tpl_scope *ls = scope_new(rt, sc);
            set_loop_vars(rt, ls, n->a, cur);
            if (!tv_truthy(eval(rt, ls, n->c))) continue;
        }
        items[n_items++] = cur;
    }
    bool none_ran = true;
    for (size_t i = 0; i < n_items; i++) {
        tpl_step(rt);
        scope_set(rt, sc, "loop", 4, make_loop(rt, i, n_items, items));
        set_loop_vars(rt, sc, n->a, items[i]);
        size_t mark = rt->out->n;
        int code = exec_body(rt, sc, n->v, n->nv);
        if (code != EX_OK) {
            /* as in @huggingface/jinja, the interrupted iteration's output is dropped */
            rt->out->n = mark;
            if (rt->out->p) rt->out->p[mark] = 0;
            if (code == EX_BREAK) break;
            continue;
        }
        none_ran = false;
    }
    if (none_ran) {
        int code = exec_body(rt, sc, n->w, n->nw);
        if (code != EX_OK) FAIL_AT(n, "'break' or 'continue' outside a loop");
    }
}

static int exec_node(tpl_rt *rt, tpl_scope *sc, const tpl_node *n) {
    switch (n->kind) {
    case N_TEXT: tpl_buf_put(rt->out, n->s, n->slen); return EX_OK;
    case N_OUTPUT: tv_print(rt->out, eval(rt, sc, n->a)); return EX_OK;
    case N_IF:
        if (tv_truthy(eval(rt, sc, n->a))) return exec_body(rt, sc, n->v, n->nv);
        return exec_body(rt, sc, n->w, n->nw);
    case N_FOR: exec_for(rt, sc, n); return EX_OK;
    case N_SET: {
        tv v = n->b ? eval(rt, sc, n->b) : capture(rt, sc, n->v, n->nv, "a set block");
        set_target(rt, sc, n->a, v);
        return EX_OK;
    }
    case N_MACRO: {
        tfunc *f = tpl_alloc(rt->ar, sizeof *f);
        f->kind = FN_MACRO;
        f->name = tpl_strndup(rt->ar, n->s, n->slen);
        f->node = n;
        tv v = {TV_FUNC, {0}};
        v.u.fn = f;
        scope_set(rt, sc, n->s, n->slen, v);
        return EX_OK;
    }
    case N_CALLBLOCK: {
        tfunc *caller = tpl_alloc(rt->ar, sizeof *caller);
        caller->kind = FN_CALLER;
        caller->name = "caller";
        caller->node = n;
        caller->scope = sc;
        tv cv = {TV_FUNC, {0}};
        cv.u.fn = caller;
        tpl_args args;
        eval_args(rt, sc, n->a->v, n->a->nv, &args);
        tv fn = eval(rt, sc, n->a->a);
        rt->at = n;
        if (fn.t != TV_FUNC) tpl_rt_fail(rt, "cannot call a %s", tv_type_name(fn));
        tpl_scope *env = scope_new(rt, sc);
        scope_set(rt, env, "caller", 6, cv);
        tv_print(rt->out, tpl_call(rt, fn, &args, env));
        return EX_OK;
    }
    case N_FILTERBLOCK: {
        tv body = capture(rt, sc, n->v, n->nv, "a filter block");
        tv_print(rt->out, eval_filter(rt, sc, body, n->a));
        return EX_OK;
    }
    case N_BREAK: return EX_BREAK;
    case N_CONTINUE: return EX_CONTINUE;
    default: FAIL_AT(n, "an expression cannot be used as a statement");
    }
}

static int exec_body(tpl_rt *rt, tpl_scope *sc, tpl_node *const *v, int nv) {
    for (int i = 0; i < nv; i++) {
        enter(rt, v[i]);
        int code = exec_node(rt, sc, v[i]);
        rt->depth--;
        if (code != EX_OK) return code;
    }
    return EX_OK;
}

/* ---- public API ----------------------------------------------------------- */
kw_template *kw_template_parse_n(const char *src, size_t len, kw_err *err) {
    if (!src) { kw_err_set(err, "template: no text"); return NULL; }
    kw_template *t = calloc(1, sizeof *t);
    if (!t) { kw_err_set(err, "template: out of memory"); return NULL; }
    /* parsing needs memory proportional to the text; 64x bounds hostile input */
    size_t cap = len * 64 + ((size_t)4 << 20);
    tpl_arena_init(&t->ar, cap, &t->fail);
    if (setjmp(t->fail.jb)) {
        kw_err_set(err, "template: %s", t->fail.msg);
        tpl_arena_free(&t->ar);
        free(t);
        return NULL;
    }
    char *copy = tpl_strndup(&t->ar, src, len);
    t->map = tpl_srcmap_new(&t->ar, copy, len);
    tpl_toks toks;
    tpl_lex(&t->ar, t->map, &toks);
    tpl_parse(&t->ar, &toks, &t->body);
    return t;
}

kw_template *kw_template_parse(const char *src, kw_err *err) {
    return kw_template_parse_n(src, src ? strlen(src) : 0, err);
}

void kw_template_free(kw_template *t) {
    if (!t) return;
    tpl_arena_free(&t->ar);
    free(t);
}

void kw_template_output_free(char *out) { kw_mem_free(out); }

int kw_template_render(const kw_template *t, const cJSON *context, char **out, kw_err *err) {
    return kw_template_render_ex(t, context, NULL, out, NULL, err);
}

int kw_template_render_ex(const kw_template *t, const cJSON *context, const kw_template_limits *limits,
                          char **out, size_t *out_len, kw_err *err) {
    if (out) *out = NULL;
    if (out_len) *out_len = 0;
    if (!t || !out) return kw_err_set(err, "template: bad arguments");
    if (context && !cJSON_IsObject(context)) return kw_err_set(err, "template: the context must be a JSON object");
    kw_template_limits lim = limits ? *limits : kw_template_default_limits();
    kw_template_limits def = kw_template_default_limits();
    if (!lim.max_output_bytes) lim.max_output_bytes = def.max_output_bytes;
    if (!lim.max_memory_bytes) lim.max_memory_bytes = def.max_memory_bytes;
    if (!lim.max_steps) lim.max_steps = def.max_steps;
    if (lim.max_depth <= 0) lim.max_depth = def.max_depth;

    /* heap-held so nothing the render changes lives in a local across setjmp */
    struct { tpl_fail fail; tpl_arena ar; tpl_rt rt; } *st = calloc(1, sizeof *st);
    if (!st) return kw_err_set(err, "template: out of memory");
    tpl_arena_init(&st->ar, lim.max_memory_bytes, &st->fail);
    st->rt.ar = &st->ar;
    st->rt.fail = &st->fail;
    st->rt.lim = lim;
    st->rt.map = t->map;
    if (setjmp(st->fail.jb)) {
        kw_err_set(err, "template: %s", st->fail.msg);
        tpl_arena_free(&st->ar);
        free(st);
        return -1;
    }
    tpl_rt *rt = &st->rt;
    tpl_scope *globals = scope_new(rt, NULL);
    tpl_install_globals(rt, globals);
    if (context)
        for (const cJSON *c = context->child; c; c = c->next) {
            const char *k = c->string ? c->string : "";
            scope_set(rt, globals, k, strlen(k), tv_from_json(&st->ar, c));
        }
    tpl_scope *top = scope_new(rt, globals);
    tpl_buf buf;
    tpl_buf_init(&buf, &st->ar, lim.max_output_bytes);
    rt->out = &buf;
    int code = exec_body(rt, top, t->body.v, t->body.n);
    if (code != EX_OK) tpl_failf(&st->fail, "'break' or 'continue' outside a loop");
    char *res = kw_mem_alloc(KW_MEM_SERVER, buf.n + 1);
    if (!res) tpl_failf(&st->fail, "out of memory for the rendered text (%zu bytes)", buf.n);
    if (buf.n) memcpy(res, buf.p, buf.n);
    res[buf.n] = 0;
    *out = res;
    if (out_len) *out_len = buf.n;
    tpl_arena_free(&st->ar);
    free(st);
    return 0;
}
