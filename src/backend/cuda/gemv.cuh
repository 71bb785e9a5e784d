/* The device side of gemv.h's product, for gemv.cu and for kernels that follow the product with
 * more work in the same launch (moe_route.cu: the router and its top-k). The work split and the
 * pipeline are described in gemv.cu. */
#pragma once

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/gemv.h"
#include "backend/cuda/pdl.cuh"

enum { GV_WARPS = 8, GV_THREADS = GV_WARPS * 32, GV_NJ = GEMV_MAX_K / 256 };

/* The grid for N rows when `resident` blocks of the kernel fit on the GPU at once: the blocks, and
 * the rows each warp takes (every warp the same number, one wave). */
int gemv_grid(int N, int resident, int *rows_per_warp);

struct gemv_args {
    const uint16_t *x, *x_lo, *W, *bias;
    void *y;
    int M, K, N;
    int rows_per_warp;
};

/* 8 bf16 weights · 8 fp32 activations (two float4 in shared memory) added into acc. */
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

/* The whole product by a grid of GV_THREADS-thread blocks (gemv_bf16's work split), xs: M·K floats
 * of shared memory. Every thread of the block returns from here (none leaves early), so a caller may
 * follow with block-wide barriers. */
template <int M, bool OUT_F32>
static __device__ __forceinline__ void gemv_block(const gemv_args &a, float *xs) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int K8 = a.K >> 3;                 /* 16-byte words per row */
    const int nj = (K8 + 31) >> 5;           /* loads per lane per row */
    const int stride = gridDim.x * GV_WARPS; /* rows between a warp's consecutive rows */
    int row = blockIdx.x * GV_WARPS + w;
    int left = row < a.N ? a.rows_per_warp : 0;
    if (row + (left - 1) * stride >= a.N) /* the last rows of the last warps: only those < N */
        left = left > 0 ? (a.N - 1 - row) / stride + 1 : 0;

    /* The first row's weights: model memory, so before the wait (pdl.cuh). */
    uint4 wv[GV_NJ];
#pragma unroll
    for (int j = 0; j < GV_NJ; j++) {
        const int c = lane + 32 * j;
        wv[j] = make_uint4(0, 0, 0, 0);
        if (j < nj && c < K8 && left > 0)
            wv[j] = ldg_stream16(a.W + (size_t)row * a.K + (size_t)c * 8);
    }
    pdl_prologue();

    /* Stage the tokens as fp32: x (+ x_lo). */
    for (int i = threadIdx.x; i < M * K8; i += GV_THREADS) {
        const int m = i / K8, c = i - m * K8;
        const uint4 h = *(const uint4 *)(a.x + (size_t)m * a.K + (size_t)c * 8);
        float f[8];
        unpack_bf16x8(h, f);
        if (a.x_lo) {
            float g[8];
            unpack_bf16x8(*(const uint4 *)(a.x_lo + (size_t)m * a.K + (size_t)c * 8), g);
#pragma unroll
            for (int e = 0; e < 8; e++) f[e] += g[e];
        }
        float4 *dst = (float4 *)(xs + (size_t)m * a.K + (size_t)c * 8);
        dst[0] = make_float4(f[0], f[1], f[2], f[3]);
        dst[1] = make_float4(f[4], f[5], f[6], f[7]);
    }
    __syncthreads();

    for (; left > 0; left--, row += stride) {
        const bool more = left > 1;
        const size_t next = (size_t)(row + stride) * a.K;
        float acc[M];
#pragma unroll
        for (int m = 0; m < M; m++) acc[m] = 0.0f;
#pragma unroll
        for (int j = 0; j < GV_NJ; j++) {
            const int c = lane + 32 * j;
            if (j < nj && c < K8) {
                const uint4 cur = wv[j];
                if (more) wv[j] = ldg_stream16(a.W + next + (size_t)c * 8); /* the next row's j */
#pragma unroll
                for (int m = 0; m < M; m++) {
                    const float4 *xp = (const float4 *)(xs + (size_t)m * a.K + (size_t)c * 8);
                    acc[m] = dot8(cur, xp[0], xp[1], acc[m]);
                }
            }
        }
#pragma unroll
        for (int m = 0; m < M; m++) {
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], o);
        }
        if (lane < M) {
            float v = acc[0];
#pragma unroll
            for (int m = 1; m < M; m++)
                if (lane == m) v = acc[m];
            if (a.bias) v += bf16_bits_to_f32(a.bias[row]);
            const size_t o = (size_t)lane * a.N + row;
            if (OUT_F32)
                ((float *)a.y)[o] = v;
            else
                ((uint16_t *)a.y)[o] = f32_to_bf16_bits(v);
        }
    }
}
