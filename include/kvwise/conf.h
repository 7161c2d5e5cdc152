/* kvwise/conf.h - configuration files (`kvwise serve --config FILE`): one
 * setting per line, named as its command-line flag, in the flag's units.
 *
 *   # kvwise.conf
 *   memory-limit = 20GiB
 *   prompt-cache-bytes 4GiB       # '=' is optional
 *   api-key = "a key with spaces"
 *   mlock                          # a switch alone means true
 *
 * A line is blank, a comment (its first non-blank character is '#'), or
 * KEY [=] [VALUE]. KEY is the long flag without its dashes (a leading "--"
 * is accepted): lower-case letters, digits and '-'. VALUE is the rest of
 * the line without surrounding blanks and without a trailing comment (a
 * '#' after a blank); a value in double quotes keeps blanks and '#', with
 * \" and \\ as escapes, and only a comment may follow it. A key set twice,
 * a malformed key, an unterminated quote, a NUL byte, a line longer than
 * KW_CONF_MAX_LINE or a file larger than KW_CONF_MAX_BYTES is an error
 * naming the file and the line. What the keys mean is the caller's
 * (src/cli/cmd_serve.c maps them onto its flags). */
#ifndef KVWISE_CONF_H
#define KVWISE_CONF_H
#include "kvwise/common.h"

#define KW_CONF_MAX_LINE 4096
#define KW_CONF_MAX_BYTES (1u << 20)
#define KW_CONF_MAX_KEY 64

typedef struct kw_conf_entry {
    char key[KW_CONF_MAX_KEY];
    char *value;                /* NULL when the line names the key alone */
    int line;                   /* 1-based */
} kw_conf_entry;

typedef struct kw_conf {
    kw_conf_entry *e;
    int n;
} kw_conf;

/* Parses text[0..len); name (the path) prefixes error messages. 0, or -1 +
 * err with *out empty. */
int kw_conf_parse(const char *text, size_t len, const char *name, kw_conf *out, kw_err *err);
/* Reads and parses the file at path. */
int kw_conf_load(const char *path, kw_conf *out, kw_err *err);
void kw_conf_free(kw_conf *c);
/* The entry for key, or NULL. */
const kw_conf_entry *kw_conf_get(const kw_conf *c, const char *key);

#endif
