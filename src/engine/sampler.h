/* Turning logits into tokens and log-probabilities.
 *
 * Temperature 0 is greedy (argmax, lowest id on ties). Otherwise p ∝ exp(logit / T), and the draw uses
 * a counter-based random number keyed by (seed, step), so a request's tokens depend only on its seed
 * and position, never on what else ran beside it. */
#ifndef GPTOSS_ENGINE_SAMPLER_H
#define GPTOSS_ENGINE_SAMPLER_H

#include <stdint.h>

/* log(sum_i exp(logits[i] / T)) with T = 1 when temperature <= 0. */
double sampler_logsumexp(const float *logits, int n, float temperature);

/* The k most likely tokens (highest first, lowest id on ties) and their log-probabilities under the
 * distribution the sampler draws from (softmax(logits / T), or softmax(logits) when T = 0). */
void sampler_top_logprobs(const float *logits, int n, float temperature, int k, int32_t *ids, float *logprobs);

/* Draws the next token. */
int32_t sampler_pick(const float *logits, int n, float temperature, uint64_t seed, uint64_t step);

#endif
