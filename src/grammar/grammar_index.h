/* grammar_index.h - the grammar x vocab index shared by index.c (which
 * builds it and computes masks) and match.c (whose matcher keeps the
 * scratch the mask needs).
 *
 * For every index slot (a DFA state that reads bytes; identical rules
 * share slots) the index knows, for a walk that starts in that state with
 * nothing known below it (the "bottom" frame):
 *   - acc: tokens read entirely while the bottom frame is still there (or
 *     that end exactly where a non-loop bottom rule ends): accepted
 *     whatever the stack below is. For LOOP rules each such token also has
 *     c, the loop iterations it starts; at run time a head with count n
 *     of a loop with bound max accepts it only when n + c <= max (cf list).
 *   - a suffix trie: tokens that END the bottom frame after k bytes and go
 *     on with bytes[k..] in the caller (only when bytes[k] can follow the
 *     rule at all). At run time those suffixes are walked from the actual
 *     parent frames (entries carry c for the loop exit bounds).
 * Everything else is rejected in that state. */
#ifndef KW_GRAMMAR_INDEX_H
#define KW_GRAMMAR_INDEX_H
#include "gram_internal.h"

#define GI_LE 8
typedef struct gi_sfx { uint32_t end, ent_off, ent_n; uint16_t depth; uint8_t byte; } gi_sfx;
typedef struct gi_ent { uint32_t tok, c; } gi_ent;
typedef struct gi_slot {
    uint8_t acc_bits;          /* acc stored as a bitmask (else a sorted id list) */
    uint32_t acc_off, acc_n;   /* pool: bitmask words or ids */
    uint32_t cf_off, cf_n;     /* ents: (token, c) with c >= 1, c descending (LOOP rules) */
    uint32_t max_c;
    uint32_t le_off;           /* LOOP rules with a bitmask acc: GI_LE bitmasks in pool, the k-th
                                  holding the tokens with c <= k (G_NONE: none) */
    uint32_t sfx_off, sfx_n;   /* suffix trie nodes (preorder) */
    uint32_t n_acc;
} gi_slot;

/* Per-matcher scratch of the mask computation. */
typedef struct gm_scratch {
    uint32_t *tmp; uint32_t cap_tmp;       /* a bitmask */
    g_head *hb; uint32_t n_hb, cap_hb;     /* heads by depth */
    uint32_t *doff; uint32_t cap_doff;     /* region start per depth (+1) */
    uint32_t *dnodes; uint32_t cap_dnodes;
    uint64_t *seen; uint32_t n_seen, cap_seen;
} gm_scratch;
void gm_scratch_free(gm_scratch *s);

const kw_grammar_vocab *gi_vocab(const kw_grammar_index *ix);

/* match.c accessors for index.c */
g_stepper *gm_stepper(kw_grammar_matcher *m);
const kw_grammar *gm_grammar(const kw_grammar_matcher *m);
const g_head *gm_heads(const kw_grammar_matcher *m, uint32_t *n);
const kw_grammar_index *gm_index(const kw_grammar_matcher *m);
int gm_done(const kw_grammar_matcher *m);
gm_scratch *gm_scr(kw_grammar_matcher *m);

#endif
