/* gguf_read.c - the validating GGUF reader (gguf.h): kw_gguf_open(),
 * kw_gguf_open_mem(), kw_gguf_close() and the lookup/getter functions.
 *
 * Owns: parsing the header, the metadata key/values (every value type,
 * string arrays, nested arrays validated and skipped), the tensor
 * descriptors, and every bounds check on them. Nothing is read from the
 * buffer before the bytes it needs are known to be inside it; every count
 * is checked against the bytes left before anything is allocated for it.
 * GGUF v1 (32-bit counts and lengths), v2 and v3 (64-bit) are accepted.
 *
 * Memory: kv/tensor arrays grow with what is actually parsed; strings are
 * copied into a chunked arena. All of it goes through kw_mem_alloc
 * (KW_MEM_OTHER); the file mapping is noted as KW_MEM_WEIGHTS. */
#include "kvwise/gguf.h"
#include "kvwise/memory.h"
#include "kvwise/tensor.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NESTING 8
#define ARENA_CHUNK (64u * 1024u)

/* ---- string arena: NUL-terminated copies of the file's strings ---- */

typedef struct arena_chunk { struct arena_chunk *next; size_t used, cap; char data[]; } arena_chunk;

/* Private part of a kw_gguf: allocated together with it. */
typedef struct gguf_priv {
    kw_gguf pub;
    arena_chunk *arena;
    uint32_t *tensor_order;   /* tensor indices sorted by name */
    uint32_t *kv_order;       /* kv indices sorted by key */
    size_t map_len;           /* bytes mapped (0 for open_mem) */
    uint64_t kv_cap, tensor_cap; /* allocated slots (zeroed beyond what was parsed) */
} gguf_priv;

static char *arena_copy(gguf_priv *p, const uint8_t *src, uint64_t len) {
    arena_chunk *c = p->arena;
    size_t need = (size_t)len + 1;
    if (!c || c->cap - c->used < need) {
        size_t cap = need > ARENA_CHUNK ? need : ARENA_CHUNK;
        c = kw_mem_alloc(KW_MEM_OTHER, sizeof(arena_chunk) + cap);
        if (!c) return NULL;
        c->next = p->arena;
        c->used = 0;
        c->cap = cap;
        p->arena = c;
    }
    char *dst = c->data + c->used;
    if (len) memcpy(dst, src, (size_t)len);
    dst[len] = 0;
    c->used += need;
    return dst;
}

/* ---- cursor over the buffer ---- */

typedef struct cursor {
    const uint8_t *base;
    uint64_t size, pos;
    uint32_t version;
    gguf_priv *g;
    kw_err *err;
    char shown[2][128];   /* names made printable for messages */
} cursor;

/* A name from the file, safe to print on one line: control and non-ASCII
 * bytes become \xNN, long names are cut with "...". */
static const char *show(cursor *c, int slot, const kw_str *s) {
    char *out = c->shown[slot];
    size_t o = 0, cap = sizeof c->shown[slot];
    for (uint64_t i = 0; i < s->len; i++) {
        unsigned char ch = (unsigned char)s->s[i];
        if (o + 8 >= cap) { memcpy(out + o, "...", 4); return out; }
        if (ch >= 0x20 && ch < 0x7f) out[o++] = (char)ch;
        else o += (size_t)snprintf(out + o, cap - o, "\\x%02x", ch);
    }
    out[o] = 0;
    return out;
}

static uint64_t bytes_left(const cursor *c) { return c->size - c->pos; }

static int need(cursor *c, uint64_t n, const char *what) {
    if (n > bytes_left(c))
        return kw_err_set(c->err, "%s at offset %llu: needs %llu bytes but only %llu remain (truncated file?)",
                          what, (unsigned long long)c->pos, (unsigned long long)n,
                          (unsigned long long)bytes_left(c));
    return 0;
}

static uint64_t load_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static int read_uint(cursor *c, int n, uint64_t *out, const char *what) {
    if (need(c, (uint64_t)n, what)) return -1;
    *out = load_le(c->base + c->pos, n);
    c->pos += (uint64_t)n;
    return 0;
}

/* A count or length: u32 in v1, u64 in v2/v3. */
static int read_count(cursor *c, uint64_t *out, const char *what) {
    return read_uint(c, c->version == 1 ? 4 : 8, out, what);
}

