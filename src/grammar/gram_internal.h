/* gram_internal.h - what the grammar module's files share: growable
 * accounted buffers, the grammar IR the front-ends build, the compiled
 * automaton (one DFA per rule over byte classes plus rule-call edges), the
 * parse-stack stepper and the vocab trie.
 *
 * Model: a grammar is a set of rules; each rule is compiled to a DFA whose
 * edges read a byte (through a global byte-class map) or call another
 * rule. A parse state is a set of "heads": (DFA state, loop count, parent
 * frame). A call pushes a return frame (the state after the call edge) and
 * starts the callee; reaching an accepting state pops back to the parent.
 * Bounded repetitions that are too big to unroll become LOOP rules: the
 * body's DFA with its ends wired back to its start and a counter in the
 * frame (iterations started), checked against the rule's min/max. */
#ifndef KW_GRAM_INTERNAL_H
#define KW_GRAM_INTERNAL_H
#include "kvwise/grammar.h"
#include "kvwise/memory.h"
#include <string.h>

#define G_INF 0xFFFFFFFFu          /* unbounded repetition */
#define G_NONE 0xFFFFFFFFu

/* ---- growable accounted arrays ---- */
/* Makes room for `need` elements of `elem` bytes in *p (capacity *cap);
 * 0 or -1 (out of memory; *p unchanged). */
int g_reserve(void **p, uint32_t *cap, uint64_t need, size_t elem);
#define G_PUSH(arr, n, cap, val) \
    (g_reserve((void **)&(arr), &(cap), (uint64_t)(n) + 1, sizeof(*(arr))) ? -1 : ((arr)[(n)++] = (val), 0))

/* ---- IR ---- */
enum { IR_EMPTY = 0, IR_LIT, IR_CLASS, IR_SEQ, IR_ALT, IR_REP, IR_REF };
typedef struct ir_node {
    uint8_t kind;
    uint32_t a, n;        /* LIT: byte offset, length; CLASS: range offset, count; SEQ/ALT: kid offset, count;
                             REP: a = child; REF: a = rule */
    uint32_t min, max;    /* REP */
} ir_node;
typedef struct ir_range { uint32_t lo, hi; } ir_range;   /* code points, inclusive */
typedef struct ir_rule {
    uint32_t name;        /* offset into names (NUL-terminated) */
    uint32_t expr;        /* G_NONE until defined */
    uint32_t loop_min, loop_max;  /* LOOP rules (made by the compiler) */
    uint32_t loop_body;           /* a plain rule of the body, called when the body is not prefix-free */
    uint8_t is_loop;
} ir_rule;

typedef struct gram_ir {
    ir_node *nodes; uint32_t n_nodes, cap_nodes;
    uint32_t *kids; uint32_t n_kids, cap_kids;
    ir_range *ranges; uint32_t n_ranges, cap_ranges;
    uint8_t *bytes; uint32_t n_bytes, cap_bytes;
    char *names; uint32_t n_names, cap_names;
    ir_rule *rules; uint32_t n_rules, cap_rules;
    uint32_t root;        /* rule id */
    kw_grammar_limits lim;
    kw_err *err;          /* where builders report */
    int failed;           /* a builder failed: every later builder returns G_NONE */
} gram_ir;

void ir_init(gram_ir *ir, const kw_grammar_limits *lim, kw_err *err);
void ir_free(gram_ir *ir);
/* ir_init for a grammar text of len bytes: one over max_source_bytes is
 * refused ("who: grammar of N bytes is over the limit of M
 * (max_source_bytes)"), -1 with nothing held; else 0. */
int ir_init_source(gram_ir *ir, const kw_grammar_limits *lim, kw_err *err, size_t len, const char *who);
/* The end of parsing a grammar text: every rule used is defined ("who:
 * <kind>'name' is used but never defined") and a rule named root exists
 * ("who: no 'root' rule"), which becomes the IR's root. Nothing after an
 * earlier error. */
void ir_check_rules(gram_ir *ir, const char *who, const char *kind, const char *root);
/* The IR compiled into a grammar (NULL after an error: the IR's first),
 * and the IR freed. */
kw_grammar *ir_compile_free(gram_ir *ir);
/* Builders return a node id, or G_NONE after an error (which they record in
 * ir->err once; later calls with G_NONE arguments propagate it). */
uint32_t ir_empty(gram_ir *ir);
uint32_t ir_lit(gram_ir *ir, const void *bytes, size_t n);
uint32_t ir_lit_str(gram_ir *ir, const char *s);
/* ranges: code point intervals (any order, may overlap); negate: the complement
 * within valid Unicode scalar values (surrogates never match). */
