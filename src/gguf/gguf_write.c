/* gguf_write.c - the GGUF v3 writer (gguf.h): kw_gguf_writer_*.
 *
 * Owns: collecting metadata key/values (serialized at once into their
 * little-endian wire form), tensor descriptors with either a copied buffer
 * or a fill callback that produces rows at write time (so a multi-GB model
 * is written with a few MiB of memory), and writing the file: header,
 * metadata, tensor infos, aligned data. The file is written to PATH.tmp and
 * renamed into place, so a failed write never leaves a half file at PATH.
 *
 * Setters cannot fail visibly (void); an allocation failure is remembered
 * and reported by kw_gguf_writer_write(). */
#include "kvwise/gguf.h"
#include "kvwise/memory.h"
#include "kvwise/progress.h"
#include "kvwise/tensor.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WRITER_DEFAULT_ALIGNMENT 32
#define FILL_CHUNK_BYTES (4u << 20)   /* rows produced per fill call: about 4 MiB */

typedef struct bytes { uint8_t *p; size_t n, cap; int oom; } bytes;

typedef struct wkv { char *key; uint32_t type; bytes val; } wkv;

typedef struct wtensor {
    char *name;
    uint32_t type, n_dims;
    int64_t ne[4];
    uint64_t nbytes, offset;
    void *data;                 /* copied data, or NULL when fill is set */
    kw_gguf_fill_fn fill;
    void *fill_ctx;
} wtensor;

struct kw_gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    int oom;
};

/* ---- byte buffers ---- */

static void b_put(bytes *b, const void *src, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n) cap *= 2;
        uint8_t *np = realloc(b->p, cap);
        if (!np) { b->oom = 1; return; }
        b->p = np;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void b_le(bytes *b, uint64_t v, int n) {
    uint8_t tmp[8];
    for (int i = 0; i < n; i++) tmp[i] = (uint8_t)(v >> (8 * i));
    b_put(b, tmp, (size_t)n);
}

static void b_str(bytes *b, const char *s) {
    size_t n = strlen(s);
    b_le(b, n, 8);
    b_put(b, s, n);
}

/* ---- writer object ---- */

kw_gguf_writer *kw_gguf_writer_create(void) {
    return calloc(1, sizeof(kw_gguf_writer));
}

void kw_gguf_writer_destroy(kw_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) { free(w->kv[i].key); free(w->kv[i].val.p); }
    for (size_t i = 0; i < w->n_t; i++) { free(w->t[i].name); kw_mem_free(w->t[i].data); }
    free(w->kv);
    free(w->t);
    free(w);
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* Returns the kv slot for key (existing: its value is reset), or NULL on OOM. */
static wkv *kv_slot(kw_gguf_writer *w, const char *key, uint32_t type) {
    if (!w || !key) return NULL;
    for (size_t i = 0; i < w->n_kv; i++) {
        if (!strcmp(w->kv[i].key, key)) {
            w->kv[i].type = type;
            w->kv[i].val.n = 0;
            return &w->kv[i];
        }
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? w->cap_kv * 2 : 32;
        wkv *n = realloc(w->kv, cap * sizeof *n);
        if (!n) { w->oom = 1; return NULL; }
        w->kv = n;
        w->cap_kv = cap;
    }
    wkv *kv = &w->kv[w->n_kv];
    memset(kv, 0, sizeof *kv);
    kv->key = dup_str(key);
    if (!kv->key) { w->oom = 1; return NULL; }
    kv->type = type;
    w->n_kv++;
    return kv;
}

static void kv_done(kw_gguf_writer *w, wkv *kv) {
    if (kv && kv->val.oom) w->oom = 1;
}

void kw_gguf_writer_set_scalar(kw_gguf_writer *w, const char *key, kw_gguf_vtype type, const void *value) {
    int n = kw_gguf_vtype_size(type);
    if (!n || !value) { if (w) w->oom = 1; return; }   /* misuse: reported at write */
    wkv *kv = kv_slot(w, key, type);
    if (!kv) return;
    b_put(&kv->val, value, (size_t)n);   /* host order == little-endian on supported targets */
    kv_done(w, kv);
}

