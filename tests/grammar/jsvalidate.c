/* jsvalidate.c - see jsvalidate.h. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "jsvalidate.h"
#include <ctype.h>
#include <math.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...) do { snprintf(why, cap, __VA_ARGS__); return 0; } while (0)

int jsv_utf8_ok(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        int len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (!len || i + (size_t)len > n) return 0;
        unsigned v = len == 1 ? c : c & (0xFF >> (len + 1));
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            v = (v << 6) | (s[i + k] & 0x3F);
        }
        if ((len == 2 && v < 0x80) || (len == 3 && v < 0x800) || (len == 4 && (v < 0x10000 || v > 0x10FFFF)) ||
            (v >= 0xD800 && v <= 0xDFFF))
            return 0;
        i += (size_t)len;
    }
    return 1;
}

/* code points, a surrogate pair counting once (as ajv does) */
static size_t cp_len(const char *s) {
    size_t n = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80) n++;
    return n;
}

static int re_search(const char *pat, const char *subj) {
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &err, &off, NULL);
    if (!re) return -1;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = pcre2_match(re, (PCRE2_SPTR)subj, strlen(subj), 0, 0, md, NULL);
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return rc >= 0;
}

static int num2(const char *s) { return isdigit((unsigned char)s[0]) && isdigit((unsigned char)s[1]) ? (s[0] - '0') * 10 + s[1] - '0' : -1; }

static int date_ok(const char *s) {
    if (strlen(s) < 10 || s[4] != '-' || s[7] != '-') return 0;
    for (int i = 0; i < 4; i++) if (!isdigit((unsigned char)s[i])) return 0;
    int y = atoi(s), m = num2(s + 5), d = num2(s + 8);
    static const int dm[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m < 1 || m > 12 || d < 1) return 0;
    int max = dm[m - 1] + (m == 2 && ((y % 4 == 0 && y % 100) || y % 400 == 0));
    return d <= max;
}

static int time_ok(const char *s) {
    if (strlen(s) < 9 || s[2] != ':' || s[5] != ':') return 0;
    int h = num2(s), mi = num2(s + 3), se = num2(s + 6);
    if (h < 0 || h > 23 || mi < 0 || mi > 59 || se < 0 || se > 59) return 0;
    const char *p = s + 8;
    if (*p == '.') { p++; if (!isdigit((unsigned char)*p)) return 0; while (isdigit((unsigned char)*p)) p++; }
    if (*p == 'Z' || *p == 'z') return p[1] == 0;
    if (*p == '+' || *p == '-') {
        int th = num2(p + 1), tm = num2(p + 4);
        return p[3] == ':' && th >= 0 && th <= 23 && tm >= 0 && tm <= 59 && p[6] == 0;
    }
    return 0;
}

static int format_ok(const char *f, const char *s) {
    if (!strcmp(f, "date")) return strlen(s) == 10 && date_ok(s);
    if (!strcmp(f, "time")) return time_ok(s);
    if (!strcmp(f, "date-time")) return strlen(s) > 11 && (s[10] == 'T' || s[10] == 't') && date_ok(s) && time_ok(s + 11);
    if (!strcmp(f, "uuid")) return re_search("^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$", s) == 1;
    if (!strcmp(f, "email"))
        return re_search("^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?\\.)+[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?$", s) == 1;
    if (!strcmp(f, "ipv4")) return re_search("^((25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)\\.){3}(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)$", s) == 1;
    if (!strcmp(f, "hostname")) return strlen(s) <= 253 && re_search("^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$", s) == 1;
    if (!strcmp(f, "uri")) return re_search("^[A-Za-z][A-Za-z0-9+.-]*:[^\\s\"<>\\\\^`{|}]*$", s) == 1;
    return 0;
}

static const cJSON *resolve(const cJSON *root, const char *ref) {
    if (ref[0] != '#') return NULL;
    const cJSON *cur = root;
    const char *p = ref + 1;
    char tok[256];
    while (*p == '/') {
        p++;
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof tok) {
            if (*p == '~' && p[1] == '1') { tok[n++] = '/'; p += 2; }
            else if (*p == '~' && p[1] == '0') { tok[n++] = '~'; p += 2; }
            else tok[n++] = *p++;
        }
        tok[n] = 0;
        cur = cJSON_IsArray(cur) ? cJSON_GetArrayItem(cur, atoi(tok)) : cJSON_GetObjectItemCaseSensitive(cur, tok);
        if (!cur) return NULL;
    }
    return cur;
}

