/* test_sampler.c - the one sampler (sampler.h), through the kw_sampler
 * object (`kvwise generate`) and the stateless kw_sample() (the server's
 * scheduler): greedy and its tie rule, temperature, top-k (insertion and
 * sorted paths), top-p, min-p and their order after temperature, the three
 * penalties and their window, logprobs, seeded determinism. */
#include "testutil.h"
#include "kvwise/sampler.h"
#include <math.h>
#include <string.h>

static kw_sampler_params plain(float temp, uint64_t seed) {
    kw_sampler_params p;
    kw_sampler_params_default(&p);
    p.temp = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    return p;
}

/* Frequencies of each id over n draws (n_vocab <= 8). */
static void histogram(kw_sampler *s, const float *logits, int n, double *freq) {
    int counts[8] = {0};
    for (int i = 0; i < n; i++) {
        int32_t t = kw_sampler_sample(s, logits);
        if (t >= 0 && t < 8) counts[t]++;
    }
    for (int i = 0; i < 8; i++) freq[i] = (double)counts[i] / n;
}

static void test_greedy(void) {
    float l[5] = {0.1f, 3.0f, -2.0f, 3.0f, 2.9f};
    KW_CHECK_EQ_INT(kw_argmax(l, 5), 1);              /* tie 1 vs 3 -> lowest id */
    kw_sampler_params p = plain(0.0f, 1);
    p.top_k = 1;
    kw_sampler *s = kw_sampler_create(&p, 5, NULL);
    for (int i = 0; i < 10; i++) KW_CHECK_EQ_INT(kw_sampler_sample(s, l), 1);
    kw_sampler_free(s);
}

static void test_temperature(void) {
    /* logits 0 and ln 2: p = 1/3, 2/3 at T=1; at T=0.5: 1/5, 4/5 */
    float l[2] = {0.0f, logf(2.0f)};
    double f[8];
    kw_sampler_params p = plain(1.0f, 42);
    kw_sampler *s = kw_sampler_create(&p, 2, NULL);
    histogram(s, l, 20000, f);
    KW_CHECK_NEAR(f[1], 2.0 / 3.0, 0.02);   /* 20000 draws: sd ~0.0033, so 6 sd */
    kw_sampler_free(s);
    p = plain(0.5f, 43);
    s = kw_sampler_create(&p, 2, NULL);
    histogram(s, l, 20000, f);
    KW_CHECK_NEAR(f[1], 0.8, 0.02);
    kw_sampler_free(s);
}

static void test_top_k(void) {
    float l[6] = {1.0f, 0.9f, 0.8f, 0.7f, 0.6f, 1.1f};
    double f[8];
    kw_sampler_params p = plain(1.0f, 7);
    p.top_k = 2;
    kw_sampler *s = kw_sampler_create(&p, 6, NULL);
    histogram(s, l, 5000, f);
    KW_CHECK(f[5] > 0.3 && f[0] > 0.3);
    KW_CHECK(f[1] == 0 && f[2] == 0 && f[3] == 0 && f[4] == 0);
    kw_sampler_free(s);
}

/* top-k through the heap path equals the reference order: the k largest,
 * ties by lowest id, on a larger vocabulary with many equal logits. */
static void test_top_k_heap(void) {
    enum { V = 1000 };
    static float l[V];
    for (int i = 0; i < V; i++) l[i] = (float)((i * 7919) % 97) * 0.1f;   /* values repeat ~10x */
    kw_sampler_params p = plain(1e-4f, 3);   /* near-greedy: always the best of the kept set */
    p.top_k = 5;
    kw_sampler *s = kw_sampler_create(&p, V, NULL);
    int32_t first = kw_sampler_sample(s, l);
    KW_CHECK_EQ_INT(first, kw_argmax(l, V));
    KW_CHECK_NEAR(l[first], 9.6, 1e-5);
    kw_sampler_free(s);
    /* k = 1 is greedy whatever the temperature */
    p = plain(5.0f, 4);
    p.top_k = 1;
    s = kw_sampler_create(&p, V, NULL);
    for (int i = 0; i < 20; i++) KW_CHECK_EQ_INT(kw_sampler_sample(s, l), kw_argmax(l, V));
    kw_sampler_free(s);
}

