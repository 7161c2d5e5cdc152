/* test_conf.c - the configuration-file parser (conf.h): keys with and
 * without '=', comments, quoted values and their escapes, switches alone,
 * and every error naming file and line (duplicate, bad key, open quote,
 * text after a quote, NUL, long line). */
#include <string.h>
#include "kvwise/conf.h"
#include "testutil.h"

static const char *val(const kw_conf *c, const char *k) {
    const kw_conf_entry *e = kw_conf_get(c, k);
    return e ? (e->value ? e->value : "(none)") : "(absent)";
}

static void test_good(void) {
    const char *t = "# kvwise.conf\n"
                    "memory-limit = 20GiB\n"
                    "  prompt-cache-bytes 4GiB   # trailing comment\n"
                    "\n"
                    "api-key = \"a \\\"key\\\" # \\\\x\"  # comment\n"
                    "--max-queue=8\n"
                    "mlock\r\n"
                    "host=127.0.0.1#no-blank-so-kept\n";
    kw_conf c;
    kw_err e = {{0}};
    KW_CHECK_MSG(kw_conf_parse(t, strlen(t), "k.conf", &c, &e) == 0, "%s", e.msg);
    KW_CHECK_EQ_INT(c.n, 6);
    KW_CHECK(!strcmp(val(&c, "memory-limit"), "20GiB"));
    KW_CHECK(!strcmp(val(&c, "prompt-cache-bytes"), "4GiB"));
    KW_CHECK(!strcmp(val(&c, "api-key"), "a \"key\" # \\x"));
    KW_CHECK(!strcmp(val(&c, "max-queue"), "8"));
    KW_CHECK(!strcmp(val(&c, "mlock"), "(none)"));
    KW_CHECK(!strcmp(val(&c, "host"), "127.0.0.1#no-blank-so-kept"));
    KW_CHECK(!strcmp(val(&c, "ctx-size"), "(absent)"));
    KW_CHECK_EQ_INT(kw_conf_get(&c, "max-queue")->line, 6);
    kw_conf_free(&c);
    KW_CHECK(kw_conf_parse("", 0, "empty", &c, &e) == 0 && c.n == 0);
}

static void bad(const char *text, size_t len, const char *want) {
    kw_conf c;
    kw_err e = {{0}};
    int rc = kw_conf_parse(text, len, "bad.conf", &c, &e);
    KW_CHECK_MSG(rc == -1 && strstr(e.msg, want) && !strchr(e.msg, '\n') && c.n == 0, "'%s' -> rc %d '%s'", want, rc, e.msg);
}

static void test_bad(void) {
    bad("a = 1\nb = 2\na = 3\n", 18, "bad.conf:3: 'a' is set twice (first on line 1)");
    bad("Memory-Limit = 1\n", 17, "bad.conf:1: expected a setting name");
    bad("x.y = 1\n", 8, "bad.conf:1: expected a setting name");
    bad("-x 1\n", 5, "bad.conf:1: expected a setting name");
    bad("ok 1\nk = \"open\n", 15, "bad.conf:2: 'k': the quoted value has no closing");
    bad("k = \"v\" extra\n", 14, "bad.conf:1: 'k': text after the closing quote");
    bad("a 1\nb\0c\n", 8, "bad.conf:2: a NUL byte");
    static char longl[KW_CONF_MAX_LINE + 16];
    memset(longl, 'a', sizeof longl - 1);
    bad(longl, sizeof longl - 1, "bad.conf:1: line longer than");
    kw_conf c;
    kw_err e = {{0}};
    KW_CHECK(kw_conf_load("/nonexistent/kvwise.conf", &c, &e) == -1 && strstr(e.msg, "/nonexistent/kvwise.conf: "));
}

int main(void) {
    test_good();
    test_bad();
    return kw_test_finish();
}
