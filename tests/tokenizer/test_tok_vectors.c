/* test_tok_vectors.c - llama.cpp's tokenizer test vectors
 * (shared/conformance/tokenizer/ggml-vocab-NAME.gguf + .inp/.out).
 *
 * Format (conformance README): .inp is split on "\n__ggml_vocab_test__\n";
 * .out has one line of ids per case (whitespace-trimmed, space-separated).
 * Mode: add_special=false, parse_special=false. Every case must match
 * exactly. bert-bge (WordPiece) is not supported and is skipped; any other
 * vocab with vectors is tested. */
#include <ctype.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "kvwise/gguf.h"
#include "kvwise/tokenizer.h"

#define SEP "\n__ggml_vocab_test__\n"
#define MAX_CASES 256

typedef struct { const char *s; size_t n; } span;

static size_t split_inp(char *buf, size_t len, span *cases) {
    size_t n = 0, sl = strlen(SEP), off = 0;
    while (off < len && n < MAX_CASES) {
        char *m = memmem(buf + off, len - off, SEP, sl);
        size_t end = m ? (size_t)(m - buf) : len;
        cases[n++] = (span){buf + off, end - off};
        if (!m) break;
        off = end + sl;
    }
    return n;
}

/* Parses the expected ids of each line; returns the number of lines. */
static size_t split_out(char *buf, size_t len, int32_t **ids, size_t *n_ids) {
    size_t n = 0;
    char *p = buf, *end = buf + len;
    while (p < end && n < MAX_CASES) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *le = nl ? nl : end;
        while (p < le && isspace((unsigned char)*p)) p++;
        while (le > p && isspace((unsigned char)le[-1])) le--;
        ids[n] = malloc(((size_t)(le - p) / 2 + 2) * sizeof(int32_t));
        n_ids[n] = 0;
        for (char *q = p; q < le;) {
            ids[n][n_ids[n]++] = (int32_t)strtol(q, &q, 10);
            while (q < le && *q == ' ') q++;
        }
        n++;
        if (!nl) break;
        p = nl + 1;
    }
    return n;
}

static void print_case(const char *vocab, size_t k, const span *c, const int32_t *got, size_t ng,
                       const int32_t *want, size_t nw) {
    fprintf(stderr, "%s case %zu (%zu bytes) '", vocab, k, c->n);
    for (size_t i = 0; i < c->n; i++) {
        unsigned char ch = (unsigned char)c->s[i];
        if (ch < 0x20) fprintf(stderr, "\\x%02x", ch); else fputc(ch, stderr);
    }
    fprintf(stderr, "'\n  want:");
    for (size_t i = 0; i < nw; i++) fprintf(stderr, " %d", want[i]);
    fprintf(stderr, "\n  got: ");
    for (size_t i = 0; i < ng; i++) fprintf(stderr, " %d", got[i]);
    fputc('\n', stderr);
}

static void test_vocab(const char *dir, const char *name) {
    char path[4400];
    snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf", dir, name);
    kw_err err = {{0}};
    kw_gguf *g = kw_gguf_open(path, &err);
    KW_CHECK_MSG(g != NULL, "%s: %s", path, err.msg);
    if (!g) return;
    kw_tokenizer *t = kw_tokenizer_load(g, &err);
    KW_CHECK_MSG(t != NULL, "%s: %s", name, err.msg);
    size_t inp_len = 0, out_len = 0;
    snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf.inp", dir, name);
    char *inp = kw_test_read_file(path, &inp_len);
    snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf.out", dir, name);
    char *out = kw_test_read_file(path, &out_len);
    KW_CHECK(inp && out);
    if (t && inp && out) {
        static span cases[MAX_CASES];
        static int32_t *want[MAX_CASES];
        static size_t n_want[MAX_CASES];
        size_t nc = split_inp(inp, inp_len, cases);
        size_t no = split_out(out, out_len, want, n_want);
        KW_CHECK_MSG(nc == no && nc > 0, "%s: %zu inputs, %zu outputs", name, nc, no);
        size_t ok = 0;
        for (size_t k = 0; k < nc && k < no; k++) {
            int32_t *ids = NULL;
            size_t n = 0;
            int rc = kw_tokenize(t, cases[k].s, cases[k].n, false, false, &ids, &n, &err);
            bool same = rc == 0 && n == n_want[k] && (n == 0 || memcmp(ids, want[k], n * sizeof *ids) == 0);
            KW_CHECK_MSG(same, "%s case %zu differs", name, k);
            if (!same) print_case(name, k, &cases[k], ids, n, want[k], n_want[k]);
            ok += same;
            free(ids);
        }
        for (size_t k = 0; k < no; k++) free(want[k]);
        printf("%-16s %zu/%zu cases\n", name, ok, nc);
    }
    free(inp);
    free(out);
    kw_tokenizer_free(t);
    kw_gguf_close(g);
}

int main(void) {
    const char *dir = kw_test_path(kw_test_shared_dir(), "conformance/tokenizer");
    char dirbuf[4096];
    snprintf(dirbuf, sizeof dirbuf, "%s", dir);
    DIR *d = opendir(dirbuf);
    KW_CHECK(d != NULL);
    int n_vocabs = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        const char *nm = e->d_name;
        size_t l = strlen(nm);
        const char *pre = "ggml-vocab-", *suf = ".gguf.inp";
        if (l <= strlen(pre) + strlen(suf) || strncmp(nm, pre, strlen(pre)) || strcmp(nm + l - strlen(suf), suf)) continue;
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(l - strlen(pre) - strlen(suf)), nm + strlen(pre));
        if (!strcmp(name, "bert-bge")) { printf("%-16s skipped (WordPiece is not supported)\n", name); continue; }
        test_vocab(dirbuf, name);
        n_vocabs++;
    }
    if (d) closedir(d);
    KW_CHECK_MSG(n_vocabs >= 9, "only %d vocabs with vectors found", n_vocabs);
    return kw_test_finish();
}
