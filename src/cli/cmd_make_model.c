/* gptoss make-model: write a synthetic checkpoint. */
#include "base/error.h"
#include "base/timeutil.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "model/synthetic.h"

#include <stdio.h>
#include <string.h>

static const char USAGE[] =
    "usage: gptoss make-model --preset tiny|20b|120b --out DIR [--seed N] [--layers N] [--experts "
    "N]\n"
    "                         [--vocab N] [--sliding-window N] [--shards N]\n"
    "Writes random weights in the Hugging Face release layout (bf16 dense tensors, MXFP4 experts,\n"
    "sharded safetensors with an index, config.json, generation_config.json, tokenizer files).\n"
    "The same options and seed give the same bytes.\n";

int cmd_make_model(int argc, char **argv) {
    args_t a;
    args_init(&a, argc, argv);
    const char *preset = NULL, *out = NULL, *v = NULL;
    long seed = 0, layers = -1, experts = -1, vocab = -1, window = -1, shards = -1;
    while (a.i < argc) {
        if (args_flag(&a, "--help") || args_flag(&a, "-h")) {
            fputs(USAGE, stdout);
            return 0;
        } else if (args_opt(&a, "--preset", &preset)) {
            if (!preset) return args_fail(&a);
        } else if (args_opt(&a, "--out", &out)) {
            if (!out) return args_fail(&a);
        } else if (args_opt(&a, "--seed", &v)) {
            if (args_int("--seed", v, 0, INT64_MAX, &seed)) return args_fail(&a);
        } else if (args_opt(&a, "--layers", &v)) {
            if (args_int("--layers", v, 1, CONFIG_MAX_LAYERS, &layers)) return args_fail(&a);
        } else if (args_opt(&a, "--experts", &v)) {
            if (args_int("--experts", v, 1, 4096, &experts)) return args_fail(&a);
        } else if (args_opt(&a, "--vocab", &v)) {
            if (args_int("--vocab", v, 2, 1 << 24, &vocab)) return args_fail(&a);
        } else if (args_opt(&a, "--sliding-window", &v)) {
            if (args_int("--sliding-window", v, 1, 1 << 30, &window)) return args_fail(&a);
        } else if (args_opt(&a, "--shards", &v)) {
            if (args_int("--shards", v, 1, 10000, &shards)) return args_fail(&a);
        } else {
            return args_unknown(&a, USAGE);
        }
    }
    if (!preset || !out) {
        return args_usage_error(&a, "--preset and --out are required", USAGE);
    }
    model_config c;
    if (config_preset(preset, &c) != 0) return args_fail(&a);
    if (layers > 0) {
        c.n_layers = (int)layers;
        for (int i = 0; i < c.n_layers; i++) c.layer_sliding[i] = (i % 2 == 0);
    }
    if (experts > 0) c.n_experts = (int)experts;
    if (c.experts_per_tok > c.n_experts) c.experts_per_tok = c.n_experts;
    if (vocab > 0) c.vocab = (int)vocab;
    if (c.pad_token >= c.vocab)
        c.pad_token = c.vocab - 1; /* transformers wants padding_idx < vocab */
    if (window > 0) c.sliding_window = (int)window;
    /* Shard counts of the releases: 20b has 3 files, 120b 15; small models get 2 so sharding is used. */
    int n_shards = shards > 0                ? (int)shards
                   : !strcmp(preset, "120b") ? 15
                   : !strcmp(preset, "20b")  ? 3
                                             : 2;
    double t0 = now_seconds();
    if (synthetic_write(&c, out, (uint64_t)seed, n_shards) != 0) return args_error_exit(&a, 1);
    fprintf(stderr, "gptoss make-model: wrote %s (%s, %d layers, %d experts, seed %ld) in %.1f s\n",
            out, preset, c.n_layers, c.n_experts, seed, now_seconds() - t0);
    return 0;
}
