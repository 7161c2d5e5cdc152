/* test_tok_oracle.c - prompt token ids against llama.cpp's oracle records
 * (shared/conformance/oracle/NAME.jsonl): for every record, tokenizing
 * "prompt" with add_special=true, parse_special=false must give exactly
 * "prompt_tokens" (README, "Oracle files", step 1). And detokenizing
 * "gen_tokens" must give "gen_text" (llama_detokenize with
 * remove_special=false, unparse_special=false) once every byte that is not
 * part of valid UTF-8 is replaced by U+FFFD, as the oracle did (their count
 * must equal gen_text_invalid_utf8_bytes). */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "testutil.h"
#include "kvwise/gguf.h"
#include "kvwise/tokenizer.h"

static int n_records, n_gen_checked;

/* Replaces each byte that does not start a valid UTF-8 sequence by U+FFFD. */
static char *replace_invalid(const char *s, size_t n, size_t *out_n, int *n_bad) {
    char *o = malloc(3 * n + 1);
    size_t k = 0;
    *n_bad = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t L = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        bool ok = L && i + L <= n;
        for (size_t j = 1; ok && j < L; j++) ok = ((unsigned char)s[i + j] & 0xC0) == 0x80;
        if (ok && L > 1) {
            unsigned char c1 = (unsigned char)s[i + 1];
            ok = !((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 > 0x8F));
        }
        if (ok) { memcpy(o + k, s + i, L); k += L; i += L; }
        else { memcpy(o + k, "\xEF\xBF\xBD", 3); k += 3; i++; (*n_bad)++; }
    }
    o[k] = '\0';
    *out_n = k;
    return o;
}

static void check_gen_text(const kw_tokenizer *t, const cJSON *rec, const char *file, int line) {
    const cJSON *gen = cJSON_GetObjectItemCaseSensitive(rec, "gen_tokens");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(rec, "gen_text");
    const cJSON *bad = cJSON_GetObjectItemCaseSensitive(rec, "gen_text_invalid_utf8_bytes");
    if (!cJSON_IsArray(gen) || !cJSON_IsString(text) || !cJSON_IsNumber(bad)) return;
    size_t n = (size_t)cJSON_GetArraySize(gen);
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    for (size_t i = 0; i < n; i++) ids[i] = (int32_t)cJSON_GetArrayItem(gen, (int)i)->valuedouble;
    char *out = NULL;
    size_t len = 0;
    kw_err err = {{0}};
    int rc = kw_detokenize(t, ids, n, false, &out, &len, &err);
    KW_CHECK_MSG(rc == 0, "%s:%d: %s", file, line, err.msg);
    int n_bad = 0;
    size_t clean_n = 0;
    char *clean = rc == 0 ? replace_invalid(out, len, &clean_n, &n_bad) : NULL;
    /* cJSON ends valuestring at an embedded NUL (a <0x00> token): compare up to it */
    size_t want_n = strlen(text->valuestring);
    bool same = clean && clean_n >= want_n && memcmp(clean, text->valuestring, want_n) == 0 &&
                (clean_n == want_n || clean[want_n] == '\0');
    KW_CHECK_MSG(same && n_bad == (int)bad->valuedouble,
                 "%s:%d: gen_text differs (%d invalid bytes):\n  got  '%s'\n  want '%s'", file, line, n_bad,
                 clean ? clean : "", text->valuestring);
    free(clean);
    n_gen_checked++;
    free(out);
    free(ids);
}

