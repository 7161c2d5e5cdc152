/* tpl.h - internals of the chat-template interpreter (template.h).
 *
 * Owns the shared types of src/template/: the arena every parse and every
 * render allocates from (freed as a whole, so an error can unwind with
 * longjmp and leak nothing), tokens, AST nodes, runtime values and scopes.
 *   arena.c    arena, failure unwinding, output buffers, UTF-8/whitespace helpers
 *   lexer.c    HF preprocessing (trim/lstrip blocks) and tokens
 *   parser.c   tokens -> AST
 *   value.c    values: cJSON import, printing, JSON, equality, ordering
 *   builtins.c filters, tests, methods and global functions
 *   eval.c     the interpreter and the public API */
#ifndef KW_TPL_H
#define KW_TPL_H
#include "kvwise/template.h"
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- failure unwinding + arena ---------------------------------------- */
typedef struct tpl_fail {
    jmp_buf jb;
    char msg[512];
} tpl_fail;

typedef struct tpl_chunk tpl_chunk;
typedef struct tpl_arena {
    tpl_chunk *head;
    size_t total;      /* bytes obtained so far */
    size_t cap;        /* fail beyond this */
    tpl_fail *fail;
} tpl_arena;

void tpl_arena_init(tpl_arena *a, size_t cap, tpl_fail *fail);
void tpl_arena_free(tpl_arena *a);
void *tpl_alloc(tpl_arena *a, size_t n);            /* zeroed; unwinds on failure */
char *tpl_strndup(tpl_arena *a, const char *s, size_t n);
/* Sets fail->msg and longjmps to the matching setjmp. */
_Noreturn void tpl_failf(tpl_fail *f, const char *fmt, ...) KW_PRINTF(2, 3);
_Noreturn void tpl_vfailf(tpl_fail *f, const char *fmt, va_list ap);

/* growable byte buffer in an arena */
typedef struct tpl_buf {
    tpl_arena *ar;
    char *p;
    size_t n, cap;
    size_t limit;      /* fail when n would exceed it (0 = none) */
} tpl_buf;
void tpl_buf_init(tpl_buf *b, tpl_arena *ar, size_t limit);
void tpl_buf_put(tpl_buf *b, const char *s, size_t n);
void tpl_buf_putc(tpl_buf *b, char c);
void tpl_buf_puts(tpl_buf *b, const char *s);
void tpl_buf_printf(tpl_buf *b, const char *fmt, ...) KW_PRINTF(2, 3);

/* Unicode helpers (JavaScript's notion of whitespace: \s, String.trim). */
size_t tpl_ws_at(const char *s, size_t i, size_t n);      /* byte length of a whitespace char at i, or 0 */
size_t tpl_ws_before(const char *s, size_t end);          /* byte length of a whitespace char ending at end, or 0 */
size_t tpl_utf8_len(unsigned char c);                     /* sequence length from its lead byte (1 for bad bytes) */
/* The backslash escapes a JSON string and a template string literal share
 * (\" \\ \b \f \n \r \t): the character a letter stands for, and the
 * letter that stands for a character; 0 when there is none. */
char tpl_escape_char(char letter);
char tpl_escape_letter(char c);

/* ---- tokens ------------------------------------------------------------- */
typedef enum {
    TK_TEXT, TK_INT, TK_FLOAT, TK_STR, TK_IDENT,
    TK_OPEN_STMT, TK_CLOSE_STMT, TK_OPEN_EXPR, TK_CLOSE_EXPR,
    TK_LPAREN, TK_RPAREN, TK_LBRACE, TK_RBRACE, TK_LBRACKET, TK_RBRACKET,
    TK_COMMA, TK_DOT, TK_COLON, TK_PIPE,
    TK_CMP, TK_ADD, TK_MUL, TK_POW, TK_ASSIGN, TK_COMMENT, TK_EOF
} tpl_tok_type;

typedef struct tpl_tok {
    tpl_tok_type type;
    const char *s;     /* text / decoded string / identifier / operator spelling */
    size_t len;
    uint32_t off;      /* byte offset in the ORIGINAL template */
} tpl_tok;

