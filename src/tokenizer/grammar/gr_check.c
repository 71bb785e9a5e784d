/* The checks that make a finished grammar safe to run (see gr_internal.h):
 *
 *   1. No left recursion. A rule that can call itself before reading a byte (a $ref loop without
 *      progress, {"$ref": "#"} at the root, anyOf whose first branch is the schema itself) would
 *      make "follow the calls to the next byte" loop forever. Such grammars are refused, naming the
 *      rule.
 *   2. No dead ends. A node is productive when some path from it reaches a final node, reading
 *      bytes and calling productive rules. Edges into unproductive nodes and calls of unproductive
 *      rules are removed, so whatever a matcher has accepted can still be completed (a schema whose
 *      root has no finite instance, such as an object that requires itself, is refused).
 *
 * Both are fixpoints over nodes; they run in a few passes for the grammars the compilers build
 * (nodes are numbered roughly in reading order, and the passes go backwards). */
#include "base/error.h"
#include "base/xalloc.h"
#include "tokenizer/grammar/gr_internal.h"

#include <stdlib.h>
#include <string.h>

int gr_check(grammar *g, char *const *rule_name);

/* Iterates f until nothing changes; f returns whether it changed anything. */
static void nullable_pass(const grammar *g, uint8_t *nn, int *changed) {
    for (uint32_t i = g->nnodes; i-- > 0;) {
        if (nn[i]) continue;
        const gr_node *n = &g->nodes[i];
        uint8_t v = n->final;
        for (uint32_t k = 0; k < n->ncall && !v; k++) {
            const gr_call *c = &g->calls[n->call0 + k];
            v = nn[g->rule_start[c->rule]] && nn[c->ret];
        }
        if (v) {
            nn[i] = 1;
            *changed = 1;
        }
    }
}

static void productive_pass(const grammar *g, uint8_t *pr, int *changed) {
    for (uint32_t i = g->nnodes; i-- > 0;) {
        if (pr[i]) continue;
        const gr_node *n = &g->nodes[i];
        uint8_t v = n->final;
        for (uint32_t k = 0; k < n->nedge && !v; k++) v = pr[g->edges[n->edge0 + k].to];
        for (uint32_t k = 0; k < n->ncall && !v; k++) {
            const gr_call *c = &g->calls[n->call0 + k];
            v = pr[g->rule_start[c->rule]] && pr[c->ret];
        }
        if (v) {
            pr[i] = 1;
            *changed = 1;
        }
    }
}

/* Rules that rule r may call before reading a byte, as edges r → callee. */
static void left_calls(const grammar *g, uint32_t r, const uint8_t *nn, uint32_t *stack,
                       uint32_t *seen, uint32_t mark, uint32_t **out, size_t *nout, size_t *cap) {
    uint32_t sp = 0;
    stack[sp++] = g->rule_start[r];
    seen[g->rule_start[r]] = mark;
    while (sp) {
        const gr_node *n = &g->nodes[stack[--sp]];
        for (uint32_t k = 0; k < n->ncall; k++) {
            const gr_call *c = &g->calls[n->call0 + k];
            if (*nout == *cap) {
                *cap = *cap ? 2 * *cap : 64;
                *out = xrealloc(*out, *cap * sizeof **out);
            }
            (*out)[(*nout)++] = c->rule;
            if (nn[g->rule_start[c->rule]] && seen[c->ret] != mark) {
                seen[c->ret] = mark;
                stack[sp++] = c->ret;
            }
        }
    }
}

