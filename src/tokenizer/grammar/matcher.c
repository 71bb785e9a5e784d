/* The matcher: one output followed through the grammar, and its token masks.
 *
 * A mask is the union, over the members of the state (stacks), of:
 *   1. the member top node's accepted tokens (a precomputed bitmask or id list: an OR), and
 *   2. its context-dependent tokens, found by walking the node's suffix trie and big pop points
 *      with the member's parent stack (the real context), pruning at the first byte that fails.
 * Members whose node is final are already accompanied by their popped parents (gr_stack.h), so a
 * token that starts in the context is covered by the parent's own table.
 *
 * Frames made by those walks are rolled back after each one, so masks leave the pool as they
 * found it; only accepted bytes add frames (a few per byte). */
#include "tokenizer/grammar/grammar.h"

#include "base/error.h"
#include "base/xalloc.h"
#include "tokenizer/grammar/gr_stack.h"
#include "tokenizer/grammar/token_table.h"

#include <stdlib.h>
#include <string.h>

#define WALK_DEPTH 257

struct grammar_matcher {
    grammar *g;
    const grammar_vocab *v;
    gr_pool pool;
    gr_set cur, a, b;
    gr_set walk[WALK_DEPTH]; /* per-depth sets of the context walks */
    uint32_t marks[WALK_DEPTH];
    uint32_t compact_at; /* pool size that triggers the next compaction */
};

#define COMPACT_MIN (1u << 16)

/* The frames of the state's stacks, copied into a fresh pool: frames only the past used (every
 * accepted byte leaves a few) are dropped, so a long output holds memory in proportion to its
 * current nesting, not to its length. Stacks share their tails, so a map from old to new ids
 * copies each live frame once. */
static void compact(grammar_matcher *m) {
    gr_pool np;
    pool_init(&np, GRAMMAR_MAX_FRAMES);
    uint32_t *map = xmalloc((size_t)m->pool.n * sizeof *map);
    memset(map, 0xff, (size_t)m->pool.n * sizeof *map);
    ivec chain = {0};
    for (uint32_t i = 0; i < m->cur.n; i++) {
        chain.len = 0;
        uint32_t s = m->cur.s[i];
        while (s != GR_NIL && s != GR_CTX && map[s] == GR_NIL) {
            ivec_push(&chain, (int32_t)s);
            s = m->pool.f[s].parent;
        }
        uint32_t below = s == GR_NIL || s == GR_CTX ? s : map[s];
        for (size_t k = chain.len; k-- > 0;) {
            uint32_t old = (uint32_t)chain.v[k];
            below = map[old] = pool_cons(&np, m->pool.f[old].node, below);
        }
        m->cur.s[i] = map[m->cur.s[i]];
    }
    ivec_free(&chain);
    free(map);
    pool_free(&m->pool);
    m->pool = np;
    m->compact_at = 4 * m->pool.n > COMPACT_MIN ? 4 * m->pool.n : COMPACT_MIN;
}

grammar_matcher *grammar_matcher_new(const grammar *g, const grammar_vocab *v) {
    grammar_matcher *m = xcalloc(1, sizeof *m);
    m->g = (grammar *)g; /* only the lazily filled token tables change, under g->lock */
    m->v = v;
    pool_init(&m->pool, GRAMMAR_MAX_FRAMES);
    grammar_matcher_reset(m);
    return m;
}

grammar_matcher *grammar_matcher_clone(const grammar_matcher *src) {
    grammar_matcher *m = xcalloc(1, sizeof *m);
    m->g = src->g;
    m->v = src->v;
    m->compact_at = src->compact_at;
    gr_pool *p = &m->pool;
    *p = src->pool;
    p->cap = p->n ? p->n : 1;
    p->f = xmalloc((size_t)p->cap * sizeof *p->f);
    memcpy(p->f, src->pool.f, (size_t)p->n * sizeof *p->f);
    p->bucket = xmalloc((size_t)p->nbucket * sizeof *p->bucket);
    memcpy(p->bucket, src->pool.bucket, (size_t)p->nbucket * sizeof *p->bucket);
    set_copy(&m->cur, &src->cur);
    return m;
}

void grammar_matcher_free(grammar_matcher *m) {
    if (!m) return;
    pool_free(&m->pool);
    set_free(&m->cur);
    set_free(&m->a);
    set_free(&m->b);
    for (int d = 0; d < WALK_DEPTH; d++) set_free(&m->walk[d]);
    free(m);
}

void grammar_matcher_reset(grammar_matcher *m) {
    pool_rollback(&m->pool, 0);
    m->pool.overflow = 0;
    m->compact_at = COMPACT_MIN;
    uint32_t root = pool_cons(&m->pool, m->g->rule_start[m->g->root], GR_NIL);
    set_single(m->g, &m->pool, root, &m->cur);
}

int grammar_matcher_advance_bytes(grammar_matcher *m, const void *bytes, size_t n) {
    const uint8_t *p = bytes;
    uint32_t mark = m->pool.n;
    set_copy(&m->a, &m->cur);
    for (size_t i = 0; i < n; i++) {
        set_advance(m->g, &m->pool, &m->a, p[i], &m->b);
        if (m->b.n == 0) {
            pool_rollback(&m->pool, mark);
            if (m->pool.overflow)
                return err_set("grammar: the output is too deep or too long for the matcher");
            return err_set("grammar: byte 0x%02x at offset %zu is not allowed here", p[i], i);
        }
        gr_set t = m->a;
        m->a = m->b;
        m->b = t;
    }
    gr_set t = m->cur;
    m->cur = m->a;
    m->a = t;
    if (m->pool.n > m->compact_at) compact(m);
    return 0;
}

