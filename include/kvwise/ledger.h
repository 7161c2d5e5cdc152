/* kvwise/ledger.h - one memory budget (--memory-limit) and where every byte of it goes.
 *
 * The ledger holds a limit and one line per consumer:
 *   weights    resident model weights: the mmap'd file counted at its size
 *              (every page can become resident) plus any heap repacks,
 *              unless a measured figure is set instead
 *   kv_live    KV blocks of running sequences
 *   kv_cached  KV blocks held only by the prompt cache (finished sequences)
 *   workspace  forward-pass activations for one prefill step (the transient
 *              "workbench" a cache cap does not bound)
 *   scratch    per-thread scratch (attention scores, quantized activations)
 *   tokenizer  vocab, merges and lookup tables
 *   overhead   fixed process cost: binary, libraries, thread stacks, HTTP
 *              server buffers (a measured baseline, see kw_ledger_baseline_bytes)
 *   connections  HTTP: --max-connections x the bytes one open connection
 *              can hold (KW_SERVER_CONN_BYTES, server.h) + the --max-body
 *              allowance all buffered request bodies share
 *   grammar    structured outputs: the grammar vocab, the cached compiled
 *              grammars and their vocab indexes (moves with load: reserved
 *              when a grammar is compiled, released when it is evicted)
 * Every line counts against the one limit. Lines are either set once at
 * startup (kw_ledger_set: weights, workspace, ...) or move with load
 * (kw_ledger_reserve / kw_ledger_release: KV of admitted requests). A
 * reservation that would take the total past the limit fails and changes
 * nothing: that is admission control's primitive. Nothing here allocates
 * memory; the ledger is bookkeeping beside the accounted allocator
 * (memory.h) and the kernel's view (footprint.h).
 *
 * The ledger is thread-safe (one mutex): the scheduler reserves while
 * HTTP threads read snapshots for /v1/memory and /metrics. */
#ifndef KVWISE_LEDGER_H
#define KVWISE_LEDGER_H
#include <stdio.h>
#include "kvwise/common.h"
#include "kvwise/footprint.h"

struct cJSON;

typedef enum kw_ledger_kind {
    KW_LEDGER_WEIGHTS = 0,
    KW_LEDGER_KV_LIVE,
    KW_LEDGER_KV_CACHED,
    KW_LEDGER_WORKSPACE,
    KW_LEDGER_SCRATCH,
    KW_LEDGER_TOKENIZER,
    KW_LEDGER_OVERHEAD,
    KW_LEDGER_CONNECTIONS,
    KW_LEDGER_GRAMMAR,
    KW_LEDGER_REC_STATE,        /* recurrent state slots of the running sequences (hybrid models) */
    KW_LEDGER_REC_CHECKPOINTS,  /* saved recurrent states of the prompt cache (hybrid models) */
    KW_LEDGER_KIND_COUNT
} kw_ledger_kind;

typedef struct kw_ledger kw_ledger;

/* A consistent copy of the ledger at one moment. */
typedef struct kw_ledger_snapshot {
    uint64_t limit;
    uint64_t line[KW_LEDGER_KIND_COUNT];       /* bytes now */
    uint64_t line_peak[KW_LEDGER_KIND_COUNT];  /* highest value each line had */
    uint64_t used;                             /* sum of lines */
    uint64_t peak;                             /* highest `used` ever */
    uint64_t available;                        /* limit - used (0 if over) */
    uint64_t reserve_ok, reserve_failed;       /* counts of kw_ledger_reserve outcomes */
} kw_ledger_snapshot;

/* limit = 0 means "no limit" (UINT64_MAX). Returns NULL only when out of memory. */
kw_ledger *kw_ledger_create(uint64_t limit);
void kw_ledger_destroy(kw_ledger *l);

uint64_t kw_ledger_limit(const kw_ledger *l);
/* Sets a fixed line (weights, workspace, ...) to `bytes`. Fails (-1, ledger
 * unchanged) when the new total would exceed the limit; the message says by
 * how much and which limit would work. */
int kw_ledger_set(kw_ledger *l, kw_ledger_kind kind, uint64_t bytes, kw_err *err);
/* Adds `bytes` to a line if the total stays within the limit. Returns 0, or
 * -1 (nothing changed) when it would not fit. */
int kw_ledger_reserve(kw_ledger *l, kw_ledger_kind kind, uint64_t bytes);
/* Gives back `bytes` of a line. Releasing more than the line holds clamps
 * it to 0 and returns -1 (a bookkeeping bug in the caller), else 0. */
int kw_ledger_release(kw_ledger *l, kw_ledger_kind kind, uint64_t bytes);
/* Moves bytes from one line to another (e.g. a finished request's blocks
 * from kv_live to kv_cached); the total does not change so it never fails
 * for lack of room. Returns -1 (nothing moved) if `from` holds less. */
int kw_ledger_move(kw_ledger *l, kw_ledger_kind from, kw_ledger_kind to, uint64_t bytes);
/* Would `bytes` more fit right now? */
bool kw_ledger_fits(const kw_ledger *l, uint64_t bytes);

uint64_t kw_ledger_line(const kw_ledger *l, kw_ledger_kind kind);
uint64_t kw_ledger_used(const kw_ledger *l);
uint64_t kw_ledger_available(const kw_ledger *l);
kw_ledger_snapshot kw_ledger_get_snapshot(const kw_ledger *l);

const char *kw_ledger_kind_name(kw_ledger_kind kind);     /* "weights", "kv_live", ... */
const char *kw_ledger_kind_label(kw_ledger_kind kind);    /* "weights (mmap'd file)", ... */

/* Fixed-overhead baseline of this process, measured now: the kernel's RSS
 * minus what the accounted allocator holds (memory.h). Call it at startup
 * before the model and pool exist to get binary + libraries + runtime. */
uint64_t kw_ledger_baseline_bytes(void);

/* The table: one row per line (bytes, share of the limit, peak), the
 * total, what is left; when `measured` is given, the kernel's figures
 * (RSS, anon, file-backed, peak) beside it. */
void kw_ledger_print(const kw_ledger *l, const kw_footprint *measured, FILE *out);
/* JSON: {"limit","used","available","peak","lines":{name:{"bytes","peak"}},
 * "reservations":{"ok","failed"}, "measured":{footprint...}} (measured only
 * when given). kw_ledger_to_cjson returns a new object the caller owns;
 * kw_ledger_json returns a malloc'd string (free()). */
struct cJSON *kw_ledger_to_cjson(const kw_ledger *l, const kw_footprint *measured);
char *kw_ledger_json(const kw_ledger *l, const kw_footprint *measured);

#endif
