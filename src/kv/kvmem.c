/* kvmem.c - the KV side of admission control (kvmem.h).
 *
 * Owns: one block table per engine slot, the prompt cache over the pool,
 * the admission decision (cache match -> copy-on-write -> reserve every
 * block the sequence can need -> evict cache leaves when short -> wait or
 * never), the ledger's kv_live / kv_cached lines, and the cache's outward
 * views (the periodic log line, /v1/memory JSON, Prometheus text).
 *
 * The ledger's KV lines always add up to the pool's used blocks: kv_cached
 * is the blocks only the cache holds (clearing the cache would free them),
 * kv_live the rest (blocks of running sequences, including a cached prefix
 * they map). A reservation is admitted only when both the pool has the
 * blocks and the ledger has the bytes, so a pool sized larger than the
 * budget still cannot push the process past --memory-limit. */
#include "kvwise/kvmem.h"
#include "kvwise/testctl.h"
#include "kvwise/ledger.h"
#include "kvwise/memory.h"
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct kw_kvmem {
    pthread_mutex_t mu;
    kw_kv_pool *pool;
    kw_prefix_cache *cache;
    kw_ledger *ledger;
    kw_block_table *tables;      /* [n_slots] */
    bool *live;                  /* [n_slots] */
    int32_t n_slots, n_ctx;
    uint64_t led_live, led_cached;   /* what this module has put on the ledger */
    kw_kvmem_admissions adm;
    uint64_t ledger_errors;
    double log_interval_s, last_log;
    kw_state_cache *ckpt;        /* recurrent models: the saved states, else NULL */
    int32_t ckpt_interval;
    int32_t cap_seqs;            /* the caps as set: checkpoints and KV blocks share cap_bytes */
    uint64_t cap_bytes;
    uint64_t led_ckpt;           /* the ledger's rec_checkpoints line, as we put it */
};

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int32_t blocks_for(const kw_kvmem *m, int32_t positions) {
    int32_t bt = m->pool->lay.block_tokens;
    return (positions + bt - 1) / bt;
}

static int32_t cached_only_blocks(const kw_kvmem *m) {
    kw_prefix_cache_stats st = kw_prefix_cache_get_stats(m->cache);
    return (int32_t)(st.exclusive_bytes / m->pool->block_bytes);
}

/* Moves one ledger line from what we put there to `want`. Decreases
 * release; increases reserve (and are counted as errors if the ledger
 * refuses: admission checked room first, so that is a bookkeeping bug). */
static void ledger_line_to(kw_kvmem *m, kw_ledger_kind kind, uint64_t *have, uint64_t want) {
    if (want < *have) {
        kw_ledger_release(m->ledger, kind, *have - want);
        *have = want;
    } else if (want > *have) {
        if (kw_ledger_reserve(m->ledger, kind, want - *have) == 0) *have = want;
        else m->ledger_errors++;
    }
}

static void ledger_sync(kw_kvmem *m) {
    if (!m->ledger) return;
    uint64_t bb = m->pool->block_bytes;
    uint64_t used = (uint64_t)(m->pool->n_blocks - m->pool->n_free) * bb;
    uint64_t cached = (uint64_t)cached_only_blocks(m) * bb;
    uint64_t live = used > cached ? used - cached : 0;
    /* releases first so that a move between the lines never trips the limit */
    if (live < m->led_live) ledger_line_to(m, KW_LEDGER_KV_LIVE, &m->led_live, live);
    if (cached < m->led_cached) ledger_line_to(m, KW_LEDGER_KV_CACHED, &m->led_cached, cached);
    ledger_line_to(m, KW_LEDGER_KV_LIVE, &m->led_live, live);
    ledger_line_to(m, KW_LEDGER_KV_CACHED, &m->led_cached, cached);
}

/* Is there room for `blocks` more pool blocks, in the pool and in the budget? */
static bool room_for(const kw_kvmem *m, int32_t blocks) {
    if (blocks <= 0) return true;
    if (m->pool->n_free < blocks) return false;
    return !m->ledger || kw_ledger_fits(m->ledger, (uint64_t)blocks * m->pool->block_bytes);
}

