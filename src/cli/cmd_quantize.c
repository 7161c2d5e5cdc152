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
        "Re-encodes every 2-D weight matrix of IN to TYPE with the reference quantizers\n"
        "and writes OUT with IN's metadata (general.file_type updated). 1-D tensors (norms,\n"
        "biases) keep their type. TYPE: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k\n"
        "(a K-quant falls back to q5_0/q5_1/q8_0 for rows that are not a multiple of 256).\n"
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
    int type = kw_type_from_name(pos[2]);
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
    fprintf(stderr, "kvwise quantize: wrote %s (%s) in %.2f s\n", pos[1], kw_type_name((uint32_t)type),
            (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
    return 0;
}
