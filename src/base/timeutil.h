/* Monotonic time in seconds. */
#ifndef GPTOSS_BASE_TIMEUTIL_H
#define GPTOSS_BASE_TIMEUTIL_H

#include <time.h>

static inline double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
