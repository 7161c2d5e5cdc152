/* value.c - runtime values of the chat-template interpreter.
 *
 * Owns: constructing strings, lists, ordered dicts and namespaces in the
 * render arena; importing a cJSON context; truthiness; the three ways a value
 * becomes text (printed by {{ }}, JavaScript String() as `+`/`~` use it, and
 * JSON as tojson writes it, identical to @huggingface/jinja and so to Python's
 * json.dumps(ensure_ascii=False) except that floats with an integral value
 * print without ".0"); equality (== is JavaScript loose equality of the
 * payloads, `in`/unique use strict equality) and ordering for sorts. */
#include "template/tpl.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

tstr *tstr_new(tpl_arena *a, const char *s, size_t n) {
    tstr *t = tpl_alloc(a, sizeof(tstr) + n + 1);
    t->len = n;
    if (n) memcpy(t->s, s, n);
    t->s[n] = 0;
    return t;
}

tv tv_strv(tstr *s) { tv v = {TV_STR, {0}}; v.u.s = s; return v; }
tv tv_str(tpl_arena *a, const char *s, size_t n) { return tv_strv(tstr_new(a, s, n)); }
tv tv_cstr(tpl_arena *a, const char *s) { return tv_str(a, s, strlen(s)); }

tv tv_list(tpl_arena *a, size_t cap) {
    tv v = {TV_LIST, {0}};
    v.u.l = tpl_alloc(a, sizeof(tlist));
    if (cap) { v.u.l->v = tpl_alloc(a, cap * sizeof(tv)); v.u.l->cap = cap; }
    return v;
}

tv tv_dict(tpl_arena *a, size_t cap) {
    tv v = {TV_DICT, {0}};
    v.u.d = tpl_alloc(a, sizeof(tdict));
    if (cap) {
        v.u.d->k = tpl_alloc(a, cap * sizeof(tstr *));
        v.u.d->v = tpl_alloc(a, cap * sizeof(tv));
        v.u.d->cap = cap;
    }
    return v;
}

tv tv_ns(tpl_arena *a) { tv v = tv_dict(a, 4); v.t = TV_NS; return v; }

void tlist_push(tpl_arena *a, tlist *l, tv v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        tv *nv = tpl_alloc(a, cap * sizeof(tv));
        if (l->n) memcpy(nv, l->v, l->n * sizeof(tv));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

tv *tdict_get(const tdict *d, const char *k, size_t klen) {
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i]->len == klen && memcmp(d->k[i]->s, k, klen) == 0) return &d->v[i];
    return NULL;
}

void tdict_set_s(tpl_arena *a, tdict *d, tstr *k, tv v) {
    tv *old = tdict_get(d, k->s, k->len);
    if (old) { *old = v; return; }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        tstr **nk = tpl_alloc(a, cap * sizeof(tstr *));
        tv *nv = tpl_alloc(a, cap * sizeof(tv));
        if (d->n) { memcpy(nk, d->k, d->n * sizeof(tstr *)); memcpy(nv, d->v, d->n * sizeof(tv)); }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n] = v;
    d->n++;
}

void tdict_set(tpl_arena *a, tdict *d, const char *k, size_t klen, tv v) {
    tv *old = tdict_get(d, k, klen);
    if (old) { *old = v; return; }
    tdict_set_s(a, d, tstr_new(a, k, klen), v);
}

bool tv_truthy(tv v) {
    switch (v.t) {
    case TV_UNDEF: case TV_NONE: return false;
    case TV_BOOL: return v.u.b;
    case TV_INT: return v.u.i != 0;
    case TV_FLOAT: return v.u.f != 0 && !isnan(v.u.f);
    case TV_STR: return v.u.s->len > 0;
    case TV_LIST: return v.u.l->n > 0;
    case TV_DICT: return v.u.d->n > 0;
    case TV_NS: case TV_FUNC: return true;
    }
    return false;
}

const char *tv_type_name(tv v) {
    static const char *names[] = {"undefined", "none", "boolean", "integer", "float", "string",
                                  "list", "dict", "namespace", "function"};
    return names[v.t];
}

bool tv_is_numeric(tv v) { return v.t == TV_INT || v.t == TV_FLOAT || v.t == TV_BOOL; }
double tv_num(tv v) {
    return v.t == TV_INT ? (double)v.u.i : v.t == TV_FLOAT ? v.u.f : v.t == TV_BOOL ? (v.u.b ? 1.0 : 0.0) : 0.0;
}

