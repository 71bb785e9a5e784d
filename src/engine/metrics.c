#include "engine/metrics.h"

#include <string.h>

/* Bucket bounds close to vLLM's for the same series. */
static const double LATENCY_BOUNDS[] = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                        0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                        20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
static const double COUNT_BOUNDS[] = {1,   2,   4,    8,    16,   32,   64,   128,
                                      256, 512, 1024, 2048, 4096, 8192, 16384};

static void hist_init(histogram *h, const double *bounds, int n) {
    memset(h, 0, sizeof *h);
    h->bounds = bounds;
    h->n_buckets = n;
}

void metrics_init(engine_metrics *m) {
    memset(m, 0, sizeof *m);
    int nl = (int)(sizeof LATENCY_BOUNDS / sizeof LATENCY_BOUNDS[0]);
    int nc = (int)(sizeof COUNT_BOUNDS / sizeof COUNT_BOUNDS[0]);
    hist_init(&m->ttft, LATENCY_BOUNDS, nl);
    hist_init(&m->itl, LATENCY_BOUNDS, nl);
    hist_init(&m->e2e, LATENCY_BOUNDS, nl);
    hist_init(&m->queue_time, LATENCY_BOUNDS, nl);
    hist_init(&m->step_time, LATENCY_BOUNDS, nl);
    hist_init(&m->batch_tokens, COUNT_BOUNDS, nc);
    hist_init(&m->batch_seqs, COUNT_BOUNDS, nc);
}

void histogram_observe(histogram *h, double v) {
    int i = 0;
    while (i < h->n_buckets && v > h->bounds[i]) i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}
