/* fuzz_responses.c - libFuzzer target for the Responses request parser
 * (kw_responses_parse, src/server/responses.c: instructions, input items,
 * function and custom tools, tool_choice, the refused fields, the canonical
 * chat request, template, tokens, context check) and its answer writers
 * (response.created .. response.completed events with output items, custom
 * tool calls, the final response). The driver and its invariants:
 * fuzz_api.h. Built and run by scripts/fuzz.sh (seeds in
 * fuzz/corpus/responses/). */
#include "fuzz_api.h"

static kw_job *parse(kw_engine *eng, const kw_chat_template *tpl, const char *body, size_t len, kw_http_error *e) {
    return kw_responses_parse(NULL, eng, tpl, body, len, "fuzz-model", e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return fuzz_api_run(data, size, &kw_api_responses, parse);
}