/* Reads a string's length and checks its bytes are present; *start is its offset. */
static int scan_string(cursor *c, uint64_t *start, uint64_t *len, const char *what) {
    if (read_count(c, len, what)) return -1;
    if (*len > bytes_left(c))
        return kw_err_set(c->err, "%s: string length %llu exceeds file size (%llu bytes remain at offset %llu)",
                          what, (unsigned long long)*len, (unsigned long long)bytes_left(c),
                          (unsigned long long)c->pos);
    *start = c->pos;
    c->pos += *len;
    return 0;
}

static int read_string(cursor *c, kw_str *out, const char *what) {
    uint64_t start, len;
    if (scan_string(c, &start, &len, what)) return -1;
    char *s = arena_copy(c->g, c->base + start, len);
    if (!s) return kw_err_set(c->err, "%s: out of memory copying a string of %llu bytes", what, (unsigned long long)len);
    out->s = s;
    out->len = len;
    return 0;
}

/* ---- value types ---- */

int kw_gguf_vtype_size(uint32_t t) {
    switch (t) {
    case KW_GGUF_UINT8: case KW_GGUF_INT8: case KW_GGUF_BOOL: return 1;
    case KW_GGUF_UINT16: case KW_GGUF_INT16: return 2;
    case KW_GGUF_UINT32: case KW_GGUF_INT32: case KW_GGUF_FLOAT32: return 4;
    case KW_GGUF_UINT64: case KW_GGUF_INT64: case KW_GGUF_FLOAT64: return 8;
    default: return 0;   /* STRING, ARRAY: variable; others: invalid */
    }
}

static bool vtype_valid(uint32_t t) { return t <= KW_GGUF_FLOAT64; }

const char *kw_gguf_vtype_name(kw_gguf_vtype t) {
    static const char *names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool",
                                  "string", "array", "u64", "i64", "f64"};
    return (unsigned)t <= KW_GGUF_FLOAT64 ? names[t] : "?";
}

static bool vtype_signed(uint32_t t) {
    return t == KW_GGUF_INT8 || t == KW_GGUF_INT16 || t == KW_GGUF_INT32 || t == KW_GGUF_INT64;
}

static void decode_scalar(kw_gguf_kv *kv, const uint8_t *p) {
    int n = kw_gguf_vtype_size(kv->type);
    uint64_t raw = load_le(p, n);
    switch (kv->type) {
    case KW_GGUF_FLOAT32: { uint32_t b = (uint32_t)raw; float f; memcpy(&f, &b, 4); kv->v.f = f; break; }
    case KW_GGUF_FLOAT64: { double d; memcpy(&d, &raw, 8); kv->v.f = d; break; }
    case KW_GGUF_BOOL: kv->v.b = raw != 0; break;
    default:
        if (vtype_signed(kv->type)) {
            int shift = 64 - 8 * n;   /* sign-extend */
            kv->v.i = (int64_t)(raw << shift) >> shift;
        } else {
            kv->v.u = raw;
        }
    }
}

