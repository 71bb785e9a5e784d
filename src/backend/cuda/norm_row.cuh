/* The row kernels' shared pieces (norm.cu, allreduce.cu): a block-wide sum and the normalised row
 * written as bf16 with its rounding residue. One block per token row, one thread per 8 features. */
#pragma once

#include "backend/cuda/device_util.cuh"

#include <stdint.h>

/* Sum over the block; every thread gets the total (fixed reduction tree: deterministic). */
static __device__ __forceinline__ float block_sum(float v, float *red) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) red[w] = v;
    __syncthreads();
    float s = lane < nw ? red[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

/* Normalises v (this thread's 8 values, already final) and writes them as bf16; with ylo also the
 * rounding residue, bf16(x − bf16(x)), so that y + ylo carries x to ~16 significant bits (the "split
 * bf16" input of the QKV and router GEMMs, runner_forward.c). */
static __device__ __forceinline__ void write_norm(const float v[8], bool active, int H,
                                                  const uint16_t *gain, float eps, uint16_t *yrow,
                                                  uint16_t *ylorow, int c, float *red) {
    float ss = 0.0f;
    if (active)
#pragma unroll
        for (int i = 0; i < 8; i++) ss += v[i] * v[i];
    ss = block_sum(ss, red);
    if (!active) return;
    const float inv = 1.0f / sqrtf(ss / (float)H + eps);
    float gf[8], x[8];
    unpack_bf16x8(*(const uint4 *)(gain + 8 * c), gf);
#pragma unroll
    for (int i = 0; i < 8; i++) x[i] = v[i] * inv * gf[i];
    uint4 o;
    o.x = pack_bf16x2(x[0], x[1]);
    o.y = pack_bf16x2(x[2], x[3]);
    o.z = pack_bf16x2(x[4], x[5]);
    o.w = pack_bf16x2(x[6], x[7]);
    *(uint4 *)(yrow + 8 * c) = o;
    if (ylorow) {
        float hi[8];
        unpack_bf16x8(o, hi);
        uint4 l;
        l.x = pack_bf16x2(x[0] - hi[0], x[1] - hi[1]);
        l.y = pack_bf16x2(x[2] - hi[2], x[3] - hi[3]);
        l.z = pack_bf16x2(x[4] - hi[4], x[5] - hi[5]);
        l.w = pack_bf16x2(x[6] - hi[6], x[7] - hi[7]);
        *(uint4 *)(ylorow + 8 * c) = l;
    }
}
