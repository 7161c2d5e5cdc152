/* test_plan_gguf.c - planning from a GGUF reads metadata and tensor
 * descriptors only. A hand-written 30 GiB llama-shaped GGUF whose tensor
 * data is a hole (a sparse file: the header is real, the data section is
 * never written) is planned in-process: the figures are exact (weights =
 * sum of tensor sizes, file-sized weights line, untied embedding read one
 * row per token) and the process's resident file-backed memory does not
 * grow by anything near the file size, so no weight page was touched. */
#include "testutil.h"
#include "kvwise/footprint.h"
#include "kvwise/gguf.h"
#include "kvwise/plan.h"
#include "kvwise/tensor.h"
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#define MiB (1024.0 * 1024.0)
/* Resident growth allowed while planning: the header, the descriptors and
 * the tokenizer-less metadata are a few KiB; libraries touched for the first
 * time add a little. 64 MiB is far below the 30 GiB a data read would show. */
#define MAX_RSS_GROWTH_MIB 64.0

typedef struct { FILE *f; } wr;
static void w_u32(wr *w, uint32_t v) { fwrite(&v, 4, 1, w->f); }
static void w_u64(wr *w, uint64_t v) { fwrite(&v, 8, 1, w->f); }
static void w_str(wr *w, const char *s) { w_u64(w, strlen(s)); fwrite(s, 1, strlen(s), w->f); }
static void kv_u32(wr *w, const char *k, uint32_t v) { w_str(w, k); w_u32(w, KW_GGUF_UINT32); w_u32(w, v); }
static void kv_str(wr *w, const char *k, const char *v) { w_str(w, k); w_u32(w, KW_GGUF_STRING); w_str(w, v); }

#define N_LAYER 20
#define EMBD 8192
#define FF 28672
#define VOCAB 128256

typedef struct { char name[64]; int64_t ne0, ne1; uint64_t bytes; } tdesc;

/* Writes the header of a llama-shaped F16 model and extends the file to
 * its full size without writing data. Returns the file size. */
static uint64_t write_sparse_model(const char *path, uint64_t *weight_bytes, uint64_t *embd_bytes) {
    static tdesc t[2 + 3 * N_LAYER];
    int n = 0;
    snprintf(t[n].name, 64, "token_embd.weight"); t[n].ne0 = EMBD; t[n].ne1 = VOCAB; n++;
    snprintf(t[n].name, 64, "output.weight"); t[n].ne0 = EMBD; t[n].ne1 = VOCAB; n++;
    for (int l = 0; l < N_LAYER; l++) {
        snprintf(t[n].name, 64, "blk.%d.ffn_up.weight", l); t[n].ne0 = EMBD; t[n].ne1 = FF; n++;
        snprintf(t[n].name, 64, "blk.%d.ffn_gate.weight", l); t[n].ne0 = EMBD; t[n].ne1 = FF; n++;
        snprintf(t[n].name, 64, "blk.%d.ffn_down.weight", l); t[n].ne0 = FF; t[n].ne1 = EMBD; n++;
    }
    *weight_bytes = 0;
    for (int i = 0; i < n; i++) {
        t[i].bytes = (uint64_t)t[i].ne0 * (uint64_t)t[i].ne1 * 2;
        *weight_bytes += t[i].bytes;
    }
    *embd_bytes = t[0].bytes;
    wr w = {fopen(path, "wb")};
    if (!w.f) return 0;
    fwrite("GGUF", 1, 4, w.f);
    w_u32(&w, 3);
    w_u64(&w, (uint64_t)n);
    w_u64(&w, 8);
    kv_str(&w, "general.architecture", "llama");
    kv_str(&w, "general.name", "sparse-30g");
    kv_u32(&w, "llama.block_count", N_LAYER);
    kv_u32(&w, "llama.embedding_length", EMBD);
    kv_u32(&w, "llama.feed_forward_length", FF);
    kv_u32(&w, "llama.attention.head_count", 64);
    kv_u32(&w, "llama.attention.head_count_kv", 8);
    kv_u32(&w, "llama.context_length", 131072);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        w_str(&w, t[i].name);
        w_u32(&w, 2);
        w_u64(&w, (uint64_t)t[i].ne0);
        w_u64(&w, (uint64_t)t[i].ne1);
        w_u32(&w, KW_TYPE_F16);
        w_u64(&w, off);
        off += (t[i].bytes + 31) & ~(uint64_t)31;
    }
    long hdr = ftell(w.f);
    uint64_t data_start = ((uint64_t)hdr + 31) & ~(uint64_t)31;
    fclose(w.f);
    uint64_t size = data_start + off;
    if (truncate(path, (off_t)size) != 0) return 0;
    return size;
}

