/* test_json_bound.c - kw_json_tree_bound (server/prompt_bound.c) is never
 * below what cJSON allocates to parse a body (tests/lib/json_measure.h), on
 * the shapes that cost most per body byte: empty strings and containers,
 * one-digit numbers, deep nesting, escapes, and a real chat request; and it
 * stays a bound, not a blanket (within 3x of the measured bytes on them). */
#include <string.h>
#include "testutil.h"
#include "server/internal.h"
#include "json_measure.h"

static char *repeat(const char *head, const char *unit, int n, const char *tail) {
    size_t hl = strlen(head), ul = strlen(unit), tl = strlen(tail);
    char *s = malloc(hl + ul * (size_t)n + tl + 1), *p = s;
    memcpy(p, head, hl); p += hl;
    for (int i = 0; i < n; i++) { memcpy(p, unit, ul); p += ul; }
    memcpy(p, tail, tl + 1);
    return s;
}

static void check_body(const char *name, const char *body, bool must_parse) {
    bool parsed;
    size_t len = strlen(body);
    uint64_t used = json_measure_parse(body, len, &parsed);
    uint64_t bound = kw_json_tree_bound(body, len);
    KW_CHECK_MSG(parsed == must_parse, "%s: parsed %d", name, parsed);
    KW_CHECK_MSG(used <= bound, "%s: bound %llu < %llu allocated", name, (unsigned long long)bound,
                 (unsigned long long)used);
    if (parsed) KW_CHECK_MSG(bound <= 3 * used + 64, "%s: bound %llu for %llu allocated", name,
                             (unsigned long long)bound, (unsigned long long)used);
}

int main(void) {
    char *s;
    check_body("chat", "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi \\u00e9\\n\"}],\"max_tokens\":4}", true);
    s = repeat("[", "0,", 20000, "0]");                check_body("digits", s, true); free(s);
    s = repeat("[", "\"\",", 20000, "\"\"]");          check_body("empty strings", s, true); free(s);
    s = repeat("{", "\"\":\"\",", 20000, "\"\":\"\"}"); check_body("empty members", s, true); free(s);
    s = repeat("[", "{},[],", 20000, "{}]");           check_body("empty containers", s, true); free(s);
    s = repeat("", "[", 900, "");                      check_body("deep, unclosed", s, false); free(s);
    s = repeat("[", "\"\\u0041\\n\",", 5000, "1]");    check_body("escapes", s, true); free(s);
    check_body("commas inside strings", "[\",,,,{{{[[[\",\"\\\",\\\\\"]", true);
    return kw_test_finish();
}
