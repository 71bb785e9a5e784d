/* Regular expressions compiled into grammar fragments (see regex.c for the supported syntax). */
#ifndef GPTOSS_GRAMMAR_REGEX_H
#define GPTOSS_GRAMMAR_REGEX_H

#include "tokenizer/grammar/gr_build.h"

#include <stddef.h>

/* Edges from `from` to `to` (states of one rule) reading a match of pattern[0..len).
 * json: the match is the content of a JSON string, read in its escaped form (gr_charset.h).
 * search: JSON Schema's meaning, where the pattern may match anywhere in the text unless '^' or
 * '$' anchor it; otherwise the whole text must match (the anchors are then optional).
 * 0, or -1 with the builder failed and err_set() naming the construct and offset. */
int rx_build(gbuild *b, uint32_t from, uint32_t to, const char *pattern, size_t len, int json,
             int search);

#endif
