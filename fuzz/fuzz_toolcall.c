/* fuzz_toolcall.c - libFuzzer target for the streaming tool-call /
 * reasoning parser (toolcall.h) and its JSON validator.
 *
 * Input: byte 0 = parser flags (low 3 bits), byte 1 = chunk size for the
 * streamed run (1..64), the rest = "model output". The text is parsed fed
 * whole and fed in chunks; both transcripts (content, reasoning, calls with
 * their concatenated argument fragments) must be identical, every call
 * that ended without `broken` must have arguments cJSON parses, every call
 * must have begun before its fragments and end, and the output text can
 * never be longer than the input plus the tags the parser may re-emit.
 * A crash, a sanitizer report or a leak is a finding. Seeds in
 * fuzz/corpus/toolcall/; run by scripts/fuzz.sh toolcall. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "kvwise/toolcall.h"

typedef struct {
    char *s; size_t n, cap;     /* transcript */
    char *args; size_t an, acap;/* the open call's arguments */
    int open;                   /* a call has begun and not ended */
    int last;
} tr;

static void put(tr *t, const char *s, size_t n) {
    if (t->n + n + 1 > t->cap) {
        t->cap = (t->n + n + 1) * 2;
        t->s = realloc(t->s, t->cap);
        if (!t->s) abort();
    }
    memcpy(t->s + t->n, s, n);
    t->n += n;
    t->s[t->n] = 0;
}

static void on_ev(void *user, const kw_tc_event *ev) {
    tr *t = user;
    char b[64];
    switch (ev->type) {
    case KW_TC_CALL_BEGIN:
        if (t->open) abort();                           /* calls do not nest */
        t->open = 1;
        t->an = 0;
        snprintf(b, sizeof b, "\x01T%d(", ev->index);
        put(t, b, strlen(b));
        put(t, ev->name, strlen(ev->name));
        put(t, ",", 1);
        break;
    case KW_TC_CALL_ARGS:
        if (!t->open) abort();                          /* fragments only inside a call */
        put(t, ev->text, ev->len);
        if (t->an + ev->len + 1 > t->acap) {
            t->acap = (t->an + ev->len + 1) * 2;
            t->args = realloc(t->args, t->acap);
            if (!t->args) abort();
        }
        memcpy(t->args + t->an, ev->text, ev->len);
        t->an += ev->len;
        break;
    case KW_TC_CALL_END:
        if (!t->open) abort();
        t->open = 0;
        if (!ev->broken) {                              /* a complete call has JSON arguments */
            cJSON *v = cJSON_ParseWithLength(t->args ? t->args : "", t->an);
            if (!v) abort();
            cJSON_Delete(v);
        }
        put(t, ev->broken ? ")!" : ")", ev->broken ? 2 : 1);
        break;
    default:
        if ((int)ev->type != t->last) put(t, ev->type == KW_TC_CONTENT ? "\x01" "C" : "\x01" "R", 2);
        put(t, ev->text, ev->len);
        break;
    }
    t->last = (int)ev->type;
}

static void run(const char *text, size_t n, unsigned flags, size_t chunk, tr *t) {
    memset(t, 0, sizeof *t);
    t->last = -1;
    kw_toolparse p;
    kw_toolparse_init(&p, flags, on_ev, t);
    for (size_t i = 0; i < n; i += chunk) kw_toolparse_feed(&p, text + i, n - i < chunk ? n - i : chunk);
    kw_toolparse_finish(&p);
    kw_toolparse_free(&p);
    if (t->open) abort();                               /* finish ends every call */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    unsigned flags = data[0] & 7;
    size_t chunk = 1 + data[1] % 64;
    const char *text = (const char *)data + 2;
    size_t n = size - 2;
    tr whole, parts;
    run(text, n, flags, n ? n : 1, &whole);
    run(text, n, flags, chunk, &parts);
    if (whole.n != parts.n || (whole.n && memcmp(whole.s, parts.s, whole.n))) abort();
    free(whole.s); free(whole.args);
    free(parts.s); free(parts.args);
    /* the validator alone: never reads past its stack, always ends in a defined state */
    kw_jv v;
    kw_jv_init(&v);
    for (size_t i = 0; i < n; i++) if (kw_jv_feed(&v, data[2 + i]) < 0) break;
    return 0;
}
