/* pretok.c - byte-level BPE pre-tokenizers: which regexes split the text into
 * words for a given tokenizer.ggml.pre, and the PCRE2 splitter that runs them.
 *
 * The regex strings are facts taken from llama.cpp's llama-vocab.cpp (which
 * in turn transcribes each model's tokenizer.json). They run here with PCRE2
 * in UTF + UCP mode (Unicode classes), $ meaning end of the piece only, and
 * PCRE2_MATCH_INVALID_UTF so that invalid UTF-8 never matches but is kept
 * (as a gap) instead of failing. \s and \S are rewritten to Unicode's
 * White_Space set (what llama.cpp and Hugging Face use): PCRE2's own \s
 * also matches U+180E. A list of several regexes works like
 * Hugging Face's Sequence of Split(behavior=Isolated): each regex splits
 * every piece left by the previous one into its matches and the gaps. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <string.h>
#include <stdlib.h>
#include <strings.h>
#include "tok_internal.h"
#include "kvwise/memory.h"

/* ---- the regex sets ---- */

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_CONTRACT "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

static const char *const re_default[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]", NULL};
static const char *const re_gpt2[] = {RE_GPT2, NULL};
static const char *const re_llama3[] = {
    RE_CONTRACT "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const re_deepseek_llm[] = {
    "[\\r\\n]",
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+",
    "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
    "\\s+$",
    "[一-龥ࠀ-一가-퟿]+",
    "\\p{N}+",
    NULL};
static const char *const re_deepseek_coder[] = {
    "[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}", NULL};
static const char *const re_deepseek_v3[] = {
    "\\p{N}{1,3}",
    "[一-龥぀-ゟ゠-ヿ]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const re_falcon[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]", NULL};
static const char *const re_starcoder[] = {"\\p{N}", RE_GPT2, NULL};
static const char *const re_qwen2[] = {
    RE_CONTRACT "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const re_poro[] = {" ?[^(\\s|.,!?…。，、।۔،)]+", NULL};
static const char *const re_viking[] = {" ?[^(\\s|.,!?…。，、।۔،)]+", "\\p{N}", NULL};
static const char *const re_tekken[] = {
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
    "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const re_gpt4o[] = {
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" RE_CONTRACT "?"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*" RE_CONTRACT "?"
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const re_chameleon[] = {
    "<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
    "[\\p{P}!-/:-@\\[-`{-~]", RE_GPT2, NULL};
static const char *const re_seed_coder[] = {
    RE_CONTRACT "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const re_bailing[] = {
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
    NULL};

/* name -> set. Fields: name, regexes, ignore_merges, add_bos default,
 * bos_null, keep_spaces (llama.cpp turns clean_spaces off for these). */
static const struct { const char *names; tk_pre_info info; } pre_table[] = {
    {"default", {"default", re_default, false, false, false, false}},
    {"llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral", {"llama3", re_llama3, true, true, false, false}},
    {"dbrx smaug-bpe", {"llama3", re_llama3, false, false, false, false}},
    {"deepseek-llm", {"deepseek-llm", re_deepseek_llm, false, false, false, true}},
    {"deepseek-coder", {"deepseek-coder", re_deepseek_coder, false, false, false, true}},
    {"deepseek-v3", {"deepseek-v3", re_deepseek_v3, false, false, false, true}},
    {"falcon", {"falcon", re_falcon, false, false, false, false}},
    {"mpt olmo jais gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de jina-v1-en jina-v2-code "
     "roberta-bpe exaone4",
     {"gpt2", re_gpt2, false, false, false, false}},
    {"trillion granite-docling", {"gpt2", re_gpt2, false, false, false, true}},
    {"starcoder refact codeshell exaone minerva-7b", {"starcoder", re_starcoder, false, false, false, false}},
    {"command-r smollm", {"starcoder", re_starcoder, false, false, false, true}},
    {"qwen2 deepseek-r1-qwen hunyuan", {"qwen2", re_qwen2, false, false, false, true}},
    {"megrez stablelm2", {"qwen2", re_qwen2, false, false, false, false}},
    {"poro-chat", {"poro", re_poro, false, false, false, true}},
    {"bloom gpt3-finnish", {"poro", re_poro, false, false, false, false}},
    {"chatglm-bpe glm4", {"chatglm4", re_llama3, false, false, true, false}},
    {"viking", {"viking", re_viking, false, false, false, true}},
    {"tekken", {"tekken", re_tekken, true, true, false, true}},
    {"gpt-4o llama4", {"gpt-4o", re_gpt4o, false, false, false, true}},
    {"chameleon", {"chameleon", re_chameleon, false, true, false, true}},
    {"seed-coder", {"seed-coder", re_seed_coder, false, false, false, true}},
    {"bailingmoe", {"bailingmoe", re_bailing, false, false, false, true}},
};

static bool name_in_list(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ' ');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && memcmp(p, name, n) == 0) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

const tk_pre_info *tk_pre_lookup(const char *pre) {
    if (!pre || !*pre) pre = "default";
    for (size_t i = 0; i < sizeof pre_table / sizeof pre_table[0]; i++)
        if (name_in_list(pre_table[i].names, pre)) return &pre_table[i].info;
    return NULL;
}

/* ---- compile / split ---- */

/* Unicode White_Space, as the contents of a character class */
#define WS_CLASS "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* Copies pattern re with \s / \S replaced by the White_Space class (inside
 * a [...] only \s occurs in our patterns and is spliced in). Returns a
 * malloc'd string or NULL. */
