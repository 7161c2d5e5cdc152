/* tok_internal.h - the tokenizer's private state, shared by the files of
 * src/tokenizer/ (nothing outside this folder includes it).
 *
 *   strmap.c   open-addressing hash maps keyed by byte strings (xxhash)
 *   load.c     kw_tokenizer_load/free: GGUF metadata -> tables, defaults,
 *              special-token detection, accessors
 *   pretok.c   pre-tokenizer regex sets (by tokenizer.ggml.pre), PCRE2 split
 *   spm.c      SentencePiece-style BPE over scores with byte fallback
 *   bpe.c      byte-level BPE over merge ranks
 *   tokenize.c kw_tokenize: special-token partition, BOS/EOS, dispatch
 *   detok.c    kw_token_to_piece and the streaming UTF-8-safe detokenizer
 *
 * Behaviour follows llama.cpp (b4748) as documented facts; the code is ours. */
#ifndef KW_TOK_INTERNAL_H
#define KW_TOK_INTERNAL_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "kvwise/tokenizer.h"

/* ---- token attributes (bit flags, as llama.cpp's llama_token_attr) ---- */
enum {
    TK_ATTR_UNKNOWN = 1 << 0,
    TK_ATTR_UNUSED = 1 << 1,
    TK_ATTR_NORMAL = 1 << 2,
    TK_ATTR_CONTROL = 1 << 3,
    TK_ATTR_USER_DEFINED = 1 << 4,
    TK_ATTR_BYTE = 1 << 5,
    TK_ATTR_LSTRIP = 1 << 7,
    TK_ATTR_RSTRIP = 1 << 8,
    TK_ATTR_EOG = 1 << 16, /* ours: end-of-generation member */
};

typedef enum { TK_SPM = 1, TK_BPE = 2 } tk_type;

/* ---- hash map: byte string (with an optional split point) -> int32 ----
 * Keys live in a caller-owned pool; the map stores offsets into it. The
 * split lets one key stand for a pair (left = key[0..split), right = rest). */
typedef struct tk_map_entry {
    uint32_t off, len, split;
    int32_t val;    /* -1 = empty slot */
    uint32_t hash;  /* low 32 bits of the key hash, quick reject */
} tk_map_entry;

typedef struct tk_map {
    tk_map_entry *slots;
    uint32_t mask;      /* capacity - 1 (power of two) */
    uint32_t n;
    const char *pool;   /* where off/len point */
} tk_map;

int tk_map_init(tk_map *m, uint32_t expected, const char *pool);
void tk_map_free(tk_map *m);
/* Inserts (pool[off..off+len), split) -> val. overwrite: replace an existing
 * value (else the first one stays). Never fails once init succeeded (the
 * capacity is sized by `expected`; inserting more returns -1). */
int tk_map_put(tk_map *m, uint32_t off, uint32_t len, uint32_t split, int32_t val, bool overwrite);
/* Looks up bytes s[0..len) with split; -1 if absent. */
int32_t tk_map_get(const tk_map *m, const char *s, size_t len, uint32_t split);

/* ---- pre-tokenizer (byte-level BPE) ---- */
#define TK_MAX_REGEX 8
typedef struct tk_pretok {
    int n;
    void *code[TK_MAX_REGEX];  /* pcre2_code_8 * */
} tk_pretok;

typedef struct tk_pre_info {
    const char *name;           /* canonical name of the regex set */
    const char *const *regex;   /* NULL-terminated */
    bool ignore_merges, add_bos_default;
    bool bos_null;              /* chatglm: no BOS unless the file names one */
    bool keep_spaces;           /* detokenize without clean_up_tokenization_spaces */
} tk_pre_info;

/* Finds the regex set of a tokenizer.ggml.pre value (NULL or "" = default).
 * Returns NULL for an unknown name. */
const tk_pre_info *tk_pre_lookup(const char *pre);
int tk_pretok_compile(tk_pretok *p, const tk_pre_info *info, kw_err *err);
void tk_pretok_free(tk_pretok *p);

/* A growable list of segment lengths (the pre-tokenizer's output). */
typedef struct tk_seglist { size_t *len; size_t n, cap; } tk_seglist;
void tk_seglist_free(tk_seglist *s);
/* Splits text[0..n) into words: every regex in turn splits every current
 * piece into its matches and the gaps between them. */
int tk_pretok_split(const tk_pretok *p, const char *text, size_t n, tk_seglist *out, kw_err *err);

/* ---- growable int32 vector (the output ids; plain malloc: caller frees) ---- */
typedef struct tk_ids { int32_t *v; size_t n, cap; } tk_ids;
int tk_ids_push(tk_ids *o, int32_t id);