/* Validates and skips an array body of n elements of type t (nested arrays allowed). */
static int skip_array_body(cursor *c, uint32_t t, uint64_t n, int depth, const char *what) {
    if (depth > GGUF_MAX_NESTING) return kw_err_set(c->err, "%s: arrays nested deeper than %d levels", what, GGUF_MAX_NESTING);
    if (!vtype_valid(t)) return kw_err_set(c->err, "%s: invalid array element type %u", what, t);
    int es = kw_gguf_vtype_size(t);
    if (es) {
        if (n > bytes_left(c) / (uint64_t)es)
            return kw_err_set(c->err, "%s: array of %llu %s elements exceeds file size", what,
                              (unsigned long long)n, kw_gguf_vtype_name((kw_gguf_vtype)t));
        c->pos += n * (uint64_t)es;
        return 0;
    }
    uint64_t min_elem = c->version == 1 ? 4 : 8;   /* a string length or inner type+count */
    if (n > bytes_left(c) / min_elem)
        return kw_err_set(c->err, "%s: array count %llu exceeds file size", what, (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++) {
        if (t == KW_GGUF_STRING) {
            uint64_t s, l;
            if (scan_string(c, &s, &l, what)) return -1;
        } else {
            uint64_t it, in;
            if (read_uint(c, 4, &it, what) || read_count(c, &in, what)) return -1;
            if (skip_array_body(c, (uint32_t)it, in, depth + 1, what)) return -1;
        }
    }
    return 0;
}

static int read_array(cursor *c, kw_gguf_kv *kv, const char *what) {
    uint64_t et, n;
    if (read_uint(c, 4, &et, what)) return -1;
    if (!vtype_valid((uint32_t)et) || et > UINT32_MAX)
        return kw_err_set(c->err, "%s: invalid array element type %llu", what, (unsigned long long)et);
    if (read_count(c, &n, what)) return -1;
    kv->arr_type = (kw_gguf_vtype)et;
    kv->arr_n = n;
    uint64_t start = c->pos;
    if (skip_array_body(c, (uint32_t)et, n, 1, what)) return -1;
    kv->arr_data = c->base + start;
    if (et != KW_GGUF_STRING) return 0;
    /* Strings: the scan above proved all n lengths lie inside the file, so
     * n * sizeof(kw_str) is bounded by the file's size. */
    kv->arr_str = n ? kw_mem_alloc(KW_MEM_OTHER, (size_t)n * sizeof(kw_str)) : NULL;
    if (n && !kv->arr_str) return kw_err_set(c->err, "%s: out of memory for %llu strings", what, (unsigned long long)n);
    uint64_t end = c->pos;
    c->pos = start;
    for (uint64_t i = 0; i < n; i++)
        if (read_string(c, &kv->arr_str[i], what)) return -1;
    c->pos = end;
    return 0;
}

static int read_value(cursor *c, kw_gguf_kv *kv, const char *what) {
    if (kv->type == KW_GGUF_STRING) return read_string(c, &kv->v.s, what);
    if (kv->type == KW_GGUF_ARRAY) return read_array(c, kv, what);
    int n = kw_gguf_vtype_size(kv->type);
    if (need(c, (uint64_t)n, what)) return -1;
    decode_scalar(kv, c->base + c->pos);
    c->pos += (uint64_t)n;
    return 0;
}

/* ---- growable arrays ---- */

static int grow(void **arr, uint64_t *cap, uint64_t used, size_t elem) {
    if (used < *cap) return 0;
    uint64_t ncap = *cap ? *cap * 2 : 16;
    void *n = kw_mem_calloc(KW_MEM_OTHER, (size_t)ncap * elem);
    if (!n) return -1;
    if (*arr) { memcpy(n, *arr, (size_t)used * elem); kw_mem_free(*arr); }
    *arr = n;
    *cap = ncap;
    return 0;
}

/* ---- sorted indices (duplicate detection and lookup) ---- */

static int str_cmp(const kw_str *a, const kw_str *b) {
    uint64_t n = a->len < b->len ? a->len : b->len;
    int r = memcmp(a->s, b->s, (size_t)n);
    if (r) return r;
    return a->len < b->len ? -1 : a->len > b->len;
}

/* qsort has no context argument in C11, so entries carry their sort key. */
typedef struct name_entry { kw_str name; uint32_t idx; } name_entry;
typedef struct off_entry { uint64_t offset; uint32_t idx; } off_entry;

static int cmp_name_entry(const void *a, const void *b) {
    return str_cmp(&((const name_entry *)a)->name, &((const name_entry *)b)->name);
}
static int cmp_off_entry(const void *a, const void *b) {
    uint64_t x = ((const off_entry *)a)->offset, y = ((const off_entry *)b)->offset;
    return x < y ? -1 : x > y;
}

/* Indices of n names (stride bytes apart, starting at first) sorted by name. */
static uint32_t *sorted_names(const void *first, size_t stride, uint64_t n) {
    name_entry *e = kw_mem_alloc(KW_MEM_OTHER, (size_t)(n ? n : 1) * sizeof *e);
    uint32_t *idx = kw_mem_alloc(KW_MEM_OTHER, (size_t)(n ? n : 1) * sizeof *idx);
    if (!e || !idx) { kw_mem_free(e); kw_mem_free(idx); return NULL; }
    for (uint64_t i = 0; i < n; i++) {
        e[i].name = *(const kw_str *)((const char *)first + i * stride);
        e[i].idx = (uint32_t)i;
    }
    qsort(e, (size_t)n, sizeof *e, cmp_name_entry);
    for (uint64_t i = 0; i < n; i++) idx[i] = e[i].idx;
    kw_mem_free(e);
    return idx;
}

/* ---- header, metadata, tensor descriptors ---- */

static int parse_header(cursor *c, kw_gguf *g) {
    if (c->size < 4 || memcmp(c->base, GGUF_MAGIC, 4) != 0)
        return kw_err_set(c->err, "bad magic (not a GGUF file)");
    c->pos = 4;
    uint64_t v;
    if (read_uint(c, 4, &v, "header version")) return -1;
    if (v == 0x01000000u || v == 0x02000000u || v == 0x03000000u)
        return kw_err_set(c->err, "big-endian GGUF (version bytes %08llx) is not supported", (unsigned long long)v);
    if (v < 1 || v > 3)
        return kw_err_set(c->err, "unsupported GGUF version %llu (supported: 1, 2, 3)", (unsigned long long)v);
    g->version = c->version = (uint32_t)v;
    if (read_count(c, &g->n_tensors, "header tensor count") || read_count(c, &g->n_kv, "header metadata count")) return -1;
    /* A kv needs at least a key length, a type and a 1-byte value; a tensor
     * descriptor at least a name length, n_dims, one dim, a type, an offset. */
    uint64_t min_kv = c->version == 1 ? 9 : 13, min_tensor = c->version == 1 ? 20 : 28;
    if (g->n_kv > bytes_left(c) / min_kv)
        return kw_err_set(c->err, "metadata count %llu exceeds file size (truncated or corrupt file?)", (unsigned long long)g->n_kv);
    if (g->n_tensors > bytes_left(c) / min_tensor)
        return kw_err_set(c->err, "tensor count %llu exceeds file size (truncated or corrupt file?)", (unsigned long long)g->n_tensors);
    if (g->n_tensors > UINT32_MAX || g->n_kv > UINT32_MAX)
        return kw_err_set(c->err, "tensor/metadata counts too large");
    return 0;
}

/* Entry i of the growing array *arr (capacity *cap), room made for it; NULL
 * with "out of memory reading <list>" when there is none. */
static void *grow_entry(cursor *c, void **arr, uint64_t *cap, uint64_t i, size_t elem, const char *list) {
    if (grow(arr, cap, i, elem)) {
        kw_err_set(c->err, "out of memory reading %s", list);
        return NULL;
    }
    return (char *)*arr + i * elem;
}

/* Reads the name of entry i of a list, refusing an empty one: errors say
 * "<entry> i<suffix>: ..." while reading and "<entry> i: empty <noun>"
 * when it is empty. */
static int read_entry_name(cursor *c, kw_str *name, uint64_t i, const char *entry, const char *suffix, const char *noun) {
    char what[192];
    snprintf(what, sizeof what, "%s %llu%s", entry, (unsigned long long)i, suffix);
    if (read_string(c, name, what)) return -1;
    if (name->len == 0) return kw_err_set(c->err, "%s %llu: empty %s", entry, (unsigned long long)i, noun);
    return 0;
}

static int parse_metadata(cursor *c, kw_gguf *g) {
    for (uint64_t i = 0; i < g->n_kv; i++) {
        kw_gguf_kv *kv = grow_entry(c, (void **)&g->kv, &c->g->kv_cap, i, sizeof *kv, "metadata");
        if (!kv || read_entry_name(c, &kv->key, i, "metadata key", "", "key")) return -1;
        char what[192];
        snprintf(what, sizeof what, "metadata key %llu (%s)", (unsigned long long)i, show(c, 0, &kv->key));
        uint64_t t;
        if (read_uint(c, 4, &t, what)) return -1;
        if (!vtype_valid((uint32_t)t) || t > UINT32_MAX)
            return kw_err_set(c->err, "%s: invalid value type %llu", what, (unsigned long long)t);
        kv->type = (kw_gguf_vtype)t;
        if (read_value(c, kv, what)) return -1;
    }
    return 0;
}

static int apply_alignment(cursor *c, kw_gguf *g) {
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const kw_gguf_kv *kv = kw_gguf_find(g, "general.alignment");
    if (!kv) return 0;
    if (kv->type != KW_GGUF_UINT32)
        return kw_err_set(c->err, "general.alignment has type %s (expected u32)", kw_gguf_vtype_name(kv->type));
    if (kv->v.u == 0 || (kv->v.u & (kv->v.u - 1)) != 0)
        return kw_err_set(c->err, "general.alignment %llu is not a power of two", (unsigned long long)kv->v.u);
    g->alignment = (uint32_t)kv->v.u;
    return 0;
}

static int check_type_and_shape(cursor *c, kw_gguf_tensor *t) {
    const char *name = show(c, 0, &t->name);
    const kw_type_traits *tr = kw_type_traits_get(t->type);
    if (!tr) return kw_err_set(c->err, "tensor %s: unknown tensor type %u", name, t->type);
    if (tr->block_size <= 0 || tr->type_size <= 0)
        return kw_err_set(c->err, "tensor %s: type %s has no storage size", name, tr->name);
    uint64_t elems = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        if (t->ne[d] <= 0)
            return kw_err_set(c->err, "tensor %s: dimension %d is %lld (must be > 0)", name, d, (long long)t->ne[d]);
        if ((uint64_t)t->ne[d] > (uint64_t)INT64_MAX / elems)
            return kw_err_set(c->err, "tensor %s: element count overflows", name);
        elems *= (uint64_t)t->ne[d];
    }
    if (t->ne[0] % tr->block_size != 0)
        return kw_err_set(c->err, "tensor %s: row length %lld is not a multiple of the %s block size %d",
                          name, (long long)t->ne[0], tr->name, tr->block_size);
    uint64_t row = (uint64_t)(t->ne[0] / tr->block_size) * (uint64_t)tr->type_size;
    uint64_t rows = elems / (uint64_t)t->ne[0];
    if (rows && row > UINT64_MAX / rows) return kw_err_set(c->err, "tensor %s: byte size overflows", name);
    t->nbytes = row * rows;
    if (t->nbytes > c->size) return kw_err_set(c->err, "tensor %s: size %llu bytes exceeds file size", name,
                                              (unsigned long long)t->nbytes);
    return 0;
}

