/* toolcall.c - the streaming tool-call / reasoning parser (kvwise/toolcall.h).
 * Owns kw_toolparse_* and the incremental JSON validator kw_jv_*: a small
 * state machine over a buffer of undecided text. NORMAL text streams out as
 * content except a suffix that could be the start of a tag; <think> switches
 * to reasoning; after a tool-call tag (or a leading JSON object) the call's
 * header `{"name": "...", "arguments": {` is matched, then the call is
 * committed and its arguments stream out fragment by fragment while the
 * validator accepts them (Mistral v11+ `[TOOL_CALLS]NAME[ARGS]{` commits the
 * same way, at the `{`). Calls in other shapes are collected until complete
 * and parsed with cJSON; anything invalid before the commit goes out as
 * content verbatim. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cjson/cJSON.h>
#include "kvwise/toolcall.h"

enum {
    ST_NORMAL = 0, ST_THINK,
    ST_CALL_HEAD,       /* after a call opener: matching the header, nothing decided yet */
    ST_CALL_ARGS,       /* committed: streaming the arguments, validating the call object */
    ST_CALL_AFTER,      /* a call object ended: its closing tag or the next call of the list */
    ST_CALL_BROKEN,     /* committed arguments went invalid: the rest of the call is content */
    ST_BUF_HERMES,      /* a call in another shape: collected up to </tool_call> */
    ST_BUF_JSON         /* ... or up to the end of its JSON value */
};

/* How the calls of one group are delimited. G_MISTRAL: after [TOOL_CALLS],
 * not yet known whether a JSON list or a `name[ARGS]{..}` call follows;
 * G_NAMED: the latter (each call has its own [TOOL_CALLS], nothing closes it). */
enum { G_HERMES = 0, G_LIST, G_MISTRAL, G_ARRAY, G_NAMED };

static const char TAG_THINK[] = "<think>", TAG_THINK_END[] = "</think>";
static const char TAG_HERMES[] = "<tool_call>", TAG_HERMES_END[] = "</tool_call>";
static const char TAG_PYTHON[] = "<|python_tag|>", TAG_MISTRAL[] = "[TOOL_CALLS]";
static const char TAG_ARGS[] = "[ARGS]", TAG_CALL_ID[] = "[CALL_ID]";
/* Mistral tokenizer v11+: [TOOL_CALLS]NAME[ARGS]{..} / NAME[CALL_ID]ID[ARGS]{..} */
#define NAMED_MAX_NAME 256
#define NAMED_MAX_ID 64

/* ---- the JSON syntax validator ------------------------------------------ */

enum { JV_VALUE = 0, JV_ARR_FIRST, JV_OBJ_FIRST, JV_OBJ_KEY, JV_COLON, JV_AFTER, JV_STR, JV_KEY,
       JV_NUM, JV_LIT, JV_DONE, JV_ERR };
/* number sub-states; the odd ones after the first two may end the number */
enum { N_MINUS = 0, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };

void kw_jv_init(kw_jv *v) { memset(v, 0, sizeof *v); v->state = JV_VALUE; }

