/* The vocabulary trie: every ordinary token's bytes, in one byte trie laid out in preorder.
 *
 * Preorder with "one past my subtree" (end[i]) makes the walks of token_table.c a single forward
 * loop: visit i, and either go on to i + 1 (its first child, or the next node) or jump to end[i]
 * when nothing in the subtree can match. Built from the ids sorted by their bytes: each token
 * shares its longest common prefix with the previous one and adds nodes for the rest. For
 * o200k_harmony: 199,998 tokens, about 0.6 million nodes. Special tokens are not in the trie, so
 * no mask ever allows them. */
#include "tokenizer/grammar/gr_internal.h"

#include "base/error.h"
#include "base/xalloc.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *s;
    size_t n;
    int32_t id;
} tok_ref;

static int tok_cmp(const void *a, const void *b) {
    const tok_ref *x = a, *y = b;
    size_t m = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->s, y->s, m);
    if (c) return c;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

#define MAX_TOKEN_BYTES 255 /* depth is a byte; longer tokens (none in o200k) are left out */

grammar_vocab *grammar_vocab_new(const tokenizer *tok) {
    grammar_vocab *v = xcalloc(1, sizeof *v);
    v->tok = tok;
    pthread_mutex_init(&v->cache_lock, NULL);
    v->vocab_size = tokenizer_vocab_size(tok);
    v->bpe_size = tokenizer_bpe_size(tok);
    tok_ref *t = xmalloc((size_t)(v->bpe_size ? v->bpe_size : 1) * sizeof *t);
    size_t nt = 0, total = 0;
    for (int32_t id = 0; id < v->bpe_size; id++) {
        size_t n;
        const char *s = tokenizer_token_bytes(tok, id, &n);
        if (!s || n == 0 || n > MAX_TOKEN_BYTES || tokenizer_is_special(tok, id)) continue;
        t[nt++] = (tok_ref){s, n, id};
        total += n;
    }
    qsort(t, nt, sizeof *t, tok_cmp);
    v->byte = xmalloc(total + 1);
    v->depth = xmalloc(total + 1);
    v->end = xmalloc((total + 1) * sizeof *v->end);
    v->token = xmalloc((total + 1) * sizeof *v->token);
    v->dup_tok = xmalloc((nt + 1) * sizeof *v->dup_tok);
    v->dup_of = xmalloc((nt + 1) * sizeof *v->dup_of);
    uint32_t path[MAX_TOKEN_BYTES + 1]; /* path[d]: the node at depth d + 1 of the current token */
    size_t plen = 0;
    for (size_t k = 0; k < nt; k++) {
        size_t l = 0;
        if (k > 0) {
            const tok_ref *p = &t[k - 1];
            while (l < p->n && l < t[k].n && p->s[l] == t[k].s[l]) l++;
            if (l == t[k].n && l == p->n) { /* the same bytes as the previous token */
                v->dup_tok[v->ndup] = t[k].id;
                v->dup_of[v->ndup++] = v->token[path[l - 1]];
                continue;
            }
        }
        while (plen > l) v->end[path[--plen]] = v->nnodes; /* close the nodes we leave */
        for (size_t d = l; d < t[k].n; d++) {
            uint32_t i = v->nnodes++;
            v->byte[i] = (uint8_t)t[k].s[d];
            v->depth[i] = (uint8_t)(d + 1);
            v->token[i] = -1;
            path[plen++] = i;
        }
        v->token[path[plen - 1]] = t[k].id;
    }
    while (plen > 0) v->end[path[--plen]] = v->nnodes;
    free(t);
    return v;
}

void grammar_vocab_free(grammar_vocab *v) {
    if (!v) return;
    gr_cache_free(v);
    free(v->byte);
    free(v->depth);
    free(v->end);
    free(v->token);
    free(v->dup_tok);
    free(v->dup_of);
    free(v);
}

int grammar_vocab_size(const grammar_vocab *v) {
    return v->vocab_size;
}

size_t grammar_mask_words(const grammar_vocab *v) {
    return ((size_t)v->vocab_size + 31) / 32;
}
