/* test_mem_budget.c - a thread's budget (memory.h): while open, kw_mem_alloc
 * on that thread counts against the cap and fails past it (marking the budget
 * exceeded), frees give back, the peak is the most held at once; foreign
 * charges (kw_mem_budget_take / give) share the same cap; blocks freed after
 * the budget closed, or charged to an older budget, give nothing back to a
 * newer one; another thread's allocations are not charged. */
#include "testutil.h"
#include "kvwise/memory.h"
#include <pthread.h>
#include <stdint.h>

#define KiB 1024u

static void *other_thread(void *arg) {
    (void)arg;
    void *p = kw_mem_alloc(KW_MEM_OTHER, 256 * KiB);     /* no budget open on this thread */
    return p;
}

static void test_cap_and_peak(void) {
    kw_mem_budget_open(100 * KiB);
    void *a = kw_mem_alloc(KW_MEM_OTHER, 60 * KiB);
    KW_CHECK(a != NULL);
    void *b = kw_mem_alloc(KW_MEM_OTHER, 60 * KiB);        /* 120 KiB > 100: refused */
    KW_CHECK(b == NULL);
    kw_mem_free(a);                                         /* gives the 60 back */
    b = kw_mem_alloc(KW_MEM_OTHER, 90 * KiB);
    KW_CHECK(b != NULL);
    uint64_t gen;
    KW_CHECK(kw_mem_budget_take(20 * KiB, &gen) == -1);     /* 90 + 20 > 100 */
    KW_CHECK(kw_mem_budget_take(10 * KiB, &gen) == 0 && gen != 0);
    kw_mem_budget_give(10 * KiB, gen);
    kw_mem_budget_stats st;
    kw_mem_budget_close(&st);
    KW_CHECK_EQ_INT(st.cap, 100 * KiB);
    KW_CHECK_EQ_INT(st.peak, 100 * KiB);                    /* 90 + 10 at once */
    KW_CHECK(st.exceeded);
    kw_mem_free(b);                                         /* after close: nothing to give back */
}

static void test_generations(void) {
    kw_mem_budget_open(64 * KiB);
    void *old = kw_mem_alloc(KW_MEM_OTHER, 40 * KiB);
    KW_CHECK(old != NULL);
    kw_mem_budget_close(NULL);
    kw_mem_budget_open(64 * KiB);
    void *p = kw_mem_alloc(KW_MEM_OTHER, 40 * KiB);
    KW_CHECK(p != NULL);
    kw_mem_free(old);                       /* charged to the closed budget: the new one keeps its 40 */
    KW_CHECK(kw_mem_alloc(KW_MEM_OTHER, 40 * KiB) == NULL);
    pthread_t th;
    void *q = NULL;
    KW_CHECK(pthread_create(&th, NULL, other_thread, NULL) == 0);
    pthread_join(th, &q);
    KW_CHECK(q != NULL);                    /* another thread is not bound by this one's budget */
    kw_mem_free(q);
    kw_mem_budget_stats st;
    kw_mem_budget_close(&st);
    KW_CHECK_EQ_INT(st.peak, 40 * KiB);
    KW_CHECK(st.exceeded);
    kw_mem_free(p);
    uint64_t gen = 1;
    KW_CHECK(kw_mem_budget_take(1u << 30, &gen) == 0 && gen == 0);   /* none open: nothing charged */
    void *big = kw_mem_alloc(KW_MEM_OTHER, 1u << 20);
    KW_CHECK(big != NULL);
    kw_mem_free(big);
}

int main(void) {
    test_cap_and_peak();
    test_generations();
    return kw_test_finish();
}
