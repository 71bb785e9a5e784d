/* The grammar builder and epsilon removal.
 *
 * gb_finish turns each rule's fragment graph into an epsilon-free NFA: a node is made for the
 * rule's start state and for every state some byte or call edge enters ("important" states); the
 * node's edges are the byte and call edges leaving anything in its epsilon closure, and it is final
 * when the closure holds the rule's end state. States nothing enters are dropped. The cost is the
 * sum of closure sizes, which a hostile regex can make quadratic ((a?){1000}), so the edge count is
 * bounded by GRAMMAR_MAX_ARCS. */
#include "tokenizer/grammar/gr_build.h"

#include "base/error.h"
#include "base/xalloc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gb_init(gbuild *b) {
    memset(b, 0, sizeof *b);
}

void gb_free(gbuild *b) {
    free(b->arcs);
    free(b->state_rule);
    free(b->rule_start);
    free(b->rule_end);
    for (uint32_t r = 0; r < b->nrules; r++) free(b->rule_name[r]);
    free(b->rule_name);
    memset(b, 0, sizeof *b);
}

int gb_fail(gbuild *b, const char *fmt, ...) {
    if (!b->failed) {
        va_list ap;
        va_start(ap, fmt);
        err_vset(fmt, ap);
        va_end(ap);
    }
    b->failed = 1;
    return -1;
}

uint32_t gb_state(gbuild *b, uint32_t rule) {
    if (b->nstates >= GRAMMAR_MAX_STATES) {
        gb_fail(b, "grammar too large: over %d automaton states", GRAMMAR_MAX_STATES);
        return 0;
    }
    if (b->nstates == b->scap) {
        b->scap = b->scap ? 2 * b->scap : 256;
        b->state_rule = xrealloc(b->state_rule, b->scap * sizeof *b->state_rule);
    }
    b->state_rule[b->nstates] = rule;
    return b->nstates++;
}

uint32_t gb_rule(gbuild *b, const char *name) {
    if (b->nrules == b->rcap) {
        b->rcap = b->rcap ? 2 * b->rcap : 16;
        b->rule_start = xrealloc(b->rule_start, b->rcap * sizeof *b->rule_start);
        b->rule_end = xrealloc(b->rule_end, b->rcap * sizeof *b->rule_end);
        b->rule_name = xrealloc(b->rule_name, b->rcap * sizeof *b->rule_name);
    }
    uint32_t r = b->nrules++;
    b->rule_name[r] = xstrdup(name);
    b->rule_start[r] = gb_state(b, r);
    b->rule_end[r] = gb_state(b, r);
    return r;
}

static void add_arc(gbuild *b, gb_arc a) {
    if (b->failed) return;
    if (b->narcs >= (size_t)GRAMMAR_MAX_ARCS) {
        gb_fail(b, "grammar too large: over %d automaton edges", GRAMMAR_MAX_ARCS);
        return;
    }
    if (b->narcs == b->acap) {
        b->acap = b->acap ? 2 * b->acap : 1024;
        b->arcs = xrealloc(b->arcs, b->acap * sizeof *b->arcs);
    }
    b->arcs[b->narcs++] = a;
}

void gb_eps(gbuild *b, uint32_t from, uint32_t to) {
    add_arc(b, (gb_arc){.from = from, .to = to, .kind = GB_EPS});
}

void gb_bytes(gbuild *b, uint32_t from, uint8_t lo, uint8_t hi, uint32_t to) {
    add_arc(b, (gb_arc){.from = from, .to = to, .kind = GB_BYTES, .lo = lo, .hi = hi});
}

void gb_call(gbuild *b, uint32_t from, uint32_t rule, uint32_t to) {
    add_arc(b, (gb_arc){.from = from, .to = to, .rule = rule, .kind = GB_CALL});
}

