/* sampler.c - the token sampler (sampler.h), shared by `kvwise generate`
 * and the server's scheduler.
 *
 * Owns: the penalties over a token history (counted by sorting a copy, so
 * the cost is O(h log h) in the history, not O(vocab)), greedy, the
 * candidate list for top-k / top-p (a bounded insertion list for small k,
 * otherwise every token within 30 temperature-scaled nats of the best,
 * sorted), temperature, min-p, top-p, the O(vocab) path when nothing needs
 * sorting, logprobs with top alternatives, a splitmix64 RNG, and the
 * kw_sampler object (a ring of recent tokens + its own RNG) on top. */
#include "kvwise/sampler.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct cand { float logit; int32_t id; } cand;

void kw_sampler_params_default(kw_sampler_params *p) {
    memset(p, 0, sizeof *p);
    p->temp = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->repeat_penalty = 1.0f;
    p->repeat_last_n = 64;
    p->seed = 0xC0FFEEu;
}

int kw_sampler_params_check(const kw_sampler_params *p, kw_err *err) {
    if (!isfinite(p->temp) || !isfinite(p->top_p) || !isfinite(p->min_p) || !(p->repeat_penalty > 0.0f) ||
        !isfinite(p->repeat_penalty) || !isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
        return kw_err_set(err, "sampler: invalid parameters (repeat penalty must be > 0, all values finite)");
    return 0;
}

int32_t kw_argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t *state) {
    return (double)(splitmix64(state) >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- penalties ----------------------------------------------------------- */

static bool penalties_active(const kw_sampler_params *p) {
    return p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
}

static void penalize(float *logits, int32_t id, int32_t count, const kw_sampler_params *p) {
    float *l = &logits[id];
    if (*l <= 0.0f) *l *= p->repeat_penalty;
    else *l /= p->repeat_penalty;
    *l -= (float)count * p->frequency_penalty + p->presence_penalty;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Each distinct token of the history once, with its count. Without memory
 * for the sorted copy: the same result by counting in place, O(h^2). */
static void apply_penalties(float *logits, int32_t n_vocab, const kw_sampler_params *p,
                            const int32_t *hist, int32_t n_hist) {
    if (!penalties_active(p) || !hist || n_hist <= 0) return;
    int32_t *s = malloc(sizeof(int32_t) * (size_t)n_hist);
    if (s) {
        memcpy(s, hist, sizeof(int32_t) * (size_t)n_hist);
        qsort(s, (size_t)n_hist, sizeof *s, cmp_i32);
        for (int32_t i = 0, j; i < n_hist; i = j) {
            for (j = i + 1; j < n_hist && s[j] == s[i]; j++) {}
            if (s[i] >= 0 && s[i] < n_vocab) penalize(logits, s[i], j - i, p);
        }
        free(s);
        return;
    }
    for (int32_t i = 0; i < n_hist; i++) {
        int32_t id = hist[i], count = 0;
        if (id < 0 || id >= n_vocab) continue;
        bool first = true;
        for (int32_t j = 0; j < n_hist && first; j++) {
            if (hist[j] != id) continue;
            if (j < i) first = false;
            else count++;
        }
        if (first) penalize(logits, id, count, p);
    }
}

/* ---- candidates ---------------------------------------------------------- */

static int cand_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit > y->logit) return -1;
    if (x->logit < y->logit) return 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* The k largest logits (ties: lowest id first), sorted descending, into c. */
static int32_t top_candidates(const float *logits, int32_t n, int32_t k, cand *c) {
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        cand x = {logits[i], i};
        if (m < k) c[m++] = x;
        else if (cand_desc(&x, &c[k - 1]) < 0) c[k - 1] = x;
        else continue;
        for (int32_t j = m - 1; j > 0 && cand_desc(&c[j], &c[j - 1]) < 0; j--) {
            cand t = c[j]; c[j] = c[j - 1]; c[j - 1] = t;
        }
    }
    return m;
}

/* Among candidates c[0..m) (sorted descending): temperature, min-p, top-p, a draw. */
static int32_t sample_sorted(const cand *c, int32_t m, const kw_sampler_params *p, uint64_t *rng) {
    double *pr = malloc(sizeof(double) * (size_t)m);
    if (!pr) return c[0].id;
    double mx = c[0].logit, sum = 0;
    for (int32_t i = 0; i < m; i++) { pr[i] = exp(((double)c[i].logit - mx) / p->temp); sum += pr[i]; }
    int32_t keep = m;
    if (p->min_p > 0.0f) {
        double thr = (double)p->min_p * pr[0];
        for (int32_t i = 1; i < keep; i++) if (pr[i] < thr) { keep = i; break; }
    }
    if (p->top_p < 1.0f) {
        double cum = 0, tot = 0;
        for (int32_t i = 0; i < keep; i++) tot += pr[i];
        for (int32_t i = 0; i < keep; i++) {
            cum += pr[i] / tot;
            if (cum >= (double)p->top_p) { keep = i + 1; break; }
        }
    }
    double tot = 0;
    for (int32_t i = 0; i < keep; i++) tot += pr[i];
    double r = rng_uniform(rng) * tot;
    int32_t pick = keep - 1;
    for (int32_t i = 0; i < keep; i++) { r -= pr[i]; if (r < 0) { pick = i; break; } }
    free(pr);
    return c[pick].id;
}

/* Temperature (+ min-p) over the whole vocabulary in O(n_vocab), no sort:
 * e.g. the OpenAI default request (temperature 1, top_p 1) on a 150k vocabulary. */
static int32_t sample_unsorted(const float *logits, int32_t n_vocab, const kw_sampler_params *p, uint64_t *rng) {
    int32_t best = kw_argmax(logits, n_vocab);
    double mx = logits[best], inv_t = 1.0 / p->temp, tot = 0;
    /* min-p keeps p_i >= min_p * p_max, i.e. logit_i >= max + T * ln(min_p) */
    double floor_logit = p->min_p > 0.0f ? mx + p->temp * log((double)p->min_p) : -INFINITY;
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

/* top-k (and top-p, which needs the order): candidates, then sample_sorted. */
static int32_t sample_truncated(const float *logits, int32_t n_vocab, const kw_sampler_params *p, uint64_t *rng) {
    int32_t k = p->top_k > 0 && p->top_k < n_vocab ? p->top_k : n_vocab;
    bool small_k = k < n_vocab && k <= 256;
    cand *c = malloc(sizeof(cand) * (size_t)(small_k ? k : n_vocab));
    if (!c) return kw_argmax(logits, n_vocab);
    int32_t m;
    if (small_k) {
        m = top_candidates(logits, n_vocab, k, c);
    } else {
        /* Tokens more than 30 temperature-scaled nats below the best carry
         * < e^-30 of its probability each: leave them out of the sort. */
        float floor_logit = logits[kw_argmax(logits, n_vocab)] - 30.0f * p->temp;
        m = 0;
        for (int32_t i = 0; i < n_vocab; i++)
            if (logits[i] >= floor_logit) { c[m].logit = logits[i]; c[m].id = i; m++; }
        qsort(c, (size_t)m, sizeof(cand), cand_desc);
        if (m > k) m = k;
    }
    int32_t id = sample_sorted(c, m, p, rng);
    free(c);
    return id;
}

static void fill_logprobs(const float *logits, int32_t n_vocab, int32_t chosen, int32_t top_n, kw_tok_logprob *lp) {
    float mx = logits[kw_argmax(logits, n_vocab)];
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)(logits[i] - mx));
    double lse = (double)mx + log(sum);
    lp->id = chosen;
    lp->logprob = (float)((double)logits[chosen] - lse);
    lp->n_top = 0;
    if (top_n <= 0) return;
    if (top_n > KW_MAX_TOP_LOGPROBS) top_n = KW_MAX_TOP_LOGPROBS;
    if (top_n > n_vocab) top_n = n_vocab;
    cand c[KW_MAX_TOP_LOGPROBS];
    int32_t m = top_candidates(logits, n_vocab, top_n, c);
    for (int32_t i = 0; i < m; i++) {
        lp->top_id[i] = c[i].id;
        lp->top_logprob[i] = (float)((double)c[i].logit - lse);
    }
    lp->n_top = m;
}

