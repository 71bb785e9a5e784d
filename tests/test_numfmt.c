/* Number formats: bf16 rounding, MXFP4 decoding (low nibble first, scale 2^(S-127)), encode/decode. */
#include "check.h"

#include "base/numfmt.h"

int main(void) {
    /* bf16: widening is exact; narrowing rounds to nearest, ties to even. */
    CHECK(bf16_to_f32(0x3f80) == 1.0f, "1.0");
    CHECK(bf16_to_f32(0xc040) == -3.0f, "-3.0");
    CHECK(f32_to_bf16(1.0f) == 0x3f80, "1.0 -> bf16");
    CHECK(f32_to_bf16(1.00390625f) == 0x3f80, "tie rounds to even (down)"); /* 1 + 2^-8 */
    CHECK(f32_to_bf16(1.01171875f) == 0x3f82, "tie rounds to even (up)");   /* 1 + 3*2^-8 */
    CHECK(f32_to_bf16(1.0078125f) == 0x3f81, "exact");
    CHECK(isnan(bf16_to_f32(f32_to_bf16(NAN))), "NaN stays NaN");

    /* The e2m1 table, code by code. */
    const float expect[16] = {0,     0.5f,  1,  1.5f,  2,  3,  4,  6,
                              -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    for (int i = 0; i < 16; i++) CHECK(MXFP4_VALUES[i] == expect[i], "code %d", i);
    CHECK(signbit(MXFP4_VALUES[8]), "code 8 is -0");

    /* One block: byte j holds element 2j in its low nibble and 2j+1 in its high nibble. */
    uint8_t blocks[32], scales[2] = {127, 130};
    for (int j = 0; j < 16; j++) blocks[j] = (uint8_t)((j & 15) | ((15 - j) << 4));
    for (int j = 0; j < 16; j++) blocks[16 + j] = 0x71; /* low = 1 (0.5), high = 7 (6) */
    float out[64];
    mxfp4_decode_row(blocks, scales, 2, out);
    for (int j = 0; j < 16; j++) {
        CHECK(out[2 * j] == expect[j], "elem %d (low nibble)", 2 * j);
        CHECK(out[2 * j + 1] == expect[15 - j], "elem %d (high nibble)", 2 * j + 1);
        CHECK(out[32 + 2 * j] == 0.5f * 8, "block 1 low: %g", out[32 + 2 * j]);
        CHECK(out[32 + 2 * j + 1] == 6.0f * 8, "block 1 high: %g", out[32 + 2 * j + 1]);
    }
    CHECK(e8m0_to_f32(127) == 1.0f && e8m0_to_f32(0) == ldexpf(1, -127) &&
              e8m0_to_f32(254) == ldexpf(1, 127),
          "e8m0");

    /* Encoding: values already on the grid survive a round trip exactly; others land on the nearest. */
    float x[32], y[32];
    for (int i = 0; i < 32; i++) x[i] = expect[i % 16] * 0.25f;
    uint8_t b[16];
    uint8_t s = mxfp4_encode_block(x, b);
    mxfp4_decode_row(b, &s, 1, y);
    for (int i = 0; i < 32; i++) CHECK(y[i] == x[i], "round trip %d: %g vs %g", i, y[i], x[i]);
    CHECK(s == 125, "scale for max 1.5 is 2^-2: %d", s);
    return check_report("test_numfmt");
}
