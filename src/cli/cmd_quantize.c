/* cmd_quantize.c - `kvwise quantize IN OUT TYPE`: re-encodes a model's 2-D
 * weight matrices to TYPE (norms/biases stay as they are), carrying the
 * metadata over (src/mkmodel/quantize_model.c). */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "cli.h"
#include "kvwise/progress.h"
#include "kvwise/tensor.h"
#include "mkmodel/mkmodel.h"

static void usage(FILE *f) {
    fprintf(f,
        "usage: kvwise quantize IN.gguf OUT.gguf TYPE\n\n"
        "Re-encodes IN's weight matrices to TYPE with the reference quantizers and writes\n"
        "OUT with IN's metadata (general.file_type updated). Norms, biases, the MoE router\n"
        "(ffn_gate_inp) and ssm_conv1d keep their type, as llama-quantize keeps them.\n\n"
        "TYPE, one type for every matrix: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k\n"
        "(a K-quant falls back to q5_0/q5_1/q8_0, then f16, for rows that are not a\n"
        "multiple of 256).\n"
        "TYPE, llama-quantize's per-tensor mixes (the files model pages publish):\n"
        "  q4_k_m  Q4_K; attn_v and ffn_down Q6_K on the first and last eighth of the\n"
        "          layers and every third layer between; attn_qkv Q5_K\n"
        "  q5_k_m  Q5_K; the same attn_v / ffn_down layers Q6_K; attn_qkv Q6_K\n"
        "  q6_k    Q6_K\n"
        "  all three: output.weight (token_embd.weight when tied) Q6_K (Q8_0 if its rows\n"
        "  are not a multiple of 256); with 8 experts attn_v and attn_k Q8_0 (and\n"
        "  attn_output Q5_K in q4_k_m); on an 80-layer llama (GQA) or qwen2 the other\n"
        "  attn_v Q5_K in q4_k_m; the row fallbacks above.\n"
        "`kvwise info -m OUT --tensors` lists the tensor types written.\n"
        "Quantizing an already quantized model compounds the rounding error.\n"
        "Progress (tensor bytes written, rate, ETA) goes to stderr: a bar on a terminal,\n"
        "plain lines at most once per second otherwise.\n");
}

int cmd_quantize(int argc, char **argv) {
    const char *pos[3];
    int n = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return 0; }
        if (argv[i][0] == '-' && argv[i][1]) { fprintf(stderr, "kvwise quantize: unknown option '%s'\n", argv[i]); return 2; }
        if (n == 3) { fprintf(stderr, "kvwise quantize: too many arguments\n"); usage(stderr); return 2; }
        pos[n++] = argv[i];
    }
    if (n != 3) { usage(stderr); return 2; }
    int64_t type = kw_mk_target_from_name(pos[2]);
    if (type < 0) { fprintf(stderr, "kvwise quantize: unknown type '%s'\n", pos[2]); return 2; }
    if (!strcmp(pos[0], pos[1])) { fprintf(stderr, "kvwise quantize: IN and OUT must differ\n"); return 2; }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    kw_err err = {{0}};
    kw_progress prog;
    kw_progress_begin(&prog, stderr, KW_PROGRESS_AUTO, "kvwise quantize: writing tensors", 0, KW_PROGRESS_BYTES, NULL);
    int rc = kw_mk_quantize_file(pos[0], pos[1], (uint32_t)type, &prog, &err);
    kw_progress_end(&prog, rc == 0);
    if (rc) {
        fprintf(stderr, "kvwise quantize: %s\n", err.msg);
        return 2;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    fprintf(stderr, "kvwise quantize: wrote %s (%s) in %.2f s\n", pos[1], kw_mk_target_name((uint32_t)type),
            (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
    return 0;
}
