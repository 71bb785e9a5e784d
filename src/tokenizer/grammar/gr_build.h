/* Building a grammar: Thompson-style NFA fragments with epsilon edges, turned by gb_finish into the
 * epsilon-free rules of gr_internal.h.
 *
 * The compilers (regex.c, json_schema.c) create rules and states and connect them with epsilon,
 * byte-range and call edges. Every state belongs to one rule; each rule has one start and one end
 * state. Limits: past GRAMMAR_MAX_STATES states the builder records an error (b->failed) and hands
 * out state 0 from then on, so a compiler may carry on blindly and check b->failed at the end. */
#ifndef GPTOSS_GRAMMAR_GR_BUILD_H
#define GPTOSS_GRAMMAR_GR_BUILD_H

#include "tokenizer/grammar/gr_internal.h"

#include <stddef.h>
#include <stdint.h>

enum { GB_EPS, GB_BYTES, GB_CALL };

typedef struct {
    uint32_t from, to, rule; /* rule: the callee of a GB_CALL */
    uint8_t kind, lo, hi;
} gb_arc;

typedef struct {
    gb_arc *arcs;
    size_t narcs, acap;
    uint32_t *state_rule;
    uint32_t nstates, scap;
    uint32_t *rule_start, *rule_end;
    char **rule_name; /* for messages: the schema path or "regex" */
    uint32_t nrules, rcap;
    int failed;
} gbuild;

void gb_init(gbuild *b);
void gb_free(gbuild *b);
/* A new rule (its start and end states made); name is copied. */
uint32_t gb_rule(gbuild *b, const char *name);
uint32_t gb_state(gbuild *b, uint32_t rule);
void gb_eps(gbuild *b, uint32_t from, uint32_t to);
void gb_bytes(gbuild *b, uint32_t from, uint8_t lo, uint8_t hi, uint32_t to);
void gb_call(gbuild *b, uint32_t from, uint32_t rule, uint32_t to);
/* A chain of states reading the bytes s[0..n) from `from` to `to`. */
void gb_literal(gbuild *b, uint32_t from, const void *s, size_t n, uint32_t to);
/* Records an error (the first one wins) and marks the build failed; returns -1. */
int gb_fail(gbuild *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The finished grammar with `root` as its root rule, checked (left recursion, dead ends); NULL +
 * err_set() when the build failed or a check refuses it. The builder is left as it was. */
grammar *gb_finish(gbuild *b, uint32_t root);

#endif
