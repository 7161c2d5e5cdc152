/* kvwise/hfimport.h - Hugging Face tokenizers (tokenizer.json +
 * tokenizer_config.json) turned into GGUF vocab metadata.
 *
 * Supported: model type BPE with a ByteLevel pre-tokenizer (GPT-2 style
 * byte-level BPE: Qwen2/Qwen3, Llama 3, GPT-2). The pre-tokenizer is
 * recognised by its Split regex and becomes tokenizer.ggml.pre ("qwen2",
 * "llama-bpe", "gpt-2"). Other tokenizer types (Unigram, WordPiece,
 * SentencePiece-style BPE) and unknown regexes give a one-line error. */
#ifndef KVWISE_HFIMPORT_H
#define KVWISE_HFIMPORT_H
#include "kvwise/common.h"
#include "kvwise/gguf.h"

/* GGUF token types (tokenizer.ggml.token_type). */
enum { KW_HF_TOK_NORMAL = 1, KW_HF_TOK_CONTROL = 3, KW_HF_TOK_USER_DEFINED = 4, KW_HF_TOK_UNUSED = 5 };

typedef struct kw_hf_vocab {
    const char **tokens;     /* n_tokens strings in id order (gaps are "[PADn]", type unused) */
    int32_t *types;          /* KW_HF_TOK_* per token */
    int32_t n_tokens;
    const char **merges;     /* "A B" strings in rank order */
    int64_t n_merges;
    char pre[32];            /* tokenizer.ggml.pre */
    int32_t bos, eos, pad;   /* -1 when the config names none */
    bool add_bos;
    char *chat_template;     /* NULL if tokenizer_config.json has none */
    char *pool;              /* every string above lives here */
} kw_hf_vocab;

/* Reads DIR/tokenizer.json and DIR/tokenizer_config.json (the config is
 * optional). Returns 0, or -1 with a one-line error. */
int kw_hf_vocab_load(const char *dir, kw_hf_vocab *v, kw_err *err);
/* Same from JSON text (tests, fuzzing); config_json may be NULL. */
int kw_hf_vocab_parse(const char *tokenizer_json, size_t len, const char *config_json, size_t config_len,
                      kw_hf_vocab *v, kw_err *err);
/* Sets tokenizer.ggml.* (model gpt2, pre, tokens, token_type, merges, bos /
 * eos / padding ids, add_bos_token) and tokenizer.chat_template. */
void kw_hf_vocab_write_kvs(const kw_hf_vocab *v, kw_gguf_writer *w);
void kw_hf_vocab_free(kw_hf_vocab *v);

#endif
