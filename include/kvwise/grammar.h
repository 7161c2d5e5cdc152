/* kvwise/grammar.h - grammar-constrained decoding: compilers from GBNF,
 * JSON Schema, a regex subset and a Lark subset into one grammar IR, a
 * byte-level recognizer over it, and the per-step token mask.
 *
 * Contract:
 *   - A kw_grammar is compiled once from text (kw_grammar_from_*); it is
 *     immutable afterwards and may be shared by any number of threads.
 *     Every compiler either succeeds or fails with one line in kw_err that
 *     names the construct or keyword it does not support; nothing is
 *     silently ignored (JSON Schema annotations excepted, see
 *     docs/GRAMMAR.md). Hostile input (deep nesting, huge enums, recursive
 *     $ref, giant repetitions) fails within the limits of kw_grammar_limits,
 *     which bound time and memory (all memory is kw_mem-accounted).
 *   - Grammars are over BYTES: terminals are Unicode code points encoded
 *     as UTF-8; a token may end in the middle of a code point.
 *   - A kw_grammar_vocab holds the raw bytes of every token of a model
 *     (byte-level BPE pieces decoded, SentencePiece "▁" as a space, byte
 *     fallback <0xNN> as the byte); shared by every grammar on that model.
 *   - A kw_grammar_index binds a grammar to a vocab: the precomputation of
 *     which tokens each grammar position accepts. Immutable, shareable.
 *     Building it is the expensive step (reported as compile time).
 *   - A kw_grammar_matcher is the per-sequence state: accept bytes/tokens,
 *     compute the mask, copy, roll back. Not thread-safe (one sequence).
 *   - EOG tokens are allowed exactly when the grammar can end here; other
 *     special tokens are never allowed; a token with no bytes is never
 *     allowed (it would let generation spin in place).
 *   - The mask is (n_vocab + 31) / 32 uint32 words, bit (id % 32) of word
 *     (id / 32) set when token id is allowed. */
#ifndef KVWISE_GRAMMAR_H
#define KVWISE_GRAMMAR_H
#include "kvwise/common.h"

typedef struct kw_grammar kw_grammar;
typedef struct kw_grammar_vocab kw_grammar_vocab;
typedef struct kw_grammar_index kw_grammar_index;
typedef struct kw_grammar_matcher kw_grammar_matcher;
struct kw_tokenizer;

/* Bounds on compile work; kw_grammar_limits_default() gives the documented
 * defaults (docs/GRAMMAR.md). A limit that is hit fails the compile with an
 * error naming it. */
typedef struct kw_grammar_limits {
    uint32_t max_source_bytes;     /* grammar / schema text */
    uint32_t max_depth;            /* nesting of the source (parentheses, schema objects) */
    uint32_t max_ir_nodes;         /* grammar IR size */
    uint32_t max_rules;
    uint32_t max_nfa_states;       /* per rule, before determinization */
    uint32_t max_dfa_states;       /* all rules together */
    uint64_t max_compile_steps;    /* determinization work (NFA states visited) */
    uint32_t max_enum_values;      /* JSON Schema enum entries */
    uint32_t max_repeat;           /* largest bound of {m,n}, minItems, maxLength ... */
    uint64_t max_index_steps;      /* trie steps of the index precomputation */
    uint64_t max_index_bytes;      /* memory of one index */
    uint32_t max_stack_depth;      /* run time: nested rule frames of one parse stack */
    uint32_t max_heads;            /* run time: parse stacks alive at once (ambiguity) */
} kw_grammar_limits;
void kw_grammar_limits_default(kw_grammar_limits *l);

/* ---- compilers (limits may be NULL: defaults) ---- */

/* llama.cpp's GBNF: `name ::= alternatives`, "literals", [classes], ., (),
 * * + ? {m} {m,} {m,n}, # comments; the start rule is `root`. Token
 * references (<...>) are not supported (error). */
kw_grammar *kw_grammar_from_gbnf(const char *text, size_t len, const kw_grammar_limits *lim, kw_err *err);

/* A regex subset (docs/GRAMMAR.md) matched against the whole output
 * (implicitly anchored at both ends). */
kw_grammar *kw_grammar_from_regex(const char *re, size_t len, const kw_grammar_limits *lim, kw_err *err);

/* A Lark subset (enough for Codex's apply_patch grammar); start rule `start`. */
kw_grammar *kw_grammar_from_lark(const char *text, size_t len, const kw_grammar_limits *lim, kw_err *err);

/* JSON output whitespace: KW_JSON_WS_COMPACT emits none; KW_JSON_WS_BOUNDED
 * (default) allows, between structural tokens, nothing, one space, or one
 * newline followed by up to 24 spaces/tabs - room for pretty printing that
 * can never turn into an endless run of blanks. */
