/* The trial of route_sums_direct (route_sums.h): route_sums' kernel with the one-token grouping
 * written directly. The same outputs, bit for bit (gpu_test_attn_stream's router case). */
#include "backend/cuda/route_sums.h"
#include "backend/cuda/attn_stream.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/moe_route_small.cuh"
#include "backend/cuda/norm_row.cuh"
#include "base/env_switch.h"

/* route_sums_kernel (route_sums.cu) with the one-token grouping written directly (group_one_token,
 * moe_route_small.cuh) in place of route_small_block's three block scans: a trial, off by default
 * (GPTOSS_ROUTE_DIRECT=1, route_sums.h). A copy of the kernel, not a template of both: nvcc
 * compiles the same body as a template instance differently (2,156 instructions against 2,196),
 * and the default's code must stay what was measured. Whichever loses is deleted once measured. */
__global__ void __launch_bounds__(ROUTE_SMALL_MIN_THREADS)
    route_sums_direct_kernel(unsigned long long *acc, const float *ss_part, const float *h,
                             const uint16_t *gain, float eps, int H, const uint16_t *bias,
                             float *logits, uint16_t *y, const moe_routing r) {
    __shared__ float s_inv;
    __shared__ float s_v[ROUTE_SMALL_MIN_THREADS]; /* logit + bias, expert by expert */
    const int tid = threadIdx.x, lane = tid & 31, E = r.E, C = H / 8;
    /* model memory first (pdl.cuh): the gains and this thread's expert's bias */
    uint4 g8[2];
#pragma unroll
    for (int i = 0; i < 2; i++)
        g8[i] =
            gain_at(gain, tid + i * ROUTE_SMALL_MIN_THREADS, tid + i * ROUTE_SMALL_MIN_THREADS < C);
    const float bv = tid < E && bias ? bf16_bits_to_f32(bias[tid]) : 0.0f;
    pdl_prologue();
    /* what attn_stream wrote, all at once: h's row, the sums of this thread's expert, the shares */
    float4 ha[2], hb[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int c = tid + i * ROUTE_SMALL_MIN_THREADS;
        ha[i] = c < C ? __ldcg((const float4 *)(h + 8 * c)) : make_float4(0, 0, 0, 0);
        hb[i] = c < C ? __ldcg((const float4 *)(h + 8 * c + 4)) : make_float4(0, 0, 0, 0);
    }
    unsigned long long a8[ATTN_ROUTER_GROUPS];
#pragma unroll
    for (int g = 0; g < ATTN_ROUTER_GROUPS; g++)
        a8[g] = tid < E ? __ldcg(acc + (size_t)g * E + tid) : 0ull;
    float sv[ATTN_ROUTER_MAX_G / 32];
#pragma unroll
    for (int i = 0; i < ATTN_ROUTER_MAX_G / 32; i++)
        sv[i] = tid < 32 ? __ldcg(ss_part + lane + 32 * i) : 0.0f;
    if (tid < 32) { /* the shares in turn, then the shuffle tree */
        float ss = 0.0f;
#pragma unroll
        for (int i = 0; i < ATTN_ROUTER_MAX_G / 32; i++) ss += sv[i];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if (lane == 0) s_inv = rms_inv(ss, H, eps);
    }
    long long sum = 0;
    if (tid < E) {
#pragma unroll
        for (int g = 0; g < ATTN_ROUTER_GROUPS; g++) {
            sum += (long long)a8[g];
            __stcg(acc + (size_t)g * E + tid, 0ull); /* for the next layer's sums */
        }
    }
    __syncthreads();
    const float inv = s_inv;
    if (tid < E) {
        const float lg = inv * ((float)sum * (1.0f / ATTN_ROUTER_ONE));
        logits[tid] = lg;
        float v = lg;
        if (bias) v += bv; /* topk_warp's order: the logit, then the bias */
        s_v[tid] = v;
    }
    /* the MoE's input row: bf16(h · inv · gain) (norm_split8's hi) */
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int c = tid + i * ROUTE_SMALL_MIN_THREADS;
        if (c >= C) continue;
        const float v[8] = {ha[i].x, ha[i].y, ha[i].z, ha[i].w, hb[i].x, hb[i].y, hb[i].z, hb[i].w};
        uint4 hi, lo;
        norm_split8(v, inv, g8[i], hi, lo);
        *(uint4 *)(y + 8 * c) = hi;
    }
    __syncthreads(); /* s_v */
    static_assert(MOE_TILE_TOKENS >= 8, "group_one_token: one tile an expert");
    route_one_token_block(s_v, MOE_TILE_TOKENS, r); /* the trial's one difference */
}

static int g_direct = -1;
extern "C" int route_sums_direct(void) {
    return env_switch(&g_direct, "GPTOSS_ROUTE_DIRECT", 0, 0, 1);
}
extern "C" void route_sums_direct_set(int on) {
    env_switch_set(&g_direct, on, 0, 1);
}

extern "C" cudaError_t route_from_sums_direct(unsigned long long *acc, const float *ss_part,
                                              const float *h, const uint16_t *gain, float eps,
                                              int H, const uint16_t *bias, float *logits,
                                              uint16_t *y, const moe_routing *r,
                                              cudaStream_t stream) {
    pdl_launch(route_sums_direct_kernel, dim3(1), dim3(ROUTE_SMALL_MIN_THREADS), 0, stream, acc,
               ss_part, h, gain, eps, H, bias, logits, y, *r);
    return cudaGetLastError();
}
