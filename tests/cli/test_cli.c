/* test_cli.c - the model-running commands of the kvwise binary ($KW_BIN):
 * `logits` (--tokens and -p paths, --all, against the oracle's last-position
 * file), `generate` (greedy output on stdout is exactly the oracle's
 * continuation text, nothing else), `perplexity` (a finite figure), and
 * their usage errors (exit code 2 with a message). */
#include "testutil.h"
#include <cJSON.h>
#include <string.h>
#include <sys/wait.h>

/* stories260K is F32: 1e-3 absolute (conformance README, "Suggested test tolerances"). */
static const double TOL_F32 = 1e-3;

static const char *g_bin, *g_conf;
static char g_model[2048];

/* Runs a shell command; captures up to cap-1 bytes of stdout; returns the exit code. */
static int run(const char *cmd, char *out, size_t cap) {
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = 0;
    if (out && cap) {
        size_t r;
        while (n + 1 < cap && (r = fread(out + n, 1, cap - 1 - n, p)) > 0) n += r;
        out[n] = 0;
    } else {
        char tmp[4096];
        while (fread(tmp, 1, sizeof tmp, p) > 0) {}
    }
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static float *read_f32(const char *path, size_t *n) {
    size_t len = 0;
    float *f = (float *)kw_test_read_file(path, &len);
    *n = f ? len / 4 : 0;
    return f;
}

static double max_abs(const float *a, const float *b, size_t n) {
    double mx = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= mx)) mx = d;
    }
    return mx;
}

static cJSON *oracle_record(const char *file, const char *prompt_id) {
    char *text = kw_test_read_file(kw_test_path(g_conf, file), NULL);
    cJSON *found = NULL;
    for (char *line = text; line && *line && !found;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        cJSON *r = cJSON_Parse(line);
        if (r && !strcmp(cJSON_GetObjectItem(r, "prompt_id")->valuestring, prompt_id)) found = r;
        else cJSON_Delete(r);
        line = nl ? nl + 1 : NULL;
    }
    free(text);
    return found;
}

static void test_logits(void) {
    const char *dir = kw_test_tmpdir();
    char cmd[4096], a[1200], b[1200], all[1200];
    snprintf(a, sizeof a, "%s/tok.f32", dir);
    snprintf(b, sizeof b, "%s/text.f32", dir);
    snprintf(all, sizeof all, "%s/all.f32", dir);
    snprintf(cmd, sizeof cmd, "'%s' logits -m '%s' --tokens 1,403,407,261,378 -o '%s' -t 1 2>/dev/null", g_bin, g_model, a);
    KW_CHECK_EQ_INT(run(cmd, NULL, 0), 0);
    snprintf(cmd, sizeof cmd, "'%s' logits -m '%s' -p 'Once upon a time' -o '%s' -t 1 2>/dev/null", g_bin, g_model, b);
    KW_CHECK_EQ_INT(run(cmd, NULL, 0), 0);
    snprintf(cmd, sizeof cmd, "'%s' logits -m '%s' -p 'Once upon a time' --all -o '%s' -t 1 2>/dev/null", g_bin, g_model, all);
    KW_CHECK_EQ_INT(run(cmd, NULL, 0), 0);
    size_t na, nb, nall, nw;
    float *la = read_f32(a, &na), *lb = read_f32(b, &nb), *lall = read_f32(all, &nall);
    float *want = read_f32(kw_test_path(kw_test_path(g_conf, "oracle"), "stories260K.v1_once.last.f32"), &nw);
    KW_CHECK(la && lb && lall && want);
    if (la && lb && lall && want) {
        KW_CHECK_EQ_INT(na, 512);
        KW_CHECK_EQ_INT(nall, 5 * 512);
        KW_CHECK(na == nb && memcmp(la, lb, na * 4) == 0);             /* tokenizer gives the oracle's ids */
        KW_CHECK(memcmp(lall + 4 * 512, la, 512 * 4) == 0);              /* --all ends with the last row */
        double d = max_abs(la, want, 512);
        KW_CHECK_MSG(d <= TOL_F32, "logits vs oracle: %.3g", d);
    }
    free(la); free(lb); free(lall); free(want);
}