static tv from_json(tpl_arena *a, const cJSON *j, int depth) {
    if (depth > 1000) tpl_failf(a->fail, "context JSON nests too deeply");
    if (!j || cJSON_IsNull(j)) return tv_none();
    if (cJSON_IsBool(j)) return tv_bool(cJSON_IsTrue(j));
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (isfinite(d) && d == floor(d) && fabs(d) < 9.2e18) return tv_int((int64_t)d);
        return tv_float(d);
    }
    if (cJSON_IsString(j)) return tv_cstr(a, j->valuestring ? j->valuestring : "");
    if (cJSON_IsArray(j)) {
        tv l = tv_list(a, (size_t)cJSON_GetArraySize(j));
        for (const cJSON *c = j->child; c; c = c->next) tlist_push(a, l.u.l, from_json(a, c, depth + 1));
        return l;
    }
    if (cJSON_IsObject(j)) {
        tv d = tv_dict(a, (size_t)cJSON_GetArraySize(j));
        for (const cJSON *c = j->child; c; c = c->next) {
            const char *k = c->string ? c->string : "";
            tdict_set(a, d.u.d, k, strlen(k), from_json(a, c, depth + 1));
        }
        return d;
    }
    return tv_undef();
}

tv tv_from_json(tpl_arena *a, const cJSON *j) { return from_json(a, j, 0); }

/* JavaScript Number.prototype.toString() for a double */
void tpl_js_number(tpl_buf *b, double x) {
    if (isnan(x)) { tpl_buf_puts(b, "NaN"); return; }
    if (isinf(x)) { tpl_buf_puts(b, x < 0 ? "-Infinity" : "Infinity"); return; }
    if (x == 0) { tpl_buf_puts(b, "0"); return; }
    char tmp[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, x);
        if (strtod(tmp, NULL) == x) break;
    }
    /* tmp = [-]d[.ddd]e[+-]XX ; collect digits and exponent */
    const char *p = tmp;
    bool neg = *p == '-';
    if (neg) p++;
    char digits[24];
    int k = 0;
    for (; *p && *p != 'e'; p++) if (*p >= '0' && *p <= '9') digits[k++] = *p;
    while (k > 1 && digits[k - 1] == '0') k--;
    digits[k] = 0;
    int e = atoi(p + 1);
    int n = e + 1;   /* position of the decimal point */
    if (neg) tpl_buf_putc(b, '-');
    if (k <= n && n <= 21) {
        tpl_buf_put(b, digits, (size_t)k);
        for (int i = 0; i < n - k; i++) tpl_buf_putc(b, '0');
    } else if (0 < n && n <= 21) {
        tpl_buf_put(b, digits, (size_t)n);
        tpl_buf_putc(b, '.');
        tpl_buf_put(b, digits + n, (size_t)(k - n));
    } else if (-6 < n && n <= 0) {
        tpl_buf_puts(b, "0.");
        for (int i = 0; i < -n; i++) tpl_buf_putc(b, '0');
        tpl_buf_put(b, digits, (size_t)k);
    } else {
        tpl_buf_putc(b, digits[0]);
        if (k > 1) { tpl_buf_putc(b, '.'); tpl_buf_put(b, digits + 1, (size_t)(k - 1)); }
        tpl_buf_printf(b, "e%c%d", n - 1 >= 0 ? '+' : '-', abs(n - 1));
    }
}

static void print_float(tpl_buf *b, double f) {
    if (f == 0 && signbit(f)) { tpl_buf_puts(b, "-0.0"); return; }
    if (isfinite(f) && f == floor(f) && fabs(f) < 1e21) { tpl_buf_printf(b, "%.1f", f); return; }
    tpl_js_number(b, f);
}

/* RuntimeValue.toString() of @huggingface/jinja */
static void to_string(tpl_buf *b, tv v) {
    switch (v.t) {
    case TV_UNDEF: tpl_buf_puts(b, "undefined"); break;
    case TV_NONE: tpl_buf_puts(b, "null"); break;
    case TV_BOOL: tpl_buf_puts(b, v.u.b ? "true" : "false"); break;
    case TV_INT: tpl_buf_printf(b, "%lld", (long long)v.u.i); break;
    case TV_FLOAT: print_float(b, v.u.f); break;
    case TV_STR: tpl_buf_put(b, v.u.s->s, v.u.s->len); break;
    case TV_LIST: case TV_DICT: case TV_NS: {
        tpl_json_opts o = {-1, false, false, false, NULL, NULL};
        tv_json(NULL, b, v, &o, 0);
        break;
    }
    case TV_FUNC: tpl_buf_puts(b, "[function]"); break;
    }
}

void tv_print(tpl_buf *b, tv v) {
    if (v.t == TV_UNDEF || v.t == TV_NONE) return;
    to_string(b, v);
}

