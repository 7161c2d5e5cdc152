/* kvwise/common.h - things every module shares: the error type, byte sizes
 * and the UTF-8 sequence rules (RFC 3629).
 *
 * Convention: functions that can fail return 0 on success and -1 on
 * failure (or NULL for constructors) and fill a caller-provided kw_err with
 * one human-readable line naming the problem. A NULL kw_err* is allowed. */
#ifndef KVWISE_COMMON_H
#define KVWISE_COMMON_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <pthread.h>
#include <time.h>

#define KW_VERSION "0.1.0"

typedef struct kw_err { char msg[512]; } kw_err;

/* Tokenizing a rendered chat prompt (kw_tokenize's parse_special, the
 * engine's tokenize): special tokens are parsed in the template's own text,
 * never where the byte KW_SPECIAL_DEFUSE (0xFF: never in valid UTF-8) marks
 * a message's copy of one (tokenizer.h, kw_tokenizer_defuse). */
#define KW_SPECIAL_TEMPLATE 2
#define KW_SPECIAL_DEFUSE 0xFF

#if defined(__GNUC__)
#define KW_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define KW_PRINTF(a, b)
#endif

/* Sets err->msg (printf-style); always returns -1 so callers can
 * `return kw_err_set(err, "...")`. */
int kw_err_set(kw_err *err, const char *fmt, ...) KW_PRINTF(2, 3);

/* Parses sizes like "4GiB", "512MB", "1.5G", "123" (bytes). Binary
 * suffixes (KiB/MiB/GiB/TiB, and bare K/M/G/T) are powers of 1024; decimal
 * ones (KB/MB/GB/TB) are powers of 1000. Returns 0 or -1 (with err). */
int kw_parse_bytes(const char *s, uint64_t *out, kw_err *err);
/* Monotonic seconds (CLOCK_MONOTONIC): for intervals, rates and ages. */
double kw_mono_s(void);
/* The moment `seconds` from now on `clock` (the clock the condition
 * variable was made with): the deadline pthread_cond_timedwait takes. */
struct timespec kw_deadline_after(clockid_t clock, double seconds);
/* Stops a worker thread that waits on cv under mu while *stop is false:
 * sets *stop under mu, wakes it, and joins it when it was started. */
void kw_thread_stop(pthread_mutex_t *mu, pthread_cond_t *cv, bool *stop, pthread_t th, bool started);
/* A row of figures for a JSON report: kw_json_add_nums(obj, (kw_json_num[]){
 * {"a", 1}, {"b", 2}, {NULL}}) adds each as a number member of obj (a cJSON
 * object; NULL obj: nothing). The list ends at the first NULL key. */
typedef struct kw_json_num { const char *key; double value; } kw_json_num;
struct cJSON;
void kw_json_add_nums(struct cJSON *obj, const kw_json_num *nums);
/* Formats bytes as "3.11 GiB" into buf; returns buf. */
const char *kw_format_bytes(uint64_t bytes, char *buf, size_t cap);

/* The length of the longest prefix of s[0..n) that is well-formed UTF-8
 * (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF):
 * n when all of it is. */
size_t kw_utf8_valid_prefix(const char *s, size_t n);
/* Replaces every byte of s (NUL-terminated) that is not part of well-formed
 * UTF-8 by '?', in place. */
void kw_utf8_sanitize(char *s);
/* UTF-8 (RFC 3629): the length of the sequence lead byte c starts (1-4), 0 if
 * c cannot start one (a continuation byte, C0, C1, F5-FF). */
static inline int kw_utf8_seq_len(unsigned char c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}
/* Is c acceptable as byte k (1-based, k >= 1) of a sequence led by lead? The
 * second byte's range depends on the lead: no overlongs, no surrogates,
 * nothing above U+10FFFF. */
static inline bool kw_utf8_cont_ok(unsigned char lead, int k, unsigned char c) {
    if ((c & 0xC0) != 0x80) return false;
    if (k != 1) return true;
    if (lead == 0xE0) return c >= 0xA0;
    if (lead == 0xED) return c <= 0x9F;
    if (lead == 0xF0) return c >= 0x90;
    if (lead == 0xF4) return c <= 0x8F;
    return true;
}

#endif