uint32_t ir_class(gram_ir *ir, const ir_range *r, uint32_t n, bool negate);
uint32_t ir_char(gram_ir *ir, uint32_t cp);
uint32_t ir_seq(gram_ir *ir, const uint32_t *kids, uint32_t n);
uint32_t ir_alt(gram_ir *ir, const uint32_t *kids, uint32_t n);
uint32_t ir_seq2(gram_ir *ir, uint32_t a, uint32_t b);
uint32_t ir_seq3(gram_ir *ir, uint32_t a, uint32_t b, uint32_t c);
uint32_t ir_alt2(gram_ir *ir, uint32_t a, uint32_t b);
uint32_t ir_rep(gram_ir *ir, uint32_t kid, uint32_t min, uint32_t max);
uint32_t ir_ref(gram_ir *ir, uint32_t rule);
/* A rule by name (created undefined when new); G_NONE on error. */
uint32_t ir_rule_get(gram_ir *ir, const char *name, size_t len);
/* A fresh rule with a unique name built from hint. */
uint32_t ir_rule_new(gram_ir *ir, const char *hint);
int ir_rule_define(gram_ir *ir, uint32_t rule, uint32_t expr);
const char *ir_rule_name(const gram_ir *ir, uint32_t rule);
/* Records an error (first one wins); returns G_NONE. */
uint32_t ir_fail(gram_ir *ir, const char *fmt, ...) KW_PRINTF(2, 3);

/* ---- front-end helpers (gbnf.c, regex.c, lark.c) ---- */
/* The nodes of a SEQ or ALT being parsed. */
typedef struct ir_list { uint32_t *v; uint32_t n, cap; } ir_list;
/* Appends node id: 0, or -1 with the list freed when id is G_NONE (its
 * error is recorded already) or memory runs out (recorded as "who: out of
 * memory"). */
int ir_list_push(gram_ir *ir, ir_list *l, uint32_t id, const char *who);
/* The SEQ / ALT of the list's nodes; the list is freed. */
uint32_t ir_list_seq(gram_ir *ir, ir_list *l);
uint32_t ir_list_alt(gram_ir *ir, ir_list *l);
/* Frees the list and returns res (an error path: `return ir_list_drop(&l, perr(...))`). */
uint32_t ir_list_drop(ir_list *l, uint32_t res);
/* Value of hex digit c, -1 if it is not one. */
int g_hex_digit(char c);
/* Exactly n hex digits at *p (before end) into *v: 0, or -1 with *p at the
 * first character that is not one. */
int g_hex_digits(const char **p, const char *end, int n, uint32_t *v);
/* A decimal count at *p: false when no digit is there; else every digit is
 * read and the value saturates at 0xFFFFFFF. */
bool g_parse_count(const char **p, const char *end, uint32_t *out);

/* UTF-8 encode cp into out[4]; returns length (0 for invalid). */
int g_utf8_encode(uint32_t cp, uint8_t *out);
/* Decodes one code point from s[0..n); returns its length or 0 if invalid. */
int g_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);
/* Decodes the code point at *p (before end) and steps past it; false, *p
 * unchanged, when the bytes there are not valid UTF-8. */
bool g_utf8_next(const char **p, const char *end, uint32_t *cp);

/* ---- regex (regex.c) ---- */
enum { RX_RAW = 0, RX_JSON_STRING = 1 };   /* RX_JSON_STRING: chars as they appear inside a JSON string */
enum { RX_DOT_ECMA = 0, RX_DOT_PYTHON = 1, RX_DOT_ALL = 2 }; /* '.' excludes \n\r\u2028\u2029, only \n, or nothing */
/* Parses a regex into an IR expression. '^' / '$' are accepted at the start
 * / end of each top-level alternative. search = false: the expression
 * matches the whole text (anchors change nothing). search = true (JSON
 * Schema "pattern", which matches anywhere): an alternative without '^'
 * may be preceded by any text, one without '$' followed by any text. */
uint32_t rx_compile(gram_ir *ir, const char *re, size_t len, int mode, int dot, bool search);
/* Any one character in the given mode (JSON: an escaped or plain string char). */
uint32_t rx_any_char(gram_ir *ir, int mode, bool dot_like, int dot);

/* ---- compiled grammar ---- */
enum { ST_ACCEPT = 1, ST_ITER = 2, ST_BYTES = 4 };
typedef struct g_ref { uint32_t rule, to; } g_ref;

