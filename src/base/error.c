#include "base/error.h"

#include <stdio.h>
#include <string.h>

enum { ERR_CAP = 1024 };
static _Thread_local char err_buf[ERR_CAP];

int err_vset(const char *fmt, va_list ap) {
    vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    return -1;
}

int err_set(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    err_vset(fmt, ap);
    va_end(ap);
    return -1;
}

int err_prefix(const char *fmt, ...) {
    char old[ERR_CAP], ctx[ERR_CAP];
    memcpy(old, err_buf, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    size_t n = strlen(ctx);
    if (n > ERR_CAP - 3) n = ERR_CAP - 3;
    memcpy(err_buf, ctx, n);
    memcpy(err_buf + n, ": ", 2);
    size_t room = ERR_CAP - n - 3;
    size_t m = strnlen(old, room);
    memcpy(err_buf + n + 2, old, m);
    err_buf[n + 2 + m] = 0;
    return -1;
}

const char *err_msg(void) {
    return err_buf;
}
void err_clear(void) {
    err_buf[0] = 0;
}
