/* test_tensor_pool.c - the thread pool: every thread runs each task once,
 * many back-to-back runs (spinning) and runs after a sleep (woken). */
#include "testutil.h"
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>
#include "kvwise/tensor.h"

typedef struct { _Atomic int hits[8]; _Atomic int nth_seen; } counts;

static void count_task(void *v, int ith, int nth) {
    counts *c = v;
    atomic_fetch_add(&c->hits[ith], 1);
    atomic_store(&c->nth_seen, nth);
}

static void check_pool(int n) {
    kw_pool *p = kw_pool_create(n);
    KW_CHECK(p != NULL);
    if (!p) return;
    KW_CHECK_EQ_INT(kw_pool_size(p), n);
    counts c;
    memset(&c, 0, sizeof c);
    enum { RUNS = 2000 };
    for (int r = 0; r < RUNS; r++) kw_pool_run(p, count_task, &c);
    usleep(50000);                               /* workers fall asleep */
    kw_pool_run(p, count_task, &c);
    for (int i = 0; i < n; i++) KW_CHECK_EQ_INT(atomic_load(&c.hits[i]), RUNS + 1);
    for (int i = n; i < 8; i++) KW_CHECK_EQ_INT(atomic_load(&c.hits[i]), 0);
    KW_CHECK_EQ_INT(atomic_load(&c.nth_seen), n);
    kw_pool_destroy(p);
}

int main(void) {
    check_pool(1);
    check_pool(2);
    check_pool(3);
    counts c;
    memset(&c, 0, sizeof c);
    kw_pool_run(NULL, count_task, &c);           /* no pool: the caller alone */
    KW_CHECK_EQ_INT(atomic_load(&c.hits[0]), 1);
    KW_CHECK_EQ_INT(kw_pool_size(NULL), 1);
    kw_pool_destroy(NULL);
    KW_CHECK(kw_cpu_physical_cores() >= 1);
    const kw_cpu_info *ci = kw_cpu_info_get();
    KW_CHECK(ci != NULL);
    KW_CHECK(!ci->avx512vnni || ci->avx512f);
    KW_CHECK(kw_kernel_force("scalar") == 0 && strcmp(kw_kernel_name(), "scalar") == 0);
    KW_CHECK(kw_kernel_force("nonsense") == -1);
    return kw_test_finish();
}
