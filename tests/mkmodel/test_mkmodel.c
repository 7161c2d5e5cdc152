/* test_mkmodel.c - random-weight models: the BPE vocabulary, shapes and
 * types of every architecture and weight type, weight statistics,
 * determinism (byte-identical for a seed, different for another seed),
 * K-quant fallbacks, `quantize` re-encoding, llama-quantize's per-tensor
 * mixes (Q4_K_M, Q5_K_M, Q6_K), and shape errors. */
#include "testutil.h"
#include <string.h>
#include <stdlib.h>
#include "kvwise/gguf.h"
#include "kvwise/tensor.h"
#include "mkmodel/mkmodel.h"

static const char *tmp(const char *name) { return kw_test_path(kw_test_tmpdir(), name); }

static kw_mk_shape small_shape(const char *arch) {
    kw_mk_shape s;
    kw_err e;
    kw_mk_preset("tiny", &s, &e);
    snprintf(s.arch, sizeof s.arch, "%s", arch);
    s.n_layer = 2;
    s.n_embd = 256;
    s.n_ff = 256;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.head_dim = 64;
    s.n_vocab = 320;
    s.tied = strcmp(arch, "llama") != 0;
    return s;
}

static void test_vocab(void) {
    kw_mk_vocab v, v2;
    kw_err e = {{0}};
    KW_CHECK(kw_mk_vocab_build(100, &v, &e) == -1 && strstr(e.msg, "too small"));
    KW_CHECK(kw_mk_vocab_build(1024, &v, &e) == 0);
    KW_CHECK(kw_mk_vocab_build(1024, &v2, &e) == 0);
    KW_CHECK_EQ_INT(v.n_tokens, 1024);
    KW_CHECK(v.n_merges > 200);   /* the corpus supports a few hundred merges */
    KW_CHECK(!strcmp(v.tokens[v.eos], "<|endoftext|>"));
    KW_CHECK(!strcmp(v.tokens[v.im_start], "<|im_start|>") && !strcmp(v.tokens[v.im_end], "<|im_end|>"));
    KW_CHECK(strncmp(v.tokens[1023], "<|reserved_", 11) == 0);
    KW_CHECK(v.types[v.eos] == 3 && v.types[0] == 1 && v.types[1023] == 3);
    /* GPT-2 byte mapping: 'A' is itself, space is U+0120 (Ġ), newline U+010A (Ċ) */
    KW_CHECK(!strcmp(v.tokens['A'], "A") && !strcmp(v.tokens[' '], "\xc4\xa0") && !strcmp(v.tokens['\n'], "\xc4\x8a"));
    /* deterministic, unique, and every merge's parts and result are tokens */
    int same = v.n_merges == v2.n_merges, dup = 0, bad_merge = 0;
    for (int i = 0; i < v.n_tokens; i++) if (strcmp(v.tokens[i], v2.tokens[i])) same = 0;
    for (int i = 0; i < v.n_tokens; i++)
        for (int j = i + 1; j < v.n_tokens; j++) if (!strcmp(v.tokens[i], v.tokens[j])) dup++;
    for (int m = 0; m < v.n_merges; m++) {
        char a[256], b[256], ab[512];
        const char *sp = strchr(v.merges[m], ' ');
        if (!sp || strchr(sp + 1, ' ')) { bad_merge++; continue; }
        snprintf(a, sizeof a, "%.*s", (int)(sp - v.merges[m]), v.merges[m]);
        snprintf(b, sizeof b, "%s", sp + 1);
        snprintf(ab, sizeof ab, "%s%s", a, b);
        int fa = 0, fb = 0, fab = 0;
        for (int i = 0; i < v.n_tokens; i++) {
            fa |= !strcmp(v.tokens[i], a);
            fb |= !strcmp(v.tokens[i], b);
            fab |= !strcmp(v.tokens[i], ab);
        }
        if (!fa || !fb || !fab) bad_merge++;
    }
    KW_CHECK(same);
    KW_CHECK_EQ_INT(dup, 0);
    KW_CHECK_EQ_INT(bad_merge, 0);
    /* a learned token for a frequent word of the corpus */
    int found_the = 0;
    for (int i = 0; i < v.n_tokens; i++) found_the |= !strcmp(v.tokens[i], "\xc4\xa0the");
    KW_CHECK(found_the);
    kw_mk_vocab_free(&v);
    kw_mk_vocab_free(&v2);
}

