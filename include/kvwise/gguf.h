/* kvwise/gguf.h - GGUF files: a validating reader (mmap) and a writer.
 *
 * The reader maps the file read-only, parses the header, every metadata
 * key/value and every tensor descriptor, and checks every length, offset,
 * shape and type against the file size before anything is used. On any
 * problem kw_gguf_open() returns NULL with a one-line message such as
 *   "tensor blk.3.attn_q.weight: data extends past end of file".
 * Strings are copied out as NUL-terminated heap strings (kw_str.s), so they
 * stay valid for the life of the kw_gguf and can be used with C string
 * functions (their length is kw_str.len; embedded NULs are possible).
 * Tensor data pointers point into the mapping. kw_gguf_open() notes the
 * mapping with kw_mem_note_mapped(KW_MEM_WEIGHTS, size) and un-notes it on
 * close, so callers must not note it again. Numeric array elements
 * (arr_data) are unaligned little-endian bytes: read them with memcpy. */
#ifndef KVWISE_GGUF_H
#define KVWISE_GGUF_H
#include "kvwise/common.h"

typedef enum kw_gguf_vtype {
    KW_GGUF_UINT8 = 0, KW_GGUF_INT8 = 1, KW_GGUF_UINT16 = 2, KW_GGUF_INT16 = 3,
    KW_GGUF_UINT32 = 4, KW_GGUF_INT32 = 5, KW_GGUF_FLOAT32 = 6, KW_GGUF_BOOL = 7,
    KW_GGUF_STRING = 8, KW_GGUF_ARRAY = 9, KW_GGUF_UINT64 = 10, KW_GGUF_INT64 = 11,
    KW_GGUF_FLOAT64 = 12,
} kw_gguf_vtype;

typedef struct kw_str { const char *s; uint64_t len; } kw_str;

typedef struct kw_gguf_kv {
    kw_str key;
    kw_gguf_vtype type;
    /* scalars (type != ARRAY): decoded value */
    union { uint64_t u; int64_t i; double f; bool b; kw_str s; } v;
    /* arrays (type == ARRAY) */
    kw_gguf_vtype arr_type;
    uint64_t arr_n;
    const void *arr_data;   /* numeric arrays: raw little-endian elements in the mapping */
    kw_str *arr_str;        /* string arrays: arr_n strings */
} kw_gguf_kv;

typedef struct kw_gguf_tensor {
    kw_str name;
    uint32_t n_dims;
    int64_t ne[4];          /* ne[0] = innermost (row length); unused dims are 1 */
    uint32_t type;          /* a kw_type value (tensor.h) */
    uint64_t offset;        /* relative to the data section */
    uint64_t nbytes;
    const void *data;       /* into the mapping */
} kw_gguf_tensor;

typedef struct kw_gguf {
    uint32_t version;
    uint64_t n_kv, n_tensors;
    kw_gguf_kv *kv;
    kw_gguf_tensor *tensors;
    uint32_t alignment;
    uint64_t data_offset;   /* start of the tensor data section in the file */
    const uint8_t *base;    /* the whole mapping */
    uint64_t size;          /* file size */
    int owns_mapping;
    char *path;
} kw_gguf;

/* Opens and validates a file. Tensor data is mmapped (MAP_PRIVATE, read-only). */
kw_gguf *kw_gguf_open(const char *path, kw_err *err);
/* Same over a caller-owned buffer (fuzzing, tests); buf must outlive the result. */
kw_gguf *kw_gguf_open_mem(const void *buf, size_t len, kw_err *err);
void kw_gguf_close(kw_gguf *g);

const kw_gguf_kv *kw_gguf_find(const kw_gguf *g, const char *key);
const kw_gguf_tensor *kw_gguf_find_tensor(const kw_gguf *g, const char *name);
/* Typed getters: return true when the key exists with a compatible type
 * (any integer type for get_int, F32/F64 for get_float). */
