/* bench_ab.c - two (or more) builds of libkvwise compared inside one process.
 *
 * This host's memory bandwidth flips between ~37 and ~57 GB/s within
 * seconds, so separate runs of two builds cannot resolve a 5% change in
 * decode speed. This tool loads each build's libkvwise.so with dlopen (its
 * own copy of every global: kernels, ledger, thread pool), loads the model
 * in each, and alternates short bursts of the same work between them, so
 * every variant sees the same minutes of the host. It reports each
 * variant's tok/s, the median over rounds of the ratio of its burst to the
 * first variant's burst in the same round, and the same split by the
 * bandwidth probed after each round (below / at or above the median).
 *
 * It also checks that the variants compute the same thing: after the
 * timing it runs one prefill of the same tokens in each and compares the
 * last row of logits bit for bit (a kernel change meant to keep results
 * identical must print "identical"); the exit status is 3 when they differ
 * and --same is given.
 *
 * usage: bench_ab -m MODEL [-t 2] [-n 16] [-s 60] [-d 0] [-p 0] [--same] LIB.so LIB.so [LIB.so ...]
 *   -n N   tokens decoded per burst (decode mode)
 *   -p N   time a prefill of N tokens per burst instead of decode
 *   -d D   prefill D tokens once per variant and decode on top of them
 *   -s S   seconds of alternating bursts
 * A library given twice is loaded twice (a private copy is made), so the
 * same build against itself measures the method's noise (and, here, where
 * each copy's weights landed: see share_variant). LIB.so@VALUE variants
 * of one experimental build share one copy (share_variant). The libraries
 * must share this tree's public API (kw_session_opts, kw_err). A build
 * with KW_SHARED (on by default, off with the sanitizers) has one in
 * build/libkvwise.so; bench/ab.sh builds one for any git revision. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "kvwise/model.h"
#include "kvwise/tensor.h"
#include "bench_util.h"   /* now_sec (wall clock: no --cputime here), cmp_double */

#define AB_MAX 6
#define AB_ROUNDS 4096

typedef struct {
    const char *path;
    void *dl;
    kw_pool *(*pool_create)(int);
    void (*pool_destroy)(kw_pool *);
    double (*bandwidth)(kw_pool *, double);
    kw_model *(*model_load)(const char *, const kw_model_opts *, kw_err *);
    void (*model_free)(kw_model *);
    const kw_tokenizer *(*tokenizer)(const kw_model *);
    int32_t (*tokenizer_n_vocab)(const kw_tokenizer *);
    kw_session *(*session_create)(const kw_model *, const kw_session_opts *, kw_err *);
    void (*session_free)(kw_session *);
    int (*eval)(kw_session *, const int32_t *, int32_t, bool, kw_err *);
    const float *(*logits)(const kw_session *, int32_t);
    void (*rewind)(kw_session *, int32_t);
    kw_pool *pool;
    kw_model *model;
    kw_session *sess;
    int *knob;      /* the library's kw_ab_knob, set to knob_val before each burst (LIB@VALUE) */
    int knob_val;
    int owner;      /* 1: this variant opened the copy and loaded the model (others share them) */
    int copy_of;    /* the variant whose copy and model this one uses (itself when owner) */
    double t[AB_ROUNDS], total;
} variant;

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* A private copy of the file at path (dlopen of one path twice returns one handle). */
static char *private_copy(const char *path) {
    char *tmp = strdup("/tmp/kvwise-ab-XXXXXX");
    int fd = tmp ? mkstemp(tmp) : -1;
    FILE *in = fopen(path, "rb");
    if (fd < 0 || !in) {
        if (in) fclose(in);
        if (fd >= 0) close(fd);
        free(tmp);
        return NULL;
    }
    char buf[1 << 16];
    size_t n;
    int ok = 1;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) ok = write(fd, buf, n) == (ssize_t)n;
    fclose(in);
    close(fd);
    if (!ok) {
        unlink(tmp);
        free(tmp);
        return NULL;
    }
    return tmp;
}

