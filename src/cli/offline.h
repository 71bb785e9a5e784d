/* Offline batch generation through the engine: many requests from a JSON-lines file, run
 * concurrently, one JSON object printed per request in input order. */
#ifndef GPTOSS_CLI_OFFLINE_H
#define GPTOSS_CLI_OFFLINE_H

#include "engine/runtime.h"

typedef struct {
    runtime_args rt;       /* the engine and backend options; rt.model as the user gave it */
    const char *model_dir; /* what the backend loads (runtime_resolve_model) */
    const char *prompts_file;
    const char *prompts_text; /* the JSON lines themselves, instead of prompts_file */
    int print_as_generate;    /* one request printed as `generate` prints it: 1 = plain, 2 = its
                                      JSON object; 0 = one JSON object per request (the default) */
    bool print_text;          /* with print_as_generate: the decoded text too (text prompts) */
} offline_opts;

int run_offline(const offline_opts *o);

#endif