static int parse_tensor_infos(cursor *c, kw_gguf *g) {
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        kw_gguf_tensor *t = grow_entry(c, (void **)&g->tensors, &c->g->tensor_cap, i, sizeof *t, "tensor descriptors");
        if (!t || read_entry_name(c, &t->name, i, "tensor", " name", "name")) return -1;
        char what[192];
        snprintf(what, sizeof what, "tensor %s", show(c, 0, &t->name));
        uint64_t nd;
        if (read_uint(c, 4, &nd, what)) return -1;
        if (nd < 1 || nd > GGUF_MAX_DIMS)
            return kw_err_set(c->err, "tensor %s: n_dims %llu out of range (1..%d)", show(c, 0, &t->name), (unsigned long long)nd, GGUF_MAX_DIMS);
        t->n_dims = (uint32_t)nd;
        for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            uint64_t ne;
            if (read_count(c, &ne, what)) return -1;
            if (ne > (uint64_t)INT64_MAX)
                return kw_err_set(c->err, "tensor %s: dimension %u is %llu (too large)", show(c, 0, &t->name), d, (unsigned long long)ne);
            t->ne[d] = (int64_t)ne;
        }
        uint64_t type, off;
        if (read_uint(c, 4, &type, what) || read_uint(c, 8, &off, what)) return -1;
        t->type = (uint32_t)type;
        t->offset = off;
        if (check_type_and_shape(c, t)) return -1;
    }
    return 0;
}

