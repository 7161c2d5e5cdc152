/* gtest_util.h - helpers shared by the grammar tests: fake vocabularies,
 * a random walk that generates text by following the token mask, and the
 * exhaustive check that the mask agrees with accept_token. */
#ifndef KW_GTEST_UTIL_H
#define KW_GTEST_UTIL_H
#include "kvwise/grammar.h"
#include <stdint.h>

/* A vocab of every single byte plus the given extra strings (NULL-ended),
 * then n_eog EOG tokens and one special token at the end. */
kw_grammar_vocab *gt_vocab_small(const char *const *extra, int n_eog);
/* A big synthetic byte-level vocab of n tokens (deterministic from seed):
 * all bytes, then JSON/code-like pieces and random ASCII/UTF-8 strings,
 * the last two an EOG and a special token. */
kw_grammar_vocab *gt_vocab_big(int32_t n, uint32_t seed);

/* Generates up to max_tokens tokens by drawing uniformly among the allowed
 * ones (EOG drawn with probability p_end when allowed; on half the steps
 * only tokens of at most 2 bytes starting with a byte of `prefer` are
 * drawn when there are any, so that walks close what they open); writes
 * the text into out (cap bytes, NUL-terminated, *out_len bytes: the text
 * may hold NULs). Returns 1 when it ended with EOG or completion, 0 when
 * max_tokens ran out, -1 on a failure (message in why). */
int gt_random_walk(const kw_grammar *g, const kw_grammar_index *ix, const kw_grammar_vocab *v, uint32_t seed,
                   int max_tokens, double p_end, const char *prefer, char *out, size_t cap, size_t *out_len,
                   char *why, size_t why_cap);

/* A walk under the budget policy (kw_grammar_mask_budget /
 * kw_grammar_budget_ok, as the scheduler runs it) with max_tokens tokens:
 * uniform draws among the allowed tokens (EOG only when nothing else is
 * allowed), a draw that leaves too few tokens rolled back and redrawn
 * under the closing mask. Checks on the way that every closing mask is a
 * subset of the plain mask. *n_closing: steps under the closing mask.
 * Returns 1 when the output ended (EOG or complete), 0 when the tokens ran
 * out, -1 on a failure (why). */
int gt_budget_walk(const kw_grammar *g, const kw_grammar_index *ix, const kw_grammar_vocab *v, uint32_t seed,
                   int max_tokens, char *out, size_t cap, int *n_closing, char *why, size_t why_cap);

/* For the matcher's current state: every token's mask bit must equal
 * whether accept_token succeeds on a clone. Returns the number of
 * disagreements (0 = consistent); prints the first few. */
int gt_check_mask_exact(kw_grammar_matcher *m, const kw_grammar_vocab *v);

/* 1 when the whole string is accepted and may end there. */
int gt_accepts(const kw_grammar *g, const char *s, size_t n);
#endif
