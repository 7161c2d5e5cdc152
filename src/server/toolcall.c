/* toolcall.c - the streaming tool-call / reasoning parser (kvwise/toolcall.h).
 * Owns kw_toolparse_*: a small state machine over a buffer of undecided
 * text. NORMAL text streams out as content except a suffix that could be
 * the start of a tag; <think> switches to reasoning; a tool-call tag (or a
 * leading JSON object) collects text until the call is complete, then it
 * is parsed with cJSON; anything invalid goes out as content verbatim. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cjson/cJSON.h>
#include "kvwise/toolcall.h"

enum { ST_NORMAL = 0, ST_THINK, ST_HERMES, ST_JSON, ST_JSON_MORE };

static const char TAG_THINK[] = "<think>", TAG_THINK_END[] = "</think>";
static const char TAG_HERMES[] = "<tool_call>", TAG_HERMES_END[] = "</tool_call>";
static const char TAG_PYTHON[] = "<|python_tag|>", TAG_MISTRAL[] = "[TOOL_CALLS]";

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

/* ---- calls -------------------------------------------------------------- */

static void make_call_id(kw_toolparse *p, char *buf, size_t cap) {
    /* xorshift64: ids only need to be unique within a response and unlikely to repeat across them */
    uint64_t x = p->id_seed;
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    p->id_seed = x;
    snprintf(buf, cap, "call_%016llx", (unsigned long long)x);
}

/* One {"name":..., "arguments"|"parameters":...} object -> a CALL event. false if it is not one. */
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
    char id[40];
    make_call_id(p, id, sizeof id);
    kw_tc_event ev = {.type = KW_TC_CALL, .index = p->n_calls++, .id = id, .name = name->valuestring, .arguments = a};
    p->content.n_pend = 0;          /* whitespace before a call is not content */
    p->strip_lead = true;
    p->cb(p->user, &ev);
    free(a);
    return true;
}

/* Parses s[0..n) as one call object or an array of them; all-or-nothing. */
static bool try_calls(kw_toolparse *p, const char *s, size_t n) {
    cJSON *v = cJSON_ParseWithLength(s, n);
    if (!v) return false;
    bool ok = true;
    if (cJSON_IsArray(v)) {
        const cJSON *it;
        if (cJSON_GetArraySize(v) == 0) ok = false;
        cJSON_ArrayForEach(it, v) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(it, "function");
            if (!cJSON_IsString(name) && !(cJSON_IsObject(fn) && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(fn, "name")))) ok = false;
        }
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

/* Malformed call: the tag and what followed it go out as content. */
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

/* NORMAL: returns true if it made progress and the loop should continue. */
static bool step_normal(kw_toolparse *p, bool final) {
    if ((p->flags & KW_TC_TOOLS) && (p->flags & KW_TC_BARE_JSON) && !p->seen_nonws && p->n_calls == 0) {
        size_t k = 0;
        while (k < p->len && is_ws(p->buf[k])) k++;
        if (k == p->len && !final) return false;           /* only whitespace so far: wait */
        if (k < p->len && p->buf[k] == '{') {
            consume(p, k);
            p->marker = "";
            p->state = ST_JSON;
            return true;
        }
    }
    const char *tags[4] = {TAG_THINK, TAG_HERMES, TAG_PYTHON, TAG_MISTRAL};
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
            p->marker = tags[which];
            p->state = which == 1 ? ST_HERMES : ST_JSON;
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

static bool step_hermes(kw_toolparse *p, bool final) {
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

static bool step_json(kw_toolparse *p, bool final) {
    size_t k = 0;
    while (k < p->len && is_ws(p->buf[k])) k++;
    if (p->state == ST_JSON_MORE) {     /* after a call: `;` or `,` and another object continue the list */
        while (k < p->len && (is_ws(p->buf[k]) || p->buf[k] == ';' || p->buf[k] == ',')) k++;
        if (k == p->len) {
            if (final) { content(p, p->buf, p->len); consume(p, p->len); }
            return false;
        }
        if (p->buf[k] != '{') { content(p, p->buf, k); consume(p, k); p->state = ST_NORMAL; return true; }
        consume(p, k);
        p->state = ST_JSON;
        return true;
    }
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
        p->state = ST_JSON_MORE;
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
        case ST_HERMES: more = step_hermes(p, final); break;
        default: more = step_json(p, final); break;
        }
        if (!more) break;   /* with final, every step that stops has consumed everything */
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
