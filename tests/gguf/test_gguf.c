/* test_gguf.c - the GGUF reader and writer: round trips of every value
 * type and several tensor types, hand-built malformed files (each must be
 * refused with a message naming the problem), truncation at every offset
 * of a small file, v1 files, and allocation-failure injection. */
#include "testutil.h"
#include <string.h>
#include <stdlib.h>
#include "kvwise/gguf.h"
#include "kvwise/memory.h"
#include "kvwise/tensor.h"

/* ---- a little byte builder for hand-made files ---- */

typedef struct buf { uint8_t *p; size_t n, cap; } buf;

static void put(buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) { fprintf(stderr, "oom\n"); exit(1); }
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void le(buf *b, uint64_t v, int n) {
    uint8_t t[8];
    for (int i = 0; i < n; i++) t[i] = (uint8_t)(v >> (8 * i));
    put(b, t, (size_t)n);
}
static void u32(buf *b, uint32_t v) { le(b, v, 4); }
static void u64(buf *b, uint64_t v) { le(b, v, 8); }
static void str(buf *b, const char *s) { u64(b, strlen(s)); put(b, s, strlen(s)); }
static void header(buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    put(b, "GGUF", 4);
    u32(b, version);
    u64(b, n_tensors);
    u64(b, n_kv);
}
static void kv_u32(buf *b, const char *key, uint32_t v) { str(b, key); u32(b, KW_GGUF_UINT32); u32(b, v); }
static void tinfo(buf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off) {
    str(b, name);
    u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) u64(b, ne[i]);
    u32(b, type);
    u64(b, off);
}
static void pad_to(buf *b, size_t a) { while (b->n % a) { uint8_t z = 0; put(b, &z, 1); } }
static void zeros(buf *b, size_t n) { for (size_t i = 0; i < n; i++) { uint8_t z = 0; put(b, &z, 1); } }

/* Opens b (as an exact-size heap copy, so ASan sees any overread) and
 * expects failure with `want` in the message. */
static void expect_fail(const buf *b, size_t len, const char *want, int line) {
    uint8_t *copy = malloc(len ? len : 1);
    memcpy(copy, b->p, len);
    kw_err e = {{0}};
    kw_gguf *g = kw_gguf_open_mem(copy, len, &e);
    if (g) {
        kw_test_failed++;
        fprintf(stderr, "line %d: expected failure '%s' but the file opened\n", line, want);
        kw_gguf_close(g);
    } else if (!strstr(e.msg, want) || strchr(e.msg, '\n')) {
        kw_test_failed++;
        fprintf(stderr, "line %d: expected '%s' in the error, got '%s'\n", line, want, e.msg);
    } else {
        kw_test_passed++;
    }
    free(copy);
}
#define EXPECT_FAIL(b, want) expect_fail(&(b), (b).n, (want), __LINE__)

static kw_gguf *open_buf(const buf *b, kw_err *e) { return kw_gguf_open_mem(b->p, b->n, e); }

/* ---- round trip ---- */

static const char *test_file(const char *name) { return kw_test_path(kw_test_tmpdir(), name); }

static void fill_pattern(uint8_t *p, size_t n, uint32_t seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) { x = x * 1103515245u + 12345u; p[i] = (uint8_t)(x >> 16); }
}

typedef struct { uint32_t type; int64_t ne[4]; uint32_t n_dims; const char *name; } tspec;

static const tspec k_tensors[] = {
    {KW_TYPE_F32, {7, 3, 1, 1}, 2, "t.f32"},
    {KW_TYPE_F16, {64, 5, 1, 1}, 2, "t.f16"},
    {KW_TYPE_BF16, {32, 2, 2, 1}, 3, "t.bf16"},
    {KW_TYPE_Q4_0, {64, 3, 1, 1}, 2, "t.q4_0"},
    {KW_TYPE_Q4_1, {32, 1, 1, 1}, 1, "t.q4_1"},
    {KW_TYPE_Q5_0, {32, 2, 1, 1}, 2, "t.q5_0"},
    {KW_TYPE_Q5_1, {96, 2, 1, 1}, 2, "t.q5_1"},
    {KW_TYPE_Q8_0, {32, 2, 2, 2}, 4, "t.q8_0"},
    {KW_TYPE_Q4_K, {256, 2, 1, 1}, 2, "t.q4_k"},
    {KW_TYPE_Q5_K, {512, 1, 1, 1}, 2, "t.q5_k"},
    {KW_TYPE_Q6_K, {256, 3, 1, 1}, 2, "t.q6_k"},
};
#define N_TENSORS (sizeof k_tensors / sizeof k_tensors[0])

