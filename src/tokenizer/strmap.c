/* strmap.c - the tokenizer's hash maps (tok_internal.h) and small helpers.
 *
 * Open addressing with linear probing, capacity a power of two with a load
 * factor of at most 3/4, so a lookup touches one or two cache lines.
 * Keys are byte strings in a caller-owned pool (token texts, merges); a key
 * may carry a split point so one entry can stand for a pair of strings.
 * Hashes are XXH3 (header-only) seeded with the split. Slots come from
 * kw_mem_alloc (KW_MEM_TOKENIZER). Also here: growable id vectors, scratch
 * buffers and the UTF-8 helpers the encoders share. */
#define XXH_INLINE_ALL
#include <xxhash.h>
#include <stdlib.h>
#include <string.h>
#include "tok_internal.h"
#include "kvwise/memory.h"

static uint64_t key_hash(const char *s, size_t len, uint32_t split) {
    return XXH3_64bits_withSeed(s, len, split);
}

int tk_map_init(tk_map *m, uint32_t expected, const char *pool) {
    memset(m, 0, sizeof *m);
    uint64_t cap = 16;
    while (cap * 3 < (uint64_t)expected * 4 + 3) cap <<= 1;
    if (cap > (1ull << 31)) return -1;
    m->slots = kw_mem_alloc(KW_MEM_TOKENIZER, (size_t)cap * sizeof *m->slots);
    if (!m->slots) return -1;
    for (uint64_t i = 0; i < cap; i++) m->slots[i].val = -1;
    m->mask = (uint32_t)(cap - 1);
    m->pool = pool;
    return 0;
}

void tk_map_free(tk_map *m) {
    kw_mem_free(m->slots);
    memset(m, 0, sizeof *m);
}

static bool slot_matches(const tk_map *m, const tk_map_entry *e, uint32_t h, const char *s, size_t len,
                         uint32_t split) {
    return e->hash == h && e->len == len && e->split == split && memcmp(m->pool + e->off, s, len) == 0;
}

int tk_map_put(tk_map *m, uint32_t off, uint32_t len, uint32_t split, int32_t val, bool overwrite) {
    if (!m->slots || val < 0) return -1;
    const char *s = m->pool + off;
    uint64_t h64 = key_hash(s, len, split);
    uint32_t h = (uint32_t)h64;
    for (uint32_t i = (uint32_t)(h64 >> 32) & m->mask, probes = 0; probes <= m->mask; i = (i + 1) & m->mask, probes++) {
        tk_map_entry *e = &m->slots[i];
        if (e->val < 0) {
            if ((uint64_t)(m->n + 1) * 4 > ((uint64_t)m->mask + 1) * 3) return -1; /* keep load <= 3/4 */
            e->off = off; e->len = len; e->split = split; e->val = val; e->hash = h;
            m->n++;
            return 0;
        }
        if (slot_matches(m, e, h, s, len, split)) {
            if (overwrite) e->val = val;
            return 0;
        }
    }
    return -1;
}

int32_t tk_map_get(const tk_map *m, const char *s, size_t len, uint32_t split) {
    if (!m->slots || len > UINT32_MAX) return -1;
    uint64_t h64 = key_hash(s, len, split);
    uint32_t h = (uint32_t)h64;
    for (uint32_t i = (uint32_t)(h64 >> 32) & m->mask;; i = (i + 1) & m->mask) {
        const tk_map_entry *e = &m->slots[i];
        if (e->val < 0) return -1;
        if (slot_matches(m, e, h, s, len, split)) return e->val;
    }
}

int tk_ids_push(tk_ids *o, int32_t id) {
    if (o->n == o->cap) {
        size_t nc = o->cap ? o->cap * 2 : 64;
        int32_t *nv = realloc(o->v, nc * sizeof *nv);
        if (!nv) return -1;
        o->v = nv;
        o->cap = nc;
    }
    o->v[o->n++] = id;
    return 0;
}

void *tk_scratch_grow(void *p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return p;
    size_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    void *np = kw_mem_alloc(KW_MEM_TOKENIZER, nc * elem);
    if (!np) return NULL;
    if (p) memcpy(np, p, *cap * elem);
    kw_mem_free(p);
    *cap = nc;
    return np;
}

void tk_scratch_free(void *p) { kw_mem_free(p); }

void tk_seglist_free(tk_seglist *s) {
    kw_mem_free(s->len);
    memset(s, 0, sizeof *s);
}

size_t tk_utf8_len_lead(unsigned char c) {
    static const unsigned char lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lens[c >> 4];
}

size_t tk_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    unsigned char c = s[0];
    size_t len;
    uint32_t v, min;
    if (c < 0x80) { *cp = c; return 1; }
    else if (c >= 0xC2 && c <= 0xDF) { len = 2; v = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; v = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; v = c & 0x07; min = 0x10000; }
    else { *cp = 0xFFFD; return 1; }
    if (n < len) { *cp = 0xFFFD; return 1; }
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) { *cp = 0xFFFD; return 1; }
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) { *cp = 0xFFFD; return 1; }
    *cp = v;
    return len;
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes keep their code point,
 * the other 68 bytes take 256, 257, ... in byte order. */
static bool byte_is_printable(unsigned b) {
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

uint32_t tk_byte_unicode(uint8_t b) {
    if (byte_is_printable(b)) return b;
    if (b <= 32) return 256u + b;               /* 0..32    -> 256..288 */
    if (b >= 127 && b <= 160) return 289u + (b - 127u); /* 127..160 -> 289..322 */
    return 323;                                 /* 173      -> 323 */
}

int tk_unicode_byte(uint32_t cp) {
    if (cp < 256) return byte_is_printable(cp) ? (int)cp : -1;
    if (cp <= 288) return (int)(cp - 256);
    if (cp <= 322) return (int)(cp - 289 + 127);
    if (cp == 323) return 173;
    return -1;
}
