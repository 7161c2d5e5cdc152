/* bench_kernels.c - kernel micro-benchmark on the Llama-3.2-1B layer shapes.
 *
 * For each weight type: GEMV (one activation row, decode) over 4 distinct
 * layers (q, k, v, o, gate, up, down; 243M values, far larger than the
 * caches) reports GB/s of weights streamed and the decode tok/s that a
 * 16-layer model plus the 128256 x 2048 output matrix would get; GEMM
 * (-p rows, prefill) over one layer reports the prefill tok/s of 16 layers
 * (the output matrix is only needed for the last token). The machine's
 * read bandwidth is probed first, so GEMV can be read as % of it.
 *
 * usage: bench_kernels [-t THREADS] [-p PREFILL_ROWS] [-r REPS] [-k scalar|avx2|avx512]
 *                      [--types q4_0,q8_0,f16] [--no-gemm] [--no-gemv] [--no-pack] [--cputime] [--shapes]
 * --cputime times with process CPU seconds: with -t 1 this measures the
 * kernel's own speed even when other processes share the cores. --shapes
 * also prints the GEMM's GMAC/s per layer matrix (q k v o gate up down). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "kvwise/memory.h"
#include "kvwise/tensor.h"
#include "bench_util.h"

#define N_EMBD 2048
#define N_FF 8192
#define N_KV 512
#define N_VOCAB 128256
#define N_LAYER 16
#define BENCH_LAYERS 4
static int g_shapes;   /* --shapes */



/* A rows x cols matrix of one type: 16 random rows repeated (speed does not
 * depend on the values; quantizing 240M values would take minutes). */
static int make_matrix(kw_matrix *m, uint32_t type, int64_t rows, int64_t cols) {
    memset(m, 0, sizeof *m);
    m->type = type; m->rows = rows; m->cols = cols;
    m->row_bytes = kw_row_bytes(type, cols);
    uint8_t *d = kw_mem_alloc(KW_MEM_WEIGHTS, m->row_bytes * (size_t)rows);
    float *tmp = malloc(sizeof(float) * (size_t)cols);
    if (!d || !tmp) { free(tmp); kw_mem_free(d); return -1; }
    for (int r = 0; r < 16 && r < rows; r++) {
        for (int64_t j = 0; j < cols; j++) tmp[j] = frand() * 0.1f;
        kw_quantize_row(type, tmp, d + (size_t)r * m->row_bytes, cols);
    }
    for (int64_t r = 16; r < rows; r++) memcpy(d + (size_t)r * m->row_bytes, d + (size_t)(r % 16) * m->row_bytes, m->row_bytes);
    m->data = d;
    return 0;
}

typedef struct { kw_matrix m[7]; } layer;

static int make_layer(layer *L, uint32_t type) {
    const int64_t shape[7][2] = {{N_EMBD, N_EMBD}, {N_KV, N_EMBD}, {N_KV, N_EMBD}, {N_EMBD, N_EMBD},
                                 {N_FF, N_EMBD}, {N_FF, N_EMBD}, {N_EMBD, N_FF}};
    for (int i = 0; i < 7; i++)
        if (make_matrix(&L->m[i], type, shape[i][0], shape[i][1]) != 0) return -1;
    return 0;
}

static void free_layer(layer *L) {
    for (int i = 0; i < 7; i++) kw_mem_free((void *)L->m[i].data);
}

static size_t layer_bytes(const layer *L) {
    size_t b = 0;
    for (int i = 0; i < 7; i++) b += L->m[i].row_bytes * (size_t)L->m[i].rows;
    return b;
}

