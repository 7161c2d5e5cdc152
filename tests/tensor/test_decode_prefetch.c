/* test_decode_prefetch.c - the decode prefetch distance
 * (kw_decode_prefetch_bytes) is the CPU's default (4096 on Intel, 0
 * elsewhere) unless KW_DECODE_PREFETCH holds a valid distance (0..65536, a
 * multiple of 64), which then wins; an invalid value keeps the default.
 * CTest runs this with the variable unset, valid and invalid, passing the
 * expected value in KW_EXPECT_PF ("default" for the CPU's). Whether the
 * prefetching loops compute what the plain ones do is the job of
 * test_x16_batch, test_x16_panels (AVX-512) and test_x8_lanes (AVX2), which
 * CTest also runs with the distance forced to 4096 and to 0, so both loops
 * run on any CPU. */
#include "testutil.h"
#include <stdlib.h>
#include <string.h>
#include "kvwise/tensor.h"

int main(void) {
    const kw_cpu_info *ci = kw_cpu_info_get();
    const size_t dflt = ci->intel ? 4096 : 0;
    const char *expect = getenv("KW_EXPECT_PF");
    size_t want = (!expect || strcmp(expect, "default") == 0) ? dflt : (size_t)strtoul(expect, NULL, 10);
    KW_CHECK_EQ_INT(kw_decode_prefetch_bytes(), want);
    KW_CHECK_EQ_INT(kw_decode_prefetch_bytes(), want);   /* read once: the same on every call */
    return kw_test_finish();
}
