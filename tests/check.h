/* A minimal test harness: CHECK records a failure (with file, line and a message) and carries on, so
 * one run shows every broken case; main returns check_report(), non-zero when anything failed. */
#ifndef GPTOSS_TESTS_CHECK_H
#define GPTOSS_TESTS_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int check_failures, check_count;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        check_count++;                                                                             \
        if (!(cond)) {                                                                             \
            check_failures++;                                                                      \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

#define CHECK_NEAR(a, b, tol, what)                                                                \
    CHECK(fabs((double)(a) - (double)(b)) <= (tol), "%s: %.9g vs %.9g (tol %.3g)", what,           \
          (double)(a), (double)(b), (double)(tol))

/* The error message must contain every given fragment (case-sensitive). */
#define CHECK_MSG_HAS(msg, frag)                                                                   \
    CHECK(strstr((msg), (frag)) != NULL, "message '%s' lacks '%s'", (msg), (frag))

static inline int check_report(const char *name) {
    if (check_failures)
        fprintf(stderr, "%s: %d of %d checks FAILED\n", name, check_failures, check_count);
    else
        fprintf(stderr, "%s: all %d checks passed\n", name, check_count);
    return check_failures ? 1 : 0;
}

#endif
