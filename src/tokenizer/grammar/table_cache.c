/* Token tables shared across grammars.
 *
 * A node's table depends only on the part of the automaton reachable from it without popping: its
 * rule's nodes from there on and every rule they call. Many grammars share such parts exactly:
 * every JSON grammar has the same string, number, integer and whitespace rules, and a server sees
 * the same schema again and again. So the vocab keeps a cache from a fingerprint of that part to
 * the table: the string rule's tables (the costliest, ~20 ms each, since nearly every token is
 * possible inside a string) are computed once per process instead of once per grammar.
 *
 * The fingerprint is a 128-bit XXH3 of a serialisation of the reachable part, nodes numbered in
 * the order a breadth-first walk meets them: equal serialisations mean isomorphic automata, hence
 * equal tables. Two isomorphic parts built in a different order may serialise differently; that
 * costs a cache miss, never a wrong table. Parts over FP_MAX_NODES nodes are not fingerprinted
 * (a root rule's nodes reach the whole grammar: hashing all of it for each node would be
 * quadratic); their tables belong to their grammar. The cache stops growing at CACHE_MAX_BYTES. */
#include "tokenizer/grammar/token_table.h"

#include "base/xalloc.h"

#define XXH_INLINE_ALL
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define FP_MAX_NODES    512
#define FP_SLOTS        2048 /* open addressing: node → its number in the walk */
#define CACHE_MAX_BYTES ((size_t)256 << 20)

typedef struct {
    uint32_t *v;
    size_t n, cap;
} u32buf;

static void put(u32buf *b, uint32_t x) {
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 1024;
        b->v = xrealloc(b->v, b->cap * sizeof *b->v);
    }
    b->v[b->n++] = x;
}

typedef struct {
    uint32_t key[FP_SLOTS], val[FP_SLOTS];
    uint32_t order[FP_MAX_NODES];
    uint32_t n;
} fp_map;

/* The walk number of node, giving it the next one when it is new; UINT32_MAX when full. */
static uint32_t number(fp_map *m, uint32_t node) {
    uint32_t h = (node * 2654435761u) & (FP_SLOTS - 1);
    while (m->key[h] != UINT32_MAX) {
        if (m->key[h] == node) return m->val[h];
        h = (h + 1) & (FP_SLOTS - 1);
    }
    if (m->n == FP_MAX_NODES) return UINT32_MAX;
    m->key[h] = node;
    m->val[h] = m->n;
    m->order[m->n] = node;
    return m->n++;
}

/* 0 and the fingerprint of the part reachable from node, or -1 when it is too large. */
static int fingerprint(const grammar *g, uint32_t node, XXH128_hash_t *out) {
    fp_map *m = xmalloc(sizeof *m);
    memset(m->key, 0xff, sizeof m->key);
    m->n = 0;
    u32buf b = {0};
    int rc = 0;
    number(m, node);
    for (uint32_t i = 0; i < m->n && !rc; i++) {
        const gr_node *n = &g->nodes[m->order[i]];
        put(&b, (uint32_t)n->final | (uint32_t)g->nullable[m->order[i]] << 1);
        put(&b, n->nedge);
        for (uint32_t k = 0; k < n->nedge && !rc; k++) {
            const gr_edge *e = &g->edges[n->edge0 + k];
            uint32_t to = number(m, e->to);
            if (to == UINT32_MAX) rc = -1;
            put(&b, (uint32_t)e->lo << 8 | e->hi);
            put(&b, to);
        }
        put(&b, n->ncall);
        for (uint32_t k = 0; k < n->ncall && !rc; k++) {
            const gr_call *c = &g->calls[n->call0 + k];
            uint32_t s = number(m, g->rule_start[c->rule]), r = number(m, c->ret);
            if (s == UINT32_MAX || r == UINT32_MAX) rc = -1;
            put(&b, s);
            put(&b, r);
        }
    }
    if (!rc) *out = XXH3_128bits(b.v, b.n * sizeof *b.v);
    free(b.v);
    free(m);
    return rc;
}

static size_t table_bytes(const grammar_vocab *v, const gr_table *t) {
    size_t n = sizeof *t + (t->bits ? grammar_mask_words(v) * 4 : 0) + t->nids * 4 + t->nbig * 4;
    return n + t->nsuf * 10 + (t->nsuf ? (t->stok0[t->nsuf] + 1) * 4 : 0);
}

static gr_table *cache_find(grammar_vocab *v, XXH128_hash_t k) {
    if (!v->cache_cap) return NULL;
    size_t h = (size_t)k.low64 & (v->cache_cap - 1);
    for (; v->cache[h].t; h = (h + 1) & (v->cache_cap - 1))
        if (v->cache[h].k0 == k.low64 && v->cache[h].k1 == k.high64) return v->cache[h].t;
    return NULL;
}

static void cache_put(grammar_vocab *v, XXH128_hash_t k, gr_table *t) {
    if (2 * (v->ncache + 1) > v->cache_cap) {
        size_t old_cap = v->cache_cap;
        gr_cache_entry *old = v->cache;
        v->cache_cap = old_cap ? 2 * old_cap : 256;
        v->cache = xcalloc(v->cache_cap, sizeof *v->cache);
        v->ncache = 0;
        for (size_t i = 0; i < old_cap; i++)
            if (old[i].t)
                cache_put(v, (XXH128_hash_t){.low64 = old[i].k0, .high64 = old[i].k1}, old[i].t);
        free(old);
    }
    size_t h = (size_t)k.low64 & (v->cache_cap - 1);
    while (v->cache[h].t) h = (h + 1) & (v->cache_cap - 1);
    v->cache[h] = (gr_cache_entry){k.low64, k.high64, t};
    v->ncache++;
}

const gr_table *gr_table_get(grammar *g, const grammar_vocab *cv, uint32_t node) {
    grammar_vocab *v = (grammar_vocab *)cv; /* only the cache changes, under its own lock */
    pthread_mutex_lock(&g->lock);
    if (!g->vocab) g->vocab = v;
    gr_table *t = g->tables[node];
    if (!t) {
        XXH128_hash_t k;
        int keyed = fingerprint(g, node, &k) == 0;
        if (keyed) {
            pthread_mutex_lock(&v->cache_lock);
            t = cache_find(v, k);
            pthread_mutex_unlock(&v->cache_lock);
        }
        if (!t) {
            t = gr_table_build(g, v, node);
            if (keyed) {
                pthread_mutex_lock(&v->cache_lock);
                size_t bytes = table_bytes(v, t);
                if (!cache_find(v, k) && v->cache_bytes + bytes <= CACHE_MAX_BYTES) {
                    t->shared = 1;
                    cache_put(v, k, t);
                    v->cache_bytes += bytes;
                }
                pthread_mutex_unlock(&v->cache_lock);
            }
        }
        g->tables[node] = t;
    }
    pthread_mutex_unlock(&g->lock);
    return t;
}

void gr_cache_free(grammar_vocab *v) {
    for (size_t i = 0; i < v->cache_cap; i++) {
        if (!v->cache[i].t) continue;
        v->cache[i].t->shared = 0;
        gr_table_free(v->cache[i].t);
    }
    free(v->cache);
    pthread_mutex_destroy(&v->cache_lock);
}

size_t grammar_vocab_cached_tables(const grammar_vocab *cv) {
    grammar_vocab *v = (grammar_vocab *)cv;
    pthread_mutex_lock(&v->cache_lock);
    size_t n = v->ncache;
    pthread_mutex_unlock(&v->cache_lock);
    return n;
}