bool kw_gguf_get_int(const kw_gguf *g, const char *key, int64_t *out);
bool kw_gguf_get_float(const kw_gguf *g, const char *key, double *out);
bool kw_gguf_get_bool(const kw_gguf *g, const char *key, bool *out);
const char *kw_gguf_get_str(const kw_gguf *g, const char *key);  /* NULL if absent / not a string */
const char *kw_gguf_vtype_name(kw_gguf_vtype t);
/* Bytes of one value of a fixed-size type (1, 2, 4 or 8); 0 for STRING, ARRAY
 * and numbers that name no type. */
int kw_gguf_vtype_size(uint32_t t);

/* ---- writer ----
 * Usage: w = kw_gguf_writer_create(); add kvs and tensors (data is copied or
 * borrowed, see below); kw_gguf_writer_write(w, path, err); destroy. Version 3,
 * alignment 32 (general.alignment is honoured if set as a u32 kv). */
typedef struct kw_gguf_writer kw_gguf_writer;
kw_gguf_writer *kw_gguf_writer_create(void);
void kw_gguf_writer_destroy(kw_gguf_writer *w);
void kw_gguf_writer_set_u32(kw_gguf_writer *w, const char *key, uint32_t v);
void kw_gguf_writer_set_i32(kw_gguf_writer *w, const char *key, int32_t v);
void kw_gguf_writer_set_u64(kw_gguf_writer *w, const char *key, uint64_t v);
void kw_gguf_writer_set_f32(kw_gguf_writer *w, const char *key, float v);
void kw_gguf_writer_set_bool(kw_gguf_writer *w, const char *key, bool v);
/* Any scalar type (not STRING/ARRAY); value points to one host-order element. */
void kw_gguf_writer_set_scalar(kw_gguf_writer *w, const char *key, kw_gguf_vtype type, const void *value);
void kw_gguf_writer_set_str(kw_gguf_writer *w, const char *key, const char *v);
/* Arrays: numeric element types copy n elements from data; strings copy n C strings. */
void kw_gguf_writer_set_arr(kw_gguf_writer *w, const char *key, kw_gguf_vtype elem, const void *data, uint64_t n);
void kw_gguf_writer_set_arr_str(kw_gguf_writer *w, const char *key, const char *const *strs, uint64_t n);
/* Copies every kv of an opened file (e.g. to carry a tokenizer over). */
void kw_gguf_writer_copy_kvs(kw_gguf_writer *w, const kw_gguf *src);
/* Adds a tensor; `data` (nbytes = kw_row_bytes(type, ne[0]) * ne[1]*ne[2]*ne[3])
 * is copied. Returns 0 or -1 (bad shape/type, duplicate name). */
int kw_gguf_writer_add_tensor(kw_gguf_writer *w, const char *name, uint32_t type,
                              uint32_t n_dims, const int64_t *ne, const void *data, kw_err *err);
/* Streaming variant: nothing is copied; at write time the writer calls
 * fill(ctx, first_row, n_rows, dst, err) for consecutive chunks of about
 * 4 MiB of rows (rows = ne[1]*ne[2]*ne[3], each kw_row_bytes(type, ne[0])
 * bytes) and writes them out, so peak memory is one chunk per writer, not
 * the model. fill returns 0, or -1 with err set (the write then fails).
 * ctx must stay valid until kw_gguf_writer_write() returns. */
typedef int (*kw_gguf_fill_fn)(void *ctx, int64_t first_row, int64_t n_rows, void *dst, kw_err *err);
int kw_gguf_writer_add_tensor_fill(kw_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                   const int64_t *ne, kw_gguf_fill_fn fill, void *ctx, kw_err *err);
/* Writes PATH.tmp and renames it to PATH (no half-written file at PATH). */
int kw_gguf_writer_write(kw_gguf_writer *w, const char *path, kw_err *err);
/* The same, reporting the tensor data written to p (progress.h; its total is
 * set to the data bytes; p may be NULL). */
struct kw_progress;
int kw_gguf_writer_write_progress(kw_gguf_writer *w, const char *path, struct kw_progress *p, kw_err *err);

#endif
