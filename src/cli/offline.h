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
    const char *backend;           /* backend_find() name: "cpu" (NULL) or "cuda" */
    double gpu_memory_utilization; /* GPU backends; 0 = their default */
    const char *prompts_text;      /* the JSON lines themselves, instead of prompts_file */
    int print_as_generate;         /* one request printed as `generate` prints it: 1 = plain, 2 = its
                                      JSON object; 0 = one JSON object per request (the default) */
    bool print_text;               /* with print_as_generate: the decoded text too (text prompts) */
} offline_opts;

int run_offline(const offline_opts *o);

#endif
