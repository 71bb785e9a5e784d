/* A sequence: one of a request's n samples, from submission to release, and the memory it owns.
 *
 * seq.c is the only file that allocates or frees a sequence's arrays (tokens, logprob rows, prompt
 * rows, the text kept for stop strings). It knows nothing of the engine: engine.c (the loop),
 * scheduler.c (what runs next) and output.c (stop checks and streaming) call it, it calls none of
 * them, so the sequence code sits below all three and no call loop runs through it. */
#ifndef GPTOSS_ENGINE_SEQ_H
#define GPTOSS_ENGINE_SEQ_H

#include "engine/block_manager.h"
#include "engine/engine.h"
#include "engine/stop_set.h"
#include "model/config.h"
#include "step/batch.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { SEQ_WAITING, SEQ_RUNNING, SEQ_FINISHED } seq_status;

typedef struct seq seq;
struct seq {
    uint64_t request_id;
    int index;   /* of the request's n */
    seq *parent; /* index > 0: admitted once the parent's prompt is cached, to share its blocks */
    seq_status status;
    int priority;
    uint64_t arrival; /* submission order, for FCFS among equal priorities */

    /* tokens: prompt followed by the generated tokens known on the host */
    int32_t *tokens;
    int64_t n_known, cap;
    int64_t prompt_len;
    int n_pending;         /* sampled by a launched step, not yet known here (0 or 1) */
    int64_t num_scheduled; /* KV positions computed or being computed by launched steps */
    int64_t num_computed;  /* KV positions whose step has completed */
    int n_output;          /* generated tokens known here */
    int inflight;          /* launched steps containing this sequence, not yet processed */
    int slot;              /* backend slot, -1 when none */
    bool slot_fresh;       /* first step since the slot was taken */
    bm_seq kv;
    int64_t cached_tokens; /* prompt tokens found in the prefix cache at first admission */
    bool admitted_once;

    sampling_params params;
    logit_bias_entry *logit_bias;
    int max_tokens;
    int32_t *stop_ids;
    int n_stop_ids;
    stop_set *stops;         /* the request's stop strings, shared by its sequences; NULL: none */
    uint32_t *stop_state;    /* per stop string: its matcher's state over the generated text */
    int32_t stop_body_token; /* engine_request.stop_body_token */
    bool in_stop_body;       /* with stop_body_token: inside a message body (true at the start) */
    engine_output_fn on_output;
    void *user;
    constraint_state *cs; /* structured output, or NULL (set by engine_submit; freed here) */

    /* output streaming */
    int emitted;      /* generated tokens already sent to the callback */
    float *logprobs;  /* per generated token */
    int32_t *top_ids; /* [n_output * params.logprobs] */
    float *top_logprobs;
    int32_t *prompt_top_ids; /* [(prompt_len - 1) * prompt_logprobs], filled as chunks complete */
    float *prompt_top_logprobs;
    float *prompt_logprobs; /* [prompt_len - 1]: each prompt token's own logprob (positions 1..) */
    int64_t prompt_rows_done; /* prompt positions 1..prompt_rows_done have rows */
    bool prompt_rows_sent;
    int64_t *text_ends; /* with stop strings: bytes of generated text up to each output token */
    int text_ends_cap;
    const char *finish_reason;
    int32_t stop_token;
    int stop_string;
    int trim_bytes;
    bool final_sent;

    double t_arrival, t_first_token, t_last_token;
    seq *next; /* intrusive list link (waiting / running / finished lists) */
};

typedef struct {
    seq *head, *tail;
    int n;
} seq_list;

/* lists */
void seq_list_push(seq_list *l, seq *s);
void seq_list_remove(seq_list *l, seq *s);
/* Inserts by (priority, arrival). */
void seq_list_insert_ordered(seq_list *l, seq *s);

/* The index-th sample of a validated request, with copies of everything it points to. max_model_len
 * caps the generated tokens; cfg gives the model's eos tokens (stop tokens unless ignore_eos). */
seq *seq_create(const engine_request *r, int index, seq *parent, int max_model_len,
                const model_config *cfg);
void seq_destroy(seq *s);

/* Stores a generated token with its logprob and top-logprob row; the stop checks are output.c's. */
void seq_store_token(seq *s, int32_t tok, const seq_result *r);
/* Keeps the prompt-logprob rows of a step that computed prompt positions from start_pos on. */
void seq_record_prompt_rows(seq *s, int64_t start_pos, const seq_result *r);
/* Records that output token n_output - 1 brought the generated text to text_end bytes. */
void seq_note_text_end(seq *s, int64_t text_end);

#endif
