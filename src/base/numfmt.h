/* Number formats of the checkpoints: bf16, MXFP4 (e2m1 codes with e8m0 block scales), fp8 e4m3.
 *
 * bf16 is the top half of an IEEE float32, so widening is a shift; narrowing rounds to nearest even.
 * MXFP4 packs two 4-bit e2m1 codes per byte, low nibble first (element 2b is the low nibble of byte b,
 * element 2b+1 the high nibble), 32 elements per block sharing one scale byte S meaning 2^(S-127). */
#ifndef GPTOSS_BASE_NUMFMT_H
#define GPTOSS_BASE_NUMFMT_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

/* e2m1: sign(1) exponent(2) mantissa(1). Magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6. */
extern const float MXFP4_VALUES[16];

/* 2^(S-127) exactly; S = 0 gives 2^-127 (a float32 subnormal), S = 255 gives 2^128 = +inf as in the
 * reference loader, which has no special case for it. */
static inline float e8m0_to_f32(uint8_t s) {
    return ldexpf(1.0f, (int)s - 127);
}

/* Decodes one MXFP4 row of n_blocks*32 elements into out. */
void mxfp4_decode_row(const uint8_t *blocks, const uint8_t *scales, int n_blocks, float *out);

/* Encodes 32 floats into one block (16 bytes) and returns its scale byte: the scale is the smallest
 * power of two that brings the block's largest magnitude within 6, codes round to nearest. */
uint8_t mxfp4_encode_block(const float *x, uint8_t out[16]);

#endif
