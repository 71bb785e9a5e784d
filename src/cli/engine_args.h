/* The options every engine-running command takes (serve, generate --prompts-file, bench sweep),
 * with vLLM's names, parsed in one place so that they mean and accept the same everywhere. */
#ifndef GPTOSS_CLI_ENGINE_ARGS_H
#define GPTOSS_CLI_ENGINE_ARGS_H

#include "cli/args.h"
#include "engine/engine.h"

typedef struct {
    engine_options *eng;           /* --max-num-seqs, --max-num-batched-tokens, --max-model-len,
                                    * --stream-interval, --[no-]enable-prefix-caching,
                                    * --[no-]async-scheduling */
    int *num_kv_blocks;            /* --num-kv-blocks */
    int *block_size;               /* --block-size */
    double *gpu_memory_utilization; /* --gpu-memory-utilization */
} engine_args;

/* 1 when argv[a->i] is one of them (consumed, its value stored); 0 when it is not one (nothing
 * consumed); -1 on a bad value (err_set names the option; report it with args_fail). */
int engine_args_parse(args_t *a, const engine_args *t);

#endif
