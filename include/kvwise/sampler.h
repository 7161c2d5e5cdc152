/* kvwise/sampler.h - choosing the next token from logits.
 *
 * The chain, in llama.cpp's default order: repetition / presence /
 * frequency penalties over the last repeat_last_n accepted tokens ->
 * top-k -> top-p -> min-p -> temperature -> a draw from a seeded RNG.
 * temp <= 0 means greedy: the argmax after penalties, ties going to the
 * lowest id. The same seed and the same inputs give the same tokens. */
#ifndef KVWISE_SAMPLER_H
#define KVWISE_SAMPLER_H
#include "kvwise/common.h"

typedef struct kw_sampler_params {
    float temp;                 /* <= 0: greedy (default 0.8) */
    int32_t top_k;              /* <= 0: off (default 40) */
    float top_p;                /* >= 1: off (default 0.95) */
    float min_p;                /* <= 0: off (default 0.05) */
    float repeat_penalty;       /* 1: off (default 1) */
    int32_t repeat_last_n;      /* window for all penalties (default 64; -1 = whole history) */
    float presence_penalty;     /* 0: off */
    float frequency_penalty;    /* 0: off */
    uint64_t seed;              /* default 0xC0FFEE */
} kw_sampler_params;

void kw_sampler_params_default(kw_sampler_params *p);

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
