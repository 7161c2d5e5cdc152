/* footprint.c - the kernel's view of this process's memory (footprint.h).
 *
 * Owns: reading and parsing /proc/self/smaps_rollup, /proc/self/status,
 * /proc/meminfo and /proc/self/fd, and the present bits of /proc/self/pagemap
 * for a range (kw_footprint_resident_bytes). Parsing is line by line over "Key: value
 * [kB]" text: unknown keys, odd spacing and garbage lines are skipped, a
 * value that does not fit in 64 bits is ignored, nothing is assumed about
 * the order of lines. The files are read with one read() loop into a stack
 * buffer (they are a few KiB), so reading allocates nothing. */
#include "kvwise/footprint.h"
#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#define KW_PROC_BUF 16384

/* Reads a small /proc file into buf (NUL-terminated). Returns bytes or -1. */
static ssize_t read_proc_file(const char *path, char *buf, size_t cap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t n = 0;
    while (n + 1 < cap) {
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0) { if (errno == EINTR) continue; close(fd); return -1; }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = 0;
    return (ssize_t)n;
}

/* Parses the value of one line "Key:   123 kB". Sets *bytes (kB -> bytes,
 * no unit -> as is). Returns false on a malformed or overflowing value. */
static bool parse_value(const char *p, const char *eol, uint64_t *out) {
    while (p < eol && (*p == ' ' || *p == '\t')) p++;
    if (p >= eol || !isdigit((unsigned char)*p)) return false;
    uint64_t v = 0;
    while (p < eol && isdigit((unsigned char)*p)) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) return false;
        v = v * 10 + d;
        p++;
    }
    while (p < eol && (*p == ' ' || *p == '\t')) p++;
    if (eol - p >= 2 && (p[0] == 'k' || p[0] == 'K') && (p[1] == 'B' || p[1] == 'b')) {
        if (v > UINT64_MAX / 1024) return false;
        v *= 1024;
    }
    *out = v;
    return true;
}

typedef struct { const char *key; size_t off; } field_map;
#define FP(k, m) { k, offsetof(kw_footprint, m) }

/* Walks "Key: value" lines; for each key in map stores the value. */
static int parse_lines(const char *text, const field_map *map, size_t n_map, void *base) {
    int found = 0;
    const char *p = text;
    while (p && *p) {
        const char *eol = strchr(p, '\n');
        if (!eol) eol = p + strlen(p);
        const char *colon = memchr(p, ':', (size_t)(eol - p));
        if (colon) {
            size_t klen = (size_t)(colon - p);
            for (size_t i = 0; i < n_map; i++) {
                if (strlen(map[i].key) == klen && memcmp(map[i].key, p, klen) == 0) {
                    uint64_t v;
                    if (parse_value(colon + 1, eol, &v)) {
                        memcpy((char *)base + map[i].off, &v, sizeof v);
                        found++;
                    }
                    break;
                }
            }
        }
        p = *eol ? eol + 1 : NULL;
    }
    return found;
}

int kw_footprint_parse_smaps_rollup(const char *text, kw_footprint *f) {
    static const field_map map[] = {
        FP("Rss", rss), FP("Pss", pss), FP("Pss_Anon", pss_anon), FP("Pss_File", pss_file),
        FP("Pss_Shmem", pss_shmem), FP("Shared_Clean", shared_clean), FP("Shared_Dirty", shared_dirty),
        FP("Private_Clean", private_clean), FP("Private_Dirty", private_dirty),
        FP("Anonymous", anon), FP("AnonHugePages", anon_huge), FP("Swap", swap),
        FP("SwapPss", swap_pss), FP("Locked", locked),
    };
    if (!text || !f) return 0;
    int n = parse_lines(text, map, sizeof map / sizeof map[0], f);
    if (n > 0) f->have_smaps_rollup = true;
    return n;
}

