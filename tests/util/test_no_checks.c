/* test_no_checks.c - the harness itself: a test program that reaches
 * kw_test_finish() without running one check must fail (exit 1), so a test
 * whose checks were all skipped by mistake cannot pass. ctest runs it with
 * WILL_FAIL: it passes only when this program exits non-zero. */
#include "testutil.h"

int main(void) {
    return kw_test_finish();
}
