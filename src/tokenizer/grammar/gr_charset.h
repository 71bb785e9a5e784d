/* Sets of Unicode code points, and reading one character of a set as UTF-8 bytes.
 *
 * The automaton reads bytes, so a character class becomes byte-range paths: every code point range
 * is split into runs whose UTF-8 encodings differ only in ranges of independent bytes (e.g.
 * U+0800..U+FFFF is E0 A0-BF 80-BF, E1-EC 80-BF 80-BF, ...). Only valid UTF-8 comes out (no
 * surrogates, no overlong forms).
 *
 * Inside a JSON string (json = 1) the characters JSON must escape are read as their escapes: '"' as
 * \", '\' as \\, and the controls U+0000..U+001F as \b \t \n \f \r or \u00XX. That is one spelling
 * per character, so what the automaton accepts decodes to the same text the set describes. */
#ifndef GPTOSS_GRAMMAR_GR_CHARSET_H
#define GPTOSS_GRAMMAR_GR_CHARSET_H

#include "tokenizer/grammar/gr_build.h"

#include <stddef.h>
#include <stdint.h>

#define CP_MAX 0x10FFFFu

typedef struct {
    uint32_t lo, hi;
} cp_range;

typedef struct {
    cp_range *r;
    size_t n, cap;
} cpset;

void cpset_add(cpset *s, uint32_t lo, uint32_t hi);
void cpset_add_set(cpset *s, const cpset *o);
/* Sorts and merges overlapping or touching ranges. */
void cpset_normalize(cpset *s);
/* The complement within U+0000..U+10FFFF (normalised). */
void cpset_negate(cpset *s);
void cpset_free(cpset *s);

/* The named classes of regular expressions (ECMAScript meanings: \d and \w are ASCII, \s is
 * Unicode white space and line terminators). */
void cpset_add_digit(cpset *s);
void cpset_add_word(cpset *s);
void cpset_add_space(cpset *s);

/* Edges from `from` to `to` reading one character of s (see above for json). */
void gb_charset(gbuild *b, uint32_t from, const cpset *s, int json, uint32_t to);

/* Decodes one UTF-8 character of s[0..n); returns its length (1..4), or 0 when s does not start
 * with a valid one. */
int utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);

#endif