#define AB_SYM(v, field, name)                                                             \
    do {                                                                                   \
        *(void **)&(v)->field = dlsym((v)->dl, name);                                      \
        if (!(v)->field) { fprintf(stderr, "bench_ab: %s: no symbol %s\n", (v)->path, name); return -1; } \
    } while (0)

/* LIB.so@VALUE: the variant is LIB's build with its global `int
 * kw_ab_knob` set to VALUE before each of its bursts. Variants that name
 * the same LIB with a knob share one loaded copy and one model (each has
 * its own session, created with its knob set), so they read the same
 * pages: on this host two copies of the same build differ by up to 26% in
 * decode speed from where their weights landed (four
 * copies of one build, 60 s: 1.00x 1.00x 1.01x 1.06x; six, 150 s: the
 * last three 1.26x the first). Only an experimental build (one that
 * reads kw_ab_knob in the code under test) defines the symbol; knob
 * variants let one such build be compared against itself. */
static int share_variant(variant *v, const variant *all, int nv, const char *arg) {
    const char *at = strrchr(arg, '@');
    if (!at) return 0;
    for (int i = 0; i < nv; i++) {
        const char *o = strrchr(all[i].path, '@');
        if (o && o - all[i].path == at - arg && !strncmp(all[i].path, arg, (size_t)(at - arg))) {
            *v = all[i];
            v->path = arg;
            v->knob_val = atoi(at + 1);
            v->owner = 0;
            v->copy_of = i;
            v->total = 0;
            return 1;
        }
    }
    return 0;
}

static int open_variant(variant *v, const char *arg) {
    char path[4096];
    const char *at = strrchr(arg, '@');
    snprintf(path, sizeof path, "%.*s", at ? (int)(at - arg) : (int)strlen(arg), arg);
    char *copy = private_copy(path);
    if (!copy) { fprintf(stderr, "bench_ab: cannot read %s\n", path); return -1; }
    v->path = arg;
    v->owner = 1;
    v->dl = dlopen(copy, RTLD_NOW | RTLD_LOCAL);
    unlink(copy);   /* the mapping stays */
    free(copy);
    if (!v->dl) { fprintf(stderr, "bench_ab: %s: %s\n", path, dlerror()); return -1; }
    AB_SYM(v, pool_create, "kw_pool_create");
    AB_SYM(v, pool_destroy, "kw_pool_destroy");
    AB_SYM(v, bandwidth, "kw_measure_read_bandwidth");
    AB_SYM(v, model_load, "kw_model_load");
    AB_SYM(v, model_free, "kw_model_free");
    AB_SYM(v, tokenizer, "kw_model_tokenizer");
    AB_SYM(v, tokenizer_n_vocab, "kw_tokenizer_n_vocab");
    AB_SYM(v, session_create, "kw_session_create");
    AB_SYM(v, session_free, "kw_session_free");
    AB_SYM(v, eval, "kw_session_eval");
    AB_SYM(v, logits, "kw_session_logits");
    AB_SYM(v, rewind, "kw_session_rewind");
    if (at) {
        v->knob = dlsym(v->dl, "kw_ab_knob");
        if (!v->knob) { fprintf(stderr, "bench_ab: %s: no symbol kw_ab_knob (not an experimental build)\n", path); return -1; }
        v->knob_val = atoi(at + 1);
    }
    return 0;
}

/* The vocabulary size through functions only (the model's tokenizer): the
 * libraries compared may be builds whose kw_hparams layouts differ. */
static int32_t ab_vocab(const variant *v) {
    const kw_tokenizer *t = v->tokenizer(v->model);
    return t ? v->tokenizer_n_vocab(t) : 0;
}

/* Prompt token i (fixed, so every variant and run sees the same tokens). */
static int32_t ab_token(int32_t i, int32_t vocab) { return (int32_t)(((int64_t)i * 7919 + 13) % vocab); }

/* The variant's own session on its (maybe shared) model, created with its
 * knob set (so a knob can also choose what a session allocates), with
 * depth tokens prefilled. */