static char *rewrite_whitespace(const char *re) {
    size_t n = strlen(re), cap = n * (sizeof WS_CLASS + 4) + 1, o = 0; /* each escape grows at most that much */
    char *out = malloc(cap);
    if (!out) return NULL;
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        const char *ins = NULL;
        char c = re[i];
        if (c == '\\' && i + 1 < n) {
            char e = re[i + 1];
            if (e == 's') ins = in_class ? WS_CLASS : "[" WS_CLASS "]";
            else if (e == 'S' && !in_class) ins = "[^" WS_CLASS "]";
            if (ins) {
                size_t l = strlen(ins);
                memcpy(out + o, ins, l);
                o += l;
            } else {
                out[o++] = c;
                out[o++] = e;
            }
            i++;
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = true;
            out[o++] = c;
            if (i + 1 < n && re[i + 1] == '^') out[o++] = re[++i];
            if (i + 1 < n && re[i + 1] == ']') out[o++] = re[++i]; /* a literal ] first */
            continue;
        }
        if (c == ']' && in_class) in_class = false;
        out[o++] = c;
    }
    out[o] = '\0';
    return out;
}

int tk_pretok_compile(tk_pretok *p, const tk_pre_info *info, kw_err *err) {
    memset(p, 0, sizeof *p);
    for (int i = 0; info->regex[i]; i++) {
        if (i >= TK_MAX_REGEX) return kw_err_set(err, "pre-tokenizer %s: too many regexes", info->name);
        int ec = 0;
        PCRE2_SIZE eo = 0;
        char *re = rewrite_whitespace(info->regex[i]);
        if (!re) { tk_pretok_free(p); return kw_err_set(err, "pre-tokenizer: out of memory"); }
        pcre2_code *c = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED,
                                      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY,
                                      &ec, &eo, NULL);
        free(re);
        if (!c) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(ec, msg, sizeof msg);
            tk_pretok_free(p);
            return kw_err_set(err, "pre-tokenizer %s: regex %d does not compile at offset %zu: %s", info->name, i,
                              (size_t)eo, (const char *)msg);
        }
        pcre2_jit_compile(c, PCRE2_JIT_COMPLETE); /* optional: the interpreter is the fallback */
        p->code[p->n++] = c;
    }
    return 0;
}

void tk_pretok_free(tk_pretok *p) {
    for (int i = 0; i < p->n; i++) pcre2_code_free((pcre2_code *)p->code[i]);
    memset(p, 0, sizeof *p);
}

static int seg_push(tk_seglist *s, size_t len) {
    if (s->n == s->cap) {
        size_t *nl = tk_scratch_grow(s->len, &s->cap, s->n + 1, sizeof *s->len);
        if (!nl) return -1;
        s->len = nl;
    }
    s->len[s->n++] = len;
    return 0;
}

/* One match attempt; falls back to the interpreter when the JIT stack is too small. */
static int match_at(const pcre2_code *c, const char *s, size_t n, size_t off, pcre2_match_data *md) {
    int rc = pcre2_match(c, (PCRE2_SPTR)s, n, off, 0, md, NULL);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) rc = pcre2_match(c, (PCRE2_SPTR)s, n, off, PCRE2_NO_JIT, md, NULL);
    return rc;
}

/* Splits piece s[0..n) by one regex into matches and gaps, appended to out. */
static int split_piece(const pcre2_code *c, const char *s, size_t n, pcre2_match_data *md, tk_seglist *out,
                       kw_err *err) {
    size_t off = 0, last = 0;
    while (off < n) {
        int rc = match_at(c, s, n, off, md);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return kw_err_set(err, "pre-tokenizer: regex match failed: %s", (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) { /* empty match: step over one character */
            uint32_t cp;
            size_t step = tk_utf8_decode((const unsigned char *)s + ms, n - ms, &cp);
            off = ms + (step ? step : 1);
            continue;
        }
        if (ms > last && seg_push(out, ms - last) != 0) return kw_err_set(err, "pre-tokenizer: out of memory");
        if (seg_push(out, me - ms) != 0) return kw_err_set(err, "pre-tokenizer: out of memory");
        last = off = me;
    }
    if (last < n && seg_push(out, n - last) != 0) return kw_err_set(err, "pre-tokenizer: out of memory");
    return 0;
}

int tk_pretok_split(const tk_pretok *p, const char *text, size_t n, tk_seglist *out, kw_err *err) {
    out->n = 0;
    if (n == 0) return 0;
    if (seg_push(out, n) != 0) return kw_err_set(err, "pre-tokenizer: out of memory");
    if (p->n == 0) return 0;
    pcre2_match_data *md = pcre2_match_data_create(4, NULL);
    if (!md) return kw_err_set(err, "pre-tokenizer: out of memory");
    tk_seglist next = {0};
    int rc = 0;
    for (int r = 0; r < p->n && rc == 0; r++) {
        next.n = 0;
        size_t pos = 0;
        for (size_t i = 0; i < out->n && rc == 0; i++) {
            rc = split_piece((const pcre2_code *)p->code[r], text + pos, out->len[i], md, &next, err);
            pos += out->len[i];
        }
        tk_seglist tmp = *out;
        *out = next;
        next = tmp;
    }
    tk_seglist_free(&next);
    pcre2_match_data_free(md);
    return rc;
}
