/* testutil.h - tiny assertion helpers shared by every test program.
 *
 * A test is a plain C program: main() runs checks with KW_CHECK*, then
 * returns kw_test_finish(). It prints "N passed, N failed" so a failing
 * run says what failed and where; a run with no checks at all fails. Tests
 * that need ../shared call kw_test_shared_dir() which exits 77 (CTest
 * "skipped") when it is absent. The library's test hooks (testctl.h) come
 * with it. */
#ifndef KW_TESTUTIL_H
#define KW_TESTUTIL_H
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include "kvwise/testctl.h"     /* the test hooks: every test build has them */

extern int kw_test_passed, kw_test_failed;

#define KW_CHECK(cond) do { if (cond) kw_test_passed++; else { kw_test_failed++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define KW_CHECK_MSG(cond, ...) do { if (cond) kw_test_passed++; else { kw_test_failed++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
#define KW_CHECK_EQ_INT(a, b) do { long long _a = (long long)(a), _b = (long long)(b); \
    if (_a == _b) kw_test_passed++; else { kw_test_failed++; \
    fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__, #a, #b, _a, _b); } } while (0)
#define KW_CHECK_NEAR(a, b, tol) do { double _a = (double)(a), _b = (double)(b); \
    if (fabs(_a - _b) <= (tol)) kw_test_passed++; else { kw_test_failed++; \
    fprintf(stderr, "%s:%d: |%s - %s| <= %g failed: %.9g vs %.9g\n", __FILE__, __LINE__, #a, #b, (double)(tol), _a, _b); } } while (0)

/* Returns the shared/ folder (KW_SHARED_DIR or ../shared); exits 77 if absent. */
const char *kw_test_shared_dir(void);
/* Path join into a static rotating buffer. */
const char *kw_test_path(const char *a, const char *b);
/* Reads a whole file; returns malloc'd buffer (NUL-terminated) or NULL. */
char *kw_test_read_file(const char *path, size_t *len);
/* A fresh temporary directory for this test under $TMPDIR (default /tmp),
 * removed with its contents when the test exits, unless a check failed or
 * KW_TEST_KEEP_TMP is set (then its path is printed). */
const char *kw_test_tmpdir(void);
/* For tests of the AVX-512 VNNI kernels: selects that kernel family, or
 * prints "SKIPPED: no AVX-512 VNNI" and exits 77 when the CPU lacks it. */
void kw_test_need_avx512_vnni(void);
/* Uniform in [-1, 1) from a 32-bit LCG state. */
float kw_test_frand(uint32_t *seed);
/* W = a rows x cols matrix of kw_test_frand values quantized to type, its
 * data an accounted KW_MEM_OTHER block (free it with kw_mem_free((void *)W->data)).
 * Returns 0, or -1 when out of memory (W's data NULL). */
struct kw_matrix;
int kw_test_random_matrix(struct kw_matrix *W, uint32_t type, int64_t rows, int64_t cols, uint32_t *seed);
/* Prints the summary line and returns the exit code: 1 when a check failed
 * or when no check ran at all (a test that skips exits 77 instead). */
int kw_test_finish(void);

#endif
