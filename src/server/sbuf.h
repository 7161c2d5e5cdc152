/* sbuf.h - a growable byte string for building prompts and responses
 * (server-internal). Functions return -1 when memory runs out and leave
 * the buffer valid. */
#ifndef KW_SERVER_SBUF_H
#define KW_SERVER_SBUF_H
#include <stddef.h>

typedef struct kw_sbuf { char *p; size_t len, cap; int oom; } kw_sbuf;

/* The capacity the buffer will have after adding `extra` bytes (doubling from 256). */
size_t kw_sbuf_cap_after(const kw_sbuf *b, size_t extra);
int kw_sbuf_add(kw_sbuf *b, const char *s, size_t n);
int kw_sbuf_puts(kw_sbuf *b, const char *s);
int kw_sbuf_printf(kw_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Takes the string (NUL-terminated, malloc'd); the buffer is reset. */
char *kw_sbuf_take(kw_sbuf *b);
void kw_sbuf_free(kw_sbuf *b);

#endif
