/* The step contract: one forward step of the whole batch, described in flat arrays (cu_seqlens
 * style) so a GPU backend uploads it with one copy and replays a graph. The engine fills it; the
 * backend reads it and nothing else.
 *
 * Tokens. The step's new tokens of all sequences, concatenated: sequence i owns tokens
 * [query_start[i], query_start[i+1]) at positions [start_pos[i], start_pos[i] + n_new(i)). A token id
 * of STEP_TOKEN_FROM_DEVICE means "the token this sequence sampled in its previous step": with
 * asynchronous scheduling the engine builds step N+1 before step N's tokens reach the host, and the
 * backend keeps each slot's last sampled token where it samples.
 *
 * KV cache. Paged: fixed blocks of block_size tokens in two pools, one for the full-attention layers
 * and one for the sliding-window layers (which never need more than `window` tokens, so their pool is
 * sized and recycled separately). Position p of sequence i lives in
 *   full layers:    block full_tables[i * full_stride + p / block_size], row p % block_size
 *   sliding layers: block swa_tables[i * swa_stride + p / block_size - swa_first[i]]
 * The sliding table starts at logical block swa_first[i] because blocks that slid out of the window
 * were given back; every block the step's queries can see (the last `window` keys of each new token)
 * is present. Every layer of a kind uses the same block ids in its own per-layer storage.
 *
 * Outputs. For sequences with sample[i] set, the backend samples one token from the logits of the
 * sequence's last new token (a decode step, or the last chunk of a prefill) with params[i]. Prompt
 * logprobs, when asked, need the logits of every new token of the sequence. */
#ifndef GPTOSS_STEP_BATCH_H
#define GPTOSS_STEP_BATCH_H

#include "step/sampling_params.h"
#include "step/step_masks.h"

#include <stdbool.h>
#include <stdint.h>

#define STEP_TOKEN_FROM_DEVICE (-1)

/* The most data-parallel ranks a step can be split over (DEP, backend_options.data_parallel_size). */
#define STEP_DP_MAX 2

typedef struct {
    int n_seqs, n_tokens;
    int block_size;

    /* per token [n_tokens] */
    int32_t *token_ids;
    int32_t *positions;

    /* per sequence [n_seqs] */
    /* Prompt logprobs are computed for a sequence's step when params[i].prompt_logprobs > 0 and the
     * step's tokens are still prompt tokens (start_pos < prompt_len). */
    int32_t *slot; /* the sequence's persistent slot in the backend (its sampled-token state) */
    int32_t *query_start; /* [n_seqs + 1] */
    int32_t
        *start_pos; /* position of the sequence's first new token (= tokens already in the KV) */
    int32_t *swa_first; /* first logical block present in the sliding table */
    bool *sample;       /* sample a token after this step */
    bool *reset_slot;   /* the slot starts a new sequence: forget its penalty history */
    sampling_params *params;
    int32_t *output_len;     /* tokens generated so far (the sampling position for the seed) */
    const int32_t **history; /* prompt + generated tokens known to the engine, for the penalties;
                                NULL (length 0) when the sequence uses none. The backend appends the
                                slot's last sampled token when the step's last token is
                                STEP_TOKEN_FROM_DEVICE. Owned by the step. */
    int32_t *history_len;
    int32_t *prompt_len;
    /* With prompt logprobs: the prompt token after the step's last new token (what that token's
     * row predicts, from the next chunk), or -1 when the step reaches the end of the prompt. Rows
     * before the last predict the step's own next token. NULL: -1 for every sequence. */
    int32_t *prompt_next;

    /* block tables, row-major with a stride per pool; unused entries are -1 */
    int32_t *full_tables;
    int full_stride;
    int32_t *swa_tables;
    int swa_stride;

    /* Structured output: the masks of the rows whose params[i].constrained is set, published by
     * the engine while the step runs (see step_masks.h). NULL when no row is constrained. */
    step_masks *masks;

    /* DEP (backend_options.data_parallel_size N > 1): every sequence lives on one rank, its KV in
     * that rank's pools; the step's sequences are grouped by rank in rank order, rank r's being
     * [dp_seq0[r], dp_seq0[r + 1]) (dp_seq0[0] = 0, dp_seq0[N] = n_seqs; a rank may have none),
     * and their block table entries are block ids of their rank's pools. Slots are the engine's,
     * the same numbers on every rank. dp_size 0 (a zeroed step) or 1: one rank, the default. */
    int dp_size;
    int dp_seq0[STEP_DP_MAX + 1];
} step_batch;

/* What one sequence's step produced (for sequences with sample set, in batch order). */
typedef struct {
    int32_t token;
    float logprob;    /* of the sampled token */
    int32_t n_top;    /* = params.logprobs */
    int32_t *top_ids; /* [n_top], owned by the result */
    float *top_logprobs;
    /* prompt logprobs (params.prompt_logprobs > 0): for each new token j of this step, the top-K of
     * the next-token distribution after it, i.e. of position start_pos + j + 1; the engine keeps the
     * rows that fall inside the prompt (vLLM's convention: position 0 has none) */
    int32_t n_prompt_rows, prompt_k;
    int32_t *prompt_top_ids; /* [n_prompt_rows * prompt_k] */
    float *prompt_top_logprobs;
    /* [n_prompt_rows]: row j's logprob of the prompt token it predicts (echo scoring: each prompt
     * token's own logprob, in or out of the top-K); NaN where there is none (past the prompt) */
    float *prompt_token_logprobs;
} seq_result;

typedef struct {
    int n;            /* number of sequences that sampled */
    seq_result *seqs; /* [n_seqs of the step]; entries without sample set are zero */
    double seconds;   /* how long the step ran, as the backend measured it (0: unknown) */
} step_result;

void step_result_free(step_result *r, int n_seqs);

#endif
