/* builtins.c - what templates can call: filters, tests, methods, globals.
 *
 * Owns the library of the interpreter, with @huggingface/jinja's semantics
 * (the conformance reference) plus a few Python-Jinja filters HF lacks
 * (round, select/reject, count, map(filter-name), default without arguments):
 *   globals  namespace(), range(), raise_exception(), strftime_now(),
 *            true/false/none and True/False/None
 *   methods  str: upper lower strip lstrip rstrip title capitalize startswith
 *                 endswith split replace, .length
 *            dict: get items keys values dictsort; list: .length
 *   filters  tojson trim length count items selectattr rejectattr select reject
 *            map join upper lower title capitalize replace default first last
 *            list string int float round abs unique sort reverse dictsort
 *            indent safe keys values bool
 *   tests    defined undefined none string mapping iterable sequence number
 *            integer float boolean true false even odd lower upper callable
 *            equalto eq sameas ne in lt le gt ge (the last ones for select/reject) */
#include "template/tpl.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NAME_IS(n, lit) (strcmp((n), (lit)) == 0)

static tv mkfunc(tpl_rt *rt, tfunc_kind kind, const char *name, tpl_builtin_fn fn, tv self) {
    tfunc *f = tpl_alloc(rt->ar, sizeof *f);
    f->kind = kind;
    f->name = name;
    f->fn = fn;
    f->self = self;
    tv v = {TV_FUNC, {0}};
    v.u.fn = f;
    return v;
}

tv *tpl_args_kw(const tpl_args *a, const char *name) {
    return a->kw ? tdict_get(a->kw, name, strlen(name)) : NULL;
}

/* positional i, else keyword `name`, else NULL */
static tv *arg(const tpl_args *a, int i, const char *name) {
    if (i >= 0 && i < a->npos) return &a->pos[i];
    return name ? tpl_args_kw(a, name) : NULL;
}

static tv sbuf_done(tpl_rt *rt, tpl_buf *b) { return tv_str(rt->ar, b->p ? b->p : "", b->n); }

static void newbuf(tpl_rt *rt, tpl_buf *b) { tpl_buf_init(b, rt->ar, rt->lim.max_output_bytes); }

/* ---- string helpers ------------------------------------------------------- */
/* Simple Unicode case mapping for the scripts chat text mostly uses (ASCII,
 * Latin-1, Latin Extended-A, Greek, Cyrillic, full-width Latin); other code
 * points are left as they are. Returns the mapped code point. */