static size_t spec_bytes(const tspec *t) {
    return kw_row_bytes(t->type, t->ne[0]) * (size_t)(t->ne[1] * t->ne[2] * t->ne[3]);
}

/* fill callback: row r gets pattern seeded by r */
static int fill_rows(void *ctx, int64_t first, int64_t n, void *dst, kw_err *err) {
    size_t rb = *(size_t *)ctx;
    for (int64_t r = 0; r < n; r++) fill_pattern((uint8_t *)dst + r * rb, rb, (uint32_t)(first + r));
    return 0;
}
static int fill_fail(void *ctx, int64_t first, int64_t n, void *dst, kw_err *err) {
    return kw_err_set(err, "synthetic failure at row %lld", (long long)first);
}

static void test_round_trip(uint32_t alignment) {
    kw_gguf_writer *w = kw_gguf_writer_create();
    KW_CHECK(w != NULL);
    if (alignment) kw_gguf_writer_set_u32(w, "general.alignment", alignment);
    uint8_t vu8 = 250; int8_t vi8 = -100; uint16_t vu16 = 65000; int16_t vi16 = -32000;
    int64_t vi64 = -(1ll << 60); double vf64 = 3.141592653589793;
    kw_gguf_writer_set_scalar(w, "s.u8", KW_GGUF_UINT8, &vu8);
    kw_gguf_writer_set_scalar(w, "s.i8", KW_GGUF_INT8, &vi8);
    kw_gguf_writer_set_scalar(w, "s.u16", KW_GGUF_UINT16, &vu16);
    kw_gguf_writer_set_scalar(w, "s.i16", KW_GGUF_INT16, &vi16);
    kw_gguf_writer_set_u32(w, "s.u32", 4000000000u);
    kw_gguf_writer_set_i32(w, "s.i32", -2000000000);
    kw_gguf_writer_set_f32(w, "s.f32", 0.25f);
    kw_gguf_writer_set_bool(w, "s.bool", true);
    kw_gguf_writer_set_str(w, "s.str", "hello, gguf");
    kw_gguf_writer_set_str(w, "s.empty", "");
    kw_gguf_writer_set_u64(w, "s.u64", 0xfedcba9876543210ull);
    kw_gguf_writer_set_scalar(w, "s.i64", KW_GGUF_INT64, &vi64);
    kw_gguf_writer_set_scalar(w, "s.f64", KW_GGUF_FLOAT64, &vf64);
    kw_gguf_writer_set_u32(w, "s.replaced", 1);
    kw_gguf_writer_set_u32(w, "s.replaced", 2);   /* second set wins, no duplicate */
    int32_t ai32[5] = {1, -2, 3, -4, 5};
    float af32[3] = {1.5f, -2.5f, 1e-7f};
    uint8_t au8[4] = {0, 1, 254, 255};
    double af64[2] = {1e300, -1e-300};
    kw_gguf_writer_set_arr(w, "a.i32", KW_GGUF_INT32, ai32, 5);
    kw_gguf_writer_set_arr(w, "a.f32", KW_GGUF_FLOAT32, af32, 3);
    kw_gguf_writer_set_arr(w, "a.u8", KW_GGUF_UINT8, au8, 4);
    kw_gguf_writer_set_arr(w, "a.f64", KW_GGUF_FLOAT64, af64, 2);
    kw_gguf_writer_set_arr(w, "a.empty", KW_GGUF_INT32, NULL, 0);
    const char *strs[] = {"alpha", "", "\xc4\xa0gamma", "<|im_start|>"};
    kw_gguf_writer_set_arr_str(w, "a.str", strs, 4);

    uint8_t *data[N_TENSORS];
    kw_err e = {{0}};
    for (size_t i = 0; i < N_TENSORS; i++) {
        size_t n = spec_bytes(&k_tensors[i]);
        KW_CHECK(n > 0);
        data[i] = malloc(n);
        fill_pattern(data[i], n, (uint32_t)i + 7);
        KW_CHECK_MSG(kw_gguf_writer_add_tensor(w, k_tensors[i].name, k_tensors[i].type, k_tensors[i].n_dims,
                                               k_tensors[i].ne, data[i], &e) == 0, "%s", e.msg);
    }
    /* a streamed tensor: rows produced by a callback */
    int64_t sne[2] = {32, 300};
    size_t srb = kw_row_bytes(KW_TYPE_Q8_0, 32);
    KW_CHECK(kw_gguf_writer_add_tensor_fill(w, "t.streamed", KW_TYPE_Q8_0, 2, sne, fill_rows, &srb, &e) == 0);
    /* rejected additions */
    KW_CHECK(kw_gguf_writer_add_tensor(w, "t.f32", KW_TYPE_F32, 1, sne, data[0], &e) == -1 && strstr(e.msg, "duplicate"));
    int64_t bad_ne[1] = {33};
    KW_CHECK(kw_gguf_writer_add_tensor(w, "t.bad", KW_TYPE_Q4_0, 1, bad_ne, data[0], &e) == -1 && strstr(e.msg, "block size"));
    KW_CHECK(kw_gguf_writer_add_tensor(w, "t.bad", 99, 1, bad_ne, data[0], &e) == -1 && strstr(e.msg, "unknown type"));
    KW_CHECK(kw_gguf_writer_add_tensor(w, "t.bad", KW_TYPE_F32, 5, sne, data[0], &e) == -1 && strstr(e.msg, "n_dims"));

    const char *path = test_file(alignment ? "rt_align.gguf" : "rt.gguf");
    KW_CHECK_MSG(kw_gguf_writer_write(w, path, &e) == 0, "%s", e.msg);
    kw_gguf_writer_destroy(w);

    kw_gguf *g = kw_gguf_open(path, &e);
    KW_CHECK_MSG(g != NULL, "%s", e.msg);
    if (!g) goto out;
    KW_CHECK_EQ_INT(g->version, 3);
    KW_CHECK_EQ_INT(g->alignment, alignment ? alignment : 32);
    KW_CHECK_EQ_INT(g->data_offset % g->alignment, 0);
    KW_CHECK_EQ_INT(g->n_kv, alignment ? 21 : 20);
    int64_t iv; double fv; bool bv;
    KW_CHECK(kw_gguf_get_int(g, "s.u8", &iv) && iv == 250);
    KW_CHECK(kw_gguf_get_int(g, "s.i8", &iv) && iv == -100);
    KW_CHECK(kw_gguf_get_int(g, "s.u16", &iv) && iv == 65000);
    KW_CHECK(kw_gguf_get_int(g, "s.i16", &iv) && iv == -32000);
    KW_CHECK(kw_gguf_get_int(g, "s.u32", &iv) && iv == 4000000000ll);
    KW_CHECK(kw_gguf_get_int(g, "s.i32", &iv) && iv == -2000000000);
    KW_CHECK(kw_gguf_get_int(g, "s.i64", &iv) && iv == -(1ll << 60));
    KW_CHECK(!kw_gguf_get_int(g, "s.u64", &iv));                  /* > INT64_MAX: not representable */
    KW_CHECK(kw_gguf_find(g, "s.u64") && kw_gguf_find(g, "s.u64")->v.u == 0xfedcba9876543210ull);
    KW_CHECK(kw_gguf_get_float(g, "s.f32", &fv) && fv == 0.25);
    KW_CHECK(kw_gguf_get_float(g, "s.f64", &fv) && fv == 3.141592653589793);
    KW_CHECK(!kw_gguf_get_float(g, "s.i32", &fv));
    KW_CHECK(kw_gguf_get_bool(g, "s.bool", &bv) && bv);
    KW_CHECK(!kw_gguf_get_bool(g, "s.u8", &bv));
    KW_CHECK(kw_gguf_get_str(g, "s.str") && !strcmp(kw_gguf_get_str(g, "s.str"), "hello, gguf"));
    KW_CHECK(kw_gguf_get_str(g, "s.empty") && kw_gguf_get_str(g, "s.empty")[0] == 0);
    KW_CHECK(kw_gguf_get_str(g, "s.u32") == NULL);
    KW_CHECK(kw_gguf_get_str(g, "no.such.key") == NULL);
    KW_CHECK(kw_gguf_get_int(g, "s.replaced", &iv) && iv == 2);
    KW_CHECK_EQ_INT(kw_gguf_find(g, "s.u16")->type, KW_GGUF_UINT16);

    const kw_gguf_kv *a = kw_gguf_find(g, "a.i32");
    KW_CHECK(a && a->type == KW_GGUF_ARRAY && a->arr_type == KW_GGUF_INT32 && a->arr_n == 5);
    if (a) { int32_t got[5]; memcpy(got, a->arr_data, sizeof got); KW_CHECK(!memcmp(got, ai32, sizeof got)); }
    a = kw_gguf_find(g, "a.f32");
    KW_CHECK(a && a->arr_type == KW_GGUF_FLOAT32 && a->arr_n == 3 && !memcmp(a->arr_data, af32, sizeof af32));
    a = kw_gguf_find(g, "a.u8");
    KW_CHECK(a && a->arr_type == KW_GGUF_UINT8 && a->arr_n == 4 && !memcmp(a->arr_data, au8, 4));
    a = kw_gguf_find(g, "a.f64");
    KW_CHECK(a && a->arr_type == KW_GGUF_FLOAT64 && a->arr_n == 2 && !memcmp(a->arr_data, af64, sizeof af64));
    a = kw_gguf_find(g, "a.empty");
    KW_CHECK(a && a->arr_n == 0);
    a = kw_gguf_find(g, "a.str");
    KW_CHECK(a && a->arr_type == KW_GGUF_STRING && a->arr_n == 4 && a->arr_str);
    if (a && a->arr_str)
        for (int i = 0; i < 4; i++)
            KW_CHECK(a->arr_str[i].len == strlen(strs[i]) && !strcmp(a->arr_str[i].s, strs[i]));

    KW_CHECK_EQ_INT(g->n_tensors, N_TENSORS + 1);
    for (size_t i = 0; i < N_TENSORS; i++) {
        const kw_gguf_tensor *t = kw_gguf_find_tensor(g, k_tensors[i].name);
        KW_CHECK_MSG(t != NULL, "%s", k_tensors[i].name);
        if (!t) continue;
        KW_CHECK_EQ_INT(t->type, k_tensors[i].type);
        KW_CHECK_EQ_INT(t->n_dims, k_tensors[i].n_dims);
        for (int d = 0; d < 4; d++) KW_CHECK_EQ_INT(t->ne[d], k_tensors[i].ne[d]);
        KW_CHECK_EQ_INT(t->nbytes, spec_bytes(&k_tensors[i]));
        KW_CHECK_EQ_INT(t->offset % g->alignment, 0);
        KW_CHECK(!memcmp(t->data, data[i], t->nbytes));
        KW_CHECK_EQ_INT(((const uint8_t *)t->data - g->base) % g->alignment, 0);
    }
    const kw_gguf_tensor *st = kw_gguf_find_tensor(g, "t.streamed");
    KW_CHECK(st && st->nbytes == srb * 300);
    if (st) {
        uint8_t row[64];
        fill_pattern(row, srb, 299);
        KW_CHECK(!memcmp((const uint8_t *)st->data + 299 * srb, row, srb));
    }
    KW_CHECK(kw_gguf_find_tensor(g, "t.nope") == NULL);
    KW_CHECK(g->size % g->alignment == 0);
    kw_gguf_close(g);
out:
    for (size_t i = 0; i < N_TENSORS; i++) free(data[i]);
}

