/* gptoss bench serve: the InferenceMAX sweep against any OpenAI-compatible server (ours, vLLM,
 * SGLang, TRT-LLM), measured the way `vllm bench serve` measures (bench/metrics_stats.h).
 *
 * For each concurrency C: 2·C warm-up requests (not counted), then 10·C measured requests with at
 * most C in flight and no pacing (request rate inf); each is a streamed completion of random token
 * ids (bench/workload.h) with ignore_eos and max_tokens = its drawn output length. One process, one
 * libevent loop, keep-alive connections (bench/http_client.h). */
#ifndef GPTOSS_BENCH_BENCH_SERVE_H
#define GPTOSS_BENCH_BENCH_SERVE_H

#include "bench/bench_plan.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    const char *url;     /* http://host:port[/prefix] */
    const char *model;   /* NULL: the first model GET /v1/models lists */
    const char *api_key; /* NULL: $OPENAI_API_KEY when set */
    bool chat;      /* /v1/chat/completions with text prompts instead of /v1/completions with ids */
    double timeout; /* seconds a request may go without a byte before it fails */
    bench_plan plan;
} bench_serve_opts;

void bench_serve_defaults(bench_serve_opts *o);

/* Runs the sweep, printing a report per concurrency on stdout. Returns 0 when every measured
 * request succeeded, 1 when some failed (the counts and the first error are printed, the results
 * are still written), -1 + err_set() when the benchmark could not run. */
int bench_serve(const bench_serve_opts *o);

#endif