enum { KW_JSON_WS_BOUNDED = 0, KW_JSON_WS_COMPACT = 1 };
typedef struct kw_json_schema_opts {
    bool strict;        /* OpenAI strict: an object without additionalProperties allows none */
    int whitespace;     /* KW_JSON_WS_* */
} kw_json_schema_opts;

/* A JSON Schema (text) -> grammar of JSON texts valid against it. opts may
 * be NULL (non-strict, bounded whitespace). */
kw_grammar *kw_grammar_from_json_schema(const char *schema, size_t len, const kw_json_schema_opts *opts,
                                        const kw_grammar_limits *lim, kw_err *err);
/* Same from a parsed schema (a cJSON *; declared void to keep cJSON out of this header). */
kw_grammar *kw_grammar_from_json_schema_cjson(const void *schema, const kw_json_schema_opts *opts,
                                              const kw_grammar_limits *lim, kw_err *err);
/* response_format {"type":"json_object"}: any JSON object. */
kw_grammar *kw_grammar_json_object(const kw_json_schema_opts *opts, kw_err *err);

/* A tool call in a template's call format: open, then one call object
 * {"name": "NAME", "ARGS_KEY": ARGUMENTS} for one of the tools, then close
 * (e.g. "<tool_call>\n" ... "\n</tool_call>"; "[" ... "]"; "" ... "").
 * args_only: the output is the arguments object alone (the caller wrote the
 * rest; exactly one tool). Each tool's arguments are generated under its
 * parameters JSON Schema (a cJSON *, NULL: any object; $refs resolve within
 * it), OpenAI-strict when strict. opts gives the whitespace (its strict is
 * not used). Same subset and errors as kw_grammar_from_json_schema. */
typedef struct kw_grammar_tool {
    const char *name;
    const void *parameters;     /* cJSON * or NULL */
    bool strict;
} kw_grammar_tool;
typedef struct kw_grammar_call_format {
    const char *open, *close;   /* literal text around the call object (NULL: none) */
    const char *args_key;       /* "arguments" (NULL) or "parameters" */
    bool args_only;
    /* tool_choice auto: free text that never contains one of text_excl (the
     * call parser's tags: ASCII, 2-32 bytes, no tag's first character later
     * in any tag; at most 8), then up to max_calls calls (0: no bound) with
     * bounded whitespace around them. bare: the output is one call, or text
     * that does not start with '{' or whitespace (a bare-JSON call parser
     * reads a leading object as a call). */
    bool auto_text, bare;
    const char *const *text_excl;
    uint32_t n_text_excl, max_calls;
} kw_grammar_call_format;
kw_grammar *kw_grammar_tool_call(const kw_grammar_tool *tools, uint32_t n_tools, const kw_grammar_call_format *f,
                                 const kw_json_schema_opts *opts, const kw_grammar_limits *lim, kw_err *err);

void kw_grammar_free(kw_grammar *g);
/* Sizes for logs and tests; kw_grammar_bytes: the memory the compiled grammar holds. */
size_t kw_grammar_bytes(const kw_grammar *g);
uint32_t kw_grammar_n_rules(const kw_grammar *g);
uint32_t kw_grammar_n_states(const kw_grammar *g);

/* ---- vocab ---- */

enum { KW_GTOK_TEXT = 0, KW_GTOK_EOG = 1, KW_GTOK_SPECIAL = 2 };
/* n tokens; bytes[i] (lens[i] bytes) are token i's raw bytes; kinds[i] one
 * of KW_GTOK_* (NULL: all text). Copies what it needs. */
kw_grammar_vocab *kw_grammar_vocab_new(int32_t n, const char *const *bytes, const uint32_t *lens,
                                       const uint8_t *kinds, kw_err *err);
/* From a tokenizer: kw_token_to_piece without specials; EOG as kw_token_is_eog,
 * other specials as KW_GTOK_SPECIAL. */
kw_grammar_vocab *kw_grammar_vocab_from_tokenizer(const struct kw_tokenizer *t, kw_err *err);
void kw_grammar_vocab_free(kw_grammar_vocab *v);
/* Memory the vocab holds, plus the most its shared cache of index walks may
 * grow to (KW_GRAMMAR_VOCAB_CACHE_BYTES). */
#define KW_GRAMMAR_VOCAB_CACHE_BYTES ((size_t)64 << 20)
size_t kw_grammar_vocab_bytes(const kw_grammar_vocab *v);
int32_t kw_grammar_vocab_size(const kw_grammar_vocab *v);
/* Token id's bytes (*len of them; not NUL-terminated) and kind (KW_GTOK_*). */
const char *kw_grammar_vocab_token(const kw_grammar_vocab *v, int32_t id, uint32_t *len);
int kw_grammar_vocab_kind(const kw_grammar_vocab *v, int32_t id);

