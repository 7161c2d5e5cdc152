/* progress.c - progress reports of long work (progress.h): the in-place bar
 * on a terminal, plain lines at most once per second elsewhere, the
 * closing line. Owns the formatting of shares, amounts, rates and ETAs. */
#include "kvwise/progress.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define BAR_INTERVAL_S 0.1
#define LINE_INTERVAL_S 1.0


static kw_progress_mode resolve_mode(FILE *out, kw_progress_mode m) {
    if (m != KW_PROGRESS_AUTO) return m;
    return isatty(fileno(out)) ? KW_PROGRESS_BAR : KW_PROGRESS_LINES;
}

void kw_progress_begin(kw_progress *p, FILE *out, kw_progress_mode mode, const char *label, uint64_t total,
                       kw_progress_unit unit, const char *unit_name) {
    memset(p, 0, sizeof *p);
    p->out = out ? out : stderr;
    p->mode = resolve_mode(p->out, mode);
    p->unit = unit;
    p->total = total;
    snprintf(p->label, sizeof p->label, "%s", label ? label : "");
    snprintf(p->unit_name, sizeof p->unit_name, "%s", unit_name ? unit_name : "");
    p->t0 = p->t_drawn = kw_mono_s();
    p->active = p->mode != KW_PROGRESS_OFF;
}

/* "14.5 MiB" or "1234" (items). */
static void fmt_amount(const kw_progress *p, uint64_t v, char *buf, size_t cap) {
    if (p->unit == KW_PROGRESS_BYTES) kw_format_bytes(v, buf, cap);
    else snprintf(buf, cap, "%llu", (unsigned long long)v);
}

static void fmt_duration(double s, char *buf, size_t cap) {
    if (s < 60) snprintf(buf, cap, "%.0f s", s);
    else if (s < 3600) snprintf(buf, cap, "%d:%02d", (int)s / 60, (int)s % 60);
    else snprintf(buf, cap, "%d:%02d:%02d", (int)s / 3600, (int)s / 60 % 60, (int)s % 60);
}

static void fmt_rate(const kw_progress *p, double per_s, char *buf, size_t cap) {
    if (p->unit == KW_PROGRESS_BYTES) {
        char b[32];
        kw_format_bytes((uint64_t)per_s, b, sizeof b);
        snprintf(buf, cap, "%s/s", b);
    } else {
        snprintf(buf, cap, per_s >= 100 ? "%.0f %s/s" : "%.1f %s/s", per_s, p->unit_name);
    }
}

const char *kw_progress_describe(const kw_progress *p, double now, char *buf, size_t cap) {
    uint64_t done = __atomic_load_n(&p->done, __ATOMIC_RELAXED);
    double el = now - p->t0, rate = el > 0 ? (double)done / el : 0;
    char d[32], t[32], r[48], eta[32] = "?";
    fmt_amount(p, done, d, sizeof d);
    fmt_rate(p, rate, r, sizeof r);
    if (p->total) {
        fmt_amount(p, p->total, t, sizeof t);
        if (rate > 0 && done <= p->total) fmt_duration((double)(p->total - done) / rate, eta, sizeof eta);
        double share = 100.0 * (double)done / (double)p->total;
        snprintf(buf, cap, "%3.0f%% %s/%s%s%s %s ETA %s", share > 100 ? 100 : share, d, t,
                 p->unit == KW_PROGRESS_ITEMS ? " " : "", p->unit == KW_PROGRESS_ITEMS ? p->unit_name : "", r, eta);
    } else {
        snprintf(buf, cap, "%s%s%s %s", d, p->unit == KW_PROGRESS_ITEMS ? " " : "",
                 p->unit == KW_PROGRESS_ITEMS ? p->unit_name : "", r);
    }
    if (p->note[0]) {
        size_t u = strlen(buf);
        snprintf(buf + u, cap - u, " %s", p->note);
    }
    return buf;
}