static void test_writer_failures(void) {
    kw_err e = {{0}};
    kw_gguf_writer *w = kw_gguf_writer_create();
    int64_t ne[1] = {32};
    KW_CHECK(kw_gguf_writer_add_tensor_fill(w, "x", KW_TYPE_F32, 1, ne, fill_fail, NULL, &e) == 0);
    const char *path = test_file("fail.gguf");
    KW_CHECK(kw_gguf_writer_write(w, path, &e) == -1 && strstr(e.msg, "synthetic failure"));
    KW_CHECK(fopen(path, "rb") == NULL);   /* no half-written file left at PATH */
    KW_CHECK(kw_gguf_writer_write(w, "/nonexistent-dir/x.gguf", &e) == -1 && strstr(e.msg, "nonexistent-dir"));
    kw_gguf_writer_destroy(w);

    /* copy_kvs carries every kv (strings, arrays) into a new file */
    kw_gguf *src = kw_gguf_open(test_file("rt.gguf"), &e);
    KW_CHECK(src != NULL);
    if (!src) return;
    w = kw_gguf_writer_create();
    kw_gguf_writer_copy_kvs(w, src);
    const char *p2 = test_file("copy.gguf");
    KW_CHECK(kw_gguf_writer_write(w, p2, &e) == 0);
    kw_gguf_writer_destroy(w);
    kw_gguf *dst = kw_gguf_open(p2, &e);
    KW_CHECK(dst && dst->n_kv == src->n_kv && dst->n_tensors == 0);
    if (dst) {
        for (uint64_t i = 0; i < src->n_kv; i++) {
            const kw_gguf_kv *x = &src->kv[i], *y = kw_gguf_find(dst, x->key.s);
            KW_CHECK_MSG(y && y->type == x->type, "%s", x->key.s);
            if (y && x->type == KW_GGUF_STRING) KW_CHECK(!strcmp(x->v.s.s, y->v.s.s));
            if (y && x->type == KW_GGUF_ARRAY) KW_CHECK(y->arr_n == x->arr_n && y->arr_type == x->arr_type);
            if (y && x->type != KW_GGUF_ARRAY && x->type != KW_GGUF_STRING) KW_CHECK(!memcmp(&x->v, &y->v, 8));
        }
        kw_gguf_close(dst);
    }
    kw_gguf_close(src);
}