static int type_is(const char *t, const cJSON *v) {
    if (!strcmp(t, "string")) return cJSON_IsString(v);
    if (!strcmp(t, "number")) return cJSON_IsNumber(v);
    if (!strcmp(t, "integer")) return cJSON_IsNumber(v) && floor(v->valuedouble) == v->valuedouble;
    if (!strcmp(t, "boolean")) return cJSON_IsBool(v);
    if (!strcmp(t, "null")) return cJSON_IsNull(v);
    if (!strcmp(t, "object")) return cJSON_IsObject(v);
    if (!strcmp(t, "array")) return cJSON_IsArray(v);
    return 0;
}

int jsv_validate(const cJSON *root, const cJSON *s, const cJSON *v, char *why, size_t cap) {
    if (cJSON_IsTrue(s)) return 1;
    if (cJSON_IsFalse(s)) FAIL("schema false");
    const cJSON *k;
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "$ref"))) {
        const cJSON *t = resolve(root, k->valuestring);
        if (!t) FAIL("bad $ref %s", k->valuestring);
        if (!jsv_validate(root, t, v, why, cap)) return 0;
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "nullable")) && cJSON_IsNull(v)) return 1;
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "type"))) {
        int ok = 0;
        if (cJSON_IsString(k)) ok = type_is(k->valuestring, v);
        else for (const cJSON *t = k->child; t; t = t->next) ok |= type_is(t->valuestring, v);
        if (!ok) FAIL("type mismatch");
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "const")) && !cJSON_Compare(k, v, 1)) FAIL("const mismatch");
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "enum"))) {
        int ok = 0;
        for (const cJSON *e = k->child; e && !ok; e = e->next) ok = cJSON_Compare(e, v, 1);
        if (!ok) FAIL("not in enum");
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "anyOf"))) {
        int ok = 0;
        char w[256];
        for (const cJSON *e = k->child; e && !ok; e = e->next) ok = jsv_validate(root, e, v, w, sizeof w);
        if (!ok) FAIL("anyOf: no branch matches");
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "oneOf"))) {
        int n = 0;
        char w[256];
        for (const cJSON *e = k->child; e; e = e->next) n += jsv_validate(root, e, v, w, sizeof w);
        if (n != 1) FAIL("oneOf: %d branches match", n);
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "allOf")))
        for (const cJSON *e = k->child; e; e = e->next)
            if (!jsv_validate(root, e, v, why, cap)) return 0;
    if (cJSON_IsString(v)) {
        const char *str = v->valuestring;
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "minLength")) && cp_len(str) < (size_t)k->valuedouble) FAIL("minLength");
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "maxLength")) && cp_len(str) > (size_t)k->valuedouble) FAIL("maxLength");
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "pattern")) && re_search(k->valuestring, str) != 1) FAIL("pattern %s", k->valuestring);
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "format")) && !format_ok(k->valuestring, str)) FAIL("format %s: '%s'", k->valuestring, str);
    }
    if (cJSON_IsNumber(v)) {
        double x = v->valuedouble;
        const cJSON *emn = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum");
        const cJSON *emx = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMaximum");
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "minimum")) && (x < k->valuedouble || (cJSON_IsTrue(emn) && x == k->valuedouble))) FAIL("minimum");
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "maximum")) && (x > k->valuedouble || (cJSON_IsTrue(emx) && x == k->valuedouble))) FAIL("maximum");
        if (cJSON_IsNumber(emn) && x <= emn->valuedouble) FAIL("exclusiveMinimum");
        if (cJSON_IsNumber(emx) && x >= emx->valuedouble) FAIL("exclusiveMaximum");
    }
    if (cJSON_IsArray(v)) {
        int n = cJSON_GetArraySize(v);
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "minItems")) && n < k->valueint) FAIL("minItems");
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "maxItems")) && n > k->valueint) FAIL("maxItems");
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
        const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
        if (cJSON_IsArray(items)) { prefix = items; items = NULL; }
        int np = prefix ? cJSON_GetArraySize(prefix) : 0, i = 0;
        for (const cJSON *e = v->child; e; e = e->next, i++) {
            const cJSON *sub = i < np ? cJSON_GetArrayItem(prefix, i) : items;
            if (sub && !jsv_validate(root, sub, e, why, cap)) return 0;
        }
    }
    if (cJSON_IsObject(v)) {
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
        const cJSON *ap = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "required")))
            for (const cJSON *r = k->child; r; r = r->next)
                if (!cJSON_GetObjectItemCaseSensitive(v, r->valuestring)) FAIL("missing required '%s'", r->valuestring);
        for (const cJSON *e = v->child; e; e = e->next) {
            const cJSON *ps = props ? cJSON_GetObjectItemCaseSensitive(props, e->string) : NULL;
            if (ps) { if (!jsv_validate(root, ps, e, why, cap)) return 0; }
            else if (cJSON_IsFalse(ap)) FAIL("additional property '%s'", e->string);
            else if (cJSON_IsObject(ap) && !jsv_validate(root, ap, e, why, cap)) return 0;
        }
    }
    return 1;
}