static bool jv_ws(unsigned char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

static int jv_fail(kw_jv *v) { v->state = JV_ERR; return -1; }

static int jv_value_done(kw_jv *v) {
    if (v->depth == 0) { v->state = JV_DONE; return 1; }
    v->state = JV_AFTER;
    return 0;
}

static int jv_push(kw_jv *v, char c) {
    if (v->depth >= KW_JV_MAX_DEPTH) return jv_fail(v);
    v->stack[v->depth++] = c;
    v->state = c == '{' ? JV_OBJ_FIRST : JV_ARR_FIRST;
    return 0;
}

static int jv_close(kw_jv *v, char open) {
    if (v->depth == 0 || v->stack[v->depth - 1] != open) return jv_fail(v);
    v->depth--;
    return jv_value_done(v);
}

static int jv_start_value(kw_jv *v, unsigned char c) {
    if (jv_ws(c)) return 0;
    switch (c) {
    case '{': case '[': return jv_push(v, (char)c);
    case '"': v->state = JV_STR; v->sub = 0; return 0;
    case '-': v->state = JV_NUM; v->sub = N_MINUS; return 0;
    case '0': v->state = JV_NUM; v->sub = N_ZERO; return 0;
    case 't': v->lit = "true"; break;
    case 'f': v->lit = "false"; break;
    case 'n': v->lit = "null"; break;
    default:
        if (c >= '1' && c <= '9') { v->state = JV_NUM; v->sub = N_INT; return 0; }
        return jv_fail(v);
    }
    v->state = JV_LIT;
    v->sub = 1;
    return 0;
}

static bool num_can_end(int sub) { return sub == N_ZERO || sub == N_INT || sub == N_FRAC || sub == N_EXP; }

static int jv_number(kw_jv *v, unsigned char c) {
    bool digit = c >= '0' && c <= '9';
    switch (v->sub) {
    case N_MINUS: if (c == '0') { v->sub = N_ZERO; return 0; } if (digit) { v->sub = N_INT; return 0; } break;
    case N_ZERO: if (c == '.') { v->sub = N_DOT; return 0; } if (c == 'e' || c == 'E') { v->sub = N_E; return 0; } break;
    case N_INT: if (digit) return 0; if (c == '.') { v->sub = N_DOT; return 0; } if (c == 'e' || c == 'E') { v->sub = N_E; return 0; } break;
    case N_DOT: if (digit) { v->sub = N_FRAC; return 0; } break;
    case N_FRAC: if (digit) return 0; if (c == 'e' || c == 'E') { v->sub = N_E; return 0; } break;
    case N_E: if (c == '+' || c == '-') { v->sub = N_ESIGN; return 0; } if (digit) { v->sub = N_EXP; return 0; } break;
    case N_ESIGN: if (digit) { v->sub = N_EXP; return 0; } break;
    case N_EXP: if (digit) return 0; break;
    }
    if (!num_can_end(v->sub)) return jv_fail(v);
    int r = jv_value_done(v);             /* the number ended before c: c belongs to what follows */
    if (r == 1) return jv_ws(c) ? 1 : jv_fail(v);
    return kw_jv_feed(v, c);
}

static int jv_string(kw_jv *v, unsigned char c, bool key) {
    if (v->sub == 0) {
        if (c == '"') { if (key) { v->state = JV_COLON; return 0; } return jv_value_done(v); }
        if (c == '\\') { v->sub = 1; return 0; }
        return c < 0x20 ? jv_fail(v) : 0;
    }
    if (v->sub == 1) {
        if (strchr("\"\\/bfnrt", c) && c) { v->sub = 0; return 0; }
        if (c == 'u') { v->sub = 2; return 0; }
        return jv_fail(v);
    }
    if (!isxdigit(c)) return jv_fail(v);
    v->sub = v->sub == 5 ? 0 : v->sub + 1;
    return 0;
}

int kw_jv_feed(kw_jv *v, unsigned char c) {
    switch (v->state) {
    case JV_VALUE: return jv_start_value(v, c);
    case JV_ARR_FIRST: if (c == ']') return jv_close(v, '['); return jv_start_value(v, c);
    case JV_OBJ_FIRST:
    case JV_OBJ_KEY:
        if (jv_ws(c)) return 0;
        if (c == '}' && v->state == JV_OBJ_FIRST) return jv_close(v, '{');
        if (c == '"') { v->state = JV_KEY; v->sub = 0; return 0; }
        return jv_fail(v);
    case JV_COLON:
        if (jv_ws(c)) return 0;
        if (c == ':') { v->state = JV_VALUE; return 0; }
        return jv_fail(v);
    case JV_AFTER:
        if (jv_ws(c)) return 0;
        if (c == ',') { v->state = v->stack[v->depth - 1] == '{' ? JV_OBJ_KEY : JV_VALUE; return 0; }
        if (c == '}') return jv_close(v, '{');
        if (c == ']') return jv_close(v, '[');
        return jv_fail(v);
    case JV_STR: return jv_string(v, c, false);
    case JV_KEY: return jv_string(v, c, true);
    case JV_NUM: return jv_number(v, c);
    case JV_LIT:
        if (c != (unsigned char)v->lit[v->sub]) return jv_fail(v);
        if (!v->lit[++v->sub]) return jv_value_done(v);
        return 0;
    case JV_DONE: return jv_ws(c) ? 1 : jv_fail(v);
    default: return -1;
    }
}

/* ---- small buffers ------------------------------------------------------ */

static int grow(char **p, size_t *cap, size_t need) {
    if (need + 1 <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need + 1) c *= 2;
    char *nb = realloc(*p, c);
    if (!nb) return -1;
    *p = nb;
    *cap = c;
    return 0;
}

static void consume(kw_toolparse *p, size_t n) {
    memmove(p->buf, p->buf + n, p->len - n);
    p->len -= n;
    p->buf[p->len] = 0;
}

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* ---- emitting text (whitespace at the edges of a segment is held) -------- */

static void emit_text(kw_toolparse *p, kw_tc_ev_type type, const char *s, size_t n) {
    if (!n) return;
    kw_tc_event ev = {.type = type, .text = s, .len = n};
    p->cb(p->user, &ev);
}

/* Text for a channel: trailing whitespace is kept pending until more
 * non-whitespace text follows (so whitespace between a text and a tag is
 * dropped); leading whitespace is dropped when strip says so. */
static void chan_text(kw_toolparse *p, kw_tc_chan *c, kw_tc_ev_type type, const char *s, size_t n, bool strip) {
    size_t t = n;
    while (t > 0 && is_ws(s[t - 1])) t--;
    if (t == 0) {
        if (!c->started && strip) return;
        if (grow(&c->pend, &c->cap_pend, c->n_pend + n) < 0) { p->oom = 1; return; }
        memcpy(c->pend + c->n_pend, s, n);
        c->n_pend += n;
        return;
    }
    size_t lead = 0;
    if (!c->started && strip) { c->n_pend = 0; while (lead < t && is_ws(s[lead])) lead++; }
    emit_text(p, type, c->pend, c->n_pend);
    c->n_pend = 0;
    emit_text(p, type, s + lead, t - lead);
    c->started = true;
    if (grow(&c->pend, &c->cap_pend, n - t) < 0) { p->oom = 1; return; }
    memcpy(c->pend, s + t, n - t);
    c->n_pend = n - t;
}

static void content(kw_toolparse *p, const char *s, size_t n) {
    for (size_t i = 0; i < n && !p->seen_nonws; i++) if (!is_ws(s[i])) p->seen_nonws = true;
    chan_text(p, &p->content, KW_TC_CONTENT, s, n, p->strip_lead);
}

static void reasoning(kw_toolparse *p, const char *s, size_t n) {
    chan_text(p, &p->reasoning, KW_TC_REASONING, s, n, true);
}

/* ---- call events -------------------------------------------------------- */

static void make_call_id(kw_toolparse *p, char *buf, size_t cap) {
    /* xorshift64: ids only need to be unique within a response and unlikely to repeat across them */
    uint64_t x = p->id_seed;
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    p->id_seed = x;
    snprintf(buf, cap, "call_%016llx", (unsigned long long)x);
}

static void call_begin(kw_toolparse *p, const char *name, size_t name_len) {
    char id[40];
    make_call_id(p, id, sizeof id);
    char *nm = malloc(name_len + 1);
    if (!nm) { p->oom = 1; return; }
    memcpy(nm, name, name_len);
    nm[name_len] = 0;
    p->content.n_pend = 0;          /* whitespace around a call is not content */
    p->content.started = false;
    p->strip_lead = true;
    p->seen_nonws = true;
    kw_tc_event ev = {.type = KW_TC_CALL_BEGIN, .index = p->n_calls, .id = id, .name = nm};
    p->cb(p->user, &ev);
    free(nm);
}

static void call_args(kw_toolparse *p, const char *s, size_t n) {
    if (!n) return;
    kw_tc_event ev = {.type = KW_TC_CALL_ARGS, .index = p->n_calls, .text = s, .len = n};
    p->cb(p->user, &ev);
}

static void call_end(kw_toolparse *p, bool broken) {
    kw_tc_event ev = {.type = KW_TC_CALL_END, .index = p->n_calls, .broken = broken};
    p->cb(p->user, &ev);
    p->n_calls++;
}

/* ---- calls collected whole (shapes the header match does not know) ------ */

/* One {"name":..., "arguments"|"parameters":...} object -> a call. false if it is not one. */
static bool emit_call_object(kw_toolparse *p, const cJSON *o) {
    if (!cJSON_IsObject(o)) return false;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(o, "function");
    if (!name && cJSON_IsObject(fn)) { o = fn; name = cJSON_GetObjectItemCaseSensitive(o, "name"); }
    if (!cJSON_IsString(name) || !name->valuestring[0]) return false;
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    if (!args) args = cJSON_GetObjectItemCaseSensitive(o, "parameters");
    char *a = NULL;
    if (!args || cJSON_IsNull(args)) a = strdup("{}");
    else if (cJSON_IsString(args)) a = strdup(args->valuestring);
    else if (cJSON_IsObject(args)) a = cJSON_PrintUnformatted(args);
    else return false;
    if (!a) { p->oom = 1; return true; }
    /* arguments given as a string are passed on as written; broken if they are not JSON */
    cJSON *check = cJSON_IsString(args) ? cJSON_Parse(a) : NULL;
    bool broken = cJSON_IsString(args) && !check;
    cJSON_Delete(check);
    call_begin(p, name->valuestring, strlen(name->valuestring));
    call_args(p, a, strlen(a));
    call_end(p, broken);
    free(a);
    return true;
}

static bool is_call_object(const cJSON *it) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(it, "function");
    return cJSON_IsString(name) || (cJSON_IsObject(fn) && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(fn, "name")));
}

