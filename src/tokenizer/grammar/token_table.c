/* Building token tables (see token_table.h). */
#include "tokenizer/grammar/token_table.h"

#include "base/xalloc.h"
#include "tokenizer/grammar/gr_stack.h"

#include <stdlib.h>
#include <string.h>

#define BIG_SUBTREE 64 /* pop points with more nodes below are kept as vocab trie references */
#define MAX_DEPTH   256

typedef struct {
    const char *s; /* the token's bytes after the pop point */
    uint32_t n;
    int32_t tok;
} suffix_ref;

typedef struct {
    suffix_ref *sr;
    size_t nsr, cap;
} suffix_list;

static void suffix_add(suffix_list *l, const grammar_vocab *v, int32_t tok, uint32_t off) {
    if (l->nsr == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->sr = xrealloc(l->sr, l->cap * sizeof *l->sr);
    }
    size_t n;
    const char *s = tokenizer_token_bytes(v->tok, tok, &n);
    l->sr[l->nsr++] = (suffix_ref){s + off, (uint32_t)(n - off), tok};
}

static int suffix_cmp(const void *a, const void *b) {
    const suffix_ref *x = a, *y = b;
    int c = memcmp(x->s, y->s, x->n < y->n ? x->n : y->n);
    if (c) return c;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    return x->tok < y->tok ? -1 : x->tok > y->tok;
}

/* The merged suffix trie of l's entries (tokens already accepted dropped first). */
static void build_suffix_trie(gr_table *t, suffix_list *l, const uint32_t *accepted_bits) {
    size_t k = 0;
    for (size_t i = 0; i < l->nsr; i++) {
        int32_t tok = l->sr[i].tok;
        if (!((accepted_bits[tok >> 5] >> (tok & 31)) & 1)) l->sr[k++] = l->sr[i];
    }
    l->nsr = k;
    if (!k) return;
    qsort(l->sr, l->nsr, sizeof *l->sr, suffix_cmp);
    size_t total = 0;
    for (size_t i = 0; i < l->nsr; i++) total += l->sr[i].n;
    t->sbyte = xmalloc(total + 1);
    t->sdepth = xmalloc(total + 1);
    t->send = xmalloc((total + 1) * sizeof *t->send);
    uint32_t *count = xcalloc(total + 1, sizeof *count);
    uint32_t *last_node = xmalloc(l->nsr * sizeof *last_node);
    uint32_t path[MAX_DEPTH];
    size_t plen = 0, pn = 0;
    const char *ps = NULL;
    for (size_t i = 0; i < l->nsr; i++) {
        size_t n = l->sr[i].n;
        const char *s = l->sr[i].s;
        size_t lcp = 0;
        while (ps && lcp < pn && lcp < n && ps[lcp] == s[lcp]) lcp++;
        if (!(ps && lcp == n && lcp == pn)) {
            while (plen > lcp) t->send[path[--plen]] = t->nsuf;
            for (size_t d = lcp; d < n; d++) {
                uint32_t id = t->nsuf++;
                t->sbyte[id] = (uint8_t)s[d];
                t->sdepth[id] = (uint8_t)(d + 1);
                path[plen++] = id;
            }
        }
        last_node[i] = path[plen - 1];
        count[last_node[i]]++;
        ps = s;
        pn = n;
    }
    while (plen > 0) t->send[path[--plen]] = t->nsuf;
    t->stok0 = xmalloc((t->nsuf + 1) * sizeof *t->stok0);
    t->stok0[0] = 0;
    for (uint32_t i = 0; i < t->nsuf; i++) t->stok0[i + 1] = t->stok0[i] + count[i];
    t->stoks = xmalloc(l->nsr * sizeof *t->stoks);
    memset(count, 0, (total + 1) * sizeof *count);
    for (size_t i = 0; i < l->nsr; i++) {
        uint32_t nd = last_node[i];
        t->stoks[t->stok0[nd] + count[nd]++] = l->sr[i].tok;
    }
    free(count);
    free(last_node);
}

gr_table *gr_table_build(const grammar *g, const grammar_vocab *v, uint32_t node) {
    gr_table *t = xcalloc(1, sizeof *t);
    const size_t words = grammar_mask_words(v);
    uint32_t *bits = xcalloc(words, sizeof *bits);
    uint32_t naccepted = 0;
    suffix_list sl = {0};
    uint32_t *big = NULL;
    size_t nbig = 0, bigcap = 0;

    gr_pool pool;
    pool_init(&pool, GRAMMAR_MAX_FRAMES);
    gr_set sets[MAX_DEPTH + 1];
    uint32_t marks[MAX_DEPTH + 1];
    memset(sets, 0, sizeof sets);
    set_single(g, &pool, pool_cons(&pool, node, GR_CTX), &sets[0]);
    marks[0] = pool.n;
    for (uint32_t i = 0; i < v->nnodes;) {
        unsigned d = v->depth[i];
        pool_rollback(&pool, marks[d - 1]);
        set_advance(g, &pool, &sets[d - 1], v->byte[i], &sets[d]);
        if (sets[d].n == 0) {
            i = v->end[i];
            continue;
        }
        marks[d] = pool.n;
        int32_t tok = v->token[i];
        if (tok >= 0 && !((bits[tok >> 5] >> (tok & 31)) & 1)) {
            bits[tok >> 5] |= 1u << (tok & 31);
            naccepted++;
        }
        if (sets[d].ctx_end && v->end[i] > i + 1) {
            if (v->end[i] - i - 1 > BIG_SUBTREE) {
                if (nbig == bigcap) {
                    bigcap = bigcap ? 2 * bigcap : 16;
                    big = xrealloc(big, bigcap * sizeof *big);
                }
                big[nbig++] = i;
            } else {
                for (uint32_t j = i + 1; j < v->end[i]; j++)
                    if (v->token[j] >= 0) suffix_add(&sl, v, v->token[j], d);
            }
        }
        i++;
    }
    for (int d = 0; d <= MAX_DEPTH; d++) set_free(&sets[d]);
    pool_free(&pool);

    /* Duplicated token strings share their twin's fate. */
    for (size_t k = 0; k < v->ndup; k++) {
        int32_t a = v->dup_of[k], b = v->dup_tok[k];
        if ((bits[a >> 5] >> (a & 31)) & 1) {
            bits[b >> 5] |= 1u << (b & 31);
            naccepted++;
        }
    }
    build_suffix_trie(t, &sl, bits);
    free(sl.sr);
    t->big = big;
    t->nbig = (uint32_t)nbig;
    if (naccepted > words) {
        t->bits = bits;
    } else {
        t->ids = xmalloc((naccepted ? naccepted : 1) * sizeof *t->ids);
        for (size_t w = 0; w < words; w++)
            for (uint32_t m = bits[w]; m; m &= m - 1)
                t->ids[t->nids++] = (int32_t)(w * 32 + (size_t)__builtin_ctz(m));
        free(bits);
    }
    return t;
}

void gr_table_free(gr_table *t) {
    if (!t || t->shared) return;
    free(t->bits);
    free(t->ids);
    free(t->big);
    free(t->sbyte);
    free(t->sdepth);
    free(t->send);
    free(t->stok0);
    free(t->stoks);
    free(t);
}

void grammar_precompute_all(grammar *g, const grammar_vocab *v) {
    for (uint32_t i = 0; i < g->nnodes; i++) gr_table_get(g, v, i);
}
