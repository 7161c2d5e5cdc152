/* cmd_mkmodel.c - `kvwise mkmodel`: writes a deterministic random-weight
 * GGUF model of a named preset or custom shape, with a working byte-level
 * BPE tokenizer and a ChatML template (src/mkmodel/), or with an imported
 * Hugging Face tokenizer and its chat template (--hf-tokenizer, src/hfimport/). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli.h"
#include "kvwise/arch.h"
#include "kvwise/progress.h"
#include "kvwise/tensor.h"
#include "mkmodel/hybrid.h"
#include "mkmodel/mkmodel.h"

/* "  --arch A   llama | qwen2 (q/k/v biases) | ...": every architecture of
 * the table with the optional tensor groups it requires. */
static void print_arch_choices(FILE *f) {
    fprintf(f, "  --arch A         ");
    for (int i = 0; i < kw_arch_count(); i++) {
        const kw_arch_desc *a = kw_arch_at(i);
        if (kw_mk_is_hybrid(a->gguf_name)) continue;   /* listed below with the hybrids */
        fprintf(f, "%s%s", i ? " | " : "", a->gguf_name);
        int n = 0;
        for (int k = KW_FEAT_CORE + 1; k < KW_FEATURES; k++)
            if (kw_arch_presence(a, (kw_feature)k) == KW_REQUIRED)
                fprintf(f, "%s%s", n++ ? ", " : " (", kw_feature_label((kw_feature)k));
        if (n) fprintf(f, ")");
    }
    fprintf(f, " | qwen35 (Qwen3.5 hybrid: gated delta nets, gated attention every 4th layer) | qwen35moe (that\n"
               "                   hybrid with a mixture of experts and a gated shared expert)\n");
}

static void usage(FILE *f) {
    fprintf(f,
        "usage: kvwise mkmodel [--preset NAME] [options] -o FILE\n\n"
        "Writes a RANDOM-WEIGHT GGUF model (the text it generates is noise) for tests and\n"
        "benchmarks. Same options + same seed = byte-identical file. It carries a real\n"
        "byte-level BPE tokenizer (gpt2 model, gpt-2 pre-tokenizer, <|endoftext|> as BOS/EOS,\n"
        "ChatML <|im_start|>/<|im_end|>) and a ChatML chat template.\n\n"
        "  --preset NAME    tiny (default; llama 4x256, 8 heads, 2 kv, ff 768, vocab 1024),\n"
        "                   llama3.2-1b, qwen2.5-0.5b, qwen3-0.6b; mixtures of experts (qwen3moe):\n"
        "                   tiny-moe (4x256, 8 experts of width 128, 2 per token, vocab 1024),\n"
        "                   qwen3-30b-a3b (48x2048, 128 experts of width 768, 8 per token, vocab\n"
        "                   151936: 30.5B weights, 32 GB of q8_0), qwen3moe-bench (the benchmark\n"
        "                   shape: 6 of those layers, vocab 24576: 3.8B weights of which 0.39B\n"
        "                   are read per token, as in Qwen3-30B-A3B; 4.1 GB of q8_0);\n"
        "                   Qwen3.5 hybrids (qwen35): qwen35-tiny (8x256, layers 3 and 7 gated\n"
        "                   attention 4 heads/2 kv of 64, delta nets 2 key/4 value heads of 64,\n"
        "                   ff 512, vocab 1024), qwen35moe-tiny (those layers with 8 experts\n"
        "                   of 128, 2 per token, and a gated shared expert of 256), qwen3.5-0.8b,\n"
        "                   qwen3.5-9b, qwen3.5-27b (the\n"
        "                   published text shapes, vocab 248320; docs/GGUF.md lists them)\n"
        "  --type T         weight matrices: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k, or\n"
        "                   llama-quantize's per-tensor mixes q4_k_m q5_k_m q6_k (as `kvwise\n"
        "                   quantize --help` lists); default f16; norms, biases and the MoE\n"
        "                   router stay f32; a K-quant falls back to q5_0/q5_1/q8_0 for rows\n"
        "                   that are not a multiple of 256\n"
        "  --seed N         random seed (default 1)\n");
    print_arch_choices(f);
    fprintf(f,
        "  --layers N  --embd N  --ff N  --heads N  --kv-heads N  --head-dim N  --vocab N  --ctx N\n"
        "                   override the preset's shape (--embd/--heads also reset head_dim\n"
        "                   to embd/heads unless --head-dim is given)\n"
        "  --experts N  --experts-used N  --ff-exp N  --ff-shexp N\n"
        "                   mixture of experts (qwen3moe, qwen35moe): experts per layer, experts\n"
        "                   each token uses, the width of one expert; qwen35moe: the shared\n"
        "                   expert's width (default --ff)\n"
        "  --ssm-state N  --ssm-groups N  --ssm-heads N  --attn-interval N  --rope-dim N\n"
        "                   hybrids (qwen35): delta-net head dim, key heads, value heads (a\n"
        "                   multiple of key heads); layer i is attention when (i+1) %% N == 0;\n"
        "                   rotated dims per attention head. --arch qwen35 on another preset:\n"
        "                   head dim, kv heads, heads, 4, head_dim/4 unless given\n"
        "  --mtp            hybrids: add one multi-token-prediction layer after the others\n"
        "                   (gated attention + FFN + blk.N.nextn.*; block_count counts it)\n"
        "  --tied / --untied   output.weight absent (tied to token_embd) or present\n"
        "  --name S         general.name\n"
        "  --hf-tokenizer DIR  use the Hugging Face tokenizer in DIR (tokenizer.json and\n"
        "                   tokenizer_config.json; byte-level BPE) instead of the trained one:\n"
        "                   its tokens, merges, specials and chat template; vocab = its size\n"
        "  -o, --output FILE   where to write (required)\n"
        "  -q, --quiet      no progress and no summary line\n\n"
        "Progress (tensor bytes written, rate, ETA) goes to stderr: a bar on a terminal,\n"
        "plain lines at most once per second otherwise.\n");
}

