/* gptoss bench plot: the throughput–interactivity chart InferenceMAX draws — throughput per GPU (y)
 * against tokens per second per user = 1000 / median TPOT (x) — from `bench serve` / `bench sweep`
 * results (or vLLM's own --save-result files: the keys are the same), with:
 *   - one line per results file, a marker per concurrency level (labelled with C);
 *   - the Pareto envelope over every point: the points no other point beats on both axes;
 *   - the roofline frontier (bench/roofline.h): for each batch size B, the least time of a step
 *     that decodes B tokens at the workload's mean context and also prefills the B · ISL/OSL prompt
 *     tokens that come with them: x = tokens/s per sequence, y = B times that per GPU (on the
 *     total-throughput chart, times (mean ISL + mean OSL) / mean OSL) — a ceiling, never a
 *     prediction (see roofline_points in bench_plot.c);
 *   - the published anchor points from bench/anchors (one JSON file per source set), filtered by
 * GPU, workload and model. */
#ifndef GPTOSS_BENCH_BENCH_PLOT_H
#define GPTOSS_BENCH_BENCH_PLOT_H

#include <stdbool.h>

typedef struct {
    const char **files;
    int n_files;
    const char *out;
    const char *title;
    const char *labels;         /* "a,b,c": legend names of the files */
    bool output_only;           /* y = output tokens/s/GPU instead of total */
    const char *roofline_model; /* "120b", "20b" or a checkpoint folder; NULL: no roofline */
    int roofline_tp;
    int kv_bytes;
    double bandwidth, flops; /* bytes/s, FLOP/s */
    int isl, osl;            /* 0: from the results */
    const char *anchors;     /* file or folder; NULL: bench/anchors if present; "none" */
    const char *anchor_gpu;  /* "H200" (default) or "all" */
    bool linear;
} bench_plot_opts;

void bench_plot_defaults(bench_plot_opts *o);
int bench_plot(const bench_plot_opts *o);

/* Indices of the Pareto-optimal points (larger x and larger y are better), by increasing x; returns
 * how many. A point is kept when no other point has both x >= and y >= it with one of them larger.
 */
int bench_pareto(const double *x, const double *y, int n, int *out);

#endif
