/* run_common.c - shared setup of the commands that run the model
 * (run_common.h): common options, model loading, prompt reading,
 * tokenizing and session creation, each with a one-line error. */
#include "run_common.h"
#include "kvwise/arch.h"
#include "kvwise/kv.h"
#include "kvwise/tokenizer.h"
#include "kvwise/progress.h"
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double kw_run_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int kw_run_int(const kw_run_opts *o, const char *opt, const char *s, long lo, long hi, long *out) {
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "kvwise %s: %s needs an integer in %ld..%ld (got '%s')\n", o->cmd, opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int kw_run_float(const kw_run_opts *o, const char *opt, const char *s, double lo, double hi, double *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "kvwise %s: %s needs a number in %g..%g (got '%s')\n", o->cmd, opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_kv_type(const kw_run_opts *o, const char *s, uint32_t *out) {
    int t = kw_kv_type_from_name(s);
    if (t < 0) {
        fprintf(stderr, "kvwise %s: --kv-type must be " KW_KV_TYPE_NAMES " (got '%s')\n", o->cmd, s);
        return -1;
    }
    *out = (uint32_t)t;
    return 0;
}

int kw_run_parse_common(kw_run_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    bool has_val = *i + 1 < argc;
    const char *v = has_val ? argv[*i + 1] : NULL;
    long n;
#define NEED_VALUE() do { if (!has_val) { fprintf(stderr, "kvwise %s: %s needs a value\n", o->cmd, a); return -1; } (*i)++; } while (0)
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) { NEED_VALUE(); o->model = v; return 1; }
    if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { NEED_VALUE(); o->prompt = v; return 1; }
    if (!strcmp(a, "-f") || !strcmp(a, "--file")) { NEED_VALUE(); o->file = v; return 1; }
    if (!strcmp(a, "--no-bos")) { o->no_bos = true; return 1; }
    if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
        NEED_VALUE();
        if (kw_run_int(o, a, v, 1, 1024, &n)) return -1;
        o->threads = (int)n;
        return 1;
    }
    if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) {
        NEED_VALUE();
        if (kw_run_int(o, a, v, 8, 1 << 22, &n)) return -1;
        o->ctx = (int32_t)n;
        return 1;
    }
    if (!strcmp(a, "-b") || !strcmp(a, "--batch")) {
        NEED_VALUE();
        if (kw_run_int(o, a, v, 1, 1 << 16, &n)) return -1;
        o->batch = (int32_t)n;
        return 1;
    }
    if (!strcmp(a, "--kv-type")) { NEED_VALUE(); return parse_kv_type(o, v, &o->kv_type) ? -1 : 1; }
#undef NEED_VALUE
    return 0;
}

static const char common_help_rest[] =
    "  -t, --threads N     worker threads (default: physical cores)\n"
    "  -c, --ctx N         context size in tokens (default: min(training context, 4096))\n"
    "  -b, --batch N       tokens per forward pass during prefill (default 512)\n"
    "      --kv-type T     KV cache element type: auto, i16, i8, f16, q8_0 or f32 (default below)\n"
    "      --no-bos        do not add the BOS token even if the vocab adds one\n";

const char *kw_run_common_help(void) {
    static char help[1024];
    snprintf(help, sizeof help, "  -m, --model FILE    GGUF model (%s)\n%s", kw_arch_supported_list(), common_help_rest);
    return help;
}

kw_model *kw_run_load(const kw_run_opts *o, double *ms) {
    if (!o->model) { fprintf(stderr, "kvwise %s: -m MODEL is required (see --help)\n", o->cmd); return NULL; }
    double t0 = kw_run_now_ms();
    kw_err err = {{0}};
    kw_progress prog;
    char label[64];
    snprintf(label, sizeof label, "kvwise %s: loading model", o->cmd);
    kw_progress_begin(&prog, stderr, KW_PROGRESS_AUTO, label, 0, KW_PROGRESS_ITEMS, "layers");
    kw_model_opts mo = {.progress = &prog};
    kw_model *m = kw_model_load(o->model, &mo, &err);
    kw_progress_end(&prog, m != NULL);
    if (!m) fprintf(stderr, "kvwise %s: %s\n", o->cmd, err.msg);
    if (ms) *ms = kw_run_now_ms() - t0;
    return m;
}

char *kw_run_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        if (n == cap) {
            char *nb = realloc(buf, cap * 2 + 1);
            if (!nb) { free(buf); buf = NULL; break; }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    if (buf && ferror(f)) { free(buf); buf = NULL; }
    fclose(f);
    if (buf) buf[n] = 0;
    *len = n;
    return buf;
}

static char *prompt_text(const kw_run_opts *o, size_t *len) {
    if (o->prompt && o->file) { fprintf(stderr, "kvwise %s: give -p or -f, not both\n", o->cmd); return NULL; }
    if (o->file) {
        char *t = kw_run_read_file(o->file, len);
        if (!t) fprintf(stderr, "kvwise %s: cannot read %s: %s\n", o->cmd, o->file, strerror(errno));
        return t;
    }
    if (!o->prompt) { fprintf(stderr, "kvwise %s: a prompt is required (-p TEXT or -f FILE)\n", o->cmd); return NULL; }
    *len = strlen(o->prompt);
    return strdup(o->prompt);
}

static int32_t *tokenize(const kw_run_opts *o, const kw_model *m, const char *text, size_t len, size_t *n) {
    const kw_tokenizer *t = kw_model_tokenizer(m);
    if (!t) {
        fprintf(stderr, "kvwise %s: this model has no usable tokenizer: %s\n", o->cmd, kw_model_tokenizer_error(m));
        return NULL;
    }
    int32_t *ids = NULL;
    kw_err err = {{0}};
    if (kw_tokenize(t, text, len, !o->no_bos, false, &ids, n, &err) != 0) {
        fprintf(stderr, "kvwise %s: tokenize: %s\n", o->cmd, err.msg);
        return NULL;
    }
    return ids;
}

int kw_run_prompt_read(const kw_run_opts *o, const kw_model *m, kw_run_prompt *p) {
    *p = (kw_run_prompt){0};
    if (!(p->text = prompt_text(o, &p->len))) return -1;
    return (p->ids = tokenize(o, m, p->text, p->len, &p->n)) ? 0 : -1;
}

void kw_run_prompt_free(kw_run_prompt *p) {
    free(p->ids);
    free(p->text);
    *p = (kw_run_prompt){0};
}

int kw_run_end(kw_session *s, kw_run_prompt *p, int rc) {
    kw_session_free(s);
    kw_run_prompt_free(p);
    return rc;
}

kw_run_arg_kind kw_run_arg(kw_run_opts *o, int argc, char **argv, int *i, void (*usage)(FILE *)) {
    if (!strcmp(argv[*i], "-h") || !strcmp(argv[*i], "--help")) { usage(stdout); return KW_RUN_ARG_HELP; }
    int rc = kw_run_parse_common(o, argc, argv, i);
    return rc < 0 ? KW_RUN_ARG_BAD : rc > 0 ? KW_RUN_ARG_TAKEN : KW_RUN_ARG_OWN;
}

kw_session *kw_run_session(const kw_run_opts *o, const kw_model *m, int32_t default_ctx) {
    kw_session_opts so = {.n_ctx = o->ctx ? o->ctx : default_ctx, .max_batch = o->batch, .kv_type = o->kv_type,
                          .n_threads = o->threads};
    kw_err err = {{0}};
    kw_session *s = kw_session_create(m, &so, &err);
    if (!s) fprintf(stderr, "kvwise %s: %s\n", o->cmd, err.msg);
    return s;
}
