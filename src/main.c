/* The gptoss command: a table of subcommands, each implemented in its own module. */
#include "cli/commands.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} COMMANDS[] = {
    {"make-model", cmd_make_model,
     "write a synthetic checkpoint in the Hugging Face release layout"},
    {"generate", cmd_generate, "generate tokens from a prompt on the CPU reference backend"},
    {"inspect", cmd_inspect, "check a checkpoint and print its configuration and tensors"},
    {"roofline", cmd_roofline,
     "the least time a decode step can take on the hardware (performance model)"},
    {"tokenize", cmd_tokenize, "print the token ids of a text"},
    {"detokenize", cmd_detokenize, "print the text that token ids spell"},
    {"bench-tokenizer", cmd_bench_tokenizer, "measure tokenizer encoding speed (MB/s) on a file"},
    {"bench", cmd_bench,
     "benchmarks: serve (a server's frontier), sweep (in-process), plot, latency, tokenizer"},
    {"serve", cmd_serve,
     "serve the OpenAI-compatible HTTP API (`serve --model synthetic:tiny` to try it)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: gptoss COMMAND [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        fprintf(f, "  %-16s %s\n", COMMANDS[i].name, COMMANDS[i].help);
    fprintf(f, "\n`gptoss COMMAND --help` describes a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].run(argc - 1, argv + 1);
    fprintf(stderr, "gptoss: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
