/* Turning logits into tokens and log-probabilities: the CPU implementation of sampling_params.h.
 *
 * The pipeline, for one sequence (each step is a choice that a GPU implementation must repeat):
 *
 *   1. Adjust (sampler_apply_penalties, in place): logits[t] += bias for each logit_bias entry (two
 *      entries for one token both add); then, for every token that appears in the history (prompt or
 *      output), the repetition penalty: l > 0 ? l / r : l * r; then, for tokens that appear in the
 *      output, l -= frequency_penalty * (float)count, then l -= presence_penalty. Token ids outside
 *      [0, vocab) in the history or the bias list are ignored.
 *
 *   2. Clean: NaN logits count as -inf (the token can never be drawn, and never wins a tie). When any
 *      logit is +inf, the distribution is the limit of softmax: the +inf tokens share all the
 *      probability equally and every other token has none. When every logit is -inf or NaN there is
 *      nothing to prefer, so the distribution is uniform over the whole vocabulary (greedy: token 0).
 *      -0.0 and +0.0 are the same value.
 *
 *   3. Greedy when temperature is 0 (or negative, or NaN): the argmax, lowest id on ties.
 *
 *   4. Otherwise weights w_i = expf((l_i - max) / T), so the top token weighs exactly 1 and nothing
 *      overflows for any T > 0 (T = 1e-6 just drives the others to 0; T = +inf acts as FLT_MAX).
 *      Then the filters, each a set of kept tokens, intersected:
 *        top_k:  the k highest logits. TIES: a token tied with the k-th highest is kept too, so more
 *                than k tokens may survive (the rule is a threshold "l >= k-th largest", which is what a
 *                GPU computes naturally and what vLLM does). Off when k <= 0 or k >= vocab.
 *        top_p:  on the top_k-renormalised distribution, the shortest run of most likely tokens whose
 *                probability sum reaches top_p, whole tie groups at the boundary included. At least one
 *                token (the top group) survives; top_p <= 0 keeps just the top group; off when
 *                top_p >= 1 or NaN.
 *        min_p:  keep w_i >= min_p (i.e. p_i >= min_p * p_max, unchanged by renormalisation, so its
 *                place in the order does not matter). Off when <= 0 or NaN; >= 1 keeps the top group.
 *      The kept set is always {l_i >= threshold} ∩ {w_i >= min_p}; it always holds the top token.
 *
 *   5. Draw: u = rng_uniform01d(rng_hash2(seed, output_pos)) (53 bits, in [0, 1)); walk the kept tokens
 *      in increasing id order summing w_i in double, and return the first token where the running sum
 *      exceeds u * (sum of kept w_i). A token of weight 0 is never returned. The token depends only on
 *      (logits, params, seed, output_pos): never on the call order or on other sequences.
 *
 * Logprobs are of the distribution after step 1 and the temperature, before any filtering: log p_i =
 * (l_i - max) / T - log(sum_j w_j) (T = 1 when greedy). The top entries are ordered by logit, highest
 * first, lowest id on ties.
 *
 * Cost on a 201,088 vocabulary: a few linear passes, no sort of the vocabulary (about 1-2 ms on
 * one core; the single expf pass for the normaliser is the largest part). top_k, top_p and the top
 * logprobs find their threshold by a radix select on the float bits (histograms of 2048 bins,
 * refined at most twice; 256 bins for short spans) and sort only the handful of chosen entries;
 * penalties cost O(history) with a small hash table. Thread-safe: no state between calls. For a
 * GPU implementation: every filter is a threshold on the (penalised) logit plus the min_p test on
 * the weight, and the draw is a prefix sum of kept weights in id order searched for u * total, so
 * the same rules map onto parallel reductions and scans. */
#ifndef GPTOSS_STEP_SAMPLER_H
#define GPTOSS_STEP_SAMPLER_H

#include "step/sampling_params.h"

#include <stdint.h>

/* What a draw produced. The caller points top_ids/top_logprobs at buffers of at least
 * params->logprobs entries (or leaves them NULL when it wants no top entries). */
typedef struct {
    int32_t token;
    float logprob;       /* of token, under the unfiltered distribution (see above) */
    int32_t n_top;       /* entries written: min(params->logprobs, vocab), 0 without buffers */
    int32_t *top_ids;    /* in: caller's buffer; out: highest first, lowest id on ties */
    float *top_logprobs; /* in: caller's buffer */
} sample_out;

/* The entry point the CPU backend calls once per sampled sequence. logits [vocab] are modified in
 * place (bias and penalties); history holds prompt + output tokens so far, the first prompt_len of
 * them the prompt (history may be NULL when history_len is 0). output_pos is the index of the token
 * being drawn among the outputs (0 for the first). seed is p->seed when p->has_seed, else the seed
 * the engine drew for the request. out may be NULL. Returns the token, or -1 when vocab <= 0 or
 * logits or p is NULL. */
int32_t sampler_sample(float *logits, int vocab, const sampling_params *p, const int32_t *history,
                       int history_len, int prompt_len, uint64_t seed, int64_t output_pos,
                       sample_out *out);

/* Step 1 alone (what sampler_sample does first). */
void sampler_apply_penalties(float *logits, int vocab, const sampling_params *p,
                             const int32_t *history, int history_len, int prompt_len);

/* Steps 2-5 on logits that already carry bias and penalties (p's penalty fields are not looked at).
 * Same result as sampler_sample with an empty history and no bias. */
int32_t sampler_draw(const float *logits, int vocab, const sampling_params *p, uint64_t seed,
                     int64_t output_pos, sample_out *out);

/* The distribution sampler_draw draws from, densely: probs[vocab] gets the renormalised probability
 * of every kept token and 0 for the filtered ones (greedy: 1 for the argmax). For tests and tools.
 */
void sampler_filtered_probs(const float *logits, int vocab, const sampling_params *p,
                            double *probs);

/* --- The original small interface, kept for the CLI and the fixture test (same semantics as above,
 * NaN-safe): --- */

/* log(sum_i exp(logits[i] / T)) with T = 1 when temperature <= 0. */
double sampler_logsumexp(const float *logits, int n, float temperature);

/* The log-probability of token id under the same distribution as sampler_top_logprobs (the same
 * arithmetic, so a token in the top-K gets exactly its entry's value): echo scoring of a prompt
 * token that may lie outside the top-K. */
float sampler_logprob_of(const float *logits, int n, float temperature, int32_t id);

/* The k most likely tokens (highest first, lowest id on ties) and their log-probabilities under the
 * distribution the sampler draws from (softmax(logits / T), or softmax(logits) when T = 0). Writes
 * min(k, n) entries. */
void sampler_top_logprobs(const float *logits, int n, float temperature, int k, int32_t *ids,
                          float *logprobs);

/* Draws the next token with temperature only (no filters): sampler_draw with default parameters. */
int32_t sampler_pick(const float *logits, int n, float temperature, uint64_t seed, uint64_t step);

#endif
