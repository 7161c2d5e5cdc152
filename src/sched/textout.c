/* textout.c - generated text on its way out: holds back bytes that could
 * still become a stop string (stop strings are matched across token
 * boundaries and never leak into output) or that end in an incomplete
 * UTF-8 sequence. Owns kw_textout_* (sched.h). */
#include <stdlib.h>
#include <string.h>
#include "kvwise/sched.h"

void kw_textout_init(kw_textout *t, const char *const *stop, int32_t n_stop) {
    memset(t, 0, sizeof *t);
    t->stop = stop;
    t->n_stop = n_stop;
}

void kw_textout_free(kw_textout *t) {
    free(t->buf);
    memset(t, 0, sizeof *t);
}

/* Length of a UTF-8 sequence from its lead byte (0 = not a lead byte). */
static int utf8_seq_len(unsigned char c) {
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) return 2;
    if ((c & 0xF0) == 0xE0) return 3;
    if ((c & 0xF8) == 0xF0) return 4;
    return 0;
}

/* Largest n <= len such that buf[0..n) does not end inside an incomplete
 * (but still possibly valid) UTF-8 sequence. */
static size_t utf8_complete_prefix(const char *buf, size_t len) {
    size_t back = len < 4 ? len : 4;
    for (size_t k = 1; k <= back; k++) {
        unsigned char c = (unsigned char)buf[len - k];
        if ((c & 0xC0) == 0x80) continue;      /* continuation byte: look further back */
        int need = utf8_seq_len(c);
        if (need > (int)k) return len - k;     /* lead byte still waiting for more */
        return len;
    }
    return len;
}

static int append(kw_textout *t, const char *s, size_t n) {
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 64;
        while (cap < t->len + n + 1) cap *= 2;
        char *nb = realloc(t->buf, cap);
        if (!nb) return -1;
        t->buf = nb;
        t->cap = cap;
    }
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len] = 0;
    return 0;
}

bool kw_textout_push(kw_textout *t, const char *s, size_t n, size_t *n_release) {
    if (n && append(t, s, n) < 0) { *n_release = 0; return false; }
    /* A complete stop string: release exactly what precedes the earliest one. */
    size_t first = (size_t)-1;
    for (int32_t i = 0; i < t->n_stop; i++) {
        const char *hit = t->len ? memmem(t->buf, t->len, t->stop[i], strlen(t->stop[i])) : NULL;
        if (hit && (size_t)(hit - t->buf) < first) first = (size_t)(hit - t->buf);
    }
    if (first != (size_t)-1) { *n_release = first; return true; }
    /* Hold back the longest tail that is a proper prefix of some stop string. */
    size_t hold = 0;
    for (int32_t i = 0; i < t->n_stop; i++) {
        size_t sl = strlen(t->stop[i]);
        size_t maxk = sl - 1 < t->len ? sl - 1 : t->len;
        for (size_t k = maxk; k > hold; k--) {
            if (!memcmp(t->buf + t->len - k, t->stop[i], k)) { hold = k; break; }
        }
    }
    *n_release = utf8_complete_prefix(t->buf, t->len - hold);
    return false;
}

void kw_textout_consume(kw_textout *t, size_t n) {
    if (n > t->len) n = t->len;
    memmove(t->buf, t->buf + n, t->len - n);
    t->len -= n;
    if (t->buf) t->buf[t->len] = 0;
}

size_t kw_textout_flush(kw_textout *t, char *out, size_t cap) {
    size_t o = 0, i = 0;
    const unsigned char *b = (const unsigned char *)t->buf;
    while (i < t->len) {
        int need = utf8_seq_len(b[i]);
        bool ok = need > 0 && i + (size_t)need <= t->len;
        for (int k = 1; ok && k < need; k++) ok = (b[i + k] & 0xC0) == 0x80;
        if (ok) {
            if (o + (size_t)need > cap) break;
            memcpy(out + o, b + i, (size_t)need);
            o += (size_t)need; i += (size_t)need;
        } else {
            if (o + 3 > cap) break;
            out[o++] = (char)0xEF; out[o++] = (char)0xBF; out[o++] = (char)0xBD;
            i++;
        }
    }
    t->len = 0;
    if (t->buf) t->buf[0] = 0;
    return o;
}
