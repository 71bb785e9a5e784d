/* Benchmark metrics, defined exactly as `vllm bench serve` defines them (vllm/benchmarks/serve.py
 * calculate_metrics and lib/endpoint_request_func.py), so our numbers sit next to vLLM's, SGLang's
 * and TRT-LLM's on the same chart:
 *
 *   TTFT   request sent → first streamed chunk that carries a choice (its text may be empty);
 *   ITL    the gap between consecutive such chunks, one sample per chunk — a chunk that bundles
 *          several tokens (a server's stream interval) is one long gap, not divided per token;
 *   E2EL   request sent → the last chunk with a choice (the usage chunk and [DONE] do not count);
 *   TPOT   per request (E2EL − TTFT) / (output_tokens − 1), for requests with more than one output
 *          token; so it is the per-token decode time whatever the chunking;
 *   output tokens: usage.completion_tokens from the final usage chunk (or, when a server sends no
 *          usage, the number of chunks with a choice);
 *   input tokens: usage.prompt_tokens when the server reports it, else the prompt length sent;
 *   mean / median / std (population) / percentiles with numpy's default linear interpolation, over
 *          successful requests only (ITL over all their chunks); an empty set gives 0, as numpy on
 *          [0] does in vLLM;
 *   throughputs: completed requests, output tokens and input + output tokens divided by the
 * duration (start of the measured run → last request done), failed requests excluded; peak output
 * tokens/s and peak concurrent requests: vLLM's one-second buckets of chunk arrivals and its sweep
 * over [start, start + E2EL). InferenceMAX adds: throughput per GPU = total_token_throughput /
 * num_gpus and interactivity = 1000 / median TPOT (tokens/s per user). */
#ifndef GPTOSS_BENCH_METRICS_STATS_H
#define GPTOSS_BENCH_METRICS_STATS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

/* What one request measured (seconds, monotonic clock). */
typedef struct {
    double start;   /* sent */
    double ttft;    /* first chunk − start */
    double latency; /* last chunk − start */
    double *itl;    /* gaps between chunks */
    int n_itl, cap_itl;
    int prompt_len, output_len;
    int sent_prompt_len,
        expected_output; /* what the client sent: prompt tokens (ids) and max_tokens */
    bool success;
} bench_record;

void bench_record_itl(bench_record *r, double gap);

/* One measured run (one concurrency level). */
typedef struct {
    bench_record *rec;
    int n;
    double duration;
    char *first_error; /* the first failure's message, kept for the report */
    int n_errors;
} bench_run;

void bench_run_init(bench_run *r, int n);
void bench_run_free(bench_run *r);
/* Records a failure message (only the first is kept; all are counted). */
void bench_run_error(bench_run *r, const char *msg);

typedef struct {
    double mean, median, std, p90, p99; /* ms */
} bench_dist;

typedef struct {
    /* the setup */
    int max_concurrency, num_prompts, num_warmups, num_gpus, isl, osl;
    double range_ratio;
    /* the measurement */
    double duration;
    int completed, failed;
    long long total_input, total_output;
    double request_throughput, output_throughput, total_token_throughput;
    double max_output_tokens_per_s;
    int max_concurrent_requests;
    bench_dist ttft, tpot, itl, e2el;
    int short_outputs; /* completed with fewer tokens than asked (ignore_eos not honoured?) */
    long long
        expected_input; /* the same sums as total_input/total_output, from what was sent: with */
    long long expected_output; /* token-id prompts and ignore_eos they must be equal */
    double client_cpu_seconds; /* user + system CPU of the benchmark process during the run */
    const char *first_error;   /* borrowed from the run */
} bench_metrics;

/* numpy.percentile(sorted[0..n), p) with linear interpolation; 0 for n == 0. */
double bench_percentile(const double *sorted, size_t n, double p);
/* mean, median, std, p90, p99 of v (seconds; sorted in place) in ms. */
bench_dist bench_dist_of(double *v, size_t n);

/* Fills the measurement fields of m from the run (the setup fields are the caller's). */
void bench_metrics_compute(const bench_run *r, bench_metrics *m);

/* Interactivity (tokens/s per user) = 1000 / median TPOT; 0 when there is no TPOT. */
double bench_interactivity(const bench_metrics *m);

/* The report block in `vllm bench serve`'s layout, then our additions (per GPU, interactivity, the
 * client's CPU, failures). */
void bench_metrics_print(FILE *f, const bench_metrics *m);

/* Run-level facts stored beside the metrics (vLLM stores the same keys). */
typedef struct {
    const char *backend;  /* "openai", "openai-chat" or "gptoss-engine" */
    const char *model_id; /* the model name sent / loaded */
    const char *label;    /* free text; NULL: none */
    const char *base_url; /* NULL for in-process sweeps */
    unsigned long long seed;
} bench_meta;

/* One result object with vLLM's key names (and InferenceMAX's derived ones); see metrics_stats.c.
 */
json_t *bench_metrics_json(const bench_metrics *m, const bench_meta *meta);

/* Writes an array of result objects to path (pretty-printed; through a temporary file). */
int bench_results_write(const char *path, json_t *array);

/* The end of one concurrency level, shared by `bench serve` and `bench sweep`: computes m from the
 * run, prints the report on stdout, appends the JSON object to results and rewrites path with the
 * whole array (so a sweep that dies later keeps what it measured). Returns -1 only when writing
 * fails. */
int bench_report_level(const bench_run *r, bench_metrics *m, const bench_meta *meta,
                       json_t *results, const char *path);

#endif
