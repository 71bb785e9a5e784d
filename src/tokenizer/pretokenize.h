/* The o200k pre-tokeniser: the regex that cuts text into the pieces BPE merges within, run by PCRE2
 * with its JIT compiler in UTF mode with Unicode properties. */
#ifndef GPTOSS_TOKENIZER_PRETOKENIZE_H
#define GPTOSS_TOKENIZER_PRETOKENIZE_H

#include <stddef.h>

/* o200k_base's pat_str exactly as tiktoken (and tokenizer.json's Split pre-tokenizer) spell it. The
 * loader checks tokenizer.json against it, so a tokenizer of another family is refused, not
 * silently misread. */
extern const char O200K_PAT_STR[];

typedef struct {
    void *code; /* pcre2_code_8 */
} pretok;

int pretok_init(pretok *p); /* -1 + err_set() if PCRE2 refuses the pattern */
void pretok_free(pretok *p);

/* When s holds characters that PCRE2's Unicode tables do not know but the reference's do, a heap
 * copy of s with each replaced by a stand-in of the same class and length, to match the regex on;
 * else NULL. s must be valid UTF-8. */
unsigned char *pretok_stand_ins(const unsigned char *s, size_t len);

/* One matching session (match data, JIT stack); one per encode call, not shared between threads. */
typedef struct pretok_matcher pretok_matcher;
pretok_matcher *pretok_matcher_new(const pretok *p);
void pretok_matcher_free(pretok_matcher *m);
/* Finds the next piece at or after pos in s[0..len), which must be valid UTF-8 (the regex engine
 * does not check). Returns 1 and sets [*start, *end), 0 when there is none, -1 + err_set() on an
 * engine error. */
int pretok_next(pretok_matcher *m, const unsigned char *s, size_t len, size_t pos, size_t *start,
                size_t *end);

#endif
