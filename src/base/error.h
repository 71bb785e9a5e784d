/* Errors: a thread-local "last error" message, Redis-style.
 *
 * A function that fails returns -1 (or NULL) after calling err_set(), which records one line that names
 * what went wrong (the field, file or tensor). Callers either pass the failure up unchanged or add
 * context with err_prefix(). The message lives until the next err_set() on the same thread. */
#ifndef GPTOSS_BASE_ERROR_H
#define GPTOSS_BASE_ERROR_H

#include <stdarg.h>

#if defined(__GNUC__)
#define GX_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define GX_PRINTF(a, b)
#endif

/* Records a formatted message; always returns -1 so callers can write `return err_set(...)`. */
int err_set(const char *fmt, ...) GX_PRINTF(1, 2);
int err_vset(const char *fmt, va_list ap);
/* Prepends "<context>: " to the current message; returns -1. */
int err_prefix(const char *fmt, ...) GX_PRINTF(1, 2);
/* The current message ("" if none). */
const char *err_msg(void);
void err_clear(void);

#endif
