/* test_tok_oracle.c - prompt token ids against llama.cpp's oracle records
 * (shared/conformance/oracle/NAME.jsonl): for every record, tokenizing
 * "prompt" with add_special=true, parse_special=false must give exactly
 * "prompt_tokens" (README, "Oracle files", step 1). */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "testutil.h"
#include "kvwise/gguf.h"
#include "kvwise/tokenizer.h"

static int n_records;

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
    printf("%d oracle files, %d records\n", files, n_records);
    KW_CHECK_MSG(files >= 9 && n_records >= 50, "too little oracle data: %d files, %d records", files, n_records);
    return kw_test_finish();
}
