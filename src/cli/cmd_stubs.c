/* Temporary: commands being written. */
#include "cli/commands.h"
#include <stdio.h>
int cmd_make_model(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "not yet\n"); return 1; }
int cmd_generate(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "not yet\n"); return 1; }
int cmd_inspect(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "not yet\n"); return 1; }
