/* history.h - the memory budget over time (server-internal): a thread
 * samples the ledger's lines and the kernel's figures (RSS, PSS, VmHWM)
 * once per interval into a ring of the last `capacity` samples, for
 * GET /v1/memory/history (the memory page's chart). */
#ifndef KW_SERVER_HISTORY_H
#define KW_SERVER_HISTORY_H
#include "kvwise/common.h"

struct kw_ledger;
typedef struct kw_history kw_history;

/* 1 s x 600 samples: the last ten minutes (about 60 KiB, accounted). */
#define KW_HISTORY_INTERVAL_S 1.0
#define KW_HISTORY_CAPACITY 600

/* Starts sampling l (takes one sample at once). NULL when out of memory
 * or the thread cannot start. */
kw_history *kw_history_start(struct kw_ledger *l, double interval_s, int capacity);
/* Stops the thread (at once) and frees everything. NULL is fine. */
void kw_history_stop(kw_history *h);
/* {"interval_s", "capacity", "columns": [...], "samples": [[...], ...]}
 * with the samples taken after since_ms (Unix ms; 0 = all). malloc'd. */
char *kw_history_json(kw_history *h, double since_ms);

#endif
