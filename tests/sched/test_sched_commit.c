/* test_sched_commit.c - the scheduler's commit rows (sched.c): when a
 * sequence finishes, its last sampled token (an end-of-turn token or the
 * last of max_tokens) is fed in the next step so that the KV handed to the
 * prompt cache covers prompt + every generated token; the client's FINISH
 * does not wait for that step; the commit stays inside the reservation;
 * with the cache off there is no commit; a server stopping with a commit
 * pending releases everything. Runs the stub engine with real KV (a
 * sampler plugged into the sampling step, testctl.h, plays each request's
 * script, so the tokens are chosen here). */
#include "testutil.h"
#include "engine_stub.h"
#include "kvwise/kvmem.h"
#include "kvwise/sched.h"
#include <pthread.h>
#include <string.h>
#include <time.h>

#define IM_END 257          /* the stub's <|im_end|>: end of generation */
#define NL '\n'

typedef struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    kw_sched_event fin;
    int32_t admitted_cached;
    kw_kvmem *kvm;
    kw_kvmem_stats at_finish;   /* KV state seen inside the FINISH callback */
    kw_kvmem_stats at_admit;    /* ... and inside the ADMITTED callback */
    kw_sched *s;
    kw_sched_req *next;         /* submitted from inside the FINISH callback */
    const int32_t *script;      /* the request's output, token by token (then it stops) */
    int32_t n_script;
} waiter;

/* The plugged-in sampler: each request's script from its waiter. */
static int32_t play_script(void *ctx, const kw_sched_req *r, int32_t n_gen, bool *last) {
    (void)ctx;
    const waiter *w = r->user;
    if (n_gen >= w->n_script) return KW_TEST_SAMPLE_END;
    *last = n_gen + 1 >= w->n_script;
    return w->script[n_gen];
}

static void on_event(kw_sched_req *r, const kw_sched_event *ev) {
    waiter *w = r->user;
    if (ev->type == KW_EV_ADMITTED) { w->admitted_cached = ev->cached_tokens; w->at_admit = kw_kvmem_get_stats(w->kvm); }
    if (ev->type != KW_EV_FINISH) return;
    w->at_finish = kw_kvmem_get_stats(w->kvm);   /* engine thread: the commit step has not run yet */
    if (w->next) {              /* the client's next turn, queued before the commit step can run */
        kw_err err;
        if (kw_sched_submit(w->s, w->next, &err) != 0) w->next = NULL;
    }
    pthread_mutex_lock(&w->mu);
    w->fin = *ev;
    w->fin.text = NULL; w->fin.error = NULL;
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void waiter_init(waiter *w, kw_kvmem *kvm) {
    memset(w, 0, sizeof *w);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->kvm = kvm;
    w->admitted_cached = -1;
}

static void waiter_wait(waiter *w) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 30;          /* a generous bound: the stub answers in milliseconds */
    pthread_mutex_lock(&w->mu);
    while (!w->done && pthread_cond_timedwait(&w->cv, &w->mu, &ts) == 0) {}
    pthread_mutex_unlock(&w->mu);
}

static void waiter_free(waiter *w) {
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
}

static void req_init(kw_sched_req *r, const int32_t *p, int32_t n, const int32_t *script, int32_t ns,
                     int32_t max_tokens, waiter *w) {
    memset(r, 0, sizeof *r);
    r->prompt = (int32_t *)p;
    r->n_prompt = n;
    r->max_tokens = max_tokens;
    w->script = script;
    w->n_script = ns;
    r->client_fd = -1;
    r->on_event = on_event;
    r->user = w;
}

/* Runs one request to FINISH: prompt p[0..n), scripted output script[0..ns). */
static kw_sched_event run(kw_sched *s, kw_kvmem *kvm, const int32_t *p, int32_t n, const int32_t *script,
                          int32_t ns, int32_t max_tokens, waiter *w) {
    waiter_init(w, kvm);
    kw_sched_req r;
    req_init(&r, p, n, script, ns, max_tokens, w);
    kw_err err;
    KW_CHECK(kw_sched_submit(s, &r, &err) == 0);
    waiter_wait(w);
    KW_CHECK(w->done);
    return w->fin;
}

