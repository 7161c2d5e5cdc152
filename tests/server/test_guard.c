/* test_guard.c - the request gate of the server (src/server/guard.h): which
 * Host headers are served without an API key (DNS rebinding), which Origins
 * may POST, which Content-Types are JSON; and UTF-8 well-formedness
 * (common.h) that the JSON bodies and error messages rely on. */
#include <string.h>
#include "testutil.h"
#include "kvwise/common.h"
#include "server/guard.h"

static void test_host(void) {
    const char *ok[] = {NULL, "127.0.0.1", "127.0.0.1:8080", "[::1]:8080", "[::1]", "10.2.3.4", "LOCALHOST:1",
                        "localhost.", "app.localhost", "a.b.localhost:9", "192.168.1.10:80", "[fe80::1]:8"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        KW_CHECK_MSG(kw_guard_host_ok(ok[i], "127.0.0.1", NULL), "%s", ok[i] ? ok[i] : "(none)");
    const char *bad[] = {"attacker.example", "attacker.example:8080", "localhost.attacker.example", "127.0.0.1.nip.io",
                         "evil-localhost", "[::1].evil", "x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        KW_CHECK_MSG(!kw_guard_host_ok(bad[i], "127.0.0.1", NULL), "%s", bad[i]);
    KW_CHECK(kw_guard_host_ok("myhost:8080", "myhost", NULL));                  /* --host by name */
    KW_CHECK(kw_guard_host_ok("kv.lan", "0.0.0.0", "kv.lan, other"));
    KW_CHECK(kw_guard_host_ok("other:1", "0.0.0.0", "kv.lan, other"));
    KW_CHECK(!kw_guard_host_ok("kv.lan.evil", "0.0.0.0", "kv.lan"));
    KW_CHECK(kw_guard_host_ok("a.corp.example", "0.0.0.0", ".corp.example"));
    KW_CHECK(kw_guard_host_ok("corp.example", "0.0.0.0", ".corp.example"));
    KW_CHECK(!kw_guard_host_ok("evilcorp.example", "0.0.0.0", ".corp.example"));
    KW_CHECK(kw_guard_host_ok("anything", "0.0.0.0", "*"));
}

static void test_origin(void) {
    KW_CHECK(kw_guard_origin_ok(NULL, "127.0.0.1:8080", NULL));
    KW_CHECK(kw_guard_origin_ok("http://127.0.0.1:8080", "127.0.0.1:8080", NULL));   /* its own page */
    KW_CHECK(!kw_guard_origin_ok("http://127.0.0.1:9999", "127.0.0.1:8080", NULL));
    KW_CHECK(!kw_guard_origin_ok("http://evil.example", "127.0.0.1:8080", NULL));
    KW_CHECK(!kw_guard_origin_ok("null", "127.0.0.1:8080", NULL));
    KW_CHECK(kw_guard_origin_ok("http://good.example", "127.0.0.1:8080", "http://a, http://good.example"));
    KW_CHECK(!kw_guard_origin_ok("http://good.example.evil", "127.0.0.1:8080", "http://good.example"));
    KW_CHECK(kw_guard_origin_ok("http://x", "y", "*"));
    KW_CHECK(!kw_guard_origin_ok("http://127.0.0.1:8080", NULL, NULL));
}

static void test_json_type(void) {
    const char *ok[] = {"application/json", "application/json; charset=utf-8", "Application/JSON", " application/json ;x=1",
                        "application/vnd.api+json", "application/merge-patch+json"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) KW_CHECK_MSG(kw_guard_is_json(ok[i]), "%s", ok[i]);
    const char *bad[] = {NULL, "", "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                         "multipart/form-data; boundary=x", "application/jsonx", "text/json", "application/+jsonp"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) KW_CHECK_MSG(!kw_guard_is_json(bad[i]), "%s", bad[i] ? bad[i] : "(none)");
}

static void test_utf8(void) {
    const char good[] = "plain ascii, \xc3\xa9t\xc3\xa9, \xe2\x82\xac, \xf0\x9f\x98\x80, \xf4\x8f\xbf\xbf";
    KW_CHECK_EQ_INT(kw_utf8_valid_prefix(good, sizeof good - 1), sizeof good - 1);
    const struct { const char *s; size_t at; } bad[] = {
        {"ab\xff", 2}, {"\xc0\xaf", 0}, {"\xe0\x80\xaf", 0}, {"\xed\xa0\x80", 0}, {"\xf4\x90\x80\x80", 0},
        {"\xf5\x80\x80\x80", 0}, {"x\xc3", 1}, {"12345678\x80", 8}, {"\xe2\x82", 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        KW_CHECK_MSG(kw_utf8_valid_prefix(bad[i].s, strlen(bad[i].s)) == bad[i].at, "case %zu", i);
    char m[] = "role 'us\xff" "er' \xc3\xa9 \xe2\x82";
    kw_utf8_sanitize(m);
    KW_CHECK_MSG(!strcmp(m, "role 'us?er' \xc3\xa9 ??"), "%s", m);
}

int main(void) {
    test_host();
    test_origin();
    test_json_type();
    test_utf8();
    return kw_test_finish();
}