/* Parses s[0..n) as one call object or an array of them; all-or-nothing. */
static bool try_calls(kw_toolparse *p, const char *s, size_t n) {
    cJSON *v = cJSON_ParseWithLength(s, n);
    if (!v) return false;
    bool ok = true;
    if (cJSON_IsArray(v)) {
        const cJSON *it;
        if (cJSON_GetArraySize(v) == 0) ok = false;
        cJSON_ArrayForEach(it, v) if (!is_call_object(it)) ok = false;
        if (ok) cJSON_ArrayForEach(it, v) emit_call_object(p, it);
    } else {
        ok = emit_call_object(p, v);
    }
    cJSON_Delete(v);
    return ok;
}

/* Length of the balanced JSON object/array at s (which starts with { or [),
 * 0 if it is not complete yet. Strings and escapes are respected. */
static size_t json_extent(const char *s, size_t n) {
    int depth = 0;
    bool in_str = false, esc = false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (esc) esc = false;
            else if (c == '\\') esc = true;
            else if (c == '"') in_str = false;
            continue;
        }
        if (c == '"') in_str = true;
        else if (c == '{' || c == '[') depth++;
        else if (c == '}' || c == ']') { if (--depth <= 0) return i + 1; }
    }
    return 0;
}

/* Malformed call (nothing committed yet): the tag and what followed it go out as content. */
static void fallback(kw_toolparse *p, const char *s, size_t n, const char *close) {
    p->seen_nonws = true;
    if (p->marker && *p->marker) content(p, p->marker, strlen(p->marker));
    content(p, s, n);
    if (close) content(p, close, strlen(close));
}

