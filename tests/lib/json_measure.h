/* json_measure.h - what cJSON really allocates for one parse, for the
 * checks of kw_json_tree_bound (server/prompt_bound.c): the server charges
 * that bound to the HTTP thread's budget before it parses a body, so the
 * bound must never be below the parse's allocations. Counted as the bytes
 * asked for plus 16 per allocation (the allocator's header, as the bound
 * assumes), for a parse as the server does it (chat.c: with length, not
 * requiring a NUL). Used by tests/memory/test_json_bound.c and
 * fuzz/fuzz_json_bound.c. Not thread-safe: cJSON's hooks are global. */
#ifndef KW_JSON_MEASURE_H
#define KW_JSON_MEASURE_H
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <cjson/cJSON.h>

static uint64_t json_measure_bytes;

static void *json_measure_malloc(size_t n) {
    json_measure_bytes += n + 16;
    return malloc(n);
}

/* Bytes cJSON allocates to parse body[0..len); *parsed says whether it did. */
static inline uint64_t json_measure_parse(const char *body, size_t len, bool *parsed) {
    cJSON_Hooks h = {json_measure_malloc, free};
    cJSON_InitHooks(&h);
    json_measure_bytes = 0;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    *parsed = root != NULL;
    cJSON_Delete(root);
    cJSON_InitHooks(NULL);
    return json_measure_bytes;
}
#endif
