/* test_plan_cli.c - `kvwise plan` end to end: --json output parses (cJSON)
 * and carries the documented schema (docs/PLAN.md, "kvwise.plan/1") with
 * figures that agree with each other; bad usage exits 2 with one line; and,
 * when ../shared is present, the plan of every conformance model works and
 * its weight bytes equal the sum of the tensor sizes. RAM, bandwidth and
 * overhead are passed, so nothing depends on this machine. */
#include "testutil.h"
#include "kvwise/arch.h"
#include "kvwise/gguf.h"
#include "kvwise/kv.h"
#include <cjson/cJSON.h>
#include <string.h>
#include <sys/wait.h>

static const char *bin(void) {
    const char *b = getenv("KW_BIN");
    return b && *b ? b : "./kvwise";
}

/* Runs a shell command; returns its exit code and stdout (malloc'd). */
static int run(const char *cmd, char **out) {
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += r;
        if (n + 1 >= cap) { cap *= 2; char *nb = realloc(buf, cap); if (!nb) break; buf = nb; }
    }
    if (buf) buf[n] = 0;
    int st = pclose(p);
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static double num_at(const cJSON *root, const char *obj, const char *key) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, obj);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v)) {
        fprintf(stderr, "missing number %s.%s\n", obj, key);
        return -1;
    }
    return v->valuedouble;
}

/* Every documented member is present with its type (docs/PLAN.md). */
static void check_schema(const cJSON *j) {
    KW_CHECK(cJSON_IsString(cJSON_GetObjectItem(j, "schema")) &&
             !strcmp(cJSON_GetObjectItem(j, "schema")->valuestring, "kvwise.plan/1"));
    static const char *model_nums[] = {"n_layer", "n_kv_layers", "n_linear_layers", "n_head", "n_head_kv", "head_dim_k",
                                       "head_dim_v", "n_embd", "n_ff", "n_vocab", "n_ctx_train", "weight_bytes",
                                       "resident_bytes", "repack_bytes", "released_bytes", "read_bytes_per_token", "tokenizer_bytes", "linear_state_bytes"};
    static const char *settings_nums[] = {"ram", "reserve", "memory_limit", "ctx", "concurrency", "prompt_concurrency",
                                          "prefill_step_size", "block_tokens", "threads"};
    static const char *kv_nums[] = {"bytes_per_token", "bytes_per_token_f16", "bytes_per_token_q8_0", "block_bytes",
                                    "per_sequence_kv_bytes", "per_sequence_state_bytes", "per_sequence_bytes",
                                    "checkpoint_bytes", "checkpoints_per_cached_sequence"};
    static const char *budget_nums[] = {"memory_limit", "weights", "workspace", "tokenizer", "overhead", "connections", "live_kv", "fixed",
                                        "needed", "remainder", "shortfall", "prompt_cache_bytes", "prompt_cache_size",
                                        "headroom", "kv_pool_blocks", "max_ctx", "max_ctx_q8_0", "max_concurrency"};
    static const char *speed_nums[] = {"bytes_per_token", "bandwidth_bytes_per_s", "decode_tok_s", "decode_tok_s_full_ctx",
                                       "decode_aggregate_tok_s", "prefill_tok_s"};
    struct { const char *obj; const char **keys; size_t n; } groups[] = {
        {"model", model_nums, sizeof model_nums / sizeof *model_nums},
        {"settings", settings_nums, sizeof settings_nums / sizeof *settings_nums},
        {"kv", kv_nums, sizeof kv_nums / sizeof *kv_nums},
        {"budget", budget_nums, sizeof budget_nums / sizeof *budget_nums},
        {"speed", speed_nums, sizeof speed_nums / sizeof *speed_nums},
    };
    for (size_t g = 0; g < sizeof groups / sizeof *groups; g++)
        for (size_t i = 0; i < groups[g].n; i++)
            KW_CHECK_MSG(num_at(j, groups[g].obj, groups[g].keys[i]) >= 0, "%s.%s", groups[g].obj, groups[g].keys[i]);
    const cJSON *m = cJSON_GetObjectItem(j, "model");
    KW_CHECK(cJSON_IsString(cJSON_GetObjectItem(m, "source")));
    KW_CHECK(cJSON_IsString(cJSON_GetObjectItem(m, "arch")));
    KW_CHECK(cJSON_IsString(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "settings"), "kv_type")));
    KW_CHECK(cJSON_IsBool(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "settings"), "ram_measured")));
    KW_CHECK(cJSON_IsBool(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "budget"), "fits")));
    KW_CHECK(cJSON_IsBool(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "speed"), "bandwidth_measured")));
    KW_CHECK(cJSON_IsArray(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "workspace"), "by_step")));
    KW_CHECK(cJSON_IsArray(cJSON_GetObjectItem(j, "warnings")));
    KW_CHECK(cJSON_IsString(cJSON_GetObjectItem(j, "serve")) &&
             !strncmp(cJSON_GetObjectItem(j, "serve")->valuestring, "kvwise serve -m ", 16));
    /* the budget adds up */
    double fixed = num_at(j, "budget", "weights") + num_at(j, "budget", "workspace") + num_at(j, "budget", "tokenizer") +
                   num_at(j, "budget", "overhead") + num_at(j, "budget", "connections");
    KW_CHECK_EQ_INT(num_at(j, "budget", "fixed"), fixed);
    KW_CHECK_EQ_INT(num_at(j, "budget", "needed"), fixed + num_at(j, "budget", "live_kv"));
    KW_CHECK_EQ_INT(num_at(j, "budget", "live_kv"),
                    num_at(j, "settings", "concurrency") * num_at(j, "kv", "per_sequence_bytes"));
}