static int find_left_recursion(const grammar *g, const uint8_t *nn, char *const *rule_name) {
    /* The "calls before a byte" graph over rules, in CSR form. */
    uint32_t *off = xcalloc(g->nrules + 1, sizeof *off);
    uint32_t *to = NULL, *stack = xmalloc((g->nnodes + 1) * sizeof *stack);
    uint32_t *seen = xcalloc(g->nnodes + 1, sizeof *seen);
    size_t nto = 0, cap = 0;
    for (uint32_t r = 0; r < g->nrules; r++) {
        left_calls(g, r, nn, stack, seen, r + 1, &to, &nto, &cap);
        off[r + 1] = (uint32_t)nto;
    }
    free(seen);
    /* Cycle search: iterative depth-first with colours (0 new, 1 on the path, 2 done). */
    uint8_t *colour = xcalloc(g->nrules, 1);
    uint32_t *pos = xmalloc(g->nrules * sizeof *pos);
    int rc = 0;
    for (uint32_t r0 = 0; r0 < g->nrules && !rc; r0++) {
        if (colour[r0]) continue;
        uint32_t sp = 0;
        stack[sp++] = r0;
        colour[r0] = 1;
        pos[r0] = off[r0];
        while (sp && !rc) {
            uint32_t r = stack[sp - 1];
            if (pos[r] == off[r + 1]) {
                colour[r] = 2;
                sp--;
                continue;
            }
            uint32_t s = to[pos[r]++];
            if (colour[s] == 1) {
                rc = err_set("$ref loop without progress: %s can reach itself before any text",
                             rule_name[s]);
            } else if (colour[s] == 0) {
                colour[s] = 1;
                pos[s] = off[s];
                stack[sp++] = s;
            }
        }
    }
    free(colour);
    free(pos);
    free(off);
    free(to);
    free(stack);
    return rc;
}

/* Removes edges into unproductive nodes and calls that cannot complete, in place. */
static void prune(grammar *g, const uint8_t *pr) {
    uint32_t ne = 0, nc = 0;
    for (uint32_t i = 0; i < g->nnodes; i++) {
        gr_node *n = &g->nodes[i];
        uint32_t e0 = ne, c0 = nc;
        for (uint32_t k = 0; k < n->nedge; k++) {
            gr_edge e = g->edges[n->edge0 + k];
            if (pr[e.to]) g->edges[ne++] = e;
        }
        for (uint32_t k = 0; k < n->ncall; k++) {
            gr_call c = g->calls[n->call0 + k];
            if (pr[g->rule_start[c.rule]] && pr[c.ret]) g->calls[nc++] = c;
        }
        n->edge0 = e0;
        n->nedge = ne - e0;
        n->call0 = c0;
        n->ncall = nc - c0;
    }
    g->nedges = ne;
    g->ncalls = nc;
}

/* first[n]: the bytes n can read next, through calls (and past nullable callees). */
static void first_pass(const grammar *g, int *changed) {
    for (uint32_t i = g->nnodes; i-- > 0;) {
        const gr_node *n = &g->nodes[i];
        uint32_t f[8] = {0};
        for (uint32_t k = 0; k < n->nedge; k++) {
            const gr_edge *e = &g->edges[n->edge0 + k];
            for (unsigned c = e->lo; c <= e->hi; c++) f[c >> 5] |= 1u << (c & 31);
        }
        for (uint32_t k = 0; k < n->ncall; k++) {
            const gr_call *c = &g->calls[n->call0 + k];
            uint32_t s = g->rule_start[c->rule];
            for (int w = 0; w < 8; w++) f[w] |= g->first[s][w];
            if (g->nullable[s])
                for (int w = 0; w < 8; w++) f[w] |= g->first[c->ret][w];
        }
        for (int w = 0; w < 8; w++) {
            if ((g->first[i][w] | f[w]) != g->first[i][w]) *changed = 1;
            g->first[i][w] |= f[w];
        }
    }
}

int gr_check(grammar *g, char *const *rule_name) {
    uint8_t *nn = xcalloc(g->nnodes + 1, 1);
    int changed = 1;
    while (changed) {
        changed = 0;
        nullable_pass(g, nn, &changed);
    }
    int rc = find_left_recursion(g, nn, rule_name);
    if (rc) {
        free(nn);
        return rc;
    }
    g->nullable = nn;

    uint8_t *pr = xcalloc(g->nnodes + 1, 1);
    changed = 1;
    while (changed) {
        changed = 0;
        productive_pass(g, pr, &changed);
    }
    if (!pr[g->rule_start[g->root]]) {
        free(pr);
        return err_set("the schema has no finite instance (%s never ends: a required property "
                       "or item recurses without a way out)",
                       rule_name[g->root]);
    }
    prune(g, pr);
    free(pr);
    /* Nullability after pruning (a pruned call may have been the only empty path). */
    memset(nn, 0, g->nnodes + 1);
    changed = 1;
    while (changed) {
        changed = 0;
        nullable_pass(g, nn, &changed);
    }
    g->first = xcalloc(g->nnodes + 1, sizeof *g->first);
    changed = 1;
    while (changed) {
        changed = 0;
        first_pass(g, &changed);
    }
    return 0;
}