static void test_generate(void) {
    static char out[65536];
    char cmd[4096];
    cJSON *bos = NULL;
    char *t = kw_test_read_file(kw_test_path(kw_test_path(g_conf, "oracle"), "stories260K.bos_only_200.jsonl"), NULL);
    if (t) bos = cJSON_Parse(t);
    free(t);
    KW_CHECK(bos != NULL);
    snprintf(cmd, sizeof cmd, "'%s' generate -m '%s' -p '' --temp 0 -n 200 --kv-type f32 -t 1 2>/dev/null", g_bin, g_model);
    KW_CHECK_EQ_INT(run(cmd, out, sizeof out), 0);
    if (bos) {
        const char *want = cJSON_GetObjectItem(bos, "gen_text")->valuestring;
        KW_CHECK_MSG(!strcmp(out, want), "generate from BOS:\n got '%.120s'\nwant '%.120s'", out, want);
        KW_CHECK(!strncmp(out, "Once upon a time, there was a little girl named Lily.", 53));
    }
    cJSON_Delete(bos);
    /* only the continuation, not the prompt */
    cJSON *v1 = oracle_record("oracle/stories260K.jsonl", "v1_once");
    snprintf(cmd, sizeof cmd, "'%s' generate -m '%s' -p 'Once upon a time' --temp 0 -n 32 --kv-type f32 -t 1 2>/dev/null", g_bin, g_model);
    KW_CHECK_EQ_INT(run(cmd, out, sizeof out), 0);
    if (v1) {
        const char *want = cJSON_GetObjectItem(v1, "gen_text")->valuestring;
        KW_CHECK_MSG(!strcmp(out, want), "generate v1:\n got '%.120s'\nwant '%.120s'", out, want);
    }
    cJSON_Delete(v1);
    /* same seed, same text; sampling works with every knob set */
    static char out2[65536];
    snprintf(cmd, sizeof cmd, "'%s' generate -m '%s' -p 'Once' -n 40 --temp 0.9 --top-k 20 --top-p 0.9 --min-p 0.02 "
             "--repeat-penalty 1.1 --presence-penalty 0.1 --frequency-penalty 0.1 -s 7 -t 1 2>/dev/null", g_bin, g_model);
    KW_CHECK_EQ_INT(run(cmd, out, sizeof out), 0);
    KW_CHECK_EQ_INT(run(cmd, out2, sizeof out2), 0);
    KW_CHECK(strlen(out) > 0 && !strcmp(out, out2));
}

static void test_perplexity(void) {
    char cmd[4096], out[1024];
    snprintf(cmd, sizeof cmd, "'%s' perplexity -m '%s' -f '%s/prompts/v6_paragraph.txt' --ctx 128 -t 1 2>/dev/null", g_bin,
             g_model, g_conf);
    KW_CHECK_EQ_INT(run(cmd, out, sizeof out), 0);
    double ppl = 0;
    KW_CHECK_MSG(sscanf(out, "perplexity: %lf", &ppl) == 1, "output '%s'", out);
    /* a trained model on English text: far better than uniform (512) */
    KW_CHECK_MSG(ppl > 1.0 && ppl < 100.0, "ppl %g", ppl);
}

static void test_usage_errors(void) {
    char cmd[4096];
    const char *bad[] = {
        "generate -p hi",                                  /* no model */
        "generate -m MODEL",                               /* no prompt */
        "generate -m MODEL -p hi --temp x",
        "generate -m MODEL -p hi --kv-type q4_0",
        "generate -m MODEL -p hi --kv-type q8_0",          /* head_dim 8 */
        "generate -m /nonexistent.gguf -p hi",
        "logits -m MODEL -p hi",                           /* no -o */
        "logits -m MODEL --tokens 1,x -o /dev/null",
        "logits -m MODEL --tokens 1,512 -o /dev/null",
        "perplexity -m MODEL -f /nonexistent.txt",
        "perplexity -m MODEL -p hi",
        "generate -m MODEL -p hi --bogus",
        "bench -m MODEL --experts all",                    /* not a mode */
        "serve -m MODEL --experts all",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[512], *p;
        snprintf(args, sizeof args, "%s", bad[i]);
        char expanded[3072] = "";
        for (char *tok = strtok_r(args, " ", &p); tok; tok = strtok_r(NULL, " ", &p)) {
            strcat(expanded, " '");
            strcat(expanded, strcmp(tok, "MODEL") ? tok : g_model);
            strcat(expanded, "'");
        }
        snprintf(cmd, sizeof cmd, "'%s'%s 2>&1", g_bin, expanded);
        char out[4096];
        int rc = run(cmd, out, sizeof out);
        KW_CHECK_MSG(rc == 2 || rc == 1, "'%s' exited %d", bad[i], rc);
        KW_CHECK_MSG(strstr(out, "kvwise") != NULL, "'%s' printed no message", bad[i]);
        if (strstr(bad[i], "--experts"))
            KW_CHECK_MSG(strstr(out, "--experts") && strstr(out, "first-use"), "'%s': %s", bad[i], out);
    }
    for (int i = 0; i < 3; i++) {
        const char *c[] = {"generate", "logits", "perplexity"};
        char out[8192];
        snprintf(cmd, sizeof cmd, "'%s' %s --help", g_bin, c[i]);
        KW_CHECK_EQ_INT(run(cmd, out, sizeof out), 0);
        KW_CHECK(strstr(out, "usage: kvwise") != NULL);
    }
}

int main(void) {
    const char *shared = kw_test_shared_dir();
    static char conf[1024];
    snprintf(conf, sizeof conf, "%s/conformance", shared);
    g_conf = conf;
    g_bin = getenv("KW_BIN");
    if (!g_bin) { printf("SKIPPED: KW_BIN not set\n"); return 77; }
    snprintf(g_model, sizeof g_model, "%s/models/stories260K.gguf", conf);
    test_logits();
    test_generate();
    test_perplexity();
    test_usage_errors();
    return kw_test_finish();
}
