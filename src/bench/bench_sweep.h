/* gptoss bench sweep: the `bench serve` sweep without HTTP — requests go straight into an
 * in-process engine, and tokens are timed in the engine's output callbacks. The workload, the
 * metric definitions and the JSON are those of `bench serve`, so a quick GPU frontier and a served
 * one plot side by side (the gap between them is what HTTP, JSON and detokenisation cost). */
#ifndef GPTOSS_BENCH_BENCH_SWEEP_H
#define GPTOSS_BENCH_BENCH_SWEEP_H

#include "bench/bench_plan.h"
#include "engine/runtime.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    /* --model, --backend and the engine options, built by runtime_build as serve builds them; 0 in
     * eng.max_num_seqs / eng.max_model_len / num_kv_blocks: derived from the sweep (see
     * bench_sweep_defaults). */
    runtime_args rt;
    bench_plan plan;
} bench_sweep_opts;

void bench_sweep_defaults(bench_sweep_opts *o);

/* 0 when every measured request finished, 1 when some failed, -1 + err_set() when it could not run.
 */
int bench_sweep(const bench_sweep_opts *o);

#endif