static int64_t arch_int(const kw_gguf *g, const char *arch, const char *k) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, k);
    int64_t v = -1;
    kw_gguf_get_int(g, key, &v);
    return v;
}

/* mean and std of a tensor's dequantized values */
static void tensor_stats(const kw_gguf_tensor *t, double *mean, double *std) {
    int64_t cols = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    size_t rb = kw_row_bytes(t->type, cols);
    float *row = malloc((size_t)cols * sizeof *row);
    double s = 0, s2 = 0;
    for (int64_t r = 0; r < rows; r++) {
        kw_dequantize_row(t->type, (const uint8_t *)t->data + (size_t)r * rb, row, cols);
        for (int64_t k = 0; k < cols; k++) { s += row[k]; s2 += (double)row[k] * row[k]; }
    }
    double n = (double)(cols * rows);
    *mean = s / n;
    *std = sqrt(s2 / n - *mean * *mean);
    free(row);
}

static void check_model(const char *path, const kw_mk_shape *s, uint32_t wtype) {
    kw_err e = {{0}};
    kw_gguf *g = kw_gguf_open(path, &e);
    KW_CHECK_MSG(g != NULL, "%s", e.msg);
    if (!g) return;
    const char *a = s->arch;
    KW_CHECK(!strcmp(kw_gguf_get_str(g, "general.architecture"), a));
    KW_CHECK_EQ_INT(arch_int(g, a, "block_count"), s->n_layer);
    KW_CHECK_EQ_INT(arch_int(g, a, "embedding_length"), s->n_embd);
    KW_CHECK_EQ_INT(arch_int(g, a, "feed_forward_length"), s->n_ff);
    KW_CHECK_EQ_INT(arch_int(g, a, "attention.head_count"), s->n_head);
    KW_CHECK_EQ_INT(arch_int(g, a, "attention.head_count_kv"), s->n_head_kv);
    KW_CHECK_EQ_INT(arch_int(g, a, "attention.key_length"), s->head_dim);
    KW_CHECK(!strcmp(kw_gguf_get_str(g, "tokenizer.ggml.model"), "gpt2"));
    KW_CHECK(kw_gguf_get_str(g, "tokenizer.chat_template") && strstr(kw_gguf_get_str(g, "tokenizer.chat_template"), "<|im_start|>"));
    const kw_gguf_kv *toks = kw_gguf_find(g, "tokenizer.ggml.tokens");
    KW_CHECK(toks && toks->arr_n == (uint64_t)s->n_vocab);
    const kw_gguf_kv *tt = kw_gguf_find(g, "tokenizer.ggml.token_type");
    KW_CHECK(tt && tt->arr_type == KW_GGUF_INT32 && tt->arr_n == (uint64_t)s->n_vocab);
    KW_CHECK(kw_gguf_find(g, "tokenizer.ggml.merges") != NULL);

    int per_layer = 9 + (s->qkv_bias ? 3 : 0) + (s->qk_norm ? 2 : 0);
    KW_CHECK_EQ_INT(g->n_tensors, 2 + (s->tied ? 0 : 1) + s->n_layer * per_layer);
    KW_CHECK((kw_gguf_find_tensor(g, "output.weight") == NULL) == s->tied);
    KW_CHECK((kw_gguf_find_tensor(g, "blk.1.attn_q.bias") != NULL) == s->qkv_bias);
    KW_CHECK((kw_gguf_find_tensor(g, "blk.1.attn_k_norm.weight") != NULL) == s->qk_norm);
    const kw_gguf_tensor *q = kw_gguf_find_tensor(g, "blk.0.attn_q.weight");
    KW_CHECK(q && q->ne[0] == s->n_embd && q->ne[1] == (int64_t)s->n_head * s->head_dim && q->type == wtype);
    const kw_gguf_tensor *k = kw_gguf_find_tensor(g, "blk.1.attn_k.weight");
    KW_CHECK(k && k->ne[1] == (int64_t)s->n_head_kv * s->head_dim && k->type == wtype);
    const kw_gguf_tensor *o = kw_gguf_find_tensor(g, "blk.1.attn_output.weight");
    KW_CHECK(o && o->ne[0] == (int64_t)s->n_head * s->head_dim && o->ne[1] == s->n_embd);
    const kw_gguf_tensor *d = kw_gguf_find_tensor(g, "blk.0.ffn_down.weight");
    KW_CHECK(d && d->ne[0] == s->n_ff && d->ne[1] == s->n_embd && d->type == wtype);
    const kw_gguf_tensor *emb = kw_gguf_find_tensor(g, "token_embd.weight");
    KW_CHECK(emb && emb->ne[0] == s->n_embd && emb->ne[1] == s->n_vocab && emb->type == wtype);
    int non_f32_1d = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].n_dims == 1 && g->tensors[i].type != KW_TYPE_F32) non_f32_1d++;
    KW_CHECK_EQ_INT(non_f32_1d, 0);

    /* Statistics over >= 65536 values: the sample std of N(0, 0.02) is
     * within 1% of 0.02; 4-bit quantization adds noise of about a quarter
     * of its step (amax/8 ~ 0.009 here), ~0.0025 rms, so std <= 0.0202.
     * 10% bounds leave margin for every type while still catching a wrong
     * scale. Norm gains are 1 + N(0, 0.05). */
    double mean, std;
    if (d) {
        tensor_stats(d, &mean, &std);
        KW_CHECK_NEAR(mean, 0.0, 0.002);
        KW_CHECK_NEAR(std, 0.02, 0.002);
    }
    const kw_gguf_tensor *n = kw_gguf_find_tensor(g, "blk.0.ffn_norm.weight");
    if (n) {
        tensor_stats(n, &mean, &std);
        KW_CHECK_NEAR(mean, 1.0, 0.02);
        KW_CHECK_NEAR(std, 0.05, 0.015);
    }
    kw_gguf_close(g);
}