static void test_hf_config_json(void) {
    const char *dir = kw_test_tmpdir();
    const char *cfg = kw_test_path(dir, "config.json");
    FILE *f = fopen(cfg, "w");
    KW_CHECK(f != NULL);
    if (!f) return;
    fputs("{\"head_dim\":128,\"hidden_size\":4096,\"intermediate_size\":12288,\"max_position_embeddings\":40960,"
          "\"model_type\":\"qwen3\",\"num_attention_heads\":32,\"num_hidden_layers\":36,\"num_key_value_heads\":8,"
          "\"vocab_size\":151936}", f);
    fclose(f);
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s plan --hf-config %s --weights-bytes 20GB --ram 64GiB --ctx 16384 "
             "--bandwidth 273 --overhead 64MiB --kv-type f16 --json", bin(), cfg);
    KW_CHECK_EQ_INT(run(cmd, &out), 0);
    cJSON *j = cJSON_Parse(out ? out : "");
    KW_CHECK_MSG(j != NULL, "not JSON: %.200s", out ? out : "");
    if (j) {
        check_schema(j);
        KW_CHECK_EQ_INT(num_at(j, "kv", "bytes_per_token"), 147456);
        KW_CHECK_EQ_INT(num_at(j, "kv", "bytes_per_token_q8_0"), 78336);
        KW_CHECK_EQ_INT(num_at(j, "kv", "per_sequence_kv_bytes"), 147456.0 * 16384);
        KW_CHECK_NEAR(num_at(j, "speed", "decode_tok_s"), 13.65, 1e-9);
        KW_CHECK_EQ_INT(num_at(j, "settings", "memory_limit"), 58.0 * (1 << 30));
        KW_CHECK_EQ_INT(num_at(j, "budget", "overhead"), 64.0 * (1 << 20));
        KW_CHECK(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "budget"), "fits")));
        KW_CHECK(strstr(cJSON_GetObjectItem(j, "serve")->valuestring, "--ctx-size 16384") != NULL);
        cJSON_Delete(j);
    }
    free(out);

    /* human output names the figures */
    snprintf(cmd, sizeof cmd, "%s plan --hf-config %s --weights-bytes 20GB --ram 64GiB --ctx 16384 --bandwidth 273 --kv-type f16 2>&1",
             bin(), cfg);
    KW_CHECK_EQ_INT(run(cmd, &out), 0);
    KW_CHECK_MSG(out && strstr(out, "147,456 bytes") && strstr(out, "13.65 tok/s") && strstr(out, "kvwise serve -m"),
                 "%s", out ? out : "");
    free(out);

    /* the repacking warning names the types the active kernel family repacks: none for the
     * scalar family; Q4_0, Q8_0 and Q4_K (not F16) for AVX2, where this CPU runs it */
    snprintf(cmd, sizeof cmd, "KW_KERNEL=scalar %s plan --hf-config %s --weights-bytes 20GB --ram 64GiB 2>&1", bin(), cfg);
    KW_CHECK_EQ_INT(run(cmd, &out), 0);
    KW_CHECK_MSG(out && !strstr(out, "repacked heap copy"), "%s", out ? out : "");
    free(out);
    snprintf(cmd, sizeof cmd, "KW_KERNEL=avx2 %s plan --hf-config %s --weights-bytes 20GB --ram 64GiB 2>&1", bin(), cfg);
    KW_CHECK_EQ_INT(run(cmd, &out), 0);
    if (out && strstr(out, "(avx2 kernels)"))
        KW_CHECK_MSG(strstr(out, "(avx2 kernels) q4_0/q8_0/q4_k weights get a repacked heap copy"), "%s", out);
    free(out);

    /* bad usage: exit 2 with a one-line message */
    const char *bad[] = {"--hf-config /nonexistent/config.json --weights-bytes 1GB --ram 1GiB",
                         "--hf-config x.json", "--ram 8GiB", "-m a.gguf --hf-config b.json",
                         "--hf-config x --weights-bytes 1GB --ctx 0", "--hf-config x --weights-bytes 1GB --kv-type q4",
                         "--hf-config x --weights-bytes 12XB", "--bogus"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(cmd, sizeof cmd, "%s plan %s 2>&1 >/dev/null", bin(), bad[i]);
        int rc = run(cmd, &out);
        KW_CHECK_MSG(rc == 2, "'%s' -> %d", bad[i], rc);
        KW_CHECK_MSG(out && strchr(out, '\n') == out + strlen(out) - 1, "'%s' said: %s", bad[i], out ? out : "");
        free(out);
    }
}

