#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int log_threshold = -1;

void log_set_level(enum log_level level) {
    log_threshold = (int)level;
}

static int threshold(void) {
    if (log_threshold >= 0) return log_threshold;
    const char *e = getenv("GPTOSS_LOG");
    log_threshold = LOG_INFO;
    if (e && !strcmp(e, "debug")) log_threshold = LOG_DEBUG;
    if (e && !strcmp(e, "warn")) log_threshold = LOG_WARN;
    if (e && !strcmp(e, "error")) log_threshold = LOG_ERROR;
    return log_threshold;
}

void log_msg(enum log_level level, const char *fmt, ...) {
    if ((int)level < threshold()) return;
    static const char *names[] = {"DEBUG", "INFO", "WARN", "ERROR"};
    char stamp[32];
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(stamp, sizeof stamp, "%m-%d %H:%M:%S", &tm);
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s %s %s\n", names[level], stamp, line);
}
