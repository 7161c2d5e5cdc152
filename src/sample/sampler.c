/* sampler.c - the token sampler (sampler.h).
 *
 * Owns: the penalty history (a ring of the last repeat_last_n tokens), the
 * candidate list (id, logit, prob) that top-k / top-p / min-p cut down,
 * temperature, and a seeded splitmix64 RNG for the final draw. Greedy
 * (temp <= 0) skips the candidate list and takes the penalized argmax. */
#include "kvwise/sampler.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct cand { int32_t id; float logit; float p; } cand;

struct kw_sampler {
    kw_sampler_params p;
    int32_t n_vocab;
    uint64_t rng;
    int32_t *hist;              /* ring of recent tokens */
    int32_t hist_cap, hist_n, hist_head;
    int32_t *counts;            /* [n_vocab] scratch for penalties */
    float *work;                /* [n_vocab] penalized logits */
    cand *cands;                /* [n_vocab] */
};

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

kw_sampler *kw_sampler_create(const kw_sampler_params *p, int32_t n_vocab, kw_err *err) {
    if (n_vocab < 1) { kw_err_set(err, "sampler: vocabulary size %d", n_vocab); return NULL; }
    kw_sampler_params d;
    if (!p) { kw_sampler_params_default(&d); p = &d; }
    if (!isfinite(p->temp) || !isfinite(p->top_p) || !isfinite(p->min_p) || !(p->repeat_penalty > 0.0f) ||
        !isfinite(p->repeat_penalty) || !isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty)) {
        kw_err_set(err, "sampler: invalid parameters (repeat penalty must be > 0, all values finite)");
        return NULL;
    }
    kw_sampler *s = calloc(1, sizeof *s);
    if (!s) { kw_err_set(err, "sampler: out of memory"); return NULL; }
    s->p = *p;
    s->n_vocab = n_vocab;
    s->hist_cap = p->repeat_last_n < 0 ? 4096 : p->repeat_last_n;
    s->hist = malloc((size_t)(s->hist_cap > 0 ? s->hist_cap : 1) * sizeof *s->hist);
    s->counts = calloc((size_t)n_vocab, sizeof *s->counts);
    s->work = malloc((size_t)n_vocab * sizeof *s->work);
    s->cands = malloc((size_t)n_vocab * sizeof *s->cands);
    if (!s->hist || !s->counts || !s->work || !s->cands) {
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
    free(s->counts);
    free(s->work);
    free(s->cands);
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

static bool penalties_active(const kw_sampler_params *p) {
    return p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
}

/* work = logits with repetition / presence / frequency penalties applied. */
static void apply_penalties(kw_sampler *s, const float *logits) {
    memcpy(s->work, logits, (size_t)s->n_vocab * sizeof(float));
    if (!penalties_active(&s->p) || s->hist_n == 0) return;
    for (int32_t i = 0; i < s->hist_n; i++) s->counts[s->hist[i]]++;
    for (int32_t i = 0; i < s->hist_n; i++) {
        int32_t id = s->hist[i], n = s->counts[id];
        if (n == 0) continue;                       /* already done */
        float *l = &s->work[id];
        if (*l <= 0.0f) *l *= s->p.repeat_penalty;
        else *l /= s->p.repeat_penalty;
        *l -= (float)n * s->p.frequency_penalty + s->p.presence_penalty;
        s->counts[id] = 0;
    }
}

static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Softmax over the first n candidates (sorted, so cands[0] is the max). */
static void cand_softmax(cand *c, int32_t n, float temp) {
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) { c[i].p = expf((c[i].logit - c[0].logit) / temp); sum += c[i].p; }
    for (int32_t i = 0; i < n; i++) c[i].p = (float)(c[i].p / sum);
}

static int32_t keep_top_p(const cand *c, int32_t n, float top_p) {
    if (top_p >= 1.0f) return n;
    double cum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        cum += c[i].p;
        if (cum >= top_p) return i + 1;
    }
    return n;
}

static int32_t keep_min_p(const cand *c, int32_t n, float min_p) {
    if (min_p <= 0.0f) return n;
    float cut = c[0].p * min_p;
    int32_t k = 1;
    while (k < n && c[k].p >= cut) k++;
    return k;
}

/* a is "worse" than b: lower logit, or equal logit and higher id. */
static bool cand_worse(const cand *a, const cand *b) {
    return a->logit < b->logit || (a->logit == b->logit && a->id > b->id);
}

static void heap_sift_down(cand *h, int32_t k, int32_t i) {
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < k && cand_worse(&h[l], &h[w])) w = l;
        if (r < k && cand_worse(&h[r], &h[w])) w = r;
        if (w == i) return;
        cand t = h[i]; h[i] = h[w]; h[w] = t;
        i = w;
    }
}

/* The k best of work[0..n) into cands[0..k), sorted best first: a min-heap
 * of size k over the vocabulary (O(n log k)) instead of a full sort. */
static void select_top_k(kw_sampler *s, int32_t k) {
    cand *h = s->cands;
    for (int32_t i = 0; i < k; i++) h[i] = (cand){i, s->work[i], 0.0f};
    for (int32_t i = k / 2 - 1; i >= 0; i--) heap_sift_down(h, k, i);
    for (int32_t i = k; i < s->n_vocab; i++) {
        cand c = {i, s->work[i], 0.0f};
        if (cand_worse(&h[0], &c)) { h[0] = c; heap_sift_down(h, k, 0); }
    }
    qsort(h, (size_t)k, sizeof *h, cand_cmp);
}

int32_t kw_sampler_sample(kw_sampler *s, const float *logits) {
    if (!s || !logits) return -1;
    apply_penalties(s, logits);
    if (s->p.temp <= 0.0f) return kw_argmax(s->work, s->n_vocab);
    int32_t n = s->n_vocab;
    if (s->p.top_k > 0 && s->p.top_k < n) {
        n = s->p.top_k;
        select_top_k(s, n);
    } else {
        for (int32_t i = 0; i < n; i++) s->cands[i] = (cand){i, s->work[i], 0.0f};
        qsort(s->cands, (size_t)n, sizeof *s->cands, cand_cmp);
    }
    cand_softmax(s->cands, n, 1.0f);
    n = keep_top_p(s->cands, n, s->p.top_p);
    cand_softmax(s->cands, n, 1.0f);
    n = keep_min_p(s->cands, n, s->p.min_p);
    cand_softmax(s->cands, n, s->p.temp);
    double r = rng_uniform(&s->rng), cum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        cum += s->cands[i].p;
        if (r < cum) return s->cands[i].id;
    }
    return s->cands[n - 1].id;
}
