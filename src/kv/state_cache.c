/* state_cache.c - saved recurrent states (state_cache.h).
 *
 * Owns the entries: a small array scanned linearly (a server keeps tens of
 * checkpoints, each of them megabytes; the scan is nothing next to the
 * prefill it saves). Each entry holds its tokens (malloc) and its state
 * (kw_mem_alloc, KW_MEM_KV), a last-use stamp for LRU eviction.
 *
 * Eviction: superseded interior checkpoints first, then least recently used.
 * An interior checkpoint (a --checkpoint-interval mark inside a prompt) is
 * superseded once an entry extends its tokens (saved later, or already there): the prompt's end now
 * serves every request that shares the whole prompt, and the interior one
 * only a request that branches off inside it. A restore makes it current
 * again. Without this, a few concurrent long prompts fill a small cache with
 * their interval marks and push out each other's ends, so no turn hits. */
#include "kvwise/state_cache.h"
#include "kvwise/memory.h"
#include <stdlib.h>
#include <string.h>

typedef struct sc_entry {
    int32_t n;
    int32_t *tokens;
    float *state;
    uint64_t used;              /* stamp of the last save or restore */
    bool interior;              /* saved at an interval mark inside a prompt */
    bool superseded;            /* interior, and another entry extends it: evicted first */
} sc_entry;

struct kw_state_cache {
    size_t state_bytes;
    sc_entry *e;
    int32_t n, cap;
    uint64_t clock;
    kw_state_cache_stats st;    /* caps, bytes and counters, kept as reported */
};

kw_state_cache *kw_state_cache_create(size_t state_bytes, int32_t max_entries, uint64_t max_bytes) {
    if (state_bytes == 0) return NULL;
    kw_state_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->state_bytes = state_bytes;
    c->st.max_entries = max_entries > 0 ? max_entries : 0;
    c->st.max_bytes = max_bytes;
    return c;
}

static void drop(kw_state_cache *c, int32_t i) {
    c->st.bytes -= kw_state_cache_entry_bytes(c, c->e[i].n);
    free(c->e[i].tokens);
    kw_mem_free(c->e[i].state);
    c->e[i] = c->e[--c->n];
}

void kw_state_cache_destroy(kw_state_cache *c) {
    if (!c) return;
    while (c->n > 0) drop(c, c->n - 1);
    free(c->e);
    free(c);
}

uint64_t kw_state_cache_entry_bytes(const kw_state_cache *c, int32_t n) {
    return (uint64_t)c->state_bytes + (uint64_t)n * sizeof(int32_t);
}

static int32_t find(const kw_state_cache *c, const int32_t *tokens, int32_t n) {
    for (int32_t i = 0; i < c->n; i++)
        if (c->e[i].n == n && !memcmp(c->e[i].tokens, tokens, (size_t)n * sizeof *tokens)) return i;
    return -1;
}

/* Whether a goes before b: superseded first, then the older. */
static bool evicts_before(const sc_entry *a, const sc_entry *b) {
    if (a->superseded != b->superseded) return a->superseded;
    return a->used < b->used;
}

static void evict_lru(kw_state_cache *c) {
    int32_t old = 0;
    for (int32_t i = 1; i < c->n; i++)
        if (evicts_before(&c->e[i], &c->e[old])) old = i;
    drop(c, old);
    c->st.evicted++;
}

bool kw_state_cache_evict_oldest(kw_state_cache *c) {
    if (!c || c->n == 0) return false;
    evict_lru(c);
    return true;
}

/* Evicts until `more` entries of `bytes` each fit beside the rest. */
static void make_room(kw_state_cache *c, int32_t more, uint64_t bytes) {
    while (c->n > 0 && (c->n + more > c->st.max_entries || c->st.bytes + (uint64_t)more * bytes > c->st.max_bytes))
        evict_lru(c);
}

/* Whether a[0..na) is longer than b[0..nb) and starts with it. */
static bool extends(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
    return na > nb && !memcmp(a, b, (size_t)nb * sizeof *b);
}