/* ---- scanning ----------------------------------------------------------- */

static const char *find(const char *hay, size_t n, const char *needle) {
    size_t m = strlen(needle);
    if (m > n) return NULL;
    for (size_t i = 0; i + m <= n; i++)
        if (hay[i] == needle[0] && !memcmp(hay + i, needle, m)) return hay + i;
    return NULL;
}

/* Longest suffix of s[0..n) that is a proper prefix of tag. */
static size_t partial_suffix(const char *s, size_t n, const char *tag) {
    size_t m = strlen(tag);
    for (size_t k = m - 1 < n ? m - 1 : n; k > 0; k--)
        if (!memcmp(s + n - k, tag, k)) return k;
    return 0;
}

/* ---- the call header: {"name": "NAME", "arguments": { -------------------- */

enum { HM_NO = 0, HM_MORE, HM_MATCH };

static int hm_ws(const char *s, size_t n, size_t *i) {
    while (*i < n && is_ws(s[*i])) (*i)++;
    return *i < n ? HM_MATCH : HM_MORE;
}

static int hm_lit(const char *s, size_t n, size_t *i, const char *lit) {
    for (size_t k = 0; lit[k]; k++) {
        if (*i + k >= n) return HM_MORE;
        if (s[*i + k] != lit[k]) return HM_NO;
    }
    *i += strlen(lit);
    return HM_MATCH;
}

/* MATCH when s starts with a call header (whitespace allowed between the
 * tokens; a name without escapes; "parameters" for "arguments"): *args_at
 * is the offset of the arguments' `{`. MORE: s could still become one. */