int32_t kw_sample(float *logits, int32_t n_vocab, const kw_sampler_params *p,
                  const int32_t *history, int32_t n_history, uint64_t *rng,
                  int32_t top_logprobs, kw_tok_logprob *lp) {
    if (!logits || n_vocab < 1 || !p) return -1;
    apply_penalties(logits, n_vocab, p, history, n_history);
    int32_t id;
    if (p->temp <= 0.0f || p->top_k == 1 || p->top_p <= 0.0f)
        id = kw_argmax(logits, n_vocab);
    else if ((p->top_k <= 0 || p->top_k >= n_vocab) && p->top_p >= 1.0f)
        id = sample_unsorted(logits, n_vocab, p, rng);     /* no top-k/top-p: nothing to sort */
    else
        id = sample_truncated(logits, n_vocab, p, rng);
    if (lp) fill_logprobs(logits, n_vocab, id, top_logprobs, lp);
    return id;
}

/* ---- the kw_sampler object ----------------------------------------------- */

struct kw_sampler {
    kw_sampler_params p;
    int32_t n_vocab;
    uint64_t rng;
    int32_t *hist;              /* ring of recent tokens (order does not matter to the penalties) */
    int32_t hist_cap, hist_n, hist_head;
    float *work;                /* [n_vocab] a copy of the logits kw_sample may modify */
};