static void test_arch_and_types(void) {
    static const uint32_t types[] = {KW_TYPE_F32, KW_TYPE_F16, KW_TYPE_BF16, KW_TYPE_Q8_0, KW_TYPE_Q4_0, KW_TYPE_Q4_1,
                                     KW_TYPE_Q5_0, KW_TYPE_Q5_1, KW_TYPE_Q4_K, KW_TYPE_Q5_K, KW_TYPE_Q6_K};
    static const char *archs[] = {"llama", "qwen2", "qwen3"};
    kw_err e = {{0}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        kw_mk_shape s = small_shape(archs[i % 3]);
        kw_mk_shape_check(&s, &e);
        char name[64];
        snprintf(name, sizeof name, "m-%s.gguf", kw_type_name(types[i]));
        KW_CHECK_MSG(kw_mk_write(&s, types[i], 7, tmp(name), &e) == 0, "%s", e.msg);
        check_model(tmp(name), &s, types[i]);
    }
    /* a type mkmodel cannot write is refused */
    kw_mk_shape s = small_shape("llama");
    KW_CHECK(kw_mk_write(&s, KW_TYPE_Q8_K, 1, tmp("x.gguf"), &e) == -1 && strstr(e.msg, "not one mkmodel writes"));
}

static void test_determinism(void) {
    kw_err e = {{0}};
    kw_mk_shape s = small_shape("qwen2");
    KW_CHECK(kw_mk_write(&s, KW_TYPE_Q4_0, 42, tmp("a.gguf"), &e) == 0);
    KW_CHECK(kw_mk_write(&s, KW_TYPE_Q4_0, 42, tmp("b.gguf"), &e) == 0);
    KW_CHECK(kw_mk_write(&s, KW_TYPE_Q4_0, 43, tmp("c.gguf"), &e) == 0);
    size_t la, lb, lc;
    char *a = kw_test_read_file(tmp("a.gguf"), &la), *b = kw_test_read_file(tmp("b.gguf"), &lb),
         *c = kw_test_read_file(tmp("c.gguf"), &lc);
    KW_CHECK(a && b && c);
    if (a && b && c) {
        KW_CHECK(la == lb && !memcmp(a, b, la));   /* same seed: byte-identical */
        KW_CHECK(la == lc);                        /* same shape: same layout */
        KW_CHECK(memcmp(a, c, la) != 0);           /* another seed: other weights */
        /* ...in every tensor, while the metadata except the description is shared */
        kw_gguf *ga = kw_gguf_open_mem(a, la, &e), *gc = kw_gguf_open_mem(c, lc, &e);
        KW_CHECK(ga && gc);
        int equal_tensors = 0;
        for (uint64_t i = 0; ga && gc && i < ga->n_tensors; i++)
            if (!memcmp(ga->tensors[i].data, gc->tensors[i].data, ga->tensors[i].nbytes)) equal_tensors++;
        KW_CHECK_EQ_INT(equal_tensors, 0);
        /* two tensors of one model differ too (each has its own stream) */
        if (ga) {
            const kw_gguf_tensor *x = kw_gguf_find_tensor(ga, "blk.0.ffn_gate.weight"), *y = kw_gguf_find_tensor(ga, "blk.0.ffn_up.weight");
            KW_CHECK(x && y && memcmp(x->data, y->data, x->nbytes) != 0);
        }
        kw_gguf_close(ga);
        kw_gguf_close(gc);
    }
    free(a); free(b); free(c);
}

