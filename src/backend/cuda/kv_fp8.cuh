/* Device helpers of the FP8 (e4m3) KV cache: quantising on write (rope_kv.cu) and dequantising on
 * read (attention.cu). The format and its host reference are in base/numfmt.h (f32_to_e4m3,
 * e4m3_to_f32); the scale table in attention.h.
 *
 * Why e4m3 and not e5m2: K and V are activations with a modest range; e4m3's 3 mantissa bits give a
 * relative error <= 2^-4 over 2^-6 .. 448 (17 binades, plenty for one head's values once a scale
 * places them), where e5m2's 2 bits would double the error for range we do not need.
 *
 * Writing: cvt.rn.satfinite.e4m3x2.f32 rounds two floats to nearest even and saturates finite
 * values (and infinities) beyond 448 to +-448; f32_to_e4m3 on the host is the same function bit for
 * bit (tests/test_numfmt.c, tests/gpu/test_rope_kv.cu).
 *
 * Reading: cvt.rn.f16x2.e4m3x2 turns two codes into their fp16 values, exactly: every e4m3 value is
 * an fp16 value (3 mantissa bits fit in fp16's 10, and e4m3's 2^-9 .. 448 lies inside fp16's normal
 * range 2^-14 .. 65504). NaN codes stay NaN. Then, by where the values go:
 *  - prefill, where a tile is converted once into shared memory and reused by 16 query tokens:
 *    fp16 -> fp32 -> bf16 (exact again: 3 mantissa bits fit in bf16's 7, and the range is inside
 *    bf16's), and the bf16 MMAs run unchanged;
 *  - decode, where every byte is used once and the conversion runs at the rate the bytes stream in:
 *    the fp16 values are the MMAs' operands (fp16 MMAs), one instruction per two values plus at most
 *    one byte-permute to pair the codes as a fragment wants. (Placing the bits s.eeee.mmm into fp16's
 *    fields instead, 2^-8 x the value, took a byte-permute and three logic ops per two values: 18 %
 *    slower, 183 vs 155 us at batch 64 and 8k context on the H200.) */
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

/* Two floats -> two e4m3 codes in one 16-bit word, lo in the low byte (RNE, satfinite). */
static __device__ __forceinline__ uint32_t pack_e4m3x2(float lo, float hi) {
    uint16_t r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo)); /* 1st -> high */
    return r;
}

/* Four floats -> four e4m3 codes in one word, x0 in the low byte. */
static __device__ __forceinline__ uint32_t pack_e4m3x4(float x0, float x1, float x2, float x3) {
    return pack_e4m3x2(x0, x1) | (pack_e4m3x2(x2, x3) << 16);
}

/* Two e4m3 codes (low byte first) -> bf16x2, exactly (NaN stays NaN). */
static __device__ __forceinline__ uint32_t e4m3x2_to_bf16x2_exact(uint32_t two_codes) {
    uint32_t h;
    const uint16_t v = (uint16_t)two_codes;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"(v));
    float lo, hi;
    asm("{\n .reg .f16 l, h;\n mov.b32 {l, h}, %2;\n cvt.f32.f16 %0, l;\n cvt.f32.f16 %1, h;\n}"
        : "=f"(lo), "=f"(hi)
        : "r"(h));
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* Two codes, the first in the low byte of the 16-bit operand, -> their fp16 values (decode's
 * fragments; see the header comment), the first in the low half. */
static __device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t lo16) {
    uint32_t h;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"((uint16_t)lo16));
    return h;
}

/* Byte b0 of the 8 bytes {x, y} (0-3: x, 4-7: y) to the low half, byte b1 to the high half, as
 * fp16, exactly. Adjacent pairs of x's low or high half need no byte-permute. */
template <int B0, int B1>
static __device__ __forceinline__ uint32_t e4m3_pick_f16x2(uint32_t x, uint32_t y) {
    if constexpr (B0 == 0 && B1 == 1) return e4m3x2_to_f16x2(x); /* x's low half as it is */
    if constexpr (B0 == 2 && B1 == 3) return e4m3x2_to_f16x2(x >> 16);
    return e4m3x2_to_f16x2(__byte_perm(x, y, (unsigned)((B1 << 4) | B0)));
}

/* Two floats -> one f16x2 word (each rounded to nearest even), lo in the low half. */
static __device__ __forceinline__ uint32_t pack_f16x2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); /* first source -> upper */
    return r;
}

/* mma.sync m16n8k16 with fp16 inputs and fp32 accumulators (fragment layout as the bf16 one in
 * device_util.cuh). */
static __device__ __forceinline__ void mma_f16_16816(float c[4], const uint32_t a[4], uint32_t b0,
                                                     uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
