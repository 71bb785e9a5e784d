/* Tiny option parsing shared by the subcommands: "--name value" or "--name=value", with errors that
 * name the option. */
#ifndef GPTOSS_CLI_ARGS_H
#define GPTOSS_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    int argc, i;
    char **argv;
    const char *cmd;
} args_t;

static inline void args_init(args_t *a, int argc, char **argv) {
    a->argc = argc, a->argv = argv, a->i = 1, a->cmd = argv[0];
}

/* True when argv[i] is the option `name`; for options taking a value, *value gets it (from "=..." or
 * the next argument); a missing value is an error reported through err_set (return -1 via args_error). */
bool args_flag(args_t *a, const char *name);
bool args_opt(args_t *a, const char *name, const char **value);
int args_int(const char *opt, const char *s, long lo, long hi, long *out);
int args_double(const char *opt, const char *s, double lo, double hi, double *out);
/* Parses "1,2,3" into a fresh array. */
int args_int_list(const char *opt, const char *s, int32_t **out, int *n);
/* Prints "gptoss CMD: <err_msg> (see 'gptoss CMD --help')" and returns 2 (a bad option);
 * args_error_exit prints the message alone and returns `code` (1 for a command that failed while
 * running). */
int args_fail(const args_t *a);
int args_error_exit(const args_t *a, int code);
/* Print one line, "gptoss CMD: <message> (see 'gptoss CMD --help')", and return 2: args_unknown's
 * message is "unknown option 'ARG'" for the current argument. `usage` is kept for callers that
 * may print it in full one day; it is not printed. */
int args_unknown(const args_t *a, const char *usage);
int args_usage_error(const args_t *a, const char *message, const char *usage);

#endif
