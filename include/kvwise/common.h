/* kvwise/common.h - things every module shares: the error type, byte
 * sizes, UTF-8 well-formedness.
 *
 * Convention: functions that can fail return 0 on success and -1 on
 * failure (or NULL for constructors) and fill a caller-provided kw_err with
 * one human-readable line naming the problem. A NULL kw_err* is allowed. */
#ifndef KVWISE_COMMON_H
#define KVWISE_COMMON_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#define KW_VERSION "0.1.0"

typedef struct kw_err { char msg[512]; } kw_err;

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
/* Formats bytes as "3.11 GiB" into buf; returns buf. */
const char *kw_format_bytes(uint64_t bytes, char *buf, size_t cap);

/* The length of the longest prefix of s[0..n) that is well-formed UTF-8
 * (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF):
 * n when all of it is. */
size_t kw_utf8_valid_prefix(const char *s, size_t n);
/* Replaces every byte of s (NUL-terminated) that is not part of well-formed
 * UTF-8 by '?', in place. */
void kw_utf8_sanitize(char *s);

#endif