void tv_jsstr(tpl_buf *b, tv v) {
    switch (v.t) {
    case TV_FLOAT: tpl_js_number(b, v.u.f); break;
    case TV_LIST:
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) tpl_buf_putc(b, ',');
            to_string(b, v.u.l->v[i]);
        }
        break;
    case TV_DICT: case TV_NS: tpl_buf_puts(b, "[object Map]"); break;
    default: to_string(b, v); break;
    }
}

void tpl_json_string(tpl_buf *b, const char *s, size_t n, bool ensure_ascii) {
    tpl_buf_putc(b, '"');
    size_t run = 0;   /* start of a run of bytes copied as is */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char ubuf[16], letter = tpl_escape_letter((char)c);
        if (letter) { snprintf(ubuf, sizeof ubuf, "\\%c", letter); esc = ubuf; }
        else if (c < 0x20 || (ensure_ascii && c == 0x7f)) { snprintf(ubuf, sizeof ubuf, "\\u%04x", c); esc = ubuf; }
        if (!esc && ensure_ascii && c >= 0x80) {
            size_t l = tpl_utf8_len(c);
            uint32_t cp = 0xFFFD;
            if (i + l <= n && l > 1) {
                cp = c & (l == 2 ? 0x1F : l == 3 ? 0x0F : 0x07);
                for (size_t k = 1; k < l; k++) cp = (cp << 6) | ((unsigned char)s[i + k] & 0x3F);
            } else l = 1;
            tpl_buf_put(b, s + run, i - run);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(ubuf, sizeof ubuf, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else snprintf(ubuf, sizeof ubuf, "\\u%04x", cp);
            tpl_buf_puts(b, ubuf);
            i += l - 1;
            run = i + 1;
            continue;
        }
        if (esc) {
            tpl_buf_put(b, s + run, i - run);
            tpl_buf_puts(b, esc);
            run = i + 1;
        }
    }
    tpl_buf_put(b, s + run, n - run);
    tpl_buf_putc(b, '"');
}

static void json_pad(tpl_buf *b, int indent, int depth) {
    tpl_buf_putc(b, '\n');
    for (int i = 0; i < indent * depth; i++) tpl_buf_putc(b, ' ');
}

static int key_cmp(const void *x, const void *y) {
    const tstr *a = *(tstr *const *)x, *b = *(tstr *const *)y;
    size_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->s, b->s, n);
    return c ? c : (a->len < b->len ? -1 : a->len > b->len);
}

void tv_json(tpl_rt *rt, tpl_buf *b, tv v, const tpl_json_opts *o, int depth) {
    if (depth > 512) {
        if (rt) tpl_rt_fail(rt, "value nests too deeply for tojson");
        tpl_failf(b->ar->fail, "value nests too deeply for tojson");
    }
    bool pretty = o->indent > 0;
    const char *item_sep = o->item_sep ? o->item_sep : pretty ? "," : ", ";
    const char *key_sep = o->key_sep ? o->key_sep : ": ";
    switch (v.t) {
    case TV_UNDEF: tpl_buf_puts(b, o->undef_as_null ? "null" : "undefined"); return;
    case TV_NONE: tpl_buf_puts(b, "null"); return;
    case TV_BOOL: tpl_buf_puts(b, v.u.b ? "true" : "false"); return;
    case TV_INT: tpl_buf_printf(b, "%lld", (long long)v.u.i); return;
    case TV_FLOAT:
        if (!isfinite(v.u.f)) tpl_buf_puts(b, "null");
        else tpl_js_number(b, v.u.f);
        return;
    case TV_STR: tpl_json_string(b, v.u.s->s, v.u.s->len, o->ensure_ascii); return;
    case TV_LIST: {
        const tlist *l = v.u.l;
        tpl_buf_putc(b, '[');
        for (size_t i = 0; i < l->n; i++) {
            if (i) tpl_buf_puts(b, item_sep);
            if (pretty) json_pad(b, o->indent, depth + 1);
            tv_json(rt, b, l->v[i], o, depth + 1);
        }
        if (pretty && l->n) json_pad(b, o->indent, depth);
        tpl_buf_putc(b, ']');
        return;
    }
    case TV_DICT: case TV_NS: {
        const tdict *d = v.u.d;
        size_t *order = NULL;
        if (o->sort_keys && d->n > 1) {
            /* sort a copy of the keys, then look values up */
            tstr **keys = tpl_alloc(b->ar, d->n * sizeof(tstr *));
            memcpy(keys, d->k, d->n * sizeof(tstr *));
            qsort(keys, d->n, sizeof(tstr *), key_cmp);
            order = tpl_alloc(b->ar, d->n * sizeof(size_t));
            for (size_t i = 0; i < d->n; i++)
                for (size_t j = 0; j < d->n; j++) if (d->k[j] == keys[i]) { order[i] = j; break; }
        }
        tpl_buf_putc(b, '{');
        for (size_t i = 0; i < d->n; i++) {
            size_t j = order ? order[i] : i;
            if (i) tpl_buf_puts(b, item_sep);
            if (pretty) json_pad(b, o->indent, depth + 1);
            tpl_json_string(b, d->k[j]->s, d->k[j]->len, o->ensure_ascii);
            tpl_buf_puts(b, key_sep);
            tv_json(rt, b, d->v[j], o, depth + 1);
        }
        if (pretty && d->n) json_pad(b, o->indent, depth);
        tpl_buf_putc(b, '}');
        return;
    }
    case TV_FUNC:
        if (rt) tpl_rt_fail(rt, "cannot convert a function to JSON");
        tpl_buf_puts(b, "null");
        return;
    }
}