static int header_match(const char *s, size_t n, size_t *name_at, size_t *name_len, size_t *args_at) {
    size_t i = 0;
    int r;
#define HM(x) do { if ((r = (x)) != HM_MATCH) return r; } while (0)
    HM(hm_ws(s, n, &i)); HM(hm_lit(s, n, &i, "{"));
    HM(hm_ws(s, n, &i)); HM(hm_lit(s, n, &i, "\"name\""));
    HM(hm_ws(s, n, &i)); HM(hm_lit(s, n, &i, ":"));
    HM(hm_ws(s, n, &i)); HM(hm_lit(s, n, &i, "\""));
    *name_at = i;
    while (i < n && s[i] != '"') {
        if (s[i] == '\\' || (unsigned char)s[i] < 0x20) return HM_NO;
        i++;
    }
    if (i == n) return HM_MORE;
    *name_len = i - *name_at;
    if (*name_len == 0) return HM_NO;
    i++;
    HM(hm_ws(s, n, &i)); HM(hm_lit(s, n, &i, ","));
    HM(hm_ws(s, n, &i));
    size_t j = i;
    r = hm_lit(s, n, &j, "\"arguments\"");
    if (r == HM_NO) { j = i; r = hm_lit(s, n, &j, "\"parameters\""); }
    if (r != HM_MATCH) return r;
    i = j;
    HM(hm_ws(s, n, &i)); HM(hm_lit(s, n, &i, ":"));
    HM(hm_ws(s, n, &i));
#undef HM
    if (s[i] != '{') return HM_NO;
    *args_at = i;
    return HM_MATCH;
}

/* ---- the Mistral v11+ header: NAME[ARGS]{ or NAME[CALL_ID]ID[ARGS]{ ------ */

static bool named_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-' || c == '.' || c == ':';
}

static bool named_id_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

bool kw_toolparse_mistral_name(const char *s) {
    size_t n = 0;
    while (s && s[n] && named_name_char(s[n])) n++;
    return s && n > 0 && n <= NAMED_MAX_NAME && !s[n];
}

/* Skips a run of allowed characters (1..max of them) at s[*i]. */
static int hm_run(const char *s, size_t n, size_t *i, bool (*ok)(char), size_t max) {
    size_t start = *i;
    while (*i < n && ok(s[*i])) {
        if (*i - start >= max) return HM_NO;
        (*i)++;
    }
    if (*i == n) return HM_MORE;
    return *i > start ? HM_MATCH : HM_NO;
}

/* MATCH when s starts with NAME[ARGS]{ or NAME[CALL_ID]ID[ARGS]{ (whitespace
 * allowed only before the `{`): *args_at is the offset of the `{`. The
 * [CALL_ID] value is checked and dropped (ids are the parser's own). */
static int named_match(const char *s, size_t n, size_t *name_len, size_t *args_at) {
    size_t i = 0;
    int r = hm_run(s, n, &i, named_name_char, NAMED_MAX_NAME);
    if (r != HM_MATCH) return r;
    *name_len = i;
    size_t a = i, c = i;
    int ra = hm_lit(s, n, &a, TAG_ARGS);
    if (ra == HM_MATCH) {
        i = a;
    } else {
        int rc = hm_lit(s, n, &c, TAG_CALL_ID);
        if (rc != HM_MATCH) return ra == HM_MORE || rc == HM_MORE ? HM_MORE : HM_NO;
        i = c;
        if ((r = hm_run(s, n, &i, named_id_char, NAMED_MAX_ID)) != HM_MATCH) return r;
        if ((r = hm_lit(s, n, &i, TAG_ARGS)) != HM_MATCH) return r;
    }
    if ((r = hm_ws(s, n, &i)) != HM_MATCH) return r;
    if (s[i] != '{') return HM_NO;
    *args_at = i;
    return HM_MATCH;
}

/* ---- states ------------------------------------------------------------- */

static void open_call(kw_toolparse *p, const char *marker, int group) {
    p->marker = marker;
    p->group = group;
    p->state = ST_CALL_HEAD;
}