void gb_literal(gbuild *b, uint32_t from, const void *s, size_t n, uint32_t to) {
    const uint8_t *p = s;
    if (n == 0) {
        gb_eps(b, from, to);
        return;
    }
    uint32_t cur = from, rule = b->state_rule[from];
    for (size_t i = 0; i < n && !b->failed; i++) {
        uint32_t next = i + 1 == n ? to : gb_state(b, rule);
        gb_bytes(b, cur, p[i], p[i], next);
        cur = next;
    }
}

/* ---- epsilon removal ---- */

static int edge_cmp(const void *a, const void *b) {
    const gr_edge *x = a, *y = b;
    if (x->to != y->to) return x->to < y->to ? -1 : 1;
    return (int)x->lo - (int)y->lo;
}

static int call_cmp(const void *a, const void *b) {
    const gr_call *x = a, *y = b;
    if (x->rule != y->rule) return x->rule < y->rule ? -1 : 1;
    return x->ret < y->ret ? -1 : x->ret > y->ret;
}

/* Sorts a node's edges by target and merges overlapping or touching ranges to the same target. */
static uint32_t tidy_edges(gr_edge *e, uint32_t n) {
    if (n < 2) return n;
    qsort(e, n, sizeof *e, edge_cmp);
    uint32_t k = 0;
    for (uint32_t i = 1; i < n; i++) {
        if (e[i].to == e[k].to && e[i].lo <= (unsigned)e[k].hi + 1) {
            if (e[i].hi > e[k].hi) e[k].hi = e[i].hi;
        } else {
            e[++k] = e[i];
        }
    }
    return k + 1;
}

static uint32_t tidy_calls(gr_call *c, uint32_t n) {
    if (n < 2) return n;
    qsort(c, n, sizeof *c, call_cmp);
    uint32_t k = 0;
    for (uint32_t i = 1; i < n; i++)
        if (c[i].rule != c[k].rule || c[i].ret != c[k].ret) c[++k] = c[i];
    return k + 1;
}

typedef struct {
    uint32_t *off; /* CSR of arcs by source state */
    uint32_t *idx;
    uint32_t *map;   /* old state → new node, UINT32_MAX if none yet */
    uint32_t *stamp; /* closure visit marks */
    uint32_t *todo;  /* states with a node whose edges are not made yet */
    uint32_t *dfs;
} gb_tmp;

int gr_check(grammar *g, char *const *rule_name); /* gr_check.c */