static int setup_session(variant *v, int32_t n_ctx, int32_t depth) {
    kw_err err = {{0}};
    if (v->knob) *v->knob = v->knob_val;
    kw_session_opts so = {.n_ctx = n_ctx, .max_batch = 512, .pool = v->pool, .kv_type = KW_KV_TYPE_AUTO};
    v->sess = v->session_create(v->model, &so, &err);
    if (!v->sess) { fprintf(stderr, "bench_ab: %s: %s\n", v->path, err.msg); return -1; }
    int32_t vocab = ab_vocab(v);
    for (int32_t i = 0; i < depth; i += 512) {
        int32_t tok[512], n = depth - i < 512 ? depth - i : 512;
        for (int32_t k = 0; k < n; k++) tok[k] = ab_token(i + k, vocab);
        if (v->eval(v->sess, tok, n, false, &err) != 0) { fprintf(stderr, "bench_ab: %s\n", err.msg); return -1; }
    }
    return 0;
}

static int setup_variant(variant *v, const char *model, int threads, int32_t n_ctx, int32_t depth) {
    kw_err err = {{0}};
    v->pool = v->pool_create(threads);
    v->model = v->pool ? v->model_load(model, NULL, &err) : NULL;
    if (!v->model) { fprintf(stderr, "bench_ab: %s: %s\n", v->path, err.msg[0] ? err.msg : "out of memory"); return -1; }
    if (ab_vocab(v) <= 0) { fprintf(stderr, "bench_ab: %s: the model has no tokenizer (its vocabulary size)\n", model); return -1; }
    return setup_session(v, n_ctx, depth);
}

/* One burst: decode n tokens on top of depth, or prefill p tokens from 0. */
static int burst(variant *v, int32_t depth, int n, int p, double *secs) {
    kw_err err = {{0}};
    int32_t vocab = ab_vocab(v);
    if (v->knob) *v->knob = v->knob_val;
    v->rewind(v->sess, p ? 0 : depth);
    double t0 = now_sec();
    if (p) {
        for (int32_t i = 0; i < p; i += 512) {
            int32_t tok[512], c = p - i < 512 ? p - i : 512;
            for (int32_t k = 0; k < c; k++) tok[k] = ab_token(i + k, vocab);
            if (v->eval(v->sess, tok, c, false, &err) != 0) return -1;
        }
    } else {
        for (int i = 0; i < n; i++) {
            int32_t tok = ab_token(depth + i, vocab);
            if (v->eval(v->sess, &tok, 1, false, &err) != 0) return -1;
        }
    }
    *secs = now_sec() - t0;
    return 0;
}

static void usage(const char *argv0) {
    fprintf(stderr, "usage: %s -m MODEL [-t THREADS] [-n TOKENS] [-p TOKENS] [-d DEPTH] [-s SECONDS] [--same] "
                    "LIB.so[@KNOB] LIB.so[@KNOB] [...]\n", argv0);
}

