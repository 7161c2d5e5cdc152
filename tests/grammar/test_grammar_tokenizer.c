/* test_grammar_tokenizer.c - the grammar engine on a real byte-level BPE
 * vocab: kw_grammar_vocab_from_tokenizer over the GPT-2 vocab of
 * ../shared/conformance/tokenizer (skipped when absent), a JSON Schema
 * constrained random walk, and the token ids detokenized by kw_detokenize
 * must give back exactly the text the grammar accepted: valid JSON that
 * matches the schema. */
#include "testutil.h"
#include "gtest_util.h"
#include "jsvalidate.h"
#include "kvwise/gguf.h"
#include "kvwise/tokenizer.h"
#include <string.h>

int main(void) {
    const char *shared = kw_test_shared_dir();
    const char *path = kw_test_path(shared, "conformance/tokenizer/ggml-vocab-gpt-2.gguf");
    kw_err e;
    kw_gguf *gg = kw_gguf_open(path, &e);
    if (!gg) { printf("SKIPPED: %s\n", e.msg); return 77; }
    kw_tokenizer *t = kw_tokenizer_load(gg, &e);
    kw_gguf_close(gg);
    KW_CHECK(t != NULL);
    if (!t) return kw_test_finish();
    kw_grammar_vocab *v = kw_grammar_vocab_from_tokenizer(t, &e);
    KW_CHECK_MSG(v != NULL, "%s", v ? "" : e.msg);
    if (!v) return kw_test_finish();
    KW_CHECK_EQ_INT(kw_grammar_vocab_size(v), kw_tokenizer_n_vocab(t));
    /* GPT-2's "Ġ" pieces decode to a space */
    int32_t id = kw_token_lookup(t, "\xc4\xa0the", 5);
    uint32_t len = 0;
    const char *b = id >= 0 ? kw_grammar_vocab_token(v, id, &len) : "";
    KW_CHECK(id >= 0 && len == 4 && !memcmp(b, " the", 4));
    int32_t eos = kw_token_eos(t);
    KW_CHECK(eos < 0 || kw_grammar_vocab_kind(v, eos) == KW_GTOK_EOG);
    const char *schema = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":20},"
                         "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"red\",\"green\"]},\"maxItems\":3},"
                         "\"n\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":500}},\"required\":[\"name\",\"n\"],"
                         "\"additionalProperties\":false}";
    kw_grammar *g = kw_grammar_from_json_schema(schema, strlen(schema), NULL, NULL, &e);
    KW_CHECK(g != NULL);
    kw_grammar_index *ix = g ? kw_grammar_index_new(g, v, NULL, &e) : NULL;
    KW_CHECK_MSG(ix != NULL, "%s", ix ? "" : e.msg);
    cJSON *sch = cJSON_Parse(schema);
    int32_t nv = kw_grammar_vocab_size(v);
    uint32_t *mask = calloc(((size_t)nv + 31) / 32, 4);
    int32_t *allowed = malloc((size_t)nv * sizeof *allowed), ids[4096];
    for (uint32_t seed = 1; ix && seed <= 8; seed++) {
        kw_grammar_matcher *m = kw_grammar_matcher_new(g, ix, &e);
        uint32_t r = seed * 2654435761u;
        int n_ids = 0, ended = 0;
        while (n_ids < 4000) {
            int32_t na = kw_grammar_mask(m, mask, &e), k = 0;
            KW_CHECK(na > 0);
            if (na <= 0) break;
            bool closing = (r = r * 1103515245u + 12345u) >> 31;
            int32_t pick = -1;
            for (int32_t i = 0; i < nv; i++) {
                if (!kw_grammar_mask_test(mask, i)) continue;
                if (kw_grammar_vocab_kind(v, i) == KW_GTOK_EOG) { pick = i; break; }
                uint32_t l;
                const char *tb = kw_grammar_vocab_token(v, i, &l);
                if (closing && !(l <= 2 && tb[0] && strchr("\"]},", tb[0]))) continue;
                allowed[k++] = i;
            }
            if (pick < 0 && k == 0)
                for (int32_t i = 0; i < nv; i++) if (kw_grammar_mask_test(mask, i)) allowed[k++] = i;
            if (pick < 0) pick = allowed[(r = r * 1103515245u + 12345u) % (uint32_t)k];
            KW_CHECK(kw_grammar_accept_token(m, pick, &e) == 0);
            if (kw_grammar_vocab_kind(v, pick) == KW_GTOK_EOG) { ended = 1; break; }
            ids[n_ids++] = pick;
        }
        KW_CHECK_MSG(ended, "seed %u did not end", seed);
        char *text = NULL;
        size_t tl = 0;
        KW_CHECK(kw_detokenize(t, ids, (size_t)n_ids, false, &text, &tl, &e) == 0);
        cJSON *doc = text ? cJSON_ParseWithOpts(text, NULL, 1) : NULL;
        KW_CHECK_MSG(doc != NULL, "seed %u: not JSON: %s", seed, text ? text : "");
        char why[256] = "";
        KW_CHECK_MSG(doc && jsv_validate(sch, sch, doc, why, sizeof why), "seed %u: %s: %s", seed, why, text);
        cJSON_Delete(doc);
        free(text);
        kw_grammar_matcher_free(m);
    }
    free(mask);
    free(allowed);
    cJSON_Delete(sch);
    kw_grammar_index_free(ix);
    kw_grammar_free(g);
    kw_grammar_vocab_free(v);
    kw_tokenizer_free(t);
    return kw_test_finish();
}
