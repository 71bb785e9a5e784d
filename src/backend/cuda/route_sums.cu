/* The routing of one token from the router's sums by columns (route_sums.h). CPU reference: the
 * router's logits and cpu_topk_softmax (backend/cpu/ops.c), which the forward tests hold the whole
 * step against. */
#include "backend/cuda/route_sums.h"
#include "backend/cuda/attn_stream.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/moe_route_small.cuh"
#include "backend/cuda/norm_row.cuh"
#include "backend/cuda/pdl.cuh"
#include "base/env_switch.h"

static constexpr float ROUTE_SUMS_ONE = 16777216.0f; /* 2^24: the sums' unit (attn_stream.cu) */

/* 256 threads (ROUTE_SMALL_MIN_THREADS). The sum of squares in one fixed order (warp 0: lane i
 * adds shares i, i + 32, ...; then the shuffle tree), so every launch gives the same bits. */
__global__ void __launch_bounds__(ROUTE_SMALL_MIN_THREADS)
    route_sums_kernel(unsigned long long *acc, const float *ss_part, const float *h,
                      const uint16_t *gain, float eps, int H, const uint16_t *bias, float *logits,
                      uint16_t *y, const moe_routing r) {
    __shared__ float s_inv;
    const int tid = threadIdx.x, lane = tid & 31, E = r.E;
    /* the gains (model memory) before the wait (pdl.cuh) */
    const int C = H / 8;
    uint4 g8[2];
#pragma unroll
    for (int i = 0; i < 2; i++)
        g8[i] =
            gain_at(gain, tid + i * ROUTE_SMALL_MIN_THREADS, tid + i * ROUTE_SMALL_MIN_THREADS < C);
    pdl_prologue();
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
        logits[tid] = inv * ((float)sum * (1.0f / ROUTE_SUMS_ONE));
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

static int g_on = -1;
extern "C" int route_sums_enabled(void) {
    return env_switch(&g_on, "GPTOSS_ROUTER_COLS", 0, 0, 1);
}
extern "C" void route_sums_set(int on) {
    env_switch_set(&g_on, on, 0, 1);
}

extern "C" cudaError_t route_from_sums(unsigned long long *acc, const float *ss_part,
                                       const float *h, const uint16_t *gain, float eps, int H,
                                       const uint16_t *bias, float *logits, uint16_t *y,
                                       const moe_routing *r, cudaStream_t stream) {
    if (!acc || !ss_part || !h || !gain || !logits || !y || !r || r->T != 1 || r->E < 8 ||
        r->E % 8 || r->E > ROUTE_SMALL_MIN_THREADS || r->k < 1 || r->k > 8 || r->k > r->E ||
        H < 8 || H % 8 || H / 8 > 2 * ROUTE_SMALL_MIN_THREADS || ((uintptr_t)h & 15) ||
        ((uintptr_t)gain & 15) || ((uintptr_t)y & 15))
        return cudaErrorInvalidValue;
    pdl_launch(route_sums_kernel, dim3(1), dim3(ROUTE_SMALL_MIN_THREADS), 0, stream, acc, ss_part,
               h, gain, eps, H, bias, logits, y, *r);
    return cudaGetLastError();
}