static void test_top_p(void) {
    float l[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    double f[8];
    kw_sampler_params p = plain(1.0f, 9);
    p.top_p = 0.7f;                      /* 0.5 + 0.3 reaches 0.7: keep ids 0, 1 */
    kw_sampler *s = kw_sampler_create(&p, 4, NULL);
    histogram(s, l, 8000, f);
    KW_CHECK(f[2] == 0 && f[3] == 0);
    KW_CHECK_NEAR(f[0], 0.5 / 0.8, 0.03);
    kw_sampler_free(s);
}

static void test_min_p(void) {
    float l[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
    double f[8];
    kw_sampler_params p = plain(1.0f, 11);
    p.min_p = 0.5f;                      /* cut at 0.25: keep ids 0, 1 */
    kw_sampler *s = kw_sampler_create(&p, 3, NULL);
    histogram(s, l, 8000, f);
    KW_CHECK(f[2] == 0);
    KW_CHECK(f[1] > 0.3);
    kw_sampler_free(s);
}

static void test_penalties(void) {
    kw_sampler_params p = plain(0.0f, 1);
    p.repeat_penalty = 1.1f;             /* 2.0 / 1.1 = 1.82 < 1.9 */
    float l[3] = {2.0f, 1.9f, -5.0f};
    kw_sampler *s = kw_sampler_create(&p, 3, NULL);
    KW_CHECK_EQ_INT(kw_sampler_sample(s, l), 0);
    kw_sampler_accept(s, 0);
    KW_CHECK_EQ_INT(kw_sampler_sample(s, l), 1);
    KW_CHECK_EQ_INT(l[0] == 2.0f, 1);   /* input untouched */
    kw_sampler_free(s);

    /* a negative logit is multiplied (pushed further down) */
    float n[2] = {-1.0f, -1.05f};
    s = kw_sampler_create(&p, 2, NULL);
    kw_sampler_accept(s, 0);
    KW_CHECK_EQ_INT(kw_sampler_sample(s, n), 1);
    kw_sampler_free(s);

    p = plain(0.0f, 1);
    p.presence_penalty = 0.2f;
    float q[2] = {1.0f, 0.9f};
    s = kw_sampler_create(&p, 2, NULL);
    kw_sampler_accept(s, 0);
    KW_CHECK_EQ_INT(kw_sampler_sample(s, q), 1);
    kw_sampler_free(s);

    p = plain(0.0f, 1);
    p.frequency_penalty = 0.06f;         /* once: 0.94 > 0.9; twice: 0.88 < 0.9 */
    s = kw_sampler_create(&p, 2, NULL);
    kw_sampler_accept(s, 0);
    KW_CHECK_EQ_INT(kw_sampler_sample(s, q), 0);
    kw_sampler_accept(s, 0);
    KW_CHECK_EQ_INT(kw_sampler_sample(s, q), 1);
    kw_sampler_free(s);

    /* the window: with repeat_last_n = 1 only the latest token counts */
    p = plain(0.0f, 1);
    p.presence_penalty = 0.2f;
    p.repeat_last_n = 1;
    s = kw_sampler_create(&p, 2, NULL);
    kw_sampler_accept(s, 0);
    kw_sampler_accept(s, 1);
    KW_CHECK_EQ_INT(kw_sampler_sample(s, q), 0);
    kw_sampler_reset(s);
    kw_sampler_accept(s, 0);
    KW_CHECK_EQ_INT(kw_sampler_sample(s, q), 1);
    kw_sampler_free(s);
}

static void draw(uint64_t seed, int32_t *out, int n) {
    float l[8] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f};
    kw_sampler_params p;
    kw_sampler_params_default(&p);
    p.seed = seed;
    p.top_k = 0;
    p.min_p = 0;
    kw_sampler *s = kw_sampler_create(&p, 8, NULL);
    for (int i = 0; i < n; i++) out[i] = kw_sampler_sample(s, l);
    kw_sampler_reset(s);                  /* reset reseeds: same first draws again */
    int same = 1;
    for (int i = 0; i < n; i++) same &= kw_sampler_sample(s, l) == out[i];
    KW_CHECK(same);
    kw_sampler_free(s);
}

static void test_seed(void) {
    int32_t a[64], b[64], c[64];
    draw(1234, a, 64);
    draw(1234, b, 64);
    draw(99, c, 64);
    KW_CHECK(memcmp(a, b, sizeof a) == 0);
    KW_CHECK(memcmp(a, c, sizeof a) != 0);
}

static kw_sampler_params req(float temp, float top_p, int32_t top_k, float min_p) {
    kw_sampler_params p = plain(temp, 0);
    p.top_p = top_p;
    p.top_k = top_k;
    p.min_p = min_p;
    return p;
}

/* kw_sample(): what the scheduler calls with a request's parameters. */
static void test_stateless(void) {
    float logits[8] = {0.1f, 2.0f, 0.5f, 2.0f, -1.0f, 0.0f, 1.9f, 0.3f};
    float tmp[8];
    uint64_t rng = 1;
    kw_sampler_params greedy = req(0.0f, 1.0f, 0, 0.0f);
    memcpy(tmp, logits, sizeof tmp);
    KW_CHECK_EQ_INT(kw_sample(tmp, 8, &greedy, NULL, 0, &rng, 0, NULL), 1);   /* first of the tied maxima */
    /* top_k = 2 at any temperature only ever picks ids 1 or 3 */
    kw_sampler_params k2 = req(1.5f, 1.0f, 2, 0.0f);
    int bad = 0;
    for (int i = 0; i < 200; i++) {
        memcpy(tmp, logits, sizeof tmp);
        int32_t id = kw_sample(tmp, 8, &k2, NULL, 0, &rng, 0, NULL);
        bad += id != 1 && id != 3;
    }
    KW_CHECK_EQ_INT(bad, 0);
    /* no top-k/top-p: the O(vocab) path; min_p = 0.5 keeps only ids 1, 3, 6 (p >= 0.5 p_max) */
    kw_sampler_params mp = req(1.0f, 1.0f, 0, 0.5f);
    bad = 0;
    int seen6 = 0;
    for (int i = 0; i < 300; i++) {
        memcpy(tmp, logits, sizeof tmp);
        int32_t id = kw_sample(tmp, 8, &mp, NULL, 0, &rng, 0, NULL);
        bad += id != 1 && id != 3 && id != 6;
        seen6 += id == 6;
    }
    KW_CHECK_EQ_INT(bad, 0);
    KW_CHECK(seen6 > 0);          /* p(6) ~ 0.31 of the kept mass: 300 draws all missing it ~ 1e-48 */
    /* top_k above 256 on a larger vocabulary (the sorted path) stays within the top k */
    enum { V = 1000 };
    static float big[V], bt[V];
    for (int i = 0; i < V; i++) big[i] = (float)((i * 7919) % V) / 100.0f;   /* a permutation of 0..9.99 */
    kw_sampler_params k300 = req(2.0f, 0.99f, 300, 0.0f);
    bad = 0;
    for (int i = 0; i < 100; i++) {
        memcpy(bt, big, sizeof bt);
        int32_t id = kw_sample(bt, V, &k300, NULL, 0, &rng, 0, NULL);
        bad += big[id] < 7.0f;    /* the top 300 of the permutation are the values >= 7.00 */
    }
    KW_CHECK_EQ_INT(bad, 0);
    /* same seed -> same sequence */
    kw_sampler_params t1 = req(1.0f, 0.95f, 0, 0.0f);
    uint64_t r1 = 42, r2 = 42;
    int same = 1;
    for (int i = 0; i < 50; i++) {
        float a[8], b[8];
        memcpy(a, logits, sizeof a); memcpy(b, logits, sizeof b);
        same &= kw_sample(a, 8, &t1, NULL, 0, &r1, 0, NULL) == kw_sample(b, 8, &t1, NULL, 0, &r2, 0, NULL);
    }
    KW_CHECK(same);
    /* presence penalty moves greedy off a token already generated */
    kw_sampler_params pen = req(0.0f, 1.0f, 0, 0.0f);
    pen.presence_penalty = 1.0f;
    int32_t hist[] = {1, 3};
    memcpy(tmp, logits, sizeof tmp);
    KW_CHECK_EQ_INT(kw_sample(tmp, 8, &pen, hist, 2, &rng, 0, NULL), 6);
    /* frequency counts every occurrence (history unsorted, ids repeated): 2.0 - 3 x 0.05 = 1.85 < 1.9 */
    kw_sampler_params fq = req(0.0f, 1.0f, 0, 0.0f);
    fq.frequency_penalty = 0.05f;
    int32_t h3[] = {1, 7, 1, 3, 1, 3, 3};
    memcpy(tmp, logits, sizeof tmp);
    KW_CHECK_EQ_INT(kw_sample(tmp, 8, &fq, h3, 7, &rng, 0, NULL), 6);
    KW_CHECK_NEAR(tmp[1], 2.0 - 3 * 0.05, 1e-6);            /* applied in place, once per distinct id */
    KW_CHECK_NEAR(tmp[7], 0.3 - 0.05, 1e-6);
    /* logprobs: the chosen token's logprob equals the top entry and is <= 0 */
    kw_tok_logprob lp;
    memcpy(tmp, logits, sizeof tmp);
    kw_sample(tmp, 8, &greedy, NULL, 0, &rng, 3, &lp);
    KW_CHECK_EQ_INT(lp.n_top, 3);
    KW_CHECK(lp.logprob <= 0.0f);
    KW_CHECK_NEAR(lp.logprob, lp.top_logprob[0], 1e-6);   /* same number, same computation */
    /* top_p = 0 keeps only the best token (the smallest set reaching 0) */
    kw_sampler_params p0 = req(1.0f, 0.0f, 0, 0.0f);
    for (int i = 0; i < 20; i++) { memcpy(tmp, logits, sizeof tmp); KW_CHECK_EQ_INT(kw_sample(tmp, 8, &p0, NULL, 0, &rng, 0, NULL), 1); }
}

/* Temperature comes before min-p (and top-p): logits 0 and ln 1.5 give
 * p0/p1 = 0.667 at T = 1, so min_p 0.9 keeps id 1 only; at T = 4 the ratio
 * is 1.5^-0.25 = 0.904 and both stay. (Applying min-p before temperature,
 * llama.cpp's order, would cut id 0 in both cases.) */
static void test_order(void) {
    float l[2] = {0.0f, logf(1.5f)};
    uint64_t rng = 5;
    int seen0 = 0;
    kw_sampler_params hot = req(4.0f, 1.0f, 0, 0.9f), cold = req(1.0f, 1.0f, 0, 0.9f);
    for (int i = 0; i < 400; i++) { float t[2] = {l[0], l[1]}; seen0 += kw_sample(t, 2, &hot, NULL, 0, &rng, 0, NULL) == 0; }
    KW_CHECK(seen0 > 100);        /* p0 ~ 0.475: 400 draws with fewer than 100 zeros ~ 1e-30 */
    seen0 = 0;
    for (int i = 0; i < 400; i++) { float t[2] = {l[0], l[1]}; seen0 += kw_sample(t, 2, &cold, NULL, 0, &rng, 0, NULL) == 0; }
    KW_CHECK_EQ_INT(seen0, 0);
    /* the object and the stateless call agree draw for draw (same seed, same history) */
    kw_sampler_params p = req(0.9f, 0.9f, 3, 0.05f);
    p.seed = 77;
    p.presence_penalty = 0.3f;
    kw_sampler *s = kw_sampler_create(&p, 8, NULL);
    float l8[8] = {0.1f, 2.0f, 0.5f, 2.0f, -1.0f, 0.0f, 1.9f, 0.3f};
    int32_t hist[64];
    int n = 0, same = 1;
    uint64_t r = 77;
    for (int i = 0; i < 40; i++) {
        float t[8];
        memcpy(t, l8, sizeof t);
        int32_t a = kw_sampler_sample(s, l8), b = kw_sample(t, 8, &p, hist, n < 64 ? n : 64, &r, 0, NULL);
        same &= a == b;
        kw_sampler_accept(s, a);
        hist[n++ % 64] = a;
    }
    KW_CHECK(same);
    kw_sampler_free(s);
}

static void test_bad_params(void) {
    kw_sampler_params p = plain(1.0f, 1);
    p.repeat_penalty = 0.0f;
    kw_err err = {{0}};
    KW_CHECK(kw_sampler_create(&p, 8, &err) == NULL);
    KW_CHECK(err.msg[0] != 0);
    KW_CHECK(kw_sampler_create(NULL, 0, &err) == NULL);
}

int main(void) {
    test_stateless();
    test_order();
    test_greedy();
    test_temperature();
    test_top_k();
    test_top_k_heap();
    test_top_p();
    test_min_p();
    test_penalties();
    test_seed();
    test_bad_params();
    return kw_test_finish();
}
