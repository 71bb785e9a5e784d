#include "tokenizer/pretokenize.h"

#include "base/error.h"
#include "base/xalloc.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdio.h>
#include <stdlib.h>

const char O200K_PAT_STR[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|\\p{N}{1,3}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*"
    "|\\s*[\\r\\n]+"
    "|\\s+(?!\\S)"
    "|\\s+";

/* The same pattern for PCRE2. Two things differ from the text above, both to match the reference:
 *  - `\s` is spelled out as Unicode's White_Space property, which is what Rust's regex crate (under
 *    tiktoken's fancy_regex) means by \s. PCRE2's Unicode \s is \p{Z} plus \h and \v, which adds
 *    U+180E MONGOLIAN VOWEL SEPARATOR (a format character since Unicode 6.3).
 *  - nothing else: PCRE2 alternation is leftmost-first and backtracking like fancy_regex, (?!...) is
 *    native, and caseless matching in UTF mode folds 's' with U+017F LONG S as the regex crate does. */
#define WS "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
static const char PCRE_PATTERN[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|\\p{N}{1,3}"
    "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n/]*"
    "|[" WS "]*[\\r\\n]+"
    "|[" WS "]+(?![^" WS "])"
    "|[" WS "]+";

int pretok_init(pretok *p) {
    int code;
    PCRE2_SIZE where;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)PCRE_PATTERN, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                   &code, &where, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return err_set("pre-tokeniser regex: %s at offset %zu", (const char *)msg, (size_t)where);
    }
    /* Without JIT (a PCRE2 built without it) matching still works through the interpreter, slower. */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    p->code = re;
    return 0;
}

void pretok_free(pretok *p) {
    pcre2_code_free((pcre2_code *)p->code);
    p->code = NULL;
}

struct pretok_matcher {
    const pcre2_code *code;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *stack;
};

pretok_matcher *pretok_matcher_new(const pretok *p) {
    pretok_matcher *m = xcalloc(1, sizeof *m);
    m->code = p->code;
    m->md = pcre2_match_data_create(1, NULL);
    m->mctx = pcre2_match_context_create(NULL);
    if (!m->md || !m->mctx) {
        fprintf(stderr, "gptoss: out of memory (PCRE2 match data)\n");
        abort();
    }
    return m;
}

void pretok_matcher_free(pretok_matcher *m) {
    if (!m) return;
    pcre2_match_data_free(m->md);
    pcre2_match_context_free(m->mctx);
    if (m->stack) pcre2_jit_stack_free(m->stack);
    free(m);
}

int pretok_next(pretok_matcher *m, const unsigned char *s, size_t len, size_t pos, size_t *start,
                size_t *end) {
    for (;;) {
        int rc = pcre2_match(m->code, s, len, pos, PCRE2_NO_UTF_CHECK, m->md, m->mctx);
        if (rc > 0) {
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
            *start = ov[0], *end = ov[1];
            return 1;
        }
        if (rc == PCRE2_ERROR_NOMATCH) return 0;
        /* The default JIT stack (32 KiB on the machine stack) has sufficed for every input tried, but a
         * pattern change could need more: retry once with a large heap stack rather than fail. */
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !m->stack) {
            m->stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, NULL);
            if (!m->stack) return err_set("pre-tokeniser: cannot allocate a JIT stack");
            pcre2_jit_stack_assign(m->mctx, NULL, m->stack);
            continue;
        }
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        return err_set("pre-tokeniser: %s at byte %zu", (const char *)msg, pos);
    }
}