/* ---- truncation and allocation failures ---- */

static void test_truncation_everywhere(void) {
    size_t len = 0;
    char *file = kw_test_read_file(test_file("rt.gguf"), &len);
    KW_CHECK(file != NULL && len > 0);
    if (!file) return;
    kw_err e = {{0}};
    kw_gguf *g = kw_gguf_open_mem(file, len, &e);
    KW_CHECK(g != NULL);
    if (!g) { free(file); return; }
    uint64_t end = 0;   /* the last byte any tensor needs */
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        uint64_t x = g->data_offset + g->tensors[i].offset + g->tensors[i].nbytes;
        if (x > end) end = x;
    }
    kw_gguf_close(g);
    int bad_ok = 0, bad_fail = 0, bad_msg = 0;
    for (size_t n = 0; n < len; n++) {
        uint8_t *copy = malloc(n ? n : 1);
        memcpy(copy, file, n);
        kw_gguf *t = kw_gguf_open_mem(copy, n, &e);
        if (n < end) {
            if (t) bad_ok++;
            else if (!e.msg[0] || strchr(e.msg, '\n')) bad_msg++;
        } else if (!t) {
            bad_fail++;
        }
        kw_gguf_close(t);
        free(copy);
    }
    KW_CHECK_EQ_INT(bad_ok, 0);     /* every cut before the last tensor byte is refused */
    KW_CHECK_EQ_INT(bad_msg, 0);    /* ...with a one-line message */
    KW_CHECK_EQ_INT(bad_fail, 0);   /* only trailing padding cut: still valid */
    /* the message for a cut in the data names the tensor */
    kw_gguf *t = kw_gguf_open_mem(file, (size_t)end - 1, &e);
    KW_CHECK(!t && strstr(e.msg, "data extends past end of file"));
    kw_gguf_close(t);
    free(file);
}

