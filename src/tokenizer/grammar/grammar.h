/* Structured output: grammars that constrain what a sequence may generate, and the token masks
 * that enforce them while sampling.
 *
 * Three kinds of constraint compile to one representation:
 *   - a JSON Schema (the subset OpenAI's strict mode documents, see json_schema.c), or "any JSON
 *     value" (json_object mode);
 *   - a regular expression (a full match of the output, see regex.c);
 *   - a choice among fixed strings.
 *
 * The representation is a pushdown automaton over bytes: a set of rules, each a small NFA whose
 * edges read a byte range or call another rule (push a return node, run the callee, pop back).
 * Recursion ($ref) is a rule calling itself. A matcher follows one output: its state is a set of
 * stacks (several when the grammar is ambiguous, e.g. anyOf branches that start alike).
 *
 * Masks: a grammar_vocab is a byte trie of the tokenizer's ordinary tokens, built once. For the
 * matcher's state, grammar_matcher_fill_mask sets bit t of a uint32 bitmask [ceil(V/32)] when
 * token t may come next. Most of that work is precomputed per automaton node (see token_table.c):
 * tokens whose fate is decided inside the node's own rule are stored once; only tokens that run
 * past the end of the rule are checked against the stack at run time. Special (harmony control)
 * tokens are never allowed: ending the constrained part is the engine's decision, which it takes
 * with grammar_matcher_can_end.
 *
 * Everything an input can make large is bounded (the limits below); a compile that would pass one
 * fails with a message naming the keyword or path, never by crashing, hanging or eating memory.
 *
 * Threads: a compiled grammar and a vocab are read-only after creation except for the lazily
 * filled token tables, which a mutex guards; one matcher belongs to one thread at a time. */
#ifndef GPTOSS_GRAMMAR_GRAMMAR_H
#define GPTOSS_GRAMMAR_GRAMMAR_H

#include "tokenizer/bpe.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Limits on inputs (a compile past one fails with a message naming it). */
#define GRAMMAR_MAX_SCHEMA_BYTES  (1 << 20) /* schema text */
#define GRAMMAR_MAX_SCHEMA_DEPTH  64        /* nesting of schema objects, as written */
#define GRAMMAR_MAX_ENUM          4096      /* values in one enum, strings in one choice */
#define GRAMMAR_MAX_LITERAL_BYTES (1 << 18) /* bytes of all enum/const/choice literals */
#define GRAMMAR_MAX_PROPERTIES    1024      /* properties of one object */
#define GRAMMAR_MAX_ITEMS_COUNT   1024      /* minItems / maxItems (each bound is unrolled) */
#define GRAMMAR_MAX_REGEX_BYTES   4096      /* one pattern */
#define GRAMMAR_MAX_REPEAT        1000      /* n and m of a regex {n,m} */
#define GRAMMAR_MAX_STATES        200000    /* automaton nodes while building */
#define GRAMMAR_MAX_ARCS          2000000   /* automaton edges after epsilon removal */

/* Limits on a matcher (what an output can make large). */
#define GRAMMAR_MAX_STACKS 256       /* parallel parses kept; more are dropped (still sound) */
#define GRAMMAR_MAX_FRAMES (1 << 22) /* stack frames a matcher holds */

typedef struct {
    /* Whitespace bytes allowed between two JSON tokens (space, tab, CR, LF). Bounded so a
     * constrained output always ends; 0 means compact JSON. Default 20. */
    int max_ws;
} grammar_options;

void grammar_options_default(grammar_options *o);

typedef struct grammar grammar;

/* Compilers: NULL + err_set() on an unsupported or oversized input. opts may be NULL. */
grammar *grammar_compile_json_schema(const char *schema, size_t len, const grammar_options *opts);
grammar *grammar_compile_json_any(const grammar_options *opts); /* any JSON value */
grammar *grammar_compile_regex(const char *pattern, size_t len);
grammar *grammar_compile_choice(const char *const *choices, const size_t *lens, size_t n);
void grammar_free(grammar *g);
/* Automaton size, for logs and tests. */
size_t grammar_num_nodes(const grammar *g);

/* The vocabulary side: a byte trie of every ordinary token of the tokenizer (which must outlive
 * it). Built once per tokenizer and shared by every grammar and matcher. */
typedef struct grammar_vocab grammar_vocab;

grammar_vocab *grammar_vocab_new(const tokenizer *tok);
void grammar_vocab_free(grammar_vocab *v);
int grammar_vocab_size(const grammar_vocab *v);
/* Token tables held in the vocab's cache, shared by all grammars (see table_cache.c). */
size_t grammar_vocab_cached_tables(const grammar_vocab *v);
/* uint32 words of a mask: ceil(vocab size / 32). */
size_t grammar_mask_words(const grammar_vocab *v);

/* One output being matched. The grammar and vocab must outlive it. */
typedef struct grammar_matcher grammar_matcher;

/* v may be NULL for a matcher that only reads bytes (no masks, no tokens). */
grammar_matcher *grammar_matcher_new(const grammar *g, const grammar_vocab *v);
/* An independent copy in the same state (for a sequence that forks: n > 1, beam, speculation). */
grammar_matcher *grammar_matcher_clone(const grammar_matcher *m);
void grammar_matcher_free(grammar_matcher *m);
/* Back to the start of the grammar. */
void grammar_matcher_reset(grammar_matcher *m);

/* Consumes bytes (all or nothing): 0 when the grammar allows them here, else -1 + err_set() with
 * the state unchanged. */
int grammar_matcher_advance_bytes(grammar_matcher *m, const void *bytes, size_t n);
/* The same for a token's bytes; special tokens are refused. */
int grammar_matcher_advance_token(grammar_matcher *m, int32_t token);
/* Whether the token could come next (0 or 1), without consuming it; -1 for a special token. */
int grammar_matcher_accepts_token(grammar_matcher *m, int32_t token);
/* The output so far is complete: the engine may end it here. */
bool grammar_matcher_can_end(const grammar_matcher *m);
/* Complete, and no byte can follow: the engine must end it here. */
bool grammar_matcher_is_terminated(const grammar_matcher *m);
/* Sets mask bit t (word t / 32, bit t % 32) exactly when token t's bytes may come next; every
 * other bit, special tokens included, is cleared. mask holds grammar_mask_words(v) words. */
void grammar_matcher_fill_mask(grammar_matcher *m, uint32_t *mask);

/* Bytes the matcher holds (its stack frames): in proportion to the output's nesting, not its
 * length (old frames are compacted away). */
size_t grammar_matcher_memory(const grammar_matcher *m);

/* Computes every token table of the grammar now instead of on first use (for a grammar that is
 * reused by many requests, or to keep the first masks cheap). */
void grammar_precompute_all(grammar *g, const grammar_vocab *v);

#endif
