/* Encoding: UTF-8 repair, the pre-tokeniser loop, and special tokens. */
#include "tokenizer/bpe_internal.h"

#include "base/error.h"
#include "base/xalloc.h"
#include "tokenizer/tok_utf8.h"

#include <stdlib.h>

/* Encodes valid UTF-8 s[0..len) with no special tokens; the regex runs on re_s, which is s or its
 * copy with stand-ins (pretokenize.h). The regex sees exactly this span, so look-ahead (\s+(?!\S))
 * stops at its end: text before a special token is encoded as if the text ended there, as tiktoken
 * does. */
static int encode_span(const tokenizer *t, pretok_matcher *m, merge_scratch *sc,
                       const unsigned char *s, const unsigned char *re_s, size_t len, ivec *out) {
    size_t pos = 0, start, end;
    while (pos < len) {
        int rc = pretok_next(m, re_s, len, pos, &start, &end);
        if (rc < 0) return -1;
        if (rc == 0) break;
        /* Every character starts some alternative, so a match always begins at pos and is never
         * empty; were it otherwise, unmatched text would be skipped, as tiktoken skips it. */
        if (end <= start) {
            pos = start + 1;
            continue;
        }
        bpe_encode_piece(t, s + start, end - start, out, sc);
        pos = end;
    }
    return 0;
}

/* The next special token in s[from..len): its start in *at, its length in *n; -1 when none. Special
 * names are <|x|> with no '|' inside x (checked at load), so the only candidate at a "<|" is the
 * text up to the next "|>", and scanning "<|" positions left to right finds the leftmost match. */
static int32_t next_special(const tokenizer *t, const unsigned char *s, size_t len, size_t from,
                            size_t *at, size_t *n) {
    for (size_t i = from; i + 4 <= len;) {
        const unsigned char *lt = memchr(s + i, '<', len - i - 3);
        if (!lt) return -1;
        i = (size_t)(lt - s);
        if (s[i + 1] == '|') {
            const unsigned char *bar = memchr(s + i + 2, '|', len - i - 2);
            if (!bar) return -1; /* no '|' left: no special token can end anywhere after this */
            size_t j = (size_t)(bar - s);
            if (j + 1 < len && s[j + 1] == '>') {
                int32_t id = special_lookup(t, (const char *)s + i, j + 2 - i);
                if (id >= 0) {
                    *at = i, *n = j + 2 - i;
                    return id;
                }
            }
        }
        i++;
    }
    return -1;
}

static int encode(const tokenizer *t, const char *text, size_t len, bool specials, ivec *out) {
    /* Piece offsets are 32-bit in the merge heap; repair can triple the length. */
    if (len > INT32_MAX / 3)
        return err_set("text of %zu bytes is too long to tokenize at once", len);
    const unsigned char *s = (const unsigned char *)text;
    unsigned char *fixed = NULL;
    if (utf8_valid_prefix(s, len) != len) {
        fixed = xmalloc(3 * len + 1);
        len = utf8_repair(s, len, fixed);
        s = fixed;
    }
    unsigned char *stand_ins = pretok_stand_ins(s, len);
    const unsigned char *re_s = stand_ins ? stand_ins : s;
    pretok_matcher *m = pretok_matcher_new(&t->re);
    merge_scratch sc = {0};
    int rc = 0;
    size_t pos = 0;
    while (rc == 0 && pos < len) {
        size_t at = len, n = 0;
        int32_t id = specials ? next_special(t, s, len, pos, &at, &n) : -1;
        if (id < 0) at = len;
        rc = encode_span(t, m, &sc, s + pos, re_s + pos, at - pos, out);
        if (id >= 0) ivec_push(out, id);
        pos = at + n;
    }
    free(sc.buf);
    pretok_matcher_free(m);
    free(stand_ins);
    free(fixed);
    return rc;
}

int tokenizer_encode_ordinary(const tokenizer *t, const char *text, size_t len, ivec *out) {
    return encode(t, text, len, false, out);
}

int tokenizer_encode_with_specials(const tokenizer *t, const char *text, size_t len, ivec *out) {
    return encode(t, text, len, true, out);
}

int tokenizer_encode_ordinary_cb(void *ctx, const char *text, size_t len, ivec *out) {
    return encode(ctx, text, len, false, out);
}
