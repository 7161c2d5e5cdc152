/* test_util.c - kw_err_set, kw_parse_bytes and the accounted allocator. */
#include "testutil.h"
#include <string.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "kvwise/common.h"
#include "kvwise/memory.h"
#include <cjson/cJSON.h>

static void test_parse_bytes(void) {
    uint64_t v = 0;
    kw_err e;
    KW_CHECK(kw_parse_bytes("4GiB", &v, &e) == 0 && v == 4ull << 30);
    KW_CHECK(kw_parse_bytes("4GB", &v, &e) == 0 && v == 4000000000ull);
    KW_CHECK(kw_parse_bytes("512MB", &v, &e) == 0 && v == 512000000ull);
    KW_CHECK(kw_parse_bytes("512M", &v, &e) == 0 && v == 512ull << 20);
    KW_CHECK(kw_parse_bytes("1.5G", &v, &e) == 0 && v == 3ull << 29);
    KW_CHECK(kw_parse_bytes("123", &v, &e) == 0 && v == 123);
    KW_CHECK(kw_parse_bytes("12 KiB", &v, &e) == 0 && v == 12288);
    KW_CHECK(kw_parse_bytes("", &v, &e) != 0);
    KW_CHECK(kw_parse_bytes("-1", &v, &e) != 0);
    KW_CHECK(kw_parse_bytes("4XB", &v, &e) != 0 && strstr(e.msg, "suffix"));
    KW_CHECK(kw_parse_bytes("nan", &v, &e) != 0);
    KW_CHECK(kw_parse_bytes("1e30", &v, &e) != 0);
    char buf[32];
    KW_CHECK(strcmp(kw_format_bytes(3339000000ull, buf, sizeof buf), "3.11 GiB") == 0);
    KW_CHECK(strcmp(kw_format_bytes(100, buf, sizeof buf), "100 B") == 0);
}

static void test_alloc(void) {
    uint64_t kv0 = kw_mem_current(KW_MEM_KV);
    void *small = kw_mem_calloc(KW_MEM_KV, 1000);
    void *big = kw_mem_calloc(KW_MEM_KV, 10u << 20);
    KW_CHECK(small && big);
    KW_CHECK(((uintptr_t)small & 63) == 0 && ((uintptr_t)big & 63) == 0);
    KW_CHECK(((unsigned char *)big)[12345] == 0 && ((unsigned char *)small)[999] == 0);
    KW_CHECK_EQ_INT(kw_mem_current(KW_MEM_KV) - kv0, 1000 + (10u << 20));
    KW_CHECK_EQ_INT(kw_mem_size(big), 10u << 20);
    kw_mem_free(big);
    kw_mem_free(small);
    KW_CHECK_EQ_INT(kw_mem_current(KW_MEM_KV), kv0);
    KW_CHECK(kw_mem_peak(KW_MEM_KV) >= kv0 + 1000 + (10u << 20));
    kw_mem_fail_nth(2);
    void *a = kw_mem_alloc(KW_MEM_OTHER, 10);
    void *b = kw_mem_alloc(KW_MEM_OTHER, 10);
    void *c = kw_mem_alloc(KW_MEM_OTHER, 10);
    KW_CHECK(a != NULL && b == NULL && c != NULL);
    kw_mem_free(a);
    kw_mem_free(c);
    KW_CHECK(kw_mem_alloc(KW_MEM_OTHER, (size_t)1 << 50) == NULL);
}

/* kw_err_set keeps the one-line contract whatever the quoted bytes are */
static void test_err_one_line(void) {
    kw_err e = {{0}};
    KW_CHECK(kw_err_set(&e, "bad name '%s'", "a\nb\tc\r\x01\x7f") == -1);
    KW_CHECK_MSG(strcmp(e.msg, "bad name 'a\\nb\\tc\\r\\x01\\x7f'") == 0, "got '%s'", e.msg);
    KW_CHECK(kw_err_set(NULL, "x %d", 1) == -1);
    /* a long message is cut at a whole escape, never mid-escape or past the buffer */
    char big[600];
    for (size_t i = 0; i < sizeof big - 1; i++) big[i] = (i % 3) ? 'a' : '\n';
    big[sizeof big - 1] = '\0';
    kw_err_set(&e, "%s", big);
    size_t n = strlen(e.msg);
    KW_CHECK(n < sizeof e.msg && n >= sizeof e.msg - 3 && !strchr(e.msg, '\n'));
    KW_CHECK(e.msg[n - 1] != '\\');
    kw_err_set(&e, "UTF-8 stays: %s", "\xC3\xA9\xF0\x9F\x99\x82");
    KW_CHECK(strcmp(e.msg, "UTF-8 stays: \xC3\xA9\xF0\x9F\x99\x82") == 0);
}

/* kw_test_finish's exit code, in a child whose counters are set to passed/failed. */
static int finish_code(int passed, int failed) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) { dup2(devnull, 1); dup2(devnull, 2); }
        kw_test_passed = passed;
        kw_test_failed = failed;
        _exit(kw_test_finish());
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

/* A test program that ran no check fails; one that passed all its checks succeeds. */
static void test_finish_needs_checks(void) {
    KW_CHECK_EQ_INT(finish_code(0, 0), 1);
    KW_CHECK_EQ_INT(finish_code(3, 0), 0);
    KW_CHECK_EQ_INT(finish_code(3, 1), 1);
    KW_CHECK_EQ_INT(finish_code(0, 2), 1);
}

/* A row of figures lands as number members in order, stops at the NULL key; a NULL object is a no-op. */
static void test_json_add_nums(void) {
    cJSON *o = cJSON_CreateObject();
    kw_json_add_nums(o, (kw_json_num[]){{"a", 1}, {"b", 2.5}, {NULL, 0}, {"c", 3}});
    KW_CHECK_EQ_INT(cJSON_GetArraySize(o), 2);
    KW_CHECK(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, "b")) == 2.5);
    KW_CHECK(strcmp(o->child->string, "a") == 0);
    KW_CHECK(cJSON_GetObjectItemCaseSensitive(o, "c") == NULL);
    kw_json_add_nums(NULL, (kw_json_num[]){{"a", 1}, {NULL, 0}});
    cJSON_Delete(o);
}

int main(void) {
    test_finish_needs_checks();
    test_json_add_nums();
    test_err_one_line();
    test_parse_bytes();
    test_alloc();
    return kw_test_finish();
}
