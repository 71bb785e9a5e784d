/* Code point sets and their UTF-8 byte paths (see gr_charset.h). */
#include "tokenizer/grammar/gr_charset.h"

#include "base/xalloc.h"

#include <stdlib.h>
#include <string.h>

void cpset_add(cpset *s, uint32_t lo, uint32_t hi) {
    if (lo > hi) return;
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 8;
        s->r = xrealloc(s->r, s->cap * sizeof *s->r);
    }
    s->r[s->n++] = (cp_range){lo, hi};
}

void cpset_add_set(cpset *s, const cpset *o) {
    for (size_t i = 0; i < o->n; i++) cpset_add(s, o->r[i].lo, o->r[i].hi);
}

static int range_cmp(const void *a, const void *b) {
    const cp_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

void cpset_normalize(cpset *s) {
    if (s->n < 2) return;
    qsort(s->r, s->n, sizeof *s->r, range_cmp);
    size_t k = 0;
    for (size_t i = 1; i < s->n; i++) {
        if (s->r[i].lo <= s->r[k].hi + 1) {
            if (s->r[i].hi > s->r[k].hi) s->r[k].hi = s->r[i].hi;
        } else {
            s->r[++k] = s->r[i];
        }
    }
    s->n = k + 1;
}

void cpset_negate(cpset *s) {
    cpset_normalize(s);
    cpset o = {0};
    uint32_t next = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (s->r[i].lo > next) cpset_add(&o, next, s->r[i].lo - 1);
        next = s->r[i].hi + 1;
    }
    if (next <= CP_MAX) cpset_add(&o, next, CP_MAX);
    free(s->r);
    *s = o;
}

void cpset_free(cpset *s) {
    free(s->r);
    memset(s, 0, sizeof *s);
}

void cpset_add_digit(cpset *s) {
    cpset_add(s, '0', '9');
}

void cpset_add_word(cpset *s) {
    cpset_add(s, '0', '9');
    cpset_add(s, 'A', 'Z');
    cpset_add(s, '_', '_');
    cpset_add(s, 'a', 'z');
}

/* ECMAScript WhiteSpace and LineTerminator (what \s means there). */
void cpset_add_space(cpset *s) {
    static const uint32_t r[][2] = {
        {0x09, 0x0D},     {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
        {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) cpset_add(s, r[i][0], r[i][1]);
}

static int utf8_len(uint32_t cp) {
    return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

static void utf8_put(uint32_t cp, uint8_t *o) {
    switch (utf8_len(cp)) {
    case 1:
        o[0] = (uint8_t)cp;
        break;
    case 2:
        o[0] = (uint8_t)(0xC0 | cp >> 6);
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        break;
    case 3:
        o[0] = (uint8_t)(0xE0 | cp >> 12);
        o[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        break;
    default:
        o[0] = (uint8_t)(0xF0 | cp >> 18);
        o[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    }
}

int utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    uint32_t c = s[0];
    int len = c < 0x80                 ? 1
              : c >= 0xC2 && c <= 0xDF ? 2
              : c >= 0xE0 && c <= 0xEF ? 3
              : c >= 0xF0 && c <= 0xF4 ? 4
                                       : 0;
    if (len == 0 || (size_t)len > n) return 0;
    if (len == 1) {
        *cp = c;
        return 1;
    }
    c &= 0x3F >> (len - 1);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        c = c << 6 | (s[i] & 0x3F);
    }
    if (utf8_len(c) != len || (c >= 0xD800 && c <= 0xDFFF) || c > CP_MAX) return 0;
    *cp = c;
    return len;
}

/* One run [lo, hi] of equal-length code points whose encodings are ranges byte by byte. */
static void emit_run(gbuild *b, uint32_t from, uint32_t lo, uint32_t hi, uint32_t to) {
    uint8_t a[4], z[4];
    utf8_put(lo, a);
    utf8_put(hi, z);
    int n = utf8_len(lo);
    uint32_t cur = from, rule = b->state_rule[from];
    for (int i = 0; i < n && !b->failed; i++) {
        uint32_t next = i + 1 == n ? to : gb_state(b, rule);
        gb_bytes(b, cur, a[i], z[i], next);
        cur = next;
    }
}

/* Splits [lo, hi] (one encoded length) until each piece is a run: whenever lo and hi differ above
 * the last i continuation bytes, the piece must start at a block of 64^i and end at one's end. */
static void emit_split(gbuild *b, uint32_t from, uint32_t lo, uint32_t hi, uint32_t to, int depth) {
    if (b->failed || depth > 16) return;
    int n = utf8_len(lo);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) {
                emit_split(b, from, lo, lo | m, to, depth + 1);
                emit_split(b, from, (lo | m) + 1, hi, to, depth + 1);
                return;
            }
            if ((hi & m) != m) {
                emit_split(b, from, lo, (hi & ~m) - 1, to, depth + 1);
                emit_split(b, from, hi & ~m, hi, to, depth + 1);
                return;
            }
        }
    }
    emit_run(b, from, lo, hi, to);
}

static void emit_utf8(gbuild *b, uint32_t from, uint32_t lo, uint32_t hi, uint32_t to) {
    static const uint32_t bounds[][2] = {
        {0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xD7FF}, {0xE000, 0xFFFF}, {0x10000, CP_MAX}};
    for (size_t k = 0; k < 5; k++) {
        uint32_t a = lo > bounds[k][0] ? lo : bounds[k][0];
        uint32_t z = hi < bounds[k][1] ? hi : bounds[k][1];
        if (a <= z) emit_split(b, from, a, z, to, 0);
    }
}

static int needs_escape(uint32_t cp) {
    return cp < 0x20 || cp == '"' || cp == '\\';
}

static void emit_escape(gbuild *b, uint32_t from, uint32_t cp, uint32_t to) {
    char e[8];
    const char *shortform = NULL;
    switch (cp) {
    case '"':
        shortform = "\\\"";
        break;
    case '\\':
        shortform = "\\\\";
        break;
    case '\b':
        shortform = "\\b";
        break;
    case '\t':
        shortform = "\\t";
        break;
    case '\n':
        shortform = "\\n";
        break;
    case '\f':
        shortform = "\\f";
        break;
    case '\r':
        shortform = "\\r";
        break;
    }
    if (shortform) {
        gb_literal(b, from, shortform, 2, to);
        return;
    }
    static const char hex[] = "0123456789abcdef";
    memcpy(e, "\\u00", 4);
    e[4] = hex[cp >> 4];
    e[5] = hex[cp & 15];
    gb_literal(b, from, e, 6, to);
}

void gb_charset(gbuild *b, uint32_t from, const cpset *s, int json, uint32_t to) {
    for (size_t i = 0; i < s->n && !b->failed; i++) {
        uint32_t lo = s->r[i].lo, hi = s->r[i].hi > CP_MAX ? CP_MAX : s->r[i].hi;
        if (!json) {
            emit_utf8(b, from, lo, hi, to);
            continue;
        }
        /* Split out the characters a JSON string spells as escapes. */
        uint32_t a = lo;
        while (a <= hi && !b->failed) {
            if (needs_escape(a)) {
                emit_escape(b, from, a, to);
                a++;
                continue;
            }
            uint32_t z = a;
            while (z < hi && !needs_escape(z + 1)) z++;
            emit_utf8(b, from, a, z, to);
            a = z + 1;
        }
    }
}
