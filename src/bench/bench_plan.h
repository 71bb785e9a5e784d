/* The sweep both `bench serve` (over HTTP) and `bench sweep` (in-process) run, InferenceMAX's way:
 * the workload (ISL/OSL and their spread), the concurrency levels, prompts and warm-ups per level,
 * and where results go. One plan, one level setup and one level report, so the two commands measure
 * and write exactly the same thing and differ only in how a request reaches the engine. */
#ifndef GPTOSS_BENCH_BENCH_PLAN_H
#define GPTOSS_BENCH_BENCH_PLAN_H

#include "bench/metrics_stats.h"
#include "bench/workload.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct {
    const char *label;
    int isl, osl;
    double range_ratio;
    const int32_t *concurrency;
    int n_concurrency;
    int num_prompts;                  /* 0: prompts_per_c × C */
    int num_warmups;                  /* < 0: warmups_per_c × C */
    int prompts_per_c, warmups_per_c; /* InferenceMAX: 10 and 2 */
    int num_gpus;
    const char *output_json; /* NULL: no file */
    uint64_t seed;
    double temperature; /* < 0: not sent (bench serve: the server's default) */
    bool progress;
} bench_plan;

/* InferenceMAX's defaults: 1k/1k, ratio 0.8, 10·C prompts after 2·C warm-ups, greedy. */
void bench_plan_defaults(bench_plan *p);

/* One concurrency level of the plan. */
typedef struct {
    int C, n, w;       /* concurrency, measured prompts, warm-ups */
    bench_item *items; /* n measured prompts, then w warm-ups: distinct, so that a prefix cache
                        * never serves a measured prompt from an earlier request */
    double cpu0;       /* the process's CPU seconds when the measured run started */
} bench_level;

/* Level k: its counts and prompts, and its header line on stdout (`where`: what serves it). */
void bench_level_init(const bench_plan *p, int k, const char *where, bench_level *lv);
void bench_level_free(bench_level *lv);
/* Call just before the measured run. */
void bench_level_start(bench_level *lv);
/* After the measured run: the metrics (setup from the plan), the report and the JSON
 * (bench_report_level), and a line naming `who` when requests failed (*any_failed = 1). Returns -1
 * only when writing the results fails. */
int bench_level_report(const bench_plan *p, const bench_level *lv, const bench_run *run,
                       const bench_meta *meta, json_t *results, const char *who, int *any_failed);

#endif
