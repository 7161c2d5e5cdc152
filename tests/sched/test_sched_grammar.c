/* test_sched_grammar.c - constrained decoding in the scheduler's sampling
 * step (sched.c, grammar.h): every token is chosen under the request's
 * grammar mask and accepted into its matcher; a complete grammar ends the
 * answer without an EOG; EOG only where the grammar can end; a request with
 * a grammar batches with one without; a think block opened by the prompt
 * (or by the answer's first token) is not constrained, the grammar starts
 * after "</think>"; the budget-aware closing ends an answer whose logits
 * would run past max_tokens. The stub engine (byte vocab) with its forward wrapped so
 * that each slot's logits prefer a scripted token per generated position:
 * the grammar wins where they disagree. */
#include "testutil.h"
#include "engine_stub.h"
#include "kvwise/grammar.h"
#include "kvwise/sched.h"
#include <pthread.h>
#include <string.h>
#include <time.h>

#define IM_START 256
#define IM_END 257
#define P_LEN 2             /* every prompt here: 2 tokens */

/* per slot: the token the logits prefer at each generated position */
static const int32_t *g_pref[2];
static int32_t g_npref[2];
static int (*stub_forward)(kw_engine *, int32_t, const int32_t *, const int32_t *, const int32_t *, const bool *,
                           float *, kw_err *);

static int biased_forward(kw_engine *e, int32_t n, const int32_t *tok, const int32_t *pos, const int32_t *slot,
                          const bool *want, float *logits, kw_err *err) {
    int rc = stub_forward(e, n, tok, pos, slot, want, logits, err);
    int32_t row = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!want[i]) continue;
        int32_t k = pos[i] - (P_LEN - 1), s = slot[i];
        if (s >= 0 && s < 2 && k >= 0 && k < g_npref[s]) logits[(size_t)row * e->n_vocab + g_pref[s][k]] += 100.0f;
        row++;
    }
    return rc;
}

typedef struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    kw_sched_event fin;
    char text[512];
    size_t len;
} waiter;

