#include "base/numfmt.h"

const float MXFP4_VALUES[16] = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                                -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

void mxfp4_decode_row(const uint8_t *blocks, const uint8_t *scales, int n_blocks, float *out) {
    for (int g = 0; g < n_blocks; g++) {
        float scale = e8m0_to_f32(scales[g]);
        const uint8_t *b = blocks + (size_t)g * 16;
        float *o = out + (size_t)g * 32;
        for (int j = 0; j < 16; j++) {
            o[2 * j] = MXFP4_VALUES[b[j] & 0x0f] * scale;
            o[2 * j + 1] = MXFP4_VALUES[b[j] >> 4] * scale;
        }
    }
}

static uint8_t nearest_code(float v) {
    float a = fabsf(v);
    int best = 0;
    float best_err = INFINITY;
    for (int c = 0; c < 8; c++) {
        float err = fabsf(a - MXFP4_VALUES[c]);
        if (err < best_err) best_err = err, best = c;
    }
    return (uint8_t)(best | (v < 0 && best ? 8 : 0));
}

uint8_t mxfp4_encode_block(const float *x, uint8_t out[16]) {
    float amax = 0;
    for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
    int e = 0;
    if (amax > 0) {
        frexpf(amax / 6.0f, &e); /* amax/6 = m * 2^e, m in [0.5, 1) => 2^e >= amax/6 */
        if (ldexpf(6.0f, e - 1) >= amax) e -= 1;
    }
    int s = e + 127;
    if (s < 0) s = 0;
    if (s > 254) s = 254;
    float inv = ldexpf(1.0f, 127 - s);
    for (int j = 0; j < 16; j++) {
        uint8_t lo = nearest_code(x[2 * j] * inv), hi = nearest_code(x[2 * j + 1] * inv);
        out[j] = (uint8_t)(lo | (hi << 4));
    }
    return (uint8_t)s;
}