grammar *gb_finish(gbuild *b, uint32_t root) {
    if (b->failed) return NULL;
    const uint32_t ns = b->nstates;
    gb_tmp t;
    t.off = xcalloc(ns + 1, sizeof *t.off);
    t.idx = xmalloc((b->narcs + 1) * sizeof *t.idx);
    t.map = xmalloc(ns * sizeof *t.map);
    t.stamp = xcalloc(ns, sizeof *t.stamp);
    t.todo = xmalloc(ns * sizeof *t.todo);
    t.dfs = xmalloc(ns * sizeof *t.dfs);
    for (size_t i = 0; i < b->narcs; i++) t.off[b->arcs[i].from + 1]++;
    for (uint32_t s = 0; s < ns; s++) t.off[s + 1] += t.off[s];
    uint32_t *fill = xmalloc((ns + 1) * sizeof *fill);
    memcpy(fill, t.off, (ns + 1) * sizeof *fill);
    for (size_t i = 0; i < b->narcs; i++) t.idx[fill[b->arcs[i].from]++] = (uint32_t)i;
    free(fill);
    memset(t.map, 0xff, ns * sizeof *t.map);

    grammar *g = xcalloc(1, sizeof *g);
    size_t ncap = 256, ecap = 1024, ccap = 256;
    g->nodes = xmalloc(ncap * sizeof *g->nodes);
    g->edges = xmalloc(ecap * sizeof *g->edges);
    g->calls = xmalloc(ccap * sizeof *g->calls);
    g->nrules = b->nrules;
    g->root = root;
    g->rule_start = xmalloc(b->nrules * sizeof *g->rule_start);
    uint32_t stamp = 0;
    int fail = 0;

    for (uint32_t r = 0; r < b->nrules && !fail; r++) {
        /* Discover the rule's important states breadth-first from its start. */
        uint32_t ntodo = 0;
        uint32_t s0 = b->rule_start[r];
        t.map[s0] = g->nnodes;
        t.todo[ntodo++] = s0;
        g->rule_start[r] = g->nnodes;
        for (uint32_t qi = 0; qi < ntodo && !fail; qi++) {
            uint32_t s = t.todo[qi];
            if (g->nnodes == ncap) {
                ncap *= 2;
                g->nodes = xrealloc(g->nodes, ncap * sizeof *g->nodes);
            }
            gr_node *nd = &g->nodes[g->nnodes++];
            nd->rule = r;
            nd->final = 0;
            nd->edge0 = g->nedges;
            nd->call0 = g->ncalls;
            /* Epsilon closure of s, depth-first. */
            stamp++;
            uint32_t sp = 0;
            t.dfs[sp++] = s;
            t.stamp[s] = stamp;
            while (sp) {
                uint32_t u = t.dfs[--sp];
                if (u == b->rule_end[r]) nd->final = 1;
                for (uint32_t k = t.off[u]; k < t.off[u + 1]; k++) {
                    const gb_arc *a = &b->arcs[t.idx[k]];
                    if (a->kind == GB_EPS) {
                        if (t.stamp[a->to] != stamp) {
                            t.stamp[a->to] = stamp;
                            t.dfs[sp++] = a->to;
                        }
                        continue;
                    }
                    if (t.map[a->to] == UINT32_MAX) {
                        t.map[a->to] = g->rule_start[r] + ntodo;
                        t.todo[ntodo++] = a->to;
                    }
                    if (g->nedges + g->ncalls >= (uint32_t)GRAMMAR_MAX_ARCS) {
                        fail = gb_fail(b, "grammar too large: over %d automaton edges",
                                       GRAMMAR_MAX_ARCS);
                        break;
                    }
                    if (a->kind == GB_BYTES) {
                        if (g->nedges == ecap) {
                            ecap *= 2;
                            g->edges = xrealloc(g->edges, ecap * sizeof *g->edges);
                        }
                        g->edges[g->nedges++] = (gr_edge){a->lo, a->hi, t.map[a->to]};
                    } else {
                        if (g->ncalls == ccap) {
                            ccap *= 2;
                            g->calls = xrealloc(g->calls, ccap * sizeof *g->calls);
                        }
                        g->calls[g->ncalls++] = (gr_call){a->rule, t.map[a->to]};
                    }
                }
            }
            nd = &g->nodes[g->nnodes - 1];
            nd->nedge = tidy_edges(g->edges + nd->edge0, g->nedges - nd->edge0);
            g->nedges = nd->edge0 + nd->nedge;
            nd->ncall = tidy_calls(g->calls + nd->call0, g->ncalls - nd->call0);
            g->ncalls = nd->call0 + nd->ncall;
        }
    }
    free(t.off);
    free(t.idx);
    free(t.map);
    free(t.stamp);
    free(t.todo);
    free(t.dfs);
    if (!fail && gr_check(g, b->rule_name) != 0) fail = 1;
    if (fail) {
        grammar_free(g);
        return NULL;
    }
    pthread_mutex_init(&g->lock, NULL);
    g->tables = xcalloc(g->nnodes ? g->nnodes : 1, sizeof *g->tables);
    return g;
}

void grammar_free(grammar *g) {
    if (!g) return;
    if (g->tables) {
        for (uint32_t i = 0; i < g->nnodes; i++) gr_table_free(g->tables[i]);
        free(g->tables);
        pthread_mutex_destroy(&g->lock);
    }
    free(g->nodes);
    free(g->edges);
    free(g->calls);
    free(g->rule_start);
    free(g->nullable);
    free(g->first);
    free(g);
}

size_t grammar_num_nodes(const grammar *g) {
    return g->nnodes;
}

void grammar_options_default(grammar_options *o) {
    o->max_ws = 20;
}