static void checkpoints_sync(kw_kvmem *m);

/* The oldest checkpoint goes (its bytes back to the budget); false when none is left. */
static bool evict_checkpoint(kw_kvmem *m) {
    if (!m->ckpt || !kw_state_cache_evict_oldest(m->ckpt)) return false;
    checkpoints_sync(m);
    return true;
}

/* Evicts cache until `blocks` fit or nothing more can go: cached KV leaves
 * when the pool lacks blocks, checkpoints first when only the budget is
 * short (a running sequence outranks any cache; a checkpoint is the larger
 * item, and the newest ones, the live conversations' ends, stay longest).
 * Evicts nothing when even an empty cache would not make room (a request
 * that must wait anyway does not cost the others their cache hits). */
static bool make_room(kw_kvmem *m, int32_t blocks) {
    if (room_for(m, blocks)) return true;
    int32_t evictable = cached_only_blocks(m);
    if (m->pool->n_free + evictable < blocks) return false;
    uint64_t need = (uint64_t)blocks * m->pool->block_bytes;
    uint64_t freeable = (uint64_t)evictable * m->pool->block_bytes + m->led_ckpt;
    if (m->ledger && need > freeable && !kw_ledger_fits(m->ledger, need - freeable)) return false;
    bool counted = false;
    while (!room_for(m, blocks)) {
        if (!counted) { m->adm.evict_calls++; counted = true; }
        if (m->pool->n_free >= blocks && evict_checkpoint(m)) continue;
        int32_t want = m->pool->n_free < blocks ? blocks : m->pool->n_free + 1;
        int32_t freed = kw_prefix_cache_evict(m->cache, want);
        if (freed <= 0) return false;
        m->adm.evicted_for_admission += (uint64_t)freed;
        ledger_sync(m);
    }
    return true;
}

static int32_t checkpoint_entries(int32_t max_seqs) {
    return max_seqs > 0 && max_seqs < INT32_MAX / KW_KVMEM_CHECKPOINTS_PER_SEQ ? max_seqs * KW_KVMEM_CHECKPOINTS_PER_SEQ
                                                                               : max_seqs > 0 ? INT32_MAX : 0;
}

/* After the checkpoints changed: the KV blocks' byte cap is what they
 * leave of the shared cap (evicting KV leaves if it shrank), and the
 * ledger's checkpoint line follows; checkpoints the budget has no room for
 * (it is full of running sequences) go, oldest first. */
static void checkpoints_sync(kw_kvmem *m) {
    if (!m->ckpt) return;
    uint64_t b = kw_state_cache_get_stats(m->ckpt).bytes;
    kw_prefix_cache_set_caps(m->cache, m->cap_seqs, m->cap_bytes > b ? m->cap_bytes - b : 0);
    ledger_sync(m);
    if (!m->ledger) return;
    while (b > m->led_ckpt && !kw_ledger_fits(m->ledger, b - m->led_ckpt) && kw_state_cache_evict_oldest(m->ckpt))
        b = kw_state_cache_get_stats(m->ckpt).bytes;
    ledger_line_to(m, KW_LEDGER_REC_CHECKPOINTS, &m->led_ckpt, b);
}

kw_kvmem *kw_kvmem_create(kw_kv_pool *pool, const kw_kvmem_opts *o, kw_err *err) {
    if (!pool || !o || o->n_slots <= 0 || o->n_ctx <= 0) {
        kw_err_set(err, "kvmem: needs a pool, n_slots > 0 and n_ctx > 0");
        return NULL;
    }
    kw_kvmem *m = calloc(1, sizeof *m);
    if (!m) { kw_err_set(err, "kvmem: out of memory"); return NULL; }
    pthread_mutex_init(&m->mu, NULL);
    m->pool = pool;
    m->ledger = o->ledger;
    m->n_slots = o->n_slots;
    m->n_ctx = o->n_ctx;
    m->log_interval_s = o->log_interval_s;
    m->cap_seqs = o->cache_max_seqs;
    m->cap_bytes = o->cache_max_bytes;
    m->ckpt_interval = o->checkpoint_interval > 0 ? o->checkpoint_interval : 0;
    m->last_log = -1e9;
    m->tables = calloc((size_t)o->n_slots, sizeof *m->tables);
    m->live = calloc((size_t)o->n_slots, sizeof *m->live);
    m->cache = kw_prefix_cache_create(pool, o->cache_max_seqs, o->cache_max_bytes);
    if (o->state_bytes > 0)
        m->ckpt = kw_state_cache_create((size_t)o->state_bytes, checkpoint_entries(o->cache_max_seqs), o->cache_max_bytes / 2);
    if (!m->tables || !m->live || !m->cache || (o->state_bytes > 0 && !m->ckpt)) {
        kw_err_set(err, "kvmem: out of memory");
        kw_kvmem_destroy(m);
        return NULL;
    }
    return m;
}

