/* kvwise/tokenizer.h - tokenizers from GGUF metadata.
 *
 * tokenizer.ggml.model = "llama": SentencePiece-style BPE over scores with
 * byte fallback. "gpt2": byte-level BPE over merges with the pre-tokenizer
 * named by tokenizer.ggml.pre (regexes run with PCRE2, Unicode classes).
 * Special/control tokens can be parsed from text (parse_special). */
#ifndef KVWISE_TOKENIZER_H
#define KVWISE_TOKENIZER_H
#include "kvwise/common.h"
#include "kvwise/gguf.h"

typedef struct kw_tokenizer kw_tokenizer;

/* Copies what it needs: the kw_gguf may be closed afterwards. Unsupported
 * models (bert, t5, ...) and malformed metadata give a one-line error. */
kw_tokenizer *kw_tokenizer_load(const kw_gguf *g, kw_err *err);
void kw_tokenizer_free(kw_tokenizer *t);

int32_t kw_tokenizer_n_vocab(const kw_tokenizer *t);
const char *kw_tokenizer_model_name(const kw_tokenizer *t);  /* "llama", "gpt2" */
const char *kw_tokenizer_pre_name(const kw_tokenizer *t);    /* "default", "qwen2", ... */

/* Tokenizes len bytes of text. add_special: BOS/EOS as the vocab says.
 * parse_special: 0 (false): control tokens' text is plain text; 1 (true):
 * text like "<|im_start|>" becomes that special token; KW_SPECIAL_TEMPLATE
 * (common.h): as 1, except where kw_tokenizer_defuse marked the text (a
 * rendered chat prompt: the template's own text is parsed, the messages'
 * content is not). *ids is malloc'd (caller frees). Returns 0 or -1. */
int kw_tokenize(const kw_tokenizer *t, const char *text, size_t len, bool add_special,
                int parse_special, int32_t **ids, size_t *n_ids, kw_err *err);
/* Marks every control token's text in s[0..len) with the byte
 * KW_SPECIAL_DEFUSE in front, so that kw_tokenize(KW_SPECIAL_TEMPLATE) reads
 * it as plain text (and drops the mark). Returns 0 when s holds none (*out
 * NULL: use s as it is), 1 with *out malloc'd (NUL-terminated, *out_len
 * bytes), -1 when out of memory. */
int kw_tokenizer_defuse(const kw_tokenizer *t, const char *s, size_t len, char **out, size_t *out_len);

int32_t kw_token_bos(const kw_tokenizer *t);     /* -1 if none */
int32_t kw_token_eos(const kw_tokenizer *t);
int32_t kw_token_eot(const kw_tokenizer *t);
bool kw_tokenizer_adds_bos(const kw_tokenizer *t);
bool kw_token_is_eog(const kw_tokenizer *t, int32_t id);      /* end of generation (EOS, EOT, <|im_end|> ...) */
bool kw_token_is_special(const kw_tokenizer *t, int32_t id);  /* control / user-defined special */
const char *kw_token_text(const kw_tokenizer *t, int32_t id); /* the vocab entry as stored; NULL if out of range */
int32_t kw_token_lookup(const kw_tokenizer *t, const char *text, size_t len); /* exact vocab entry -> id or -1 */

/* The bytes a token stands for (byte-level / "▁" / <0xNN> decoded).
 * Special tokens give their text only if render_special. Returns the
 * length (may exceed cap: then only cap bytes were written). */
size_t kw_token_to_piece(const kw_tokenizer *t, int32_t id, char *buf, size_t cap, bool render_special);
/* The longest piece of any token, in bytes. A kw_detok_push output buffer of
 * 3 * max_piece + 16 bytes always holds a push (each byte may become U+FFFD). */
size_t kw_tokenizer_max_piece(const kw_tokenizer *t);
/* The most bytes of text one token can stand for, so that len bytes make at
 * least len / max_text tokens (what lets a prompt too long for the context
 * be refused before it is tokenized). 0 when no such bound holds (a token
 * that eats the whitespace beside it). */
size_t kw_tokenizer_max_text(const kw_tokenizer *t);

/* A whole sequence as llama.cpp's llama_detokenize(remove_special = false,
 * unparse_special = render_special): the pieces joined, the first one's
 * SentencePiece space dropped (add_space_prefix vocabs), and for byte-level
 * vocabs that ask for it " ," " ." " 's" ... cleaned up. The bytes are raw
 * (possibly invalid UTF-8). *out is malloc'd and NUL-terminated. */
int kw_detokenize(const kw_tokenizer *t, const int32_t *ids, size_t n, bool render_special, char **out,
                  size_t *len, kw_err *err);

/* Streaming detokenizer: emits only complete UTF-8; an incomplete sequence
 * is held back until the next token completes it (or flush). It also drops
 * the SentencePiece leading space of the very first piece when the vocab
 * says so. */
typedef struct kw_detok { char pend[16]; int n_pend; bool started; } kw_detok;
void kw_detok_init(kw_detok *d);
/* Same, for a continuation (text after a prompt): no leading space is dropped. */
void kw_detok_init_continuation(kw_detok *d);
/* Appends the text of token id to out (cap bytes); returns bytes written. */
size_t kw_detok_push(const kw_tokenizer *t, kw_detok *d, int32_t id, bool render_special, char *out, size_t cap);
/* Emits what is held back (invalid bytes become U+FFFD). */
size_t kw_detok_flush(kw_detok *d, char *out, size_t cap);

#endif