/* NORMAL: returns true if it made progress and the loop should continue. */
static bool step_normal(kw_toolparse *p, bool final) {
    if ((p->flags & KW_TC_TOOLS) && (p->flags & KW_TC_BARE_JSON) && !p->seen_nonws && p->n_calls == 0) {
        size_t k = 0;
        while (k < p->len && is_ws(p->buf[k])) k++;
        if (k == p->len && !final) return false;           /* only whitespace so far: wait */
        if (k < p->len && p->buf[k] == '{') {
            consume(p, k);
            open_call(p, "", G_LIST);
            return true;
        }
    }
    const char *tags[4] = {TAG_THINK, TAG_HERMES, TAG_PYTHON, TAG_MISTRAL};
    static const int groups[4] = {0, G_HERMES, G_LIST, G_MISTRAL};
    int n_tags = (p->flags & KW_TC_TOOLS) ? 4 : 1;
    const char *best = NULL;
    int which = -1;
    for (int i = 0; i < n_tags; i++) {
        const char *f = find(p->buf, p->len, tags[i]);
        if (f && (!best || f < best)) { best = f; which = i; }
    }
    if (best) {
        size_t at = (size_t)(best - p->buf);
        content(p, p->buf, at);
        consume(p, at + strlen(tags[which]));
        if (which == 0) {
            p->content.n_pend = 0;
            p->reasoning.started = false;
            p->reasoning.n_pend = 0;
            p->strip_lead = true;
            p->state = ST_THINK;
        } else {
            open_call(p, tags[which], groups[which]);
        }
        return true;
    }
    size_t hold = 0;
    if (!final)
        for (int i = 0; i < n_tags; i++) {
            size_t h = partial_suffix(p->buf, p->len, tags[i]);
            if (h > hold) hold = h;
        }
    content(p, p->buf, p->len - hold);
    consume(p, p->len - hold);
    return false;
}

static bool step_think(kw_toolparse *p, bool final) {
    const char *f = find(p->buf, p->len, TAG_THINK_END);
    if (f) {
        size_t at = (size_t)(f - p->buf);
        reasoning(p, p->buf, at);
        p->reasoning.n_pend = 0;
        consume(p, at + strlen(TAG_THINK_END));
        p->state = ST_NORMAL;
        return true;
    }
    size_t hold = final ? 0 : partial_suffix(p->buf, p->len, TAG_THINK_END);
    reasoning(p, p->buf, p->len - hold);
    consume(p, p->len - hold);
    return false;
}

/* Commits a call whose arguments object starts at buf[args_at]: BEGIN now,
 * the arguments stream from there (the validator sees only the object). */
static void commit_named(kw_toolparse *p, size_t name_at, size_t name_len, size_t args_at) {
    call_begin(p, p->buf + name_at, name_len);
    kw_jv_init(&p->jv);
    p->args_depth = 0;
    p->in_args = true;
    consume(p, args_at);
    p->marker = "";
    p->group = G_NAMED;
    p->state = ST_CALL_ARGS;
}

/* [TOOL_CALLS] followed by something other than JSON: the v11+ header
 * NAME[ARGS]{ (or with [CALL_ID]ID); anything else goes back as content. */
static bool step_named_head(kw_toolparse *p, size_t off, bool final) {
    size_t name_len = 0, args_at = 0;
    int r = named_match(p->buf + off, p->len - off, &name_len, &args_at);
    if (r == HM_MORE && !final) return false;
    if (r != HM_MATCH) {
        p->state = ST_BUF_JSON;         /* not JSON either: the marker and the text become content */
        return true;
    }
    commit_named(p, off, name_len, off + args_at);
    return true;
}

/* Before the commit: wait for the header; a match commits the call, a
 * mismatch hands the text to the collect-whole path. */
static bool step_call_head(kw_toolparse *p, bool final) {
    size_t off = 0;
    while (off < p->len && is_ws(p->buf[off])) off++;
    bool in_array = false;
    if (p->group == G_MISTRAL && off < p->len && p->buf[off] == '[') {
        in_array = true;
        off++;
        while (off < p->len && is_ws(p->buf[off])) off++;
    }
    if (off == p->len && !final) return false;
    if (p->group == G_MISTRAL && !in_array && off < p->len && p->buf[off] != '{')
        return step_named_head(p, off, final);
    size_t name_at = 0, name_len = 0, args_at = 0;
    int r = off < p->len ? header_match(p->buf + off, p->len - off, &name_at, &name_len, &args_at) : HM_NO;
    if (r == HM_MORE && !final) return false;
    if (r != HM_MATCH) {
        p->state = p->group == G_HERMES ? ST_BUF_HERMES : ST_BUF_JSON;
        return true;
    }
    if (p->group == G_MISTRAL) p->group = in_array ? G_ARRAY : G_LIST;
    call_begin(p, p->buf + off + name_at, name_len);
    kw_jv_init(&p->jv);
    for (size_t k = off; k < off + args_at; k++) kw_jv_feed(&p->jv, (unsigned char)p->buf[k]);
    p->args_depth = p->jv.depth;
    p->in_args = true;
    consume(p, off + args_at);
    p->marker = "";
    p->state = ST_CALL_ARGS;
    return true;
}

