/* Step 1 of sampling: logit bias, then vLLM's repetition, frequency and presence penalties.
 *
 * The penalties depend on two facts per token — "seen anywhere in the history" and "how many times
 * in the output" — so the history is folded into a small open-addressing hash table keyed by token
 * id. That keeps the cost O(history), independent of the 201,088-entry vocabulary, and touches each
 * distinct token's logit exactly once (a token seen 50 times is divided by the penalty once, not 50
 * times). */
#include "step/sampler.h"

#include "base/xalloc.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

typedef struct {
    int32_t token; /* -1: empty slot */
    int32_t out_count;
} seen_entry;

/* Fibonacci hashing: multiply by 2^32 / phi and keep the top bits; consecutive ids spread well. */
static inline uint32_t slot_of(int32_t token, int shift) {
    return ((uint32_t)token * 0x9e3779b1u) >> shift;
}

/* A penalty that is NaN or infinite cannot mean anything useful; treat it as off rather than poison
 * the logits (the server rejects such values long before this). */
static float finite_or(float v, float off) {
    return isfinite(v) ? v : off;
}

void sampler_apply_penalties(float *logits, int vocab, const sampling_params *p,
                             const int32_t *history, int history_len, int prompt_len) {
    if (!logits || !p || vocab <= 0) return;
    for (int j = 0; j < p->n_logit_bias && p->logit_bias; j++) {
        int32_t t = p->logit_bias[j].token;
        if (t >= 0 && t < vocab) logits[t] += p->logit_bias[j].bias;
    }

    float rep = finite_or(p->repetition_penalty, 1.0f);
    float freq = finite_or(p->frequency_penalty, 0.0f);
    float pres = finite_or(p->presence_penalty, 0.0f);
    bool use_rep = rep > 0 && rep != 1.0f; /* a penalty <= 0 would flip signs: off */
    bool use_out = freq != 0 || pres != 0;
    if ((!use_rep && !use_out) || !history || history_len <= 0) return;
    if (prompt_len < 0) prompt_len = 0;
    if (prompt_len > history_len) prompt_len = history_len;
    /* Only the repetition penalty looks at the prompt. */
    int first = use_rep ? 0 : prompt_len;
    int n = history_len - first;
    if (n <= 0) return;

    /* A power-of-two table at most half full: short probe runs. Small histories stay on the stack.
     */
    int bits = 4;
    while ((1 << bits) < 2 * n) bits++;
    int size = 1 << bits, shift = 32 - bits;
    seen_entry stack_table[1024];
    seen_entry *table = size <= 1024 ? stack_table : xmalloc((size_t)size * sizeof *table);
    for (int s = 0; s < size; s++) table[s].token = -1, table[s].out_count = 0;

    for (int j = first; j < history_len; j++) {
        int32_t t = history[j];
        if (t < 0 || t >= vocab) continue;
        uint32_t s = slot_of(t, shift);
        while (table[s].token != -1 && table[s].token != t) s = (s + 1) & (uint32_t)(size - 1);
        table[s].token = t;
        if (j >= prompt_len) table[s].out_count++;
    }

    /* Each distinct token once. The order of the float operations is part of the contract (vLLM's):
     * repetition first, then the frequency term, then the presence term, each rounded to float. */
    for (int s = 0; s < size; s++) {
        int32_t t = table[s].token;
        if (t < 0) continue;
        float l = logits[t];
        if (use_rep) l = l > 0 ? l / rep : l * rep;
        if (table[s].out_count > 0) {
            l -= freq * (float)table[s].out_count;
            l -= pres;
        }
        logits[t] = l;
    }
    if (table != stack_table) free(table);
}