static void test_fallbacks_and_errors(void) {
    KW_CHECK_EQ_INT(kw_mk_matrix_type(KW_TYPE_Q4_K, 896), KW_TYPE_Q5_0);
    KW_CHECK_EQ_INT(kw_mk_matrix_type(KW_TYPE_Q5_K, 896), KW_TYPE_Q5_1);
    KW_CHECK_EQ_INT(kw_mk_matrix_type(KW_TYPE_Q6_K, 896), KW_TYPE_Q8_0);
    KW_CHECK_EQ_INT(kw_mk_matrix_type(KW_TYPE_Q4_K, 4864), KW_TYPE_Q4_K);
    KW_CHECK_EQ_INT(kw_mk_matrix_type(KW_TYPE_Q4_0, 48), KW_TYPE_F16);
    KW_CHECK_EQ_INT(kw_mk_matrix_type(KW_TYPE_Q6_K, 48), KW_TYPE_F16);
    kw_err e = {{0}};
    kw_mk_shape s;
    KW_CHECK(kw_mk_preset("nope", &s, &e) == -1 && strstr(e.msg, "qwen3-0.6b"));
    KW_CHECK(kw_mk_preset("qwen2.5-0.5b", &s, &e) == 0 && s.n_embd == 896 && s.qkv_bias && s.tied && s.n_vocab == 151936);
    KW_CHECK(kw_mk_preset("qwen3-0.6b", &s, &e) == 0 && s.head_dim == 128 && s.qk_norm && s.n_layer == 28);
    KW_CHECK(kw_mk_preset("llama3.2-1b", &s, &e) == 0 && s.n_ff == 8192 && s.rope_base == 500000.0f && s.n_head_kv == 8);
    s = small_shape("mamba");
    KW_CHECK(kw_mk_shape_check(&s, &e) == -1 && strstr(e.msg, "unknown architecture 'mamba'"));
    s = small_shape("llama");
    s.n_head_kv = 3;
    KW_CHECK(kw_mk_shape_check(&s, &e) == -1 && strstr(e.msg, "multiple of kv heads"));
    s = small_shape("llama");
    s.n_vocab = 10;
    KW_CHECK(kw_mk_write(&s, KW_TYPE_F16, 1, tmp("v.gguf"), &e) == -1 && strstr(e.msg, "vocab 10"));
    /* an embd that is not a multiple of 256 with a K-quant: the matrices fall back */
    s = small_shape("qwen2");
    s.n_embd = 96;
    s.head_dim = 24;
    KW_CHECK_MSG(kw_mk_write(&s, KW_TYPE_Q4_K, 1, tmp("fb.gguf"), &e) == 0, "%s", e.msg);
    kw_gguf *g = kw_gguf_open(tmp("fb.gguf"), &e);
    KW_CHECK(g != NULL);
    if (g) {
        KW_CHECK_EQ_INT(kw_gguf_find_tensor(g, "blk.0.attn_q.weight")->type, KW_TYPE_Q5_0);   /* rows of 96 */
        KW_CHECK_EQ_INT(kw_gguf_find_tensor(g, "blk.0.ffn_down.weight")->type, KW_TYPE_Q4_K); /* rows of 256 */
        kw_gguf_close(g);
    }
}