void kw_gguf_writer_set_u32(kw_gguf_writer *w, const char *key, uint32_t v) { kw_gguf_writer_set_scalar(w, key, KW_GGUF_UINT32, &v); }
void kw_gguf_writer_set_i32(kw_gguf_writer *w, const char *key, int32_t v) { kw_gguf_writer_set_scalar(w, key, KW_GGUF_INT32, &v); }
void kw_gguf_writer_set_u64(kw_gguf_writer *w, const char *key, uint64_t v) { kw_gguf_writer_set_scalar(w, key, KW_GGUF_UINT64, &v); }
void kw_gguf_writer_set_f32(kw_gguf_writer *w, const char *key, float v) { kw_gguf_writer_set_scalar(w, key, KW_GGUF_FLOAT32, &v); }
void kw_gguf_writer_set_bool(kw_gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    kw_gguf_writer_set_scalar(w, key, KW_GGUF_BOOL, &b);
}

void kw_gguf_writer_set_str(kw_gguf_writer *w, const char *key, const char *v) {
    wkv *kv = kv_slot(w, key, KW_GGUF_STRING);
    if (!kv) return;
    b_str(&kv->val, v ? v : "");
    kv_done(w, kv);
}

void kw_gguf_writer_set_arr(kw_gguf_writer *w, const char *key, kw_gguf_vtype elem, const void *data, uint64_t n) {
    int es = kw_gguf_vtype_size(elem);
    if (!es || (n && !data)) { if (w) w->oom = 1; return; }
    wkv *kv = kv_slot(w, key, KW_GGUF_ARRAY);
    if (!kv) return;
    b_le(&kv->val, (uint64_t)elem, 4);
    b_le(&kv->val, n, 8);
    b_put(&kv->val, data, (size_t)n * (size_t)es);
    kv_done(w, kv);
}

void kw_gguf_writer_set_arr_str(kw_gguf_writer *w, const char *key, const char *const *strs, uint64_t n) {
    wkv *kv = kv_slot(w, key, KW_GGUF_ARRAY);
    if (!kv) return;
    b_le(&kv->val, KW_GGUF_STRING, 4);
    b_le(&kv->val, n, 8);
    for (uint64_t i = 0; i < n; i++) b_str(&kv->val, strs[i] ? strs[i] : "");
    kv_done(w, kv);
}

/* Strings from a kw_gguf may hold embedded NULs: copy them by length. */
static void b_kwstr(bytes *b, const kw_str *s) {
    b_le(b, s->len, 8);
    b_put(b, s->s, (size_t)s->len);
}

void kw_gguf_writer_copy_kvs(kw_gguf_writer *w, const kw_gguf *src) {
    if (!w || !src) return;
    for (uint64_t i = 0; i < src->n_kv; i++) {
        const kw_gguf_kv *s = &src->kv[i];
        if (s->type == KW_GGUF_ARRAY && s->arr_type == KW_GGUF_ARRAY) continue;   /* nested arrays: not carried */
        wkv *kv = kv_slot(w, s->key.s, s->type);
        if (!kv) return;
        if (s->type == KW_GGUF_STRING) {
            b_kwstr(&kv->val, &s->v.s);
        } else if (s->type == KW_GGUF_ARRAY) {
            b_le(&kv->val, s->arr_type, 4);
            b_le(&kv->val, s->arr_n, 8);
            if (s->arr_type == KW_GGUF_STRING)
                for (uint64_t j = 0; j < s->arr_n; j++) b_kwstr(&kv->val, &s->arr_str[j]);
            else
                b_put(&kv->val, s->arr_data, (size_t)s->arr_n * (size_t)kw_gguf_vtype_size(s->arr_type));
        } else {
            uint8_t raw[8];
            int n = kw_gguf_vtype_size(s->type);
            if (s->type == KW_GGUF_FLOAT32) { float f = (float)s->v.f; memcpy(raw, &f, 4); }
            else if (s->type == KW_GGUF_FLOAT64) memcpy(raw, &s->v.f, 8);
            else if (s->type == KW_GGUF_BOOL) raw[0] = s->v.b;
            else for (int k = 0; k < n; k++) raw[k] = (uint8_t)(s->v.u >> (8 * k));
            b_put(&kv->val, raw, (size_t)n);
        }
        kv_done(w, kv);
    }
}

/* ---- tensors ---- */

