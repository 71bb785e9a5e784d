/* YaRN rotary position embedding as gpt-oss uses it.
 *
 * Half-split pairing (dimension i rotates with i + d/2, "NeoX style") over the whole head. The
 * frequencies blend the original RoPE frequency (fast dimensions, i <= low) with the frequency divided
 * by `factor` (slow dimensions, i >= high) along a linear ramp between the correction dimensions
 * low/high, which are NOT rounded when truncate is false. cos and sin are both multiplied by the
 * "concentration" 0.1*ln(factor) + 1, so q.k scores grow by its square. */
#ifndef GPTOSS_MODEL_ROPE_H
#define GPTOSS_MODEL_ROPE_H

#include "model/config.h"

enum { ROPE_MAX_HALF = 512 };

typedef struct {
    int half;                      /* head_dim / 2 */
    float inv_freq[ROPE_MAX_HALF]; /* float32, as the reference computes it */
    float concentration;
    double low, high; /* correction range (for tests) */
} rope_table;

void rope_init(rope_table *r, const model_config *c);
/* cos/sin (already multiplied by the concentration) for one position: out arrays of r->half. */
void rope_cos_sin(const rope_table *r, int64_t pos, float *cos_out, float *sin_out);
/* Rotates one head vector x[head_dim] in place. */
void rope_apply(const rope_table *r, const float *cos_v, const float *sin_v, float *x);

#endif
