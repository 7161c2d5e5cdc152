/* kvwise/footprint.h - the kernel's view of this process's memory.
 *
 * Reads /proc/self/smaps_rollup (Rss, Pss split into anon/file/shmem,
 * shared/private, swap), /proc/self/status (VmRSS, VmHWM = the kernel's
 * peak resident size, VmSize, RssAnon/RssFile, Threads), /proc/meminfo
 * (MemTotal, MemAvailable) and counts /proc/self/fd. All sizes are bytes.
 *
 * What each figure means (docs/MEMORY.md):
 *   rss        pages of this process resident in RAM now (anon + file + shmem)
 *   pss        rss with shared pages divided among the processes sharing them
 *   anon       anonymous pages (heap, KV pool, workspace): private memory
 *   rss_file   file-backed pages (mmap'd model weights, libraries); the kernel
 *              may drop clean ones under pressure and read them back later
 *   vm_hwm     the highest rss this process ever had (the peak to compare
 *              with --memory-limit)
 *   vm_size    virtual address space: reservations, NOT memory use
 * A field is 0 when the kernel does not provide it; `have_smaps_rollup`
 * says whether the smaps_rollup figures (pss*, shared/private) are real. */
#ifndef KVWISE_FOOTPRINT_H
#define KVWISE_FOOTPRINT_H
#include <stdio.h>
#include "kvwise/common.h"

struct cJSON;

typedef struct kw_footprint {
    /* /proc/self/smaps_rollup */
    uint64_t rss, pss, pss_anon, pss_file, pss_shmem;
    uint64_t shared_clean, shared_dirty, private_clean, private_dirty;
    uint64_t anon;              /* "Anonymous" */
    uint64_t anon_huge;         /* "AnonHugePages" (part of anon) */
    uint64_t swap, swap_pss, locked;
    bool have_smaps_rollup;
    /* /proc/self/status */
    uint64_t vm_rss, vm_hwm, vm_size, vm_peak;
    uint64_t rss_anon, rss_file, rss_shmem;
    uint64_t vm_swap;
    int32_t threads;
    /* /proc/self/fd */
    int32_t fds;
    /* /proc/meminfo (the machine) */
    uint64_t mem_total, mem_available;
} kw_footprint;

/* Reads everything above. Fails (-1) only when /proc/self/status cannot
 * be read; a missing smaps_rollup (old kernels) or meminfo leaves those
 * fields 0. */
int kw_footprint_read(kw_footprint *f, kw_err *err);

/* The machine: MemTotal and MemAvailable in bytes. */
int kw_meminfo_read(uint64_t *mem_total, uint64_t *mem_available, kw_err *err);

/* Bytes of [p, p + len) in pages this process has resident now: the
 * present bit of each page in its page tables (/proc/self/pagemap), which
 * is what its RSS counts (not the page cache: a page another process
 * read is not ours until we touch it). UINT64_MAX when pagemap cannot be
 * read. Reads 8 bytes per page: for a 30 GB mapping about 60 MB. */
uint64_t kw_footprint_resident_bytes(const void *p, size_t len);

/* Open file descriptors of this process (-1 if /proc/self/fd is unreadable). */
int32_t kw_footprint_count_fds(void);

/* Parsers over the text of the files (exposed for tests). Unknown keys and
 * malformed lines are ignored; a field missing from the text is left as it
 * was. Return the number of fields recognised. */
int kw_footprint_parse_smaps_rollup(const char *text, kw_footprint *f);
int kw_footprint_parse_status(const char *text, kw_footprint *f);
int kw_footprint_parse_meminfo(const char *text, uint64_t *mem_total, uint64_t *mem_available);

/* Adds every field as a number member (bytes) of a cJSON object. */
void kw_footprint_add_json(const kw_footprint *f, struct cJSON *obj);
/* A compact table, one figure per line, prefixed by `indent`. */
void kw_footprint_print(const kw_footprint *f, const char *indent, FILE *out);

#endif