/* Committed: every byte the validator accepts inside the arguments object
 * goes out as a fragment; the call ends with its object. */
static bool step_call_args(kw_toolparse *p, bool final) {
    size_t i = 0, args_end = 0;
    int r = 0;
    while (i < p->len) {
        r = kw_jv_feed(&p->jv, (unsigned char)p->buf[i]);
        if (r < 0) break;
        if (p->in_args) {
            args_end = i + 1;
            if (p->jv.depth == p->args_depth && p->jv.state == JV_AFTER) p->in_args = false;
        }
        i++;
        if (r == 1) break;
    }
    call_args(p, p->buf, args_end);
    if (r < 0) { call_end(p, true); consume(p, i); p->state = ST_CALL_BROKEN; return true; }
    consume(p, i);
    if (r == 1) { call_end(p, false); p->state = ST_CALL_AFTER; return true; }
    if (final) { call_end(p, true); p->state = ST_NORMAL; }
    return false;
}

/* Arguments went invalid after the commit: the rest of the call (through
 * </tool_call>) is content; lists have no closing tag, so normal text follows. */
static bool step_call_broken(kw_toolparse *p, bool final) {
    if (p->group != G_HERMES) { p->state = ST_NORMAL; return true; }
    const char *f = find(p->buf, p->len, TAG_HERMES_END);
    if (f) {
        size_t end = (size_t)(f - p->buf) + strlen(TAG_HERMES_END);
        content(p, p->buf, end);
        consume(p, end);
        p->state = ST_NORMAL;
        return true;
    }
    size_t hold = final ? 0 : partial_suffix(p->buf, p->len, TAG_HERMES_END);
    content(p, p->buf, p->len - hold);
    consume(p, p->len - hold);
    if (final) p->state = ST_NORMAL;
    return false;
}

/* After a call object: </tool_call>, or the next call of a list. */
static bool step_call_after(kw_toolparse *p, bool final) {
    size_t k = 0;
    if (p->group == G_NAMED) {         /* nothing closes it: a next [TOOL_CALLS] or text follows */
        p->state = ST_NORMAL;
        return true;
    }
    if (p->group == G_LIST) {
        while (k < p->len && (is_ws(p->buf[k]) || p->buf[k] == ';' || p->buf[k] == ',')) k++;
        if (k == p->len) {
            if (final) { content(p, p->buf, p->len); consume(p, p->len); p->state = ST_NORMAL; }
            return false;
        }
        if (p->buf[k] == '{') { consume(p, k); p->state = ST_CALL_HEAD; return true; }
        content(p, p->buf, k);
        consume(p, k);
        p->state = ST_NORMAL;
        return true;
    }
    while (k < p->len && is_ws(p->buf[k])) k++;
    if (k == p->len) {
        if (final) { consume(p, p->len); p->state = ST_NORMAL; }
        return false;
    }
    if (p->group == G_ARRAY) {
        if (p->buf[k] == ',') { consume(p, k + 1); p->state = ST_CALL_HEAD; return true; }
        if (p->buf[k] == ']') consume(p, k + 1);
        p->state = ST_NORMAL;
        return true;
    }
    size_t m = strlen(TAG_HERMES_END), avail = p->len - k;
    if (!memcmp(p->buf + k, TAG_HERMES_END, avail < m ? avail : m)) {
        if (avail < m && !final) return false;
        if (avail >= m) consume(p, k + m);
    }
    p->state = ST_NORMAL;
    return true;
}

/* A call in another shape: collected up to </tool_call>, parsed whole. */
static bool step_buf_hermes(kw_toolparse *p, bool final) {
    const char *f = find(p->buf, p->len, TAG_HERMES_END);
    if (f) {
        size_t at = (size_t)(f - p->buf);
        if (!try_calls(p, p->buf, at)) fallback(p, p->buf, at, TAG_HERMES_END);
        consume(p, at + strlen(TAG_HERMES_END));
        p->state = ST_NORMAL;
        return true;
    }
    if (final) {    /* no closing tag: accept a complete call anyway, else it is text */
        if (!try_calls(p, p->buf, p->len)) fallback(p, p->buf, p->len, NULL);
        consume(p, p->len);
        p->state = ST_NORMAL;
    }
    return false;
}

