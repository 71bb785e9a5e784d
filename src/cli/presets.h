/* gptoss serve --preset max-throughput|balanced|min-latency (issue 14): engine options chosen from
 * the measured 1k/1k frontier of gpt-oss-120b on one H200 (bench/results/, the README's table), as
 * vLLM's recipes give its users settings per goal. A preset sets defaults only: any option given on
 * the command line, before or after it, wins. */
#ifndef GPTOSS_CLI_PRESETS_H
#define GPTOSS_CLI_PRESETS_H

#include "engine/runtime.h"

/* Applies preset `name` to r; -1 + err_set() naming --preset and the known names otherwise. */
int preset_apply(const char *name, runtime_args *r);

/* The --help line. */
#define PRESETS_HELP                                                                               \
    "  --preset NAME                  engine options for a goal, from the measured frontier\n"     \
    "                                 (options given explicitly win): min-latency (8 "             \
    "sequences),\n"                                                                                \
    "                                 balanced (64: >= 40 tokens/s a user),\n"                     \
    "                                 max-throughput (256, --stream-interval 4)\n"

#endif
