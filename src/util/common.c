/* common.c - the error type, byte-size parsing/formatting and the monotonic clock (common.h). */
#include "kvwise/common.h"
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* Messages often quote what a file or a client sent (a tokenizer name, a
 * key, a flag's value), and those bytes may hold newlines or other control
 * characters. The contract is one line, so every control byte of the
 * formatted message is written as \n, \r, \t or \xNN; a message that no
 * longer fits is cut at a whole escape. */
int kw_err_set(kw_err *err, const char *fmt, ...) {
    if (!err) return -1;
    char raw[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    size_t o = 0, cap = sizeof err->msg - 1;
    for (const unsigned char *p = (const unsigned char *)raw; *p; p++) {
        char esc[5];
        size_t n;
        if (*p >= 0x20 && *p != 0x7f) { esc[0] = (char)*p; n = 1; }
        else if (*p == '\n') { memcpy(esc, "\\n", 2); n = 2; }
        else if (*p == '\r') { memcpy(esc, "\\r", 2); n = 2; }
        else if (*p == '\t') { memcpy(esc, "\\t", 2); n = 2; }
        else { snprintf(esc, sizeof esc, "\\x%02x", *p); n = 4; }
        if (o + n > cap) break;
        memcpy(err->msg + o, esc, n);
        o += n;
    }
    err->msg[o] = '\0';
    return -1;
}

int kw_parse_bytes(const char *s, uint64_t *out, kw_err *err) {
    if (!s || !*s) return kw_err_set(err, "empty size");
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || errno != 0 || !isfinite(v) || v < 0)
        return kw_err_set(err, "invalid size '%s' (expected e.g. 4GiB, 512MB or a number of bytes)", s);
    while (*end == ' ') end++;
    static const struct { const char *suf; double mul; } sufs[] = {
        {"", 1}, {"b", 1},
        {"k", 1024.0}, {"kib", 1024.0}, {"kb", 1e3},
        {"m", 1048576.0}, {"mib", 1048576.0}, {"mb", 1e6},
        {"g", 1073741824.0}, {"gib", 1073741824.0}, {"gb", 1e9},
        {"t", 1099511627776.0}, {"tib", 1099511627776.0}, {"tb", 1e12},
    };
    for (size_t i = 0; i < sizeof sufs / sizeof sufs[0]; i++) {
        if (strcasecmp(end, sufs[i].suf) == 0) {
            double b = v * sufs[i].mul;
            if (b > 1.8e19) return kw_err_set(err, "size '%s' is too large", s);
            *out = (uint64_t)llround(b);
            return 0;
        }
    }
    return kw_err_set(err, "invalid size suffix in '%s' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", s);
}

const char *kw_format_bytes(uint64_t bytes, char *buf, size_t cap) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) { v /= 1024.0; u++; }
    if (u == 0) snprintf(buf, cap, "%llu B", (unsigned long long)bytes);
    else snprintf(buf, cap, "%.2f %s", v, units[u]);
    return buf;
}

/* Bytes of the well-formed UTF-8 sequence at s (n bytes left), 0 if none. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    size_t len = (size_t)kw_utf8_seq_len(s[0]);
    if (!len || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if (!kw_utf8_cont_ok(s[0], (int)i, s[i])) return 0;
    return len;
}

size_t kw_utf8_valid_prefix(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        while (i + 8 <= n) {                              /* ASCII runs, 8 bytes at a time */
            uint64_t w;
            memcpy(&w, u + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        size_t k = utf8_seq(u + i, n - i);
        if (!k) return i;
        i += k;
    }
    return n;
}

void kw_utf8_sanitize(char *s) {
    size_t n = strlen(s), i = 0;
    while (i < n) {
        size_t k = utf8_seq((unsigned char *)s + i, n - i);
        if (k) { i += k; continue; }
        s[i++] = '?';
    }
}

double kw_mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct timespec kw_deadline_after(clockid_t clock, double seconds) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    long long ns = (long long)(seconds * 1e9);
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec += (long)(ns % 1000000000LL);
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    return ts;
}

void kw_thread_stop(pthread_mutex_t *mu, pthread_cond_t *cv, bool *stop, pthread_t th, bool started) {
    pthread_mutex_lock(mu);
    *stop = true;
    pthread_cond_signal(cv);
    pthread_mutex_unlock(mu);
    if (started) pthread_join(th, NULL);
}

void kw_json_add_nums(struct cJSON *obj, const kw_json_num *nums) {
    if (!obj) return;
    for (; nums->key; nums++) cJSON_AddNumberToObject(obj, nums->key, nums->value);
}