static int check_unique(cursor *c, gguf_priv *p) {
    kw_gguf *g = &p->pub;
    p->kv_order = sorted_names(g->kv ? (const void *)&g->kv[0].key : NULL, sizeof(kw_gguf_kv), g->n_kv);
    p->tensor_order = sorted_names(g->tensors ? (const void *)&g->tensors[0].name : NULL, sizeof(kw_gguf_tensor), g->n_tensors);
    if (!p->kv_order || !p->tensor_order) return kw_err_set(c->err, "out of memory indexing the file");
    for (uint64_t i = 1; i < g->n_kv; i++)
        if (!str_cmp(&g->kv[p->kv_order[i - 1]].key, &g->kv[p->kv_order[i]].key))
            return kw_err_set(c->err, "duplicate metadata key %s", show(c, 0, &g->kv[p->kv_order[i]].key));
    for (uint64_t i = 1; i < g->n_tensors; i++)
        if (!str_cmp(&g->tensors[p->tensor_order[i - 1]].name, &g->tensors[p->tensor_order[i]].name))
            return kw_err_set(c->err, "duplicate tensor name %s", show(c, 0, &g->tensors[p->tensor_order[i]].name));
    return 0;
}

/* Data section: aligned start, each tensor aligned, inside the file, no overlaps. */
static int place_tensor_data(cursor *c, kw_gguf *g) {
    uint64_t a = g->alignment;
    uint64_t start = c->pos;
    if (start % a) start += a - start % a;
    g->data_offset = start;
    if (g->n_tensors == 0) return 0;
    if (start > g->size) return kw_err_set(c->err, "data section starts at %llu, past end of file (%llu bytes)",
                                          (unsigned long long)start, (unsigned long long)g->size);
    uint64_t avail = g->size - start;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        kw_gguf_tensor *t = &g->tensors[i];
        if (t->offset % a)
            return kw_err_set(c->err, "tensor %s: data offset %llu is not a multiple of the alignment %llu",
                              show(c, 0, &t->name), (unsigned long long)t->offset, (unsigned long long)a);
        if (t->offset > avail || t->nbytes > avail - t->offset)
            return kw_err_set(c->err, "tensor %s: data extends past end of file", show(c, 0, &t->name));
        t->data = g->base + start + t->offset;
    }
    off_entry *by_off = kw_mem_alloc(KW_MEM_OTHER, (size_t)g->n_tensors * sizeof *by_off);
    if (!by_off) return kw_err_set(c->err, "out of memory indexing tensors");
    for (uint64_t i = 0; i < g->n_tensors; i++) by_off[i] = (off_entry){g->tensors[i].offset, (uint32_t)i};
    qsort(by_off, (size_t)g->n_tensors, sizeof *by_off, cmp_off_entry);
    int rc = 0;
    for (uint64_t i = 1; i < g->n_tensors && rc == 0; i++) {
        const kw_gguf_tensor *x = &g->tensors[by_off[i - 1].idx], *y = &g->tensors[by_off[i].idx];
        if (x->offset + x->nbytes > y->offset)
            rc = kw_err_set(c->err, "tensors %s and %s overlap in the data section", show(c, 0, &x->name), show(c, 1, &y->name));
    }
    kw_mem_free(by_off);
    return rc;
}

