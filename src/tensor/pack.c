/* pack.c - kw_pack_alloc(): the one way a kernel family makes a load-time
 * repacked copy of a matrix (kw_matrix_pack -> the family's pack function).
 *
 * Owns the buffer's shape: an accounted KW_MEM_WEIGHTS allocation, the
 * 64-byte kw_pack_hdr at its start (magic, format, packed rows, blocks per
 * row), huge-page advice (decode streams the copy once per token, and with
 * 4 KiB pages that is a TLB miss per page), and the out-of-memory message.
 * The family fills the data after the header. */
#include "tensor/kernels.h"
#include "kvwise/memory.h"
#include <string.h>

uint8_t *kw_pack_alloc(const kw_matrix *W, uint32_t format, int64_t packed_rows, int64_t nb, size_t data_bytes,
                       bool zero, kw_err *err) {
    size_t bytes = KW_PACK_HDR_BYTES + data_bytes;
    uint8_t *p = zero ? kw_mem_calloc(KW_MEM_WEIGHTS, bytes) : kw_mem_alloc(KW_MEM_WEIGHTS, bytes);
    if (!p) {
        kw_err_set(err, "out of memory repacking a %lld x %lld %s matrix (%zu bytes)", (long long)W->rows,
                   (long long)W->cols, kw_type_name(W->type), bytes);
        return NULL;
    }
    kw_advise_hugepages(p, bytes);
    memset(p, 0, KW_PACK_HDR_BYTES);
    kw_pack_hdr *h = (kw_pack_hdr *)p;
    h->magic = KW_PACK_MAGIC;
    h->format = format;
    h->packed_rows = packed_rows;
    h->nb = nb;
    return p;
}
