/* Regular expressions → automaton fragments (the ECMAScript subset JSON Schema patterns use).
 *
 * Supported: literals (UTF-8), '.', classes [a-z] [^...] with escapes, \d \D \w \W \s \S, escapes
 * \n \r \t \f \v \0 \xHH \uHHHH \u{H...} and escaped punctuation, groups ( ) (?: ) (?<name> ),
 * alternation, quantifiers * + ? {n} {n,} {n,m} (lazy forms too: they match the same strings), '^'
 * at the very start and '$' at the very end. Refused, naming the construct and its offset:
 * backreferences, lookaround, \b \B, \p{...}, anchors elsewhere.
 *
 * The parser builds the NFA directly, recursive descent; a quantified atom is parsed again for each
 * copy it needs (so {n,m} costs n..m copies, bounded by GRAMMAR_MAX_REPEAT and the state limit).
 * There is no backtracking anywhere: a matcher runs the NFA as a set of states, so "catastrophic"
 * patterns like (a+)+b cost what any pattern of their size costs. */
#include "tokenizer/grammar/regex.h"

#include "tokenizer/grammar/gr_charset.h"

#include <stdlib.h>
#include <string.h>

#define RX_MAX_NESTING 64

typedef struct {
    gbuild *b;
    const uint8_t *p;
    size_t n, pos;
    uint32_t rule;
    int json, depth;
} rx;

static int rx_err(rx *x, const char *what) {
    return gb_fail(x->b, "regex: %s at offset %zu", what, x->pos);
}

static int p_alt(rx *x, uint32_t from, uint32_t to);

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_hex(rx *x, int ndig, uint32_t *cp) {
    uint32_t v = 0;
    for (int i = 0; i < ndig; i++) {
        int h = x->pos < x->n ? hexval(x->p[x->pos]) : -1;
        if (h < 0) return rx_err(x, "bad hexadecimal escape");
        v = v << 4 | (uint32_t)h;
        x->pos++;
    }
    *cp = v;
    return 0;
}

/* One escape after '\' (x->pos at the letter), as a set. in_class: inside [...] (\b is backspace
 * there). */