int main(int argc, char **argv) {
    int threads = 2, prefill = 512, reps = 5, do_gemm = 1, do_gemv = 1, do_pack = 1;
    const char *types = "q4_0,q8_0,f16", *kernel = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-p") && i + 1 < argc) prefill = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-k") && i + 1 < argc) kernel = argv[++i];
        else if (!strcmp(argv[i], "--types") && i + 1 < argc) types = argv[++i];
        else if (!strcmp(argv[i], "--no-gemm")) do_gemm = 0;
        else if (!strcmp(argv[i], "--no-gemv")) do_gemv = 0;
        else if (!strcmp(argv[i], "--no-pack")) do_pack = 0;
        else if (!strcmp(argv[i], "--cputime")) g_cputime = 1;
        else if (!strcmp(argv[i], "--shapes")) g_shapes = 1;
        else { fprintf(stderr, "usage: %s [-t N] [-p N] [-r N] [-k KERNEL] [--types a,b] [--no-gemm] [--no-gemv] [--no-pack] [--cputime] [--shapes]\n", argv[0]); return 2; }
    }
    if (kernel && kw_kernel_force(kernel) != 0) { fprintf(stderr, "kernel %s not available here\n", kernel); return 2; }
    if (reps < 1) reps = 1;
    kw_pool *pool = kw_pool_create(threads);
    double bw = kw_measure_read_bandwidth(pool, 1.0);
    printf("kernel %s, %d threads, read bandwidth %.1f GB/s\n", kw_kernel_name(), threads, bw / 1e9);
    printf("%-6s %-5s %10s %10s %12s %10s\n", "type", "op", "GB/s", "% of bw", "tok/s (1B)", "ms");
    fflush(stdout);
    char list[256];
    snprintf(list, sizeof list, "%s", types);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int type = kw_type_from_name(tok);
        if (type < 0 || !kw_type_traits_get((uint32_t)type)->supported) { fprintf(stderr, "skip %s\n", tok); continue; }
        layer L[BENCH_LAYERS];
        kw_matrix out;
        int ok = 1;
        for (int l = 0; l < BENCH_LAYERS && ok; l++) ok = make_layer(&L[l], (uint32_t)type) == 0;
        ok = ok && make_matrix(&out, (uint32_t)type, N_VOCAB, N_EMBD) == 0;
        if (!ok) { fprintf(stderr, "out of memory for %s\n", tok); return 1; }
        int packed = 0;
        for (int l = 0; l < BENCH_LAYERS && do_pack; l++)
            for (int i = 0; i < 7; i++) packed += kw_matrix_pack(&L[l].m[i], NULL) == 0;
        if (do_pack) packed += kw_matrix_pack(&out, NULL) == 0;
        printf("%-6s packed %d of %d matrices\n", tok, packed, BENCH_LAYERS * 7 + 1);
        size_t max_n = (size_t)(prefill > 1 ? prefill : 1);
        float *x = kw_mem_alloc(KW_MEM_WORKSPACE, sizeof(float) * max_n * N_FF);
        float *y = kw_mem_alloc(KW_MEM_WORKSPACE, sizeof(float) * max_n * N_VOCAB > sizeof(float) * N_VOCAB * 2 ? sizeof(float) * max_n * N_FF : sizeof(float) * N_VOCAB * 2);
        void *scratch = kw_mem_alloc(KW_MEM_SCRATCH, kw_matmul_scratch_bytes(&L[0].m[6], (int64_t)max_n) + 64);
        float *ylogits = kw_mem_alloc(KW_MEM_WORKSPACE, sizeof(float) * N_VOCAB);
        for (size_t i = 0; i < max_n * N_FF; i++) x[i] = frand();
        if (do_gemv) {
            double t[64];
            size_t bytes = 0;
            for (int l = 0; l < BENCH_LAYERS; l++) bytes += layer_bytes(&L[l]);
            size_t out_bytes = out.row_bytes * (size_t)out.rows;
            double tl[64], to[64];
            for (int r = 0; r < reps && r < 64; r++) {
                double t0 = now_sec();
                for (int l = 0; l < BENCH_LAYERS; l++)
                    for (int i = 0; i < 7; i++) kw_matmul(pool, &L[l].m[i], x, 1, y, scratch);
                double t1 = now_sec();
                kw_matmul(pool, &out, x, 1, ylogits, scratch);
                double t2 = now_sec();
                tl[r] = t1 - t0;
                to[r] = t2 - t1;
                t[r] = (t1 - t0) * N_LAYER / BENCH_LAYERS + (t2 - t1);
            }
            int n = reps < 64 ? reps : 64;
            qsort(t, (size_t)n, sizeof(double), cmp_double);
            qsort(tl, (size_t)n, sizeof(double), cmp_double);
            qsort(to, (size_t)n, sizeof(double), cmp_double);
            double gbs = (double)(bytes + out_bytes) / (tl[n / 2] + to[n / 2]) / 1e9;
            printf("%-6s %-5s %10.1f %9.0f%% %12.1f %10.2f\n", tok, "gemv", gbs, 100 * gbs * 1e9 / bw, 1.0 / t[n / 2], t[n / 2] * 1e3);
        }
        if (do_gemm && prefill > 1) {
            double t[64], ts[7][64];
            int n = reps < 64 ? reps : 64;
            for (int r = 0; r < n; r++) {
                double t0 = now_sec();
                for (int i = 0; i < 7; i++) {
                    double a = now_sec();
                    kw_matmul(pool, &L[0].m[i], x, prefill, y, scratch);
                    ts[i][r] = now_sec() - a;
                }
                t[r] = now_sec() - t0;
            }
            qsort(t, (size_t)n, sizeof(double), cmp_double);
            if (g_shapes) {
                static const char *name[7] = {"q", "k", "v", "o", "gate", "up", "down"};
                printf("%-6s gemm by matrix, GMAC/s:", tok);
                for (int i = 0; i < 7; i++) {
                    qsort(ts[i], (size_t)n, sizeof(double), cmp_double);
                    printf(" %s %.0f", name[i], (double)L[0].m[i].rows * (double)L[0].m[i].cols * prefill / ts[i][n / 2] / 1e9);
                }
                printf("\n");
            }
            double per_tok = t[n / 2] * N_LAYER / prefill;
            double gmac = 60.8e6 * prefill / t[n / 2] / 1e9;
            printf("%-6s %-5s %10s %10s %12.1f %10.2f   (%.0f GMAC/s, p=%d)\n", tok, "gemm", "-", "-", 1.0 / per_tok, t[n / 2] * 1e3, gmac, prefill);
        }
        for (int l = 0; l < BENCH_LAYERS; l++) {
            for (int i = 0; i < 7; i++) kw_matrix_unpack(&L[l].m[i]);
            free_layer(&L[l]);
        }
        kw_matrix_unpack(&out);
        kw_mem_free((void *)out.data);
        kw_mem_free(x); kw_mem_free(y); kw_mem_free(scratch); kw_mem_free(ylogits);
    }
    kw_pool_destroy(pool);
    return 0;
}
