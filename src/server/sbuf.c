/* sbuf.c - growable byte strings for the server (sbuf.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sbuf.h"

size_t kw_sbuf_cap_after(const kw_sbuf *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return b->cap;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    return cap;
}

static int grow(kw_sbuf *b, size_t extra) {
    size_t cap = kw_sbuf_cap_after(b, extra);
    if (cap == b->cap) return 0;
    char *p = realloc(b->p, cap);
    if (!p) { b->oom = 1; return -1; }
    b->p = p;
    b->cap = cap;
    return 0;
}

int kw_sbuf_add(kw_sbuf *b, const char *s, size_t n) {
    if (grow(b, n) < 0) return -1;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

int kw_sbuf_puts(kw_sbuf *b, const char *s) { return kw_sbuf_add(b, s, strlen(s)); }

int kw_sbuf_printf(kw_sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return -1;
    if ((size_t)n < sizeof small) return kw_sbuf_add(b, small, (size_t)n);
    if (grow(b, (size_t)n) < 0) return -1;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

char *kw_sbuf_take(kw_sbuf *b) {
    if (!b->p && kw_sbuf_add(b, "", 0) < 0) return NULL;
    char *p = b->p;
    b->p = NULL;
    b->len = b->cap = 0;
    return p;
}

void kw_sbuf_free(kw_sbuf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}
