/* fuzz_api.h - the driver the API fuzz targets share (fuzz_messages.c,
 * fuzz_responses.c): one request through an API's parser, and, when it
 * gives a job, a scripted answer through the job's event path and the API's
 * writers (stream or not, as the request asked).
 *
 * Input: byte 0 = flags (bit 0: the answer ends by length, else stop; bit 1:
 * the chat template is the built-in Llama 3 family, else ChatML with the
 * Hermes/Qwen tool format); then the request body up to the first NUL; the
 * bytes after it are the model's output, fed in chunks of 1..8 bytes (tool
 * calls, <think>, broken JSON: what the parser and the writers must take).
 * Invariants: a refused request has status 400/413/500/503, a one-line
 * message and an error body (and, for a stream failure, a stream) that parse
 * as JSON; a job holds a prompt inside the context; every streamed event's
 * data and the final body parse as JSON. A crash, a sanitizer report, a
 * leak or a hang is a finding. The engine is the deterministic stub (byte
 * vocabulary, a context of 4096 positions). */
#ifndef KW_FUZZ_API_H
#define KW_FUZZ_API_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine_stub.h"
#include "server/internal.h"

typedef kw_job *(*fuzz_parse_fn)(kw_engine *eng, const kw_chat_template *tpl, const char *body, size_t len,
                                 kw_http_error *e);

static kw_engine *fuzz_eng;
static kw_chat_template fuzz_tpl[2];

static void fuzz_json_or_abort(const char *s, size_t n) {
    cJSON *v = cJSON_ParseWithLength(s, n);
    if (!v) { fprintf(stderr, "not JSON: %.*s\n", (int)(n > 400 ? 400 : n), s); abort(); }
    cJSON_Delete(v);
}

/* Every "data: ..." line of an SSE text parses (or is [DONE]). */
static void fuzz_check_sse(const char *s, size_t n) {
    const char *end = s + n;
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        size_t len = nl ? (size_t)(nl - s) : (size_t)(end - s);
        if (len > 6 && !strncmp(s, "data: ", 6) && strncmp(s + 6, "[DONE]", 6)) fuzz_json_or_abort(s + 6, len - 6);
        s += len + 1;
    }
}

static void fuzz_check_error(const kw_api *api, const kw_http_error *e) {
    if (e->status != 400 && e->status != 413 && e->status != 500 && e->status != 503) abort();
    if (!e->message[0] || strchr(e->message, '\n')) abort();
    char *js = api->error_json(e);
    if (!js) abort();
    fuzz_json_or_abort(js, strlen(js));
    free(js);
    if (e->stream_failure && api->stream_error) {
        char *st = api->stream_error(e);
        if (!st) abort();
        fuzz_check_sse(st, strlen(st));
        free(st);
    }
}

/* The scripted answer through the job's event path. */
static void fuzz_answer(kw_job *j, const uint8_t *out, size_t n, bool length) {
    kw_sched_event ev = {.type = KW_EV_ADMITTED, .prompt_tokens = j->req.n_prompt, .cached_tokens = j->req.n_prompt / 2};
    kw_job_on_event(j, &ev);
    int32_t pieces = 0;
    for (size_t i = 0; i < n;) {
        size_t k = 1 + out[i] % 8;
        if (k > n - i) k = n - i;
        kw_sched_event d = {.type = KW_EV_DELTA, .text = (const char *)out + i, .len = k};
        kw_job_on_event(j, &d);
        i += k;
        pieces++;
    }
    kw_sched_event f = {.type = KW_EV_FINISH, .finish = length ? KW_FINISH_LENGTH : KW_FINISH_STOP,
                        .prompt_tokens = j->req.n_prompt, .cached_tokens = j->req.n_prompt / 2,
                        .completion_tokens = pieces, .stop_index = !length && j->req.n_stop ? 0 : -1};
    kw_job_on_event(j, &f);
    if (j->stream) {
        fuzz_check_sse(j->out.p ? j->out.p : "", j->out.len);
    } else {
        char *body = j->api->final_json(j);
        if (!body) abort();
        fuzz_json_or_abort(body, strlen(body));
        free(body);
    }
}

static int fuzz_api_run(const uint8_t *data, size_t size, const kw_api *api, fuzz_parse_fn parse) {
    if (!fuzz_eng) {
        char note[256];
        kw_err err;
        fuzz_eng = kw_engine_stub_create(4096, 2, 64, 0);
        if (!fuzz_eng || kw_chat_template_choose2(&fuzz_tpl[0], "chatml", NULL, "", "", note, sizeof note, &err) < 0 ||
            kw_chat_template_choose2(&fuzz_tpl[1], "llama3", NULL, "<s>", "", note, sizeof note, &err) < 0) abort();
    }
    if (size < 1 || size > 65536) return 0;
    const uint8_t *body = data + 1, *nul = memchr(body, 0, size - 1);
    size_t body_len = nul ? (size_t)(nul - body) : size - 1;
    const uint8_t *out = nul ? nul + 1 : data + size;
    size_t out_len = (size_t)(data + size - out);
    kw_http_error e;
    memset(&e, 0, sizeof e);
    kw_job *j = parse(fuzz_eng, &fuzz_tpl[(data[0] >> 1) & 1], (const char *)body, body_len, &e);
    if (!j) { fuzz_check_error(api, &e); return 0; }
    if (j->req.n_prompt <= 0 || j->req.n_prompt >= fuzz_eng->n_ctx || j->req.max_tokens < 0) abort();
    fuzz_answer(j, out, out_len, data[0] & 1);
    kw_job_free(j);
    return 0;
}

#endif
