/* Allocation that cannot return NULL: running out of host memory is not a recoverable input error,
 * so these print one line and abort rather than let NULL travel. Use plain malloc where a size comes
 * from untrusted input and check it (see safetensors.c). */
#ifndef GPTOSS_BASE_XALLOC_H
#define GPTOSS_BASE_XALLOC_H

#include <stddef.h>

void *xmalloc(size_t n);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
/* printf into a fresh heap string. */
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
