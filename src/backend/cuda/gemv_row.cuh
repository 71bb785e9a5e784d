/* What the dense decode GEMV (gemv.cu) and the fused MoE decode kernel's router phase (moe_fused.cu)
 * share: one warp's dot products of one bf16 weight row with M token rows, in one fixed order, so
 * that both produce the same bits. Device code.
 *
 * Order: lane L owns the 16-byte words c = L + 32 j of the row (8 weights each), j ascending; per
 * word, dot8 adds its 8 products into the lane's sum in k order; then the 32 lane sums are added by
 * an xor-shuffle tree (16, 8, 4, 2, 1). The activations are fp32: x, plus x_lo where the split-bf16
 * input has one (norm.h), added before the products. */
#pragma once

#include "backend/cuda/device_util.cuh"

#include <stdint.h>

/* 8 bf16 weights · 8 fp32 activations (two float4) added into acc. */
static __device__ __forceinline__ float dot8(uint4 w, float4 a, float4 b, float acc) {
    acc = fmaf(__uint_as_float(w.x << 16), a.x, acc);
    acc = fmaf(__uint_as_float(w.x & 0xffff0000u), a.y, acc);
    acc = fmaf(__uint_as_float(w.y << 16), a.z, acc);
    acc = fmaf(__uint_as_float(w.y & 0xffff0000u), a.w, acc);
    acc = fmaf(__uint_as_float(w.z << 16), b.x, acc);
    acc = fmaf(__uint_as_float(w.z & 0xffff0000u), b.y, acc);
    acc = fmaf(__uint_as_float(w.w << 16), b.z, acc);
    acc = fmaf(__uint_as_float(w.w & 0xffff0000u), b.w, acc);
    return acc;
}

/* The 8 fp32 activations of word c of token row m: x (+ x_lo), element by element. */
static __device__ __forceinline__ void gemv_x8(const uint16_t *x, const uint16_t *x_lo, size_t at,
                                               float f[8]) {
    unpack_bf16x8(*(const uint4 *)(x + at), f);
    if (x_lo) {
        float g[8];
        unpack_bf16x8(*(const uint4 *)(x_lo + at), g);
#pragma unroll
        for (int e = 0; e < 8; e++) f[e] += g[e];
    }
}

/* The warp-wide sum of each lane's acc[m] (every lane ends with the totals). */
template <int M> static __device__ __forceinline__ void gemv_warp_sum(float acc[M]) {
#pragma unroll
    for (int m = 0; m < M; m++) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], o);
    }
}

/* One row (K = 8·K8 weights at W) against M token rows read straight from global memory (x, x_lo:
 * [M][K]), for a warp that multiplies a single row, where staging the tokens in shared memory would
 * not be repaid. NJ ≥ ceil(K8 / 32). Returns the totals in every lane. */
template <int M, int NJ>
static __device__ __forceinline__ void gemv_row_direct(const uint16_t *W, const uint16_t *x,
                                                       const uint16_t *x_lo, int K, float acc[M]) {
    const int lane = threadIdx.x & 31, K8 = K >> 3;
    uint4 wv[NJ];
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        const int c = lane + 32 * j;
        wv[j] = c < K8 ? ldg_stream16(W + (size_t)c * 8) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int m = 0; m < M; m++) acc[m] = 0.0f;
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        const int c = lane + 32 * j;
        if (c < K8) {
#pragma unroll
            for (int m = 0; m < M; m++) {
                float f[8];
                gemv_x8(x, x_lo, (size_t)m * K + (size_t)c * 8, f);
                acc[m] = dot8(wv[j], make_float4(f[0], f[1], f[2], f[3]),
                              make_float4(f[4], f[5], f[6], f[7]), acc[m]);
            }
        }
    }
    gemv_warp_sum<M>(acc);
}
