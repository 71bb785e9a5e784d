/* The piece list a rendering produces, and its two outputs: the text form and token ids. */
#include "base/error.h"
#include "harmony/harmony_render.h"
#include "harmony/harmony_special.h"
#include "harmony/harmony_strbuf.h"

#include <stdlib.h>
#include <string.h>

void harmony_pieces_free(harmony_pieces *p) {
    free(p->v);
    free(p->text);
    memset(p, 0, sizeof *p);
}

static harmony_piece *push_piece(harmony_pieces *p) {
    if (p->len == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 32;
        p->v = xrealloc(p->v, p->cap * sizeof *p->v);
    }
    return &p->v[p->len++];
}

void harmony_pieces_add_special(harmony_pieces *p, int32_t id) {
    harmony_piece *x = push_piece(p);
    x->special = id;
    x->off = x->len = 0;
}

void harmony_pieces_add_text(harmony_pieces *p, const char *s, size_t n) {
    if (n == 0) return;
    if (p->text_len + n + 1 > p->text_cap) {
        size_t cap = p->text_cap ? p->text_cap * 2 : 256;
        while (cap < p->text_len + n + 1) cap *= 2;
        p->text = xrealloc(p->text, cap);
        p->text_cap = cap;
    }
    memcpy(p->text + p->text_len, s, n);
    harmony_piece *x = push_piece(p);
    x->special = -1;
    x->off = p->text_len;
    x->len = n;
    p->text_len += n;
    p->text[p->text_len] = 0;
}

char *harmony_pieces_to_text(const harmony_pieces *p, size_t *len_out) {
    hsb b = {0};
    hsb_reserve(&b, p->text_len + 16 * p->len);
    for (size_t i = 0; i < p->len; i++) {
        const harmony_piece *x = &p->v[i];
        if (x->special < 0) {
            hsb_addn(&b, p->text + x->off, x->len);
        } else {
            const char *name = harmony_special_name(x->special);
            if (name)
                hsb_add(&b, name);
            else
                hsb_printf(&b, "<|special_%d|>", (int)x->special);
        }
    }
    if (len_out) *len_out = b.len;
    return b.s;
}

int harmony_pieces_to_tokens(const harmony_pieces *p, harmony_encode_fn encode, void *ctx,
                             ivec *out) {
    for (size_t i = 0; i < p->len; i++) {
        const harmony_piece *x = &p->v[i];
        if (x->special >= 0) {
            ivec_push(out, x->special);
        } else if (encode(ctx, p->text + x->off, x->len, out) != 0) {
            return err_prefix("harmony: encoding text piece %zu", i);
        }
    }
    return 0;
}
