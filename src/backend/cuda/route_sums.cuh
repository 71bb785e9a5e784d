/* The routing of one token from the router's sums by columns, as one block's device function:
 * route_sums.cu's kernel runs it after attn_stream; attn_stream's routed kernel can run it in its
 * last block (GPTOSS_ROUTER_COLS=2, route_sums.h). One copy of the code, so both give the same
 * bits. Device code. */
#pragma once

#include "backend/cuda/attn_stream.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/moe_route_small.cuh"
#include "backend/cuda/norm_row.cuh"
#include "backend/cuda/pdl.cuh"

/* Every thread of a block of ROUTE_SMALL_MIN_THREADS (256) calls it (the block's barriers are
 * __syncthreads: warps that have exited do not count). The gains (model memory) are asked for
 * first, then (pdl_wait) the kernel's PDL wait (pdl.cuh), then the rest. The sum of squares in one
 * fixed order (warp 0: lane i adds shares i, i + 32, ...; then the shuffle tree), so every run
 * gives the same bits. Every load of what other blocks wrote goes through L2. s_inv: a shared
 * float of the caller's (the kernel's own, first in its shared memory: route_sums_kernel's code
 * then is the one measured in session 37). */
static __device__ __forceinline__ void
route_sums_block(unsigned long long *acc, const float *ss_part, const float *h,
                 const uint16_t *gain, float eps, int H, const uint16_t *bias, float *logits,
                 uint16_t *y, const moe_routing &r, float &s_inv, bool pdl_wait) {
    const int tid = threadIdx.x, lane = tid & 31, E = r.E;
    const int C = H / 8;
    uint4 g8[2];
#pragma unroll
    for (int i = 0; i < 2; i++)
        g8[i] =
            gain_at(gain, tid + i * ROUTE_SMALL_MIN_THREADS, tid + i * ROUTE_SMALL_MIN_THREADS < C);
    if (pdl_wait) pdl_prologue();
    if (tid < 32) {
        float ss = 0.0f;
#pragma unroll
        for (int i = 0; i < ATTN_ROUTER_MAX_G / 32; i++) ss += __ldcg(ss_part + lane + 32 * i);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if (lane == 0) s_inv = rms_inv(ss, H, eps);
    }
    __syncthreads();
    const float inv = s_inv;
    if (tid < E) {
        long long sum = 0;
#pragma unroll
        for (int g = 0; g < ATTN_ROUTER_GROUPS; g++) {
            unsigned long long *p = acc + (size_t)g * E + tid;
            sum += (long long)__ldcg(p);
            __stcg(p, 0ull); /* for the next layer's sums */
        }
        logits[tid] = inv * ((float)sum * (1.0f / ATTN_ROUTER_ONE));
    }
    __syncthreads(); /* the logits, for route_small_block's reads through L2 */
    route_small_block(logits, NULL, bias, MOE_TILE_TOKENS, r);
    /* the MoE's input row */
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int c = tid + i * ROUTE_SMALL_MIN_THREADS;
        if (c >= C) continue;
        const float4 a = __ldcg((const float4 *)(h + 8 * c)),
                     b = __ldcg((const float4 *)(h + 8 * c + 4));
        const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        uint4 hi, lo;
        norm_split8(v, inv, g8[i], hi, lo);
        *(uint4 *)(y + 8 * c) = hi;
    }
}
