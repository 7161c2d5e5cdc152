/* arena.c - memory and failure plumbing of the template interpreter.
 *
 * Owns: the arena (chunks from kw_mem_alloc, kind KW_MEM_SERVER, freed as a
 * whole), the byte cap that bounds one parse or render, failure unwinding
 * (tpl_failf -> longjmp to the entry point, which frees the arena), growable
 * output buffers, and the UTF-8 / JavaScript-whitespace helpers. */
#include "template/tpl.h"
#include "kvwise/memory.h"
#include <stdio.h>
#include <string.h>

#define TPL_CHUNK_MIN (64u * 1024u)

struct tpl_chunk {
    tpl_chunk *next;
    size_t used, size;
    char data[];
};

void tpl_arena_init(tpl_arena *a, size_t cap, tpl_fail *fail) {
    a->head = NULL;
    a->total = 0;
    a->cap = cap;
    a->fail = fail;
}

void tpl_arena_free(tpl_arena *a) {
    tpl_chunk *c = a->head;
    while (c) {
        tpl_chunk *n = c->next;
        kw_mem_free(c);
        c = n;
    }
    a->head = NULL;
    a->total = 0;
}

_Noreturn void tpl_vfailf(tpl_fail *f, const char *fmt, va_list ap) {
    vsnprintf(f->msg, sizeof f->msg, fmt, ap);
    longjmp(f->jb, 1);
}

_Noreturn void tpl_failf(tpl_fail *f, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tpl_vfailf(f, fmt, ap);
}

static tpl_chunk *new_chunk(tpl_arena *a, size_t need) {
    size_t size = need > TPL_CHUNK_MIN ? need : TPL_CHUNK_MIN;
    if (a->head && a->head->size >= TPL_CHUNK_MIN && size < a->head->size * 2 && need <= TPL_CHUNK_MIN * 16)
        size = a->head->size * 2 < TPL_CHUNK_MIN * 16 ? a->head->size * 2 : TPL_CHUNK_MIN * 16;
    if (size > a->cap || a->total > a->cap - size)
        tpl_failf(a->fail, "template needs more than %zu bytes of working memory", a->cap);
    tpl_chunk *c = kw_mem_alloc(KW_MEM_SERVER, sizeof(tpl_chunk) + size);
    if (!c) tpl_failf(a->fail, "out of memory in template (%zu bytes)", size);
    c->used = 0;
    c->size = size;
    a->total += size;
    if (need > TPL_CHUNK_MIN && a->head) {
        /* big one-off block: keep the current chunk at the head for small allocs */
        c->next = a->head->next;
        a->head->next = c;
    } else {
        c->next = a->head;
        a->head = c;
    }
    return c;
}

void *tpl_alloc(tpl_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    tpl_chunk *c = a->head;
    if (!c || c->size - c->used < n) {
        c = new_chunk(a, n);
        if (c != a->head) {            /* a big block linked behind the head */
            c->used = n;
            memset(c->data, 0, n);
            return c->data;
        }
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

char *tpl_strndup(tpl_arena *a, const char *s, size_t n) {
    char *p = tpl_alloc(a, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void tpl_buf_init(tpl_buf *b, tpl_arena *ar, size_t limit) {
    b->ar = ar;
    b->p = NULL;
    b->n = b->cap = 0;
    b->limit = limit;
}

static void buf_reserve(tpl_buf *b, size_t extra) {
    if (b->limit && (extra > b->limit || b->n > b->limit - extra))
        tpl_failf(b->ar->fail, "template output exceeds the limit of %zu bytes", b->limit);
    if (b->n + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap * 2 : 256;
    while (cap < b->n + extra + 1) cap *= 2;
    char *p = tpl_alloc(b->ar, cap);
    if (b->n) memcpy(p, b->p, b->n);
    b->p = p;
    b->cap = cap;
}

void tpl_buf_put(tpl_buf *b, const char *s, size_t n) {
    if (!n) return;
    buf_reserve(b, n);
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void tpl_buf_putc(tpl_buf *b, char c) { tpl_buf_put(b, &c, 1); }
void tpl_buf_puts(tpl_buf *b, const char *s) { tpl_buf_put(b, s, strlen(s)); }

void tpl_buf_printf(tpl_buf *b, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) { tpl_buf_put(b, tmp, (size_t)n); return; }
    buf_reserve(b, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)n;
}

size_t tpl_utf8_len(unsigned char c) {
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) return 2;
    if ((c & 0xF0) == 0xE0) return 3;
    if ((c & 0xF8) == 0xF0) return 4;
    return 1;
}

static const char TPL_ESCAPES[][2] = {
    {'"', '"'}, {'\\', '\\'}, {'b', '\b'}, {'f', '\f'}, {'n', '\n'}, {'r', '\r'}, {'t', '\t'},
};

char tpl_escape_char(char letter) {
    for (size_t i = 0; i < sizeof TPL_ESCAPES / sizeof TPL_ESCAPES[0]; i++)
        if (TPL_ESCAPES[i][0] == letter) return TPL_ESCAPES[i][1];
    return 0;
}

char tpl_escape_letter(char c) {
    if ((unsigned char)c >= 0x20 && c != '"' && c != '\\') return 0;   /* most text: nothing to look up */
    for (size_t i = 0; i < sizeof TPL_ESCAPES / sizeof TPL_ESCAPES[0]; i++)
        if (TPL_ESCAPES[i][1] == c) return TPL_ESCAPES[i][0];
    return 0;
}

/* JavaScript WhiteSpace + LineTerminator: \t \n \v \f \r space U+00A0 U+1680
 * U+2000..U+200A U+2028 U+2029 U+202F U+205F U+3000 U+FEFF */
static int is_js_space_cp(uint32_t cp) {
    if (cp == 0x09 || cp == 0x0A || cp == 0x0B || cp == 0x0C || cp == 0x0D || cp == 0x20) return 1;
    if (cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
        cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000 || cp == 0xFEFF) return 1;
    return 0;
}

static uint32_t decode_at(const unsigned char *s, size_t i, size_t n, size_t *len) {
    size_t l = tpl_utf8_len(s[i]);
    if (i + l > n) { *len = 1; return 0xFFFD; }
    uint32_t cp;
    switch (l) {
    case 1: cp = s[i]; break;
    case 2: cp = ((uint32_t)(s[i] & 0x1F) << 6) | (s[i + 1] & 0x3F); break;
    case 3: cp = ((uint32_t)(s[i] & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F); break;
    default: cp = ((uint32_t)(s[i] & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) |
                  ((uint32_t)(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F); break;
    }
    *len = l;
    return cp;
}

size_t tpl_ws_at(const char *s, size_t i, size_t n) {
    if (i >= n) return 0;
    unsigned char c = (unsigned char)s[i];
    if (c < 0x80) return is_js_space_cp(c) ? 1 : 0;
    size_t l;
    uint32_t cp = decode_at((const unsigned char *)s, i, n, &l);
    return is_js_space_cp(cp) ? l : 0;
}

size_t tpl_ws_before(const char *s, size_t end) {
    if (end == 0) return 0;
    unsigned char c = (unsigned char)s[end - 1];
    if (c < 0x80) return is_js_space_cp(c) ? 1 : 0;
    /* walk back to the lead byte (at most 3 continuation bytes) */
    size_t st = end - 1;
    int k = 0;
    while (st > 0 && k < 3 && ((unsigned char)s[st] & 0xC0) == 0x80) { st--; k++; }
    size_t l;
    uint32_t cp = decode_at((const unsigned char *)s, st, end, &l);
    return (st + l == end && is_js_space_cp(cp)) ? l : 0;
}