static void test_quantize_file(void) {
    kw_err e = {{0}};
    kw_mk_shape s = small_shape("qwen3");
    KW_CHECK(kw_mk_write(&s, KW_TYPE_F32, 5, tmp("src.gguf"), &e) == 0);
    KW_CHECK_MSG(kw_mk_quantize_file(tmp("src.gguf"), tmp("q8.gguf"), KW_TYPE_Q8_0, NULL, &e) == 0, "%s", e.msg);
    kw_gguf *a = kw_gguf_open(tmp("src.gguf"), &e), *b = kw_gguf_open(tmp("q8.gguf"), &e);
    KW_CHECK(a && b);
    if (a && b) {
        KW_CHECK_EQ_INT(b->n_tensors, a->n_tensors);
        KW_CHECK_EQ_INT(b->n_kv, a->n_kv);
        int64_t ft = -1;
        KW_CHECK(kw_gguf_get_int(b, "general.file_type", &ft) && ft == 7);
        const kw_gguf_kv *ta = kw_gguf_find(a, "tokenizer.ggml.tokens"), *tb = kw_gguf_find(b, "tokenizer.ggml.tokens");
        KW_CHECK(ta && tb && ta->arr_n == tb->arr_n && !strcmp(ta->arr_str[300].s, tb->arr_str[300].s));
        int wrong = 0;
        double max_err = 0;
        for (uint64_t i = 0; i < a->n_tensors; i++) {
            const kw_gguf_tensor *x = &a->tensors[i], *y = kw_gguf_find_tensor(b, x->name.s);
            if (!y) { wrong++; continue; }
            uint32_t want = x->n_dims == 2 ? KW_TYPE_Q8_0 : KW_TYPE_F32;
            if (y->type != want || y->ne[0] != x->ne[0] || y->ne[1] != x->ne[1]) wrong++;
            if (x->n_dims == 1 && memcmp(x->data, y->data, x->nbytes)) wrong++;   /* 1-D copied as is */
            if (x->n_dims == 2) {
                float back[256];
                kw_dequantize_row(y->type, y->data, back, 256);
                const float *orig = x->data;
                for (int k = 0; k < 256; k++) {
                    double d = fabs((double)back[k] - orig[k]);
                    if (d > max_err) max_err = d;
                }
            }
        }
        KW_CHECK_EQ_INT(wrong, 0);
        /* Q8_0 rounds to amax/127 steps: error <= amax/254 per value; amax of
         * N(0,0.02) over 32 values is below 0.1 (5 sigma), so < 4e-4. */
        KW_CHECK(max_err > 0 && max_err < 4e-4);
    }
    kw_gguf_close(a);
    kw_gguf_close(b);
    KW_CHECK(kw_mk_quantize_file(tmp("src.gguf"), tmp("bad.gguf"), KW_TYPE_Q8_K, NULL, &e) == -1 && strstr(e.msg, "not a target type"));
    KW_CHECK(kw_mk_quantize_file(tmp("missing.gguf"), tmp("bad.gguf"), KW_TYPE_Q8_0, NULL, &e) == -1 && strstr(e.msg, "missing.gguf"));
}

