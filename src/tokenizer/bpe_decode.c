/* Decoding: ids → bytes, whole or as a stream of complete UTF-8 text. */
#include "tokenizer/bpe_internal.h"

#include "base/error.h"
#include "base/xalloc.h"
#include "tokenizer/tok_utf8.h"

#include <stdlib.h>

const char *tokenizer_token_bytes(const tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    return tok_bytes(t, id, len);
}

int tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n, char **out,
                     size_t *out_len) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return err_set("token id %d (at %zu) is outside the vocabulary [0, %d)", ids[i], i,
                           t->n_vocab);
        total += t->off[ids[i] + 1] - t->off[ids[i]];
    }
    char *buf = xmalloc(total + 1), *p = buf;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *b = tok_bytes(t, ids[i], &len);
        memcpy(p, b, len);
        p += len;
    }
    *p = 0;
    *out = buf;
    if (out_len) *out_len = total;
    return 0;
}

void tok_stream_init(tok_stream *s) {
    memset(s, 0, sizeof *s);
}

void tok_stream_free(tok_stream *s) {
    free(s->buf);
    tok_stream_init(s);
}

static void stream_reserve(tok_stream *s, size_t n) {
    if (n <= s->cap) return;
    s->cap = n < 64 ? 64 : n * 2;
    free(s->buf);
    s->buf = xmalloc(s->cap);
}

int tok_stream_push(const tokenizer *t, tok_stream *s, int32_t id, const char **text, size_t *len) {
    if (id < 0 || id >= t->n_vocab)
        return err_set("token id %d is outside the vocabulary [0, %d)", id, t->n_vocab);
    size_t n;
    const char *b = tok_bytes(t, id, &n);
    /* Work on pending bytes + this token's bytes. Each maximal ill-formed subpart costs one U+FFFD
     * (3 bytes) and is at least one byte long, so 3x the input bounds the output. */
    size_t in_len = (size_t)s->npend + n;
    unsigned char small[64], *in = in_len <= sizeof small ? small : xmalloc(in_len);
    memcpy(in, s->pend, (size_t)s->npend);
    memcpy(in + s->npend, b, n);
    stream_reserve(s, 3 * in_len + 1);
    unsigned char *o = (unsigned char *)s->buf;
    size_t i = 0, olen = 0;
    s->npend = 0;
    while (i < in_len) {
        size_t adv;
        int kind = utf8_step(in + i, in_len - i, &adv);
        if (kind == UTF8_TRUNCATED) { /* may be completed by the next token: hold it back */
            memcpy(s->pend, in + i, adv);
            s->npend = (int)adv;
            break;
        }
        if (kind == UTF8_CHAR)
            memcpy(o + olen, in + i, adv), olen += adv;
        else
            o[olen++] = 0xEF, o[olen++] = 0xBF, o[olen++] = 0xBD;
        i += adv;
    }
    o[olen] = 0;
    if (in != small) free(in);
    *text = s->buf;
    *len = olen;
    return 0;
}

void tok_stream_flush(tok_stream *s, const char **text, size_t *len) {
    stream_reserve(s, 4);
    size_t olen = 0;
    if (s->npend > 0) { /* a character cut off by the end of the stream */
        memcpy(s->buf, "\xEF\xBF\xBD", 3);
        olen = 3;
    }
    s->buf[olen] = 0;
    s->npend = 0;
    *text = s->buf;
    *len = olen;
}
