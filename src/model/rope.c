#include "model/rope.h"

#include <math.h>

/* The dimension index at which a wavelength makes `rotations` turns over the original context:
 * d * ln(L0 / (rotations * 2 pi)) / (2 ln base). */
static double correction_dim(double rotations, int dim, double base, int original_max) {
    return dim * log(original_max / (rotations * 2 * M_PI)) / (2 * log(base));
}

void rope_init(rope_table *r, const model_config *c) {
    int dim = c->head_dim;
    r->half = dim / 2;
    double low = correction_dim(c->rope_beta_fast, dim, c->rope_theta, c->rope_original_max);
    double high = correction_dim(c->rope_beta_slow, dim, c->rope_theta, c->rope_original_max);
    if (c->rope_truncate) low = floor(low), high = ceil(high);
    if (low < 0) low = 0;
    if (high > dim - 1) high = dim - 1;
    if (low == high) high += 0.001; /* avoid a zero-width ramp */
    r->low = low, r->high = high;
    for (int i = 0; i < r->half; i++) {
        /* The reference computes base^(2i/d) and the ramp in float32; so do we. */
        float freq = powf((float)c->rope_theta, (float)(2 * i) / (float)dim);
        float extrapolation = 1.0f / freq;
        float interpolation = 1.0f / ((float)c->rope_factor * freq);
        float ramp = ((float)i - (float)low) / (float)(high - low);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        float keep = 1.0f - ramp; /* weight of the original (extrapolated) frequency */
        r->inv_freq[i] = interpolation * (1.0f - keep) + extrapolation * keep;
    }
    r->concentration = (float)(0.1 * log(c->rope_factor) + 1.0);
}

void rope_cos_sin(const rope_table *r, int64_t pos, float *cos_out, float *sin_out) {
    for (int i = 0; i < r->half; i++) {
        float angle = (float)pos * r->inv_freq[i];
        cos_out[i] = cosf(angle) * r->concentration;
        sin_out[i] = sinf(angle) * r->concentration;
    }
}

void rope_apply(const rope_table *r, const float *cos_v, const float *sin_v, float *x) {
    int h = r->half;
    for (int i = 0; i < h; i++) {
        float x1 = x[i], x2 = x[i + h];
        x[i] = x1 * cos_v[i] - x2 * sin_v[i];
        x[i + h] = x2 * cos_v[i] + x1 * sin_v[i];
    }
}