/* JavaScript Number(string) */
static bool js_str_to_num(const tstr *s, double *out) {
    size_t st = 0, en = s->len, l;
    while (st < en && (l = tpl_ws_at(s->s, st, en)) > 0) st += l;
    while (en > st && (l = tpl_ws_before(s->s, en)) > 0) en -= l;
    if (st == en) { *out = 0; return true; }
    char tmp[64];
    if (en - st >= sizeof tmp) return false;
    memcpy(tmp, s->s + st, en - st);
    tmp[en - st] = 0;
    for (char *p = tmp; *p; p++) if (*p == 'n' || *p == 'N' || *p == 'i' || *p == 'I') return false;
    char *end;
    *out = strtod(tmp, &end);
    return *end == 0;
}

bool tv_loose_eq(tv a, tv b) {
    bool an = a.t == TV_UNDEF || a.t == TV_NONE, bn = b.t == TV_UNDEF || b.t == TV_NONE;
    if (an || bn) return an && bn;
    if (tv_is_numeric(a) && tv_is_numeric(b)) return tv_num(a) == tv_num(b);
    if (a.t == TV_STR && b.t == TV_STR) return a.u.s->len == b.u.s->len && memcmp(a.u.s->s, b.u.s->s, a.u.s->len) == 0;
    if ((a.t == TV_STR && tv_is_numeric(b)) || (b.t == TV_STR && tv_is_numeric(a))) {
        double x;
        if (!js_str_to_num(a.t == TV_STR ? a.u.s : b.u.s, &x)) return false;
        return x == tv_num(a.t == TV_STR ? b : a);
    }
    if (a.t != b.t) return false;
    switch (a.t) {
    case TV_LIST: return a.u.l == b.u.l;
    case TV_DICT: case TV_NS: return a.u.d == b.u.d;
    case TV_FUNC: return a.u.fn == b.u.fn;
    default: return false;
    }
}

bool tv_strict_eq(tv a, tv b) {
    bool anum = a.t == TV_INT || a.t == TV_FLOAT, bnum = b.t == TV_INT || b.t == TV_FLOAT;
    if (anum && bnum) return tv_num(a) == tv_num(b);
    if (a.t != b.t) return false;
    switch (a.t) {
    case TV_UNDEF: case TV_NONE: return true;
    case TV_BOOL: return a.u.b == b.u.b;
    case TV_STR: return a.u.s->len == b.u.s->len && memcmp(a.u.s->s, b.u.s->s, a.u.s->len) == 0;
    case TV_LIST: return a.u.l == b.u.l;
    case TV_DICT: case TV_NS: return a.u.d == b.u.d;
    case TV_FUNC: return a.u.fn == b.u.fn;
    default: return false;
    }
}

static int lower_cmp(const tstr *a, const tstr *b) {
    size_t n = a->len < b->len ? a->len : b->len;
    for (size_t i = 0; i < n; i++) {
        unsigned char x = (unsigned char)a->s[i], y = (unsigned char)b->s[i];
        if (x >= 'A' && x <= 'Z') x = (unsigned char)(x + 32);
        if (y >= 'A' && y <= 'Z') y = (unsigned char)(y + 32);
        if (x != y) return x < y ? -1 : 1;
    }
    return a->len < b->len ? -1 : a->len > b->len;
}

int tv_compare(tpl_rt *rt, tv a, tv b, bool case_sensitive) {
    if (a.t == TV_NONE && b.t == TV_NONE) return 0;
    if (a.t == TV_UNDEF && b.t == TV_UNDEF) return 0;
    if (tv_is_numeric(a) && tv_is_numeric(b)) {
        double x = tv_num(a), y = tv_num(b);
        return x < y ? -1 : x > y;
    }
    if (a.t == TV_STR && b.t == TV_STR) {
        if (case_sensitive) return key_cmp(&a.u.s, &b.u.s);
        return lower_cmp(a.u.s, b.u.s);
    }
    tpl_rt_fail(rt, "cannot compare %s with %s", tv_type_name(a), tv_type_name(b));
}
