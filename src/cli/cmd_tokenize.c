/* cmd_tokenize.c - `kvwise tokenize`: prints the token ids a model sees for a
 * text (one line, space-separated, or a JSON array), the way a user checks
 * what the model gets. Loads only the GGUF metadata's tokenizer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli.h"
#include "run_common.h"
#include "kvwise/gguf.h"
#include "kvwise/memory.h"
#include "kvwise/tokenizer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvwise tokenize -m MODEL (-p TEXT | -f FILE) [--no-bos] [--special] [--json] [--pieces] [--timing]\n\n"
            "Prints the token ids of TEXT as the model's tokenizer produces them.\n\n"
            "  -m, --model FILE   GGUF model (or vocab-only GGUF)\n"
            "  -p, --prompt TEXT  the text (bytes as given, nothing stripped)\n"
            "  -f, --file FILE    read the text from a file instead\n"
            "      --no-bos       do not add the BOS token even if the vocab adds one\n"
            "      --special      parse special-token text such as <|im_start|> into that token\n"
            "      --json         print a JSON array instead of space-separated ids\n"
            "      --pieces       print one line per token: id, then its text (escaped)\n"
            "      --timing       print load and tokenize times to stderr\n"
            "  -h, --help         this help\n");
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void print_escaped(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c == '\\') fputs("\\\\", stdout);
        else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else putchar(c);
    }
}

static void print_ids(const kw_tokenizer *t, const int32_t *ids, size_t n, bool json, bool pieces) {
    if (pieces) {
        char buf[1024];
        for (size_t i = 0; i < n; i++) {
            size_t len = kw_token_to_piece(t, ids[i], buf, sizeof buf, true);
            printf("%d\t'", ids[i]);
            print_escaped(buf, len < sizeof buf ? len : sizeof buf);
            printf("'\n");
        }
        return;
    }
    if (json) putchar('[');
    for (size_t i = 0; i < n; i++) printf(i ? (json ? ", %d" : " %d") : "%d", ids[i]);
    printf(json ? "]\n" : "\n");
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *file = NULL;
    bool no_bos = false, special = false, json = false, pieces = false, timing = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_next = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has_next) model = argv[++i];
        else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && has_next) prompt = argv[++i];
        else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && has_next) file = argv[++i];
        else if (!strcmp(a, "--no-bos")) no_bos = true;
        else if (!strcmp(a, "--special")) special = true;
        else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--pieces")) pieces = true;
        else if (!strcmp(a, "--timing")) timing = true;
        else {
            fprintf(stderr, "kvwise tokenize: unknown or incomplete option '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!model || (!prompt && !file) || (prompt && file)) {
        fprintf(stderr, "kvwise tokenize: need -m MODEL and one of -p TEXT / -f FILE\n\n");
        usage(stderr);
        return 2;
    }
    size_t len = 0;
    char *owned = NULL;
    if (file) {
        owned = kw_run_read_file(file, &len);
        if (!owned) { fprintf(stderr, "kvwise tokenize: cannot read %s\n", file); return 2; }
    } else {
        len = strlen(prompt);
    }
    const char *text = owned ? owned : prompt;

    kw_err err = {{0}};
    int rc = 0;
    double t0 = now_ms();
    kw_gguf *g = kw_gguf_open(model, &err);
    kw_tokenizer *t = g ? kw_tokenizer_load(g, &err) : NULL;
    double t1 = now_ms();
    int32_t *ids = NULL;
    size_t n = 0;
    if (!t) {
        fprintf(stderr, "kvwise tokenize: %s: %s\n", model, err.msg);
        rc = 2;
    } else if (kw_tokenize(t, text, len, true, special, &ids, &n, &err) != 0) {
        fprintf(stderr, "kvwise tokenize: %s\n", err.msg);
        rc = 1;
    } else {
        if (timing)
            fprintf(stderr, "load %.2f ms, tokenize %.2f ms (%zu bytes -> %zu tokens), tokenizer tables %.1f MiB\n",
                    t1 - t0, now_ms() - t1, len, n, kw_mem_peak(KW_MEM_TOKENIZER) / 1048576.0);
        size_t skip = (no_bos && n > 0 && kw_tokenizer_adds_bos(t) && ids[0] == kw_token_bos(t)) ? 1 : 0;
        print_ids(t, ids + skip, n - skip, json, pieces);
    }
    free(ids);
    kw_tokenizer_free(t);
    kw_gguf_close(g);
    free(owned);
    return rc;
}
