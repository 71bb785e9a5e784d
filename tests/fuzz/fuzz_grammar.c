/* libFuzzer target: the grammar compilers and the byte matcher on arbitrary input
 * (scripts/fuzz.sh grammar [seconds]).
 *
 * The first byte picks the compiler (regex, JSON Schema, choice among NUL-separated strings); the
 * rest, up to the first 0xFF, is its input, and what follows is fed to a matcher one byte at a
 * time. Invariants: a refusal always has a message; a refused byte leaves the state as it was
 * (can_end unchanged); an accepted byte never makes the state empty. Timeouts and memory limits
 * (libFuzzer's -timeout and -rss_limit_mb) catch hostile inputs that would hang or blow up. */
#include "base/error.h"
#include "tokenizer/grammar/grammar.h"

#include <stdlib.h>
#include <string.h>

static grammar *compile(int mode, const uint8_t *s, size_t n) {
    if (mode == 0) return grammar_compile_regex((const char *)s, n);
    if (mode == 1) return grammar_compile_json_schema((const char *)s, n, NULL);
    const char *choices[64];
    size_t lens[64], k = 0, start = 0;
    for (size_t i = 0; i <= n && k < 64; i++) {
        if (i == n || s[i] == 0) {
            choices[k] = (const char *)s + start;
            lens[k++] = i - start;
            start = i + 1;
        }
    }
    return grammar_compile_choice(choices, lens, k);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int mode = data[0] % 3;
    data++;
    size--;
    const uint8_t *sep = memchr(data, 0xFF, size);
    size_t n = sep ? (size_t)(sep - data) : size;
    err_clear();
    grammar *g = compile(mode, data, n);
    if (!g) {
        if (!err_msg()[0]) abort(); /* a refusal without a message */
        return 0;
    }
    grammar_matcher *m = grammar_matcher_new(g, NULL);
    for (size_t i = n + 1; i < size; i++) {
        bool before = grammar_matcher_can_end(m);
        if (grammar_matcher_advance_bytes(m, data + i, 1) != 0 &&
            grammar_matcher_can_end(m) != before)
            abort(); /* a refused byte changed the state */
    }
    grammar_matcher_free(m);
    grammar_free(g);
    return 0;
}
