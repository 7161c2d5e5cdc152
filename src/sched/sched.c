/* sched.c - the engine thread: continuous batching with chunked prefill.
 *
 * Each step builds one batch: one token for every decoding sequence plus a
 * prefill chunk (<= prefill_step tokens) for up to prompt_concurrency
 * prompts, runs it through the engine, samples, detokenizes, holds back
 * possible stop strings and reports events to each request. Cancellation
 * (kw_sched_cancel or a hung-up client socket, polled every step) ends a
 * sequence within one step and releases its KV.
 *
 * Commit rows: the token sampled last has no KV yet (it would be fed in the
 * next step). When a sequence finishes normally and its KV goes to the
 * prompt cache, the client gets FINISH at once and the slot stays in
 * SEQ_COMMIT for one more step, in which that token is fed as an extra row
 * whose logits nobody reads; only then is the sequence (prompt + every
 * generated token) offered to the cache. Its position is inside the
 * reservation (prompt + max_tokens), so a commit never needs new memory.
 * A request that would find more cached after a pending commit (a
 * conversation's next turn, sent the moment the answer arrived) waits that
 * one step, so it finds the whole answer, end-of-turn token included, in
 * the cache; other requests are admitted at once. Owns kw_sched_* (sched.h). */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "kvwise/grammar.h"
#include "kvwise/memory.h"
#include "kvwise/sched.h"
#include "kvwise/testctl.h"

/* SEQ_COMMIT: finished (the request is gone), its last token still to be
 * fed so that the KV handed to the prompt cache covers every token. */
typedef enum { SEQ_FREE = 0, SEQ_PREFILL, SEQ_DECODE, SEQ_COMMIT } seq_state;

/* Where a sequence with a grammar is: under the mask, inside a think block
 * (unconstrained until "</think>"), or at the first token of an answer that
 * may open one. */
enum { GPH_ON = 0, GPH_THINK, GPH_MAYBE };
#define THINK_END "</think>"
#define THINK_END_LEN 8

typedef struct seq {
    seq_state st;
    kw_sched_req *r;                           /* NULL in SEQ_COMMIT */
    int32_t *toks; int32_t n_toks, cap_toks;   /* prompt then generated */
    int32_t n_prompt, n_past, n_gen, max_gen, cached;
    int32_t last_tok;
    uint64_t rng, order;
    kw_textout tx;
    kw_tok_logprob *lps; int32_t n_lp, cap_lp;
    int32_t row;                               /* logits row this step, -1 none */
    int32_t chunk;                             /* prefill tokens in this step */
    bool scripted_end;                         /* a plugged-in test sampler gave its last token */
    kw_reject_reason fail;                     /* an ERROR end caused by memory: KW_REJECT_NOMEM */
    double t_admit, t_first, t_last;           /* monotonic: admitted, first and latest token */
    int gphase;                                /* GPH_* (a request with a grammar) */
    char gtail[THINK_END_LEN]; int32_t n_gtail;/* GPH_THINK: the last bytes, for a "</think>" split over tokens */
} seq;

struct kw_sched {
    kw_engine *e;
    kw_sched_opts o;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    kw_sched_req *q_head, *q_tail;
    int32_t n_waiting;
    bool stopping, started;
    uint64_t next_id, next_order;
    uint64_t deferred_id;       /* the last request made to wait for a commit (each waits once at most) */
    seq *seqs;
    int32_t n_slots;
    int32_t *b_tok, *b_pos, *b_slot;
    bool *b_want;
    float *logits;
    uint32_t *gmask;            /* one grammar mask, (n_vocab + 31) / 32 words */
    float *grow;                /* the masked row of a grammar step, kept for a closing re-sample */
    char *piece;
    kw_sched_stats st;          /* engine thread's own counters */
    kw_sched_stats pub;         /* a copy published under mu after every step */
    kw_sched_req_info *pub_run; /* the running requests, published with pub (kw_sched_list) */
    int32_t n_pub_run;
};

