#include "tokenizer/pretokenize.h"
#include "tokenizer/pretokenize_u16.h"

#include "base/error.h"
#include "base/xalloc.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* The same pattern for PCRE2. `\s` is spelled out as Unicode's White_Space property, which is what
 * Rust's regex crate (under tiktoken's fancy_regex) means by \s; PCRE2's Unicode \s is \p{Z} plus
 * \h and \v, which adds U+180E MONGOLIAN VOWEL SEPARATOR (a format character since Unicode 6.3).
 * The rest carries over as is: PCRE2 alternation is leftmost-first and backtracking like
 * fancy_regex, (?!...) is native, and caseless matching in UTF mode folds 's' with U+017F LONG S as
 * the regex crate does. tests/test_tokenizer_reference.sh checks all of this on every assigned code
 * point. */
#define WS                                                                                         \
    "\\t-\\r "                                                                                     \
    "\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
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

/* Unicode versions. The reference classifies characters by Unicode 16.0 (the tables of tiktoken's
 * regex crate); Debian 12's PCRE2 10.42 has Unicode 14.0 tables, in which the ~9,500 letters, marks
 * and digits that Unicode 15 and 16 added (Kawi, Garay, Todhri, CJK extensions H and I, ...) are
 * unassigned, hence punctuation to the regex. Adding them to the pattern's classes as explicit
 * ranges works but makes PCRE2 test every character against the ranges one by one: a third of the
 * speed. Instead, text that contains such a character (rare) is matched on a copy in which each one
 * is replaced by a stand-in of the same kind and UTF-8 length that PCRE2 knows; the regex looks at
 * nothing but these kinds, so the pieces are the same, and their bytes are then cut from the
 * original text. With a PCRE2 of Unicode 16 or newer the stand-ins change nothing. */
static int u16_kind(uint32_t cp) {
    size_t lo = 0, hi = sizeof U16_RUNS / sizeof U16_RUNS[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < U16_RUNS[mid].lo)
            hi = mid;
        else if (cp > U16_RUNS[mid].hi)
            lo = mid + 1;
        else
            return (int)U16_RUNS[mid].kind;
    }
    return -1;
}

static void put_utf8(unsigned char *p, uint32_t cp, size_t n) {
    if (n == 3) {
        p[0] = (unsigned char)(0xE0 | cp >> 12), p[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        p[2] = (unsigned char)(0x80 | (cp & 0x3F));
    } else {
        p[0] = (unsigned char)(0xF0 | cp >> 18), p[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
        p[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F)), p[3] = (unsigned char)(0x80 | (cp & 0x3F));
    }
}

unsigned char *pretok_stand_ins(const unsigned char *s, size_t len) {
    unsigned char *copy = NULL;
    for (size_t i = 0; i < len;) {
        /* Every such character is U+0800 or above: only lead bytes E0..F4 can start one. Skip eight
         * bytes at a time while none of them has its top three bits set. */
        while (i + 8 <= len) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if ((w & w << 1 & w << 2) & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= len) break;
        unsigned b = s[i];
        if (b < 0xE0) {
            i++;
            continue;
        }
        size_t n = b < 0xF0 ? 3 : 4;
        if (i + n > len) break; /* cannot happen in valid UTF-8 */
        uint32_t cp = n == 3 ? (b & 0x0Fu) << 12 | (s[i + 1] & 0x3Fu) << 6 | (s[i + 2] & 0x3Fu)
                             : (b & 0x07u) << 18 | (s[i + 1] & 0x3Fu) << 12 |
                                   (s[i + 2] & 0x3Fu) << 6 | (s[i + 3] & 0x3Fu);
        int kind = u16_kind(cp);
        if (kind >= 0) {
            if (!copy) {
                copy = xmalloc(len);
                memcpy(copy, s, len);
            }
            put_utf8(copy + i, U16_STAND_IN[kind][n - 3], n);
        }
        i += n;
    }
    return copy;
}

int pretok_init(pretok *p) {
    int code;
    PCRE2_SIZE where;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)PCRE_PATTERN, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP, &code, &where, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return err_set("pre-tokeniser regex: %s at offset %zu", (const char *)msg, (size_t)where);
    }
    /* Without JIT (a PCRE2 built without it) matching still works through the interpreter, slower.
     */
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
        /* The default JIT stack (32 KiB on the machine stack) has sufficed for every input tried,
         * but a pattern change could need more: retry once with a large heap stack rather than
         * fail. */
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
