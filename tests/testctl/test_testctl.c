/* test_testctl.c - the test hooks (testctl.h) in a test build: one fault
 * mechanism (kw_mem_fail_nth is an "alloc=N" rule: it fails exactly the
 * n-th accounted allocation, is counted as injected, replaces a spec and
 * clears with 0); the sampler plugged into the sampling step (asked for
 * every token of every request, its tokens become the output and its last
 * ends the request "stop", a PASS leaves the request to kw_sample, an empty
 * script ends it at once; unplugged, nothing is asked); the matmul test
 * order switch. The scheduler runs the stub engine (tests/lib/). */
#include "testutil.h"
#include "engine_stub.h"
#include "kvwise/memory.h"
#include "kvwise/sched.h"
#include <pthread.h>
#include <string.h>
#include <time.h>

static void test_fail_nth_is_a_fault_rule(void) {
    kw_err err = {{0}};
    KW_CHECK(kw_fault_configure("kv_block=1", &err) == 0 && kw_fault_configured());
    kw_mem_fail_nth(3);                                   /* replaces the spec */
    KW_CHECK(!kw_fault_hit(KW_FAULT_KV_BLOCK, -1));
    void *a = kw_mem_alloc(KW_MEM_OTHER, 16), *b = kw_mem_alloc(KW_MEM_KV, 16);
    void *c = kw_mem_alloc(KW_MEM_OTHER, 16), *d = kw_mem_alloc(KW_MEM_OTHER, 16);
    KW_CHECK(a && b && !c && d);                          /* the third fails, once, whatever its kind */
    KW_CHECK_EQ_INT(kw_fault_injected(), 1);
    kw_mem_free(a); kw_mem_free(b); kw_mem_free(d);
    kw_mem_fail_nth(1);
    kw_mem_fail_nth(0);                                   /* clears */
    KW_CHECK(!kw_fault_configured());
    void *e = kw_mem_alloc(KW_MEM_OTHER, 16);
    KW_CHECK(e != NULL);
    kw_mem_free(e);
}

/* ---- the plugged-in sampler ---- */

typedef struct run {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    kw_finish finish;
    int32_t completion;
    char text[256];
    size_t len;
    const int32_t *script;      /* NULL: the sampler passes this request */
    int32_t n_script;
    int asked;                  /* times the sampler was asked about it */
} run;

static int32_t play(void *ctx, const kw_sched_req *r, int32_t n_gen, bool *last) {
    KW_CHECK(ctx == (void *)&play);
    run *u = r->user;
    u->asked++;
    if (!u->script) return KW_TEST_SAMPLE_PASS;
    if (n_gen >= u->n_script) return KW_TEST_SAMPLE_END;
    *last = n_gen + 1 >= u->n_script;
    return u->script[n_gen];
}

static void on_event(kw_sched_req *r, const kw_sched_event *ev) {
    run *u = r->user;
    if (ev->type == KW_EV_DELTA && u->len + ev->len < sizeof u->text) {
        memcpy(u->text + u->len, ev->text, ev->len);
        u->len += ev->len;
    }
    if (ev->type != KW_EV_FINISH) return;
    pthread_mutex_lock(&u->mu);
    u->done = true;
    u->finish = ev->finish;
    u->completion = ev->completion_tokens;
    pthread_cond_signal(&u->cv);
    pthread_mutex_unlock(&u->mu);
}

/* Runs one request of prompt "hello" to FINISH with at most max_tokens. */
static void run_one(kw_sched *s, run *u, const int32_t *script, int32_t n, int32_t max_tokens) {
    memset(u, 0, sizeof *u);
    pthread_mutex_init(&u->mu, NULL);
    pthread_cond_init(&u->cv, NULL);
    u->script = script;
    u->n_script = n;
    int32_t prompt[5] = {'h', 'e', 'l', 'l', 'o'};
    kw_sched_req r;
    memset(&r, 0, sizeof r);
    r.prompt = prompt;
    r.n_prompt = 5;
    r.max_tokens = max_tokens;
    r.client_fd = -1;
    r.on_event = on_event;
    r.user = u;
    kw_err err;
    KW_CHECK(kw_sched_submit(s, &r, &err) == 0);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 30;
    pthread_mutex_lock(&u->mu);
    while (!u->done && pthread_cond_timedwait(&u->cv, &u->mu, &ts) == 0) {}
    pthread_mutex_unlock(&u->mu);
    KW_CHECK(u->done);
    pthread_mutex_destroy(&u->mu);
    pthread_cond_destroy(&u->cv);
}

static void test_plugged_sampler(void) {
    bool last = true;
    KW_CHECK_EQ_INT(kw_testctl_sample(NULL, 0, &last), KW_TEST_SAMPLE_PASS);   /* nothing plugged in */
    KW_CHECK(!last);
    kw_engine *e = kw_engine_stub_create(128, 1, 64, 0);
    kw_sched_opts so = {.decode_concurrency = 1, .prompt_concurrency = 1, .prefill_step = 32, .max_queue = 4};
    kw_err err;
    kw_sched *s = e ? kw_sched_start(e, &so, &err) : NULL;
    KW_CHECK(s != NULL);
    if (!s) return;
    kw_testctl_set_sampler(play, (void *)&play);
    run u;
    static const int32_t yes[3] = {'y', 'e', 's'};
    run_one(s, &u, yes, 3, 10);                           /* its tokens, then "stop" after the last */
    KW_CHECK(u.finish == KW_FINISH_STOP && u.completion == 3 && u.len == 3 && !memcmp(u.text, "yes", 3));
    KW_CHECK_EQ_INT(u.asked, 3);
    run_one(s, &u, yes, 3, 2);                            /* max_tokens still applies */
    KW_CHECK(u.finish == KW_FINISH_LENGTH && u.completion == 2 && u.len == 2);
    run_one(s, &u, yes, 0, 10);                           /* an empty script: stop at once */
    KW_CHECK(u.finish == KW_FINISH_STOP && u.completion == 0 && u.len == 0 && u.asked == 1);
    run_one(s, &u, NULL, 0, 4);                           /* passed: the stub's own logits are sampled */
    KW_CHECK(u.finish == KW_FINISH_LENGTH && u.completion == 4 && u.asked == 4);
    kw_testctl_set_sampler(NULL, NULL);
    run_one(s, &u, yes, 3, 4);                            /* unplugged: nobody is asked */
    KW_CHECK(u.completion == 4 && u.asked == 0);
    kw_sched_stop(s);
    e->destroy(e);
}

static void test_matmul_order_switch(void) {
    KW_CHECK(!kw_testctl_matmul_help_first());
    kw_matmul_test_help_first(true);
    KW_CHECK(kw_testctl_matmul_help_first());
    kw_matmul_test_help_first(false);
    KW_CHECK(!kw_testctl_matmul_help_first());
}

int main(void) {
    test_fail_nth_is_a_fault_rule();
    test_plugged_sampler();
    test_matmul_order_switch();
    return kw_test_finish();
}
