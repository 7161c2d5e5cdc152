/* cmd_perplexity.c - `kvwise perplexity`: perplexity of a model over a text
 * file, the standard check of a quantization's quality.
 *
 * As llama.cpp's perplexity tool does it: the text is tokenized once and cut
 * into chunks of --ctx tokens; each chunk runs in a fresh context (its first
 * token replaced by BOS when the vocab adds one) and only the second half of
 * each chunk is scored, so every scored token sees at least ctx/2 tokens of
 * context. PPL = exp(mean negative log-likelihood). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "run_common.h"
#include "kvwise/progress.h"
#include "kvwise/tokenizer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvwise perplexity -m MODEL -f TEXT [--ctx N] [-t THREADS] [--chunks N]\n\n"
            "Prints the perplexity of the model over the text file: progress (tokens scored,\n"
            "rate, ETA, perplexity so far) on stderr, a bar on a terminal, plain lines at most\n"
            "once per second otherwise; the final figure on stdout (\"perplexity: X +/- E over\n"
            "N tokens\").\n\n"
            "  -f, --file FILE     the text\n"
            "      --chunks N      score at most N chunks (default: all)\n"
            "%s"
            "  --ctx defaults to 512 here; KV cache default: f16.\n"
            "  -h, --help          this help\n",
            kw_run_common_help());
}

/* -log softmax(logits)[target], in double. */
static double nll(const float *logits, int32_t n_vocab, int32_t target) {
    float mx = logits[0];
    for (int32_t i = 1; i < n_vocab; i++) if (logits[i] > mx) mx = logits[i];
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
    return log(sum) - ((double)logits[target] - mx);
}

static int run(const kw_run_opts *o, kw_model *m, long max_chunks) {
    kw_run_prompt pr;
    int read = kw_run_prompt_read(o, m, &pr);
    const int32_t *ids = pr.ids;
    size_t n = pr.n;
    int rc = 2;
    kw_session *s = NULL;
    if (read) goto out;
    int32_t ctx = o->ctx ? o->ctx : 512, n_vocab = kw_model_hparams(m)->n_vocab;
    size_t n_chunks = n / (size_t)ctx;
    if (max_chunks > 0 && n_chunks > (size_t)max_chunks) n_chunks = (size_t)max_chunks;
    if (n_chunks == 0) {
        fprintf(stderr, "kvwise perplexity: the text has %zu tokens, fewer than one chunk of --ctx %d (use a smaller --ctx)\n", n, ctx);
        goto out;
    }
    kw_run_opts so = *o;
    so.ctx = ctx;
    rc = 1;
    if (!(s = kw_run_session(&so, m, ctx))) goto out;
    const kw_tokenizer *tok = kw_model_tokenizer(m);
    bool add_bos = !o->no_bos && kw_tokenizer_adds_bos(tok) && kw_token_bos(tok) >= 0;
    int32_t first = ctx / 2;
    double sum = 0, sum2 = 0;
    size_t count = 0;
    kw_err err = {{0}};
    int32_t *chunk = malloc((size_t)ctx * sizeof *chunk);
    if (!chunk) goto out;
    kw_progress prog;
    kw_progress_begin(&prog, stderr, KW_PROGRESS_AUTO, "kvwise perplexity", (uint64_t)n_chunks * (uint64_t)ctx,
                      KW_PROGRESS_ITEMS, "tokens");
    for (size_t c = 0; c < n_chunks; c++) {
        memcpy(chunk, ids + c * (size_t)ctx, (size_t)ctx * sizeof *chunk);
        if (add_bos) chunk[0] = kw_token_bos(tok);
        kw_session_rewind(s, 0);
        if (kw_session_eval(s, chunk, ctx, true, &err)) {
            kw_progress_end(&prog, false);
            fprintf(stderr, "kvwise perplexity: %s\n", err.msg);
            free(chunk);
            goto out;
        }
        for (int32_t j = first; j < ctx - 1; j++) {
            double v = nll(kw_session_logits(s, j), n_vocab, ids[c * (size_t)ctx + (size_t)j + 1]);
            sum += v;
            sum2 += v * v;
            count++;
        }
        kw_progress_note(&prog, "ppl %.4f", exp(sum / (double)count));
        kw_progress_add(&prog, (uint64_t)ctx);
    }
    kw_progress_end(&prog, true);
    free(chunk);
    double mean = sum / (double)count, var = sum2 / (double)count - mean * mean;
    double ppl = exp(mean), err_ppl = ppl * sqrt((var > 0 ? var : 0) / (double)(count > 1 ? count - 1 : 1));
    printf("perplexity: %.4f +/- %.4f over %zu scored tokens (%zu chunks of %d)\n", ppl, err_ppl, count, n_chunks, ctx);
    rc = 0;
out:
    return kw_run_end(s, &pr, rc);
}

int cmd_perplexity(int argc, char **argv) {
    kw_run_opts o = {.cmd = "perplexity", .kv_type = KW_KV_TYPE_AUTO};
    long max_chunks = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        kw_run_arg_kind k = kw_run_arg(&o, argc, argv, &i, usage);
        if (k == KW_RUN_ARG_TAKEN) continue;
        if (k != KW_RUN_ARG_OWN) return k == KW_RUN_ARG_HELP ? 0 : 2;
        if (!strcmp(a, "--chunks") && i + 1 < argc) {
            if (kw_run_int(&o, a, argv[++i], 1, 1 << 30, &max_chunks)) return 2;
        } else { fprintf(stderr, "kvwise perplexity: unknown or incomplete option '%s' (see --help)\n", a); return 2; }
    }
    if (!o.model) { fprintf(stderr, "kvwise perplexity: -m MODEL is required (see --help)\n"); return 2; }
    if (!o.file) { fprintf(stderr, "kvwise perplexity: -f TEXT is required (see --help)\n"); return 2; }
    if (o.prompt) { fprintf(stderr, "kvwise perplexity: takes a file (-f), not -p\n"); return 2; }
    kw_model *m = kw_run_load(&o, NULL);
    if (!m) return 2;
    int rc = run(&o, m, max_chunks);
    kw_model_free(m);
    return rc;
}