static void slot_release(kw_kvmem *m, int32_t slot) {
    kw_block_table_release(&m->tables[slot], m->pool);
    m->live[slot] = false;
}

void kw_kvmem_destroy(kw_kvmem *m) {
    if (!m) return;
    for (int32_t i = 0; m->tables && i < m->n_slots; i++) {
        slot_release(m, i);
        kw_block_table_free(&m->tables[i]);
    }
    kw_prefix_cache_destroy(m->cache);
    m->cache = NULL;
    kw_state_cache_destroy(m->ckpt);
    if (m->ledger) {
        if (m->led_live) kw_ledger_release(m->ledger, KW_LEDGER_KV_LIVE, m->led_live);
        if (m->led_cached) kw_ledger_release(m->ledger, KW_LEDGER_KV_CACHED, m->led_cached);
        if (m->led_ckpt) kw_ledger_release(m->ledger, KW_LEDGER_REC_CHECKPOINTS, m->led_ckpt);
    }
    free(m->tables);
    free(m->live);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

int32_t kw_kvmem_max_positions(const kw_kvmem *m) {
    int64_t pool_pos = (int64_t)m->pool->n_blocks * m->pool->lay.block_tokens;
    return pool_pos < m->n_ctx ? (int32_t)pool_pos : m->n_ctx;
}

bool kw_kvmem_could_ever_fit(const kw_kvmem *m, int32_t n_positions) {
    if (n_positions > kw_kvmem_max_positions(m)) return false;
    if (!m->ledger) return true;
    /* the budget left for KV if every cached and live block and every checkpoint were gone */
    uint64_t kv_room = kw_ledger_available(m->ledger) + kw_ledger_line(m->ledger, KW_LEDGER_KV_LIVE) +
                       kw_ledger_line(m->ledger, KW_LEDGER_KV_CACHED) + kw_ledger_line(m->ledger, KW_LEDGER_REC_CHECKPOINTS);
    return (uint64_t)blocks_for(m, n_positions) * m->pool->block_bytes <= kv_room;
}

int32_t kw_kvmem_begin(kw_kvmem *m, int32_t slot, const int32_t *prompt, int32_t n, int32_t n_reserve) {
    return kw_kvmem_begin_state(m, slot, prompt, n, n_reserve, NULL, NULL);
}

/* How much of a cached prefix of `seen` prompt tokens a sequence can use:
 * all of it, or for a recurrent model the longest checkpoint within it. */
static int32_t usable_prefix(const kw_kvmem *m, const int32_t *prompt, int32_t seen, bool have_state) {
    if (!m->ckpt || seen <= 0) return seen;
    return have_state ? kw_state_cache_longest(m->ckpt, prompt, seen) : 0;
}

int32_t kw_kvmem_begin_state(kw_kvmem *m, int32_t slot, const int32_t *prompt, int32_t n, int32_t n_reserve,
                             float *state, int32_t *kv_prefix) {
    if (kv_prefix) *kv_prefix = 0;
    if (!m || slot < 0 || slot >= m->n_slots || !prompt || n <= 0) return KW_KVMEM_NEVER;
    if (n_reserve < n) n_reserve = n;
    pthread_mutex_lock(&m->mu);
    if (m->live[slot]) slot_release(m, slot);
    int32_t ret;
    if (!kw_kvmem_could_ever_fit(m, n_reserve)) {
        m->adm.never++;
        ret = KW_KVMEM_NEVER;
        goto out;
    }
    kw_block_table *t = &m->tables[slot];
    int32_t bt = m->pool->lay.block_tokens;
    int32_t most = n - 1;
    if (m->ckpt) {
        int32_t seen = kw_prefix_cache_peek(m->cache, prompt, n, most);
        if (kv_prefix) *kv_prefix = seen;
        most = usable_prefix(m, prompt, seen, state != NULL);
    }
    int32_t matched = kw_prefix_cache_match(m->cache, prompt, n, most, t);
    bool cow = matched % bt != 0 && t->n > 0 && m->pool->refs[t->ids[t->n - 1]] > 1;
    int32_t new_blocks = blocks_for(m, n_reserve) - t->n + (cow ? 1 : 0);
    if (!make_room(m, new_blocks)) {
        kw_block_table_release(t, m->pool);
        ledger_sync(m);
        m->adm.waited++;
        ret = KW_KVMEM_WAIT;
        goto out;
    }
    uint64_t ledger_errors = m->ledger_errors;
    if ((cow && kw_block_table_cow_last(t, m->pool) != 0) ||
        kw_block_table_ensure(t, m->pool, n_reserve) != 0 ||
        (ledger_sync(m), m->ledger_errors != ledger_errors)) {
        /* make_room found the blocks and the bytes, yet taking a block or
         * reserving its bytes failed (an allocation failure; in tests an
         * injected one, testctl.h): give everything back, refuse for now. */
        kw_block_table_release(t, m->pool);
        ledger_sync(m);
        ret = KW_KVMEM_NOMEM;
        goto out;
    }
    if (m->ckpt && matched > 0 && (matched != most || kw_state_cache_restore(m->ckpt, prompt, matched, state) != 0)) {
        /* the checkpoint and the KV prefix were found together under this lock: not reached */
        kw_block_table_release(t, m->pool);
        ledger_sync(m);
        ret = KW_KVMEM_NOMEM;
        goto out;
    }
    m->live[slot] = true;
    m->adm.admitted++;
    m->adm.cached_tokens_served += (uint64_t)matched;
    ret = matched;
out:
    pthread_mutex_unlock(&m->mu);
    return ret;
}

int kw_kvmem_ensure(kw_kvmem *m, int32_t slot, int32_t n_positions) {
    if (!m || slot < 0 || slot >= m->n_slots) return -1;
    pthread_mutex_lock(&m->mu);
    kw_block_table *t = &m->tables[slot];
    int rc = 0;
    int32_t more = blocks_for(m, n_positions) - t->n;
    if (kw_fault_hit(KW_FAULT_KV_ENSURE, -1)) {
        rc = -1;                  /* tests only (testctl.h): as if the pool had run out here */
    } else if (more > 0) {
        if (n_positions > m->n_ctx || !make_room(m, more) || kw_block_table_ensure(t, m->pool, n_positions) != 0)
            rc = -1;
        ledger_sync(m);
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

void kw_kvmem_end(kw_kvmem *m, int32_t slot, const int32_t *tokens, int32_t n, bool keep) {
    if (!m || slot < 0 || slot >= m->n_slots) return;
    pthread_mutex_lock(&m->mu);
    kw_block_table *t = &m->tables[slot];
    if (keep && tokens && n > 0 && m->live[slot]) {
        int32_t covered = t->n * m->pool->lay.block_tokens;
        kw_prefix_cache_insert(m->cache, tokens, n < covered ? n : covered, t);
    }
    slot_release(m, slot);
    ledger_sync(m);
    bool log_now = keep && m->log_interval_s > 0 && mono_s() - m->last_log >= m->log_interval_s;
    if (log_now) m->last_log = mono_s();
    pthread_mutex_unlock(&m->mu);
    if (log_now) {
        char line[160];
        fprintf(stderr, "%s\n", kw_kvmem_cache_line(m, line, sizeof line));
    }
}

int32_t kw_kvmem_cached_prefix(kw_kvmem *m, const int32_t *prompt, int32_t n) {
    if (!m || !prompt || n <= 0) return 0;
    pthread_mutex_lock(&m->mu);
    int32_t got = usable_prefix(m, prompt, kw_prefix_cache_peek(m->cache, prompt, n, n - 1), true);
    pthread_mutex_unlock(&m->mu);
    return got;
}

kw_block_table *kw_kvmem_table(kw_kvmem *m, int32_t slot) {
    if (!m || slot < 0 || slot >= m->n_slots) return NULL;
    return &m->tables[slot];
}

void kw_kvmem_set_cache_caps(kw_kvmem *m, int32_t max_seqs, uint64_t max_bytes) {
    pthread_mutex_lock(&m->mu);
    m->cap_seqs = max_seqs;
    m->cap_bytes = max_bytes;
    kw_prefix_cache_set_caps(m->cache, max_seqs, max_bytes);
    if (m->ckpt) kw_state_cache_set_caps(m->ckpt, checkpoint_entries(max_seqs), max_bytes / 2);
    checkpoints_sync(m);
    ledger_sync(m);
    pthread_mutex_unlock(&m->mu);
}

void kw_kvmem_checkpoint(kw_kvmem *m, const int32_t *tokens, int32_t n, const float *state, bool interior) {
    if (!m || !m->ckpt || !tokens || n <= 0 || !state) return;
    pthread_mutex_lock(&m->mu);
    if (kw_prefix_cache_enabled(m->cache) && kw_state_cache_save(m->ckpt, tokens, n, state, interior) == 0) checkpoints_sync(m);
    pthread_mutex_unlock(&m->mu);
}

int32_t kw_kvmem_checkpoint_interval(const kw_kvmem *m) { return m && m->ckpt ? m->ckpt_interval : 0; }

bool kw_kvmem_caching(kw_kvmem *m) {
    if (!m) return false;
    pthread_mutex_lock(&m->mu);
    bool on = kw_prefix_cache_enabled(m->cache);
    pthread_mutex_unlock(&m->mu);
    return on;
}

static kw_kvmem_stats stats_locked(const kw_kvmem *m) {
    kw_kvmem_stats s;
    memset(&s, 0, sizeof s);
    s.cache = kw_prefix_cache_get_stats(m->cache);
    s.pool_blocks = m->pool->n_blocks;
    s.free_blocks = m->pool->n_free;
    s.block_tokens = m->pool->lay.block_tokens;
    s.block_bytes = m->pool->block_bytes;
    s.cached_only_blocks = (int32_t)(s.cache.exclusive_bytes / m->pool->block_bytes);
    s.live_blocks = s.pool_blocks - s.free_blocks - s.cached_only_blocks;
    for (int32_t i = 0; i < m->n_slots; i++) s.live_seqs += m->live[i];
    s.adm = m->adm;
    if (m->ckpt) {
        s.has_checkpoints = true;
        s.checkpoint_interval = m->ckpt_interval;
        s.checkpoints = kw_state_cache_get_stats(m->ckpt);
        s.cache.max_bytes = m->cap_bytes;   /* the shared cap, not the KV blocks' share */
    }
    return s;
}

kw_kvmem_stats kw_kvmem_get_stats(kw_kvmem *m) {
    pthread_mutex_lock(&m->mu);
    kw_kvmem_stats s = stats_locked(m);
    pthread_mutex_unlock(&m->mu);
    return s;
}

static int hit_rate_pct(const kw_prefix_cache_stats *c) {
    return c->lookups ? (int)((c->hits * 100 + c->lookups / 2) / c->lookups) : 0;
}

const char *kw_kvmem_cache_line(kw_kvmem *m, char *buf, size_t cap) {
    kw_kvmem_stats s = kw_kvmem_get_stats(m);
    char b[32];
    snprintf(buf, cap, "Prompt cache: %d seq, %s, latest %d tokens, hit rate %d%%",
             s.cache.n_seqs, kw_format_bytes(s.cache.bytes, b, sizeof b), s.cache.latest_tokens,
             hit_rate_pct(&s.cache));
    return buf;
}

/* The cached sequences shown in /v1/memory: the most recently used ones. */
#define KVMEM_JSON_ENTRIES 64

static void add_entries_json(cJSON *c, const kw_prefix_cache_entry *e, int32_t n, uint64_t block_bytes) {
    cJSON *a = cJSON_AddArrayToObject(c, "entries");
    for (int32_t i = 0; a && i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        if (!o) return;
        kw_json_add_nums(o, (kw_json_num[]){
            {"tokens", e[i].tokens}, {"blocks", e[i].blocks}, {"bytes", (double)((uint64_t)e[i].blocks * block_bytes)},
            {"exclusive_bytes", (double)((uint64_t)e[i].exclusive_blocks * block_bytes)},
            {"hits", (double)e[i].hits}, {"idle_s", e[i].idle_s}, {NULL, 0}});
        cJSON_AddItemToArray(a, o);
    }
}

void kw_kvmem_add_json(kw_kvmem *m, struct cJSON *obj) {
    kw_prefix_cache_entry ent[KVMEM_JSON_ENTRIES];
    pthread_mutex_lock(&m->mu);
    kw_kvmem_stats s = stats_locked(m);
    int32_t n_ent = kw_prefix_cache_entries(m->cache, ent, KVMEM_JSON_ENTRIES);
    pthread_mutex_unlock(&m->mu);
    const kw_prefix_cache_stats *pc = &s.cache;
    cJSON *c = cJSON_AddObjectToObject(obj, "prompt_cache");
    kw_json_add_nums(c, (kw_json_num[]){
        {"sequences", pc->n_seqs}, {"max_sequences", pc->max_seqs}, {"bytes", (double)pc->bytes},
        {"max_bytes", (double)pc->max_bytes}, {"exclusive_bytes", (double)pc->exclusive_bytes},
        {"meta_bytes", (double)pc->meta_bytes}, {"blocks", pc->n_blocks}, {"tokens", (double)pc->tokens},
        {"latest_tokens", pc->latest_tokens}, {"lookups", (double)pc->lookups}, {"hits", (double)pc->hits},
        {"hit_rate", pc->lookups ? (double)pc->hits / (double)pc->lookups : 0.0},
        {"tokens_looked_up", (double)pc->tokens_looked_up}, {"tokens_matched", (double)pc->tokens_matched},
        {"evicted_sequences", (double)pc->evicted_seqs}, {"evicted_blocks", (double)pc->evicted_blocks}, {NULL, 0}});
    if (c) add_entries_json(c, ent, n_ent, s.block_bytes);
    const kw_state_cache_stats *ck = &s.checkpoints;
    if (c && s.has_checkpoints)
        kw_json_add_nums(cJSON_AddObjectToObject(c, "checkpoints"), (kw_json_num[]){
            {"entries", ck->entries}, {"max_entries", ck->max_entries}, {"bytes", (double)ck->bytes},
            {"max_bytes", (double)ck->max_bytes}, {"saves", (double)ck->saves}, {"restores", (double)ck->hits},
            {"evicted", (double)ck->evicted}, {"longest_tokens", ck->longest}, {"interval", s.checkpoint_interval},
            {NULL, 0}});
    kw_json_add_nums(cJSON_AddObjectToObject(obj, "kv_pool"), (kw_json_num[]){
        {"blocks", s.pool_blocks}, {"block_tokens", s.block_tokens}, {"block_bytes", (double)s.block_bytes},
        {"bytes", (double)s.block_bytes * s.pool_blocks}, {"free_blocks", s.free_blocks},
        {"live_blocks", s.live_blocks}, {"cached_only_blocks", s.cached_only_blocks},
        {"live_sequences", s.live_seqs}, {"admitted", (double)s.adm.admitted}, {"waited", (double)s.adm.waited},
        {"never_fit", (double)s.adm.never}, {"evicted_blocks_for_admission", (double)s.adm.evicted_for_admission},
        {NULL, 0}});
}

static int appendf(char **buf, size_t *len, const char *fmt, ...) KW_PRINTF(3, 4);
static int appendf(char **buf, size_t *len, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return -1;
    if ((size_t)n >= sizeof tmp) n = (int)sizeof tmp - 1;
    char *nb = realloc(*buf, *len + (size_t)n + 1);
    if (!nb) return -1;
    memcpy(nb + *len, tmp, (size_t)n + 1);
    *buf = nb;
    *len += (size_t)n;
    return 0;
}

#define METRIC(type, name, help, fmt, val) \
    rc |= appendf(buf, len, "# HELP " name " " help "\n# TYPE " name " " type "\n" name " " fmt "\n", val)

int kw_kvmem_metrics(kw_kvmem *m, char **buf, size_t *len) {
    kw_kvmem_stats s = kw_kvmem_get_stats(m);
    int rc = 0;
    METRIC("gauge", "kvwise_prompt_cache_sequences", "Cached sequences (leaves of the prefix tree).", "%d", s.cache.n_seqs);
    METRIC("gauge", "kvwise_prompt_cache_max_sequences", "--prompt-cache-size in force.", "%d", s.cache.max_seqs);
    METRIC("gauge", "kvwise_prompt_cache_bytes", "KV bytes referenced by the prompt cache.", "%llu", (unsigned long long)s.cache.bytes);
    METRIC("gauge", "kvwise_prompt_cache_max_bytes", "--prompt-cache-bytes in force.", "%llu", (unsigned long long)s.cache.max_bytes);
    METRIC("gauge", "kvwise_prompt_cache_exclusive_bytes", "Cache bytes not shared with a running request.", "%llu", (unsigned long long)s.cache.exclusive_bytes);
    METRIC("gauge", "kvwise_prompt_cache_tokens", "Tokens covered by the prompt cache.", "%lld", (long long)s.cache.tokens);
    METRIC("gauge", "kvwise_prompt_cache_latest_tokens", "Length of the most recently cached sequence.", "%d", s.cache.latest_tokens);
    METRIC("counter", "kvwise_prompt_cache_lookups_total", "Prompt cache lookups.", "%llu", (unsigned long long)s.cache.lookups);
    METRIC("counter", "kvwise_prompt_cache_hits_total", "Lookups that matched at least one token.", "%llu", (unsigned long long)s.cache.hits);
    METRIC("counter", "kvwise_prompt_cache_tokens_matched_total", "Prompt tokens served from the cache.", "%llu", (unsigned long long)s.cache.tokens_matched);
    METRIC("counter", "kvwise_prompt_cache_evicted_sequences_total", "Cached sequences evicted.", "%llu", (unsigned long long)s.cache.evicted_seqs);
    METRIC("counter", "kvwise_prompt_cache_evicted_blocks_total", "Cached blocks evicted.", "%llu", (unsigned long long)s.cache.evicted_blocks);
    if (s.has_checkpoints) {
        METRIC("gauge", "kvwise_prompt_cache_checkpoints", "Saved recurrent states (hybrid models).", "%d", s.checkpoints.entries);
        METRIC("gauge", "kvwise_prompt_cache_checkpoint_bytes", "Bytes of the saved recurrent states.", "%llu",
               (unsigned long long)s.checkpoints.bytes);
        METRIC("counter", "kvwise_prompt_cache_checkpoint_restores_total", "Requests resumed from a saved state.", "%llu",
               (unsigned long long)s.checkpoints.hits);
    }
    METRIC("gauge", "kvwise_kv_pool_blocks", "Blocks in the paged KV pool.", "%d", s.pool_blocks);
    METRIC("gauge", "kvwise_kv_pool_free_blocks", "Free KV blocks.", "%d", s.free_blocks);
    METRIC("gauge", "kvwise_kv_pool_live_blocks", "KV blocks mapped by running requests.", "%d", s.live_blocks);
    METRIC("gauge", "kvwise_kv_pool_cached_only_blocks", "KV blocks held only by the prompt cache.", "%d", s.cached_only_blocks);
    METRIC("gauge", "kvwise_kv_block_bytes", "Bytes of one KV block (all layers).", "%llu", (unsigned long long)s.block_bytes);
    METRIC("counter", "kvwise_kv_admission_waits_total", "Admissions that had to wait for KV.", "%llu", (unsigned long long)s.adm.waited);
    return rc ? -1 : 0;
}