kw_sampler *kw_sampler_create(const kw_sampler_params *p, int32_t n_vocab, kw_err *err) {
    if (n_vocab < 1) { kw_err_set(err, "sampler: vocabulary size %d", n_vocab); return NULL; }
    kw_sampler_params d;
    if (!p) { kw_sampler_params_default(&d); p = &d; }
    if (kw_sampler_params_check(p, err) < 0) return NULL;
    kw_sampler *s = calloc(1, sizeof *s);
    if (!s) { kw_err_set(err, "sampler: out of memory"); return NULL; }
    s->p = *p;
    s->n_vocab = n_vocab;
    s->hist_cap = p->repeat_last_n < 0 ? 4096 : p->repeat_last_n;
    s->hist = malloc((size_t)(s->hist_cap > 0 ? s->hist_cap : 1) * sizeof *s->hist);
    s->work = malloc((size_t)n_vocab * sizeof *s->work);
    if (!s->hist || !s->work) {
        kw_sampler_free(s);
        kw_err_set(err, "sampler: out of memory");
        return NULL;
    }
    kw_sampler_reset(s);
    return s;
}

void kw_sampler_free(kw_sampler *s) {
    if (!s) return;
    free(s->hist);
    free(s->work);
    free(s);
}

void kw_sampler_reset(kw_sampler *s) {
    if (!s) return;
    s->hist_n = s->hist_head = 0;
    s->rng = s->p.seed;
}

void kw_sampler_accept(kw_sampler *s, int32_t token) {
    if (!s || s->hist_cap <= 0 || token < 0 || token >= s->n_vocab) return;
    s->hist[s->hist_head] = token;
    s->hist_head = (s->hist_head + 1) % s->hist_cap;
    if (s->hist_n < s->hist_cap) s->hist_n++;
}

int32_t kw_sampler_sample(kw_sampler *s, const float *logits) {
    if (!s || !logits) return -1;
    memcpy(s->work, logits, (size_t)s->n_vocab * sizeof(float));
    return kw_sample(s->work, s->n_vocab, &s->p, s->hist, s->hist_n, &s->rng, 0, NULL);
}
