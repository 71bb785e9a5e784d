#include "tokenizer/tok_utf8.h"

#include <stdint.h>
#include <string.h>

int utf8_step(const unsigned char *s, size_t n, size_t *adv) {
    unsigned b = s[0];
    if (b < 0x80) {
        *adv = 1;
        return UTF8_CHAR;
    }
    /* Lead byte → total length and the range of the second byte (Unicode Table 3-7). The narrower
     * second ranges exclude overlong forms (E0, F0), surrogates (ED) and code points above U+10FFFF
     * (F4). */
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF)
        need = 2;
    else if (b >= 0xE0 && b <= 0xEF) {
        need = 3;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 4;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F;
    } else {
        *adv = 1; /* 80..C1, F5..FF never start a character */
        return UTF8_INVALID;
    }
    for (size_t k = 1; k < need; k++) {
        if (k >= n) {
            *adv = k;
            return UTF8_TRUNCATED;
        }
        unsigned c = s[k];
        if (k > 1) lo = 0x80, hi = 0xBF;
        if (c < lo || c > hi) {
            *adv = k; /* the maximal subpart ends before the byte that broke it */
            return UTF8_INVALID;
        }
    }
    *adv = need;
    return UTF8_CHAR;
}

size_t utf8_valid_prefix(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        /* Most text is ASCII: skip it eight bytes at a time. */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t adv;
        if (utf8_step(s + i, n - i, &adv) != UTF8_CHAR) return i;
        i += adv;
    }
    return n;
}

size_t utf8_repair(const unsigned char *s, size_t n, unsigned char *out) {
    size_t i = 0, o = 0;
    while (i < n) {
        size_t adv;
        if (utf8_step(s + i, n - i, &adv) == UTF8_CHAR) {
            memcpy(out + o, s + i, adv);
            o += adv;
        } else {
            out[o++] = 0xEF, out[o++] = 0xBF, out[o++] = 0xBD;
        }
        i += adv;
    }
    return o;
}