/* original text + line index, to turn offsets into "line L, col C" */
typedef struct tpl_srcmap {
    const char *src;
    size_t len;
    size_t *line_starts;
    size_t nlines;
} tpl_srcmap;
void tpl_srcmap_pos(const tpl_srcmap *m, uint32_t off, int *line, int *col);

typedef struct tpl_toks {
    tpl_tok *v;
    size_t n;
    const tpl_srcmap *map;
} tpl_toks;

/* Tokenizes map->src (HF preprocessing included); unwinds via a->fail on error. */
void tpl_lex(tpl_arena *a, const tpl_srcmap *map, tpl_toks *out);
/* builds the line index of src (kept in a) */
tpl_srcmap *tpl_srcmap_new(tpl_arena *a, const char *src, size_t len);

/* ---- AST ---------------------------------------------------------------- */
typedef enum {
    N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_MACRO, N_CALLBLOCK, N_FILTERBLOCK,
    N_BREAK, N_CONTINUE,
    N_INT, N_FLOAT, N_STR, N_IDENT, N_LIST, N_TUPLE, N_DICT, N_MEMBER, N_SLICE,
    N_CALL, N_KWARG, N_SPREAD, N_KWSPREAD, N_UNARY, N_BINARY, N_FILTER, N_TEST,
    N_SELECT, N_TERNARY
} tpl_node_kind;

typedef enum {
    OP_AND, OP_OR, OP_EQ, OP_NE, OP_LT, OP_GT, OP_LE, OP_GE, OP_IN, OP_NOTIN,
    OP_ADD, OP_SUB, OP_CONCAT, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW,
    OP_NOT, OP_NEG, OP_POS
} tpl_op;

typedef struct tpl_node tpl_node;
struct tpl_node {
    tpl_node_kind kind;
    tpl_op op;
    uint32_t off;              /* position in the original template */
    tpl_node *a, *b, *c;
    tpl_node **v; int nv;      /* body / items / args / params */
    tpl_node **w; int nw;      /* else body / dict values */
    const char *s; size_t slen;
    int64_t i;
    double f;
    int flag;                  /* N_MEMBER: computed; N_TEST: negated;
                                  N_MACRO/N_CALLBLOCK: 1 = body reads `kwargs`, 2 = `varargs` */
};

typedef struct tpl_body { tpl_node **v; int n; } tpl_body;
/* Parses tokens into a list of top-level nodes; unwinds on syntax errors. */
void tpl_parse(tpl_arena *a, const tpl_toks *toks, tpl_body *out);

/* ---- values -------------------------------------------------------------- */
typedef enum {
    TV_UNDEF, TV_NONE, TV_BOOL, TV_INT, TV_FLOAT, TV_STR, TV_LIST, TV_DICT, TV_NS, TV_FUNC
} tv_type;

typedef struct tstr { size_t len; char s[]; } tstr;   /* NUL-terminated */
typedef struct tv tv;
typedef struct tlist { size_t n, cap; tv *v; } tlist;
typedef struct tdict { size_t n, cap; tstr **k; tv *v; } tdict;
typedef struct tfunc tfunc;

struct tv {
    tv_type t;
    union { bool b; int64_t i; double f; tstr *s; tlist *l; tdict *d; tfunc *fn; } u;
};

typedef struct tpl_scope tpl_scope;
struct tpl_scope {
    tpl_scope *parent;
    tdict vars;
};

/* the render context */
typedef struct tpl_rt {
    tpl_arena *ar;
    tpl_fail *fail;
    kw_template_limits lim;
    uint64_t steps;
    int depth;
    tpl_buf *out;
    const tpl_node *at;        /* node being evaluated (for error positions) */
    const tpl_srcmap *map;
} tpl_rt;

_Noreturn void tpl_rt_fail(tpl_rt *rt, const char *fmt, ...) KW_PRINTF(2, 3);

static inline tv tv_undef(void) { tv v = {TV_UNDEF, {0}}; return v; }
static inline tv tv_none(void) { tv v = {TV_NONE, {0}}; return v; }
static inline tv tv_bool(bool b) { tv v = {TV_BOOL, {0}}; v.u.b = b; return v; }
static inline tv tv_int(int64_t i) { tv v = {TV_INT, {0}}; v.u.i = i; return v; }
static inline tv tv_float(double f) { tv v = {TV_FLOAT, {0}}; v.u.f = f; return v; }

