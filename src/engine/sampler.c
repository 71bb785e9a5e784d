#include "engine/sampler.h"

#include "base/rng.h"

#include <math.h>

static double inv_temp(float temperature) { return temperature > 0 ? 1.0 / temperature : 1.0; }

double sampler_logsumexp(const float *logits, int n, float temperature) {
    double it = inv_temp(temperature), m = -INFINITY, s = 0;
    for (int i = 0; i < n; i++) m = fmax(m, logits[i] * it);
    for (int i = 0; i < n; i++) s += exp(logits[i] * it - m);
    return m + log(s);
}

void sampler_top_logprobs(const float *logits, int n, float temperature, int k, int32_t *ids, float *logprobs) {
    if (k > n) k = n;
    double lse = sampler_logsumexp(logits, n, temperature), it = inv_temp(temperature);
    /* Insertion into a sorted list of k: fine for the small k of an API (<= 20). */
    int have = 0;
    for (int i = 0; i < n; i++) {
        float v = logits[i];
        if (have == k && v <= logits[ids[k - 1]]) continue;
        int j = have < k ? have++ : k - 1;
        while (j > 0 && logits[ids[j - 1]] < v) ids[j] = ids[j - 1], j--;
        ids[j] = i;
    }
    for (int j = 0; j < k; j++) logprobs[j] = (float)(logits[ids[j]] * it - lse);
}

int32_t sampler_pick(const float *logits, int n, float temperature, uint64_t seed, uint64_t step) {
    if (!(temperature > 0)) {
        int best = 0;
        for (int i = 1; i < n; i++)
            if (logits[i] > logits[best]) best = i;
        return best;
    }
    double it = inv_temp(temperature), m = -INFINITY, z = 0;
    for (int i = 0; i < n; i++) m = fmax(m, logits[i] * it);
    for (int i = 0; i < n; i++) z += exp(logits[i] * it - m);
    double u = rng_uniform01d(rng_hash2(seed, step)) * z, c = 0;
    for (int i = 0; i < n; i++) {
        c += exp(logits[i] * it - m);
        if (c > u) return i;
    }
    return n - 1; /* rounding left u at the very top */
}
