/* conf.c - the configuration-file parser (conf.h): lines of KEY [=] VALUE
 * with comments and quoted values, every error naming file and line. */
#include "kvwise/conf.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }
static bool is_key_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; }

void kw_conf_free(kw_conf *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) free(c->e[i].value);
    free(c->e);
    c->e = NULL;
    c->n = 0;
}

const kw_conf_entry *kw_conf_get(const kw_conf *c, const char *key) {
    for (int i = 0; c && i < c->n; i++)
        if (!strcmp(c->e[i].key, key)) return &c->e[i];
    return NULL;
}

/* A quoted value starting at p (after the opening quote), ending before
 * end. Writes the unescaped text to out; returns the position after the
 * closing quote, or NULL when there is none. */
static const char *unquote(const char *p, const char *end, char *out) {
    size_t o = 0;
    while (p < end && *p != '"') {
        if (*p == '\\' && p + 1 < end && (p[1] == '"' || p[1] == '\\')) p++;
        out[o++] = *p++;
    }
    out[o] = 0;
    return p < end ? p + 1 : NULL;
}

/* One non-blank, non-comment line [p, end): its key and value into e. */
static int parse_line(const char *p, const char *end, const char *name, int ln, kw_conf_entry *e, kw_err *err) {
    if (end - p >= 2 && p[0] == '-' && p[1] == '-') p += 2;
    const char *k = p;
    while (p < end && is_key_char(*p)) p++;
    size_t kl = (size_t)(p - k);
    if (kl == 0 || kl >= KW_CONF_MAX_KEY || k[0] == '-' || (p < end && !is_blank(*p) && *p != '=' && *p != '#'))
        return kw_err_set(err, "%s:%d: expected a setting name (a flag without its dashes: lower-case letters, "
                          "digits, '-'), then an optional '=' and the value", name, ln);
    memcpy(e->key, k, kl);
    e->key[kl] = 0;
    e->line = ln;
    while (p < end && is_blank(*p)) p++;
    if (p < end && *p == '=') {
        p++;
        while (p < end && is_blank(*p)) p++;
    }
    if (p == end || *p == '#') { e->value = NULL; return 0; }
    char *v = malloc((size_t)(end - p) + 1);
    if (!v) return kw_err_set(err, "%s:%d: out of memory", name, ln);
    if (*p == '"') {
        const char *after = unquote(p + 1, end, v);
        if (!after) { free(v); return kw_err_set(err, "%s:%d: '%s': the quoted value has no closing '\"'", name, ln, e->key); }
        while (after < end && is_blank(*after)) after++;
        if (after < end && *after != '#') {
            free(v);
            return kw_err_set(err, "%s:%d: '%s': text after the closing quote", name, ln, e->key);
        }
    } else {
        const char *q = p, *stop = end;
        for (; q < end; q++)
            if (*q == '#' && is_blank(q[-1])) { stop = q; break; }
        while (stop > p && is_blank(stop[-1])) stop--;
        memcpy(v, p, (size_t)(stop - p));
        v[stop - p] = 0;
    }
    e->value = v;
    return 0;
}

static int add_entry(kw_conf *c, const kw_conf_entry *e, const char *name, kw_err *err) {
    const kw_conf_entry *dup = kw_conf_get(c, e->key);
    if (dup) return kw_err_set(err, "%s:%d: '%s' is set twice (first on line %d)", name, e->line, e->key, dup->line);
    kw_conf_entry *ne = realloc(c->e, sizeof *ne * (size_t)(c->n + 1));
    if (!ne) return kw_err_set(err, "%s: out of memory", name);
    c->e = ne;
    c->e[c->n++] = *e;
    return 0;
}

int kw_conf_parse(const char *text, size_t len, const char *name, kw_conf *out, kw_err *err) {
    out->e = NULL;
    out->n = 0;
    if (!name) name = "config";
    if (len > KW_CONF_MAX_BYTES)
        return kw_err_set(err, "%s: larger than %u bytes: not a configuration file", name, KW_CONF_MAX_BYTES);
    if (memchr(text, 0, len)) {
        const char *z = memchr(text, 0, len);
        int ln = 1;
        for (const char *q = text; q < z; q++) ln += *q == '\n';
        return kw_err_set(err, "%s:%d: a NUL byte: not a text file", name, ln);
    }
    const char *p = text, *end = text + len;
    for (int ln = 1; p < end; ln++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p)), *le = nl ? nl : end;
        if (le - p > KW_CONF_MAX_LINE) {
            kw_conf_free(out);
            return kw_err_set(err, "%s:%d: line longer than %d bytes", name, ln, KW_CONF_MAX_LINE);
        }
        const char *q = p;
        while (q < le && is_blank(*q)) q++;
        if (q < le && *q != '#') {
            kw_conf_entry e;
            memset(&e, 0, sizeof e);
            if (parse_line(q, le, name, ln, &e, err) < 0 || add_entry(out, &e, name, err) < 0) {
                free(e.value);
                kw_conf_free(out);
                return -1;
            }
        }
        p = nl ? nl + 1 : end;
    }
    return 0;
}

int kw_conf_load(const char *path, kw_conf *out, kw_err *err) {
    out->e = NULL;
    out->n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return kw_err_set(err, "%s: %s", path, strerror(errno));
    char *buf = malloc(KW_CONF_MAX_BYTES + 1);
    if (!buf) { fclose(f); return kw_err_set(err, "%s: out of memory", path); }
    size_t n = fread(buf, 1, KW_CONF_MAX_BYTES + 1, f);
    int bad = ferror(f);
    fclose(f);
    int rc = bad ? kw_err_set(err, "%s: read error", path) : kw_conf_parse(buf, n, path, out, err);
    free(buf);
    return rc;
}
