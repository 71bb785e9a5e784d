/* Per-request sampling parameters, with the OpenAI/vLLM meanings. The engine copies them into every
 * step that samples the request; the backends implement them (CPU in step/sampler.c, CUDA on the
 * device) with identical semantics:
 *   1. logits += logit_bias; repetition penalty (vLLM's: divide positive logits, multiply negative,
 *      for tokens seen in prompt or output), then presence/frequency penalties over output tokens;
 *   2. greedy when temperature == 0: argmax (lowest id on ties);
 *   3. otherwise logits / temperature, then top_k, top_p and min_p filtering, then a draw from the
 *      renormalised distribution with a random number keyed by (seed, output position) only — so the
 *      same seed gives the same tokens whatever else is in the batch.
 * Logprobs are of the distribution after step 1 and the temperature, before filtering (what was
 * "drawn from"); with temperature 0 the plain softmax. */
#ifndef GPTOSS_STEP_SAMPLING_PARAMS_H
#define GPTOSS_STEP_SAMPLING_PARAMS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    int32_t token;
    float bias;
} logit_bias_entry;

typedef struct {
    float temperature;        /* 0 = greedy */
    float top_p;              /* 1 = off */
    int32_t top_k;            /* 0 or -1 = off */
    float min_p;              /* 0 = off */
    float presence_penalty;   /* 0 = off */
    float frequency_penalty;  /* 0 = off */
    float repetition_penalty; /* 1 = off */
    uint64_t seed;            /* used when has_seed; otherwise the engine draws one per request */
    bool has_seed;
    int32_t logprobs;                   /* top logprobs per generated token; 0 = none */
    int32_t prompt_logprobs;            /* top logprobs per prompt position; 0 = none */
    const logit_bias_entry *logit_bias; /* owned by the request */
    int32_t n_logit_bias;
    /* Structured output: the row is sampled under a token mask the engine publishes with the step
     * (step_masks.h). Backends sample such rows on the host, mask first (before bias, penalties
     * and the temperature), so logprobs are those of the constrained distribution. */
    bool constrained;
} sampling_params;

static inline sampling_params sampling_params_default(void) {
    sampling_params p = {0};
    p.temperature = 1.0f;
    p.top_p = 1.0f;
    p.repetition_penalty = 1.0f;
    return p;
}

#endif