static int p_escape(rx *x, cpset *s, int in_class) {
    if (x->pos >= x->n) return rx_err(x, "pattern ends with '\\'");
    int c = x->p[x->pos++];
    uint32_t cp;
    cpset t = {0};
    switch (c) {
    case 'd':
        cpset_add_digit(s);
        return 0;
    case 'w':
        cpset_add_word(s);
        return 0;
    case 's':
        cpset_add_space(s);
        return 0;
    case 'D':
    case 'W':
    case 'S':
        if (c == 'D') cpset_add_digit(&t);
        if (c == 'W') cpset_add_word(&t);
        if (c == 'S') cpset_add_space(&t);
        cpset_negate(&t);
        cpset_add_set(s, &t);
        cpset_free(&t);
        return 0;
    case 'n':
        cpset_add(s, '\n', '\n');
        return 0;
    case 'r':
        cpset_add(s, '\r', '\r');
        return 0;
    case 't':
        cpset_add(s, '\t', '\t');
        return 0;
    case 'f':
        cpset_add(s, '\f', '\f');
        return 0;
    case 'v':
        cpset_add(s, '\v', '\v');
        return 0;
    case '0':
        cpset_add(s, 0, 0);
        return 0;
    case 'x':
        if (read_hex(x, 2, &cp)) return -1;
        cpset_add(s, cp, cp);
        return 0;
    case 'u':
        if (x->pos < x->n && x->p[x->pos] == '{') {
            x->pos++;
            cp = 0;
            int nd = 0;
            while (x->pos < x->n && x->p[x->pos] != '}' && nd < 7) {
                int h = hexval(x->p[x->pos++]);
                if (h < 0) return rx_err(x, "bad \\u{...} escape");
                cp = cp << 4 | (uint32_t)h;
                nd++;
            }
            if (x->pos >= x->n || x->p[x->pos] != '}' || nd == 0 || cp > CP_MAX)
                return rx_err(x, "bad \\u{...} escape");
            x->pos++;
        } else if (read_hex(x, 4, &cp)) {
            return -1;
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) return rx_err(x, "surrogate escapes are not supported");
        cpset_add(s, cp, cp);
        return 0;
    case 'b':
        if (in_class) {
            cpset_add(s, '\b', '\b');
            return 0;
        }
        return rx_err(x, "word boundaries (\\b) are not supported");
    case 'B':
        return rx_err(x, "word boundaries (\\B) are not supported");
    case 'p':
    case 'P':
        return rx_err(x, "Unicode property classes (\\p) are not supported");
    case 'k':
        return rx_err(x, "backreferences are not supported");
    default:
        if (c >= '1' && c <= '9') return rx_err(x, "backreferences are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return rx_err(x, "unknown escape");
        /* Escaped punctuation (or any other character) stands for itself. */
        x->pos--;
        {
            int len = utf8_decode(x->p + x->pos, x->n - x->pos, &cp);
            if (!len) return rx_err(x, "invalid UTF-8");
            x->pos += (size_t)len;
        }
        cpset_add(s, cp, cp);
        return 0;
    }
}

/* One class member (a character or an escape); *single is its code point when it is one. */
static int p_class_atom(rx *x, cpset *s, int64_t *single) {
    *single = -1;
    uint32_t cp;
    if (x->p[x->pos] == '\\') {
        x->pos++;
        cpset one = {0};
        if (p_escape(x, &one, 1)) {
            cpset_free(&one);
            return -1;
        }
        if (one.n == 1 && one.r[0].lo == one.r[0].hi) *single = one.r[0].lo;
        cpset_add_set(s, &one);
        cpset_free(&one);
        return 0;
    }
    int len = utf8_decode(x->p + x->pos, x->n - x->pos, &cp);
    if (!len) return rx_err(x, "invalid UTF-8");
    x->pos += (size_t)len;
    cpset_add(s, cp, cp);
    *single = cp;
    return 0;
}

static int p_class(rx *x, cpset *s) {
    int neg = 0;
    if (x->pos < x->n && x->p[x->pos] == '^') {
        neg = 1;
        x->pos++;
    }
    while (x->pos < x->n && x->p[x->pos] != ']') {
        int64_t lo, hi;
        if (p_class_atom(x, s, &lo)) return -1;
        if (x->pos + 1 < x->n && x->p[x->pos] == '-' && x->p[x->pos + 1] != ']') {
            x->pos++;
            if (p_class_atom(x, s, &hi)) return -1;
            if (lo < 0 || hi < 0) return rx_err(x, "a class range needs single characters");
            if (lo > hi) return rx_err(x, "class range out of order");
            cpset_add(s, (uint32_t)lo, (uint32_t)hi);
        }
    }
    if (x->pos >= x->n) return rx_err(x, "unterminated character class");
    x->pos++;
    if (neg) cpset_negate(s);
    cpset_normalize(s);
    return 0;
}

/* One atom from `from` to `to`. */
static int p_atom(rx *x, uint32_t from, uint32_t to) {
    gbuild *b = x->b;
    int c = x->p[x->pos];
    cpset s = {0};
    int rc = 0;
    if (c == '(') {
        x->pos++;
        if (x->pos < x->n && x->p[x->pos] == '?') {
            if (x->pos + 1 < x->n && x->p[x->pos + 1] == ':') {
                x->pos += 2;
            } else if (x->pos + 2 < x->n && x->p[x->pos + 1] == '<' && x->p[x->pos + 2] != '=' &&
                       x->p[x->pos + 2] != '!') {
                while (x->pos < x->n && x->p[x->pos] != '>') x->pos++;
                if (x->pos >= x->n) return rx_err(x, "unterminated group name");
                x->pos++;
            } else {
                return rx_err(x, "lookaround and group flags are not supported");
            }
        }
        if (++x->depth > RX_MAX_NESTING) return rx_err(x, "groups nested too deeply");
        if (p_alt(x, from, to)) return -1;
        x->depth--;
        if (x->pos >= x->n || x->p[x->pos] != ')') return rx_err(x, "missing ')'");
        x->pos++;
        return 0;
    }
    if (c == '[') {
        x->pos++;
        rc = p_class(x, &s);
    } else if (c == '.') {
        x->pos++;
        cpset_add(&s, '\n', '\n');
        cpset_add(&s, '\r', '\r');
        cpset_add(&s, 0x2028, 0x2029);
        cpset_negate(&s);
    } else if (c == '\\') {
        x->pos++;
        rc = p_escape(x, &s, 0);
    } else if (c == '^' || c == '$') {
        rc = rx_err(x, "anchors are only supported at the start and end of the pattern");
    } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        rc = rx_err(x, "nothing to repeat");
    } else {
        uint32_t cp;
        int len = utf8_decode(x->p + x->pos, x->n - x->pos, &cp);
        if (!len) {
            rc = rx_err(x, "invalid UTF-8");
        } else {
            x->pos += (size_t)len;
            cpset_add(&s, cp, cp);
        }
    }
    if (!rc) {
        cpset_normalize(&s);
        gb_charset(b, from, &s, x->json, to);
    }
    cpset_free(&s);
    return rc;
}

static int read_int(rx *x, int *v) {
    if (x->pos >= x->n || x->p[x->pos] < '0' || x->p[x->pos] > '9') return -1;
    long n = 0;
    while (x->pos < x->n && x->p[x->pos] >= '0' && x->p[x->pos] <= '9') {
        n = n * 10 + (x->p[x->pos++] - '0');
        if (n > GRAMMAR_MAX_REPEAT) return rx_err(x, "repetition count over the limit"), -2;
    }
    *v = (int)n;
    return 0;
}

