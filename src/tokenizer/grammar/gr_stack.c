/* Stack frames and sets of stacks (see gr_stack.h). */
#include "tokenizer/grammar/gr_stack.h"

#include "base/xalloc.h"

#include <stdlib.h>
#include <string.h>

static uint32_t frame_hash(uint32_t node, uint32_t parent) {
    uint64_t h = ((uint64_t)node << 32 | parent) * 0x9e3779b97f4a7c15ull;
    return (uint32_t)(h >> 32);
}

void pool_init(gr_pool *p, uint32_t limit) {
    memset(p, 0, sizeof *p);
    p->limit = limit;
    p->nbucket = 1024;
    p->bucket = xmalloc(p->nbucket * sizeof *p->bucket);
    memset(p->bucket, 0xff, p->nbucket * sizeof *p->bucket);
}

void pool_free(gr_pool *p) {
    free(p->f);
    free(p->bucket);
    memset(p, 0, sizeof *p);
}

/* Doubles the buckets and re-chains every frame oldest first, so each chain stays newest first. */
static void rehash(gr_pool *p) {
    p->nbucket *= 2;
    p->bucket = xrealloc(p->bucket, p->nbucket * sizeof *p->bucket);
    memset(p->bucket, 0xff, p->nbucket * sizeof *p->bucket);
    for (uint32_t i = 0; i < p->n; i++) {
        uint32_t h = frame_hash(p->f[i].node, p->f[i].parent) & (p->nbucket - 1);
        p->f[i].next = p->bucket[h];
        p->bucket[h] = i;
    }
}

uint32_t pool_cons(gr_pool *p, uint32_t node, uint32_t parent) {
    uint32_t h = frame_hash(node, parent) & (p->nbucket - 1);
    for (uint32_t i = p->bucket[h]; i != GR_NIL; i = p->f[i].next)
        if (p->f[i].node == node && p->f[i].parent == parent) return i;
    if (p->n >= p->limit) {
        p->overflow = 1;
        return GR_NIL;
    }
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 1024;
        p->f = xrealloc(p->f, p->cap * sizeof *p->f);
    }
    uint32_t id = p->n++;
    p->f[id] = (gr_frame){node, parent, p->bucket[h]};
    p->bucket[h] = id;
    if (p->n > 2 * p->nbucket) rehash(p);
    return id;
}

void pool_rollback(gr_pool *p, uint32_t mark) {
    while (p->n > mark) {
        uint32_t id = --p->n;
        uint32_t h = frame_hash(p->f[id].node, p->f[id].parent) & (p->nbucket - 1);
        p->bucket[h] = p->f[id].next; /* it was the newest in its chain */
    }
}

void set_free(gr_set *s) {
    free(s->s);
    memset(s, 0, sizeof *s);
}

static void set_push(gr_set *s, uint32_t x) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 16;
        s->s = xrealloc(s->s, s->cap * sizeof *s->s);
    }
    s->s[s->n++] = x;
}

void set_copy(gr_set *dst, const gr_set *src) {
    dst->n = 0;
    for (uint32_t i = 0; i < src->n; i++) set_push(dst, src->s[i]);
    dst->can_end = src->can_end;
    dst->ctx_end = src->ctx_end;
}

static int u32_cmp(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Adds the pops of every member (their parents, transitively), then sorts, dedupes and caps. */
static void close_set(const grammar *g, gr_pool *p, gr_set *s) {
    s->can_end = s->ctx_end = 0;
    const uint32_t n0 = s->n; /* the pushed parents' own pops are walked by the inner loop */
    for (uint32_t i = 0; i < n0; i++) {
        uint32_t st = s->s[i];
        while (g->nodes[p->f[st].node].final || g->nullable[p->f[st].node]) {
            uint32_t parent = p->f[st].parent;
            if (parent == GR_NIL) {
                s->can_end = 1;
                break;
            }
            if (parent == GR_CTX) {
                s->ctx_end = 1;
                break;
            }
            set_push(s, parent);
            st = parent;
        }
    }
    if (s->n > 1) {
        qsort(s->s, s->n, sizeof *s->s, u32_cmp);
        uint32_t k = 0;
        for (uint32_t i = 1; i < s->n; i++)
            if (s->s[i] != s->s[k]) s->s[++k] = s->s[i];
        s->n = k + 1;
    }
    if (s->n > GRAMMAR_MAX_STACKS) s->n = GRAMMAR_MAX_STACKS; /* still sound: fewer parses */
}

void set_single(const grammar *g, gr_pool *p, uint32_t stack, gr_set *out) {
    out->n = 0;
    if (stack != GR_NIL) set_push(out, stack);
    close_set(g, p, out);
}

/* Reads c from the stack (node, parent): byte edges replace the top; calls push their return
 * frame and read c from the callee's start (and from the return node when the callee may be
 * empty). No left recursion (gr_check), so the depth is bounded by the number of rules. */
static void expand(const grammar *g, gr_pool *p, uint32_t node, uint32_t parent, uint8_t c,
                   gr_set *out, int depth) {
    if (!first_has(g, node, c) || depth > 512) return;
    const gr_node *n = &g->nodes[node];
    for (uint32_t k = 0; k < n->nedge; k++) {
        const gr_edge *e = &g->edges[n->edge0 + k];
        if (c >= e->lo && c <= e->hi) {
            uint32_t st = pool_cons(p, e->to, parent);
            if (st != GR_NIL) set_push(out, st);
        }
    }
    for (uint32_t k = 0; k < n->ncall; k++) {
        const gr_call *cl = &g->calls[n->call0 + k];
        uint32_t s = g->rule_start[cl->rule];
        int in_callee = first_has(g, s, c);
        int past_callee = g->nullable[s] && first_has(g, cl->ret, c);
        if (!in_callee && !past_callee) continue;
        uint32_t ret = pool_cons(p, cl->ret, parent);
        if (ret == GR_NIL) continue;
        if (in_callee) expand(g, p, s, ret, c, out, depth + 1);
        if (past_callee) expand(g, p, cl->ret, parent, c, out, depth + 1);
    }
}

void set_advance(const grammar *g, gr_pool *p, const gr_set *in, uint8_t c, gr_set *out) {
    out->n = 0;
    for (uint32_t i = 0; i < in->n; i++) {
        const gr_frame *f = &p->f[in->s[i]];
        expand(g, p, f->node, f->parent, c, out, 0);
    }
    close_set(g, p, out);
}