static uint32_t cp_upper(uint32_t c) {
    if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
    if (c == 0xB5) return 0x39C;
    if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 0x20;
    if (c == 0xFF) return 0x178;
    if (c >= 0x100 && c <= 0x17F) {
        if (c == 0x131) return 'I';
        if (c == 0x17F) return 'S';
        if ((c <= 0x137 || (c >= 0x14A && c <= 0x177)) && (c & 1)) return c - 1;
        if (((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) && !(c & 1)) return c - 1;
        return c;
    }
    if (c >= 0x3B1 && c <= 0x3C9) return c == 0x3C2 ? 0x3A3 : c - 0x20;
    if (c == 0x3AC) return 0x386;
    if (c >= 0x3AD && c <= 0x3AF) return c - 0x25;
    if (c == 0x3CC) return 0x38C;
    if (c == 0x3CD || c == 0x3CE) return c - 0x3F;
    if (c >= 0x430 && c <= 0x44F) return c - 0x20;
    if (c >= 0x450 && c <= 0x45F) return c - 0x50;
    if (((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF)) && (c & 1)) return c - 1;
    if (c >= 0xFF41 && c <= 0xFF5A) return c - 0x20;
    return c;
}

static uint32_t cp_lower(uint32_t c) {
    if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
    if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 0x20;
    if (c == 0x178) return 0xFF;
    if (c >= 0x100 && c <= 0x17F) {
        if ((c <= 0x137 || (c >= 0x14A && c <= 0x177)) && !(c & 1)) return c + 1;
        if (((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) && (c & 1)) return c + 1;
        return c;
    }
    if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 0x20;
    if (c == 0x386) return 0x3AC;
    if (c >= 0x388 && c <= 0x38A) return c + 0x25;
    if (c == 0x38C) return 0x3CC;
    if (c == 0x38E || c == 0x38F) return c + 0x3F;
    if (c >= 0x410 && c <= 0x42F) return c + 0x20;
    if (c >= 0x400 && c <= 0x40F) return c + 0x50;
    if (((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF)) && !(c & 1)) return c + 1;
    if (c >= 0xFF21 && c <= 0xFF3A) return c + 0x20;
    return c;
}

/* decodes the code point at s[i] (bad bytes decode as themselves, length 1) */
static uint32_t utf8_at(const char *s, size_t n, size_t i, size_t *len) {
    const unsigned char *u = (const unsigned char *)s;
    size_t l = tpl_utf8_len(u[i]);
    if (l == 1 || i + l > n) { *len = 1; return u[i]; }
    for (size_t k = 1; k < l; k++) if ((u[i + k] & 0xC0) != 0x80) { *len = 1; return u[i]; }
    uint32_t c = u[i] & (l == 2 ? 0x1F : l == 3 ? 0x0F : 0x07);
    for (size_t k = 1; k < l; k++) c = (c << 6) | (u[i + k] & 0x3F);
    *len = l;
    return c;
}

static void put_cp(tpl_buf *b, uint32_t c) {
    char o[4];
    size_t n;
    if (c < 0x80) { o[0] = (char)c; n = 1; }
    else if (c < 0x800) { o[0] = (char)(0xC0 | (c >> 6)); o[1] = (char)(0x80 | (c & 0x3F)); n = 2; }
    else if (c < 0x10000) {
        o[0] = (char)(0xE0 | (c >> 12)); o[1] = (char)(0x80 | ((c >> 6) & 0x3F)); o[2] = (char)(0x80 | (c & 0x3F)); n = 3;
    } else {
        o[0] = (char)(0xF0 | (c >> 18)); o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
        o[2] = (char)(0x80 | ((c >> 6) & 0x3F)); o[3] = (char)(0x80 | (c & 0x3F)); n = 4;
    }
    tpl_buf_put(b, o, n);
}

/* maps code points [from, to) of s into b; mode 0 lower, 1 upper */
static void case_map_into(tpl_buf *b, const tstr *s, size_t from, size_t to, int mode) {
    size_t i = from;
    while (i < to) {
        size_t l;
        uint32_t c = utf8_at(s->s, to, i, &l);
        if (l == 1 && c >= 0x80) tpl_buf_put(b, s->s + i, 1);          /* invalid byte: keep */
        else if (mode == 1 && c == 0xDF) tpl_buf_put(b, "SS", 2);       /* ß */
        else put_cp(b, mode == 1 ? cp_upper(c) : cp_lower(c));
        i += l;
    }
}

static tv str_case(tpl_rt *rt, const tstr *s, int mode) {  /* 0 lower, 1 upper */
    tpl_buf b;
    newbuf(rt, &b);
    case_map_into(&b, s, 0, s->len, mode);
    return sbuf_done(rt, &b);
}

static bool str_is_case(const tstr *s, int mode) {   /* s == lower(s) / upper(s) */
    for (size_t i = 0; i < s->len;) {
        size_t l;
        uint32_t c = utf8_at(s->s, s->len, i, &l);
        if (mode == 1 && c == 0xDF) return false;
        if ((mode == 1 ? cp_upper(c) : cp_lower(c)) != c) return false;
        i += l;
    }
    return true;
}

static bool ascii_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* HF title(): upper-case a word character that starts a word (\b\w) */
static tv str_title(tpl_rt *rt, const tstr *s) {
    tstr *o = tstr_new(rt->ar, s->s, s->len);
    for (size_t i = 0; i < o->len; i++) {
        char c = o->s[i];
        if (ascii_word(c) && (i == 0 || !ascii_word(o->s[i - 1])) && c >= 'a' && c <= 'z') o->s[i] = (char)(c - 32);
    }
    return tv_strv(o);
}

static tv str_capitalize(tpl_rt *rt, const tstr *s) {   /* HF: first character upper, the rest as is */
    if (!s->len) return tv_strv((tstr *)s);
    size_t l;
    utf8_at(s->s, s->len, 0, &l);
    tpl_buf b;
    newbuf(rt, &b);
    case_map_into(&b, s, 0, l, 1);
    tpl_buf_put(&b, s->s + l, s->len - l);
    return sbuf_done(rt, &b);
}

static bool in_charset(const tstr *set, const char *s, size_t l) {
    for (size_t i = 0; i < set->len;) {
        size_t k = tpl_utf8_len((unsigned char)set->s[i]);
        if (k == l && i + k <= set->len && memcmp(set->s + i, s, l) == 0) return true;
        i += k;
    }
    return false;
}

/* mode bit 1 = left, 2 = right; chars NULL = JavaScript whitespace */
static tv str_strip(tpl_rt *rt, const tstr *s, int mode, const tstr *chars) {
    size_t st = 0, en = s->len;
    if (mode & 1) {
        while (st < en) {
            size_t l = chars ? tpl_utf8_len((unsigned char)s->s[st]) : tpl_ws_at(s->s, st, en);
            if (chars && (st + l > en || !in_charset(chars, s->s + st, l))) break;
            if (!l) break;
            st += l;
        }
    }
    if (mode & 2) {
        while (en > st) {
            size_t l;
            if (chars) {
                size_t b = en - 1;
                while (b > st && ((unsigned char)s->s[b] & 0xC0) == 0x80) b--;
                l = en - b;
                if (!in_charset(chars, s->s + b, l)) break;
            } else {
                l = tpl_ws_before(s->s, en);
                if (!l) break;
            }
            en -= l;
        }
    }
    return tv_str(rt->ar, s->s + st, en - st);
}

static bool has_prefix(const tstr *s, const tstr *p) { return p->len <= s->len && memcmp(s->s, p->s, p->len) == 0; }
static bool has_suffix(const tstr *s, const tstr *p) {
    return p->len <= s->len && memcmp(s->s + s->len - p->len, p->s, p->len) == 0;
}

static tv str_affix(tpl_rt *rt, tv self, const tpl_args *a, bool prefix) {
    const char *nm = prefix ? "startswith" : "endswith";
    if (a->npos < 1) tpl_rt_fail(rt, "%s() needs an argument", nm);
    tv p = a->pos[0];
    if (p.t == TV_STR) return tv_bool(prefix ? has_prefix(self.u.s, p.u.s) : has_suffix(self.u.s, p.u.s));
    if (p.t == TV_LIST) {
        for (size_t i = 0; i < p.u.l->n; i++) {
            tv e = p.u.l->v[i];
            if (e.t != TV_STR) tpl_rt_fail(rt, "%s() tuple elements must be strings", nm);
            if (prefix ? has_prefix(self.u.s, e.u.s) : has_suffix(self.u.s, e.u.s)) return tv_bool(true);
        }
        return tv_bool(false);
    }
    tpl_rt_fail(rt, "%s() argument must be a string or a tuple of strings", nm);
}

static tv m_startswith(tpl_rt *rt, tv self, const tpl_args *a) { return str_affix(rt, self, a, true); }
static tv m_endswith(tpl_rt *rt, tv self, const tpl_args *a) { return str_affix(rt, self, a, false); }
static tv m_upper(tpl_rt *rt, tv self, const tpl_args *a) { (void)a; return str_case(rt, self.u.s, 1); }
static tv m_lower(tpl_rt *rt, tv self, const tpl_args *a) { (void)a; return str_case(rt, self.u.s, 0); }
static tv m_title(tpl_rt *rt, tv self, const tpl_args *a) { (void)a; return str_title(rt, self.u.s); }
static tv m_capitalize(tpl_rt *rt, tv self, const tpl_args *a) { (void)a; return str_capitalize(rt, self.u.s); }

static const tstr *strip_chars(tpl_rt *rt, const tpl_args *a) {
    tv *c = arg(a, 0, "chars");
    if (!c || c->t == TV_NONE || c->t == TV_UNDEF) return NULL;
    if (c->t != TV_STR) tpl_rt_fail(rt, "strip() argument must be a string or none");
    return c->u.s;
}
static tv m_strip(tpl_rt *rt, tv self, const tpl_args *a) { return str_strip(rt, self.u.s, 3, strip_chars(rt, a)); }
static tv m_lstrip(tpl_rt *rt, tv self, const tpl_args *a) { return str_strip(rt, self.u.s, 1, strip_chars(rt, a)); }
static tv m_rstrip(tpl_rt *rt, tv self, const tpl_args *a) { return str_strip(rt, self.u.s, 2, strip_chars(rt, a)); }

static tv m_split(tpl_rt *rt, tv self, const tpl_args *a) {
    tv *sep = arg(a, 0, "sep");
    tv *maxv = arg(a, 1, "maxsplit");
    if (sep && sep->t != TV_STR && sep->t != TV_NONE) tpl_rt_fail(rt, "split() separator must be a string or none");
    if (maxv && maxv->t != TV_INT) tpl_rt_fail(rt, "split() maxsplit must be an integer");
    int64_t maxsplit = maxv ? maxv->u.i : -1;
    const tstr *s = self.u.s;
    tv out = tv_list(rt->ar, 0);
    if (!sep || sep->t == TV_NONE) {
        size_t i = 0, n = s->len, l;
        while (i < n && (l = tpl_ws_at(s->s, i, n)) > 0) i += l;
        while (i < n) {
            tpl_step(rt);
            if (maxsplit != -1 && (int64_t)out.u.l->n >= maxsplit) {
                tlist_push(rt->ar, out.u.l, tv_str(rt->ar, s->s + i, n - i));
                break;
            }
            size_t st = i;
            while (i < n && tpl_ws_at(s->s, i, n) == 0) i += tpl_utf8_len((unsigned char)s->s[i]);
            if (i > n) i = n;
            tlist_push(rt->ar, out.u.l, tv_str(rt->ar, s->s + st, i - st));
            size_t ws_start = i;
            while (i < n && (l = tpl_ws_at(s->s, i, n)) > 0) i += l;
            (void)ws_start;
        }
        return out;
    }
    const tstr *sp = sep->u.s;
    if (sp->len == 0) tpl_rt_fail(rt, "split(): empty separator");
    size_t i = 0;
    for (;;) {
        tpl_step(rt);
        const char *hit = (maxsplit == -1 || (int64_t)out.u.l->n < maxsplit)
                              ? memmem(s->s + i, s->len - i, sp->s, sp->len) : NULL;
        if (!hit) { tlist_push(rt->ar, out.u.l, tv_str(rt->ar, s->s + i, s->len - i)); break; }
        size_t at = (size_t)(hit - s->s);
        tlist_push(rt->ar, out.u.l, tv_str(rt->ar, s->s + i, at - i));
        i = at + sp->len;
    }
    return out;
}

static tv str_replace(tpl_rt *rt, const tstr *s, const tstr *old, const tstr *new_, int64_t count) {
    if (count == 0) return tv_strv((tstr *)s);
    tpl_buf b;
    newbuf(rt, &b);
    int64_t left = count < 0 ? INT64_MAX : count;
    if (old->len == 0) {
        /* insert at every code point boundary, start and end included */
        size_t i = 0;
        for (;;) {
            tpl_step(rt);
            if (left > 0) { tpl_buf_put(&b, new_->s, new_->len); left--; }
            if (i >= s->len) break;
            size_t l = tpl_utf8_len((unsigned char)s->s[i]);
            if (i + l > s->len) l = s->len - i;
            tpl_buf_put(&b, s->s + i, l);
            i += l;
        }
        return sbuf_done(rt, &b);
    }
    size_t i = 0;
    while (i <= s->len) {
        tpl_step(rt);
        const char *hit = left > 0 ? memmem(s->s + i, s->len - i, old->s, old->len) : NULL;
        if (!hit) { tpl_buf_put(&b, s->s + i, s->len - i); break; }
        size_t at = (size_t)(hit - s->s);
        tpl_buf_put(&b, s->s + i, at - i);
        tpl_buf_put(&b, new_->s, new_->len);
        left--;
        i = at + old->len;
    }
    return sbuf_done(rt, &b);
}

static tv m_replace(tpl_rt *rt, tv self, const tpl_args *a) {
    if (a->npos < 2) tpl_rt_fail(rt, "replace() needs two arguments");
    tv o = a->pos[0], n = a->pos[1];
    if (o.t != TV_STR || n.t != TV_STR) tpl_rt_fail(rt, "replace() arguments must be strings");
    tv *c = arg(a, 2, "count");
    if (c && c->t != TV_INT && c->t != TV_NONE) tpl_rt_fail(rt, "replace() count must be an integer or none");
    return str_replace(rt, self.u.s, o.u.s, n.u.s, c && c->t == TV_INT ? c->u.i : -1);
}

/* ---- dict methods --------------------------------------------------------- */
static tv dict_items(tpl_rt *rt, const tdict *d) {
    tv out = tv_list(rt->ar, d->n);
    for (size_t i = 0; i < d->n; i++) {
        tv pair = tv_list(rt->ar, 2);
        tlist_push(rt->ar, pair.u.l, tv_strv(d->k[i]));
        tlist_push(rt->ar, pair.u.l, d->v[i]);
        tlist_push(rt->ar, out.u.l, pair);
    }
    return out;
}

static tv m_items(tpl_rt *rt, tv self, const tpl_args *a) { (void)a; return dict_items(rt, self.u.d); }
static tv m_keys(tpl_rt *rt, tv self, const tpl_args *a) {
    (void)a;
    tv out = tv_list(rt->ar, self.u.d->n);
    for (size_t i = 0; i < self.u.d->n; i++) tlist_push(rt->ar, out.u.l, tv_strv(self.u.d->k[i]));
    return out;
}
static tv m_values(tpl_rt *rt, tv self, const tpl_args *a) {
    (void)a;
    tv out = tv_list(rt->ar, self.u.d->n);
    for (size_t i = 0; i < self.u.d->n; i++) tlist_push(rt->ar, out.u.l, self.u.d->v[i]);
    return out;
}
static tv m_get(tpl_rt *rt, tv self, const tpl_args *a) {
    if (a->npos < 1 || a->pos[0].t != TV_STR) tpl_rt_fail(rt, "get() key must be a string");
    tv *v = tdict_get(self.u.d, a->pos[0].u.s->s, a->pos[0].u.s->len);
    if (v) return *v;
    return a->npos > 1 ? a->pos[1] : tv_none();
}

/* stable merge sort of tv with a comparison that may fail (unwinds) */
typedef struct { tpl_rt *rt; bool case_sensitive, reverse; const char *attr; size_t attr_len; int by_value; } sort_ctx;

static tv sort_key(const sort_ctx *c, tv v) {
    if (c->by_value >= 0) return v.u.l->v[c->by_value];   /* dictsort pairs */
    if (c->attr) return tpl_attr_path(v, c->attr, c->attr_len);
    return v;
}

static int sort_cmp(const sort_ctx *c, tv a, tv b) {
    tpl_step(c->rt);
    int r = tv_compare(c->rt, sort_key(c, a), sort_key(c, b), c->case_sensitive);
    return c->reverse ? -r : r;
}

static void merge_sort(const sort_ctx *c, tv *v, tv *tmp, size_t n) {
    if (n < 2) return;
    size_t h = n / 2;
    merge_sort(c, v, tmp, h);
    merge_sort(c, v + h, tmp, n - h);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = sort_cmp(c, v[j], v[i]) < 0 ? v[j++] : v[i++];
    while (i < h) tmp[k++] = v[i++];
    while (j < n) tmp[k++] = v[j++];
    memcpy(v, tmp, n * sizeof(tv));
}

static tv sorted_copy(tpl_rt *rt, const tlist *l, const sort_ctx *c) {
    tv out = tv_list(rt->ar, l->n);
    for (size_t i = 0; i < l->n; i++) tlist_push(rt->ar, out.u.l, l->v[i]);
    tv *tmp = tpl_alloc(rt->ar, (l->n + 1) * sizeof(tv));
    merge_sort(c, out.u.l->v, tmp, l->n);
    return out;
}

static bool opt_bool(tpl_rt *rt, tv *v, bool def, const char *what) {
    if (!v) return def;
    if (v->t != TV_BOOL) tpl_rt_fail(rt, "%s must be a boolean", what);
    return v->u.b;
}

static tv m_dictsort(tpl_rt *rt, tv self, const tpl_args *a) {
    sort_ctx c = {rt, false, false, NULL, 0, 0};
    c.case_sensitive = opt_bool(rt, arg(a, 0, "case_sensitive"), false, "case_sensitive");
    tv *by = arg(a, 1, "by");
    if (by) {
        if (by->t != TV_STR) tpl_rt_fail(rt, "by must be a string");
        if (strcmp(by->u.s->s, "value") == 0) c.by_value = 1;
        else if (strcmp(by->u.s->s, "key") != 0) tpl_rt_fail(rt, "by must be either 'key' or 'value'");
    }
    c.reverse = opt_bool(rt, arg(a, 2, "reverse"), false, "reverse");
    tv items = dict_items(rt, self.u.d);
    return sorted_copy(rt, items.u.l, &c);
}

tv tpl_method(tpl_rt *rt, tv obj, const char *name, size_t len) {
    char nm[24];
    if (len >= sizeof nm) return tv_undef();
    memcpy(nm, name, len);
    nm[len] = 0;
    if (obj.t == TV_STR) {
        static const struct { const char *n; tpl_builtin_fn f; } M[] = {
            {"upper", m_upper}, {"lower", m_lower}, {"strip", m_strip}, {"lstrip", m_lstrip},
            {"rstrip", m_rstrip}, {"title", m_title}, {"capitalize", m_capitalize},
            {"startswith", m_startswith}, {"endswith", m_endswith}, {"split", m_split}, {"replace", m_replace},
        };
        if (NAME_IS(nm, "length")) {
            size_t c = 0;
            for (size_t i = 0; i < obj.u.s->len; i += tpl_utf8_len((unsigned char)obj.u.s->s[i])) c++;
            return tv_int((int64_t)c);
        }
        for (size_t i = 0; i < sizeof M / sizeof M[0]; i++)
            if (NAME_IS(nm, M[i].n)) return mkfunc(rt, FN_METHOD, M[i].n, M[i].f, obj);
        return tv_undef();
    }
    if (obj.t == TV_DICT) {
        static const struct { const char *n; tpl_builtin_fn f; } M[] = {
            {"get", m_get}, {"items", m_items}, {"keys", m_keys}, {"values", m_values}, {"dictsort", m_dictsort},
        };
        for (size_t i = 0; i < sizeof M / sizeof M[0]; i++)
            if (NAME_IS(nm, M[i].n)) return mkfunc(rt, FN_METHOD, M[i].n, M[i].f, obj);
        return tv_undef();
    }
    if (obj.t == TV_LIST && NAME_IS(nm, "length")) return tv_int((int64_t)obj.u.l->n);
    return tv_undef();
}

/* ---- globals -------------------------------------------------------------- */
static tv g_raise(tpl_rt *rt, tv self, const tpl_args *a) {
    (void)self;
    tpl_buf b;
    tpl_buf_init(&b, rt->ar, 400);
    if (a->npos > 0) {
        tpl_buf lim;
        newbuf(rt, &lim);
        tv_jsstr(&lim, a->pos[0]);
        tpl_buf_put(&b, lim.p ? lim.p : "", lim.n > 400 ? 400 : lim.n);
    } else tpl_buf_puts(&b, "undefined");
    tpl_rt_fail(rt, "%s", b.p ? b.p : "");
}

static tv g_range(tpl_rt *rt, tv self, const tpl_args *a) {
    (void)self;
    if (a->npos < 1 || a->npos > 3) tpl_rt_fail(rt, "range() takes 1 to 3 arguments");
    for (int i = 0; i < a->npos; i++)
        if (!tv_is_numeric(a->pos[i]) || a->pos[i].t == TV_BOOL) tpl_rt_fail(rt, "range() arguments must be numbers");
    double start = 0, stop, step = 1;
    if (a->npos == 1) stop = tv_num(a->pos[0]);
    else { start = tv_num(a->pos[0]); stop = tv_num(a->pos[1]); }
    if (a->npos == 3) step = tv_num(a->pos[2]);
    if (step == 0) tpl_rt_fail(rt, "range() step must not be zero");
    tv out = tv_list(rt->ar, 0);
    for (double i = start; step > 0 ? i < stop : i > stop; i += step) {
        tpl_step(rt);
        tlist_push(rt->ar, out.u.l, i == floor(i) && fabs(i) < 9e18 ? tv_int((int64_t)i) : tv_float(i));
    }
    return out;
}

static tv g_namespace(tpl_rt *rt, tv self, const tpl_args *a) {
    (void)self;
    if (a->npos > 1) tpl_rt_fail(rt, "namespace() takes at most 1 positional argument");
    tv ns = tv_ns(rt->ar);
    if (a->npos == 1) {
        tv src = a->pos[0];
        if (src.t == TV_DICT) {
            for (size_t i = 0; i < src.u.d->n; i++) tdict_set_s(rt->ar, ns.u.d, src.u.d->k[i], src.u.d->v[i]);
        } else if (src.t == TV_LIST) {
            for (size_t i = 0; i < src.u.l->n; i++) {
                tv p = src.u.l->v[i];
                if (p.t != TV_LIST || p.u.l->n != 2 || p.u.l->v[0].t != TV_STR)
                    tpl_rt_fail(rt, "namespace() expects a dict or a list of [key, value] pairs");
                tdict_set_s(rt->ar, ns.u.d, p.u.l->v[0].u.s, p.u.l->v[1]);
            }
        } else tpl_rt_fail(rt, "namespace() cannot take a %s", tv_type_name(src));
    }
    if (a->kw)
        for (size_t i = 0; i < a->kw->n; i++) tdict_set_s(rt->ar, ns.u.d, a->kw->k[i], a->kw->v[i]);
    return ns;
}

static tv g_strftime_now(tpl_rt *rt, tv self, const tpl_args *a) {
    (void)self;
    if (a->npos < 1 || a->pos[0].t != TV_STR) tpl_rt_fail(rt, "strftime_now() needs a format string");
    static const char *mon_short[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    static const char *mon_long[] = {"January", "February", "March", "April", "May", "June", "July",
                                     "August", "September", "October", "November", "December"};
    time_t now = time(NULL);
    struct tm tmv;
    localtime_r(&now, &tmv);
    const tstr *f = a->pos[0].u.s;
    tpl_buf b;
    newbuf(rt, &b);
    for (size_t i = 0; i < f->len; i++) {
        if (f->s[i] == '%' && i + 1 < f->len && strchr("YmdbBHM%", f->s[i + 1])) {
            char c = f->s[++i];
            switch (c) {
            case 'Y': tpl_buf_printf(&b, "%d", tmv.tm_year + 1900); break;
            case 'm': tpl_buf_printf(&b, "%02d", tmv.tm_mon + 1); break;
            case 'd': tpl_buf_printf(&b, "%02d", tmv.tm_mday); break;
            case 'b': tpl_buf_puts(&b, mon_short[tmv.tm_mon]); break;
            case 'B': tpl_buf_puts(&b, mon_long[tmv.tm_mon]); break;
            case 'H': tpl_buf_printf(&b, "%02d", tmv.tm_hour); break;
            case 'M': tpl_buf_printf(&b, "%02d", tmv.tm_min); break;
            default: tpl_buf_putc(&b, '%'); break;
            }
        } else tpl_buf_putc(&b, f->s[i]);
    }
    return sbuf_done(rt, &b);
}

void tpl_install_globals(tpl_rt *rt, tpl_scope *g) {
    tpl_arena *a = rt->ar;
    tdict *d = &g->vars;
    tdict_set(a, d, "false", 5, tv_bool(false));
    tdict_set(a, d, "true", 4, tv_bool(true));
    tdict_set(a, d, "none", 4, tv_none());
    tdict_set(a, d, "False", 5, tv_bool(false));
    tdict_set(a, d, "True", 4, tv_bool(true));
    tdict_set(a, d, "None", 4, tv_none());
    tdict_set(a, d, "raise_exception", 15, mkfunc(rt, FN_BUILTIN, "raise_exception", g_raise, tv_undef()));
    tdict_set(a, d, "range", 5, mkfunc(rt, FN_BUILTIN, "range", g_range, tv_undef()));
    tdict_set(a, d, "namespace", 9, mkfunc(rt, FN_BUILTIN, "namespace", g_namespace, tv_undef()));
    tdict_set(a, d, "strftime_now", 12, mkfunc(rt, FN_BUILTIN, "strftime_now", g_strftime_now, tv_undef()));
}

/* ---- tests ----------------------------------------------------------------- */
bool tpl_apply_test(tpl_rt *rt, tv v, const char *name, const tv *argp) {
    if (NAME_IS(name, "defined")) return v.t != TV_UNDEF;
    if (NAME_IS(name, "undefined")) return v.t == TV_UNDEF;
    if (NAME_IS(name, "none")) return v.t == TV_NONE;
    if (NAME_IS(name, "string")) return v.t == TV_STR;
    if (NAME_IS(name, "mapping")) return v.t == TV_DICT;
    if (NAME_IS(name, "iterable")) return v.t == TV_LIST || v.t == TV_STR;
    if (NAME_IS(name, "sequence")) return v.t == TV_LIST || v.t == TV_DICT || v.t == TV_STR;
    if (NAME_IS(name, "number")) return v.t == TV_INT || v.t == TV_FLOAT;
    if (NAME_IS(name, "integer")) return v.t == TV_INT;
    if (NAME_IS(name, "float")) return v.t == TV_FLOAT;
    if (NAME_IS(name, "boolean")) return v.t == TV_BOOL;
    if (NAME_IS(name, "true")) return v.t == TV_BOOL && v.u.b;
    if (NAME_IS(name, "false")) return v.t == TV_BOOL && !v.u.b;
    if (NAME_IS(name, "callable")) return v.t == TV_FUNC;
    if (NAME_IS(name, "odd") || NAME_IS(name, "even")) {
        if (v.t != TV_INT) tpl_rt_fail(rt, "test '%s' needs an integer, not %s", name, tv_type_name(v));
        bool odd = (v.u.i % 2) != 0;
        return NAME_IS(name, "odd") ? odd : !odd;
    }
    if (NAME_IS(name, "lower") || NAME_IS(name, "upper")) return v.t == TV_STR && str_is_case(v.u.s, NAME_IS(name, "upper"));
    tv other = argp ? *argp : tv_undef();
    if (NAME_IS(name, "equalto") || NAME_IS(name, "eq") || NAME_IS(name, "sameas")) return tv_strict_eq(v, other);
    if (NAME_IS(name, "ne")) return !tv_strict_eq(v, other);
    if (NAME_IS(name, "in")) {   /* Python Jinja's `in` test (used as reject("in", list)) */
        if (other.t == TV_LIST) {
            for (size_t i = 0; i < other.u.l->n; i++) if (tv_strict_eq(other.u.l->v[i], v)) return true;
            return false;
        }
        if (other.t == TV_DICT && v.t == TV_STR) return tdict_get(other.u.d, v.u.s->s, v.u.s->len) != NULL;
        if (other.t == TV_STR && v.t == TV_STR)
            return v.u.s->len == 0 || memmem(other.u.s->s, other.u.s->len, v.u.s->s, v.u.s->len) != NULL;
        tpl_rt_fail(rt, "test 'in' needs a list, dict or string, not %s", tv_type_name(other));
    }
    if (NAME_IS(name, "lt") || NAME_IS(name, "le") || NAME_IS(name, "gt") || NAME_IS(name, "ge")) {
        int c = tv_compare(rt, v, other, true);
        return name[0] == 'l' ? (name[1] == 't' ? c < 0 : c <= 0) : (name[1] == 't' ? c > 0 : c >= 0);
    }
    tpl_rt_fail(rt, "unknown test '%s'", name);
}

/* ---- filters --------------------------------------------------------------- */
tv tpl_str_chars(tpl_rt *rt, const tstr *s) {
    tv out = tv_list(rt->ar, 0);
    for (size_t i = 0; i < s->len;) {
        tpl_step(rt);
        size_t l = tpl_utf8_len((unsigned char)s->s[i]);
        if (i + l > s->len) l = s->len - i;
        tlist_push(rt->ar, out.u.l, tv_str(rt->ar, s->s + i, l));
        i += l;
    }
    return out;
}

tv tpl_attr_path(tv item, const char *path, size_t len) {
    tv cur = item;
    size_t i = 0;
    for (;;) {
        size_t j = i;
        while (j < len && path[j] != '.') j++;
        if (cur.t == TV_DICT || cur.t == TV_NS) {
            tv *v = tdict_get(cur.u.d, path + i, j - i);
            if (!v) return tv_undef();
            cur = *v;
        } else if (cur.t == TV_LIST) {
            char num[24];
            if (j - i == 0 || j - i >= sizeof num) return tv_undef();
            memcpy(num, path + i, j - i);
            num[j - i] = 0;
            char *end;
            long long k = strtoll(num, &end, 10);
            if (end == num || k < 0 || (size_t)k >= cur.u.l->n) return tv_undef();
            cur = cur.u.l->v[k];
        } else return tv_undef();
        if (j >= len) return cur;
        i = j + 1;
    }
}

static tv json_filter(tpl_rt *rt, tv v, const tpl_args *a) {
    tpl_json_opts o = {-1, false, false, true, NULL, NULL};
    tv *ind = tpl_args_kw(a, "indent");
    if (!ind && a->npos > 0) ind = &a->pos[0];
    if (ind && ind->t != TV_NONE) {
        if (ind->t != TV_INT) tpl_rt_fail(rt, "tojson indent must be an integer");
        o.indent = ind->u.i > 64 ? 64 : (int)ind->u.i;
    }
    o.ensure_ascii = opt_bool(rt, tpl_args_kw(a, "ensure_ascii"), false, "ensure_ascii");
    o.sort_keys = opt_bool(rt, tpl_args_kw(a, "sort_keys"), false, "sort_keys");
    tv *sep = tpl_args_kw(a, "separators");
    if (sep && sep->t != TV_NONE) {
        if (sep->t != TV_LIST || sep->u.l->n != 2 || sep->u.l->v[0].t != TV_STR || sep->u.l->v[1].t != TV_STR)
            tpl_rt_fail(rt, "separators must be a tuple of two strings");
        o.item_sep = sep->u.l->v[0].u.s->s;
        o.key_sep = sep->u.l->v[1].u.s->s;
    }
    tpl_buf b;
    newbuf(rt, &b);
    tv_json(rt, &b, v, &o, 0);
    return sbuf_done(rt, &b);
}

static tv to_json_str(tpl_rt *rt, tv v) {
    tpl_json_opts o = {-1, false, false, false, NULL, NULL};
    tpl_buf b;
    newbuf(rt, &b);
    tv_json(rt, &b, v, &o, 0);
    return sbuf_done(rt, &b);
}

static tv join_list(tpl_rt *rt, const tlist *l, const tstr *sep) {
    tpl_buf b;
    newbuf(rt, &b);
    for (size_t i = 0; i < l->n; i++) {
        tpl_step(rt);
        if (i && sep) tpl_buf_put(&b, sep->s, sep->len);
        tv e = l->v[i];
        /* JavaScript Array.join of the payloads: null/undefined become "" */
        if (e.t == TV_UNDEF || e.t == TV_NONE) continue;
        tv_jsstr(&b, e);
    }
    return sbuf_done(rt, &b);
}

static tv unique_list(tpl_rt *rt, const tlist *l) {
    tv out = tv_list(rt->ar, 0);
    for (size_t i = 0; i < l->n; i++) {
        bool seen = false;
        for (size_t j = 0; j < out.u.l->n && !seen; j++) { tpl_step(rt); seen = tv_strict_eq(out.u.l->v[j], l->v[i]); }
        if (!seen) tlist_push(rt->ar, out.u.l, l->v[i]);
    }
    return out;
}

static tv indent_str(tpl_rt *rt, const tstr *s, int64_t width, bool first, bool blank) {
    if (width < 0) width = 0;
    if (width > 1024) tpl_rt_fail(rt, "indent width too large");
    tpl_buf b;
    newbuf(rt, &b);
    size_t i = 0;
    for (size_t line = 0;; line++) {
        tpl_step(rt);
        const char *nl = memchr(s->s + i, '\n', s->len - i);
        size_t e = nl ? (size_t)(nl - s->s) : s->len;
        bool empty = e == i;
        if (!((!first && line == 0) || (!blank && empty)))
            for (int64_t k = 0; k < width; k++) tpl_buf_putc(&b, ' ');
        tpl_buf_put(&b, s->s + i, e - i);
        if (!nl) break;
        tpl_buf_putc(&b, '\n');
        i = e + 1;
    }
    return sbuf_done(rt, &b);
}

/* JavaScript parseInt(s, 10) / parseFloat(s); false when NaN */
static bool js_parse_number(const tstr *s, bool integer, double *out) {
    size_t i = 0, n = s->len, l;
    while (i < n && (l = tpl_ws_at(s->s, i, n)) > 0) i += l;
    char buf[128];
    size_t k = 0;
    if (i < n && (s->s[i] == '+' || s->s[i] == '-')) buf[k++] = s->s[i++];
    size_t digits = 0;
    if (!integer && n - i >= 8 && memcmp(s->s + i, "Infinity", 8) == 0) {
        *out = (k && buf[0] == '-') ? -INFINITY : INFINITY;
        return true;
    }
    while (i < n && s->s[i] >= '0' && s->s[i] <= '9' && k < 100) { buf[k++] = s->s[i++]; digits++; }
    if (!integer) {
        if (i < n && s->s[i] == '.' && k < 100) {
            size_t save = k;
            buf[k++] = '.';
            i++;
            size_t fd = 0;
            while (i < n && s->s[i] >= '0' && s->s[i] <= '9' && k < 110) { buf[k++] = s->s[i++]; fd++; }
            if (!fd && !digits) k = save;
            digits += fd;
        }
        if (digits && i < n && (s->s[i] == 'e' || s->s[i] == 'E')) {
            size_t save = k, si = i;
            buf[k++] = 'e';
            i++;
            if (i < n && (s->s[i] == '+' || s->s[i] == '-')) buf[k++] = s->s[i++];
            size_t ed = 0;
            while (i < n && s->s[i] >= '0' && s->s[i] <= '9' && k < 120) { buf[k++] = s->s[i++]; ed++; }
            if (!ed) { k = save; i = si; }
        }
    }
    if (!digits) return false;
    buf[k] = 0;
    *out = strtod(buf, NULL);
    if (integer) *out = trunc(*out);
    return true;
}

static tv num_from(double d, bool integer) {
    if (integer && isfinite(d) && fabs(d) < 9.2e18) return tv_int((int64_t)d);
    return tv_float(d);
}

static tv round_filter(tpl_rt *rt, tv v, const tpl_args *a) {
    if (!tv_is_numeric(v)) tpl_rt_fail(rt, "round needs a number, not %s", tv_type_name(v));
    tv *p = arg(a, 0, "precision");
    tv *m = arg(a, 1, "method");
    int64_t prec = p && p->t == TV_INT ? p->u.i : 0;
    if (prec > 15) prec = 15;
    if (prec < -15) prec = -15;
    double x = tv_num(v), scale = pow(10.0, (double)prec), r;
    const char *method = m && m->t == TV_STR ? m->u.s->s : "common";
    if (strcmp(method, "common") == 0) r = round(x * scale) / scale;
    else if (strcmp(method, "floor") == 0) r = floor(x * scale) / scale;
    else if (strcmp(method, "ceil") == 0) r = ceil(x * scale) / scale;
    else tpl_rt_fail(rt, "round method must be 'common', 'floor' or 'ceil'");
    return tv_float(r);
}

static tv select_items(tpl_rt *rt, tv list, const tpl_args *a, bool attr_mode, bool select, const char *fname) {
    if (list.t == TV_STR) list = tpl_str_chars(rt, list.u.s);   /* Python Jinja iterates a string */
    if (list.t != TV_LIST) tpl_rt_fail(rt, "filter '%s' needs a list, not %s", fname, tv_type_name(list));
    for (int i = 0; i < a->npos; i++)
        if (a->pos[i].t != TV_STR && !(i == 2 && attr_mode) && !(i == 1 && !attr_mode))
            tpl_rt_fail(rt, "arguments of '%s' must be strings", fname);
    int ti = attr_mode ? 1 : 0;   /* index of the test name */
    if (attr_mode && a->npos < 1) tpl_rt_fail(rt, "'%s' needs an attribute name", fname);
    const char *test = a->npos > ti ? a->pos[ti].u.s->s : NULL;
    const tv *targ = a->npos > ti + 1 ? &a->pos[ti + 1] : NULL;
    tv out = tv_list(rt->ar, 0);
    for (size_t i = 0; i < list.u.l->n; i++) {
        tpl_step(rt);
        tv item = list.u.l->v[i];
        bool res;
        if (attr_mode) {
            /* an item without attributes (a string's character) has none: it never matches */
            tv *v = (item.t == TV_DICT || item.t == TV_NS) ? tdict_get(item.u.d, a->pos[0].u.s->s, a->pos[0].u.s->len) : NULL;
            res = v ? (test ? tpl_apply_test(rt, *v, test, targ) : tv_truthy(*v)) : false;
        } else {
            res = test ? tpl_apply_test(rt, item, test, targ) : tv_truthy(item);
        }
        if (res == select) tlist_push(rt->ar, out.u.l, item);
    }
    return out;
}

static tv map_filter(tpl_rt *rt, tv list, const tpl_args *a) {
    if (list.t != TV_LIST) tpl_rt_fail(rt, "filter 'map' needs a list, not %s", tv_type_name(list));
    tv *attr = tpl_args_kw(a, "attribute");
    tv out = tv_list(rt->ar, list.u.l->n);
    if (attr) {
        if (attr->t != TV_STR) tpl_rt_fail(rt, "map attribute must be a string");
        tv *def = tpl_args_kw(a, "default");
        for (size_t i = 0; i < list.u.l->n; i++) {
            tpl_step(rt);
            tv item = list.u.l->v[i];
            if (item.t != TV_DICT && item.t != TV_NS) tpl_rt_fail(rt, "items in map must be objects");
            tv v = tpl_attr_path(item, attr->u.s->s, attr->u.s->len);
            tlist_push(rt->ar, out.u.l, v.t == TV_UNDEF && def ? *def : v);
        }
        return out;
    }
    if (a->npos < 1 || a->pos[0].t != TV_STR) tpl_rt_fail(rt, "map needs attribute= or a filter name");
    char nm[48];
    snprintf(nm, sizeof nm, "%s", a->pos[0].u.s->s);
    tpl_args rest = {a->pos + 1, a->npos - 1, a->kw};
    for (size_t i = 0; i < list.u.l->n; i++) {
        tpl_step(rt);
        tlist_push(rt->ar, out.u.l, tpl_apply_filter(rt, list.u.l->v[i], nm, &rest, rest.npos > 0 || rest.kw));
    }
    return out;
}

static tv sort_filter(tpl_rt *rt, tv list, const tpl_args *a) {
    sort_ctx c = {rt, false, false, NULL, 0, -1};
    c.reverse = opt_bool(rt, arg(a, 0, "reverse"), false, "reverse");
    c.case_sensitive = opt_bool(rt, arg(a, 1, "case_sensitive"), false, "case_sensitive");
    tv *attr = arg(a, 2, "attribute");
    char num[24];
    if (attr && attr->t == TV_STR) { c.attr = attr->u.s->s; c.attr_len = attr->u.s->len; }
    else if (attr && attr->t == TV_INT) {
        snprintf(num, sizeof num, "%lld", (long long)attr->u.i);
        c.attr = num;
        c.attr_len = strlen(num);
    } else if (attr && attr->t != TV_NONE) tpl_rt_fail(rt, "attribute must be a string, integer, or none");
    return sorted_copy(rt, list.u.l, &c);
}

_Noreturn static void no_filter(tpl_rt *rt, const char *name, tv v) {
    tpl_rt_fail(rt, "filter '%s' cannot be applied to a %s", name, tv_type_name(v));
}

/* filters written without parentheses: x|name */
static tv plain_filter(tpl_rt *rt, tv v, const char *name) {
    static const tpl_args none = {NULL, 0, NULL};
    if (NAME_IS(name, "default") || NAME_IS(name, "d")) return v.t == TV_UNDEF ? tv_str(rt->ar, "", 0) : v;
    if (NAME_IS(name, "round")) return round_filter(rt, v, &none);
    if (NAME_IS(name, "select") || NAME_IS(name, "reject")) return select_items(rt, v, &none, false, NAME_IS(name, "select"), name);
    switch (v.t) {
    case TV_LIST: {
        const tlist *l = v.u.l;
        if (NAME_IS(name, "list")) return v;
        if (NAME_IS(name, "first")) return l->n ? l->v[0] : tv_undef();
        if (NAME_IS(name, "last")) return l->n ? l->v[l->n - 1] : tv_undef();
        if (NAME_IS(name, "length") || NAME_IS(name, "count")) return tv_int((int64_t)l->n);
        if (NAME_IS(name, "reverse")) {
            tv out = tv_list(rt->ar, l->n);
            for (size_t i = l->n; i > 0; i--) tlist_push(rt->ar, out.u.l, l->v[i - 1]);
            return out;
        }
        if (NAME_IS(name, "sort")) { static const tpl_args na = {NULL, 0, NULL}; return sort_filter(rt, v, &na); }
        if (NAME_IS(name, "join")) return join_list(rt, l, NULL);
        if (NAME_IS(name, "string")) return to_json_str(rt, v);
        if (NAME_IS(name, "unique")) return unique_list(rt, l);
        break;
    }
    case TV_STR: {
        const tstr *s = v.u.s;
        if (NAME_IS(name, "length") || NAME_IS(name, "count")) return tpl_method(rt, v, "length", 6);
        if (NAME_IS(name, "upper")) return str_case(rt, s, 1);
        if (NAME_IS(name, "lower")) return str_case(rt, s, 0);
        if (NAME_IS(name, "title")) return str_title(rt, s);
        if (NAME_IS(name, "capitalize")) return str_capitalize(rt, s);
        if (NAME_IS(name, "trim")) return str_strip(rt, s, 3, NULL);
        if (NAME_IS(name, "indent")) return indent_str(rt, s, 4, false, false);
        if (NAME_IS(name, "join") || NAME_IS(name, "string")) return v;
        if (NAME_IS(name, "int") || NAME_IS(name, "float")) {
            bool in = NAME_IS(name, "int");
            double d;
            if (!js_parse_number(s, in, &d)) return in ? tv_int(0) : tv_float(0);
            return num_from(d, in);
        }
        break;
    }
    case TV_INT: case TV_FLOAT:
        if (NAME_IS(name, "abs")) {
            if (v.t == TV_INT) return tv_int(v.u.i < 0 ? (int64_t)(0 - (uint64_t)v.u.i) : v.u.i);
            return tv_float(fabs(v.u.f));
        }
        if (NAME_IS(name, "int")) return v.t == TV_INT ? v : num_from(floor(v.u.f), true);
        if (NAME_IS(name, "float")) return tv_float(tv_num(v));
        if (NAME_IS(name, "string")) {
            tpl_buf b;
            newbuf(rt, &b);
            tv_print(&b, v);
            return sbuf_done(rt, &b);
        }
        break;
    case TV_DICT:
        if (NAME_IS(name, "items")) return dict_items(rt, v.u.d);
        if (NAME_IS(name, "length") || NAME_IS(name, "count")) return tv_int((int64_t)v.u.d->n);
        {
            tv m = tpl_method(rt, v, name, strlen(name));
            if (m.t == TV_FUNC) {
                static const tpl_args na = {NULL, 0, NULL};
                return tpl_call(rt, m, &na, NULL);
            }
        }
        break;
    case TV_BOOL:
        if (NAME_IS(name, "bool")) return v;
        if (NAME_IS(name, "int")) return tv_int(v.u.b);
        if (NAME_IS(name, "float")) return tv_float(v.u.b);
        if (NAME_IS(name, "string")) return tv_cstr(rt->ar, v.u.b ? "true" : "false");
        break;
    default: break;
    }
    no_filter(rt, name, v);
}

tv tpl_apply_filter(tpl_rt *rt, tv v, const char *name, const tpl_args *a, bool has_call) {
    tpl_step(rt);
    if (NAME_IS(name, "safe")) return v;
    if (NAME_IS(name, "tojson")) return json_filter(rt, v, a);
    if (!has_call) return plain_filter(rt, v, name);

    if (NAME_IS(name, "join")) {
        tv *sep = arg(a, 0, "separator");
        if (sep && sep->t != TV_STR) tpl_rt_fail(rt, "join separator must be a string");
        const tstr *sp = sep ? sep->u.s : NULL;
        if (v.t == TV_LIST) return join_list(rt, v.u.l, sp);
        if (v.t == TV_STR) {
            tpl_buf b;
            newbuf(rt, &b);
            for (size_t i = 0; i < v.u.s->len;) {
                size_t l = tpl_utf8_len((unsigned char)v.u.s->s[i]);
                if (i && sp) tpl_buf_put(&b, sp->s, sp->len);
                tpl_buf_put(&b, v.u.s->s + i, i + l <= v.u.s->len ? l : v.u.s->len - i);
                i += l;
            }
            return sbuf_done(rt, &b);
        }
        no_filter(rt, name, v);
    }
    if (NAME_IS(name, "int") || NAME_IS(name, "float")) {
        bool in = NAME_IS(name, "int");
        tv *def = arg(a, 0, "default");
        if (v.t == TV_STR) {
            double d;
            if (!js_parse_number(v.u.s, in, &d)) return def ? *def : in ? tv_int(0) : tv_float(0);
            return num_from(d, in);
        }
        if (v.t == TV_INT || v.t == TV_FLOAT) return v;
        if (v.t == TV_BOOL) return in ? tv_int(v.u.b) : tv_float(v.u.b);
        no_filter(rt, name, v);
    }
    if (NAME_IS(name, "default") || NAME_IS(name, "d")) {
        tv def = a->npos > 0 ? a->pos[0] : tv_str(rt->ar, "", 0);
        bool boolean = opt_bool(rt, arg(a, 1, "boolean"), false, "default's boolean flag");
        if (v.t == TV_UNDEF || (boolean && !tv_truthy(v))) return def;
        return v;
    }
    if (NAME_IS(name, "round")) return round_filter(rt, v, a);
    if (NAME_IS(name, "select") || NAME_IS(name, "reject")) return select_items(rt, v, a, false, NAME_IS(name, "select"), name);
    if (v.t == TV_LIST) {
        if (NAME_IS(name, "sort")) return sort_filter(rt, v, a);
        if (NAME_IS(name, "selectattr")) return select_items(rt, v, a, true, true, name);
        if (NAME_IS(name, "rejectattr")) return select_items(rt, v, a, true, false, name);
        if (NAME_IS(name, "map")) return map_filter(rt, v, a);
        if (a->npos == 0 && !a->kw) return plain_filter(rt, v, name);
        no_filter(rt, name, v);
    }
    if (v.t == TV_STR) {
        if (NAME_IS(name, "selectattr") || NAME_IS(name, "rejectattr"))
            return select_items(rt, v, a, true, NAME_IS(name, "selectattr"), name);
        if (NAME_IS(name, "indent")) {
            tv *w = arg(a, 0, "width");
            if (w && w->t != TV_INT) tpl_rt_fail(rt, "indent width must be an integer");
            tv *first = arg(a, 1, "first"), *blank = arg(a, 2, "blank");
            return indent_str(rt, v.u.s, w ? w->u.i : 4, first && tv_truthy(*first), blank && tv_truthy(*blank));
        }
        if (NAME_IS(name, "replace")) return m_replace(rt, v, a);
        if (NAME_IS(name, "trim")) return str_strip(rt, v.u.s, 3, strip_chars(rt, a));
        if (a->npos == 0 && !a->kw) return plain_filter(rt, v, name);
        no_filter(rt, name, v);
    }
    if (v.t == TV_DICT) {
        tv m = tpl_method(rt, v, name, strlen(name));
        if (m.t == TV_FUNC) return tpl_call(rt, m, a, NULL);
        if (NAME_IS(name, "items") || NAME_IS(name, "length") || NAME_IS(name, "count")) return plain_filter(rt, v, name);
        no_filter(rt, name, v);
    }
    if (a->npos == 0 && !a->kw) return plain_filter(rt, v, name);
    no_filter(rt, name, v);
}
