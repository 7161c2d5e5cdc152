/* pool.c - the persistent thread pool (kw_pool).
 *
 * n_threads - 1 workers are created once. kw_pool_run() publishes a task by
 * bumping a generation counter; workers spin on it for a short while
 * (cheap back-to-back matmuls during decode), then sleep on a condition
 * variable. The caller runs as thread 0 and spins until every worker has
 * reported done. One run at a time per pool (the forward pass is
 * single-driver); concurrent callers are serialised by a mutex. */
#include "kvwise/tensor.h"
#include "tensor/kernels.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#define KW_POOL_SPIN_NS 50000   /* a worker spins this long for the next task, then sleeps */
#define KW_POOL_WAIT_NS 20000   /* the caller spins this long for workers, then yields */
#define KW_POOL_MAX 256

struct kw_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t run_lock;          /* one kw_pool_run at a time */
    pthread_mutex_t lock;              /* guards sleeping and the condvar */
    pthread_cond_t wake;
    _Atomic uint64_t gen;              /* bumped once per task */
    _Atomic int done;                  /* workers finished with the current task */
    _Atomic int sleepers;
    _Atomic bool stop;
    kw_task_fn fn;
    void *arg;
};

typedef struct { kw_pool *p; int ith; } worker_arg;


static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Waits until gen moves past `seen`; returns the new generation. Spinning
 * is bounded in time (not iterations: a pause costs 10-150 cycles
 * depending on the CPU), so an idle or oversubscribed pool sleeps soon. */
static uint64_t wait_for_task(kw_pool *p, uint64_t seen) {
    uint64_t t0 = now_ns();
    for (int i = 0;; i++) {
        uint64_t g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g != seen || atomic_load(&p->stop)) return g;
        kw_cpu_relax();
        if ((i & 63) == 63 && now_ns() - t0 > KW_POOL_SPIN_NS) break;
    }
    pthread_mutex_lock(&p->lock);
    atomic_fetch_add(&p->sleepers, 1);
    while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->wake, &p->lock);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->lock);
    return atomic_load(&p->gen);
}

static void *worker_main(void *v) {
    worker_arg wa = *(worker_arg *)v;
    free(v);
    kw_pool *p = wa.p;
    uint64_t seen = 0;
    for (;;) {
        seen = wait_for_task(p, seen);
        if (atomic_load(&p->stop)) break;
        p->fn(p->arg, wa.ith, p->n);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
    }
    return NULL;
}

kw_pool *kw_pool_create(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    if (n_threads > KW_POOL_MAX) n_threads = KW_POOL_MAX;
    kw_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n_threads;
    pthread_mutex_init(&p->run_lock, NULL);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    p->threads = calloc((size_t)n_threads, sizeof(pthread_t));
    if (!p->threads) { free(p); return NULL; }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa || (wa->p = p, wa->ith = i, pthread_create(&p->threads[i], NULL, worker_main, wa) != 0)) {
            free(wa);
            p->n = i;                  /* workers 1..i-1 exist: shut them down */
            kw_pool_destroy(p);
            return NULL;
        }
    }
    return p;
}

void kw_pool_destroy(kw_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->run_lock);
    free(p->threads);
    free(p);
}

int kw_pool_size(const kw_pool *p) { return p ? p->n : 1; }

void kw_pool_run(kw_pool *p, kw_task_fn fn, void *arg) {
    if (!p || p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    pthread_mutex_lock(&p->run_lock);
    p->fn = fn;
    p->arg = arg;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_fetch_add(&p->gen, 1);          /* seq_cst: ordered against the sleepers check */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->lock);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
    }
    fn(arg, 0, p->n);
    uint64_t t0 = 0;
    for (unsigned spins = 0; atomic_load_explicit(&p->done, memory_order_acquire) != p->n - 1; spins++) {
        if ((spins & 63) != 63) { kw_cpu_relax(); continue; }
        if (!t0) t0 = now_ns();
        else if (now_ns() - t0 > KW_POOL_WAIT_NS) sched_yield();
    }
    pthread_mutex_unlock(&p->run_lock);
}
