/* Subcommands of the gptoss program. Each takes argv starting at its own name and returns the exit code. */
#ifndef GPTOSS_CLI_COMMANDS_H
#define GPTOSS_CLI_COMMANDS_H

int cmd_make_model(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_roofline(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_bench_tokenizer(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);
/* `gptoss bench latency` (src/cli/cmd_bench_latency.c), dispatched by cmd_bench (src/cli/cmd_bench.c). */
int cmd_bench_latency(int argc, char **argv);

#endif
