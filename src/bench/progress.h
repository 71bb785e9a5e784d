/* A one-line progress bar on stderr (only when stderr is a terminal: logs and CI output stay
 * clean). */
#ifndef GPTOSS_BENCH_PROGRESS_H
#define GPTOSS_BENCH_PROGRESS_H

#include <stdbool.h>

typedef struct {
    bool on;
    const char *what; /* "warmup" or "run" */
    int concurrency, total, done, failed;
    double t_start, t_drawn;
} bench_progress;

/* enabled: the caller's wish (--no-progress turns it off); it is also off when stderr is not a TTY.
 */
void progress_start(bench_progress *p, bool enabled, const char *what, int concurrency, int total);
/* One request finished; redraws at most ten times a second. */
void progress_step(bench_progress *p, bool failed);
/* Erases the line. */
void progress_end(bench_progress *p);

#endif