static void on_event(kw_sched_req *r, const kw_sched_event *ev) {
    waiter *w = r->user;
    pthread_mutex_lock(&w->mu);
    if (ev->type == KW_EV_DELTA && w->len + ev->len < sizeof w->text) {
        memcpy(w->text + w->len, ev->text, ev->len);
        w->len += ev->len;
        w->text[w->len] = 0;
    }
    if (ev->type == KW_EV_FINISH) {
        w->fin = *ev;
        w->fin.text = NULL; w->fin.error = NULL;
        w->done = true;
        pthread_cond_signal(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
}

static void waiter_wait(waiter *w) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 30;
    pthread_mutex_lock(&w->mu);
    while (!w->done && pthread_cond_timedwait(&w->cv, &w->mu, &ts) == 0) {}
    pthread_mutex_unlock(&w->mu);
}

static kw_grammar_vocab *g_vocab;
static kw_engine *g_e;
static kw_sched *g_s;

/* The stub's vocab: bytes 0..255, <|im_start|> (special), <|im_end|> and <|endoftext|> (EOG). */
static kw_grammar_vocab *stub_vocab(void) {
    static char bytes[259];
    const char *b[259];
    uint32_t lens[259];
    uint8_t kinds[259];
    for (int i = 0; i < 259; i++) {
        bytes[i] = (char)i;
        b[i] = &bytes[i];
        lens[i] = i < 256 ? 1 : 0;
        kinds[i] = i < 256 ? KW_GTOK_TEXT : i == IM_START ? KW_GTOK_SPECIAL : KW_GTOK_EOG;
    }
    kw_err err;
    return kw_grammar_vocab_new(259, b, lens, kinds, &err);
}

typedef struct job {
    kw_sched_req r;
    waiter w;
    int32_t prompt[P_LEN];
    kw_grammar *g;
    kw_grammar_index *ix;
} job;

/* A request: GBNF grammar (NULL: none), greedy, max_tokens. */
static void job_init(job *j, const char *gbnf, int32_t max_tokens) {
    memset(j, 0, sizeof *j);
    pthread_mutex_init(&j->w.mu, NULL);
    pthread_cond_init(&j->w.cv, NULL);
    j->prompt[0] = 'h'; j->prompt[1] = 'i';
    j->r.prompt = j->prompt;
    j->r.n_prompt = P_LEN;
    j->r.max_tokens = max_tokens;
    j->r.client_fd = -1;
    j->r.on_event = on_event;
    j->r.user = &j->w;
    j->r.think_tok = -1;
    if (gbnf) {
        kw_err err = {{0}};
        j->g = kw_grammar_from_gbnf(gbnf, strlen(gbnf), NULL, &err);
        KW_CHECK(j->g != NULL);
        j->ix = j->g ? kw_grammar_index_new(j->g, g_vocab, NULL, &err) : NULL;
        KW_CHECK(j->ix != NULL);
        j->r.grammar = j->ix ? kw_grammar_matcher_new(j->g, j->ix, &err) : NULL;
        KW_CHECK(j->r.grammar != NULL);
    }
}

static void job_free(job *j) {
    kw_grammar_matcher_free(j->r.grammar);
    kw_grammar_index_free(j->ix);
    kw_grammar_free(j->g);
    pthread_mutex_destroy(&j->w.mu);
    pthread_cond_destroy(&j->w.cv);
}

static void set_pref(int slot, const int32_t *t, int32_t n) { g_pref[slot] = t; g_npref[slot] = n; }

/* Runs one request in slot 0 with the logits preferring pref. */
static void run1(job *j, const int32_t *pref, int32_t n) {
    set_pref(0, pref, n);
    kw_err err;
    KW_CHECK(kw_sched_submit(g_s, &j->r, &err) == 0);
    waiter_wait(&j->w);
    KW_CHECK(j->w.done);
}

static int32_t *str_toks(const char *s, int32_t *out) {
    int32_t n = 0;
    for (; *s; s++) out[n++] = (unsigned char)*s;
    return out;
}

static void test_grammar_wins(void) {
    job j;
    int32_t pref[16];
    /* the logits want "qqqq": the grammar allows only yes / no */
    job_init(&j, "root ::= \"yes\" | \"no\"", 16);
    run1(&j, str_toks("qqqq", pref), 4);
    KW_CHECK(!strcmp(j.w.text, "yes") || !strcmp(j.w.text, "no"));
    KW_CHECK_EQ_INT(j.w.fin.finish, KW_FINISH_STOP);
    /* complete: the answer ends at once, no EOG sampled */
    KW_CHECK_EQ_INT(j.w.fin.completion_tokens, (int)strlen(j.w.text));
    job_free(&j);
    /* where the logits agree with the grammar they are followed */
    job_init(&j, "root ::= \"yes\" | \"no\"", 16);
    run1(&j, str_toks("yes", pref), 3);
    KW_CHECK_MSG(!strcmp(j.w.text, "yes"), "got \"%s\"", j.w.text);
    job_free(&j);
}

static void test_eog_only_at_end(void) {
    job j;
    /* logits want EOG first: the grammar needs at least one 'a' */
    int32_t pref[] = {IM_END, 'a', 'a', IM_END};
    job_init(&j, "root ::= \"a\"+", 16);
    run1(&j, pref, 4);
    KW_CHECK(j.w.len >= 1);
    for (size_t i = 0; i < j.w.len; i++) KW_CHECK(j.w.text[i] == 'a');
    KW_CHECK_EQ_INT(j.w.fin.finish, KW_FINISH_STOP);
    KW_CHECK_MSG(!strcmp(j.w.text, "aaa"), "got \"%s\"", j.w.text);   /* EOG refused at 0 (an a instead), taken at 3 */
    job_free(&j);
    /* an endless grammar ends within max_tokens: the last token left is the EOG */
    job_init(&j, "root ::= [a-z]+", 5);
    run1(&j, pref, 0);
    KW_CHECK_EQ_INT(j.w.fin.finish, KW_FINISH_STOP);
    KW_CHECK_EQ_INT((int)j.w.len, 4);
    for (size_t i = 0; i < j.w.len; i++) KW_CHECK(j.w.text[i] >= 'a' && j.w.text[i] <= 'z');
    job_free(&j);
}

/* Budget-aware closing: logits that want to stay in the string forever
 * are overruled once the tokens left only just cover the shortest way out
 * (a drawn token that opens more than the budget holds is drawn again). */
static void test_closing_budget(void) {
    job j;
    int32_t pref[16];
    uint64_t before = kw_sched_get_stats(g_s).grammar_closing_tokens;
    job_init(&j, "root ::= \"{\" [a-z]* \"}\" [0-9]*", 6);
    run1(&j, str_toks("{aaaaaaaaaaaaaa", pref), 15);
    /* 6 tokens: "{aaa" as the logits want, then "}" and the EOG the closing leaves room for */
    KW_CHECK_MSG(!strcmp(j.w.text, "{aaa}"), "got \"%s\"", j.w.text);
    KW_CHECK_EQ_INT(j.w.fin.finish, KW_FINISH_STOP);
    job_free(&j);
    /* the logits open nested brackets: the one that would leave too little is redrawn */
    job_init(&j, "root ::= \"(\" item \")\"\nitem ::= \"x\" | \"((\" item \"))\"", 8);
    run1(&j, str_toks("((((((((((((", pref), 12);
    KW_CHECK_MSG(!strcmp(j.w.text, "(((x)))"), "got \"%s\"", j.w.text);
    KW_CHECK_EQ_INT(j.w.fin.finish, KW_FINISH_STOP);
    job_free(&j);
    KW_CHECK(kw_sched_get_stats(g_s).grammar_closing_tokens > before + 4);
    /* a budget below the shortest answer: the shortest way, cut at max_tokens */
    job_init(&j, "root ::= \"abcdef\" | \"abcdefgh\"", 3);
    run1(&j, str_toks("zzz", pref), 3);
    KW_CHECK_MSG(!strcmp(j.w.text, "abc"), "got \"%s\"", j.w.text);
    KW_CHECK_EQ_INT(j.w.fin.finish, KW_FINISH_LENGTH);
    job_free(&j);
}

static void test_batched_with_plain(void) {
    job a, b;
    int32_t pa[8], pb[8];
    job_init(&a, "root ::= [0-9]{4}", 16);
    job_init(&b, NULL, 8);
    set_pref(0, str_toks("abcdefgh", pa), 8);
    set_pref(1, str_toks("abcdefgh", pb), 8);
    kw_err err;
    KW_CHECK(kw_sched_submit(g_s, &a.r, &err) == 0);
    KW_CHECK(kw_sched_submit(g_s, &b.r, &err) == 0);
    waiter_wait(&a.w);
    waiter_wait(&b.w);
    KW_CHECK_EQ_INT((int)a.w.len, 4);
    for (size_t i = 0; i < a.w.len; i++) KW_CHECK(a.w.text[i] >= '0' && a.w.text[i] <= '9');
    KW_CHECK_MSG(!strcmp(b.w.text, "abcdefgh"), "got \"%s\"", b.w.text);  /* the plain one is untouched */
    KW_CHECK(kw_sched_get_stats(g_s).grammar_tokens >= 4);
    job_free(&a);
    job_free(&b);
}

static void test_think(void) {
    job j;
    int32_t pref[32];
    /* the prompt opened a think block: free text until </think>, then the grammar */
    job_init(&j, "root ::= \"ok\" | \"no\"", 32);
    j.r.grammar_think = KW_GTHINK_OPEN;
    run1(&j, str_toks("h{m</think>zz", pref), 13);
    KW_CHECK(!strcmp(j.w.text, "h{m</think>ok") || !strcmp(j.w.text, "h{m</think>no"));
    KW_CHECK_EQ_INT(j.w.fin.finish, KW_FINISH_STOP);
    job_free(&j);
    /* the answer may open one: its first token may be the think token */
    job_init(&j, "root ::= \"ok\" | \"no\"", 32);
    j.r.grammar_think = KW_GTHINK_MAYBE;
    j.r.think_tok = IM_START;
    pref[0] = IM_START;
    str_toks("x</think>ok", pref + 1);
    run1(&j, pref, 12);
    KW_CHECK_MSG(!strcmp(j.w.text, "x</think>ok"), "got \"%s\"", j.w.text);
    job_free(&j);
    /* ... or not: then the grammar holds from the first token */
    job_init(&j, "root ::= \"ok\" | \"no\"", 32);
    j.r.grammar_think = KW_GTHINK_MAYBE;
    j.r.think_tok = IM_START;
    run1(&j, str_toks("x</think>ok", pref), 11);
    KW_CHECK(!strcmp(j.w.text, "ok") || !strcmp(j.w.text, "no"));
    job_free(&j);
}

int main(void) {
    g_e = kw_engine_stub_create(256, 2, 64, 0);
    g_vocab = stub_vocab();
    if (!g_e || !g_vocab) { fprintf(stderr, "setup failed\n"); return 1; }
    stub_forward = g_e->forward;
    g_e->forward = biased_forward;
    kw_sched_opts so = {.decode_concurrency = 2, .prompt_concurrency = 2, .prefill_step = 32, .max_queue = 8};
    kw_err err;
    g_s = kw_sched_start(g_e, &so, &err);
    if (!g_s) { fprintf(stderr, "sched: %s\n", err.msg); return 1; }
    test_grammar_wins();
    test_eog_only_at_end();
    test_closing_budget();
    test_batched_with_plain();
    test_think();
    kw_sched_stop(g_s);
    g_e->destroy(g_e);
    kw_grammar_vocab_free(g_vocab);
    return kw_test_finish();
}