static kw_gguf *parse(const uint8_t *base, uint64_t size, kw_err *err) {
    gguf_priv *p = kw_mem_calloc(KW_MEM_OTHER, sizeof *p);
    if (!p) { kw_err_set(err, "out of memory"); return NULL; }
    kw_gguf *g = &p->pub;
    g->base = base;
    g->size = size;
    cursor c = {.base = base, .size = size, .pos = 0, .g = p, .err = err};
    if (parse_header(&c, g) || parse_metadata(&c, g) || parse_tensor_infos(&c, g) ||
        check_unique(&c, p) || apply_alignment(&c, g) || place_tensor_data(&c, g)) {
        kw_gguf_close(g);
        return NULL;
    }
    return g;
}

/* ---- public API ---- */

kw_gguf *kw_gguf_open_mem(const void *buf, size_t len, kw_err *err) {
    if (!buf && len) { kw_err_set(err, "null buffer"); return NULL; }
    static const uint8_t empty[1];
    return parse(buf ? buf : empty, len, err);
}

kw_gguf *kw_gguf_open(const char *path, kw_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { kw_err_set(err, "%s: %s", path, strerror(errno)); return NULL; }
    struct stat st;
    if (fstat(fd, &st) != 0) { kw_err_set(err, "%s: %s", path, strerror(errno)); close(fd); return NULL; }
    if (!S_ISREG(st.st_mode)) { kw_err_set(err, "%s: not a regular file", path); close(fd); return NULL; }
    if (st.st_size == 0) { kw_err_set(err, "%s: file is empty (not a GGUF file)", path); close(fd); return NULL; }
    size_t len = (size_t)st.st_size;
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) { kw_err_set(err, "%s: mmap failed: %s", path, strerror(errno)); return NULL; }
    kw_err inner = {{0}};
    kw_gguf *g = parse(map, len, &inner);
    if (!g) {
        munmap(map, len);
        kw_err_set(err, "%s: %s", path, inner.msg);
        return NULL;
    }
    gguf_priv *p = (gguf_priv *)g;
    p->map_len = len;
    g->owns_mapping = 1;
    size_t plen = strlen(path) + 1;
    g->path = kw_mem_alloc(KW_MEM_OTHER, plen);
    if (g->path) memcpy(g->path, path, plen);
    kw_mem_note_mapped(KW_MEM_WEIGHTS, (int64_t)len);
    return g;
}