static int parse_int(const char *opt, const char *v, int32_t *out) {
    char *end;
    long x = strtol(v, &end, 10);
    if (*v == 0 || *end != 0 || x < 1 || x > (1l << 30)) {
        fprintf(stderr, "kvwise mkmodel: %s needs a positive integer, got '%s'\n", opt, v);
        return -1;
    }
    *out = (int32_t)x;
    return 0;
}

int cmd_mkmodel(int argc, char **argv) {
    const char *preset = "tiny", *out = NULL, *type_name = "f16", *arch = NULL, *name = NULL, *hf_dir = NULL;
    unsigned long long seed = 1;
    int32_t layers = 0, embd = 0, ff = 0, heads = 0, kv = 0, hd = 0, vocab = 0, ctx = 0, n_exp = 0, n_used = 0, ff_exp = 0;
    int32_t ff_shexp = 0;
    int32_t ssm_d_state = 0, ssm_n_group = 0, ssm_dt_rank = 0, interval = 0, rope_dim = 0, mtp = -1;
    int tied = -1;
    bool quiet = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int32_t *ip = !strcmp(a, "--layers") ? &layers : !strcmp(a, "--embd") ? &embd : !strcmp(a, "--ff") ? &ff
                    : !strcmp(a, "--heads") ? &heads : !strcmp(a, "--kv-heads") ? &kv : !strcmp(a, "--head-dim") ? &hd
                    : !strcmp(a, "--vocab") ? &vocab : !strcmp(a, "--ctx") ? &ctx : !strcmp(a, "--experts") ? &n_exp
                    : !strcmp(a, "--experts-used") ? &n_used : !strcmp(a, "--ff-exp") ? &ff_exp
                    : !strcmp(a, "--ff-shexp") ? &ff_shexp
                    : !strcmp(a, "--ssm-state") ? &ssm_d_state : !strcmp(a, "--ssm-groups") ? &ssm_n_group
                    : !strcmp(a, "--ssm-heads") ? &ssm_dt_rank : !strcmp(a, "--attn-interval") ? &interval
                    : !strcmp(a, "--rope-dim") ? &rope_dim : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--tied")) tied = 1;
        else if (!strcmp(a, "--untied")) tied = 0;
        else if (!strcmp(a, "--mtp")) mtp = 1;
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) quiet = true;
        else if (!v) { fprintf(stderr, "kvwise mkmodel: unknown option or missing value: '%s'\n", a); usage(stderr); return 2; }
        else if (ip) { if (parse_int(a, v, ip)) return 2; i++; }
        else if (!strcmp(a, "--preset")) { preset = v; i++; }
        else if (!strcmp(a, "--type")) { type_name = v; i++; }
        else if (!strcmp(a, "--arch")) { arch = v; i++; }
        else if (!strcmp(a, "--name")) { name = v; i++; }
        else if (!strcmp(a, "--hf-tokenizer")) { hf_dir = v; i++; }
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) { out = v; i++; }
        else if (!strcmp(a, "--seed")) {
            char *end;
            seed = strtoull(v, &end, 10);
            if (!*v || *end) { fprintf(stderr, "kvwise mkmodel: --seed needs an integer, got '%s'\n", v); return 2; }
            i++;
        } else { fprintf(stderr, "kvwise mkmodel: unknown option '%s'\n", a); usage(stderr); return 2; }
    }
    if (!out) { fprintf(stderr, "kvwise mkmodel: -o FILE is required\n"); usage(stderr); return 2; }
    kw_err err = {{0}};
    kw_mk_shape s;
    if (kw_mk_preset(preset, &s, &err)) { fprintf(stderr, "kvwise mkmodel: %s\n", err.msg); return 2; }
    int64_t wtype = kw_mk_target_from_name(type_name);
    if (wtype < 0) { fprintf(stderr, "kvwise mkmodel: unknown type '%s'\n", type_name); return 2; }
    if (arch) snprintf(s.arch, sizeof s.arch, "%s", arch);
    if (layers) s.n_layer = layers;
    if (embd) s.n_embd = embd;
    if (heads) s.n_head = heads;
    if ((embd || heads) && !hd) s.head_dim = s.n_embd / s.n_head;
    if (hd) s.head_dim = hd;
    if (kv) s.n_head_kv = kv;
    if (ff) s.n_ff = ff;
    if (vocab) s.n_vocab = vocab;
    if (ctx) s.n_ctx = ctx;
    if (n_exp) s.n_expert = n_exp;
    if (n_used) s.n_expert_used = n_used;
    if (ff_exp) s.n_ff_exp = ff_exp;
    if (ff_shexp) s.n_ff_shexp = ff_shexp;
    if (tied >= 0) s.tied = tied;
    if ((ssm_d_state || ssm_n_group || ssm_dt_rank || interval || rope_dim || mtp > 0) && !kw_mk_is_hybrid(s.arch)) {
        fprintf(stderr, "kvwise mkmodel: --ssm-*, --attn-interval, --rope-dim and --mtp apply to a hybrid (--arch qwen35), not %s\n",
                s.arch);
        return 2;
    }
    if (ff_shexp) {
        const kw_arch_desc *ad = kw_arch_find(s.arch);
        if (!ad || kw_arch_presence(ad, KW_FEAT_SHARED_EXPERT) != KW_REQUIRED) {
            fprintf(stderr, "kvwise mkmodel: --ff-shexp applies to an architecture with a shared expert (--arch qwen35moe), not %s\n",
                    s.arch);
            return 2;
        }
    }
    if (ssm_d_state) s.ssm_d_state = ssm_d_state;
    if (ssm_n_group) s.ssm_n_group = ssm_n_group;
    if (ssm_dt_rank) s.ssm_dt_rank = ssm_dt_rank;
    if (interval) s.attn_interval = interval;
    if (rope_dim) s.rope_dim = rope_dim;
    if (mtp > 0) s.n_mtp = mtp;
    if (name) snprintf(s.name, sizeof s.name, "%s", name);
    if (hf_dir && vocab) { fprintf(stderr, "kvwise mkmodel: --vocab cannot be combined with --hf-tokenizer (the vocab is the tokenizer's)\n"); return 2; }
    s.hf_tokenizer = hf_dir;
    kw_progress prog;
    kw_progress_begin(&prog, stderr, quiet ? KW_PROGRESS_OFF : KW_PROGRESS_AUTO, "kvwise mkmodel: writing tensors", 0,
                      KW_PROGRESS_BYTES, NULL);
    s.progress = &prog;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = kw_mk_write(&s, (uint32_t)wtype, seed, out, &err);
    kw_progress_end(&prog, rc == 0);
    if (rc) {
        fprintf(stderr, "kvwise mkmodel: %s\n", err.msg);
        return 2;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (!quiet) {
        FILE *f = fopen(out, "rb");
        long size = -1;
        if (f) { fseek(f, 0, SEEK_END); size = ftell(f); fclose(f); }
        char buf[32];
        char vbuf[64];
        if (hf_dir) snprintf(vbuf, sizeof vbuf, "vocab of %s", hf_dir);
        else snprintf(vbuf, sizeof vbuf, "vocab %d", s.n_vocab);
        fprintf(stderr, "kvwise mkmodel: wrote %s (%s, %s, %d layers x %d embd, %s, seed %llu): %s in %.2f s\n",
                out, s.arch, kw_mk_target_name((uint32_t)wtype), s.n_layer, s.n_embd, vbuf, seed,
                kw_format_bytes(size > 0 ? (uint64_t)size : 0, buf, sizeof buf),
                (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
    }
    return 0;
}