static int term_columns(FILE *out) {
    struct winsize ws;
    if (ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return ws.ws_col;
    return 80;
}

/* "label [#####.....] status", fitted to the terminal, redrawn in place. */
static void draw_bar(kw_progress *p, double now) {
    char st[160];
    kw_progress_describe(p, now, st, sizeof st);
    int cols = term_columns(p->out);
    int room = cols - 1 - (int)strlen(p->label) - (int)strlen(st) - 4;
    int width = room > 40 ? 40 : room;
    char bar[48] = "";
    if (width >= 8 && p->total) {
        uint64_t done = __atomic_load_n(&p->done, __ATOMIC_RELAXED);
        int fill = (int)((double)width * (double)(done > p->total ? p->total : done) / (double)p->total);
        for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
        bar[width] = 0;
    }
    if (bar[0]) fprintf(p->out, "\r\033[K%s [%s] %s", p->label, bar, st);
    else fprintf(p->out, "\r\033[K%s %s", p->label, st);
    fflush(p->out);
    p->drew_bar = true;
}

static void draw_line(kw_progress *p, double now) {
    char st[160];
    fprintf(p->out, "%s: %s\n", p->label, kw_progress_describe(p, now, st, sizeof st));
    fflush(p->out);
    p->drew_line = true;
}

/* Draws when the interval has passed; one thread at a time (others skip). */
static void maybe_draw(kw_progress *p) {
    if (!p->active) return;
    double now = kw_mono_s(), every = p->mode == KW_PROGRESS_BAR ? BAR_INTERVAL_S : LINE_INTERVAL_S;
    if (now - p->t_drawn < every) return;
    if (__atomic_exchange_n(&p->drawing, 1, __ATOMIC_ACQUIRE)) return;
    if (now - p->t_drawn >= every) {
        p->t_drawn = now;
        if (p->mode == KW_PROGRESS_BAR) draw_bar(p, now);
        else draw_line(p, now);
    }
    __atomic_store_n(&p->drawing, 0, __ATOMIC_RELEASE);
}

void kw_progress_set_total(kw_progress *p, uint64_t total) {
    if (p) p->total = total;
}

void kw_progress_add(kw_progress *p, uint64_t n) {
    if (!p) return;
    __atomic_add_fetch(&p->done, n, __ATOMIC_RELAXED);
    maybe_draw(p);
}

void kw_progress_set(kw_progress *p, uint64_t done) {
    if (!p) return;
    __atomic_store_n(&p->done, done, __ATOMIC_RELAXED);
    maybe_draw(p);
}

void kw_progress_note(kw_progress *p, const char *fmt, ...) {
    if (!p) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->note, sizeof p->note, fmt, ap);
    va_end(ap);
}

void kw_progress_print(kw_progress *p, const char *fmt, ...) {
    FILE *out = p ? p->out : stderr;
    bool bar = p && p->active && p->mode == KW_PROGRESS_BAR && p->drew_bar;
    if (bar) fprintf(out, "\r\033[K");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(out, fmt, ap);
    va_end(ap);
    if (bar) draw_bar(p, kw_mono_s());
    fflush(out);
}

void kw_progress_end(kw_progress *p, bool ok) {
    if (!p || !p->active) return;
    double now = kw_mono_s(), el = now - p->t0;
    uint64_t done = __atomic_load_n(&p->done, __ATOMIC_RELAXED);
    char d[32], r[48], t[32];
    fmt_amount(p, done, d, sizeof d);
    fmt_rate(p, el > 0 ? (double)done / el : 0, r, sizeof r);
    fmt_duration(el, t, sizeof t);
    if (el < 60) snprintf(t, sizeof t, "%.2f s", el);
    if (p->mode == KW_PROGRESS_BAR && p->drew_bar) {
        if (ok) draw_bar(p, now);
        fprintf(p->out, "\n");
    }
    if (p->drew_line || p->drew_bar)
        fprintf(p->out, "%s: %s, %s%s%s in %s (%s)\n", p->label, ok ? "done" : "failed", d,
                p->unit == KW_PROGRESS_ITEMS ? " " : "", p->unit == KW_PROGRESS_ITEMS ? p->unit_name : "", t, r);
    fflush(p->out);
    p->active = false;
}
