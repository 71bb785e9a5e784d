#include "bench/progress.h"

#include "base/timeutil.h"

#include <stdio.h>
#include <unistd.h>

static void draw(bench_progress *p) {
    enum { WIDTH = 30 };
    int fill = p->total > 0 ? (int)((long long)WIDTH * p->done / p->total) : WIDTH;
    char bar[WIDTH + 1];
    for (int i = 0; i < WIDTH; i++) bar[i] = i < fill ? '#' : '.';
    bar[WIDTH] = 0;
    double el = now_seconds() - p->t_start;
    fprintf(stderr, "\r  C=%-5d %-6s [%s] %d/%d", p->concurrency, p->what, bar, p->done, p->total);
    if (p->failed) fprintf(stderr, " (%d failed)", p->failed);
    fprintf(stderr, " %.1f s  ", el);
    fflush(stderr);
    p->t_drawn = now_seconds();
}

void progress_start(bench_progress *p, bool enabled, const char *what, int concurrency, int total) {
    p->on = enabled && isatty(STDERR_FILENO);
    p->what = what;
    p->concurrency = concurrency;
    p->total = total;
    p->done = p->failed = 0;
    p->t_start = now_seconds();
    p->t_drawn = 0;
    if (p->on) draw(p);
}

void progress_step(bench_progress *p, bool failed) {
    p->done++;
    if (failed) p->failed++;
    if (p->on && (now_seconds() - p->t_drawn > 0.1 || p->done == p->total)) draw(p);
}

void progress_end(bench_progress *p) {
    if (!p->on) return;
    fprintf(stderr, "\r%80s\r", "");
    fflush(stderr);
    p->on = false;
}
