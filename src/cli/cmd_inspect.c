/* gptoss inspect: load a checkpoint with every check and print what it holds. */
#include "base/error.h"
#include "cli/commands.h"
#include "model/weights.h"

#include <stdio.h>
#include <string.h>

int cmd_inspect(int argc, char **argv) {
    if (argc != 2 || !strcmp(argv[1], "--help")) {
        fprintf(argc == 2 ? stdout : stderr,
                "usage: gptoss inspect DIR\nChecks every tensor of the checkpoint in DIR against "
                "its config and prints a summary.\n");
        return argc == 2 ? 0 : 2;
    }
    model_weights w;
    if (weights_load(argv[1], &w) != 0) {
        fprintf(stderr, "gptoss inspect: %s\n", err_msg());
        return 1;
    }
    const model_config *c = &w.cfg;
    size_t bytes = 0;
    int tensors = 0;
    for (int f = 0; f < w.st.n_files; f++) {
        tensors += w.st.files[f].n_tensors;
        bytes += w.st.files[f].map_len;
    }
    printf("checkpoint %s: %d files, %d tensors, %.2f GB\n", argv[1], w.st.n_files, tensors,
           bytes / 1e9);
    printf("layers %d (sliding window %d on layers:", c->n_layers, c->sliding_window);
    for (int l = 0; l < c->n_layers; l++)
        if (c->layer_sliding[l]) printf(" %d", l);
    printf(")\nhidden %d, heads %d/%d of %d, experts %d (top %d), intermediate %d, vocab %d\n",
           c->hidden, c->n_heads, c->n_kv_heads, c->head_dim, c->n_experts, c->experts_per_tok,
           c->intermediate, c->vocab);
    printf("rope yarn theta %g factor %g beta %g/%g original %d truncate %s\n", c->rope_theta,
           c->rope_factor, c->rope_beta_fast, c->rope_beta_slow, c->rope_original_max,
           c->rope_truncate ? "true" : "false");
    weights_free(&w);
    return 0;
}
