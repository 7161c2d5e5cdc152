/* kvwise/progress.h - progress of long work on stderr: writing or
 * quantizing a model, loading (repacking) one, perplexity, benchmarks.
 *
 * On a terminal the reporter redraws one line in place (a bar, the share
 * done, done/total, the rate and an ETA) at most ten times a second, and
 * ends it with a newline when the work is done. When the stream is not a
 * terminal (a log, a pipe, systemd's journal) it writes plain lines
 * instead, at most one per second (none for work that ends within the
 * first second), then one closing "done" line (after work that showed
 * a bar or a line). Library code takes a
 * kw_progress * that may be NULL (no output); the caller decides where it
 * goes. Updates may come from several threads (kw_progress_add is atomic;
 * one of them draws). */
#ifndef KVWISE_PROGRESS_H
#define KVWISE_PROGRESS_H
#include <stdio.h>
#include "kvwise/common.h"

typedef enum kw_progress_unit {
    KW_PROGRESS_BYTES = 0,      /* shown as KiB/MiB/GiB, rate per second */
    KW_PROGRESS_ITEMS           /* shown as counts of unit_name ("layers", "tokens") */
} kw_progress_unit;

typedef enum kw_progress_mode {
    KW_PROGRESS_AUTO = 0,       /* a bar when the stream is a terminal, else lines */
    KW_PROGRESS_BAR,
    KW_PROGRESS_LINES,
    KW_PROGRESS_OFF
} kw_progress_mode;

typedef struct kw_progress {
    FILE *out;
    kw_progress_mode mode;      /* resolved: BAR, LINES or OFF */
    kw_progress_unit unit;
    char label[80];
    char unit_name[16];
    uint64_t total;
    uint64_t done;              /* atomic */
    double t0, t_drawn;         /* monotonic seconds: start, last output */
    int drawing;                /* atomic: a thread is drawing */
    bool drew_bar;              /* a bar line is on screen (needs its newline) */
    bool drew_line;             /* a plain line was written (the closing line follows) */
    char note[48];              /* shown after the status ("ppl 12.34"); kw_progress_note */
    bool active;
} kw_progress;

/* Starts reporting `label` (e.g. "kvwise mkmodel: writing tensors") to out
 * (stderr when NULL). total 0 = unknown (no share, no ETA). */
void kw_progress_begin(kw_progress *p, FILE *out, kw_progress_mode mode, const char *label, uint64_t total,
                       kw_progress_unit unit, const char *unit_name);
/* Sets the total once it is known (the writer of a file knows its size). */
void kw_progress_set_total(kw_progress *p, uint64_t total);
/* Adds n to the work done (thread-safe; p may be NULL). */
void kw_progress_add(kw_progress *p, uint64_t n);
/* Sets the work done (one thread; p may be NULL). */
void kw_progress_set(kw_progress *p, uint64_t done);
/* Sets the note shown after the status (one thread; p may be NULL). */
void kw_progress_note(kw_progress *p, const char *fmt, ...) KW_PRINTF(2, 3);
/* Prints a line of results while the report runs: above the bar on a
 * terminal (the bar is redrawn under it), as is otherwise. p may be NULL
 * (the line goes to stderr). */
void kw_progress_print(kw_progress *p, const char *fmt, ...) KW_PRINTF(2, 3);
/* Ends the report: the bar's newline, or the closing line. ok=false says
 * "failed" instead of "done". p may be NULL. */
void kw_progress_end(kw_progress *p, bool ok);

/* One status line of p now, without the label ("45% 14.5/32.4 MiB 10.1 MiB/s ETA 2 s"). */
const char *kw_progress_describe(const kw_progress *p, double now_s, char *buf, size_t cap);

#endif