/* ---- index (grammar x vocab precomputation) ---- */

/* Neither g nor v may be freed while the index lives. */
kw_grammar_index *kw_grammar_index_new(const kw_grammar *g, const kw_grammar_vocab *v,
                                       const kw_grammar_limits *lim, kw_err *err);
void kw_grammar_index_free(kw_grammar_index *ix);
size_t kw_grammar_index_bytes(const kw_grammar_index *ix);

/* ---- matcher ---- */

/* ix may be NULL for a byte-only recognizer (no masks, no tokens). */
kw_grammar_matcher *kw_grammar_matcher_new(const kw_grammar *g, const kw_grammar_index *ix, kw_err *err);
void kw_grammar_matcher_free(kw_grammar_matcher *m);
/* Back to the start state. */
void kw_grammar_matcher_reset(kw_grammar_matcher *m);
/* A deep copy (same grammar and index); NULL when out of memory. */
kw_grammar_matcher *kw_grammar_matcher_clone(const kw_grammar_matcher *m);

/* Advances over n bytes; 0, or -1 (state unchanged) when they do not
 * continue any valid output. */
int kw_grammar_accept_bytes(kw_grammar_matcher *m, const void *bytes, size_t n, kw_err *err);
/* Advances over a token (its vocab bytes; an EOG token ends the output and
 * is accepted only when kw_grammar_can_end). 0, or -1 (state unchanged). */
int kw_grammar_accept_token(kw_grammar_matcher *m, int32_t id, kw_err *err);
/* The output so far is a complete sentence of the grammar (EOG would be accepted). */
bool kw_grammar_can_end(const kw_grammar_matcher *m);
/* Nothing but the end can follow (complete and no byte may be added), or an
 * EOG token was accepted. */
bool kw_grammar_is_complete(const kw_grammar_matcher *m);
/* Undoes the last n accepted tokens / accept_bytes calls (at most the
 * KW_GRAMMAR_HISTORY most recent). 0, or -1 when n exceeds what is kept. */
#define KW_GRAMMAR_HISTORY 32
int kw_grammar_rollback(kw_grammar_matcher *m, uint32_t n);

/* Writes the allowed-token bitmask for the current state into
 * mask[(n_vocab + 31) / 32]. Returns the number of allowed tokens (0 means
 * the grammar is stuck: the caller ends the output with an error), or -1
 * on an internal limit (err says which). */
int32_t kw_grammar_mask(kw_grammar_matcher *m, uint32_t *mask, kw_err *err);
/* Budget-aware closing (docs/GRAMMAR.md "Closing within the budget").
 * kw_grammar_distance: the fewest bytes that complete a sentence from the
 * current state (0 when it can end here; KW_GRAMMAR_FAR when the compile
 * analysis did not reach this state). kw_grammar_mask_closing writes the
 * mask of tokens that follow one shortest completion: text tokens whose
 * bytes are a prefix of it, or the EOG tokens when the output can end.
 * Each such token lowers the distance by its length, so a caller that
 * switches to this mask while tokens left >= distance + 1 ends the output
 * complete, given one token per byte (byte-level vocabularies and byte
 * fallback have them). Returns the number of tokens allowed (0: none in
 * this vocab), or -1 (err says why). */
#define KW_GRAMMAR_FAR UINT32_MAX
uint32_t kw_grammar_distance(kw_grammar_matcher *m);
int32_t kw_grammar_mask_closing(kw_grammar_matcher *m, uint32_t *mask, kw_err *err);
/* The budget policy over those two, for a step with tokens_left tokens
 * left (this one included). kw_grammar_mask_budget: the closing mask once
 * tokens_left <= distance + 1 and it allows some token (*closing = true),
 * else kw_grammar_mask. kw_grammar_budget_ok, after a token was accepted
 * with tokens_left left: the output is complete, its distance is not
 * known, or distance + 1 <= tokens_left; when false the caller rolls the
 * token back and draws again under kw_grammar_mask_closing. */
int32_t kw_grammar_mask_budget(kw_grammar_matcher *m, uint32_t *mask, int64_t tokens_left, bool *closing,
                               kw_err *err);
bool kw_grammar_budget_ok(kw_grammar_matcher *m, int64_t tokens_left);
/* logits[i] = -INFINITY for every token whose bit is clear. */
void kw_grammar_mask_apply(const uint32_t *mask, float *logits, int32_t n_vocab);
static inline bool kw_grammar_mask_test(const uint32_t *mask, int32_t id) {
    return (mask[(uint32_t)id >> 5] >> ((uint32_t)id & 31)) & 1u;
}

#endif
