/* A growable byte string for building harmony texts (internal to src/harmony/harmony_*).
 * Zero-initialise to start; the bytes are always NUL-terminated once anything was appended. */
#ifndef GPTOSS_HARMONY_STRBUF_H
#define GPTOSS_HARMONY_STRBUF_H

#include "base/xalloc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *s;
    size_t len, cap;
} hsb;

static inline void hsb_reserve(hsb *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap * 2 : 64;
    while (cap < b->len + extra + 1) cap *= 2;
    b->s = xrealloc(b->s, cap);
    b->cap = cap;
}
static inline void hsb_addn(hsb *b, const char *s, size_t n) {
    hsb_reserve(b, n);
    if (n) memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}
static inline void hsb_add(hsb *b, const char *s) {
    hsb_addn(b, s, strlen(s));
}
static inline void hsb_addc(hsb *b, char c) {
    hsb_addn(b, &c, 1);
}
static inline void hsb_printf(hsb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void hsb_printf(hsb *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n <= 0) return;
    hsb_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}
/* The contents as a C string ("" when nothing was appended); stays owned by the buffer. */
static inline const char *hsb_str(const hsb *b) {
    return b->s ? b->s : "";
}
static inline void hsb_clear(hsb *b) {
    b->len = 0;
    if (b->s) b->s[0] = 0;
}
static inline void hsb_free(hsb *b) {
    free(b->s);
    b->s = NULL;
    b->len = b->cap = 0;
}

#endif
