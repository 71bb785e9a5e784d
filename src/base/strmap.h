/* A hash map from strings to pointers, for the collections of one request (required property
 * names, tool-call ids, duplicate checks): lookups in O(1) so that a request with many entries costs
 * linear time, not quadratic. Keys are borrowed (they must outlive the map); values are the caller's.
 * The hash is seeded per map from a process-wide random value, so a client cannot choose keys that
 * collide (hash flooding would bring the quadratic cost back). */
#ifndef GPTOSS_BASE_STRMAP_H
#define GPTOSS_BASE_STRMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *key;
    size_t len;
    uint64_t hash;
    void *value;
} strmap_slot;

typedef struct {
    strmap_slot *slots; /* open addressing, linear probing; key NULL = empty */
    size_t cap, n;      /* cap is 0 or a power of two, n < cap * 3/4 */
    uint64_t seed;
} strmap;

/* Sets key → value (replacing an earlier value of the same key). */
void strmap_put(strmap *m, const char *key, void *value);
/* The slot's value pointer of key, or NULL when key is absent. */
void **strmap_find(const strmap *m, const char *key);
/* Removes key; false when it was absent. Other slots' value pointers may move (backward shift). */
bool strmap_del(strmap *m, const char *key);
static inline bool strmap_has(const strmap *m, const char *key) {
    return strmap_find(m, key) != NULL;
}
void strmap_free(strmap *m);

#endif
