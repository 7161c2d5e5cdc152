/* pack.c - load-time repacked copies of weight matrices (tensor.h
 * kw_matrix_pack and friends) and kw_pack_alloc(), the one way a kernel
 * family's pack function gets the buffer for one.
 *
 * Owns where packed copies live: an accounted KW_MEM_WEIGHTS block on huge
 * pages (memory.h kw_mem_alloc_huge: decode streams every copy once per
 * token, and with 4 KiB pages that is a TLB miss and a new prefetch stream
 * per page), either one block per matrix or one block for a group of
 * matrices (a layer's), each copy in a 64-byte aligned slot with the
 * 64-byte kw_pack_hdr at its start (magic, format, packed rows, blocks per
 * row, shared). A group is sized first by running the families' pack
 * functions in a sizing pass (kw_pack_arena with no base), so the slot
 * sizes come from the same code that fills them. The family fills the data
 * after the header. */
#include "tensor/kernels.h"
#include "tensor/quant_blocks.h"
#include "kvwise/memory.h"
#include <string.h>

#define KW_PACK_SLOT_ALIGN 64

static size_t slot_bytes(size_t data_bytes) {
    return (KW_PACK_HDR_BYTES + data_bytes + KW_PACK_SLOT_ALIGN - 1) & ~(size_t)(KW_PACK_SLOT_ALIGN - 1);
}

uint8_t *kw_pack_alloc(const kw_matrix *W, kw_pack_arena *a, uint32_t format, int64_t packed_rows, int64_t nb,
                       size_t data_bytes, kw_err *err) {
    size_t bytes = slot_bytes(data_bytes);
    uint8_t *p;
    if (a && !a->base) {   /* sizing pass */
        a->used += bytes;
        return NULL;
    }
    if (a) {
        if (a->cap - a->used < bytes) {   /* cannot happen: the sizing pass ran the same code */
            kw_err_set(err, "packing a %lld x %lld %s matrix: its slot (%zu bytes) overruns the block", (long long)W->rows,
                       (long long)W->cols, kw_type_name(W->type), bytes);
            return NULL;
        }
        p = a->base + a->used;
        a->used += bytes;
    } else if (!(p = kw_mem_alloc_huge(KW_MEM_WEIGHTS, bytes))) {
        kw_err_set(err, "out of memory repacking a %lld x %lld %s matrix (%zu bytes)", (long long)W->rows,
                   (long long)W->cols, kw_type_name(W->type), bytes);
        return NULL;
    }
    kw_pack_hdr *h = (kw_pack_hdr *)p;   /* the block is zero-filled: the rest of the header stays 0 */
    h->magic = KW_PACK_MAGIC;
    h->format = format;
    h->packed_rows = packed_rows;
    h->nb = nb;
    h->shared = a != NULL;
    h->block_off = a ? (uint64_t)(p - a->base) : 0;
    return p;
}

/* The active family's pack of W into arena a (NULL: a block of its own). */
static int pack_into(kw_matrix *W, kw_pack_arena *a, kw_err *err) {
    const kw_kernel_set *ks = kw_kernels_active();
    if (!ks->pack || W->rows < 16) return 1;
    return ks->pack(W, a, err);
}

int kw_matrix_pack(kw_matrix *W, kw_err *err) {
    if (!W || W->packed) return W ? 0 : 1;
    return pack_into(W, NULL, err);
}

size_t kw_matrix_pack_bytes(const kw_matrix *W) {
    if (!W) return 0;
    kw_matrix probe = *W;   /* a sizing pass reads only the shape */
    probe.packed = NULL;
    kw_pack_arena a = {NULL, 0, 0};
    return pack_into(&probe, &a, NULL) == 0 ? a.used : 0;
}

size_t kw_shape_pack_bytes(uint32_t type, int64_t cols, int64_t rows) {
    size_t rb = type < KW_TYPE_COUNT ? kw_row_bytes(type, cols) : 0;
    if (rb == 0 || rows < 1) return 0;
    kw_matrix W = {.type = type, .rows = rows, .cols = cols, .row_bytes = rb, .data = NULL};
    return kw_matrix_pack_bytes(&W);
}

