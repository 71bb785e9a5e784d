/* The engine: continuous batching over the backend, one thread owning all scheduling state.
 *
 * Requests come in through engine_submit / engine_abort, which are thread-safe (they only touch an
 * inbox). Everything else happens on the engine's thread: engine_step() runs one iteration —
 * take the inbox, schedule, launch a step on the backend, collect the previous step's tokens, apply
 * stop conditions and stream outputs through each request's callback. engine_start() runs that loop on
 * a thread of its own (the server); offline tools call engine_step() themselves.
 *
 * Asynchronous scheduling (on by default): while the backend computes step N the engine already
 * builds step N+1, assuming every sequence that samples in step N gets one token (which the backend
 * feeds back on the device, see STEP_TOKEN_FROM_DEVICE); when step N's tokens arrive, sequences that
 * stopped simply ignore what step N+1 computed for them. Turning it off runs schedule → launch → wait
 * in order, which must give the same tokens. */
#ifndef GPTOSS_ENGINE_ENGINE_H
#define GPTOSS_ENGINE_ENGINE_H

#include "step/backend.h"
#include "engine/constraint.h"
#include "engine/metrics.h"
#include "step/sampling_params.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct engine engine;

/* What a request's callback receives: the tokens generated since the previous event (streamed every
 * stream_interval tokens, the first at once), and at the end finished = true. Pointers are valid only
 * during the call. */
typedef struct {
    uint64_t request_id;
    int index;              /* which of the request's n sequences */
    const int32_t *tokens;  /* new tokens */
    const float *logprobs;  /* logprob of each new token */
    const int32_t *top_ids; /* [n_tokens * top_k] when logprobs were asked */
    const float *top_logprobs;
    int n_tokens, top_k;
    /* prompt logprobs (first event only): rows for prompt positions 1..prompt_len-1 */
    const int32_t *prompt_top_ids;
    const float *prompt_top_logprobs;
    const float *prompt_logprobs; /* [n_prompt_rows]: each prompt token's own logprob (NaN where a
                                     backend gave none) */
    int n_prompt_rows, prompt_k;
    bool finished;
    const char *finish_reason; /* "stop", "length", "abort" or "error" */
    int32_t stop_token;        /* the stop token id that ended it, or -1 */
    int stop_string;           /* index of the stop string that ended it, or -1 */
    int trim_bytes; /* when a stop string ended it: bytes at the end of the generated text
                                  (decoded) to drop — the stop string and anything after it */
    int prompt_tokens, cached_tokens, completion_tokens;
    double ttft, e2e; /* seconds, at finish */
} engine_output;

typedef void (*engine_output_fn)(const engine_output *out, void *user);

typedef struct {
    uint64_t id;
    const int32_t *prompt; /* copied by engine_submit */
    int n_prompt;
    sampling_params params;        /* logit_bias is copied too */
    int max_tokens;                /* <= 0: up to the model length */
    const int32_t *stop_token_ids; /* in addition to the model's (unless ignore_eos) */
    int n_stop_token_ids;
    const char *const *stop_strings; /* copied */
    int n_stop_strings;
    /* Where stop strings apply. 0: the whole generated text. Otherwise a token id (harmony's
     * <|message|>): only message bodies — the ordinary tokens from the start of the output, or
     * after that token, up to the next token without text (a special token: token_bytes gives
     * none) — each body matched on its own, so that no stop string matches a header ("analysis",
     * " to=functions.f", "json": the text between a special token and <|message|>) or spans two
     * messages. */
    int32_t stop_body_token;
    bool ignore_eos;
    int priority; /* lower runs first (vLLM's convention); ties: arrival order */
    int n;        /* independent samples of the same prompt (>= 1) */
    /* Structured output (constraint.h), or NULL: each sequence takes a reference. */
    engine_constraint *constraint;
    engine_output_fn on_output;
    void *user;
} engine_request;

typedef struct {
    int max_num_seqs;           /* --max-num-seqs */
    int max_num_batched_tokens; /* --max-num-batched-tokens (chunked prefill budget per step) */
    int max_model_len;          /* --max-model-len */
    int stream_interval;        /* --stream-interval */
    bool enable_prefix_caching;
    bool async_scheduling;
    int max_waiting; /* submissions beyond this many waiting are refused (0 = no limit) */
    /* --target-tpot-ms: while sequences decode, a step carries only as many prompt tokens as keep
     * it within this many milliseconds, by the steps' cost as measured (step_cost.h); at least one
     * block's worth, so prompts always advance. 0 = off (the budget is max_num_batched_tokens). */
    double target_tpot_ms;
    /* The model's bytes of a token, for stop strings (NULL: stop strings are refused). Special
     * tokens must give none: stop strings match the text a client sees, which never shows them
     * (the API cuts the same bytes, counting special tokens as empty). */
    const char *(*token_bytes)(void *ctx, int32_t id, size_t *len);
    void *token_bytes_ctx;
    /* The tokenizer's vocabulary trie for structured output (NULL: constrained requests are
     * refused). Not owned; must outlive the engine. */
    const grammar_vocab *grammar_vocab;
    /* --data-parallel-size (DEP; 0 or 1: off). Must equal the backend's (backend_options): the
     * engine then keeps one KV pool pair per rank (block_manager.h), places each new sequence on a
     * rank and lays every step out rank by rank (scheduler.c). */
    int data_parallel_size;
} engine_options;

void engine_options_default(engine_options *o);

/* Takes ownership of the backend. */
int engine_create(const engine_options *opt, const backend_ops *ops, backend *b, engine **out);
void engine_destroy(engine *e);

/* Thread-safe. Validates the request (prompt within the model length and vocabulary, parameters in
 * range) and queues it; -1 with err_set on refusal (the message names the field). */
int engine_submit(engine *e, const engine_request *r);
/* Thread-safe; cancels a queued or running request at the next step (its callback gets a final
 * "abort" event). Unknown ids are ignored. */
void engine_abort(engine *e, uint64_t request_id);

/* One iteration on the calling thread. Returns 1 if work remains (running, waiting or in flight),
 * 0 when idle, -1 on a backend failure (every request then finishes with "error"). */
int engine_step(engine *e);
/* Steps until idle (offline use). */
int engine_run_until_idle(engine *e);

/* The engine's own thread (server): starts, and stops after finishing in-flight work. */
int engine_start(engine *e);
void engine_stop(engine *e);

/* A consistent copy of the counters, from any thread. */
void engine_get_metrics(engine *e, engine_metrics *out);

#endif