int main(void) {
    const char *path = kw_test_path(kw_test_tmpdir(), "sparse-30g.gguf");
    uint64_t wbytes = 0, ebytes = 0;
    uint64_t size = write_sparse_model(path, &wbytes, &ebytes);
    KW_CHECK(size > 30ULL * 1000 * 1000 * 1000);
    if (!size) return kw_test_finish();

    kw_footprint before, after;
    kw_footprint_read(&before, NULL);
    kw_err err = {{0}};
    kw_gguf *g = kw_gguf_open(path, &err);
    KW_CHECK_MSG(g != NULL, "%s", err.msg);
    if (!g) { unlink(path); return kw_test_finish(); }
    kw_plan_model m;
    KW_CHECK_MSG(kw_plan_model_from_gguf(g, &m, &err) == 0, "%s", err.msg);
    kw_footprint_read(&after, NULL);
    kw_gguf_close(g);

    double grew = ((double)after.rss - (double)before.rss) / MiB;
    printf("planned a %.1f GiB file; RSS grew by %.2f MiB (file-backed %.2f MiB)\n", (double)size / (1024 * MiB), grew,
           ((double)after.rss_file - (double)before.rss_file) / MiB);
    KW_CHECK(grew < MAX_RSS_GROWTH_MIB);
    KW_CHECK_EQ_INT(m.weight_bytes, wbytes);
    KW_CHECK_EQ_INT(m.resident_bytes, size + m.repack_bytes - m.released_bytes);   /* F16 is repacked on AVX-512 */
    /* untied: one embedding row; every other matrix is read as its packed copy when it has one */
    KW_CHECK_EQ_INT(m.read_bytes_per_token, m.repack_bytes ? m.repack_bytes + EMBD * 2 : wbytes - ebytes + EMBD * 2);
    KW_CHECK_EQ_INT(m.main_type, KW_TYPE_F16);
    KW_CHECK(!m.tokenizer_measured);          /* no vocab in this file: estimated (0) */
    KW_CHECK_EQ_INT(m.hp.n_kv_layers, N_LAYER);
    /* 20 x 2 x 8 x 128 x 2 */
    KW_CHECK_EQ_INT(kw_plan_kv_bytes_per_token(&m, KW_TYPE_F16), N_LAYER * 2 * 8 * 128 * 2);

    kw_plan_opts o;
    kw_plan_opts_default(&o);
    o.ram = 64ULL << 30;
    o.overhead = 64ULL << 20;
    o.bandwidth = 100e9;
    kw_plan p;
    KW_CHECK_MSG(kw_plan_compute(&m, &o, &p, &err) == 0, "%s", err.msg);
    KW_CHECK(p.fits);
    KW_CHECK_EQ_INT(p.weights, size + m.repack_bytes - m.released_bytes);
    KW_CHECK_NEAR(p.decode_tok_s, 100e9 / (double)m.read_bytes_per_token, 1e-9);
    o.ram = 16ULL << 30;                      /* 30 GiB of weights in a 12 GiB limit */
    KW_CHECK(kw_plan_compute(&m, &o, &p, &err) == 0);
    KW_CHECK(!p.fits);
    KW_CHECK(strstr(p.warnings[0], "weights alone") != NULL);

    /* a truncated header is a one-line error, not a crash */
    FILE *f = fopen(path, "r+b");
    if (f) { fclose(f); KW_CHECK(truncate(path, 200) == 0); }
    g = kw_gguf_open(path, &err);
    KW_CHECK(g == NULL);
    KW_CHECK(err.msg[0] != 0 && strchr(err.msg, '\n') == NULL);
    kw_gguf_close(g);
    unlink(path);
    return kw_test_finish();
}