/* llama-quantize's "more bits" layers, written out (not computed): 16
 * layers -> the first two, the last two, and 4 7 10 13; 4 -> 2 3. */
static bool in_list(int il, const int *list, int n) {
    for (int i = 0; i < n; i++) if (list[i] == il) return true;
    return false;
}
static const int k_more16[] = {0, 1, 4, 7, 10, 13, 14, 15};

/* Every tensor of a 16-layer llama (ff 384: ffn_down rows are not a
 * multiple of 256) quantized from F32 to a mix, against the rule. */
static void check_dense_mix(const char *path, uint32_t base, uint32_t down_fb, uint32_t down_more, int ft_want) {
    kw_err e = {{0}};
    kw_gguf *g = kw_gguf_open(path, &e);
    KW_CHECK_MSG(g != NULL, "%s", e.msg);
    if (!g) return;
    int64_t ft = -1;
    KW_CHECK(kw_gguf_get_int(g, "general.file_type", &ft) && ft == ft_want);
    int wrong = 0, n_v6 = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kw_gguf_tensor *t = &g->tensors[i];
        const char *nm = t->name.s;
        int il = -1;
        sscanf(nm, "blk.%d.", &il);
        bool more = il >= 0 && in_list(il, k_more16, 8);
        uint32_t want;
        if (t->n_dims == 1) want = KW_TYPE_F32;
        else if (!strcmp(nm, "output.weight")) want = KW_TYPE_Q6_K;
        else if (strstr(nm, "attn_v.weight")) want = more && base != KW_TYPE_Q6_K ? KW_TYPE_Q6_K : base;
        else if (strstr(nm, "ffn_down")) want = more ? down_more : down_fb;
        else want = base;
        if (t->type != want) {
            wrong++;
            fprintf(stderr, "  %s: %s, want %s\n", nm, kw_type_name(t->type), kw_type_name(want));
        }
        if (strstr(nm, "attn_v.weight") && t->type == KW_TYPE_Q6_K) n_v6++;
    }
    KW_CHECK_EQ_INT(wrong, 0);
    KW_CHECK_EQ_INT(n_v6, base == KW_TYPE_Q6_K ? 16 : 8);
    kw_gguf_close(g);
}

static uint32_t type_of(const kw_gguf *g, const char *name) {
    const kw_gguf_tensor *t = kw_gguf_find_tensor(g, name);
    return t ? t->type : 0xFFFF;
}