const char *kw_finish_name(kw_finish f) {
    switch (f) {
    case KW_FINISH_STOP: return "stop";
    case KW_FINISH_LENGTH: return "length";
    case KW_FINISH_CANCELLED: return "cancelled";
    case KW_FINISH_ERROR: return "error";
    case KW_FINISH_REJECTED: return "rejected";
    default: return "none";
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void emit(kw_sched_req *r, const kw_sched_event *ev) { if (r->on_event) r->on_event(r, ev); }

static void finish_unadmitted(kw_sched_req *r, kw_finish why, const char *msg) {
    kw_sched_event ev = {.type = KW_EV_FINISH, .finish = why, .error = msg, .stop_index = -1,
                         .prompt_tokens = r->n_prompt};
    emit(r, &ev);
}

/* Refuses a request that never got a slot, counting the refusal by reason. */
static void reject_unadmitted(kw_sched *s, kw_sched_req *r, kw_reject_reason why, const char *msg) {
    s->st.rejected[why]++;
    kw_sched_event ev = {.type = KW_EV_FINISH, .finish = KW_FINISH_REJECTED, .error = msg, .stop_index = -1,
                         .prompt_tokens = r->n_prompt, .reason = why};
    emit(r, &ev);
}

/* ---- per-sequence helpers --------------------------------------------- */

static int seq_push_tok(seq *q, int32_t id) {
    if (q->n_toks == q->cap_toks) {
        int32_t cap = q->cap_toks ? q->cap_toks * 2 : 64;
        int32_t *nt = realloc(q->toks, sizeof(int32_t) * (size_t)cap);
        if (!nt) return -1;
        q->toks = nt; q->cap_toks = cap;
    }
    q->toks[q->n_toks++] = id;
    return 0;
}

static kw_tok_logprob *seq_new_lp(seq *q) {
    if (q->n_lp == q->cap_lp) {
        int32_t cap = q->cap_lp ? q->cap_lp * 2 : 16;
        kw_tok_logprob *n = realloc(q->lps, sizeof(kw_tok_logprob) * (size_t)cap);
        if (!n) return NULL;
        q->lps = n; q->cap_lp = cap;
    }
    return &q->lps[q->n_lp++];
}

static void seq_emit_text(seq *q, const char *text, size_t len) {
    if (!len && !q->n_lp) return;
    kw_sched_event ev = {.type = KW_EV_DELTA, .text = text, .len = len,
                         .lp = q->n_lp ? q->lps : NULL, .n_lp = q->n_lp};
    emit(q->r, &ev);
    q->n_lp = 0;
}

/* Hands the slot's KV to the engine (tokens[0..n_past) are complete;
 * keep = offer them to the prompt cache) and frees the slot. */
static void seq_release(kw_sched *s, int32_t slot, bool keep) {
    seq *q = &s->seqs[slot];
    s->e->seq_end(s->e, slot, q->toks, q->n_past, keep);
    free(q->toks);
    memset(q, 0, sizeof *q);
    q->st = SEQ_FREE;
}

/* Should a finished sequence feed its last token before caching? Only when
 * that token has no KV yet and a prompt cache would keep the result. */
static bool seq_wants_commit(const kw_sched *s, const seq *q, bool keep) {
    return keep && q->n_toks == q->n_past + 1 && kw_engine_caching(s->e);
}

static void seq_finish(kw_sched *s, int32_t slot, kw_finish why, const char *msg) {
    seq *q = &s->seqs[slot];
    if (why != KW_FINISH_STOP || q->tx.len) {
        /* Text left after a length/eog/cancel end is released as is (a stop match empties it first). */
        size_t cap = q->tx.len * 3 + 4;
        char *tmp = malloc(cap);
        if (tmp) {
            size_t n = kw_textout_flush(&q->tx, tmp, cap);
            if (why != KW_FINISH_CANCELLED && why != KW_FINISH_ERROR) seq_emit_text(q, tmp, n);
            free(tmp);
        }
    }
    bool keep = why == KW_FINISH_STOP || why == KW_FINISH_LENGTH;
    kw_sched_event ev = {.type = KW_EV_FINISH, .finish = why, .error = msg,
                         .prompt_tokens = q->n_prompt, .completion_tokens = q->n_gen,
                         .cached_tokens = q->cached, .reason = q->fail,
                         .stop_index = why == KW_FINISH_STOP ? q->tx.hit : -1};
    kw_sched_req *r = q->r;
    kw_textout_free(&q->tx);
    free(q->lps);
    q->lps = NULL; q->n_lp = q->cap_lp = 0;
    q->r = NULL;
    if (seq_wants_commit(s, q, keep)) q->st = SEQ_COMMIT;   /* the next step feeds toks[n_past] */
    else seq_release(s, slot, keep);
    s->st.requests_done++;
    emit(r, &ev);
}

/* The slot's KV could not cover the next positions (memory ran out): the
 * request ends in an error for lack of memory (retry), its KV is released. */
static void seq_fail_nomem(kw_sched *s, int32_t slot) {
    s->seqs[slot].fail = KW_REJECT_NOMEM;
    seq_finish(s, slot, KW_FINISH_ERROR, "out of memory: the KV for this sequence could not be allocated; retry");
}

/* A sampled token: text out, stop strings, eog, limits. */
static void seq_accept(kw_sched *s, int32_t slot, int32_t id) {
    seq *q = &s->seqs[slot];
    kw_engine *e = s->e;
    q->n_gen++;
    s->st.tokens_generated++;
    q->t_last = now_s();
    if (q->n_gen == 1) q->t_first = q->t_last;
    if (seq_push_tok(q, id) < 0) { seq_finish(s, slot, KW_FINISH_ERROR, "out of memory"); return; }
    q->last_tok = id;
    if (!q->r->ignore_eos && e->is_eog(e, id)) { q->n_lp = 0; seq_finish(s, slot, KW_FINISH_STOP, NULL); return; }
    size_t n = e->piece(e, id, s->piece, 256, false);
    if (n > 256) n = 256;
    size_t rel = 0;
    bool stopped = kw_textout_push(&q->tx, s->piece, n, &rel);
    if (rel || q->n_lp) { seq_emit_text(q, q->tx.buf, rel); kw_textout_consume(&q->tx, rel); }
    if (stopped) { q->tx.len = 0; q->n_lp = 0; seq_finish(s, slot, KW_FINISH_STOP, NULL); return; }
    if (q->n_gen >= q->max_gen) { seq_finish(s, slot, KW_FINISH_LENGTH, NULL); return; }
    if (q->scripted_end) { seq_finish(s, slot, KW_FINISH_STOP, NULL); return; }
    q->st = SEQ_DECODE;
}

/* The grammar's mask applied to row (plus the "<think>" token where an
 * answer may open a think block); *closing: the closing mask was used
 * (the tokens left only just cover a shortest completion: the budget
 * policy of grammar.h, docs/GRAMMAR.md). -1 when the sequence was ended
 * (stuck). */
static int grammar_mask(kw_sched *s, seq *q, float *row, bool *closing) {
    kw_sched_req *r = q->r;
    kw_err err = {{0}};
    int32_t n = kw_grammar_mask_budget(r->grammar, s->gmask, q->max_gen - q->n_gen, closing, &err);
    if (n <= 0) {
        char msg[sizeof err.msg + 16];
        snprintf(msg, sizeof msg, "grammar: %s", n < 0 ? err.msg : "no token can continue the output");
        seq_finish(s, (int32_t)(q - s->seqs), KW_FINISH_ERROR, msg);
        return -1;
    }
    if (!*closing && q->gphase == GPH_MAYBE && r->think_tok >= 0 && r->think_tok < s->e->n_vocab)
        s->gmask[(uint32_t)r->think_tok >> 5] |= 1u << ((uint32_t)r->think_tok & 31);
    kw_grammar_mask_apply(s->gmask, row, s->e->n_vocab);
    return 0;
}

/* Token id into the grammar's state: accepted under the mask, or scanned
 * for the end of the think block. *complete: nothing may follow. -1 when the
 * matcher refuses it (the mask let through a token past a run-time limit). */
static int grammar_advance(kw_sched *s, seq *q, int32_t id, bool *complete) {
    kw_sched_req *r = q->r;
    kw_err err = {{0}};
    if (q->gphase == GPH_MAYBE) q->gphase = id == r->think_tok ? GPH_THINK : GPH_ON;
    if (q->gphase == GPH_ON) {
        if (kw_grammar_accept_token(r->grammar, id, &err) < 0) return -1;
        *complete = kw_grammar_is_complete(r->grammar);
        return 0;
    }
    /* GPH_THINK: look for "</think>" across the token boundary */
    char buf[THINK_END_LEN + 272];
    memcpy(buf, q->gtail, (size_t)q->n_gtail);
    size_t n = s->e->piece(s->e, id, buf + q->n_gtail, 256, true);
    if (n > 256) n = 256;
    n += (size_t)q->n_gtail;
    char *hit = NULL;
    for (size_t i = 0; i + THINK_END_LEN <= n && !hit; i++)
        if (!memcmp(buf + i, THINK_END, THINK_END_LEN)) hit = buf + i;
    if (!hit) {
        size_t keep = n < THINK_END_LEN - 1 ? n : THINK_END_LEN - 1;
        memmove(q->gtail, buf + n - keep, keep);
        q->n_gtail = (int32_t)keep;
        return 0;
    }
    q->gphase = GPH_ON;
    const char *rest = hit + THINK_END_LEN, *end = buf + n;
    while (rest < end && (*rest == ' ' || *rest == '\n' || *rest == '\r' || *rest == '\t')) rest++;
    if (rest < end && kw_grammar_accept_bytes(r->grammar, rest, (size_t)(end - rest), &err) < 0) return -1;
    *complete = kw_grammar_is_complete(r->grammar);
    return 0;
}

static void seq_sample(kw_sched *s, int32_t slot, float *row) {
    seq *q = &s->seqs[slot];
    kw_sched_req *r = q->r;
    /* a sampler a test plugged in (testctl.h; a constant PASS without the test hooks) */
    int32_t scripted = kw_testctl_sample(r, q->n_gen, &q->scripted_end);
    if (scripted == KW_TEST_SAMPLE_END) { seq_finish(s, slot, KW_FINISH_STOP, NULL); return; }
    if (scripted >= 0) { seq_accept(s, slot, scripted); return; }
    double tg = 0;
    bool closing = false, gram = r->grammar && q->gphase != GPH_THINK;
    if (gram) {
        tg = now_s();
        if (grammar_mask(s, q, row, &closing) < 0) return;
        if (!closing) memcpy(s->grow, row, sizeof(float) * (size_t)s->e->n_vocab);
    }
    kw_tok_logprob *lp = r->logprobs ? seq_new_lp(q) : NULL;
    /* the one sampler (sampler.h); OpenAI penalties count the generated tokens only */
    kw_sampler_params sp = {.temp = r->sp.temperature, .top_k = r->sp.top_k, .top_p = r->sp.top_p,
                            .min_p = r->sp.min_p, .repeat_penalty = 1.0f,
                            .presence_penalty = r->sp.presence_penalty, .frequency_penalty = r->sp.frequency_penalty};
    int32_t id = kw_sample(row, s->e->n_vocab, &sp, q->toks + q->n_prompt, q->n_gen, &q->rng, r->top_logprobs, lp);
    bool complete = false;
    if (r->grammar) {
        int rc = grammar_advance(s, q, id, &complete);
        /* the token leaves too few tokens for the shortest completion: take
           it back and choose again among the tokens that close the output */
        if (rc == 0 && gram && !closing && q->gphase == GPH_ON &&
            !kw_grammar_budget_ok(r->grammar, q->max_gen - q->n_gen - 1)) {
            kw_err err = {{0}};
            if (kw_grammar_rollback(r->grammar, 1) == 0) {
                if (kw_grammar_mask_closing(r->grammar, s->gmask, &err) > 0) {
                    memcpy(row, s->grow, sizeof(float) * (size_t)s->e->n_vocab);
                    kw_grammar_mask_apply(s->gmask, row, s->e->n_vocab);
                    id = kw_sample(row, s->e->n_vocab, &sp, q->toks + q->n_prompt, q->n_gen, &q->rng,
                                   r->top_logprobs, lp);
                    closing = true;
                }
                /* no token spells the completion: the sampled token stands */
                rc = grammar_advance(s, q, id, &complete);
            }
        }
        if (tg > 0) {
            s->st.grammar_tokens++;
            s->st.grammar_closing_tokens += closing;
            s->st.grammar_seconds += now_s() - tg;
        }
        if (rc < 0) { seq_finish(s, slot, KW_FINISH_ERROR, "grammar: the sampled token does not continue the output"); return; }
    }
    seq_accept(s, slot, id);
    /* the grammar admits nothing more: the answer is whole, end it as an EOG would */
    if (complete && q->st == SEQ_DECODE && q->r == r) seq_finish(s, slot, KW_FINISH_STOP, NULL);
}

/* ---- admission ---------------------------------------------------------- */

static int32_t free_slot(kw_sched *s) {
    for (int32_t i = 0; i < s->n_slots; i++) if (s->seqs[i].st == SEQ_FREE) return i;
    return -1;
}

/* Slots in use: running requests and sequences still committing (they hold KV). */
static int32_t n_active(kw_sched *s) {
    int32_t n = 0;
    for (int32_t i = 0; i < s->n_slots; i++) n += s->seqs[i].st != SEQ_FREE;
    return n;
}

/* Does the slot serve a request (prefill or decode), as opposed to free or committing? */
static bool seq_running(const seq *q) { return q->st == SEQ_PREFILL || q->st == SEQ_DECODE; }

static kw_sched_req *queue_pop(kw_sched *s) {
    pthread_mutex_lock(&s->mu);
    kw_sched_req *r = s->q_head;
    if (r) {
        s->q_head = r->next;
        if (!s->q_head) s->q_tail = NULL;
        s->n_waiting--;
        r->next = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    return r;
}

static void queue_push_front(kw_sched *s, kw_sched_req *r) {
    pthread_mutex_lock(&s->mu);
    r->next = s->q_head;
    s->q_head = r;
    if (!s->q_tail) s->q_tail = r;
    s->n_waiting++;
    pthread_mutex_unlock(&s->mu);
}

#define KW_HANGUP_POLL_MAX 256

/* Polls the client sockets of reqs[0..n) once, without waiting, and marks
 * the requests whose client hung up as cancelled (the one hang-up check,
 * for waiting requests and running sequences alike). A hang-up is a socket
 * error or both directions closed (POLLERR / POLLHUP: a reset, a failed
 * keepalive probe), never the end of the client's data alone: a client may
 * close its sending side once its request is out (shutdown(SHUT_WR), as
 * `nc -N` and some proxies do) and still read the answer. */
static void cancel_hung_up(kw_sched_req **reqs, int n) {
    struct pollfd pf[KW_HANGUP_POLL_MAX];
    if (n > KW_HANGUP_POLL_MAX) n = KW_HANGUP_POLL_MAX;
    for (int i = 0; i < n; i++) { pf[i].fd = reqs[i]->client_fd; pf[i].events = 0; pf[i].revents = 0; }
    if (n <= 0 || poll(pf, (nfds_t)n, 0) <= 0) return;
    for (int i = 0; i < n; i++)
        if (pf[i].revents & (POLLHUP | POLLERR | POLLNVAL))
            __atomic_store_n(&reqs[i]->cancel, 1, __ATOMIC_RELEASE);
}

/* Unlinks, under mu, every waiting request for which gone(s, r, now) is
 * true and returns them in queue order (linked through next); the caller
 * answers them after dropping the lock. The one place the queue is cut. */
typedef bool (*waiting_test)(kw_sched *s, kw_sched_req *r, double now);
static kw_sched_req *queue_unlink_if(kw_sched *s, waiting_test gone, double now) {
    kw_sched_req *out = NULL, **out_tail = &out;
    kw_sched_req **pp = &s->q_head, *last = NULL;
    while (*pp) {
        kw_sched_req *r = *pp;
        if (gone(s, r, now)) {
            *pp = r->next;
            s->n_waiting--;
            r->next = NULL;
            *out_tail = r; out_tail = &r->next;
        } else {
            last = r;
            pp = &r->next;
        }
    }
    s->q_tail = last;
    return out;
}

static bool waiting_cancelled(kw_sched *s, kw_sched_req *r, double now) {
    (void)s; (void)now;
    return __atomic_load_n(&r->cancel, __ATOMIC_ACQUIRE);
}

static bool waiting_expired(kw_sched *s, kw_sched_req *r, double now) {
    return s->o.queue_timeout_s > 0 && now - r->t_submit > s->o.queue_timeout_s;
}

/* Removes cancelled requests that never got a slot and finishes them. */
static void drop_cancelled_waiting(kw_sched *s) {
    pthread_mutex_lock(&s->mu);
    /* clients that hung up while waiting (their connection is suspended, so
     * the HTTP layer cannot notice) */
    kw_sched_req *who[128];
    int n = 0;
    for (kw_sched_req *r = s->q_head; r && n < 128; r = r->next)
        if (r->client_fd >= 0) who[n++] = r;
    cancel_hung_up(who, n);
    kw_sched_req *gone = queue_unlink_if(s, waiting_cancelled, 0);
    pthread_mutex_unlock(&s->mu);
    while (gone) {
        kw_sched_req *r = gone;
        gone = r->next;
        finish_unadmitted(r, KW_FINISH_CANCELLED, NULL);
    }
}

/* Refuses requests that waited longer than queue_timeout_s. */
static void expire_waiting(kw_sched *s) {
    pthread_mutex_lock(&s->mu);
    double limit = s->o.queue_timeout_s;      /* under mu: a SIGHUP may change it */
    kw_sched_req *gone = limit > 0 ? queue_unlink_if(s, waiting_expired, now_s()) : NULL;
    pthread_mutex_unlock(&s->mu);
    while (gone) {
        kw_sched_req *r = gone;
        gone = r->next;
        char msg[200];
        snprintf(msg, sizeof msg, "the server is busy: no memory or slot became free within %.0f s; retry later",
                 limit);
        reject_unadmitted(s, r, KW_REJECT_QUEUE_TIMEOUT, msg);
    }
}

/* Would r find a longer cached prefix after the pending commits than the
 * cache gives it now? True for the client's next turn of a conversation
 * whose answer is being committed (sent the moment the answer arrived);
 * false for unrelated requests and for ones that share only what is
 * already cached (a common system prompt), so they are not held up. */
static bool commit_would_help(kw_sched *s, const kw_sched_req *r) {
    int32_t lim = r->n_prompt - 1, cached = -1;
    for (int32_t i = 0; i < s->n_slots; i++) {
        const seq *q = &s->seqs[i];
        if (q->st != SEQ_COMMIT) continue;
        int32_t n = q->n_past + 1 < lim ? q->n_past + 1 : lim, l = 0;
        while (l < n && q->toks[l] == r->prompt[l]) l++;
        if (l == 0) continue;
        if (cached < 0) cached = kw_engine_cached_prefix(s->e, r->prompt, r->n_prompt);
        if (l > cached) return true;
    }
    return false;
}

static void admit_waiting(kw_sched *s) {
    for (;;) {
        int32_t slot = free_slot(s);
        if (slot < 0) return;
        kw_sched_req *r = queue_pop(s);
        if (!r) return;
        if (r->id != s->deferred_id && commit_would_help(s, r)) {
            /* the commit runs in the very next step: admit after it (one step, once per request) */
            s->deferred_id = r->id;
            queue_push_front(s, r);
            return;
        }
        kw_engine *e = s->e;
        if (r->n_prompt <= 0 || r->n_prompt >= e->n_ctx) {
            finish_unadmitted(r, KW_FINISH_ERROR, "prompt does not fit the context");
            continue;
        }
        int32_t room = e->n_ctx - r->n_prompt;
        int32_t max_gen = r->max_tokens > 0 && r->max_tokens < room ? r->max_tokens : room;
        int32_t cached = e->seq_begin(e, slot, r->prompt, r->n_prompt, r->n_prompt + max_gen);
        if (cached == KW_ENGINE_NOMEM) {
            reject_unadmitted(s, r, KW_REJECT_NOMEM, "could not allocate the memory to admit this request; retry");
            continue;
        }
        if (cached == KW_ENGINE_NEVER || (cached < 0 && n_active(s) == 0)) {
            /* Nothing else holds memory (or the engine says so): it can never fit. */
            char msg[256];
            snprintf(msg, sizeof msg, "this request needs KV for %d positions (prompt %d + up to %d generated), "
                     "more than the memory budget can ever hold; shorten the prompt or lower max_tokens",
                     r->n_prompt + max_gen, r->n_prompt, max_gen);
            reject_unadmitted(s, r, KW_REJECT_NEVER_FITS, msg);
            continue;
        }
        if (cached < 0) {
            queue_push_front(s, r);       /* wait for running sequences to free memory */
            return;
        }
        s->st.prompt_tokens += (uint64_t)r->n_prompt;
        s->st.cached_tokens += (uint64_t)cached;
        seq *q = &s->seqs[slot];
        memset(q, 0, sizeof *q);
        q->r = r;
        q->st = SEQ_PREFILL;
        q->n_prompt = r->n_prompt;
        q->max_gen = max_gen;
        q->cached = cached;
        q->n_past = cached;
        q->order = s->next_order++;
        q->rng = r->sp.has_seed ? r->sp.seed : (uint64_t)now_s() * 1000003u ^ r->id * 0x9E3779B97F4A7C15ull;
        q->row = -1;
        q->t_admit = now_s();
        q->gphase = r->grammar_think == KW_GTHINK_OPEN ? GPH_THINK : r->grammar_think == KW_GTHINK_MAYBE ? GPH_MAYBE : GPH_ON;
        kw_textout_init(&q->tx, (const char *const *)r->stop, r->n_stop);
        for (int32_t i = 0; i < r->n_prompt; i++) seq_push_tok(q, r->prompt[i]);
        if (q->n_toks != r->n_prompt) { seq_finish(s, slot, KW_FINISH_ERROR, "out of memory"); continue; }
        kw_sched_event ev = {.type = KW_EV_ADMITTED, .cached_tokens = cached, .prompt_tokens = r->n_prompt};
        emit(r, &ev);
    }
}

/* Polls the sockets of live requests for a hang-up; cancels those. */
static void poll_hangups(kw_sched *s) {
    kw_sched_req *who[KW_HANGUP_POLL_MAX];
    int n = 0;
    for (int32_t i = 0; i < s->n_slots && n < KW_HANGUP_POLL_MAX; i++) {
        seq *q = &s->seqs[i];
        if (seq_running(q) && q->r->client_fd >= 0) who[n++] = q->r;
    }
    cancel_hung_up(who, n);
}

/* ---- one step ----------------------------------------------------------- */

static void log_progress(kw_sched *s, seq *q) {
    if (s->o.log_progress && q->n_prompt > s->o.prefill_step)
        fprintf(stderr, "Prompt processing progress: %d/%d\n", q->n_past, q->n_prompt);
}

static int run_step(kw_sched *s) {
    kw_engine *e = s->e;
    int32_t n = 0, rows = 0;
    /* commit rows: the last token of finished sequences, logits unused */
    for (int32_t i = 0; i < s->n_slots; i++) {
        seq *q = &s->seqs[i];
        q->row = -1; q->chunk = 0;
        if (q->st != SEQ_COMMIT || n >= e->max_batch) continue;
        if (e->seq_ensure(e, i, q->n_past + 1) < 0) { seq_release(s, i, true); continue; }   /* inside the reservation: not expected */
        s->b_tok[n] = q->toks[q->n_past]; s->b_pos[n] = q->n_past; s->b_slot[n] = i; s->b_want[n] = false;
        q->chunk = 1; n++;
    }
    /* decode tokens next: running streams keep flowing */
    for (int32_t i = 0; i < s->n_slots; i++) {
        seq *q = &s->seqs[i];
        if (q->st != SEQ_DECODE || n >= e->max_batch) continue;
        if (e->seq_ensure(e, i, q->n_past + 1) < 0) { seq_fail_nomem(s, i); continue; }
        s->b_tok[n] = q->last_tok; s->b_pos[n] = q->n_past; s->b_slot[n] = i; s->b_want[n] = true;
        q->row = rows++; q->chunk = 1; n++;
    }
    /* then prefill chunks, oldest prompts first */
    for (int32_t k = 0; k < s->o.prompt_concurrency; k++) {
        int32_t best = -1;
        for (int32_t i = 0; i < s->n_slots; i++) {
            seq *q = &s->seqs[i];
            if (q->st == SEQ_PREFILL && q->chunk == 0 && (best < 0 || q->order < s->seqs[best].order)) best = i;
        }
        if (best < 0 || n >= e->max_batch) break;
        seq *q = &s->seqs[best];
        int32_t c = q->n_prompt - q->n_past;
        if (c > s->o.prefill_step) c = s->o.prefill_step;
        if (c > e->max_batch - n) c = e->max_batch - n;
        if (e->seq_ensure(e, best, q->n_past + c) < 0) { seq_fail_nomem(s, best); k--; continue; }
        for (int32_t j = 0; j < c; j++) {
            s->b_tok[n] = q->toks[q->n_past + j]; s->b_pos[n] = q->n_past + j; s->b_slot[n] = best;
            s->b_want[n] = false;
            n++;
        }
        q->chunk = c;
        if (q->n_past + c == q->n_prompt) { s->b_want[n - 1] = true; q->row = rows++; }
    }
    if (!n) return 0;
    kw_err err = {{0}};
    double t0 = now_s();
    int rc = e->forward(e, n, s->b_tok, s->b_pos, s->b_slot, s->b_want, s->logits, &err);
    s->st.forward_seconds += now_s() - t0;
    s->st.steps++;
    for (int32_t i = 0; i < s->n_slots; i++) {
        seq *q = &s->seqs[i];
        if (q->st == SEQ_FREE || !q->chunk) continue;
        if (q->st == SEQ_COMMIT) {       /* its last token now has KV: cache the whole sequence */
            if (rc >= 0) q->n_past++;
            seq_release(s, i, true);
            continue;
        }
        if (rc < 0) { seq_finish(s, i, KW_FINISH_ERROR, err.msg[0] ? err.msg : "forward failed"); continue; }
        q->n_past += q->chunk;
        if (q->st == SEQ_PREFILL) {
            s->st.tokens_prefilled += (uint64_t)q->chunk;
            log_progress(s, q);
            kw_sched_event ev = {.type = KW_EV_PROGRESS, .done = q->n_past, .total = q->n_prompt};
            emit(q->r, &ev);
            if (q->n_past < q->n_prompt) continue;
        }
        seq_sample(s, i, s->logits + (size_t)q->row * (size_t)e->n_vocab);
    }
    return 1;
}

static void cancel_flagged(kw_sched *s) {
    poll_hangups(s);
    for (int32_t i = 0; i < s->n_slots; i++) {
        seq *q = &s->seqs[i];
        if (seq_running(q) && __atomic_load_n(&q->r->cancel, __ATOMIC_ACQUIRE))
            seq_finish(s, i, KW_FINISH_CANCELLED, NULL);
    }
}

/* Copies what kw_sched_list shows of the running sequences (under mu). */
static void publish_running(kw_sched *s) {
    int32_t n = 0;
    for (int32_t i = 0; i < s->n_slots; i++) {
        const seq *q = &s->seqs[i];
        if (!seq_running(q)) continue;
        kw_sched_req_info *o = &s->pub_run[n++];
        *o = (kw_sched_req_info){.id = q->r->id, .tag = q->r->tag,
                                 .state = q->st == SEQ_PREFILL ? KW_REQ_PREFILL : KW_REQ_DECODE,
                                 .n_prompt = q->n_prompt, .cached = q->cached,
                                 .prompt_done = q->n_past < q->n_prompt ? q->n_past : q->n_prompt,
                                 .n_gen = q->n_gen, .max_gen = q->max_gen, .t_submit = q->r->t_submit,
                                 .t_admit = q->t_admit, .t_first = q->t_first, .t_last = q->t_last};
    }
    s->n_pub_run = n;
}

static void *engine_main(void *arg) {
    kw_sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->stopping && !s->q_head && n_active(s) == 0) pthread_cond_wait(&s->cv, &s->mu);
        bool stop = s->stopping;
        pthread_mutex_unlock(&s->mu);
        if (stop) break;
        double t0 = now_s();
        drop_cancelled_waiting(s);
        expire_waiting(s);
        cancel_flagged(s);
        admit_waiting(s);
        int did = run_step(s);
        if (did) s->st.step_seconds += now_s() - t0;
        pthread_mutex_lock(&s->mu);
        s->pub = s->st;
        s->pub.active = n_active(s);     /* committing slots too: they hold KV until their step */
        publish_running(s);
        pthread_mutex_unlock(&s->mu);
        if (!did && n_active(s) == 0 && s->q_head) {
            /* queued requests that cannot be admitted and nothing running: avoid spinning */
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
    }
    for (int32_t i = 0; i < s->n_slots; i++) {
        if (seq_running(&s->seqs[i])) seq_finish(s, i, KW_FINISH_CANCELLED, "server shutting down");
        else if (s->seqs[i].st == SEQ_COMMIT) seq_release(s, i, true);   /* its KV up to n_past is complete */
    }
    kw_sched_req *r;
    while ((r = queue_pop(s))) finish_unadmitted(r, KW_FINISH_CANCELLED, "server shutting down");
    return NULL;
}

/* ---- public API --------------------------------------------------------- */

static void sched_free(kw_sched *s) {
    if (!s) return;
    free(s->seqs);
    free(s->b_tok); free(s->b_pos); free(s->b_slot); free(s->b_want);
    kw_mem_free(s->logits);
    free(s->gmask);
    kw_mem_free(s->grow);
    free(s->piece);
    free(s->pub_run);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

kw_sched *kw_sched_start(kw_engine *e, const kw_sched_opts *o, kw_err *err) {
    if (o->decode_concurrency < 1 || o->prompt_concurrency < 1 || o->prefill_step < 1) {
        kw_err_set(err, "scheduler: concurrency and prefill step must be >= 1");
        return NULL;
    }
    kw_sched *s = calloc(1, sizeof *s);
    if (!s) { kw_err_set(err, "scheduler: out of memory"); return NULL; }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->e = e;
    s->o = *o;
    s->n_slots = o->decode_concurrency < e->n_slots ? o->decode_concurrency : e->n_slots;
    int32_t rows = s->n_slots + o->prompt_concurrency;
    size_t mb = (size_t)e->max_batch;
    s->seqs = calloc((size_t)s->n_slots, sizeof(seq));
    s->b_tok = malloc(sizeof(int32_t) * mb);
    s->b_pos = malloc(sizeof(int32_t) * mb);
    s->b_slot = malloc(sizeof(int32_t) * mb);
    s->b_want = malloc(sizeof(bool) * mb);
    s->piece = malloc(272);
    s->gmask = malloc(sizeof(uint32_t) * (((size_t)e->n_vocab + 31) / 32));
    s->pub_run = calloc((size_t)s->n_slots, sizeof *s->pub_run);
    s->logits = kw_mem_alloc(KW_MEM_WORKSPACE, sizeof(float) * (size_t)rows * (size_t)e->n_vocab);
    s->grow = kw_mem_alloc(KW_MEM_WORKSPACE, sizeof(float) * (size_t)e->n_vocab);
    if (!s->seqs || !s->b_tok || !s->b_pos || !s->b_slot || !s->b_want || !s->piece || !s->logits || !s->pub_run ||
        !s->gmask || !s->grow) {
        sched_free(s);
        kw_err_set(err, "scheduler: out of memory for %d logits rows", rows);
        return NULL;
    }
    if (pthread_create(&s->th, NULL, engine_main, s) != 0) {
        sched_free(s);
        kw_err_set(err, "scheduler: cannot start the engine thread");
        return NULL;
    }
    s->started = true;
    return s;
}

int kw_sched_submit(kw_sched *s, kw_sched_req *r, kw_err *err) {
    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        kw_err_set(err, "server is shutting down");
        return KW_REJECT_SHUTTING_DOWN;
    }
    if (s->o.max_queue > 0 && s->n_waiting >= s->o.max_queue) {
        s->st.rejected[KW_REJECT_QUEUE_FULL]++;
        int32_t n = s->n_waiting;
        pthread_mutex_unlock(&s->mu);
        kw_err_set(err, "queue full (%d waiting)", n);
        return KW_REJECT_QUEUE_FULL;
    }
    r->next = NULL;
    r->cancel = 0;
    r->id = ++s->next_id;
    r->t_submit = now_s();
    if (s->q_tail) s->q_tail->next = r; else s->q_head = r;
    s->q_tail = r;
    s->n_waiting++;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void kw_sched_cancel(kw_sched *s, kw_sched_req *r) {
    __atomic_store_n(&r->cancel, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&s->mu);
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void kw_sched_stop(kw_sched *s) {
    if (!s) return;
    kw_thread_stop(&s->mu, &s->cv, &s->stopping, s->th, s->started);
    sched_free(s);
}

int kw_sched_list(kw_sched *s, kw_sched_req_info *out, int max) {
    pthread_mutex_lock(&s->mu);
    int n = 0;
    for (int32_t i = 0; i < s->n_pub_run && n < max; i++) out[n++] = s->pub_run[i];
    for (const kw_sched_req *r = s->q_head; r && n < max; r = r->next)
        out[n++] = (kw_sched_req_info){.id = r->id, .tag = r->tag, .state = KW_REQ_QUEUED, .n_prompt = r->n_prompt,
                                       .t_submit = r->t_submit};
    pthread_mutex_unlock(&s->mu);
    return n;
}

void kw_sched_set_queue_limits(kw_sched *s, int32_t max_queue, double queue_timeout_s) {
    pthread_mutex_lock(&s->mu);
    s->o.max_queue = max_queue;
    s->o.queue_timeout_s = queue_timeout_s;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

kw_sched_stats kw_sched_get_stats(kw_sched *s) {
    pthread_mutex_lock(&s->mu);
    kw_sched_stats st = s->pub;
    st.waiting = s->n_waiting;
    pthread_mutex_unlock(&s->mu);
    return st;
}
