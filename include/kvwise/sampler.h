/* kvwise/sampler.h - choosing the next token from logits: the one sampler
 * of kvwise (`kvwise generate` and the server's scheduler both use it).
 *
 * The chain: penalties over a history of tokens (repetition: a seen
 * token's logit divided by repeat_penalty, or multiplied when negative;
 * then presence + frequency x count subtracted, OpenAI's definition) ->
 * greedy when temp <= 0 or top_k == 1 (the argmax, ties to the lowest id)
 * -> top-k -> temperature -> min-p (keep p >= min_p x p_max) -> top-p (the
 * smallest prefix, by probability, reaching top_p) -> a draw from a
 * splitmix64 RNG. Temperature comes before min-p and top-p, as in the
 * OpenAI API, vLLM and HF transformers (llama.cpp applies it last; the two
 * agree at temperature 1). The same seed and inputs give the same tokens.
 *
 * Two ways in:
 *   kw_sample()    stateless: the caller keeps the history and RNG state
 *                  (the scheduler: one request's generated tokens, a
 *                  per-request RNG), optional logprobs;
 *   kw_sampler     an object that keeps both itself: a ring of the last
 *                  repeat_last_n accepted tokens and an RNG seeded by
 *                  params.seed (the CLI's generate). */
#ifndef KVWISE_SAMPLER_H
#define KVWISE_SAMPLER_H
#include "kvwise/common.h"

#define KW_MAX_TOP_LOGPROBS 20

typedef struct kw_sampler_params {
    float temp;                 /* <= 0: greedy (default 0.8) */
    int32_t top_k;              /* <= 0: off (default 40) */
    float top_p;                /* >= 1: off (default 0.95); 0 keeps only the best token */
    float min_p;                /* <= 0: off (default 0.05) */
    float repeat_penalty;       /* 1: off (default 1) */
    int32_t repeat_last_n;      /* kw_sampler's window for the penalties (default 64; -1 = 4096) */
    float presence_penalty;     /* 0: off */
    float frequency_penalty;    /* 0: off */
    uint64_t seed;              /* kw_sampler's RNG seed (default 0xC0FFEE) */
} kw_sampler_params;

void kw_sampler_params_default(kw_sampler_params *p);
/* 0, or -1 + err when a value is not finite or repeat_penalty <= 0. */
int kw_sampler_params_check(const kw_sampler_params *p, kw_err *err);

/* One token's log-probability (log-softmax of the penalised logits) and
 * the n_top most likely alternatives. */
typedef struct kw_tok_logprob {
    int32_t id;
    float logprob;
    int32_t n_top;
    int32_t top_id[KW_MAX_TOP_LOGPROBS];
    float top_logprob[KW_MAX_TOP_LOGPROBS];
} kw_tok_logprob;

/* Picks a token from logits[n_vocab], which it modifies (penalties are
 * applied in place). history[0..n_history): the tokens the penalties count
 * (any order). rng: the caller's RNG state, advanced by a draw. lp (may be
 * NULL) receives the chosen token's logprob and the top_logprobs
 * (0..KW_MAX_TOP_LOGPROBS) alternatives. */
int32_t kw_sample(float *logits, int32_t n_vocab, const kw_sampler_params *p,
                  const int32_t *history, int32_t n_history, uint64_t *rng,
                  int32_t top_logprobs, kw_tok_logprob *lp);

typedef struct kw_sampler kw_sampler;
kw_sampler *kw_sampler_create(const kw_sampler_params *p, int32_t n_vocab, kw_err *err);
void kw_sampler_free(kw_sampler *s);
/* Records a token (prompt or generated) for the penalties. */
void kw_sampler_accept(kw_sampler *s, int32_t token);
/* Picks a token from logits[n_vocab] (not modified). */
int32_t kw_sampler_sample(kw_sampler *s, const float *logits);
/* Forgets the history and reseeds the RNG with the params' seed. */
void kw_sampler_reset(kw_sampler *s);

/* Index of the largest value; ties go to the lowest index. */
int32_t kw_argmax(const float *x, int32_t n);

#endif