int kw_footprint_parse_status(const char *text, kw_footprint *f) {
    static const field_map map[] = {
        FP("VmRSS", vm_rss), FP("VmHWM", vm_hwm), FP("VmSize", vm_size), FP("VmPeak", vm_peak),
        FP("RssAnon", rss_anon), FP("RssFile", rss_file), FP("RssShmem", rss_shmem),
        FP("VmSwap", vm_swap),
    };
    if (!text || !f) return 0;
    int n = parse_lines(text, map, sizeof map / sizeof map[0], f);
    /* Threads is a plain count, stored as int32 */
    typedef struct { uint64_t threads; } tmp_t;
    static const field_map tmap[] = { { "Threads", offsetof(tmp_t, threads) } };
    tmp_t t = { 0 };
    if (parse_lines(text, tmap, 1, &t) == 1) {
        f->threads = t.threads > INT32_MAX ? INT32_MAX : (int32_t)t.threads;
        n++;
    }
    return n;
}

int kw_footprint_parse_meminfo(const char *text, uint64_t *mem_total, uint64_t *mem_available) {
    typedef struct { uint64_t total, avail; } mi_t;
    static const field_map map[] = {
        { "MemTotal", offsetof(mi_t, total) }, { "MemAvailable", offsetof(mi_t, avail) },
    };
    mi_t m = { 0, 0 };
    if (!text) return 0;
    int n = parse_lines(text, map, 2, &m);
    if (mem_total && m.total) *mem_total = m.total;
    if (mem_available && m.avail) *mem_available = m.avail;
    return n;
}

int kw_meminfo_read(uint64_t *mem_total, uint64_t *mem_available, kw_err *err) {
    char buf[KW_PROC_BUF];
    if (read_proc_file("/proc/meminfo", buf, sizeof buf) < 0)
        return kw_err_set(err, "cannot read /proc/meminfo: %s", strerror(errno));
    uint64_t t = 0, a = 0;
    kw_footprint_parse_meminfo(buf, &t, &a);
    if (t == 0) return kw_err_set(err, "/proc/meminfo has no MemTotal line");
    if (a == 0) return kw_err_set(err, "/proc/meminfo has no MemAvailable line (kernel too old)");
    if (mem_total) *mem_total = t;
    if (mem_available) *mem_available = a;
    return 0;
}

int32_t kw_footprint_count_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int32_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n > 0 ? n - 1 : 0; /* the directory stream's own descriptor */
}

int kw_footprint_read(kw_footprint *f, kw_err *err) {
    char buf[KW_PROC_BUF];
    memset(f, 0, sizeof *f);
    if (read_proc_file("/proc/self/status", buf, sizeof buf) < 0)
        return kw_err_set(err, "cannot read /proc/self/status: %s", strerror(errno));
    kw_footprint_parse_status(buf, f);
    if (read_proc_file("/proc/self/smaps_rollup", buf, sizeof buf) >= 0)
        kw_footprint_parse_smaps_rollup(buf, f);
    if (!f->have_smaps_rollup) {       /* pre-4.14 kernels: fall back to status */
        f->rss = f->vm_rss;
        f->anon = f->rss_anon;
    }
    kw_meminfo_read(&f->mem_total, &f->mem_available, NULL);
    f->fds = kw_footprint_count_fds();
    return 0;
}