void kw_gguf_close(kw_gguf *g) {
    if (!g) return;
    gguf_priv *p = (gguf_priv *)g;
    if (g->kv) {
        for (uint64_t i = 0; i < p->kv_cap; i++) kw_mem_free(g->kv[i].arr_str);
        kw_mem_free(g->kv);
    }
    kw_mem_free(g->tensors);
    kw_mem_free(p->kv_order);
    kw_mem_free(p->tensor_order);
    for (arena_chunk *c = p->arena; c;) { arena_chunk *n = c->next; kw_mem_free(c); c = n; }
    if (g->owns_mapping && p->map_len) {
        munmap((void *)g->base, p->map_len);
        kw_mem_note_mapped(KW_MEM_WEIGHTS, -(int64_t)p->map_len);
    }
    kw_mem_free(g->path);
    kw_mem_free(p);
}

static int key_cmp(const char *key, size_t klen, const kw_str *s) {
    kw_str k = {key, klen};
    return str_cmp(&k, s);
}

const kw_gguf_kv *kw_gguf_find(const kw_gguf *g, const char *key) {
    if (!g || !key) return NULL;
    const gguf_priv *p = (const gguf_priv *)g;
    size_t klen = strlen(key);
    if (!p->kv_order) {   /* during parsing (before the index exists) */
        for (uint64_t i = 0; i < g->n_kv; i++)
            if (!key_cmp(key, klen, &g->kv[i].key)) return &g->kv[i];
        return NULL;
    }
    uint64_t lo = 0, hi = g->n_kv;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int r = key_cmp(key, klen, &g->kv[p->kv_order[mid]].key);
        if (r == 0) return &g->kv[p->kv_order[mid]];
        if (r < 0) hi = mid; else lo = mid + 1;
    }
    return NULL;
}

const kw_gguf_tensor *kw_gguf_find_tensor(const kw_gguf *g, const char *name) {
    if (!g || !name) return NULL;
    const gguf_priv *p = (const gguf_priv *)g;
    size_t nlen = strlen(name);
    uint64_t lo = 0, hi = g->n_tensors;
    while (lo < hi && p->tensor_order) {
        uint64_t mid = lo + (hi - lo) / 2;
        int r = key_cmp(name, nlen, &g->tensors[p->tensor_order[mid]].name);
        if (r == 0) return &g->tensors[p->tensor_order[mid]];
        if (r < 0) hi = mid; else lo = mid + 1;
    }
    return NULL;
}

bool kw_gguf_get_int(const kw_gguf *g, const char *key, int64_t *out) {
    const kw_gguf_kv *kv = kw_gguf_find(g, key);
    if (!kv) return false;
    switch (kv->type) {
    case KW_GGUF_UINT8: case KW_GGUF_UINT16: case KW_GGUF_UINT32: case KW_GGUF_UINT64:
        if (kv->v.u > (uint64_t)INT64_MAX) return false;
        if (out) *out = (int64_t)kv->v.u;
        return true;
    case KW_GGUF_INT8: case KW_GGUF_INT16: case KW_GGUF_INT32: case KW_GGUF_INT64:
        if (out) *out = kv->v.i;
        return true;
    default: return false;
    }
}

bool kw_gguf_get_float(const kw_gguf *g, const char *key, double *out) {
    const kw_gguf_kv *kv = kw_gguf_find(g, key);
    if (!kv || (kv->type != KW_GGUF_FLOAT32 && kv->type != KW_GGUF_FLOAT64)) return false;
    if (out) *out = kv->v.f;
    return true;
}

bool kw_gguf_get_bool(const kw_gguf *g, const char *key, bool *out) {
    const kw_gguf_kv *kv = kw_gguf_find(g, key);
    if (!kv || kv->type != KW_GGUF_BOOL) return false;
    if (out) *out = kv->v.b;
    return true;
}

const char *kw_gguf_get_str(const kw_gguf *g, const char *key) {
    const kw_gguf_kv *kv = kw_gguf_find(g, key);
    return kv && kv->type == KW_GGUF_STRING ? kv->v.s.s : NULL;
}
