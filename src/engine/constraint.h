/* Structured output in the engine: what a request's output must look like, and a state machine per
 * sequence that turns it into a token mask at every step and follows the sampled tokens.
 *
 * Two shapes, both described in token ids by the API layer (which knows harmony and the tokenizer;
 * the engine knows neither):
 *
 *   root      the whole output is one grammar (completions with guided_json/regex/choice): masked
 *             from the first token; the request's stop tokens are allowed once the grammar may end,
 *             and the sequence finishes ("stop") as soon as the grammar is complete and nothing can
 *             follow.
 *   messages  a harmony assistant turn (chat, responses): the output is a series of messages, each
 *             a header (e.g. <|channel|>final<|message|>, constrained to one of the listed headers
 *             token by token) and a body:
 *               free       not masked at all (the same tokens as without a constraint);
 *               reasoning  free too, but its tokens count against the reasoning budget; once the
 *                          budget is spent the body is closed (<|end|> forced) and no further
 *                          reasoning header is offered, so the next message is an answer;
 *               grammar    masked by the grammar; its closing token (<|return|>, <|call|>) is allowed
 *                          once the grammar may end and forced once nothing else can follow.
 *             A body closed by the "continue" token (<|end|>) is followed by the restart tokens
 *             (<|start|>assistant), forced, then a new header.
 *
 * A spec is built once per request off the engine thread, is immutable afterwards and shared by
 * the request's sequences (reference counted); its grammars are owned by it. */
#ifndef GPTOSS_ENGINE_CONSTRAINT_H
#define GPTOSS_ENGINE_CONSTRAINT_H

#include "tokenizer/grammar/grammar.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct engine_constraint engine_constraint;

typedef enum { CONSTRAINT_FREE, CONSTRAINT_REASONING, CONSTRAINT_GRAMMAR } constraint_body;

/* Limits (what one request may list). */
enum { CONSTRAINT_MAX_MESSAGES = 512, CONSTRAINT_MAX_HEAD = 256 };

engine_constraint *constraint_new_root(grammar *g); /* takes g */
/* cont: the token that closes a message and lets another follow (<|end|>); restart: the tokens
 * that open the next message ("<|start|>assistant"). */
engine_constraint *constraint_new_messages(int32_t cont, const int32_t *restart, int n_restart);
/* One header the output may open (ending with <|message|>), its body and the token that closes
 * the body. g: the body's grammar (CONSTRAINT_GRAMMAR only; taken). -1 + err_set past the limits. */
int constraint_add_message(engine_constraint *c, const int32_t *head, int n_head,
                           constraint_body body, grammar *g, int32_t close);
/* Tokens of reasoning bodies allowed in all (< 0: no limit; 0: no reasoning at all). */
void constraint_set_reasoning_budget(engine_constraint *c, int budget);
engine_constraint *constraint_ref(engine_constraint *c);
void constraint_unref(engine_constraint *c);

/* One sequence's position in its constraint. Engine thread only. */
typedef struct constraint_state constraint_state;

constraint_state *constraint_state_new(engine_constraint *c, const grammar_vocab *v);
void constraint_state_free(constraint_state *s);
/* The mask of the next token (grammar_mask_words(v) words). stop_ids: the sequence's stop tokens
 * (allowed when a root grammar may end). Returns false, mask untouched, where the output is free. */
bool constraint_fill_mask(constraint_state *s, uint32_t *mask, const int32_t *stop_ids, int n_stop);
/* Follows a sampled token: 0, 1 when the output is complete and must end here (a root grammar that
 * nothing can follow), -1 + err_set when the token breaks the constraint (it is then dropped: the
 * rest of the output is free). */
int constraint_advance(constraint_state *s, int32_t tok);
/* Whether the next token is masked (constraint_fill_mask would return true); false in free bodies. */
bool constraint_needs_mask(const constraint_state *s);
/* Nothing is constrained any more (the constrained part ended, or was broken). */
bool constraint_done(const constraint_state *s);
/* Reasoning tokens counted so far. */
int constraint_reasoning_used(const constraint_state *s);

#endif
