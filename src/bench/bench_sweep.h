/* gptoss bench sweep: the `bench serve` sweep without HTTP — requests go straight into an
 * in-process engine, and tokens are timed in the engine's output callbacks. The workload, the
 * metric definitions and the JSON are those of `bench serve`, so a quick GPU frontier and a served
 * one plot side by side (the gap between them is what HTTP, JSON and detokenisation cost). */
#ifndef GPTOSS_BENCH_BENCH_SWEEP_H
#define GPTOSS_BENCH_BENCH_SWEEP_H

#include "bench/bench_plan.h"
#include "engine/engine.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    const char *model;   /* a checkpoint folder or "synthetic:PRESET" */
    const char *backend; /* "cpu" or "cuda" */
    bench_plan plan;
    engine_options eng; /* 0 in max_num_seqs / max_model_len: derived from the sweep */
    int num_kv_blocks;  /* 0: the CPU backend gets room for every sequence; CUDA sizes itself */
    int block_size;
    double gpu_memory_utilization;
} bench_sweep_opts;

void bench_sweep_defaults(bench_sweep_opts *o);

/* 0 when every measured request finished, 1 when some failed, -1 + err_set() when it could not run.
 */
int bench_sweep(const bench_sweep_opts *o);

#endif
