/* UTF-8 checking for streamed token bytes (internal to src/harmony/harmony_*).
 *
 * One BPE token can end in the middle of a multi-byte character (emoji are often split across two
 * or three tokens), and a model can sample byte sequences that are not UTF-8 at all. Clients must
 * only ever see valid UTF-8, and every character that did arrive whole must reach them unchanged.
 * So the parser keeps back a trailing sequence that is still a valid *prefix* of a character, and
 * replaces each invalid stretch by one U+FFFD, using the "maximal subpart" rule of the Unicode
 * standard (the same rule as Rust's from_utf8_lossy and Python's errors="replace"). */
#ifndef GPTOSS_HARMONY_UTF8_H
#define GPTOSS_HARMONY_UTF8_H

#include "harmony/harmony_strbuf.h"

#include <stdbool.h>
#include <stddef.h>

#define HARMONY_REPLACEMENT "\xEF\xBF\xBD" /* U+FFFD in UTF-8 */

/* Classifies the bytes at s[0..n), n >= 1:
 *   k > 0  the first k bytes are one valid character;
 *   0      the bytes are a valid but unfinished start of a character (more bytes may complete it);
 *   -k     the first k bytes are an invalid stretch, to be replaced by one U+FFFD. */
int harmony_utf8_step(const unsigned char *s, size_t n);

/* Appends the UTF-8-clean form of in[0..n) to out and returns how many bytes it consumed. When
 * `final` is false an unfinished character at the end is not consumed (the caller keeps it for the
 * next token); when true it becomes one U+FFFD. */
size_t harmony_utf8_clean(const char *in, size_t n, bool final, hsb *out);

/* True when s[0..n) is entirely valid UTF-8. */
bool harmony_utf8_valid(const char *s, size_t n);

#endif