int main(int argc, char **argv) {
    const char *model = NULL;
    int threads = 2, n = 16, p = 0, same = 0, nv = 0;
    int32_t depth = 0;
    double secs = 60;
    const char *libs[AB_MAX];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-p") && i + 1 < argc) p = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-d") && i + 1 < argc) depth = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-s") && i + 1 < argc) secs = atof(argv[++i]);
        else if (!strcmp(argv[i], "--same")) same = 1;
        else if (argv[i][0] != '-' && nv < AB_MAX) libs[nv++] = argv[i];
        else { usage(argv[0]); return 2; }
    }
    if (!model || nv < 2 || threads < 1 || n < 1 || p < 0 || depth < 0 || secs <= 0) { usage(argv[0]); return 2; }
    static variant V[AB_MAX];
    int32_t n_ctx = (p ? p : depth + n) + 16;
    for (int v = 0; v < nv; v++) {
        V[v].copy_of = v;
        if (share_variant(&V[v], V, v, libs[v])) {
            if (setup_session(&V[v], n_ctx, p ? 0 : depth) != 0) return 1;
            continue;
        }
        if (open_variant(&V[v], libs[v]) != 0 || setup_variant(&V[v], model, threads, n_ctx, p ? 0 : depth) != 0) return 1;
    }
    printf("%d variants, %s, %d threads, %s %d tokens%s, %.1f s of alternating bursts\n", nv, model, threads,
           p ? "prefill" : "decode", p ? p : n, p ? "" : " per burst", secs);
    for (int v = 0; v < nv; v++)
        if (!V[v].owner) printf("[%d] shares the library copy and the model of [%d]\n", v, V[v].copy_of);
    static double bw[AB_ROUNDS];
    int rounds = 0;
    double start = now_sec();
    while (rounds < AB_ROUNDS && (now_sec() - start < secs || rounds < 3)) {
        for (int k = 0; k < nv; k++) {   /* a different variant goes first each round */
            variant *v = &V[(k + rounds) % nv];
            if (burst(v, depth, n, p, &v->t[rounds]) != 0) { fprintf(stderr, "bench_ab: %s: eval failed\n", v->path); return 1; }
            v->total += v->t[rounds];
        }
        bw[rounds] = V[0].bandwidth(V[0].pool, 0.25) / 1e9;
        rounds++;
    }
    double bws[AB_ROUNDS], r[AB_ROUNDS];
    memcpy(bws, bw, sizeof(double) * (size_t)rounds);
    double bw_mid = median(bws, rounds);
    int tok = p ? p : n;
    printf("%d rounds, probed bandwidth median %.1f GB/s (%.1f-%.1f)\n", rounds, bw_mid, bws[0], bws[rounds - 1]);
    for (int v = 0; v < nv; v++) {
        for (int i = 0; i < rounds; i++) r[i] = V[0].t[i] / V[v].t[i];
        double all = median(r, rounds);
        double lo_r[AB_ROUNDS], hi_r[AB_ROUNDS];
        int nlo = 0, nhi = 0;
        for (int i = 0; i < rounds; i++) {
            if (bw[i] < bw_mid) lo_r[nlo++] = V[0].t[i] / V[v].t[i];
            else hi_r[nhi++] = V[0].t[i] / V[v].t[i];
        }
        printf("[%d] %-40s %7.2f tok/s  vs [0]: median %.3fx", v, V[v].path, tok * rounds / V[v].total, all);
        if (nlo) printf("  (slow rounds %.3fx", median(lo_r, nlo));
        if (nhi) printf("%s fast rounds %.3fx)", nlo ? "," : " (", median(hi_r, nhi));
        else if (nlo) printf(")");
        printf("\n");
    }
    /* the same prefill in each variant: the last row of logits, bit for bit */
    int32_t vocab = ab_vocab(&V[0]), check = n_ctx - 16 < 64 ? n_ctx - 16 : 64;
    if (check < 1) check = 1;
    int32_t *tk = malloc(sizeof(int32_t) * (size_t)check);
    float *ref = malloc(sizeof(float) * (size_t)vocab);
    int differ = 0;
    if (!tk || !ref) { free(tk); free(ref); return 1; }
    for (int32_t i = 0; i < check; i++) tk[i] = ab_token(i, vocab);
    for (int v = 0; v < nv; v++) {
        kw_err err = {{0}};
        if (V[v].knob) *V[v].knob = V[v].knob_val;
        V[v].rewind(V[v].sess, 0);
        const float *lg = V[v].eval(V[v].sess, tk, check, false, &err) == 0 ? V[v].logits(V[v].sess, -1) : NULL;
        if (!lg) { fprintf(stderr, "bench_ab: %s: %s\n", V[v].path, err.msg); free(tk); free(ref); return 1; }
        if (v == 0) memcpy(ref, lg, sizeof(float) * (size_t)vocab);
        else if (memcmp(ref, lg, sizeof(float) * (size_t)vocab) != 0) differ = 1;
    }
    printf("logits of a %d-token prefill: %s\n", check, differ ? "DIFFER between variants" : "identical in every variant");
    free(tk);
    free(ref);
    for (int v = 0; v < nv; v++) V[v].session_free(V[v].sess);   /* every variant's own, before the models */
    for (int v = 0; v < nv; v++) {
        if (!V[v].owner) continue;
        V[v].model_free(V[v].model);
        V[v].pool_destroy(V[v].pool);
    }
    return same && differ ? 3 : 0;
}