static int check_tensor(kw_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                        const int64_t *ne, uint64_t *nbytes, kw_err *err) {
    if (!w || !name || !*name) return kw_err_set(err, "tensor: empty name");
    if (n_dims < 1 || n_dims > 4 || !ne) return kw_err_set(err, "tensor %s: n_dims %u out of range (1..4)", name, n_dims);
    const kw_type_traits *tr = kw_type_traits_get(type);
    if (!tr || tr->block_size <= 0 || tr->type_size <= 0) return kw_err_set(err, "tensor %s: unknown type %u", name, type);
    uint64_t rows = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] <= 0) return kw_err_set(err, "tensor %s: dimension %u is %lld (must be > 0)", name, d, (long long)ne[d]);
        if (d > 0) {
            if ((uint64_t)ne[d] > UINT64_MAX / rows) return kw_err_set(err, "tensor %s: shape overflows", name);
            rows *= (uint64_t)ne[d];
        }
    }
    if (ne[0] % tr->block_size)
        return kw_err_set(err, "tensor %s: row length %lld is not a multiple of the %s block size %d",
                          name, (long long)ne[0], tr->name, tr->block_size);
    uint64_t row = (uint64_t)(ne[0] / tr->block_size) * (uint64_t)tr->type_size;
    if (row > UINT64_MAX / rows) return kw_err_set(err, "tensor %s: byte size overflows", name);
    *nbytes = row * rows;
    for (size_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name)) return kw_err_set(err, "tensor %s: duplicate name", name);
    return 0;
}

static wtensor *tensor_slot(kw_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                            const int64_t *ne, uint64_t nbytes, kw_err *err) {
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? w->cap_t * 2 : 64;
        wtensor *n = realloc(w->t, cap * sizeof *n);
        if (!n) { kw_err_set(err, "out of memory"); return NULL; }
        w->t = n;
        w->cap_t = cap;
    }
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    t->name = dup_str(name);
    if (!t->name) { kw_err_set(err, "out of memory"); return NULL; }
    t->type = type;
    t->n_dims = n_dims;
    for (int d = 0; d < 4; d++) t->ne[d] = d < (int)n_dims ? ne[d] : 1;
    t->nbytes = nbytes;
    w->n_t++;
    return t;
}

int kw_gguf_writer_add_tensor(kw_gguf_writer *w, const char *name, uint32_t type,
                              uint32_t n_dims, const int64_t *ne, const void *data, kw_err *err) {
    uint64_t nbytes;
    if (check_tensor(w, name, type, n_dims, ne, &nbytes, err)) return -1;
    if (!data) return kw_err_set(err, "tensor %s: no data", name);
    void *copy = kw_mem_alloc(KW_MEM_OTHER, (size_t)nbytes);
    if (!copy) return kw_err_set(err, "tensor %s: out of memory copying %llu bytes", name, (unsigned long long)nbytes);
    memcpy(copy, data, (size_t)nbytes);
    wtensor *t = tensor_slot(w, name, type, n_dims, ne, nbytes, err);
    if (!t) { kw_mem_free(copy); return -1; }
    t->data = copy;
    return 0;
}

int kw_gguf_writer_add_tensor_fill(kw_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                   const int64_t *ne, kw_gguf_fill_fn fill, void *ctx, kw_err *err) {
    uint64_t nbytes;
    if (check_tensor(w, name, type, n_dims, ne, &nbytes, err)) return -1;
    if (!fill) return kw_err_set(err, "tensor %s: no fill function", name);
    wtensor *t = tensor_slot(w, name, type, n_dims, ne, nbytes, err);
    if (!t) return -1;
    t->fill = fill;
    t->fill_ctx = ctx;
    return 0;
}

/* ---- writing ---- */

static uint32_t writer_alignment(const kw_gguf_writer *w) {
    for (size_t i = 0; i < w->n_kv; i++) {
        const wkv *kv = &w->kv[i];
        if (!strcmp(kv->key, "general.alignment") && kv->type == KW_GGUF_UINT32 && kv->val.n == 4) {
            uint32_t a;
            memcpy(&a, kv->val.p, 4);
            if (a && !(a & (a - 1))) return a;
        }
    }
    return WRITER_DEFAULT_ALIGNMENT;
}

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static int write_all(FILE *f, const void *p, size_t n, const char *path, kw_err *err) {
    if (n && fwrite(p, 1, n, f) != n) return kw_err_set(err, "%s: write failed: %s", path, strerror(errno));
    return 0;
}

static int write_zeros(FILE *f, uint64_t n, const char *path, kw_err *err) {
    static const uint8_t zeros[64];
    while (n) {
        size_t k = n > sizeof zeros ? sizeof zeros : (size_t)n;
        if (write_all(f, zeros, k, path, err)) return -1;
        n -= k;
    }
    return 0;
}