/* A quantifier at x->pos: *lo, *hi (-1: unbounded); 0 when there is none, 1 when read. */
static int p_quant(rx *x, int *lo, int *hi) {
    if (x->pos >= x->n) return 0;
    int c = x->p[x->pos];
    if (c == '*' || c == '+' || c == '?') {
        x->pos++;
        *lo = c == '+';
        *hi = c == '?' ? 1 : -1;
    } else if (c == '{') {
        size_t save = x->pos++;
        int r = read_int(x, lo);
        if (r == -2) return -1;
        if (r < 0) { /* not a quantifier: ECMAScript reads a literal '{' */
            x->pos = save;
            return 0;
        }
        *hi = *lo;
        if (x->pos < x->n && x->p[x->pos] == ',') {
            x->pos++;
            *hi = -1;
            if (x->pos < x->n && x->p[x->pos] != '}') {
                r = read_int(x, hi);
                if (r) return r == -2 ? -1 : rx_err(x, "bad {n,m} quantifier");
            }
        }
        if (x->pos >= x->n || x->p[x->pos] != '}') return rx_err(x, "bad {n,m} quantifier");
        x->pos++;
        if (*hi >= 0 && *hi < *lo) return rx_err(x, "{n,m} with m < n");
    } else {
        return 0;
    }
    if (x->pos < x->n && x->p[x->pos] == '?') x->pos++; /* lazy: same language */
    return 1;
}

/* An atom with its quantifier. Copies past the first are parsed again from the atom's start. */
static int p_repeat(rx *x, uint32_t from, uint32_t to) {
    gbuild *b = x->b;
    size_t start = x->pos;
    uint32_t s1 = gb_state(b, x->rule), e1 = gb_state(b, x->rule);
    if (p_atom(x, s1, e1)) return -1;
    size_t end = x->pos;
    int lo, hi;
    int q = p_quant(x, &lo, &hi);
    if (q < 0) return -1;
    if (q == 0) {
        gb_eps(b, from, s1);
        gb_eps(b, e1, to);
        return 0;
    }
    size_t after = x->pos;
    if (x->pos < x->n && (x->p[x->pos] == '*' || x->p[x->pos] == '+' || x->p[x->pos] == '?'))
        return rx_err(x, "nothing to repeat");
    int copies = hi < 0 ? (lo > 0 ? lo : 1) : hi;
    uint32_t cur = from;
    for (int k = 0; k < copies && !b->failed; k++) {
        uint32_t s = s1, e = e1;
        if (k > 0) {
            s = gb_state(b, x->rule);
            e = gb_state(b, x->rule);
            x->pos = start;
            if (p_atom(x, s, e)) return -1;
            x->pos = end;
        }
        gb_eps(b, cur, s);
        if (hi < 0 && k == copies - 1) {
            /* The last copy loops: x{n,} is n-1 copies then x+; x* is x+ made optional. */
            gb_eps(b, e, s);
            if (lo == 0) gb_eps(b, cur, to);
        } else if (k >= lo) {
            gb_eps(b, cur, to); /* an optional copy may be skipped (and all after it) */
        }
        cur = e;
    }
    if (copies == 0)
        gb_eps(b, from, to);
    else
        gb_eps(b, cur, to);
    x->pos = after;
    return b->failed ? -1 : 0;
}

static int p_concat(rx *x, uint32_t from, uint32_t to) {
    uint32_t cur = from;
    while (x->pos < x->n && x->p[x->pos] != '|' && x->p[x->pos] != ')') {
        if (x->b->failed) return -1;
        uint32_t next = gb_state(x->b, x->rule);
        if (p_repeat(x, cur, next)) return -1;
        cur = next;
    }
    gb_eps(x->b, cur, to);
    return 0;
}

static int p_alt(rx *x, uint32_t from, uint32_t to) {
    for (;;) {
        if (p_concat(x, from, to)) return -1;
        if (x->pos < x->n && x->p[x->pos] == '|') {
            x->pos++;
            continue;
        }
        return 0;
    }
}

int rx_build(gbuild *b, uint32_t from, uint32_t to, const char *pattern, size_t len, int json,
             int search) {
    if (len > GRAMMAR_MAX_REGEX_BYTES)
        return gb_fail(b, "regex: pattern of %zu bytes is over the limit of %d", len,
                       GRAMMAR_MAX_REGEX_BYTES);
    rx x = {
        .b = b, .p = (const uint8_t *)pattern, .n = len, .rule = b->state_rule[from], .json = json};
    int head = len > 0 && pattern[0] == '^';
    int tail =
        len > (size_t)head && pattern[len - 1] == '$' && (len < 2 || pattern[len - 2] != '\\');
    if (head) x.pos = 1;
    if (tail) x.n = len - 1;
    /* A JSON Schema pattern matches anywhere in the string unless anchored: anything may come
     * before and after the match. */
    cpset any = {0};
    cpset_add(&any, 0, CP_MAX);
    uint32_t a = from, z = to;
    if (search && !head) {
        a = gb_state(b, x.rule);
        gb_eps(b, from, a);
        gb_charset(b, a, &any, json, a);
    }
    if (search && !tail) {
        z = gb_state(b, x.rule);
        gb_eps(b, z, to);
        gb_charset(b, z, &any, json, z);
    }
    cpset_free(&any);
    if (p_alt(&x, a, z)) return -1;
    if (x.pos != x.n) return rx_err(&x, "unbalanced ')'");
    return b->failed ? -1 : 0;
}
