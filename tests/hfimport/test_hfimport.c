/* test_hfimport.c - kw_hf_vocab_parse on small hand-written tokenizer.json
 * files: both merge forms, id order with a padded gap, token types of
 * special / non-special added tokens, bos/eos as strings or {content}
 * objects, add_bos from the post-processor, chat template, pre-tokenizer
 * recognition, and one-line errors for unsupported tokenizers. */
#include "testutil.h"
#include <string.h>
#include "kvwise/hfimport.h"

#define QWEN_RE "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"

static const char k_tok[] =
    "{\"added_tokens\":[{\"id\":5,\"content\":\"<s>\",\"special\":true},{\"id\":6,\"content\":\"<think>\",\"special\":false}],"
    "\"normalizer\":{\"type\":\"NFC\"},"
    "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"" QWEN_RE "\"},"
    "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"use_regex\":false}]},"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}},{\"Sequence\":{\"id\":\"A\"}}]},"
    "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"abb\":3},\"merges\":[\"a b\",[\"ab\",\"b\"]]}}";
static const char k_cfg[] = "{\"bos_token\":{\"content\":\"<s>\"},\"eos_token\":\"<think>\",\"chat_template\":\"{{ x }}\"}";

static void check_error(const char *json, const char *want) {
    kw_hf_vocab v;
    kw_err e = {{0}};
    KW_CHECK(kw_hf_vocab_parse(json, strlen(json), NULL, 0, &v, &e) == -1);
    KW_CHECK_MSG(strstr(e.msg, want) != NULL && !strchr(e.msg, '\n'), "got '%s', want '%s'", e.msg, want);
    KW_CHECK(v.tokens == NULL && v.pool == NULL);
}

int main(void) {
    kw_hf_vocab v;
    kw_err e = {{0}};
    int rc = kw_hf_vocab_parse(k_tok, strlen(k_tok), k_cfg, strlen(k_cfg), &v, &e);
    KW_CHECK_MSG(rc == 0, "%s", e.msg);
    if (rc == 0) {
        KW_CHECK_EQ_INT(v.n_tokens, 7);
        KW_CHECK(!strcmp(v.tokens[2], "ab") && !strcmp(v.tokens[4], "[PAD4]") && !strcmp(v.tokens[6], "<think>"));
        KW_CHECK_EQ_INT(v.types[0], KW_HF_TOK_NORMAL);
        KW_CHECK_EQ_INT(v.types[4], KW_HF_TOK_UNUSED);
        KW_CHECK_EQ_INT(v.types[5], KW_HF_TOK_CONTROL);
        KW_CHECK_EQ_INT(v.types[6], KW_HF_TOK_USER_DEFINED);
        KW_CHECK_EQ_INT((int)v.n_merges, 2);
        KW_CHECK(!strcmp(v.merges[0], "a b") && !strcmp(v.merges[1], "ab b"));
        KW_CHECK(!strcmp(v.pre, "qwen2"));
        KW_CHECK_EQ_INT(v.bos, 5);
        KW_CHECK_EQ_INT(v.eos, 6);
        KW_CHECK_EQ_INT(v.pad, -1);
        KW_CHECK(v.add_bos);
        KW_CHECK(v.chat_template && !strcmp(v.chat_template, "{{ x }}"));
        kw_hf_vocab_free(&v);
    }
    check_error("{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", "model type 'Unigram' is not supported");
    check_error("{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", "model type 'WordPiece' is not supported");
    check_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"Metaspace\"}}",
                "pre-tokenizer 'Metaspace' is not supported");
    check_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"Sequence\","
                "\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\w+\"},\"behavior\":\"Isolated\"},"
                "{\"type\":\"ByteLevel\",\"use_regex\":false}]}}",
                "regex not recognised");
    check_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"ab\"]},\"pre_tokenizer\":{\"type\":\"ByteLevel\"}}",
                "is not \"a b\"");
    check_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-3},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"ByteLevel\"}}", "bad id");
    check_error("not json", "not a JSON object");
    return kw_test_finish();
}
