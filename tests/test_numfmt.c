/* Number formats: bf16 rounding, MXFP4 decoding (low nibble first, scale 2^(S-127)), encode/decode. */
#include "check.h"

#include "base/numfmt.h"

/* The nearest finite e4m3 code to a by brute force over all 254 finite codes (ties: the even
 * mantissa; beyond 448: saturate), for |a| only (the sign is handled by the caller). */
static uint8_t e4m3_nearest_brute(float a) {
    if (a >= 448.0f) return 0x7e;
    int best = 0;
    double best_err = INFINITY;
    for (int c = 0; c < 0x7f; c++) { /* 0x00 .. 0x7e: the non-negative finite codes */
        const double err = fabs((double)a - (double)e4m3_to_f32((uint8_t)c));
        if (err < best_err || (err == best_err && (c & 1) == 0)) best_err = err, best = c;
    }
    return (uint8_t)best;
}

/* e4m3 (the FP8 KV cache): every code, ties, saturation, NaN, and a dense sweep of floats against a
 * brute-force nearest search. */
static void test_e4m3(void) {
    /* Known codes. */
    CHECK(e4m3_to_f32(0x00) == 0.0f && !signbit(e4m3_to_f32(0x00)), "0x00 is +0");
    CHECK(e4m3_to_f32(0x80) == 0.0f && signbit(e4m3_to_f32(0x80)), "0x80 is -0");
    CHECK(e4m3_to_f32(0x38) == 1.0f, "0x38 is 1");
    CHECK(e4m3_to_f32(0x7e) == 448.0f, "0x7e is 448, the largest");
    CHECK(e4m3_to_f32(0xfe) == -448.0f, "0xfe is -448");
    CHECK(e4m3_to_f32(0x08) == 0.015625f, "0x08 is 2^-6, the smallest normal");
    CHECK(e4m3_to_f32(0x01) == 0.001953125f, "0x01 is 2^-9, the smallest subnormal");
    CHECK(e4m3_to_f32(0x07) == 7 * 0.001953125f, "0x07 is 7 * 2^-9");
    CHECK(isnan(e4m3_to_f32(0x7f)) && isnan(e4m3_to_f32(0xff)), "0x7f and 0xff are NaN");

    /* All 256 codes: decode then encode gives the code back (NaN codes give a NaN code); values
     * strictly increase along the positive codes. */
    float prev = -1.0f;
    for (int c = 0; c < 256; c++) {
        const float v = e4m3_to_f32((uint8_t)c);
        const uint8_t back = f32_to_e4m3(v);
        if ((c & 0x7f) == 0x7f) {
            CHECK(isnan(v) && (back & 0x7f) == 0x7f, "code 0x%02x: NaN round trip", c);
            continue;
        }
        CHECK(back == c, "code 0x%02x -> %g -> 0x%02x", c, (double)v, back);
        if (c < 0x7f) {
            CHECK(v > prev || c == 0, "code 0x%02x: %g not above the previous %g", c, (double)v,
                  (double)prev);
            prev = v;
        }
        CHECK(e4m3_to_f32((uint8_t)(c ^ 0x80)) == -v, "code 0x%02x: the sign bit negates", c);
    }

    /* Ties go to the even mantissa, in the normal and the subnormal range. */
    CHECK(f32_to_e4m3(1.0625f) == 0x38, "1 + 1/16 (tie between 1 and 1.125) -> 1 (even)");
    CHECK(f32_to_e4m3(1.1875f) == 0x3a, "1.1875 (tie between 1.125 and 1.25) -> 1.25 (even)");
    CHECK(f32_to_e4m3(1.0625001f) == 0x39, "just above the tie -> 1.125");
    CHECK(f32_to_e4m3(0.5f * 0.001953125f) == 0x00, "2^-10 (tie between 0 and 2^-9) -> 0");
    CHECK(f32_to_e4m3(1.5f * 0.001953125f) == 0x02, "1.5 * 2^-9 -> 2 * 2^-9 (even)");
    CHECK(f32_to_e4m3(2.5f * 0.001953125f) == 0x02, "2.5 * 2^-9 -> 2 * 2^-9 (even)");
    CHECK(f32_to_e4m3(7.5f * 0.001953125f) == 0x08, "7.5 * 2^-9 -> 2^-6 (even, first normal)");
    CHECK(f32_to_e4m3(15.5f) == 0x58, "15.5 (tie between 15 and 16) -> 16 (even)");
    CHECK(f32_to_e4m3(-1.0625f) == 0xb8, "-1.0625 -> -1");
    CHECK(f32_to_e4m3(-1e-9f) == 0x80, "a tiny negative rounds to -0");

    /* Saturation: no value becomes NaN or wraps; +-inf saturate too. */
    const float big[] = {448.0f, 449.0f, 463.9f, 464.0f, 465.0f, 480.0f, 1e6f, 3e38f, INFINITY};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        CHECK(f32_to_e4m3(big[i]) == 0x7e, "%g saturates to 448", (double)big[i]);
        CHECK(f32_to_e4m3(-big[i]) == 0xfe, "-%g saturates to -448", (double)big[i]);
    }
    CHECK((f32_to_e4m3(NAN) & 0x7f) == 0x7f, "NaN -> a NaN code");
    CHECK(isnan(e4m3_to_f32(f32_to_e4m3(-NAN))), "-NaN stays NaN");

    /* A dense sweep: every fp32 bit pattern from 0 to 500 with a step of 2^9 ulps (~1.1M values,
     * each binade sampled 2^14 times, tie points included: they have few mantissa bits), plus the
     * exact midpoints between neighbouring codes. Each must give the brute-force nearest code. */
    long bad = 0, n = 0;
    float lim = 500.0f;
    uint32_t ulim;
    memcpy(&ulim, &lim, 4);
    for (uint32_t u = 0; u <= ulim; u += 1u << 9) {
        float a;
        memcpy(&a, &u, 4);
        const uint8_t want = e4m3_nearest_brute(a), got = f32_to_e4m3(a);
        bad += got != want, n++;
        if (got != want && bad < 5)
            fprintf(stderr, "e4m3 of %.9g: 0x%02x, nearest is 0x%02x\n", (double)a, got, want);
        bad += f32_to_e4m3(-a) != (uint8_t)(want | 0x80), n++;
    }
    for (int c = 0; c < 0x7e; c++) {
        const float mid = 0.5f * (e4m3_to_f32((uint8_t)c) + e4m3_to_f32((uint8_t)(c + 1)));
        const uint8_t got = f32_to_e4m3(mid), want = (uint8_t)((c & 1) ? c + 1 : c);
        bad += got != want, n++;
        if (got != want && bad < 10)
            fprintf(stderr, "e4m3 midpoint %.9g: 0x%02x, expected 0x%02x\n", (double)mid, got,
                    want);
    }
    CHECK(bad == 0, "e4m3 encoding: %ld of %ld values not the nearest code", bad, n);

    /* The KV round trip: x / scale stored, read back times scale; power-of-two scales are exact. */
    CHECK(e4m3_kv_roundtrip(3.0f, 0.25f, 4.0f) == 3.0f, "3 with scale 1/4");
    CHECK(e4m3_kv_roundtrip(1000.0f, 4.0f, 0.25f) == 1024.0f, "1000 with scale 4: 250 -> 256");
    CHECK(e4m3_kv_roundtrip(5000.0f, 1.0f, 1.0f) == 448.0f, "5000 with scale 1 saturates");
}

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
    test_e4m3();
    return check_report("test_numfmt");
}