/* A conformance model of an architecture the table (arch.h) lacks: the plan
 * refuses it with exit 2, naming the architecture. */
static void check_unsupported_model(const char *models, const char *file, const char *arch) {
    char cmd[4096], want[128], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s plan -m %s/%s --ram 8GiB --json 2>&1 >/dev/null", bin(), models, file);
    snprintf(want, sizeof want, "unsupported architecture '%s'", arch);
    KW_CHECK_MSG(run(cmd, &out) == 2 && out && strstr(out, want), "%s: %s", file, out ? out : "");
    free(out);
}

/* Every conformance model of a supported architecture: the plan's shape and
 * KV figures equal the manifest's (models/manifest.json), weights = file
 * size, the ceiling is bandwidth / bytes per token, and the serve line names
 * the file. */
static void test_conformance_models(void) {
    const char *models = kw_test_path(kw_test_shared_dir(), "conformance/models");
    char *text = kw_test_read_file(kw_test_path(models, "manifest.json"), NULL);
    KW_CHECK(text != NULL);
    cJSON *man = cJSON_Parse(text ? text : "");
    free(text);
    KW_CHECK(cJSON_IsArray(man) && cJSON_GetArraySize(man) >= 9);
    const cJSON *e;
    cJSON_ArrayForEach(e, man) {
        const char *file = cJSON_GetObjectItem(e, "file")->valuestring;
        const char *arch = cJSON_GetObjectItem(e, "arch")->valuestring;
        if (!kw_arch_find(arch)) { check_unsupported_model(models, file, arch); continue; }
        double n_layer = cJSON_GetObjectItem(e, "n_layer")->valuedouble;
        double kvh = cJSON_GetObjectItem(e, "n_head_kv")->valuedouble;
        double hd = cJSON_GetObjectItem(e, "head_dim")->valuedouble;
        bool tied = cJSON_IsTrue(cJSON_GetObjectItem(e, "tied"));
        char cmd[4096], *out = NULL;
        snprintf(cmd, sizeof cmd, "%s plan -m %s/%s --ram 8GiB --ctx 2048 --bandwidth 20 --overhead 32MiB --json",
                 bin(), models, file);
        KW_CHECK_MSG(run(cmd, &out) == 0, "%s", file);
        cJSON *j = cJSON_Parse(out ? out : "");
        free(out);
        KW_CHECK_MSG(j != NULL, "%s: not JSON", file);
        if (!j) continue;
        check_schema(j);
        KW_CHECK_EQ_INT(num_at(j, "model", "n_layer"), n_layer);
        KW_CHECK_EQ_INT(num_at(j, "model", "n_head_kv"), kvh);
        KW_CHECK_EQ_INT(num_at(j, "model", "head_dim_k"), hd);
        KW_CHECK_EQ_INT(num_at(j, "model", "n_ctx_train"), cJSON_GetObjectItem(e, "n_ctx_train")->valuedouble);
        /* resident = mapped file + repacked copy - mapped pages the copy replaces + experts' allowance */
        KW_CHECK_EQ_INT(num_at(j, "model", "resident_bytes") - num_at(j, "model", "repack_bytes") +
                        num_at(j, "model", "released_bytes") - num_at(j, "model", "expert_pack_bytes"),
                        cJSON_GetObjectItem(e, "bytes")->valuedouble);
        KW_CHECK(num_at(j, "model", "released_bytes") <= num_at(j, "model", "weight_bytes"));
        /* default kv type "auto": what kw_kv_type_auto picks here, i16 rows carry a 4-byte scale */
        int32_t group = (int32_t)(num_at(j, "model", "n_head") / kvh);
        uint32_t kt = kw_kv_type_auto((int32_t)hd, (int32_t)hd, 32, group);
        cJSON *kts = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "settings"), "kv_type");
        KW_CHECK_MSG(cJSON_IsString(kts) && !strcmp(kts->valuestring, kw_kv_type_name(kt)), "%s: kv_type %s, want %s", file,
                     cJSON_IsString(kts) ? kts->valuestring : "?", kw_kv_type_name(kt));
        double row = kt == KW_TYPE_KV_I16 ? hd * 2 + 4 : hd * 2;
        /* a hybrid keeps KV only in its attention layers, and a fixed state in the others (manifest) */
        const cJSON *kvt = cJSON_GetObjectItem(e, "kv_per_token"), *rs = cJSON_GetObjectItem(e, "recurrent_state_per_seq");
        double n_kv = kvt ? cJSON_GetObjectItem(kvt, "n_kv_layers")->valuedouble : n_layer;
        KW_CHECK_EQ_INT(num_at(j, "model", "n_kv_layers"), n_kv);
        KW_CHECK_EQ_INT(num_at(j, "model", "n_linear_layers"), rs ? cJSON_GetObjectItem(rs, "n_recurrent_layers")->valuedouble : 0);
        /* a prompt-cache checkpoint is one copy of the state, 4 at most per cached conversation */
        KW_CHECK_EQ_INT(num_at(j, "kv", "checkpoint_bytes"), num_at(j, "model", "linear_state_bytes"));
        KW_CHECK_EQ_INT(num_at(j, "kv", "checkpoints_per_cached_sequence"), rs ? 4 : 0);
        KW_CHECK_EQ_INT(num_at(j, "kv", "bytes_per_token"), n_kv * 2 * kvh * row);
        KW_CHECK_EQ_INT(num_at(j, "kv", "bytes_per_token_q8_0"), (int)hd % 32 ? 0 : n_kv * 2 * kvh * hd / 32 * 34);
        KW_CHECK_EQ_INT(num_at(j, "kv", "per_sequence_kv_bytes"), 2048 * n_kv * 2 * kvh * row);
        double w = num_at(j, "model", "weight_bytes"), r = num_at(j, "model", "read_bytes_per_token");
        /* a token reads every weight of a dense tied model (the packed copies: headers and the K-quant
         * layouts add up to 3%), less where an untied embedding or unchosen experts sit */
        bool moe = kw_arch_find(arch)->ffn == KW_FFN_MOE;
        KW_CHECK_MSG(tied && !moe ? r >= w && r <= w * 1.03 : r < w, "%s: read %.0f of %.0f", file, r, w);
        KW_CHECK_NEAR(num_at(j, "speed", "decode_tok_s"), 20e9 / r, 1e-6);
        KW_CHECK(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "model"), "tokenizer_measured")));
        KW_CHECK(num_at(j, "model", "tokenizer_bytes") > 0);
        KW_CHECK(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "budget"), "fits")));
        KW_CHECK(strstr(cJSON_GetObjectItem(j, "serve")->valuestring, file) != NULL);
        cJSON_Delete(j);
    }
    cJSON_Delete(man);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "conformance")) test_conformance_models();
    else test_hf_config_json();
    return kw_test_finish();
}