size_t grammar_matcher_memory(const grammar_matcher *m) {
    return sizeof *m + (size_t)m->pool.cap * sizeof(gr_frame) +
           (size_t)m->pool.nbucket * sizeof(uint32_t);
}

int grammar_matcher_advance_token(grammar_matcher *m, int32_t token) {
    const tokenizer *tok = m->v->tok;
    if (token < 0 || token >= m->v->vocab_size || tokenizer_is_special(tok, token))
        return err_set("grammar: token %d is not an ordinary token", token);
    size_t n;
    const char *s = tokenizer_token_bytes(tok, token, &n);
    if (!s) return err_set("grammar: token %d has no bytes", token);
    return grammar_matcher_advance_bytes(m, s, n);
}

int grammar_matcher_accepts_token(grammar_matcher *m, int32_t token) {
    const tokenizer *tok = m->v->tok;
    if (token < 0 || token >= m->v->vocab_size || tokenizer_is_special(tok, token)) return -1;
    size_t n;
    const uint8_t *s = (const uint8_t *)tokenizer_token_bytes(tok, token, &n);
    uint32_t mark = m->pool.n;
    set_copy(&m->a, &m->cur);
    int ok = 1;
    for (size_t i = 0; i < n && ok; i++) {
        set_advance(m->g, &m->pool, &m->a, s[i], &m->b);
        ok = m->b.n > 0;
        gr_set t = m->a;
        m->a = m->b;
        m->b = t;
    }
    pool_rollback(&m->pool, mark);
    return ok;
}

bool grammar_matcher_can_end(const grammar_matcher *m) {
    return m->cur.can_end;
}

bool grammar_matcher_is_terminated(const grammar_matcher *m) {
    if (!m->cur.can_end) return false;
    for (uint32_t i = 0; i < m->cur.n; i++) {
        const uint32_t *f = m->g->first[m->pool.f[m->cur.s[i]].node];
        for (int w = 0; w < 8; w++)
            if (f[w]) return false;
    }
    return true;
}

/* Walks the preorder trie nodes [i0, i1) (depths relative to base) from the context stack, and
 * sets the mask bits of the tokens that end at each node reached. tokens: the vocab trie (one per
 * node) when stok0 is NULL, else the suffix trie's lists. */
static void walk_ctx(grammar_matcher *m, uint32_t ctx, const uint8_t *byte, const uint8_t *depth,
                     const uint32_t *end, const int32_t *token, const uint32_t *stok0, uint32_t i0,
                     uint32_t i1, unsigned base, uint32_t *mask) {
    gr_pool *p = &m->pool;
    const uint32_t mark0 = p->n;
    set_single(m->g, p, ctx, &m->walk[0]);
    m->marks[0] = p->n;
    for (uint32_t i = i0; i < i1;) {
        unsigned d = depth[i] - base;
        pool_rollback(p, m->marks[d - 1]);
        set_advance(m->g, p, &m->walk[d - 1], byte[i], &m->walk[d]);
        if (m->walk[d].n == 0) {
            i = end[i];
            continue;
        }
        m->marks[d] = p->n;
        if (!stok0) {
            int32_t t = token[i];
            if (t >= 0) mask[t >> 5] |= 1u << (t & 31);
        } else {
            for (uint32_t k = stok0[i]; k < stok0[i + 1]; k++)
                mask[token[k] >> 5] |= 1u << (token[k] & 31);
        }
        i++;
    }
    pool_rollback(p, mark0);
}

void grammar_matcher_fill_mask(grammar_matcher *m, uint32_t *mask) {
    const grammar_vocab *v = m->v;
    const size_t words = grammar_mask_words(v);
    memset(mask, 0, words * sizeof *mask);
    uint32_t last_node = UINT32_MAX;
    for (uint32_t i = 0; i < m->cur.n; i++) {
        const gr_frame f = m->pool.f[m->cur.s[i]];
        const gr_table *t = gr_table_get(m->g, v, f.node);
        if (f.node != last_node) { /* members sorted by id often repeat a node */
            if (t->bits) {
                for (size_t w = 0; w < words; w++) mask[w] |= t->bits[w];
            } else {
                for (uint32_t k = 0; k < t->nids; k++)
                    mask[t->ids[k] >> 5] |= 1u << (t->ids[k] & 31);
            }
            last_node = f.node;
        }
        if (f.parent == GR_NIL) continue; /* the root rule: nothing may follow its end */
        if (t->nsuf)
            walk_ctx(m, f.parent, t->sbyte, t->sdepth, t->send, t->stoks, t->stok0, 0, t->nsuf, 0,
                     mask);
        for (uint32_t k = 0; k < t->nbig; k++) {
            uint32_t x = t->big[k];
            walk_ctx(m, f.parent, v->byte, v->depth, v->end, v->token, NULL, x + 1, v->end[x],
                     v->depth[x], mask);
        }
    }
    for (size_t k = 0; k < v->ndup; k++) {
        int32_t a = v->dup_of[k], b = v->dup_tok[k];
        if ((mask[a >> 5] >> (a & 31)) & 1) mask[b >> 5] |= 1u << (b & 31);
    }
}
