/* UTF-8 validation and repair for the tokenizer.
 *
 * The pre-tokeniser regex runs in PCRE2's UTF mode, which requires valid UTF-8. Text from users
 * need not be valid, and the reference tokenizer never sees invalid text: tiktoken takes a
 * JavaScript (or Python) string, and a byte string becomes one by decoding with replacement, where
 * each "maximal subpart" of an ill-formed sequence becomes one U+FFFD (Unicode §3.9 "U+FFFD
 * substitution of maximal subparts", the rule of the WHATWG Encoding standard that Node's
 * Buffer.toString() and TextDecoder follow). Lone surrogates in a JavaScript string meet the same
 * fate when tiktoken converts it to UTF-8. So invalid input is repaired by that same rule before
 * encoding: ours and the reference then agree on every input, and nothing invalid reaches the regex
 * engine. */
#ifndef GPTOSS_TOKENIZER_TOK_UTF8_H
#define GPTOSS_TOKENIZER_TOK_UTF8_H

#include <stddef.h>

/* What utf8_step found at the start of s[0..n) (n >= 1): */
enum {
    UTF8_CHAR = 1,      /* a complete, valid character of *adv bytes */
    UTF8_INVALID = 0,   /* an ill-formed maximal subpart of *adv bytes: one U+FFFD */
    UTF8_TRUNCATED = -1 /* the input ends inside a character that could still become valid */
};
int utf8_step(const unsigned char *s, size_t n, size_t *adv);

/* Length of the longest prefix of s that is valid UTF-8 (n when all of it is). */
size_t utf8_valid_prefix(const unsigned char *s, size_t n);

/* Copies s to out replacing every ill-formed maximal subpart (and a truncated final character) with
 * U+FFFD; out needs room for 3*n bytes. Returns the output length. */
size_t utf8_repair(const unsigned char *s, size_t n, unsigned char *out);

#endif