struct kw_grammar {
    uint32_t n_rules, n_states, n_cls;
    uint8_t cls_of[256];          /* byte -> class */
    int32_t *trans;               /* n_states x n_cls, -1 = none */
    uint32_t *st_rule;
    uint8_t *st_flags;
    uint32_t *st_ref_off, *st_ref_n;
    g_ref *refs; uint32_t n_refs;
    uint32_t *st_slot;            /* index slot of a state (states of identical rules share) */
    uint32_t n_slots;
    uint32_t *rule_start, *rule_min, *rule_max;
    uint8_t *rule_loop, *rule_nullable;
    uint8_t *rule_follow;         /* n_rules x 32 bytes: bytes that may follow the rule's end */
    /* closing (close.c): fewest bytes from a state to its rule's end, of a
       whole rule, of one LOOP iteration (G_INF: not known) */
    uint32_t *st_dist, *rule_minlen, *rule_iter;
    uint32_t root;
    char *names; uint32_t *rule_name;   /* for messages */
    kw_grammar_limits lim;
};
/* IR -> automaton. Takes ownership of nothing; ir is left to the caller. */
kw_grammar *gram_compile(gram_ir *ir, kw_err *err);
/* Fills st_dist, rule_minlen, rule_iter of a compiled grammar (close.c); -1 out of memory. */
int gram_close_analyse(kw_grammar *g);

static inline int32_t g_next(const kw_grammar *g, uint32_t st, uint8_t b) {
    return g->trans[(size_t)st * g->n_cls + g->cls_of[b]];
}

/* ---- stepper (match.c) ---- */
#define G_ROOT 0xFFFFFFFFu         /* parent of the root frame */
#define G_BOTTOM 0xFFFFFFFEu       /* parent of the frame an index walk starts from */
typedef struct g_head { uint32_t st, cnt, par, dep; } g_head;

/* Scratch of the stepper: frame arena, closure hash, worklist. */
typedef struct g_stepper {
    const kw_grammar *g;
    g_head *nodes; uint32_t n_nodes, cap_nodes;
    /* closure dedup: open addressing over (st,cnt,par) with generation stamps */
    uint64_t *hkey; uint32_t *hval, *hgen; uint32_t hcap, gen;
    g_head *work; uint32_t n_work, cap_work;
    /* set by a closure */
    int can_end;                  /* the root frame may end */
    int bottom_pop;               /* the bottom frame ended (index walks) */
    uint32_t bottom_c[4]; int n_bottom_c;  /* its iteration counts when it did */
    int overflow;                 /* max_heads hit */
} g_stepper;
int g_stepper_init(g_stepper *s, const kw_grammar *g);
void g_stepper_free(g_stepper *s);
/* Expands heads (calls and returns) into out (heads that can read a byte).
 * Appends to *out / *n_out (capacity *cap_out). Sets s->can_end etc. 0 or -1 (memory / limits). */
int g_closure(g_stepper *s, const g_head *in, uint32_t n_in, g_head **out, uint32_t *n_out, uint32_t *cap_out);
/* One byte from heads in -> closure of the successors appended to out. */
int g_step(g_stepper *s, const g_head *in, uint32_t n_in, uint8_t byte, g_head **out, uint32_t *n_out,
           uint32_t *cap_out);
/* Pops head h's frame: the closure of its parent, appended to out (root: sets can_end). */
int g_pop(g_stepper *s, const g_head *h, g_head **out, uint32_t *n_out, uint32_t *cap_out);
/* Loop-count gate for leaving a frame whose rule is r after count iterations. */
static inline bool g_exit_ok(const kw_grammar *g, uint32_t r, uint32_t count) {
    return !g->rule_loop[r] || (count >= g->rule_min[r] && count <= g->rule_max[r]);
}

/* ---- vocab (vocab.c) ---- */
struct kw_grammar_vocab {
    int32_t n;
    uint8_t *kind;
    uint32_t *off, *len;          /* into bytes */
    uint8_t *bytes;
    /* trie in preorder (root excluded): node i has byte tb[i], depth td[i] (1-based),
       subtree end te[i] (first index after it), first token tt[i] (-1 none);
       more tokens with identical bytes chain through same_next[]. */
    uint32_t n_nodes;
    uint8_t *tb; uint16_t *td; uint32_t *te; int32_t *tt;
    int32_t *same_next;
    int32_t *eog; uint32_t n_eog;
    uint32_t max_len;
    /* index walks of self-contained rules, shared by every grammar on this
       vocab (index.c); the only mutable part of a vocab, behind its own lock */
    struct gv_cache *cache;
};
void gv_cache_free(struct gv_cache *c);

/* ---- helpers ---- */
/* memcpy that allows n == 0 with NULL pointers (empty arrays are NULL here) */
static inline void g_copy(void *dst, const void *src, size_t n) {
    if (n) memcpy(dst, src, n);
}
static inline void g_bit_set(uint32_t *m, uint32_t i) { m[i >> 5] |= 1u << (i & 31); }
static inline bool g_bitset_has(const uint8_t *set32, uint8_t b) { return (set32[b >> 3] >> (b & 7)) & 1; }

#endif
