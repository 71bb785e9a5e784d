/* Running the pushdown automaton: stacks as shared frames, and sets of stacks advanced by bytes.
 *
 * A stack is a frame id. Frame (node, parent) says "at `node`, and when its rule ends, pop to the
 * stack `parent`". Frames are hash-consed in a pool: the same (node, parent) is always the same id,
 * so equal stacks compare as equal integers and a set of stacks is a sorted array of ids. The pool
 * only grows, except that rollback(mark) forgets every frame made after the mark (the frames of a
 * speculative walk); frames are chained in their hash buckets newest first, which is what makes
 * rollback a stack operation.
 *
 * A matcher state is a set of stacks closed under popping: when a member's node is final, the
 * stack its rule returns to is a member too. Calls are not expanded in the set; advance follows
 * them when the next byte comes. Two parents are special: GR_NIL below the root rule (popping it
 * means the whole output may end), and GR_CTX, "the unknown context" below the frame a token table
 * starts from (popping it means the rest of the token depends on the stack; see token_table.c). */
#ifndef GPTOSS_GRAMMAR_GR_STACK_H
#define GPTOSS_GRAMMAR_GR_STACK_H

#include "tokenizer/grammar/gr_internal.h"

#include <stdint.h>

#define GR_NIL UINT32_MAX
#define GR_CTX (UINT32_MAX - 1)

typedef struct {
    uint32_t node, parent, next; /* next: the older frame in the same hash bucket */
} gr_frame;

typedef struct {
    gr_frame *f;
    uint32_t n, cap, limit;
    uint32_t *bucket;
    uint32_t nbucket; /* a power of two */
    int overflow;     /* a cons was refused (limit reached) */
} gr_pool;

void pool_init(gr_pool *p, uint32_t limit);
void pool_free(gr_pool *p);
/* The stack (node, parent); GR_NIL with p->overflow set when the pool is full. */
uint32_t pool_cons(gr_pool *p, uint32_t node, uint32_t parent);
void pool_rollback(gr_pool *p, uint32_t mark);

typedef struct {
    uint32_t *s;
    uint32_t n, cap;
    uint8_t can_end; /* a root-level member is final: the output may end here */
    uint8_t ctx_end; /* a member right above GR_CTX is final: the context may continue */
} gr_set;

void set_free(gr_set *s);
void set_copy(gr_set *dst, const gr_set *src);
/* The set holding only `stack`, closed under popping. */
void set_single(const grammar *g, gr_pool *p, uint32_t stack, gr_set *out);
/* out = the stacks reached from `in` by reading byte c (closed, sorted, at most
 * GRAMMAR_MAX_STACKS). out may be empty: c is not allowed here. */
void set_advance(const grammar *g, gr_pool *p, const gr_set *in, uint8_t c, gr_set *out);

static inline int first_has(const grammar *g, uint32_t node, uint8_t c) {
    return (g->first[node][c >> 5] >> (c & 31)) & 1;
}

#endif
