/* Offline batch generation through the engine: many requests from a JSON-lines file, run
 * concurrently, one JSON object printed per request in input order. */
#ifndef GPTOSS_CLI_OFFLINE_H
#define GPTOSS_CLI_OFFLINE_H

#include "engine/engine.h"

typedef struct {
    const char *model;
    const char *prompts_file;
    engine_options eng;
    int num_kv_blocks; /* full-pool blocks (0 = backend default); small values force preemption */
    int block_size;
} offline_opts;

int run_offline(const offline_opts *o);

#endif
