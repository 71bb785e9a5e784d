/* How long a step takes, learned from the steps that ran, so that the scheduler can size the prefill
 * chunk it puts beside the decodes (--target-tpot-ms, issue 14: "the token budget per step chosen by
 * measurement so that TPOT stays within each interactivity level").
 *
 * Why: with chunked prefill every running decode waits for the whole step, so a step that carries
 * 8,192 prompt tokens holds every user's next token for the prefill's time (~0.4 s for the 120b on an
 * H200): the mean time per output token of everyone running jumps. vLLM leaves the trade-off to a
 * fixed --max-num-batched-tokens; here the budget follows the model below, step by step.
 *
 * The model: seconds = a + b * seqs + c * tokens, fitted by exponentially weighted least squares over
 * the recent steps (each step's time as the backend measured it: the GPU's own events on CUDA). The
 * terms: a the fixed cost of a step (weights streamed once, launches), b per sequence (its KV reads,
 * sampling), c per token (the matrix work a prefill token adds). Forgetting (weight 0.98 a step,
 * about the last 50 steps) lets it follow the context growing and the batch changing. */
#ifndef GPTOSS_ENGINE_STEP_COST_H
#define GPTOSS_ENGINE_STEP_COST_H

#include <stdint.h>

typedef struct {
    double m[3][3], v[3]; /* the weighted normal equations: sum w x x^T and sum w x y */
    int n;                /* steps observed */
} step_cost;

void step_cost_init(step_cost *c);
/* A step of `seqs` sequences and `tokens` tokens in total took `seconds`. */
void step_cost_observe(step_cost *c, int seqs, int64_t tokens, double seconds);
/* The predicted seconds of such a step; -1 while the model knows too little (fewer than 8 steps, or
 * steps that never varied enough to tell the terms apart). */
double step_cost_predict(const step_cost *c, int seqs, int64_t tokens);
/* The most prompt tokens a step of `decodes` one-token sequences plus `prefills` prefilling ones
 * may carry for it to take at most `target` seconds; at least `floor` (so prompts always advance),
 * at most `cap`. `cap` while the model knows too little. */
int64_t step_cost_prefill_budget(const step_cost *c, int decodes, int prefills, double target,
                                 int64_t floor, int64_t cap);

#endif