static void test_alloc_failures(void) {
    size_t len = 0;
    char *file = kw_test_read_file(test_file("rt.gguf"), &len);
    if (!file) { KW_CHECK(0); return; }
    int opened = 0, clean = 1;
    for (long n = 1; n < 200 && !opened; n++) {
        kw_mem_fail_nth(n);
        kw_err e = {{0}};
        kw_gguf *g = kw_gguf_open_mem(file, len, &e);
        if (g) opened = 1;
        else if (!strstr(e.msg, "out of memory")) { clean = 0; fprintf(stderr, "fail_nth %ld: %s\n", n, e.msg); }
        kw_gguf_close(g);
    }
    kw_mem_fail_nth(0);
    KW_CHECK(opened);
    KW_CHECK(clean);
    free(file);
}

/* ---- hand-made malformed files ---- */

static void test_malformed(void) {
    static const uint64_t ne32[1] = {32}, ne32x2[2] = {32, 2};
    buf b = {0};
    kw_err e;

    put(&b, "GGUX", 4); u32(&b, 3); u64(&b, 0); u64(&b, 0);
    EXPECT_FAIL(b, "bad magic (not a GGUF file)");
    b.n = 0; put(&b, "GG", 2);
    EXPECT_FAIL(b, "bad magic");
    b.n = 0;
    EXPECT_FAIL(b, "bad magic");

    b.n = 0; header(&b, 4, 0, 0);
    EXPECT_FAIL(b, "unsupported GGUF version 4");
    b.n = 0; header(&b, 0, 0, 0);
    EXPECT_FAIL(b, "unsupported GGUF version 0");
    b.n = 0; put(&b, "GGUF", 4); u32(&b, 0x03000000u); u64(&b, 0); u64(&b, 0);
    EXPECT_FAIL(b, "big-endian");

    b.n = 0; header(&b, 3, 0, 0);   /* an empty but valid file */
    kw_gguf *g = open_buf(&b, &e);
    KW_CHECK(g && g->n_kv == 0 && g->n_tensors == 0);
    kw_gguf_close(g);

    b.n = 0; header(&b, 3, 0, 1); u64(&b, UINT64_MAX); zeros(&b, 16);
    EXPECT_FAIL(b, "metadata key 0: string length 18446744073709551615 exceeds file size");
    b.n = 0; header(&b, 3, 0, 1ull << 60);
    EXPECT_FAIL(b, "metadata count 1152921504606846976 exceeds file size");
    b.n = 0; header(&b, 3, UINT64_MAX, 0);
    EXPECT_FAIL(b, "tensor count 18446744073709551615 exceeds file size");
    b.n = 0; header(&b, 3, 0, 1); str(&b, "k"); u32(&b, 13); u32(&b, 0);
    EXPECT_FAIL(b, "metadata key 0 (k): invalid value type 13");
    b.n = 0; header(&b, 3, 0, 1); str(&b, "k"); u32(&b, KW_GGUF_STRING); u64(&b, 1ull << 40); put(&b, "abc", 3);
    EXPECT_FAIL(b, "string length 1099511627776 exceeds file size");
    b.n = 0; header(&b, 3, 0, 1); str(&b, ""); u32(&b, KW_GGUF_UINT8); put(&b, "x", 1);
    EXPECT_FAIL(b, "empty key");
    b.n = 0; header(&b, 3, 0, 1); str(&b, "bad\nkey"); u32(&b, 99); zeros(&b, 8);
    EXPECT_FAIL(b, "metadata key 0 (bad\\x0akey): invalid value type 99");   /* control bytes escaped: one line */
    b.n = 0; header(&b, 3, 0, 2); kv_u32(&b, "dup", 1); kv_u32(&b, "dup", 2);
    EXPECT_FAIL(b, "duplicate metadata key dup");
    /* arrays: huge counts of fixed-size and string elements, bad element type */
    b.n = 0; header(&b, 3, 0, 1); str(&b, "a"); u32(&b, KW_GGUF_ARRAY); u32(&b, KW_GGUF_UINT32); u64(&b, 1ull << 62);
    EXPECT_FAIL(b, "array of 4611686018427387904 u32 elements exceeds file size");
    b.n = 0; header(&b, 3, 0, 1); str(&b, "a"); u32(&b, KW_GGUF_ARRAY); u32(&b, KW_GGUF_STRING); u64(&b, UINT64_MAX);
    EXPECT_FAIL(b, "array count 18446744073709551615 exceeds file size");
    b.n = 0; header(&b, 3, 0, 1); str(&b, "a"); u32(&b, KW_GGUF_ARRAY); u32(&b, KW_GGUF_STRING); u64(&b, 2);
    str(&b, "ok"); u64(&b, 1000); put(&b, "short", 5);
    EXPECT_FAIL(b, "metadata key 0 (a): string length 1000 exceeds file size");
    b.n = 0; header(&b, 3, 0, 1); str(&b, "a"); u32(&b, KW_GGUF_ARRAY); u32(&b, 77); u64(&b, 0);
    EXPECT_FAIL(b, "invalid array element type 77");
    /* nested arrays: valid ones are skipped, too-deep ones refused */
    b.n = 0; header(&b, 3, 0, 2); str(&b, "nest"); u32(&b, KW_GGUF_ARRAY); u32(&b, KW_GGUF_ARRAY); u64(&b, 2);
    u32(&b, KW_GGUF_INT16); u64(&b, 2); le(&b, 1, 2); le(&b, 2, 2);
    u32(&b, KW_GGUF_STRING); u64(&b, 1); str(&b, "in");
    kv_u32(&b, "after", 42);
    g = open_buf(&b, &e);
    int64_t iv = 0;
    KW_CHECK_MSG(g && kw_gguf_get_int(g, "after", &iv) && iv == 42, "%s", g ? "" : e.msg);
    KW_CHECK(g && kw_gguf_find(g, "nest")->arr_type == KW_GGUF_ARRAY && kw_gguf_find(g, "nest")->arr_n == 2);
    kw_gguf_close(g);
    b.n = 0; header(&b, 3, 0, 1); str(&b, "deep"); u32(&b, KW_GGUF_ARRAY);
    for (int i = 0; i < 12; i++) { u32(&b, KW_GGUF_ARRAY); u64(&b, 1); }
    u32(&b, KW_GGUF_UINT8); u64(&b, 0);
    EXPECT_FAIL(b, "nested deeper");

    /* alignment */
    b.n = 0; header(&b, 3, 0, 1); kv_u32(&b, "general.alignment", 3);
    EXPECT_FAIL(b, "general.alignment 3 is not a power of two");
    b.n = 0; header(&b, 3, 0, 1); str(&b, "general.alignment"); u32(&b, KW_GGUF_STRING); str(&b, "32");
    EXPECT_FAIL(b, "general.alignment has type string");

    /* tensor descriptors */
    b.n = 0; header(&b, 3, 1, 0); tinfo(&b, "w", 5, (uint64_t[]){1, 1, 1, 1, 1}, 0, 0);
    EXPECT_FAIL(b, "tensor w: n_dims 5 out of range");
    b.n = 0; header(&b, 3, 1, 0); tinfo(&b, "w", 0, NULL, 0, 0); zeros(&b, 16);
    EXPECT_FAIL(b, "tensor w: n_dims 0 out of range");
    b.n = 0; header(&b, 3, 1, 0); tinfo(&b, "w", 2, (uint64_t[]){32, 0}, 0, 0);
    EXPECT_FAIL(b, "tensor w: dimension 1 is 0");
    b.n = 0; header(&b, 3, 1, 0); tinfo(&b, "w", 2, (uint64_t[]){32, UINT64_MAX}, 0, 0);
    EXPECT_FAIL(b, "tensor w: dimension 1 is 18446744073709551615 (too large)");
    b.n = 0; header(&b, 3, 1, 0); tinfo(&b, "w", 4, (uint64_t[]){1ull << 40, 1ull << 40, 1ull << 40, 1}, 0, 0);
    EXPECT_FAIL(b, "tensor w: element count overflows");
    b.n = 0; header(&b, 3, 1, 0); tinfo(&b, "w", 2, (uint64_t[]){1ull << 30, 1ull << 30}, 0, 0);
    EXPECT_FAIL(b, "tensor w: size 4611686018427387904 bytes exceeds file size");
    b.n = 0; header(&b, 3, 1, 0); tinfo(&b, "blk.0.ffn_up.weight", 1, ne32, 99, 0);
    EXPECT_FAIL(b, "tensor blk.0.ffn_up.weight: unknown tensor type 99");
    b.n = 0; header(&b, 3, 1, 0); tinfo(&b, "w", 1, ne32, 4, 0);   /* removed Q4_2 */
    EXPECT_FAIL(b, "unknown tensor type 4");
    b.n = 0; header(&b, 3, 1, 0); tinfo(&b, "w", 1, (uint64_t[]){33}, KW_TYPE_Q4_0, 0);
    EXPECT_FAIL(b, "tensor w: row length 33 is not a multiple of the q4_0 block size 32");
    b.n = 0; header(&b, 3, 1, 0); u64(&b, 0); u32(&b, 1); zeros(&b, 32);
    EXPECT_FAIL(b, "tensor 0: empty name");

    /* data placement: past the end, misaligned, overlapping, duplicates */
    b.n = 0; header(&b, 3, 1, 0); tinfo(&b, "blk.3.attn_q.weight", 2, ne32x2, KW_TYPE_F32, 0);
    pad_to(&b, 32); zeros(&b, 255);
    EXPECT_FAIL(b, "tensor blk.3.attn_q.weight: data extends past end of file");
    zeros(&b, 1);
    g = open_buf(&b, &e);
    KW_CHECK_MSG(g && g->tensors[0].nbytes == 256, "%s", e.msg);
    kw_gguf_close(g);
    b.n = 0; header(&b, 3, 1, 0); tinfo(&b, "w", 1, ne32, KW_TYPE_F32, UINT64_MAX - 15);
    pad_to(&b, 32); zeros(&b, 128);
    EXPECT_FAIL(b, "tensor w: data offset");   /* misaligned (and huge): refused before any add */
    b.n = 0; header(&b, 3, 1, 0); tinfo(&b, "w", 1, ne32, KW_TYPE_F32, UINT64_MAX - 31);
    pad_to(&b, 32); zeros(&b, 128);
    EXPECT_FAIL(b, "tensor w: data extends past end of file");
    b.n = 0; header(&b, 3, 1, 0); tinfo(&b, "w", 1, ne32, KW_TYPE_F32, 16);
    pad_to(&b, 32); zeros(&b, 256);
    EXPECT_FAIL(b, "tensor w: data offset 16 is not a multiple of the alignment 32");
    b.n = 0; header(&b, 3, 2, 0); tinfo(&b, "a", 1, ne32, KW_TYPE_F32, 0); tinfo(&b, "b", 1, ne32, KW_TYPE_F32, 96);
    pad_to(&b, 32); zeros(&b, 256);
    EXPECT_FAIL(b, "tensors a and b overlap");
    b.n = 0; header(&b, 3, 2, 0); tinfo(&b, "a", 1, ne32, KW_TYPE_F32, 0); tinfo(&b, "a", 1, ne32, KW_TYPE_F32, 128);
    pad_to(&b, 32); zeros(&b, 256);
    EXPECT_FAIL(b, "duplicate tensor name a");
    /* the same two tensors without overlap open fine (with alignment 64 honoured) */
    b.n = 0; header(&b, 3, 2, 1); kv_u32(&b, "general.alignment", 64);
    tinfo(&b, "a", 1, ne32, KW_TYPE_F32, 0); tinfo(&b, "b", 1, ne32, KW_TYPE_F32, 128);
    pad_to(&b, 64); zeros(&b, 256);
    g = open_buf(&b, &e);
    KW_CHECK_MSG(g && g->alignment == 64 && g->data_offset % 64 == 0 && g->tensors[1].data == g->base + g->data_offset + 128,
                 "%s", e.msg);
    kw_gguf_close(g);
    b.n = 0; header(&b, 3, 1, 1); kv_u32(&b, "general.alignment", 64); tinfo(&b, "a", 1, ne32, KW_TYPE_F32, 32);
    pad_to(&b, 64); zeros(&b, 256);
    EXPECT_FAIL(b, "not a multiple of the alignment 64");

    /* a missing file, a directory, an empty file */
    KW_CHECK(kw_gguf_open("/nonexistent/model.gguf", &e) == NULL && strstr(e.msg, "No such file"));
    KW_CHECK(kw_gguf_open(kw_test_tmpdir(), &e) == NULL && strstr(e.msg, "not a regular file"));
    const char *empty = test_file("empty.gguf");
    FILE *f = fopen(empty, "wb");
    if (f) fclose(f);
    KW_CHECK(kw_gguf_open(empty, &e) == NULL && strstr(e.msg, "empty"));
    free(b.p);
}