/* Interior entries that tokens[0..n) extends are superseded. */
static void supersede_prefixes(kw_state_cache *c, const int32_t *tokens, int32_t n) {
    for (int32_t i = 0; i < c->n; i++)
        if (c->e[i].interior && extends(tokens, n, c->e[i].tokens, c->e[i].n)) c->e[i].superseded = true;
}

/* Whether an entry extends tokens[0..n). */
static bool extended(const kw_state_cache *c, const int32_t *tokens, int32_t n) {
    for (int32_t i = 0; i < c->n; i++)
        if (extends(c->e[i].tokens, c->e[i].n, tokens, n)) return true;
    return false;
}

int kw_state_cache_save(kw_state_cache *c, const int32_t *tokens, int32_t n, const float *state, bool interior) {
    if (!c || !tokens || n <= 0 || !state) return -1;
    supersede_prefixes(c, tokens, n);
    int32_t i = find(c, tokens, n);
    if (i >= 0) {   /* the same tokens give the same state: refresh it */
        memcpy(c->e[i].state, state, c->state_bytes);
        c->e[i].used = ++c->clock;
        c->e[i].interior = c->e[i].interior && interior;
        c->e[i].superseded = false;
        c->st.saves++;
        return 0;
    }
    uint64_t need = kw_state_cache_entry_bytes(c, n);
    if (c->st.max_entries < 1 || need > c->st.max_bytes) return -1;
    make_room(c, 1, need);
    if (c->n == c->cap) {
        int32_t cap = c->cap ? 2 * c->cap : 8;
        sc_entry *e = realloc(c->e, (size_t)cap * sizeof *e);
        if (!e) return -1;
        c->e = e;
        c->cap = cap;
    }
    sc_entry en = {.n = n, .tokens = malloc((size_t)n * sizeof *tokens), .state = kw_mem_alloc(KW_MEM_KV, c->state_bytes)};
    if (!en.tokens || !en.state) {
        free(en.tokens);
        kw_mem_free(en.state);
        return -1;
    }
    memcpy(en.tokens, tokens, (size_t)n * sizeof *tokens);
    memcpy(en.state, state, c->state_bytes);
    en.used = ++c->clock;
    en.interior = interior;
    en.superseded = interior && extended(c, tokens, n);
    c->e[c->n++] = en;
    c->st.bytes += need;
    c->st.saves++;
    return 0;
}

int32_t kw_state_cache_longest(const kw_state_cache *c, const int32_t *prompt, int32_t max_n) {
    int32_t best = 0;
    for (int32_t i = 0; c && prompt && i < c->n; i++) {
        const sc_entry *e = &c->e[i];
        if (e->n <= max_n && e->n > best && !memcmp(e->tokens, prompt, (size_t)e->n * sizeof *prompt)) best = e->n;
    }
    return best;
}

int kw_state_cache_restore(kw_state_cache *c, const int32_t *prompt, int32_t n, float *dst) {
    int32_t i = c && prompt && dst && n > 0 ? find(c, prompt, n) : -1;
    if (i < 0) return -1;
    memcpy(dst, c->e[i].state, c->state_bytes);
    c->e[i].used = ++c->clock;
    c->e[i].superseded = false;
    c->st.hits++;
    return 0;
}

void kw_state_cache_set_caps(kw_state_cache *c, int32_t max_entries, uint64_t max_bytes) {
    if (!c) return;
    c->st.max_entries = max_entries > 0 ? max_entries : 0;
    c->st.max_bytes = max_bytes;
    make_room(c, 0, 0);
}

kw_state_cache_stats kw_state_cache_get_stats(const kw_state_cache *c) {
    if (!c) return (kw_state_cache_stats){0};
    kw_state_cache_stats s = c->st;
    s.entries = c->n;
    s.longest = 0;
    for (int32_t i = 0; i < c->n; i++)
        if (c->e[i].n > s.longest) s.longest = c->e[i].n;
    return s;
}