void kw_footprint_add_json(const kw_footprint *f, struct cJSON *obj) {
    if (!f || !obj) return;
    static const struct { const char *name; size_t off; } nums[] = {
        {"rss", offsetof(kw_footprint, rss)}, {"pss", offsetof(kw_footprint, pss)},
        {"pss_anon", offsetof(kw_footprint, pss_anon)}, {"pss_file", offsetof(kw_footprint, pss_file)},
        {"pss_shmem", offsetof(kw_footprint, pss_shmem)}, {"anon", offsetof(kw_footprint, anon)},
        {"anon_huge", offsetof(kw_footprint, anon_huge)},
        {"rss_anon", offsetof(kw_footprint, rss_anon)}, {"rss_file", offsetof(kw_footprint, rss_file)},
        {"rss_shmem", offsetof(kw_footprint, rss_shmem)},
        {"shared_clean", offsetof(kw_footprint, shared_clean)}, {"shared_dirty", offsetof(kw_footprint, shared_dirty)},
        {"private_clean", offsetof(kw_footprint, private_clean)}, {"private_dirty", offsetof(kw_footprint, private_dirty)},
        {"swap", offsetof(kw_footprint, swap)}, {"locked", offsetof(kw_footprint, locked)},
        {"vm_rss", offsetof(kw_footprint, vm_rss)}, {"vm_hwm", offsetof(kw_footprint, vm_hwm)},
        {"vm_size", offsetof(kw_footprint, vm_size)}, {"vm_peak", offsetof(kw_footprint, vm_peak)},
        {"mem_total", offsetof(kw_footprint, mem_total)}, {"mem_available", offsetof(kw_footprint, mem_available)},
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        uint64_t v;
        memcpy(&v, (const char *)f + nums[i].off, sizeof v);
        cJSON_AddNumberToObject(obj, nums[i].name, (double)v);
    }
    cJSON_AddNumberToObject(obj, "threads", f->threads);
    cJSON_AddNumberToObject(obj, "fds", f->fds);
    cJSON_AddBoolToObject(obj, "have_smaps_rollup", f->have_smaps_rollup);
}

void kw_footprint_print(const kw_footprint *f, const char *indent, FILE *out) {
    char a[32], b[32], c[32];
    if (!indent) indent = "";
    fprintf(out, "%sRSS %s (anon %s, file-backed %s)\n", indent, kw_format_bytes(f->rss, a, sizeof a),
            kw_format_bytes(f->anon, b, sizeof b), kw_format_bytes(f->rss_file, c, sizeof c));
    if (f->have_smaps_rollup)
        fprintf(out, "%sPSS %s (anon %s, file %s)\n", indent, kw_format_bytes(f->pss, a, sizeof a),
                kw_format_bytes(f->pss_anon, b, sizeof b), kw_format_bytes(f->pss_file, c, sizeof c));
    fprintf(out, "%speak RSS (VmHWM) %s, swap %s\n", indent, kw_format_bytes(f->vm_hwm, a, sizeof a),
            kw_format_bytes(f->swap ? f->swap : f->vm_swap, b, sizeof b));
    fprintf(out, "%svirtual (VmSize, not memory use) %s; %d threads, %d fds\n", indent,
            kw_format_bytes(f->vm_size, a, sizeof a), f->threads, f->fds);
}

uint64_t kw_footprint_resident_bytes(const void *p, size_t len) {
    if (len == 0) return 0;
    long ps = sysconf(_SC_PAGESIZE);
    if (ps <= 0) return UINT64_MAX;
    uintptr_t a = (uintptr_t)p, first = a / (uintptr_t)ps, last = (a + len - 1) / (uintptr_t)ps;
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return UINT64_MAX;
    uint64_t entries[512], total = 0;
    for (uintptr_t pg = first; pg <= last;) {
        size_t n = last - pg + 1 < 512 ? (size_t)(last - pg + 1) : 512;
        ssize_t got = pread(fd, entries, n * sizeof entries[0], (off_t)(pg * sizeof entries[0]));
        if (got <= 0 || (size_t)got % sizeof entries[0]) { close(fd); return UINT64_MAX; }
        n = (size_t)got / sizeof entries[0];
        for (size_t i = 0; i < n; i++, pg++) {
            if (!(entries[i] >> 63)) continue;   /* bit 63: the page is present */
            uintptr_t lo = pg * (uintptr_t)ps, hi = lo + (uintptr_t)ps;
            if (lo < a) lo = a;
            if (hi > a + len) hi = a + len;
            total += hi - lo;
        }
    }
    close(fd);
    return total;
}
