/* Engine metrics, named after vLLM's Prometheus series so existing dashboards work: gauges of running
 * and waiting requests and KV usage, counters of tokens, prefix-cache lookups and preemptions, and
 * histograms of latencies and step shapes. The engine thread writes; readers take a snapshot under the
 * engine's lock. */
#ifndef GPTOSS_ENGINE_METRICS_H
#define GPTOSS_ENGINE_METRICS_H

#include <stdint.h>

enum { HIST_MAX_BUCKETS = 24 };

typedef struct {
    int n_buckets;
    const double *bounds; /* upper bounds, ascending (the +Inf bucket is implicit) */
    uint64_t counts[HIST_MAX_BUCKETS + 1];
    double sum;
    uint64_t count;
} histogram;

typedef struct {
    /* gauges */
    int num_requests_running, num_requests_waiting;
    double kv_cache_usage; /* 0..1 */
    /* counters */
    uint64_t prompt_tokens, generation_tokens;
    uint64_t prefix_cache_queries, prefix_cache_hits; /* in tokens */
    uint64_t num_preemptions;
    uint64_t requests_finished_stop, requests_finished_length, requests_finished_abort,
        requests_finished_error;
    uint64_t steps;
    /* histograms (seconds, or counts) */
    histogram ttft, itl, e2e, queue_time, step_time, batch_tokens, batch_seqs;
} engine_metrics;

void metrics_init(engine_metrics *m);
void histogram_observe(histogram *h, double v);

#endif
