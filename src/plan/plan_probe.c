/* plan_probe.c - `kvwise plan --probe` (plan.h: kw_plan_probe): loads the
 * model and times a short prefill and a few decode steps, so the plan can
 * print the expected time to first token and the measured decode speed
 * beside the bandwidth ceiling.
 *
 * Method: one warm-up eval (faults the mapped weights in; not timed), then
 * a prefill of `tokens` positions in one batch, then KW_PROBE_DECODE single
 * token steps. Token ids are a fixed spread over the vocab (the speed of a
 * dense forward pass does not depend on which ids are fed). Prefill speed
 * falls as the prompt grows (attention reads every earlier position), so a
 * time to first token extrapolated from a short probe is a lower bound. */
#include "kvwise/plan.h"
#include "kvwise/model.h"
#include "kvwise/tensor.h"
#include <stdlib.h>
#include <time.h>

#define KW_PROBE_DECODE 16
#define KW_PROBE_WARMUP 8
#define KW_PROBE_DECODE_WARMUP 4

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int kw_plan_probe(const char *model_path, int32_t tokens, uint32_t kv_type, int n_threads,
                  double *prefill_tok_s, double *decode_tok_s, kw_err *err) {
    *prefill_tok_s = *decode_tok_s = 0;
    if (tokens < 1) tokens = 1;
    kw_model *m = kw_model_load(model_path, NULL, err);
    if (!m) return -1;
    int32_t n_vocab = kw_model_hparams(m)->n_vocab;
    kw_session_opts so = {.n_ctx = tokens + KW_PROBE_DECODE + KW_PROBE_DECODE_WARMUP + KW_PROBE_WARMUP, .max_batch = tokens,
                          .kv_type = kv_type, .block_tokens = 32, .n_threads = n_threads};
    kw_session *s = kw_session_create(m, &so, err);
    int32_t *ids = malloc((size_t)tokens * sizeof *ids);
    int rc = -1;
    if (!s || !ids) {
        if (!ids) kw_err_set(err, "probe: out of memory");
        goto done;
    }
    for (int32_t i = 0; i < tokens; i++) ids[i] = (int32_t)((1 + (int64_t)i * 7919) % n_vocab);
    int32_t warm = tokens < KW_PROBE_WARMUP ? tokens : KW_PROBE_WARMUP;
    if (kw_session_eval(s, ids, warm, false, err)) goto done;
    kw_session_rewind(s, 0);
    double t0 = now_s();
    if (kw_session_eval(s, ids, tokens, false, err)) goto done;
    for (int i = 0; i < KW_PROBE_DECODE_WARMUP; i++)   /* decode's own first steps are not timed */
        if (kw_session_eval(s, &ids[i % tokens], 1, false, err)) goto done;
    double t1 = now_s();
    for (int i = 0; i < KW_PROBE_DECODE; i++)
        if (kw_session_eval(s, &ids[i % tokens], 1, false, err)) goto done;
    double t2 = now_s();
    *prefill_tok_s = t1 > t0 ? tokens / (t1 - t0) : 0;
    *decode_tok_s = t2 > t1 ? KW_PROBE_DECODE / (t2 - t1) : 0;
    rc = 0;
done:
    free(ids);
    kw_session_free(s);
    kw_model_free(m);
    return rc;
}
