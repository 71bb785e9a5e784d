/* Token tables: what a mask needs from one automaton node, computed once.
 *
 * For node n of rule R, walk the vocabulary trie from the single stack "n above an unknown
 * context" (GR_CTX). Each token falls in one of three classes:
 *   - accepted: its bytes can all be read without leaving R's frame (calls that R makes are pushed
 *     and popped inside the walk, so they are known). Such a token is allowed whatever the stack
 *     below n holds: context-independent.
 *   - rejected: every path dies inside R's frame. Never allowed from n, whatever the stack.
 *   - context-dependent: after d >= 1 of its bytes R may end (its frame would pop), and the rest
 *     must be read by whatever is below. Only these are looked at when a mask is made.
 * (A pop before the first byte is not needed here: the matcher's state already holds the popped
 * stack as a member of its own; see gr_stack.h.)
 *
 * The context-dependent tokens are kept by their remainders ("suffixes"): many tokens share one
 * (abc", and xyz", both leave ","), so the suffixes are merged into a small trie whose nodes list
 * the tokens that end there; the mask walks that trie once with the real stack. A pop point with
 * a large subtree (a blank before anything: " the", " {", ...) is kept as a reference to the
 * vocabulary trie instead, walked in place, which prunes at its first byte.
 *
 * The accepted tokens are stored as a bitmask when that is smaller than a list of ids. */
#ifndef GPTOSS_GRAMMAR_TOKEN_TABLE_H
#define GPTOSS_GRAMMAR_TOKEN_TABLE_H

#include "tokenizer/grammar/gr_internal.h"

#include <stdint.h>

struct gr_table {
    uint32_t *bits; /* accepted, as a bitmask of grammar_mask_words words; or NULL and: */
    int32_t *ids;   /* accepted, as a list */
    uint32_t nids;
    uint32_t *big; /* vocabulary trie nodes X: tokens below X continue in the context after X */
    uint32_t nbig;
    /* The merged suffix trie, in preorder (like grammar_vocab's). */
    uint32_t nsuf;
    uint8_t *sbyte, *sdepth;
    uint32_t *send;
    uint32_t *stok0; /* [nsuf + 1]: node i ends the tokens stoks[stok0[i] .. stok0[i + 1]) */
    int32_t *stoks;
    uint8_t shared; /* owned by the vocab's cache, not by one grammar */
};

/* Builds the table of `node` (the caller holds the grammar's lock). */
gr_table *gr_table_build(const grammar *g, const grammar_vocab *v, uint32_t node);

#endif
