/* Growable arrays of token ids and floats. Plain structs: {data, len, cap}; zero-initialise to start. */
#ifndef GPTOSS_BASE_VEC_H
#define GPTOSS_BASE_VEC_H

#include "base/xalloc.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct {
    int32_t *v;
    size_t len, cap;
} ivec;

static inline void ivec_reserve(ivec *a, size_t n) {
    if (n <= a->cap) return;
    size_t cap = a->cap ? a->cap * 2 : 16;
    while (cap < n) cap *= 2;
    a->v = (int32_t *)xrealloc(a->v, cap * sizeof *a->v); /* cast: also compiled as C++ (nvcc) */
    a->cap = cap;
}
static inline void ivec_push(ivec *a, int32_t x) {
    ivec_reserve(a, a->len + 1);
    a->v[a->len++] = x;
}
static inline void ivec_free(ivec *a) {
    free(a->v);
    a->v = NULL;
    a->len = a->cap = 0;
}

#endif
