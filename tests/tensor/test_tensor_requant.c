/* test_tensor_requant.c - the reference quantizers reproduce the bytes of
 * real files: every Q8_0/Q4_0 row of the conformance models (written by
 * gguf-py's reference quantizers) is a fixed point of dequantize ->
 * quantize, and quantizing llama-f16's weights with our Q4_K/Q6_K
 * quantizers gives exactly the rows llama-quantize wrote into
 * llama-q4_k_m.gguf and llama-q6_k.gguf.
 * Reads the files with a minimal GGUF walker of its own so this test does
 * not depend on the GGUF module. */
#include "testutil.h"
#include <string.h>
#include "kvwise/tensor.h"

typedef struct { char name[96]; uint32_t type; int64_t ne0, nrows; const uint8_t *data; } tinfo;
typedef struct { uint8_t *buf; size_t len; int nt; tinfo *t; } gfile;

typedef struct { const uint8_t *p, *end; int ok; } rd;
static uint64_t rd_u(rd *r, int n) {
    uint64_t v = 0;
    if (r->p + n > r->end) { r->ok = 0; return 0; }
    for (int i = 0; i < n; i++) v |= (uint64_t)r->p[i] << (8 * i);
    r->p += n;
    return v;
}
static void rd_skip(rd *r, uint64_t n) { if ((uint64_t)(r->end - r->p) < n) r->ok = 0; else r->p += n; }
static void skip_value(rd *r, uint32_t ty) {
    static const int sz[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (ty == 8) rd_skip(r, rd_u(r, 8));
    else if (ty == 9) {
        uint32_t et = (uint32_t)rd_u(r, 4);
        uint64_t n = rd_u(r, 8);
        for (uint64_t i = 0; i < n && r->ok; i++) skip_value(r, et);
    } else if (ty < 13) rd_skip(r, (uint64_t)sz[ty]);
    else r->ok = 0;
}

static int gguf_load(const char *path, gfile *g) {
    memset(g, 0, sizeof *g);
    g->buf = (uint8_t *)kw_test_read_file(path, &g->len);
    if (!g->buf) return -1;
    rd r = {g->buf, g->buf + g->len, 1};
    if (rd_u(&r, 4) != 0x46554747u || rd_u(&r, 4) != 3) return -1;
    uint64_t nt = rd_u(&r, 8), nkv = rd_u(&r, 8);
    uint64_t align = 32;
    for (uint64_t i = 0; i < nkv && r.ok; i++) {
        uint64_t kl = rd_u(&r, 8);
        const char *key = (const char *)r.p;
        rd_skip(&r, kl);
        uint32_t ty = (uint32_t)rd_u(&r, 4);
        if (kl == 17 && memcmp(key, "general.alignment", 17) == 0 && ty == 4) align = rd_u(&r, 4);
        else skip_value(&r, ty);
    }
    g->t = calloc(nt, sizeof(tinfo));
    uint64_t *offs = calloc(nt, 8);
    for (uint64_t i = 0; i < nt && r.ok; i++) {
        uint64_t nl = rd_u(&r, 8);
        if (nl < sizeof g->t[i].name && r.p + nl <= r.end) memcpy(g->t[i].name, r.p, nl);
        rd_skip(&r, nl);
        uint32_t nd = (uint32_t)rd_u(&r, 4);
        int64_t ne[4] = {1, 1, 1, 1};
        for (uint32_t d = 0; d < nd && d < 4; d++) ne[d] = (int64_t)rd_u(&r, 8);
        g->t[i].type = (uint32_t)rd_u(&r, 4);
        offs[i] = rd_u(&r, 8);
        g->t[i].ne0 = ne[0];
        g->t[i].nrows = ne[1] * ne[2] * ne[3];
    }
    size_t base = ((size_t)(r.p - g->buf) + align - 1) / align * align;
    for (uint64_t i = 0; i < nt && r.ok; i++) {
        size_t bytes = kw_row_bytes(g->t[i].type, g->t[i].ne0) * (size_t)g->t[i].nrows;
        if (base + offs[i] + bytes > g->len) r.ok = 0;
        else g->t[i].data = g->buf + base + offs[i];
    }
    free(offs);
    g->nt = (int)nt;
    return r.ok ? 0 : -1;
}

static const tinfo *find(const gfile *g, const char *name) {
    for (int i = 0; i < g->nt; i++)
        if (strcmp(g->t[i].name, name) == 0) return &g->t[i];
    return NULL;
}

/* Dequantize -> quantize must give the stored bytes for every row. */
static void check_fixed_point(const char *dir, const char *file, uint32_t type) {
    gfile g;
    int rc = gguf_load(kw_test_path(dir, file), &g);
    KW_CHECK_MSG(rc == 0, "cannot read %s", file);
    if (rc != 0) { free(g.buf); free(g.t); return; }
    long rows = 0, bad = 0;
    for (int i = 0; i < g.nt; i++) {
        const tinfo *t = &g.t[i];
        if (t->type != type) continue;
        size_t rb = kw_row_bytes(type, t->ne0);
        float *f = malloc(sizeof(float) * (size_t)t->ne0);
        uint8_t *q = malloc(rb);
        for (int64_t r = 0; r < t->nrows; r++, rows++) {
            kw_dequantize_row(type, t->data + rb * (size_t)r, f, t->ne0);
            kw_quantize_row(type, f, q, t->ne0);
            if (memcmp(q, t->data + rb * (size_t)r, rb) != 0) bad++;
        }
        free(f);
        free(q);
    }
    KW_CHECK_MSG(rows > 1000, "%s: only %ld %s rows", file, rows, kw_type_name(type));
    KW_CHECK_MSG(bad == 0, "%s: %ld of %ld rows re-quantize differently", file, bad, rows);
    free(g.buf);
    free(g.t);
}

/* Quantizing the F16 source's rows must give llama-quantize's bytes. */
static void check_from_f16(const char *dir, const char *src_file, const char *file) {
    gfile s, g;
    int rc1 = gguf_load(kw_test_path(dir, src_file), &s), rc2 = gguf_load(kw_test_path(dir, file), &g);
    KW_CHECK_MSG(rc1 == 0 && rc2 == 0, "cannot read %s / %s", src_file, file);
    long rows[KW_TYPE_COUNT] = {0}, bad[KW_TYPE_COUNT] = {0};
    for (int i = 0; rc1 == 0 && rc2 == 0 && i < g.nt; i++) {
        const tinfo *t = &g.t[i], *st = find(&s, t->name);
        if (t->type != KW_TYPE_Q4_K && t->type != KW_TYPE_Q6_K) continue;
        KW_CHECK_MSG(st && st->type == KW_TYPE_F16 && st->ne0 == t->ne0 && st->nrows == t->nrows, "%s", t->name);
        if (!st || st->type != KW_TYPE_F16) continue;
        size_t rb = kw_row_bytes(t->type, t->ne0);
        float *f = malloc(sizeof(float) * (size_t)t->ne0);
        uint8_t *q = malloc(rb);
        for (int64_t r = 0; r < t->nrows; r++) {
            kw_dequantize_row(KW_TYPE_F16, st->data + (size_t)(t->ne0 * 2 * r), f, t->ne0);
            kw_quantize_row(t->type, f, q, t->ne0);
            rows[t->type]++;
            if (memcmp(q, t->data + rb * (size_t)r, rb) != 0) bad[t->type]++;
        }
        free(f);
        free(q);
    }
    for (uint32_t ty = KW_TYPE_Q4_K; ty <= KW_TYPE_Q6_K; ty += 2) {
        if (!rows[ty]) continue;
        KW_CHECK_MSG(bad[ty] == 0, "%s: %ld of %ld %s rows differ from llama-quantize", file, bad[ty], rows[ty],
                     kw_type_name(ty));
    }
    KW_CHECK_MSG(rows[KW_TYPE_Q6_K] > 0, "%s: no q6_k rows", file);
    free(s.buf); free(s.t); free(g.buf); free(g.t);
}

int main(void) {
    const char *models = kw_test_path(kw_test_shared_dir(), "conformance/models");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", models);
    check_fixed_point(dir, "llama-q8_0.gguf", KW_TYPE_Q8_0);
    check_fixed_point(dir, "qwen2-q8_0.gguf", KW_TYPE_Q8_0);
    check_fixed_point(dir, "llama-q4_0.gguf", KW_TYPE_Q4_0);
    check_from_f16(dir, "llama-f16.gguf", "llama-q6_k.gguf");
    check_from_f16(dir, "llama-f16.gguf", "llama-q4_k_m.gguf");
    return kw_test_finish();
}
