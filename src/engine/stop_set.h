/* The stop strings of one request, shared by its n sequences (reference-counted: sequences are
 * created on an HTTP thread and destroyed on the engine thread), with a KMP failure table per
 * string so that each sequence finds a stop string in O(new bytes) per token (amortised) whatever
 * the strings' lengths. A sequence keeps only its match state: per string, the length of the longest
 * prefix of that string that ends the text generated so far. */
#ifndef GPTOSS_ENGINE_STOP_SET_H
#define GPTOSS_ENGINE_STOP_SET_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    _Atomic int refs;
    int n;
    char **str;
    size_t *len;
    uint32_t **fail; /* fail[k][i]: longest proper border of str[k][0..i] */
} stop_set;

/* Copies the n strings (non-empty, each below 4 GiB) and builds their tables. */
stop_set *stop_set_new(const char *const *strings, int n);
stop_set *stop_set_ref(stop_set *ss);
void stop_set_unref(stop_set *ss);

/* Feeds the sequence's new bytes through every string's matcher (state[k] as above, starting at 0).
 * Returns the first string (in request order) that a match ending inside these bytes completes, or
 * -1; *trim then gets the bytes from that match's start to the end of the new bytes. */
int stop_set_feed(const stop_set *ss, uint32_t *state, const char *bytes, size_t n, size_t *trim);

/* The longest suffix of the text that is a proper prefix of some string: bytes that a later token
 * might turn into a stop string (held back from streaming). */
size_t stop_set_partial(const stop_set *ss, const uint32_t *state);

#endif