static void check_record(const kw_tokenizer *t, const cJSON *rec, const char *file, int line) {
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(rec, "prompt");
    const cJSON *want = cJSON_GetObjectItemCaseSensitive(rec, "prompt_tokens");
    const cJSON *pid = cJSON_GetObjectItemCaseSensitive(rec, "prompt_id");
    KW_CHECK_MSG(cJSON_IsString(prompt) && cJSON_IsArray(want), "%s:%d: no prompt/prompt_tokens", file, line);
    if (!cJSON_IsString(prompt) || !cJSON_IsArray(want)) return;
    /* prompt_n_bytes guards against JSON strings with embedded NULs */
    const cJSON *nb = cJSON_GetObjectItemCaseSensitive(rec, "prompt_n_bytes");
    size_t len = strlen(prompt->valuestring);
    KW_CHECK_MSG(!cJSON_IsNumber(nb) || (size_t)nb->valuedouble == len, "%s:%d: prompt length", file, line);
    int32_t *ids = NULL;
    size_t n = 0;
    kw_err err = {{0}};
    int rc = kw_tokenize(t, prompt->valuestring, len, true, false, &ids, &n, &err);
    KW_CHECK_MSG(rc == 0, "%s:%d: %s", file, line, err.msg);
    size_t nw = (size_t)cJSON_GetArraySize(want), same = 0;
    if (rc == 0 && n == nw)
        for (same = 0; same < n && ids[same] == (int32_t)cJSON_GetArrayItem(want, (int)same)->valuedouble; same++) {}
    KW_CHECK_MSG(rc == 0 && n == nw && same == n, "%s:%d (%s): %zu ids, want %zu; first difference at %zu", file,
                 line, cJSON_IsString(pid) ? pid->valuestring : "?", n, nw, same);
    n_records++;
    free(ids);
}

static void check_file(const char *dir, const char *models, const char *name) {
    size_t len = 0;
    char *buf = kw_test_read_file(kw_test_path(dir, name), &len);
    KW_CHECK(buf != NULL);
    if (!buf) return;
    kw_gguf *g = NULL;
    kw_tokenizer *t = NULL;
    char loaded[512] = "";
    int line = 0;
    for (char *p = buf, *nl; p && *p; p = nl ? nl + 1 : NULL) {
        nl = strchr(p, '\n');
        if (nl) *nl = '\0';
        line++;
        if (!*p) continue;
        cJSON *rec = cJSON_Parse(p);
        KW_CHECK_MSG(rec != NULL, "%s:%d: bad JSON", name, line);
        if (!rec) continue;
        const cJSON *mf = cJSON_GetObjectItemCaseSensitive(rec, "model_file");
        if (cJSON_IsString(mf) && strcmp(mf->valuestring, loaded) != 0) {
            kw_tokenizer_free(t);
            kw_gguf_close(g);
            kw_err err = {{0}};
            g = kw_gguf_open(kw_test_path(models, mf->valuestring), &err);
            t = g ? kw_tokenizer_load(g, &err) : NULL;
            KW_CHECK_MSG(t != NULL, "%s: %s", mf->valuestring, err.msg);
            snprintf(loaded, sizeof loaded, "%s", mf->valuestring);
        }
        if (t) check_record(t, rec, name, line);
        if (t) check_gen_text(t, rec, name, line);
        cJSON_Delete(rec);
    }
    kw_tokenizer_free(t);
    kw_gguf_close(g);
    free(buf);
}

int main(void) {
    const char *shared = kw_test_shared_dir();
    char dir[4096], models[4096];
    snprintf(dir, sizeof dir, "%s", kw_test_path(shared, "conformance/oracle"));
    snprintf(models, sizeof models, "%s", kw_test_path(shared, "conformance/models"));
    DIR *d = opendir(dir);
    KW_CHECK(d != NULL);
    struct dirent *e;
    int files = 0;
    while (d && (e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 7 || strcmp(e->d_name + l - 6, ".jsonl")) continue;
        check_file(dir, models, e->d_name);
        files++;
    }
    if (d) closedir(d);
    printf("%d oracle files, %d records, %d gen_text checked\n", files, n_records, n_gen_checked);
    KW_CHECK_MSG(files >= 9 && n_records >= 50, "too little oracle data: %d files, %d records", files, n_records);
    return kw_test_finish();
}
