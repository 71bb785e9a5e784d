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
 * Reading, two ways:
 *  - exact to bf16 (prefill, where a tile is converted once into shared memory and reused by 16
 *    query tokens): cvt.rn.f16x2.e4m3x2 (exact: every e4m3 value is an fp16 value), then fp16 ->
 *    fp32 -> bf16 (exact again: 3 mantissa bits fit in bf16's 7, and 2^-9 .. 448 is inside bf16's
 *    normal range). NaN codes stay NaN.
 *  - bit placement to fp16 (decode, where every byte is used once and the conversion runs at the
 *    rate the bytes stream in): an e4m3 code s.eeee.mmm moved into an fp16 s.eeeee.mmmmmmmmmm as
 *        fp16 bits = s << 15 | (eeee.mmm) << 7
 *    is the same sign, exponent field and mantissa, read with fp16's exponent bias 15 instead of 7:
 *    the value 2^-8 x the e4m3 value, exactly, for normals and subnormals alike (e4m3's subnormal
 *    m 2^-9 lands on fp16's subnormal m 2^-17). The 2^8 goes into the scale, so no multiply is
 *    needed: one byte-permute and three logic ops per two values. The one difference from the exact
 *    path: the NaN code (s.1111.111) reads as +-480 x 2^-8; the kernels never store it unless the
 *    projection itself produced a NaN. */
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

/* The fp16x2 word 2^-8 x (two e4m3 values) from a word whose bytes 1 and 3 hold the two codes (bytes
 * 0 and 2 are ignored): byte 1 -> the low half, byte 3 -> the high half. See the header comment. */
static __device__ __forceinline__ uint32_t e4m3_hi_bytes_to_f16x2(uint32_t w) {
    return ((w & 0x7f007f00u) >> 1) | (w & 0x80008000u);
}

/* Picks byte b0 of the 8 bytes {x, y} (0-3: x, 4-7: y) into byte 1 and byte b1 into byte 3, then
 * converts: the f16x2 (2^-8 x) of codes (b0, b1). */
template <int B0, int B1>
static __device__ __forceinline__ uint32_t e4m3_pick_f16x2(uint32_t x, uint32_t y) {
    return e4m3_hi_bytes_to_f16x2(__byte_perm(x, y, (unsigned)((B1 << 12) | (B0 << 4))));
}

/* The exact conversion for decode (attn_set_fp8_cvt): two codes, the first in the low byte of the
 * 16-bit operand, -> their fp16 values (e4m3 is a subset of fp16), one instruction on sm_90 where the
 * bit placement above takes a byte-permute and three logic ops. The values are 2^8 x those of the
 * bit placement, exactly, so the kernels' results are the same bits once the scales are adjusted. */
static __device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t lo16) {
    uint32_t h;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"((uint16_t)lo16));
    return h;
}

/* Byte b0 of the 8 bytes {x, y} to the low half, byte b1 to the high half, exactly (see above). */
template <int B0, int B1>
static __device__ __forceinline__ uint32_t e4m3_pick_f16x2_exact(uint32_t x, uint32_t y) {
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
