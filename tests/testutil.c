/* testutil.c - see testutil.h. */
#include "testutil.h"
#include "kvwise/tensor.h"
#include "kvwise/memory.h"
#include <ftw.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int kw_test_passed, kw_test_failed;

const char *kw_test_shared_dir(void) {
    static char buf[4096];
    const char *d = getenv("KW_SHARED_DIR");
    if (!d || !*d) d = "../shared";
    snprintf(buf, sizeof buf, "%s", d);
    struct stat st;
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/conformance", buf);
    if (stat(probe, &st) != 0 || !S_ISDIR(st.st_mode)) {
        printf("SKIPPED: shared conformance data not found at %s\n", probe);
        exit(77);
    }
    return buf;
}

const char *kw_test_path(const char *a, const char *b) {
    static char bufs[8][4096];
    static int i;
    char *p = bufs[i++ & 7];
    snprintf(p, 4096, "%s/%s", a, b);
    return p;
}

char *kw_test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) != 0) { fclose(f); return NULL; }
    long n = ftell(f);
    if (n < 0) { fclose(f); return NULL; }
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    if (!buf) { fclose(f); return NULL; }
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    if (got != (size_t)n) { free(buf); return NULL; }
    buf[n] = 0;
    if (len) *len = (size_t)n;
    return buf;
}

static char tmpdir_buf[256];
static pid_t tmpdir_owner;   /* a forked child's exit must not remove it */

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st; (void)flag; (void)ftw;
    return remove(path) == 0 ? 0 : -1;
}

/* At exit: the directory goes unless a check failed or KW_TEST_KEEP_TMP is
 * set (then it stays, and its path is printed, for a look at what the test
 * wrote). A crash skips this and leaves it too. */
static void remove_tmpdir(void) {
    if (getpid() != tmpdir_owner) return;
    const char *keep = getenv("KW_TEST_KEEP_TMP");
    if (kw_test_failed || (keep && *keep && strcmp(keep, "0") != 0)) {
        printf("kept %s\n", tmpdir_buf);
        return;
    }
    if (nftw(tmpdir_buf, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0) perror(tmpdir_buf);
}

const char *kw_test_tmpdir(void) {
    if (tmpdir_buf[0]) return tmpdir_buf;
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    snprintf(tmpdir_buf, sizeof tmpdir_buf, "%s/kwtest.XXXXXX", base);
    if (!mkdtemp(tmpdir_buf)) { perror("mkdtemp"); exit(1); }
    tmpdir_owner = getpid();
    atexit(remove_tmpdir);
    return tmpdir_buf;
}

int kw_test_finish(void) {
    printf("%d passed, %d failed\n", kw_test_passed, kw_test_failed);
    if (kw_test_passed + kw_test_failed == 0) {
        /* a program that reached its end without checking anything proves nothing */
        fprintf(stderr, "no checks ran: a test must check something (or exit 77 to say it skipped)\n");
        return 1;
    }
    return kw_test_failed ? 1 : 0;
}

void kw_test_need_avx512_vnni(void) {
    const kw_cpu_info *ci = kw_cpu_info_get();
    if (!ci || !ci->avx512f || !ci->avx512bw || !ci->avx512vl || !ci->avx512vnni || kw_kernel_force("avx512") != 0) {
        printf("SKIPPED: no AVX-512 VNNI\n");
        exit(77);
    }
}

float kw_test_frand(uint32_t *seed) {
    *seed = *seed * 1664525u + 1013904223u;
    return (float)((*seed >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

int kw_test_random_matrix(kw_matrix *W, uint32_t type, int64_t rows, int64_t cols, uint32_t *seed) {
    memset(W, 0, sizeof *W);
    W->type = type;
    W->rows = rows;
    W->cols = cols;
    W->row_bytes = kw_row_bytes(type, cols);
    uint8_t *d = kw_mem_alloc(KW_MEM_OTHER, W->row_bytes * (size_t)rows);
    float *tmp = malloc(sizeof(float) * (size_t)cols);
    if (!d || !tmp) {
        free(tmp);
        kw_mem_free(d);
        return -1;
    }
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t j = 0; j < cols; j++) tmp[j] = kw_test_frand(seed);
        kw_quantize_row(type, tmp, d + (size_t)r * W->row_bytes, cols);
    }
    free(tmp);
    W->data = d;
    return 0;
}