/* ---- the tokenizer ---- */
typedef struct tk_token {
    uint32_t text_off, text_len;    /* as stored in the vocab */
    uint32_t piece_off, piece_len;  /* the bytes it renders to (special text for control) */
    float score;
    uint32_t attr;
} tk_token;

struct kw_tokenizer {
    tk_type type;
    char model[32];
    char pre[64];
    int32_t n_vocab;
    tk_token *tok;
    char *text_pool;    /* token texts, each NUL-terminated */
    char *piece_pool;
    char *raw_pool;     /* byte-level: each token's text mapped back to raw bytes (keys of raw_map) */
    tk_map text_map;    /* text -> id (SPM merges, lookups, specials) */
    tk_map raw_map;     /* byte-level: raw bytes -> id */
    char *merge_pool;   /* byte-level: "left right" merges as raw bytes (no space) */
    tk_map merge_map;   /* (left|right, split) -> rank */
    int32_t n_merges;

    int32_t bos, eos, eot, eom, unk, pad, sep, nl;
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    bool add_bos, add_eos, add_space_prefix, ignore_merges;
    bool clean_spaces;  /* kw_detokenize: " ," -> "," etc. (byte-level vocabs by default) */
    bool spm_words;     /* SPM: no token has U+2581 right after another character,
                           so merging can run word by word (spm.c) */

    int32_t *special;   /* control / user-defined / unknown ids, longest text first */
    int32_t n_special;
    int32_t byte_tok[256]; /* SPM: <0xNN> (or the 1-char token); BPE: token of one raw byte */

    const tk_pre_info *pre_info;
    tk_pretok pretok;
    size_t max_piece;   /* longest rendered piece, bytes */
    size_t max_text;    /* the most text bytes one token stands for (piece or stored text) */
    bool strips;        /* some token eats the whitespace beside it (lstrip/rstrip) */
};

/* Encoders: append the ids of text[0..n) (no specials inside) to out.
 * SPM: space_prefix puts a " " in front; spaces become U+2581 first. */
int tk_spm_encode(const kw_tokenizer *t, const char *text, size_t n, bool space_prefix, tk_ids *out, kw_err *err);
int tk_bpe_encode(const kw_tokenizer *t, const char *text, size_t n, tk_ids *out, kw_err *err);

/* GPT-2 byte <-> unicode mapping. tk_byte_unicode(b) gives the code point of
 * byte b; tk_unicode_byte(cp) the byte, or -1 if cp is not in the map. */
uint32_t tk_byte_unicode(uint8_t b);
int tk_unicode_byte(uint32_t cp);
/* Decodes one UTF-8 code point at s (n bytes left): returns its length (1 for
 * an invalid byte, with *cp = 0xFFFD), or 0 if n == 0. */
size_t tk_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);
/* llama.cpp's unicode_len_utf8: sequence length from the lead byte alone. */
size_t tk_utf8_len_lead(unsigned char c);

/* Scratch buffers through the accounted allocator (KW_MEM_TOKENIZER). */
void *tk_scratch_grow(void *p, size_t *cap, size_t need, size_t elem);
void tk_scratch_free(void *p);

/* Candidate merges of adjacent symbols (merge_heap.c): the highest key pops
 * first, ties leftmost first. size = bytes of the merged pair, to spot stale
 * entries. a is scratch memory (tk_scratch_free it). */
typedef struct tk_pair { float key; int32_t left, right; uint32_t size; } tk_pair;
typedef struct tk_heap { tk_pair *a; size_t cap, n; } tk_heap;
int tk_heap_push(tk_heap *h, tk_pair p);
tk_pair tk_heap_pop(tk_heap *h);

/* A symbol of a text being merged: bytes [off, off + n) of it, linked to its
 * neighbours (-1: none); n = 0 once merged into its left neighbour. */
typedef struct tk_sym { int32_t prev, next; uint32_t off, n; } tk_sym;
/* The merge key of joining l and r, symbols of text (the higher merges
 * first); false when the two do not merge. */
typedef bool (*tk_merge_key_fn)(const kw_tokenizer *t, const char *text, const tk_sym *l, const tk_sym *r, float *key);
/* Merges the linked symbols sym[a..b) of text until no pair is left: every
 * adjacent pair that merges goes into h; popping a pair that is still intact
 * merges it and offers its new neighbours. 0, or -1 out of memory. */
int tk_merge_symbols(const kw_tokenizer *t, const char *text, tk_sym *sym, size_t a, size_t b, tk_merge_key_fn key_of,
                     tk_heap *h);

#endif
