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

/* ---- e4m3 (OCP FP8 E4M3, "e4m3fn"): the FP8 KV cache ----
 * A code is sign(1) exponent(4, bias 7) mantissa(3):
 *   E = 1..15: (-1)^s 2^(E-7) (1 + m/8)        normals, 2^-6 .. 448 (E = 15, m = 7 is NaN, not 480)
 *   E = 0:     (-1)^s 2^-6 (m/8) = m 2^-9      subnormals, 2^-9 .. 7 * 2^-9
 * There is no infinity. Three mantissa bits give a relative rounding error of at most 2^-4 for any
 * value in the normal range: like every float format, the error is relative, so a scale only has to
 * place the data inside the 2^-6 .. 448 window (17 binades, plus 3 of subnormals), not fit it
 * tightly. Every e4m3 value is exact in bf16, fp16 and fp32.
 *
 * Encoding (f32_to_e4m3) is what the GPU's cvt.rn.satfinite.e4m3x2.f32 does, bit for bit: round to
 * nearest, ties to even (also on the subnormal grid); finite values beyond 448 and +-inf saturate to
 * +-448 (0x7e / 0xfe) instead of becoming NaN; NaN gives a NaN code (0x7f, with the input's sign);
 * -0 and negative values that round to zero give 0x80. */
static inline uint8_t f32_to_e4m3(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    if (f != f) return (uint8_t)(sign | 0x7f);
    const float a = fabsf(f);
    if (a >= 448.0f) return (uint8_t)(sign | 0x7e); /* satfinite (inf included) */
    if (a < 0.015625f) {                            /* below 2^-6: multiples of 2^-9 */
        const int m = (int)nearbyintf(a * 512.0f);  /* exact product; ties to even; m <= 8 */
        return (uint8_t)(sign | m);                 /* m = 8 is 2^-6, the first normal (0x08) */
    }
    int e;
    (void)frexpf(a, &e);                       /* a = 2^(e-1) x [1, 2) */
    int m = (int)nearbyintf(ldexpf(a, 4 - e)); /* [8, 16): 8 + mantissa, rounded */
    int E = e - 1 + 7;
    if (m == 16) m = 8, E++; /* rounded up into the next binade */
    if (E > 15 || (E == 15 && m == 15)) return (uint8_t)(sign | 0x7e); /* cannot happen below 448 */
    return (uint8_t)(sign | (E << 3) | (m - 8));
}

static inline float e4m3_to_f32(uint8_t c) {
    const int E = (c >> 3) & 15, m = c & 7;
    float v;
    if (E == 15 && m == 7)
        v = NAN;
    else if (E == 0)
        v = ldexpf((float)m, -9);
    else
        v = ldexpf((float)(8 + m), E - 10);
    return (c & 0x80) ? -v : v;
}

/* The FP8 KV cache's round trip of one value: x / scale stored as e4m3, read back times scale.
 * inv_scale is 1 / scale rounded to fp32 once (the GPU multiplies by the same float), so the CPU
 * reference and the kernels store the same codes. */
static inline float e4m3_kv_roundtrip(float x, float scale, float inv_scale) {
    return e4m3_to_f32(f32_to_e4m3(x * inv_scale)) * scale;
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