/* ---- GGUF v1: 32-bit counts, lengths and dims ---- */

static void test_v1(void) {
    buf b = {0};
    put(&b, "GGUF", 4); u32(&b, 1); u32(&b, 1); u32(&b, 2);
    u32(&b, 4); put(&b, "name", 4); u32(&b, KW_GGUF_STRING); u32(&b, 3); put(&b, "old", 3);
    u32(&b, 4); put(&b, "toks", 4); u32(&b, KW_GGUF_ARRAY); u32(&b, KW_GGUF_STRING); u32(&b, 2);
    u32(&b, 1); put(&b, "a", 1); u32(&b, 2); put(&b, "bc", 2);
    u32(&b, 1); put(&b, "w", 1); u32(&b, 2); u32(&b, 4); u32(&b, 2); u32(&b, KW_TYPE_F32); u64(&b, 0);
    pad_to(&b, 32);
    size_t data_at = b.n;
    for (int i = 0; i < 8; i++) { float x = (float)i; put(&b, &x, 4); }
    kw_err e = {{0}};
    kw_gguf *g = open_buf(&b, &e);
    KW_CHECK_MSG(g != NULL, "%s", e.msg);
    if (g) {
        KW_CHECK_EQ_INT(g->version, 1);
        KW_CHECK(!strcmp(kw_gguf_get_str(g, "name"), "old"));
        const kw_gguf_kv *t = kw_gguf_find(g, "toks");
        KW_CHECK(t && t->arr_n == 2 && !strcmp(t->arr_str[1].s, "bc"));
        const kw_gguf_tensor *w = kw_gguf_find_tensor(g, "w");
        KW_CHECK(w && w->ne[0] == 4 && w->ne[1] == 2 && w->data == g->base + data_at);
        if (w) { float x; memcpy(&x, (const uint8_t *)w->data + 28, 4); KW_CHECK(x == 7.0f); }
        kw_gguf_close(g);
    }
    /* the same v1 file truncated anywhere is refused */
    int bad = 0;
    for (size_t n = 0; n < b.n; n++) {
        uint8_t *c = malloc(n ? n : 1);
        memcpy(c, b.p, n);
        kw_gguf *t = kw_gguf_open_mem(c, n, &e);
        if (t) { bad++; kw_gguf_close(t); }
        free(c);
    }
    KW_CHECK_EQ_INT(bad, 0);
    free(b.p);
}

/* Metadata with embedded NUL and a string with a key lookup. */
static void test_mapping_accounting(void) {
    uint64_t before = kw_mem_current(KW_MEM_WEIGHTS);
    kw_err e = {{0}};
    kw_gguf *g = kw_gguf_open(test_file("rt.gguf"), &e);
    KW_CHECK(g && kw_mem_current(KW_MEM_WEIGHTS) == before + g->size);
    KW_CHECK(g && g->path && strstr(g->path, "rt.gguf"));
    kw_gguf_close(g);
    KW_CHECK_EQ_INT(kw_mem_current(KW_MEM_WEIGHTS), before);
}

int main(void) {
    test_round_trip(0);
    test_round_trip(64);
    test_writer_failures();
    test_truncation_everywhere();
    test_alloc_failures();
    test_malformed();
    test_v1();
    test_mapping_accounting();
    KW_CHECK(!strcmp(kw_gguf_vtype_name(KW_GGUF_STRING), "string") && !strcmp(kw_gguf_vtype_name((kw_gguf_vtype)99), "?"));
    return kw_test_finish();
}
