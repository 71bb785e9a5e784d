#include "bench/bench_plan.h"

#include "base/rng.h"
#include "base/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

void bench_plan_defaults(bench_plan *p) {
    memset(p, 0, sizeof *p);
    p->isl = 1024;
    p->osl = 1024;
    p->range_ratio = 0.8;
    p->num_warmups = -1;
    p->prompts_per_c = 10;
    p->warmups_per_c = 2;
    p->num_gpus = 1;
    p->temperature = 0.0; /* InferenceMAX's client sends temperature 0 (greedy) */
    p->progress = true;
}

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
           (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

void bench_level_init(const bench_plan *p, int k, const char *where, bench_level *lv) {
    const int C = p->concurrency[k];
    lv->C = C;
    lv->n = p->num_prompts > 0 ? p->num_prompts : p->prompts_per_c * C;
    lv->w = p->num_warmups >= 0 ? p->num_warmups : p->warmups_per_c * C;
    lv->cpu0 = 0;
    lv->items = xmalloc((size_t)(lv->n + lv->w + 1) * sizeof *lv->items);
    bench_workload(lv->n, p->isl, p->osl, p->range_ratio, rng_hash2(p->seed, (uint64_t)C),
                   lv->items);
    bench_workload(lv->w, p->isl, p->osl, p->range_ratio, rng_hash2(p->seed ^ 0x77a2u, (uint64_t)C),
                   lv->items + lv->n);
    printf("\nConcurrency %d: %d prompts after %d warm-ups; ISL uniform in [%d, %d], OSL in "
           "[%d, %d]; %s\n",
           C, lv->n, lv->w, bench_len_lower(p->isl, p->range_ratio), p->isl,
           bench_len_lower(p->osl, p->range_ratio), p->osl, where);
    fflush(stdout);
}

void bench_level_free(bench_level *lv) {
    free(lv->items);
    lv->items = NULL;
}

void bench_level_start(bench_level *lv) {
    lv->cpu0 = cpu_seconds();
}

int bench_level_report(const bench_plan *p, const bench_level *lv, const bench_run *run,
                       const bench_meta *meta, json_t *results, const char *who, int *any_failed) {
    bench_metrics m = {.max_concurrency = lv->C,
                       .num_prompts = lv->n,
                       .num_warmups = lv->w,
                       .num_gpus = p->num_gpus,
                       .isl = p->isl,
                       .osl = p->osl,
                       .range_ratio = p->range_ratio,
                       .client_cpu_seconds = cpu_seconds() - lv->cpu0};
    const int rc = bench_report_level(run, &m, meta, results, p->output_json);
    if (m.failed > 0) {
        *any_failed = 1;
        fprintf(stderr, "%s: %d of %d requests failed at concurrency %d; the first error: %s\n",
                who, m.failed, lv->n, lv->C, run->first_error ? run->first_error : "(none)");
    }
    return rc != 0 ? -1 : 0;
}
