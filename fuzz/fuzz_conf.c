/* fuzz_conf.c - libFuzzer target for the configuration-file parser
 * (conf.h, `kvwise serve --config`). fuzz-smoke-seconds: 4
 *
 * Any input either parses or fails with a non-empty one-line message. What
 * parses has well-formed keys, and writing the entries back as
 * `key = "value"` (quoted, escaped) parses to the same entries: the quoting
 * rules are each other's inverse. Built by scripts/fuzz.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kvwise/conf.h"

static void one_line_or_die(const kw_err *err) {
    if (!err->msg[0] || strchr(err->msg, '\n')) {
        fprintf(stderr, "parser failed without a one-line message: '%s'\n", err->msg);
        abort();
    }
}

/* The entries as a file of `key = "value"` lines (bare keys stay bare). */
static char *write_back(const kw_conf *c, size_t *len) {
    size_t cap = 16;
    for (int i = 0; i < c->n; i++) cap += strlen(c->e[i].key) + 8 + (c->e[i].value ? 2 * strlen(c->e[i].value) : 0);
    char *s = malloc(cap), *p = s;
    if (!s) abort();
    for (int i = 0; i < c->n; i++) {
        p += sprintf(p, "%s", c->e[i].key);
        if (c->e[i].value) {
            p += sprintf(p, " = \"");
            for (const char *v = c->e[i].value; *v; v++) {
                if (*v == '"' || *v == '\\') *p++ = '\\';
                *p++ = *v;
            }
            *p++ = '"';
        }
        *p++ = '\n';
    }
    *len = (size_t)(p - s);
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kw_err err = {{0}};
    kw_conf c;
    if (kw_conf_parse((const char *)data, size, "fuzz.conf", &c, &err) < 0) {
        one_line_or_die(&err);
        if (c.n || c.e) abort();
        return 0;
    }
    for (int i = 0; i < c.n; i++) {
        const char *k = c.e[i].key;
        if (!k[0] || k[0] == '-' || strspn(k, "abcdefghijklmnopqrstuvwxyz0123456789-") != strlen(k)) abort();
        if (c.e[i].value && (strchr(c.e[i].value, '\n'))) abort();
        if (kw_conf_get(&c, k) != &c.e[i]) abort();                 /* keys are unique */
    }
    size_t len;
    char *back = write_back(&c, &len);
    kw_conf d;
    if (kw_conf_parse(back, len, "back.conf", &d, &err) < 0) {
        /* a value whose quoted form makes the line too long may fail; nothing else */
        if (!strstr(err.msg, "longer than")) { fprintf(stderr, "write-back failed: %s\n", err.msg); abort(); }
    } else {
        if (d.n != c.n) abort();
        for (int i = 0; i < c.n; i++) {
            if (strcmp(d.e[i].key, c.e[i].key)) abort();
            if (!c.e[i].value != !d.e[i].value) abort();
            if (c.e[i].value && strcmp(c.e[i].value, d.e[i].value)) abort();
        }
        kw_conf_free(&d);
    }
    free(back);
    kw_conf_free(&c);
    return 0;
}