tstr *tstr_new(tpl_arena *a, const char *s, size_t n);
tv tv_str(tpl_arena *a, const char *s, size_t n);
tv tv_cstr(tpl_arena *a, const char *s);
tv tv_strv(tstr *s);
tv tv_list(tpl_arena *a, size_t cap);
tv tv_dict(tpl_arena *a, size_t cap);
tv tv_ns(tpl_arena *a);
void tlist_push(tpl_arena *a, tlist *l, tv v);
tv *tdict_get(const tdict *d, const char *k, size_t klen);
void tdict_set(tpl_arena *a, tdict *d, const char *k, size_t klen, tv v);
void tdict_set_s(tpl_arena *a, tdict *d, tstr *k, tv v);

bool tv_truthy(tv v);
const char *tv_type_name(tv v);
bool tv_is_numeric(tv v);                 /* int, float or bool */
double tv_num(tv v);                      /* numeric value of int/float/bool */
tv tv_from_json(tpl_arena *a, const cJSON *j);

/* printing as {{ v }} does (none/undefined print nothing) */
void tv_print(tpl_buf *b, tv v);
/* JavaScript String(v.value): what `+` with a string and `~` use */
void tv_jsstr(tpl_buf *b, tv v);
void tpl_js_number(tpl_buf *b, double x);
/* JSON: indent < 0 = none; item_sep/key_sep NULL = defaults */
typedef struct tpl_json_opts {
    int indent;
    bool ensure_ascii, sort_keys, undef_as_null;
    const char *item_sep, *key_sep;
} tpl_json_opts;
void tv_json(tpl_rt *rt, tpl_buf *b, tv v, const tpl_json_opts *o, int depth);
void tpl_json_string(tpl_buf *b, const char *s, size_t n, bool ensure_ascii);
/* == as @huggingface/jinja does it (JavaScript loose equality of the payloads) */
bool tv_loose_eq(tv a, tv b);
/* === of payloads (membership tests, unique, equalto) */
bool tv_strict_eq(tv a, tv b);
/* ordering for sort/dictsort; fails on incomparable types */
int tv_compare(tpl_rt *rt, tv a, tv b, bool case_sensitive);

/* ---- functions ---------------------------------------------------------- */
typedef enum { FN_BUILTIN, FN_METHOD, FN_MACRO, FN_CALLER } tfunc_kind;
typedef struct tpl_args {
    tv *pos; int npos;
    tdict *kw;                 /* may be NULL */
} tpl_args;
typedef tv (*tpl_builtin_fn)(tpl_rt *rt, tv self, const tpl_args *args);
struct tfunc {
    tfunc_kind kind;
    const char *name;
    tpl_builtin_fn fn;         /* BUILTIN / METHOD */
    tv self;                   /* METHOD: bound receiver */
    const tpl_node *node;      /* MACRO: the macro; CALLER: the call block */
    tpl_scope *scope;          /* CALLER: scope where the call block was */
};

/* builtins.c */
void tpl_install_globals(tpl_rt *rt, tpl_scope *g);
/* member access `obj.name` / `obj['name']` falling back to methods; TV_UNDEF if none */
tv tpl_method(tpl_rt *rt, tv obj, const char *name, size_t len);
tv tpl_apply_filter(tpl_rt *rt, tv operand, const char *name, const tpl_args *args, bool has_call);
bool tpl_apply_test(tpl_rt *rt, tv operand, const char *name, const tv *arg);
tv *tpl_args_kw(const tpl_args *a, const char *name);
/* a string's characters (code points) as a list of strings */
tv tpl_str_chars(tpl_rt *rt, const tstr *s);
/* attribute path "a.b.0" lookup used by map/sort */
tv tpl_attr_path(tv item, const char *path, size_t len);

/* eval.c: calling a value (macro, builtin, method) */
tv tpl_call(tpl_rt *rt, tv fn, const tpl_args *args, tpl_scope *caller_scope);
void tpl_step(tpl_rt *rt);

#endif
