#include "cli/args.h"

#include "base/error.h"
#include "base/xalloc.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool args_flag(args_t *a, const char *name) {
    if (a->i < a->argc && !strcmp(a->argv[a->i], name)) {
        a->i++;
        return true;
    }
    return false;
}

/* Returns true when the option matched. A matched option without a value sets *value = NULL and records
 * an error; the caller checks for NULL. */
bool args_opt(args_t *a, const char *name, const char **value) {
    if (a->i >= a->argc) return false;
    const char *s = a->argv[a->i];
    size_t n = strlen(name);
    if (strncmp(s, name, n) != 0) return false;
    if (s[n] == '=') {
        *value = s + n + 1;
        a->i++;
        return true;
    }
    if (s[n] != 0) return false;
    if (a->i + 1 >= a->argc) {
        err_set("option %s needs a value", name);
        *value = NULL;
        a->i++;
        return true;
    }
    *value = a->argv[a->i + 1];
    a->i += 2;
    return true;
}

int args_int(const char *opt, const char *s, long lo, long hi, long *out) {
    if (!s) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end) return err_set("option %s: '%s' is not an integer", opt, s);
    if (v < lo || v > hi)
        return err_set("option %s: %ld is out of range [%ld, %ld]", opt, v, lo, hi);
    *out = v;
    return 0;
}

int args_double(const char *opt, const char *s, double lo, double hi, double *out) {
    if (!s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v))
        return err_set("option %s: '%s' is not a number", opt, s);
    if (v < lo || v > hi) return err_set("option %s: %g is out of range [%g, %g]", opt, v, lo, hi);
    *out = v;
    return 0;
}

int args_int_list(const char *opt, const char *s, int32_t **out, int *n) {
    if (!s) return -1;
    int cap = 16, len = 0;
    int32_t *v = xmalloc((size_t)cap * sizeof *v);
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        /* "1,2," and "1,,2" are refused too: an empty element is a typo, not nothing. */
        if (errno || end == p || x < 0 || x > INT32_MAX || (*end && *end != ',') ||
            (*end == ',' && !end[1])) {
            free(v);
            return err_set("option %s: '%s' is not a comma-separated list of non-negative integers",
                           opt, s);
        }
        if (len == cap) v = xrealloc(v, (size_t)(cap *= 2) * sizeof *v);
        v[len++] = (int32_t)x;
        p = *end ? end + 1 : end;
    }
    *out = v;
    *n = len;
    return 0;
}

int args_error_exit(const args_t *a, int code) {
    fprintf(stderr, "gptoss %s: %s\n", a->cmd, err_msg());
    return code;
}

/* A bad option: the message and where the options are described, on one line. */
int args_fail(const args_t *a) {
    fprintf(stderr, "gptoss %s: %s (see 'gptoss %s --help')\n", a->cmd, err_msg(), a->cmd);
    return 2;
}

int args_unknown(const args_t *a, const char *usage) {
    char message[160];
    snprintf(message, sizeof message, "unknown option '%.120s'", a->argv[a->i]);
    return args_usage_error(a, message, usage);
}

/* One line: the whole usage text after every typo buries the message (`--help` prints it). */
int args_usage_error(const args_t *a, const char *message, const char *usage) {
    (void)usage;
    fprintf(stderr, "gptoss %s: %s (see 'gptoss %s --help')\n", a->cmd, message, a->cmd);
    return 2;
}
