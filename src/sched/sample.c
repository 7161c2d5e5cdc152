/* sample.c - picks the next token from one row of logits for the
 * scheduler: repetition penalties (presence/frequency, OpenAI semantics),
 * greedy at temperature 0, otherwise temperature, top-k, top-p, min-p and
 * a seeded per-request RNG; optional logprobs (log-softmax of the
 * penalised logits) with the top alternatives. Owns kw_sched_sample. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kvwise/sched.h"

typedef struct cand { float logit; int32_t id; } cand;

static uint64_t rng_next(uint64_t *s) {            /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double rng_uniform(uint64_t *s) { return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0); }

static int cand_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit > y->logit) return -1;
    if (x->logit < y->logit) return 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static void apply_penalties(float *logits, int32_t n_vocab, const kw_sampling *sp,
                            const int32_t *hist, int32_t n_hist) {
    if (sp->presence_penalty == 0.0f && sp->frequency_penalty == 0.0f) return;
    for (int32_t i = 0; i < n_hist; i++) {
        int32_t id = hist[i];
        if (id < 0 || id >= n_vocab) continue;
        int32_t count = 0;
        bool first = true;
        for (int32_t j = 0; j < n_hist; j++) {
            if (hist[j] != id) continue;
            if (j < i) { first = false; break; }
            count++;
        }
        if (!first) continue;                     /* each distinct token once */
        logits[id] -= sp->frequency_penalty * (float)count + sp->presence_penalty;
    }
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++) if (x[i] > x[best]) best = i;
    return best;
}

/* The k largest logits, sorted descending, into c (k <= n). */
static int32_t top_candidates(const float *logits, int32_t n, int32_t k, cand *c) {
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        if (m < k) {
            c[m].logit = logits[i]; c[m].id = i; m++;
            for (int32_t j = m - 1; j > 0 && cand_desc(&c[j], &c[j - 1]) < 0; j--) {
                cand t = c[j]; c[j] = c[j - 1]; c[j - 1] = t;
            }
        } else if (logits[i] > c[k - 1].logit) {
            c[k - 1].logit = logits[i]; c[k - 1].id = i;
            for (int32_t j = k - 1; j > 0 && cand_desc(&c[j], &c[j - 1]) < 0; j--) {
                cand t = c[j]; c[j] = c[j - 1]; c[j - 1] = t;
            }
        }
    }
    return m;
}

static void fill_logprobs(const float *logits, int32_t n_vocab, int32_t chosen,
                          int32_t top_n, kw_tok_logprob *lp) {
    float mx = logits[argmax(logits, n_vocab)];
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)(logits[i] - mx));
    double lse = (double)mx + log(sum);
    lp->id = chosen;
    lp->logprob = (float)((double)logits[chosen] - lse);
    lp->n_top = 0;
    if (top_n <= 0) return;
    if (top_n > KW_SCHED_MAX_TOP_LOGPROBS) top_n = KW_SCHED_MAX_TOP_LOGPROBS;
    if (top_n > n_vocab) top_n = n_vocab;
    cand c[KW_SCHED_MAX_TOP_LOGPROBS];
    int32_t m = top_candidates(logits, n_vocab, top_n, c);
    for (int32_t i = 0; i < m; i++) {
        lp->top_id[i] = c[i].id;
        lp->top_logprob[i] = (float)((double)c[i].logit - lse);
    }
    lp->n_top = m;
}

