/* jsvalidate.h - a small JSON Schema validator (the subset the grammar
 * compiler supports) used by the tests to check generated output
 * independently of the grammar: patterns run through PCRE2, formats are
 * checked by hand (days per month, UUID shape, ...). */
#ifndef KW_JSVALIDATE_H
#define KW_JSVALIDATE_H
#include <cjson/cJSON.h>
#include <stddef.h>
/* 1 when inst is valid against schema (root: the document for $ref);
 * otherwise 0 with the reason in why. */
int jsv_validate(const cJSON *root, const cJSON *schema, const cJSON *inst, char *why, size_t cap);
/* 1 when s[0..n) is valid UTF-8. */
int jsv_utf8_ok(const char *s, size_t n);
#endif
