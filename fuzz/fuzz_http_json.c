/* fuzz_http_json.c - libFuzzer target for the OpenAI request decoder: the
 * function the HTTP handler calls with the whole request body,
 * kw_openai_parse() (src/server/openai.c: JSON, field types and ranges,
 * messages, chat template, stop strings, logprobs, tokenizing, context
 * check with max_tokens clamping).
 *
 * Input: byte 0 chooses the route (bit 0: chat or completions) and the
 * chat template family (bits 1..3); the rest is the request body. The
 * engine is the deterministic stub (byte vocabulary, small context so the
 * context check and clamping are reached). The decoder either returns a job
 * or an error whose status is 400/413/500/503 with a one-line message and
 * a JSON rendering that parses back; a crash, a sanitizer report, a leak
 * or a hang is a finding. The HTTP framing itself (request line, headers,
 * chunked bodies) is libmicrohttpd's; tests/reliability/ drives that part
 * with abusive clients against a running server.
 * Built and run by scripts/fuzz.sh (seeds in fuzz/corpus/http_json/). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine_stub.h"
#include "server/internal.h"

static kw_engine *g_eng;

static void check_error(const kw_http_error *e) {
    if (getenv("FUZZ_HTTP_JSON_VERBOSE")) fprintf(stderr, "status %d: %s\n", e->status, e->message);
    if (e->status != 400 && e->status != 413 && e->status != 500 && e->status != 503) abort();
    if (!e->message[0] || strchr(e->message, '\n')) abort();
    char *js = kw_http_error_json(e);
    if (!js) abort();
    cJSON *back = cJSON_Parse(js);
    if (!back || !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(back, "error"))) abort();
    cJSON_Delete(back);
    free(js);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_eng) {
        g_eng = kw_engine_stub_create(256, 2, 64, 0);
        if (!g_eng) abort();
    }
    if (size < 1 || size > 65536) return 0;
    bool chat = data[0] & 1;
    kw_chat_template tpl;
    memset(&tpl, 0, sizeof tpl);
    tpl.family = (kw_tpl_family)(((data[0] >> 1) & 7) % KW_TPL_COUNT);
    snprintf(tpl.source, sizeof tpl.source, "fuzz");
    if (tpl.family == KW_TPL_LLAMA3 || tpl.family == KW_TPL_LLAMA2 || tpl.family == KW_TPL_MISTRAL)
        snprintf(tpl.bos, sizeof tpl.bos, "<s>");
    kw_http_error e;
    memset(&e, 0, sizeof e);
    kw_job *j = kw_openai_parse(NULL, g_eng, &tpl, chat, (const char *)data + 1, size - 1, "fuzz-model", &e);
    if (!j) {
        check_error(&e);
        return 0;
    }
    /* A job is a bounded, tokenized request that fits the context. */
    if (j->req.n_prompt <= 0 || j->req.n_prompt >= g_eng->n_ctx) abort();
    if (j->req.max_tokens < 0) abort();
    kw_job_free(j);
    return 0;
}
