/* The inside of a compiled grammar, shared by the files of src/grammar/.
 *
 * A grammar is a list of rules. Each rule is an epsilon-free NFA over bytes whose nodes are numbered
 * globally (a node belongs to one rule). A node has:
 *   - byte edges: read one byte in [lo, hi], go to another node of the same rule;
 *   - call edges: push the return node `ret` (same rule), continue at the start node of `rule`;
 *     when that rule reaches a final node, pop and continue at `ret`;
 *   - a final flag: the rule may end here.
 * The grammar's root rule ending with an empty stack is a complete output.
 *
 * The build guarantees (gr_finish): no rule can call itself without reading a byte first (no left
 * recursion, so following calls never loops), and every node left can reach a final node (no dead
 * ends: whatever a matcher accepted can always be completed). */
#ifndef GPTOSS_GRAMMAR_GR_INTERNAL_H
#define GPTOSS_GRAMMAR_GR_INTERNAL_H

#include "tokenizer/grammar/grammar.h"

#include <pthread.h>
#include <stdint.h>

typedef struct {
    uint8_t lo, hi;
    uint32_t to;
} gr_edge;

typedef struct {
    uint32_t rule, ret;
} gr_call;

typedef struct {
    uint32_t edge0, nedge; /* g->edges[edge0 .. edge0 + nedge) */
    uint32_t call0, ncall; /* g->calls[call0 .. call0 + ncall) */
    uint32_t rule;
    uint8_t final;
} gr_node;

typedef struct gr_table gr_table; /* token_table.c */

struct grammar {
    gr_node *nodes;
    uint32_t nnodes;
    gr_edge *edges;
    uint32_t nedges;
    gr_call *calls;
    uint32_t ncalls;
    uint32_t *rule_start; /* [nrules] */
    uint32_t nrules, root;
    /* Per node: can it reach a final node without reading (through nullable calls), and the bytes
     * it can read next inside its rule (through calls, not past its rule's end). gr_check makes
     * them; the matcher uses them to skip work (and pushes) that cannot match. */
    uint8_t *nullable;
    uint32_t (*first)[8];
    /* Token tables, one per node, filled on first use under `lock` (token_table.c). */
    pthread_mutex_t lock;
    const grammar_vocab *vocab; /* the vocab the tables were made for */
    gr_table **tables;          /* [nnodes] */
};

typedef struct {
    uint64_t k0, k1; /* a 128-bit fingerprint (table_cache.c) */
    gr_table *t;
} gr_cache_entry;

/* The vocabulary trie (vocab.c), in preorder: node i's subtree is [i, end[i]). The root (the empty
 * string) is implicit; top-level nodes have depth 1. */
struct grammar_vocab {
    const tokenizer *tok;
    int vocab_size, bpe_size;
    uint32_t nnodes;
    uint8_t *byte;  /* the byte that leads to node i */
    uint8_t *depth; /* its depth (bytes from the root) */
    uint32_t *end;  /* one past its subtree */
    int32_t *token; /* the token whose bytes end here, -1 if none */
    /* Tokens whose bytes equal an earlier token's (none in o200k; kept for other vocabularies):
     * dup_of[k] shares the trie node of dup_tok[k]. */
    int32_t *dup_tok, *dup_of;
    size_t ndup;
    /* Token tables shared by every grammar (table_cache.c), under cache_lock. */
    pthread_mutex_t cache_lock;
    gr_cache_entry *cache;
    size_t ncache, cache_cap, cache_bytes;
};

void gr_table_free(gr_table *t);
void gr_cache_free(grammar_vocab *v);
const gr_table *gr_table_get(grammar *g, const grammar_vocab *v, uint32_t node);

#endif