static void test_mixes(void) {
    KW_CHECK_EQ_INT(kw_mk_target_from_name("Q4_K_M"), KW_MK_MIX_Q4_K_M);
    KW_CHECK_EQ_INT(kw_mk_target_from_name("q5_k_m"), KW_MK_MIX_Q5_K_M);
    KW_CHECK_EQ_INT(kw_mk_target_from_name("q6_k"), KW_MK_MIX_Q6_K);
    KW_CHECK_EQ_INT(kw_mk_target_from_name("q4_k"), KW_TYPE_Q4_K);
    KW_CHECK_EQ_INT(kw_mk_target_from_name("q8_k"), -1);
    KW_CHECK_EQ_INT(kw_mk_target_from_name("q4_k_x"), -1);
    KW_CHECK(!strcmp(kw_mk_target_name(KW_MK_MIX_Q5_K_M), "Q5_K_M"));
    KW_CHECK_EQ_INT(kw_mk_target_file_type(KW_MK_MIX_Q4_K_M), 15);
    KW_CHECK_EQ_INT(kw_mk_target_file_type(KW_MK_MIX_Q5_K_M), 17);
    KW_CHECK(kw_mk_quantizes("blk.0.attn_q.weight", 2) && !kw_mk_quantizes("blk.0.ffn_gate_inp.weight", 2) &&
             !kw_mk_quantizes("blk.0.attn_norm.weight", 2) && !kw_mk_quantizes("blk.0.ffn_up.weight", 1) &&
             !kw_mk_quantizes("blk.0.attn_q.bias", 2) && kw_mk_quantizes("blk.0.ffn_down_exps.weight", 3));

    kw_err e = {{0}};
    kw_mk_shape s = small_shape("llama");
    s.n_layer = 16;
    s.n_ff = 384;
    KW_CHECK(kw_mk_write(&s, KW_TYPE_F32, 9, tmp("mix_src.gguf"), &e) == 0);
    KW_CHECK_MSG(kw_mk_quantize_file(tmp("mix_src.gguf"), tmp("q4km.gguf"), KW_MK_MIX_Q4_K_M, NULL, &e) == 0, "%s", e.msg);
    check_dense_mix(tmp("q4km.gguf"), KW_TYPE_Q4_K, KW_TYPE_Q5_0, KW_TYPE_Q8_0, 15);
    KW_CHECK_MSG(kw_mk_quantize_file(tmp("mix_src.gguf"), tmp("q5km.gguf"), KW_MK_MIX_Q5_K_M, NULL, &e) == 0, "%s", e.msg);
    check_dense_mix(tmp("q5km.gguf"), KW_TYPE_Q5_K, KW_TYPE_Q5_1, KW_TYPE_Q8_0, 17);
    KW_CHECK_MSG(kw_mk_quantize_file(tmp("mix_src.gguf"), tmp("q6k.gguf"), KW_MK_MIX_Q6_K, NULL, &e) == 0, "%s", e.msg);
    check_dense_mix(tmp("q6k.gguf"), KW_TYPE_Q6_K, KW_TYPE_Q8_0, KW_TYPE_Q8_0, 18);
    /* mkmodel --type q4_k_m writes the same types as quantize of the F32 file */
    KW_CHECK(kw_mk_write(&s, KW_MK_MIX_Q4_K_M, 9, tmp("mk_q4km.gguf"), &e) == 0);
    check_dense_mix(tmp("mk_q4km.gguf"), KW_TYPE_Q4_K, KW_TYPE_Q5_0, KW_TYPE_Q8_0, 15);

    /* tied: token_embd takes output's Q6_K */
    s = small_shape("qwen3");
    KW_CHECK(kw_mk_write(&s, KW_MK_MIX_Q4_K_M, 9, tmp("mk_tied.gguf"), &e) == 0);
    kw_gguf *g = kw_gguf_open(tmp("mk_tied.gguf"), &e);
    KW_CHECK(g && type_of(g, "token_embd.weight") == KW_TYPE_Q6_K && type_of(g, "blk.0.attn_q.weight") == KW_TYPE_Q4_K);
    kw_gguf_close(g);

    /* 8 experts: attn_v, attn_k Q8_0, attn_output Q5_K, router F32, expert
     * ffn_down by the layer in its name (4 layers: 2 and 3 get Q6_K) */
    KW_CHECK(kw_mk_preset("tiny-moe", &s, &e) == 0);
    s.n_ff_exp = 256;
    KW_CHECK(kw_mk_write(&s, KW_TYPE_F16, 9, tmp("moe_src.gguf"), &e) == 0);
    KW_CHECK_MSG(kw_mk_quantize_file(tmp("moe_src.gguf"), tmp("moe_q4km.gguf"), KW_MK_MIX_Q4_K_M, NULL, &e) == 0, "%s", e.msg);
    g = kw_gguf_open(tmp("moe_q4km.gguf"), &e);
    KW_CHECK(g != NULL);
    if (g) {
        for (int il = 0; il < 4; il++) {
            char n[64];
            snprintf(n, sizeof n, "blk.%d.attn_v.weight", il);
            KW_CHECK_EQ_INT(type_of(g, n), KW_TYPE_Q8_0);
            snprintf(n, sizeof n, "blk.%d.attn_k.weight", il);
            KW_CHECK_EQ_INT(type_of(g, n), KW_TYPE_Q8_0);
            snprintf(n, sizeof n, "blk.%d.attn_output.weight", il);
            KW_CHECK_EQ_INT(type_of(g, n), KW_TYPE_Q5_K);
            snprintf(n, sizeof n, "blk.%d.ffn_gate_inp.weight", il);
            KW_CHECK_EQ_INT(type_of(g, n), KW_TYPE_F32);
            snprintf(n, sizeof n, "blk.%d.ffn_down_exps.weight", il);
            KW_CHECK_EQ_INT(type_of(g, n), il >= 2 ? KW_TYPE_Q6_K : KW_TYPE_Q4_K);
            snprintf(n, sizeof n, "blk.%d.ffn_up_exps.weight", il);
            KW_CHECK_EQ_INT(type_of(g, n), KW_TYPE_Q4_K);
        }
        KW_CHECK_EQ_INT(type_of(g, "token_embd.weight"), KW_TYPE_Q4_K);
        KW_CHECK_EQ_INT(type_of(g, "output.weight"), KW_TYPE_Q6_K);
    }
    kw_gguf_close(g);

    /* The rule on names alone, given in reverse order (the layer order is
     * numeric: blk.10 after blk.9): a Qwen3-8B-like 36 layers -> more bits
     * on 0-3, 31-35 and 6 9 ... 30; an 80-layer GQA llama (70B class)
     * gives its other attn_v Q5_K. */
    enum { NL = 80 };
    static char buf[2 * NL][40];
    const char *names[2 * NL];
    uint32_t dims[2 * NL], types[2 * NL];
    int64_t ne0[2 * NL];
    for (int pass = 0; pass < 2; pass++) {
        int nl = pass ? 80 : 36;
        for (int il = 0; il < nl; il++) {
            int a = 2 * (nl - 1 - il);
            snprintf(buf[a], sizeof buf[a], "blk.%d.attn_v.weight", il);
            snprintf(buf[a + 1], sizeof buf[a + 1], "blk.%d.ffn_down.weight", il);
            names[a] = buf[a];
            names[a + 1] = buf[a + 1];
            dims[a] = dims[a + 1] = 2;
            ne0[a] = 4096;
            ne0[a + 1] = 12288;
        }
        kw_mk_mix_model m = {"llama", nl, 64, 8, 0};
        KW_CHECK(kw_mk_mix_types(KW_MK_MIX_Q4_K_M, &m, 2 * nl, names, dims, ne0, types, &e) == 0);
        static const int more36[] = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 31, 32, 33, 34, 35};
        int wrong = 0;
        for (int il = 0; il < nl; il++) {
            int a = 2 * (nl - 1 - il);
            bool more = pass ? (il < 10 || il >= 70 || (il - 10) % 3 == 2) : in_list(il, more36, 18);
            uint32_t v = more ? KW_TYPE_Q6_K : pass ? KW_TYPE_Q5_K : KW_TYPE_Q4_K;
            uint32_t d = more ? KW_TYPE_Q6_K : KW_TYPE_Q4_K;
            if (types[a] != v || types[a + 1] != d) wrong++;
        }
        KW_CHECK_EQ_INT(wrong, 0);
    }
    /* an expert tensor without a layer in its name is refused */
    const char *bad[] = {"ffn_down_exps.weight"};
    uint32_t bd[] = {3}, bt[1];
    int64_t bn[] = {256};
    kw_mk_mix_model mm = {"qwen3moe", 4, 8, 2, 8};
    KW_CHECK(kw_mk_mix_types(KW_MK_MIX_Q4_K_M, &mm, 1, bad, bd, bn, bt, &e) == -1 && strstr(e.msg, "ffn_down_exps"));
}

int main(void) {
    test_vocab();
    test_arch_and_types();
    test_determinism();
    test_fallbacks_and_errors();
    test_quantize_file();
    test_mixes();
    return kw_test_finish();
}