/* Polls until the cache holds `tokens` tokens and no sequence is live (the commit ran). */
static bool wait_cached(kw_kvmem *kvm, int64_t tokens) {
    for (int i = 0; i < 3000; i++) {
        kw_kvmem_stats st = kw_kvmem_get_stats(kvm);
        if (st.cache.tokens >= tokens && st.live_seqs == 0) return true;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return false;
}

/* Polls until the scheduler reports no slot in use (a committing slot counts
 * as in use until its step is published). */
static bool wait_idle(kw_sched *s) {
    for (int i = 0; i < 3000; i++) {
        if (kw_sched_get_stats(s).active == 0) return true;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return false;
}

static kw_engine *make_engine(int32_t cache_seqs) {
    kw_engine *e = kw_engine_stub_create(256, 2, 64, 0);
    kw_engine_stub_kv_opts ko = {.kv_blocks = 64, .block_tokens = 16, .cache_max_seqs = cache_seqs,
                                 .cache_max_bytes = 1u << 30};
    kw_err err;
    if (!e || kw_engine_stub_enable_kv(e, &ko, &err) < 0) { fprintf(stderr, "stub: %s\n", err.msg); exit(1); }
    return e;
}

static kw_sched *start(kw_engine *e) {
    kw_sched_opts so = {.decode_concurrency = 2, .prompt_concurrency = 1, .prefill_step = 32, .max_queue = 8};
    kw_err err;
    kw_sched *s = kw_sched_start(e, &so, &err);
    if (!s) { fprintf(stderr, "sched: %s\n", err.msg); exit(1); }
    return s;
}

static void fill_words(int32_t *t, int32_t n, int32_t seed) {
    for (int32_t i = 0; i < n; i++) t[i] = 'a' + (seed * 7 + i * 3) % 26;
}

/* Turn 1 ends with <|im_end|> (sampled, counted in completion_tokens); turn
 * 2 re-renders prompt + answer + <|im_end|> + "\n" + a new message and must
 * find all of turn 1's prompt + completion in the cache. */
static void test_eog_is_committed(void) {
    kw_engine *e = make_engine(4);
    kw_sched *s = start(e);
    int32_t p1[40], ans[6] = {'o', 'k', ' ', 'y', 'o', IM_END};
    fill_words(p1, 40, 1);
    waiter w;
    kw_sched_event f = run(s, e->kvmem, p1, 40, ans, 6, 32, &w);
    KW_CHECK_EQ_INT(f.finish, KW_FINISH_STOP);
    KW_CHECK_EQ_INT(f.completion_tokens, 6);                 /* the end-of-turn token counts */
    /* FINISH reached the client before the commit: nothing cached yet, the slot still live */
    KW_CHECK_EQ_INT(w.at_finish.cache.tokens, 0);
    KW_CHECK_EQ_INT(w.at_finish.live_seqs, 1);
    int32_t free_at_finish = w.at_finish.free_blocks;
    waiter_free(&w);
    KW_CHECK(wait_cached(e->kvmem, 46));
    kw_kvmem_stats st = kw_kvmem_get_stats(e->kvmem);
    KW_CHECK_EQ_INT(st.cache.tokens, 46);                    /* 40 prompt + 6 generated: every token */
    KW_CHECK(st.free_blocks >= free_at_finish);              /* the commit took no block beyond the reservation */
    /* turn 2 */
    int32_t p2[70];
    memcpy(p2, p1, sizeof p1);
    memcpy(p2 + 40, ans, sizeof ans);
    p2[46] = NL;
    fill_words(p2 + 47, 23, 2);
    int32_t ans2[3] = {'f', 'i', 'n'};
    f = run(s, e->kvmem, p2, 70, ans2, 3, 3, &w);            /* ends by length this time */
    KW_CHECK_EQ_INT(w.admitted_cached, 46);                  /* >= turn 1's prompt + completion */
    KW_CHECK_EQ_INT(f.cached_tokens, 46);
    KW_CHECK_EQ_INT(f.finish, KW_FINISH_LENGTH);
    waiter_free(&w);
    KW_CHECK(wait_cached(e->kvmem, 73));
    st = kw_kvmem_get_stats(e->kvmem);
    KW_CHECK_EQ_INT(st.cache.n_seqs, 1);                     /* turn 2 replaced turn 1 */
    KW_CHECK_EQ_INT(st.cache.tokens, 73);
    KW_CHECK(wait_idle(s));                                  /* the committed slot is free again */
    kw_sched_stop(s);
    e->destroy(e);
}

/* The next turn arrives before the commit step has run (submitted from
 * inside turn 1's FINISH callback): admission waits one step for the
 * commit, so turn 2 still finds turn 1's prompt + completion cached. */
static void test_next_turn_right_away(void) {
    kw_engine *e = make_engine(4);
    kw_sched *s = start(e);
    int32_t p1[50], ans[4] = {'y', 'e', 's', IM_END}, p2[80], ans2[2] = {'o', 'k'};
    fill_words(p1, 50, 9);
    memcpy(p2, p1, sizeof p1);
    memcpy(p2 + 50, ans, sizeof ans);
    p2[54] = NL;
    fill_words(p2 + 55, 25, 10);
    waiter w1, w2;
    waiter_init(&w1, e->kvmem);
    waiter_init(&w2, e->kvmem);
    kw_sched_req r1, r2;
    req_init(&r1, p1, 50, ans, 4, 16, &w1);
    req_init(&r2, p2, 80, ans2, 2, 4, &w2);
    w1.s = s;
    w1.next = &r2;
    kw_err err;
    KW_CHECK(kw_sched_submit(s, &r1, &err) == 0);
    waiter_wait(&w1);
    KW_CHECK(w1.next == &r2);                                /* turn 2 was queued from the callback */
    waiter_wait(&w2);
    KW_CHECK(w1.done && w2.done);
    KW_CHECK_EQ_INT(w1.fin.completion_tokens, 4);
    KW_CHECK_EQ_INT(w2.admitted_cached, 54);                 /* turn 1's prompt 50 + completion 4 */
    waiter_free(&w1);
    waiter_free(&w2);
    kw_sched_stop(s);
    e->destroy(e);
}

/* A request that shares nothing with the committing sequence is not held
 * up: it is admitted before the commit step runs (nothing cached yet). */
static void test_unrelated_not_deferred(void) {
    kw_engine *e = make_engine(4);
    kw_sched *s = start(e);
    int32_t p1[40], ans[3] = {'o', 'k', IM_END}, p2[30], ans2[2] = {'n', 'o'};
    fill_words(p1, 40, 11);
    fill_words(p2, 30, 12);
    p2[0] = 'Z';                                             /* differs from p1 at the first token */
    waiter w1, w2;
    waiter_init(&w1, e->kvmem);
    waiter_init(&w2, e->kvmem);
    kw_sched_req r1, r2;
    req_init(&r1, p1, 40, ans, 3, 8, &w1);
    req_init(&r2, p2, 30, ans2, 2, 2, &w2);
    w1.s = s;
    w1.next = &r2;
    kw_err err;
    KW_CHECK(kw_sched_submit(s, &r1, &err) == 0);
    waiter_wait(&w1);
    waiter_wait(&w2);
    KW_CHECK(w1.done && w2.done);
    KW_CHECK_EQ_INT(w2.admitted_cached, 0);
    KW_CHECK_EQ_INT(w2.at_admit.cache.tokens, 0);            /* admitted while turn 1's commit was pending */
    KW_CHECK(wait_cached(e->kvmem, 43 + 32));                /* both committed afterwards */
    waiter_free(&w1);
    waiter_free(&w2);
    kw_sched_stop(s);
    e->destroy(e);
}

/* The last position a request may ever write is prompt + max_tokens - 1:
 * finishing by length at max_tokens commits exactly that position. */
static void test_commit_at_the_reservation_edge(void) {
    kw_engine *e = make_engine(4);
    kw_sched *s = start(e);
    int32_t p[32], ans[16];
    fill_words(p, 32, 3);
    fill_words(ans, 16, 4);
    waiter w;
    kw_sched_event f = run(s, e->kvmem, p, 32, ans, 16, 16, &w);   /* 48 positions = 3 blocks of 16 */
    KW_CHECK_EQ_INT(f.finish, KW_FINISH_LENGTH);
    KW_CHECK_EQ_INT(w.at_finish.free_blocks, 64 - 3);
    waiter_free(&w);
    KW_CHECK(wait_cached(e->kvmem, 48));
    kw_kvmem_stats st = kw_kvmem_get_stats(e->kvmem);
    KW_CHECK_EQ_INT(st.cache.tokens, 48);
    KW_CHECK_EQ_INT(st.free_blocks, 64 - 3);
    kw_sched_stop(s);
    e->destroy(e);
}

/* With the prompt cache off there is nothing to commit for: the slot is
 * released with FINISH. */
static void test_no_cache_no_commit(void) {
    kw_engine *e = make_engine(0);
    kw_sched *s = start(e);
    int32_t p[20], ans[4] = {'a', 'b', 'c', IM_END};
    fill_words(p, 20, 5);
    waiter w;
    kw_sched_event f = run(s, e->kvmem, p, 20, ans, 4, 8, &w);
    KW_CHECK_EQ_INT(f.finish, KW_FINISH_STOP);
    KW_CHECK_EQ_INT(w.at_finish.live_seqs, 0);
    KW_CHECK_EQ_INT(w.at_finish.free_blocks, 64);
    waiter_free(&w);
    kw_sched_stop(s);
    e->destroy(e);
}

/* Stopping the scheduler right after a FINISH (commit pending or done)
 * leaves every block either free or in the cache, and destroy frees all. */
static void test_stop_with_commit_pending(void) {
    for (int k = 0; k < 20; k++) {
        kw_engine *e = make_engine(4);
        kw_sched *s = start(e);
        int32_t p[24], ans[2] = {'h', IM_END};
        fill_words(p, 24, 6 + k);
        waiter w;
        run(s, e->kvmem, p, 24, ans, 2, 8, &w);
        waiter_free(&w);
        kw_sched_stop(s);
        kw_kvmem_stats st = kw_kvmem_get_stats(e->kvmem);
        KW_CHECK_EQ_INT(st.live_seqs, 0);
        KW_CHECK_EQ_INT(st.free_blocks + st.cached_only_blocks, 64);
        e->destroy(e);
    }
}

int main(void) {
    kw_testctl_set_sampler(play_script, NULL);
    test_eog_is_committed();
    test_next_turn_right_away();
    test_unrelated_not_deferred();
    test_commit_at_the_reservation_edge();
    test_no_cache_no_commit();
    test_stop_with_commit_pending();
    return kw_test_finish();
}