static int write_filled(FILE *f, wtensor *t, const char *path, kw_progress *p, kw_err *err) {
    int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    size_t row_bytes = (size_t)(t->nbytes / (uint64_t)rows);
    int64_t per = row_bytes >= FILL_CHUNK_BYTES ? 1 : (int64_t)(FILL_CHUNK_BYTES / row_bytes);
    if (per > rows) per = rows;
    uint8_t *buf = kw_mem_alloc(KW_MEM_WORKSPACE, (size_t)per * row_bytes);
    if (!buf) return kw_err_set(err, "tensor %s: out of memory for a write buffer", t->name);
    int rc = 0;
    for (int64_t r = 0; r < rows && rc == 0; r += per) {
        int64_t n = rows - r < per ? rows - r : per;
        kw_err ferr = {{0}};
        if (t->fill(t->fill_ctx, r, n, buf, &ferr))
            rc = kw_err_set(err, "tensor %s: %s", t->name, ferr.msg[0] ? ferr.msg : "fill failed");
        else
            rc = write_all(f, buf, (size_t)n * row_bytes, path, err);
        kw_progress_add(p, (uint64_t)n * row_bytes);
    }
    kw_mem_free(buf);
    return rc;
}

static int write_file(kw_gguf_writer *w, FILE *f, const char *path, kw_progress *p, kw_err *err) {
    uint32_t align = writer_alignment(w);
    bytes h = {0};
    b_put(&h, "GGUF", 4);
    b_le(&h, 3, 4);
    b_le(&h, w->n_t, 8);
    b_le(&h, w->n_kv, 8);
    for (size_t i = 0; i < w->n_kv; i++) {
        b_str(&h, w->kv[i].key);
        b_le(&h, w->kv[i].type, 4);
        b_put(&h, w->kv[i].val.p, w->kv[i].val.n);
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        wtensor *t = &w->t[i];
        b_str(&h, t->name);
        b_le(&h, t->n_dims, 4);
        for (uint32_t d = 0; d < t->n_dims; d++) b_le(&h, (uint64_t)t->ne[d], 8);
        b_le(&h, t->type, 4);
        t->offset = off;
        b_le(&h, off, 8);
        off = align_up(off + t->nbytes, align);
    }
    int rc = 0;
    if (h.oom) rc = kw_err_set(err, "out of memory building the GGUF header");
    if (!rc) rc = write_all(f, h.p, h.n, path, err);
    if (!rc) rc = write_zeros(f, align_up(h.n, align) - h.n, path, err);
    free(h.p);
    uint64_t pos = 0;
    for (size_t i = 0; i < w->n_t && rc == 0; i++) {
        wtensor *t = &w->t[i];
        rc = write_zeros(f, t->offset - pos, path, err);
        if (!rc && t->fill) rc = write_filled(f, t, path, p, err);
        else if (!rc) {
            rc = write_all(f, t->data, (size_t)t->nbytes, path, err);
            kw_progress_add(p, t->nbytes);
        }
        pos = t->offset + t->nbytes;
    }
    if (!rc && w->n_t) rc = write_zeros(f, align_up(pos, align) - pos, path, err);
    return rc;
}

int kw_gguf_writer_write(kw_gguf_writer *w, const char *path, kw_err *err) {
    return kw_gguf_writer_write_progress(w, path, NULL, err);
}

int kw_gguf_writer_write_progress(kw_gguf_writer *w, const char *path, kw_progress *p, kw_err *err) {
    if (!w || !path) return kw_err_set(err, "gguf writer: bad arguments");
    if (w->oom) return kw_err_set(err, "%s: a metadata value could not be stored (out of memory or bad type)", path);
    size_t n = strlen(path);
    char *tmp = malloc(n + 5);
    if (!tmp) return kw_err_set(err, "out of memory");
    memcpy(tmp, path, n);
    memcpy(tmp + n, ".tmp", 5);
    FILE *f = fopen(tmp, "wb");
    if (!f) { kw_err_set(err, "%s: %s", tmp, strerror(errno)); free(tmp); return -1; }
    char *iobuf = malloc(1u << 20);   /* large sequential writes */
    if (iobuf) setvbuf(f, iobuf, _IOFBF, 1u << 20);
    if (p) {
        uint64_t total = 0;
        for (size_t i = 0; i < w->n_t; i++) total += w->t[i].nbytes;
        kw_progress_set_total(p, total);
    }
    int rc = write_file(w, f, path, p, err);
    if (fclose(f) != 0 && rc == 0) rc = kw_err_set(err, "%s: write failed: %s", path, strerror(errno));
    free(iobuf);
    if (rc == 0 && rename(tmp, path) != 0) rc = kw_err_set(err, "%s: rename failed: %s", path, strerror(errno));
    if (rc != 0) remove(tmp);
    free(tmp);
    return rc;
}
