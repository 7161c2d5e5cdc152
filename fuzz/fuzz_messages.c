/* fuzz_messages.c - libFuzzer target for the Anthropic Messages request
 * parser (kw_anthropic_parse, src/server/anthropic.c: system, messages and
 * their blocks, tools, tool_choice, thinking, stop_sequences, the canonical
 * chat request, template, tokens, context check) and its answer writers
 * (message_start .. message_stop events, the final message). The driver and
 * its invariants: fuzz_api.h. Built and run by scripts/fuzz.sh (seeds in
 * fuzz/corpus/messages/). */
#include "fuzz_api.h"

static kw_job *parse(kw_engine *eng, const kw_chat_template *tpl, const char *body, size_t len, kw_http_error *e) {
    return kw_anthropic_parse(NULL, eng, tpl, false, body, len, "fuzz-model", e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return fuzz_api_run(data, size, &kw_api_anthropic, parse);
}
