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
    t->hit = -1;
}

void kw_textout_free(kw_textout *t) {
    free(t->buf);
    memset(t, 0, sizeof *t);
}

/* Of b[0..n): 1 if it starts a complete valid sequence of length *len,
 * 0 if it is a valid but incomplete prefix running to the end, -1 if invalid. */
static int utf8_check(const unsigned char *b, size_t n, int *len) {
    int need = kw_utf8_seq_len(b[0]);
    if (need == 0) return -1;
    for (int k = 1; k < need; k++) {
        if ((size_t)k >= n) return 0;
        if (!kw_utf8_cont_ok(b[0], k, b[k])) return -1;
    }
    *len = need;
    return 1;
}

static int reserve(kw_textout *t, size_t extra) {
    if (t->len + extra + 1 <= t->cap) return 0;
    size_t cap = t->cap ? t->cap : 64;
    while (cap < t->len + extra + 1) cap *= 2;
    char *nb = realloc(t->buf, cap);
    if (!nb) return -1;
    t->buf = nb;
    t->cap = cap;
    return 0;
}

/* Appends s, keeping the buffer valid UTF-8 except for an incomplete (but so
 * far valid) sequence at its very end: invalid bytes become U+FFFD, the way
 * the detokenizer and `kvwise generate` show them. */
static int append(kw_textout *t, const char *s, size_t n) {
    /* the pending incomplete tail (at most 3 bytes) is re-examined with the new bytes */
    size_t tail = 0;
    for (size_t k = 1; k <= 3 && k <= t->len; k++) {
        unsigned char c = (unsigned char)t->buf[t->len - k];
        if ((c & 0xC0) == 0x80) continue;
        int l;
        if (kw_utf8_seq_len(c) > (int)k && utf8_check((const unsigned char *)t->buf + t->len - k, k, &l) == 0) tail = k;
        break;
    }
    unsigned char tmp[4 + 256];
    unsigned char *in = tmp;
    size_t m = tail + n;
    if (m > sizeof tmp && !(in = malloc(m))) return -1;
    if (tail) memcpy(in, t->buf + t->len - tail, tail);
    if (n) memcpy(in + tail, s, n);
    t->len -= tail;
    if (reserve(t, m * 3) < 0) { t->len += tail; if (in != tmp) free(in); return -1; }
    size_t i = 0;
    while (i < m) {
        int l = 0, rc = utf8_check(in + i, m - i, &l);
        if (rc == 1) { memcpy(t->buf + t->len, in + i, (size_t)l); t->len += (size_t)l; i += (size_t)l; }
        else if (rc == 0) { memcpy(t->buf + t->len, in + i, m - i); t->len += m - i; i = m; }
        else { memcpy(t->buf + t->len, "\xEF\xBF\xBD", 3); t->len += 3; i++; }
    }
    t->buf[t->len] = 0;
    if (in != tmp) free(in);
    return 0;
}

/* Largest n <= len such that buf[0..n) does not end inside an incomplete
 * UTF-8 sequence (the buffer is otherwise valid, see append). */
static size_t utf8_complete_prefix(const char *buf, size_t len) {
    for (size_t k = 1; k <= 3 && k <= len; k++) {
        unsigned char c = (unsigned char)buf[len - k];
        if ((c & 0xC0) == 0x80) continue;
        return kw_utf8_seq_len(c) > (int)k ? len - k : len;
    }
    return len;
}

bool kw_textout_push(kw_textout *t, const char *s, size_t n, size_t *n_release) {
    if (n && append(t, s, n) < 0) { *n_release = 0; return false; }
    /* A complete stop string: release exactly what precedes the earliest one. */
    size_t first = (size_t)-1;
    for (int32_t i = 0; i < t->n_stop; i++) {
        const char *hit = t->len ? memmem(t->buf, t->len, t->stop[i], strlen(t->stop[i])) : NULL;
        if (hit && (size_t)(hit - t->buf) < first) { first = (size_t)(hit - t->buf); t->hit = i; }
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
        int need = kw_utf8_seq_len(b[i]);
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
