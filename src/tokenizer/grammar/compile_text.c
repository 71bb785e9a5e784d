/* The two constraints that are not JSON: a regular expression over the whole output (vLLM's
 * guided_regex: the output must match it entirely) and a choice among fixed strings (guided_choice:
 * the output is exactly one of them). */
#include "base/error.h"
#include "tokenizer/grammar/json_internal.h"
#include "tokenizer/grammar/regex.h"

grammar *grammar_compile_regex(const char *pattern, size_t len) {
    gbuild b;
    gb_init(&b);
    uint32_t r = gb_rule(&b, "regex");
    grammar *g = NULL;
    if (rx_build(&b, b.rule_start[r], b.rule_end[r], pattern, len, 0, 0) == 0) g = gb_finish(&b, r);
    if (!g && !b.failed) err_prefix("regex");
    gb_free(&b);
    return g;
}

grammar *grammar_compile_choice(const char *const *choices, const size_t *lens, size_t n) {
    if (n == 0) {
        err_set("choice: no strings to choose from");
        return NULL;
    }
    jctx c;
    jc_init(&c, NULL);
    uint32_t r = gb_rule(&c.b, "choice");
    grammar *g = NULL;
    if (jc_literals(&c, c.b.rule_start[r], c.b.rule_end[r], choices, lens, n, "choice") == 0)
        g = gb_finish(&c.b, r);
    jc_free(&c);
    return g;
}
