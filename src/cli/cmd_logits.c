/* cmd_logits.c - `kvwise logits`: the raw logits of a prompt, as float32
 * little-endian rows of n_vocab (the last position, or every position with
 * --all). The hook for external conformance checks and for comparing
 * quantizations. --tokens 1,2,3 feeds ids directly (no tokenizer). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "run_common.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvwise logits -m MODEL (-p PROMPT | -f FILE | --tokens ID,ID,...) [--all] -o FILE\n\n"
            "Runs the prompt as one sequence and writes its logits as raw float32\n"
            "little-endian values: one row of n_vocab per position, only the last\n"
            "position unless --all.\n\n"
            "  -p, --prompt TEXT   the prompt (tokenized with the model's tokenizer, BOS as the vocab says)\n"
            "  -f, --file FILE     read the prompt from a file\n"
            "      --tokens LIST   comma-separated token ids, fed as they are (no BOS added)\n"
            "      --all           write every position's row, not only the last\n"
            "  -o, --output FILE   where to write the rows ('-' = stdout)\n"
            "%s"
            "  KV cache default: f32 (as the conformance oracle).\n"
            "  -h, --help          this help\n",
            kw_run_common_help());
}

/* Parses "1,2,3" into ids checked against n_vocab later. */
static int32_t *parse_tokens(const char *s, size_t *n) {
    size_t cap = 16;
    int32_t *ids = malloc(cap * sizeof *ids);
    *n = 0;
    const char *p = s;
    while (ids && *p) {
        char *end = NULL;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "kvwise logits: --tokens expects comma-separated non-negative ids (bad at '%s')\n", p);
            free(ids);
            return NULL;
        }
        if (*n == cap) {
            int32_t *nb = realloc(ids, (cap *= 2) * sizeof *ids);
            if (!nb) { free(ids); return NULL; }
            ids = nb;
        }
        ids[(*n)++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (ids && *n == 0) { fprintf(stderr, "kvwise logits: --tokens is empty\n"); free(ids); return NULL; }
    return ids;
}

static int write_rows(const char *path, const kw_session *s, int32_t first, int32_t rows, int32_t n_vocab) {
    FILE *f = strcmp(path, "-") ? fopen(path, "wb") : stdout;
    if (!f) { fprintf(stderr, "kvwise logits: cannot write %s: %s\n", path, strerror(errno)); return -1; }
    int ok = 1;
    for (int32_t r = 0; r < rows && ok; r++)
        ok = fwrite(kw_session_logits(s, first + r), sizeof(float), (size_t)n_vocab, f) == (size_t)n_vocab;
    if (f != stdout) ok &= fclose(f) == 0;
    else ok &= fflush(f) == 0;
    if (!ok) fprintf(stderr, "kvwise logits: write to %s failed\n", path);
    return ok ? 0 : -1;
}

static int run(const kw_run_opts *o, kw_model *m, const char *tokens_arg, bool all, const char *out) {
    int rc = 1;
    kw_run_prompt pr = {0};
    kw_session *s = NULL;
    kw_err err = {{0}};
    int32_t n_vocab = kw_model_hparams(m)->n_vocab;
    if (tokens_arg ? !(pr.ids = parse_tokens(tokens_arg, &pr.n)) : kw_run_prompt_read(o, m, &pr) != 0) { rc = 2; goto out; }
    const int32_t *ids = pr.ids;
    size_t n = pr.n;
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= n_vocab) { fprintf(stderr, "kvwise logits: token %d is outside the vocabulary (0..%d)\n", ids[i], n_vocab - 1); rc = 2; goto out; }
    if (n == 0) { fprintf(stderr, "kvwise logits: the prompt has no tokens\n"); rc = 2; goto out; }
    if (!(s = kw_run_session(o, m, (int32_t)n))) goto out;
    if (kw_session_eval(s, ids, (int32_t)n, all, &err)) { fprintf(stderr, "kvwise logits: %s\n", err.msg); goto out; }
    int32_t rows = kw_session_n_logits(s);
    if (write_rows(out, s, 0, rows, n_vocab)) goto out;
    fprintf(stderr, "kvwise logits: %zu tokens, wrote %d row(s) x %d floats to %s\n", n, rows, n_vocab, out);
    rc = 0;
out:
    return kw_run_end(s, &pr, rc);
}

int cmd_logits(int argc, char **argv) {
    kw_run_opts o = {.cmd = "logits", .kv_type = KW_TYPE_F32};
    const char *tokens = NULL, *out = NULL;
    bool all = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        kw_run_arg_kind k = kw_run_arg(&o, argc, argv, &i, usage);
        if (k == KW_RUN_ARG_TAKEN) continue;
        if (k != KW_RUN_ARG_OWN) return k == KW_RUN_ARG_HELP ? 0 : 2;
        if (!strcmp(a, "--all")) all = true;
        else if ((!strcmp(a, "--tokens") || !strcmp(a, "-o") || !strcmp(a, "--output")) && i + 1 < argc) {
            if (!strcmp(a, "--tokens")) tokens = argv[++i];
            else out = argv[++i];
        } else { fprintf(stderr, "kvwise logits: unknown or incomplete option '%s' (see --help)\n", a); return 2; }
    }
    if (!o.model) { fprintf(stderr, "kvwise logits: -m MODEL is required (see --help)\n"); return 2; }
    if (!out) { fprintf(stderr, "kvwise logits: -o FILE is required (see --help)\n"); return 2; }
    if (!tokens == !(o.prompt || o.file) || (o.prompt && o.file)) {
        fprintf(stderr, "kvwise logits: give exactly one of -p TEXT, -f FILE or --tokens LIST\n");
        return 2;
    }
    kw_model *m = kw_run_load(&o, NULL);
    if (!m) return 2;
    int rc = run(&o, m, tokens, all, out);
    kw_model_free(m);
    return rc;
}