/* Samples among candidates c[0..m) (sorted descending) after top-p/min-p. */
static int32_t sample_sorted(cand *c, int32_t m, const kw_sampling *sp, uint64_t *rng) {
    double mx = c[0].logit, sum = 0;
    double *p = malloc(sizeof(double) * (size_t)m);
    if (!p) return c[0].id;
    for (int32_t i = 0; i < m; i++) { p[i] = exp(((double)c[i].logit - mx) / sp->temperature); sum += p[i]; }
    int32_t keep = m;
    if (sp->min_p > 0.0f) {
        double thr = (double)sp->min_p * p[0];
        for (int32_t i = 1; i < keep; i++) if (p[i] < thr) { keep = i; break; }
    }
    if (sp->top_p > 0.0f && sp->top_p < 1.0f) {
        double cum = 0;
        for (int32_t i = 0; i < keep; i++) {
            cum += p[i] / sum;
            if (cum >= (double)sp->top_p) { keep = i + 1; break; }
        }
    }
    double tot = 0;
    for (int32_t i = 0; i < keep; i++) tot += p[i];
    double r = rng_uniform(rng) * tot;
    int32_t pick = keep - 1;
    for (int32_t i = 0; i < keep; i++) { r -= p[i]; if (r < 0) { pick = i; break; } }
    int32_t id = c[pick].id;
    free(p);
    return id;
}

/* Temperature (+ min-p) over the whole vocabulary in O(n_vocab), no sort:
 * the OpenAI default request (temperature 1, top_p 1) on a 150k vocabulary. */
static int32_t sample_unsorted(const float *logits, int32_t n_vocab, const kw_sampling *sp, uint64_t *rng) {
    int32_t best = argmax(logits, n_vocab);
    double mx = logits[best], inv_t = 1.0 / sp->temperature, tot = 0;
    /* min-p keeps p_i >= min_p * p_max, i.e. logit_i >= max + T * ln(min_p) */
    double floor_logit = sp->min_p > 0.0f ? mx + sp->temperature * log((double)sp->min_p) : -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++)
        if (logits[i] >= floor_logit) tot += exp(((double)logits[i] - mx) * inv_t);
    double r = rng_uniform(rng) * tot;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (logits[i] < floor_logit) continue;
        r -= exp(((double)logits[i] - mx) * inv_t);
        if (r < 0) return i;
    }
    return best;
}

int32_t kw_sched_sample(float *logits, int32_t n_vocab, const kw_sampling *sp,
                        const int32_t *history, int32_t n_history, uint64_t *rng,
                        int32_t top_logprobs, kw_tok_logprob *lp) {
    apply_penalties(logits, n_vocab, sp, history, n_history);
    int32_t id;
    if (sp->temperature <= 0.0f || sp->top_k == 1) {
        id = argmax(logits, n_vocab);
    } else if ((sp->top_k <= 0 || sp->top_k >= n_vocab) && !(sp->top_p > 0.0f && sp->top_p < 1.0f)) {
        id = sample_unsorted(logits, n_vocab, sp, rng);   /* no top-k/top-p: nothing to sort */
    } else {
        /* Candidates: the top_k if set, otherwise all, sorted once for top-p. */
        int32_t k = sp->top_k > 0 && sp->top_k < n_vocab ? sp->top_k : n_vocab;
        bool small_k = k < n_vocab && k <= 256;
        cand *c = malloc(sizeof(cand) * (size_t)(small_k ? k : n_vocab));
        if (!c) {
            id = argmax(logits, n_vocab);
        } else {
            int32_t m;
            if (small_k) {
                m = top_candidates(logits, n_vocab, k, c);
            } else {
                /* Tokens more than 30 temperature-scaled nats below the best
                 * carry < e^-30 of its probability each: leave them out of the sort. */
                float floor_logit = logits[argmax(logits, n_vocab)] - 30.0f * sp->temperature;
                m = 0;
                for (int32_t i = 0; i < n_vocab; i++)
                    if (logits[i] >= floor_logit) { c[m].logit = logits[i]; c[m].id = i; m++; }
                qsort(c, (size_t)m, sizeof(cand), cand_desc);
                if (m > k) m = k;
            }
            id = sample_sorted(c, m, sp, rng);
            free(c);
        }
    }
    if (lp) fill_logprobs(logits, n_vocab, id, top_logprobs, lp);
    return id;
}