int kw_matrices_pack(kw_matrix *const *Ws, int n, void **block, kw_err *err) {
    *block = NULL;
    kw_pack_arena a = {NULL, 0, 0};
    for (int i = 0; i < n; i++)
        if (Ws[i] && !Ws[i]->packed && pack_into(Ws[i], &a, err) < 0) return -1;
    if (a.used == 0) return 1;
    uint8_t *base = kw_mem_alloc_huge(KW_MEM_WEIGHTS, a.used);
    if (!base) {
        kw_err_set(err, "out of memory repacking %d matrices (%zu bytes)", n, a.used);
        return -1;
    }
    a = (kw_pack_arena){base, a.used, 0};
    for (int i = 0; i < n; i++) {
        if (!Ws[i] || Ws[i]->packed) continue;
        if (pack_into(Ws[i], &a, err) < 0) {
            kw_matrices_unpack(Ws, i, base);
            return -1;
        }
    }
    *block = base;
    return 0;
}

int64_t kw_matrix_packed_rows(const kw_matrix *W) {
    if (!W || !W->packed) return 0;
    const kw_pack_hdr *h = W->packed;
    return h->magic == KW_PACK_MAGIC ? h->packed_rows : 0;
}

void kw_matrix_unpack(kw_matrix *W) {
    if (!W || !W->packed) return;
    const kw_pack_hdr *h = W->packed;
    if (!h->shared) kw_mem_free(W->packed);   /* a shared slot goes with its block (kw_matrices_unpack) */
    W->packed = NULL;
}

void kw_matrices_unpack(kw_matrix *const *Ws, int n, void *block) {
    for (int i = 0; i < n; i++) {
        const kw_pack_hdr *h = Ws[i] ? Ws[i]->packed : NULL;
        if (h && h->shared && (const uint8_t *)h - h->block_off == (const uint8_t *)block) Ws[i]->packed = NULL;
    }
    kw_mem_free(block);
}

size_t kw_whole_pages(uint64_t addr, uint64_t bytes, uint64_t *start) {
    const uint64_t page = 4096;
    uint64_t s = (addr + page - 1) & ~(page - 1), e = (addr + bytes) & ~(page - 1);
    *start = s;
    return e > s ? (size_t)(e - s) : 0;
}

void kw_pack_q0_group_block(const kw_matrix *W, int rows, int64_t g, int64_t b, uint32_t xor_word, uint8_t *grp) {
    kw_pack_q0_group_block_at(W, rows, g, b, b, xor_word, grp);
}

void kw_pack_q0_group_block_at(const kw_matrix *W, int rows, int64_t g, int64_t b, int64_t at, uint32_t xor_word,
                               uint8_t *grp) {
    const int q4 = W->type == KW_TYPE_Q4_0;
    const int nwords = q4 ? 4 : 8;
    uint8_t *dst = (uint8_t *)kw_q0_quants(grp, rows, q4, at);
    uint16_t *dd = (uint16_t *)kw_q0_scales(grp, rows, q4, at);
    for (int L = 0; L < rows; L++) {
        const uint8_t *row = (const uint8_t *)W->data + (size_t)((int64_t)rows * g + L) * W->row_bytes;
        const uint8_t *qs = q4 ? ((const kw_block_q4_0 *)row + b)->qs : (const uint8_t *)((const kw_block_q8_0 *)row + b)->qs;
        for (int k = 0; k < nwords; k++) {
            uint32_t w;
            memcpy(&w, qs + 4 * k, 4);
            w ^= xor_word;
            memcpy(dst + (size_t)4 * rows * k + 4 * L, &w, 4);
        }
        dd[L] = q4 ? ((const kw_block_q4_0 *)row + b)->d : ((const kw_block_q8_0 *)row + b)->d;
    }
}

kw_mem_span kw_matrix_span(const kw_matrix *W) {
    if (W->packed) return (kw_mem_span){W->packed, kw_matrix_pack_bytes(W)};
    return (kw_mem_span){W->data, W->row_bytes * (size_t)W->rows};
}
