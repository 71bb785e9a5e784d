#include "harmony/harmony_utf8.h"

int harmony_utf8_step(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    /* Lead byte: how many continuation bytes follow, and the allowed range of the first one. The
     * narrowed ranges reject overlong forms (E0, F0), UTF-16 surrogates (ED) and values past
     * U+10FFFF (F4); C0, C1 and F5..FF can never start a character. */
    int need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c == 0xE0)
        need = 2, lo = 0xA0;
    else if (c == 0xED)
        need = 2, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF)
        need = 2;
    else if (c == 0xF0)
        need = 3, lo = 0x90;
    else if (c == 0xF4)
        need = 3, hi = 0x8F;
    else if (c >= 0xF1 && c <= 0xF3)
        need = 3;
    else
        return -1;
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n)
            return 0; /* valid so far, but the character continues past the buffer */
        unsigned b = s[i];
        unsigned l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (b < l || b > h) return -i; /* the i bytes before this one form the maximal subpart */
    }
    return need + 1;
}

size_t harmony_utf8_clean(const char *in, size_t n, bool final, hsb *out) {
    if (n == 0) return 0; /* in may be NULL then */
    const unsigned char *s = (const unsigned char *)in;
    size_t i = 0, run = 0; /* run: start of the pending stretch of valid bytes, copied in one go */
    while (i < n) {
        int k = harmony_utf8_step(s + i, n - i);
        if (k > 0) {
            i += (size_t)k;
            continue;
        }
        hsb_addn(out, in + run, i - run);
        if (k == 0 && !final) return i; /* keep the unfinished character for later */
        hsb_add(out, HARMONY_REPLACEMENT);
        i += k == 0 ? n - i : (size_t)-k;
        run = i;
    }
    hsb_addn(out, in + run, i - run);
    return n;
}

bool harmony_utf8_valid(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        int k = harmony_utf8_step((const unsigned char *)s + i, n - i);
        if (k <= 0) return false;
        i += (size_t)k;
    }
    return true;
}