/* ... or up to the end of its JSON value. */
static bool step_buf_json(kw_toolparse *p, bool final) {
    size_t k = 0;
    while (k < p->len && is_ws(p->buf[k])) k++;
    if (k == p->len) {
        if (final) { fallback(p, p->buf, p->len, NULL); consume(p, p->len); p->state = ST_NORMAL; }
        return false;
    }
    if (p->buf[k] != '{' && p->buf[k] != '[') {
        fallback(p, "", 0, NULL);
        p->state = ST_NORMAL;
        return true;
    }
    size_t n = json_extent(p->buf + k, p->len - k);
    if (n == 0) {
        if (final) { fallback(p, p->buf, p->len, NULL); consume(p, p->len); p->state = ST_NORMAL; }
        return false;
    }
    if (try_calls(p, p->buf + k, n)) {
        consume(p, k + n);
        p->marker = "";
        if (p->group == G_MISTRAL) p->group = G_LIST;
        p->state = ST_CALL_AFTER;
    } else {
        fallback(p, p->buf, k + n, NULL);
        consume(p, k + n);
        p->state = ST_NORMAL;
    }
    return true;
}

static void run(kw_toolparse *p, bool final) {
    for (;;) {
        bool more = false;
        switch (p->state) {
        case ST_NORMAL: more = step_normal(p, final); break;
        case ST_THINK: more = step_think(p, final); break;
        case ST_CALL_HEAD: more = step_call_head(p, final); break;
        case ST_CALL_ARGS: more = step_call_args(p, final); break;
        case ST_CALL_AFTER: more = step_call_after(p, final); break;
        case ST_CALL_BROKEN: more = step_call_broken(p, final); break;
        case ST_BUF_HERMES: more = step_buf_hermes(p, final); break;
        default: more = step_buf_json(p, final); break;
        }
        if (!more || p->oom) break;   /* with final, every step that stops has consumed everything */
    }
}

/* ---- API ---------------------------------------------------------------- */

void kw_toolparse_init(kw_toolparse *p, unsigned flags, kw_tc_cb cb, void *user) {
    memset(p, 0, sizeof *p);
    p->flags = flags;
    p->cb = cb;
    p->user = user;
    p->state = (flags & KW_TC_START_IN_THINK) ? ST_THINK : ST_NORMAL;
    if (flags & KW_TC_START_IN_THINK) p->strip_lead = true;
    static unsigned long counter;
    unsigned long c = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    p->id_seed = ((uint64_t)ts.tv_sec * 1000000007ull) ^ ((uint64_t)ts.tv_nsec << 20) ^ (c * 0x9E3779B97F4A7C15ull);
    if (!p->id_seed) p->id_seed = 1;
}

int kw_toolparse_feed(kw_toolparse *p, const char *s, size_t n) {
    if (p->oom) return -1;
    if (grow(&p->buf, &p->cap, p->len + n) < 0) { p->oom = 1; return -1; }
    memcpy(p->buf + p->len, s, n);
    p->len += n;
    p->buf[p->len] = 0;
    run(p, false);
    return p->oom ? -1 : 0;
}

int kw_toolparse_finish(kw_toolparse *p) {
    if (p->oom) return -1;
    if (p->buf) run(p, true);
    /* trailing whitespace: part of a plain answer, dropped after calls */
    if (p->n_calls == 0) emit_text(p, KW_TC_CONTENT, p->content.pend, p->content.n_pend);
    p->content.n_pend = 0;
    return p->oom ? -1 : 0;
}

void kw_toolparse_free(kw_toolparse *p) {
    free(p->buf);
    free(p->content.pend);
    free(p->reasoning.pend);
    memset(p, 0, sizeof *p);
}

bool kw_toolparse_prompt_opens_think(const char *prompt) {
    const char *last = NULL, *q = prompt;
    while ((q = strstr(q, TAG_THINK))) { last = q; q += strlen(TAG_THINK); }
    return last && !strstr(last, TAG_THINK_END);
}
