/* fuzz_json_bound.c - libFuzzer target for kw_json_tree_bound
 * (src/server/prompt_bound.c), the one-pass bound the HTTP thread charges to
 * its --request-memory budget before it parses a body. Invariant: for any
 * bytes, what cJSON allocates parsing them (tests/lib/json_measure.h) is at
 * most the bound; a body the bound underestimates would let a request hold
 * memory the ledger never reserved. A crash, a sanitizer report or a bound
 * below the measured bytes is a finding. fuzz-smoke-seconds: 6 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "server/internal.h"
#include "json_measure.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    bool parsed;
    uint64_t used = json_measure_parse((const char *)data, size, &parsed);
    uint64_t bound = kw_json_tree_bound((const char *)data, size);
    if (used > bound) {
        fprintf(stderr, "kw_json_tree_bound %llu < %llu bytes allocated (parsed: %d)\n",
                (unsigned long long)bound, (unsigned long long)used, parsed);
        abort();
    }
    return 0;
}
