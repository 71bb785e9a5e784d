/* The routing of one token from the router's sums by columns (route_sums.h). CPU reference: the
 * router's logits and cpu_topk_softmax (backend/cpu/ops.c), which the forward tests hold the whole
 * step against. */
#include "backend/cuda/route_sums.h"
#include "backend/cuda/attn_stream.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/moe_route_small.cuh"
#include "backend/cuda/norm_row.cuh"
#include "base/env_switch.h"

/* One block of 256 threads (ROUTE_SMALL_MIN_THREADS). Every load it needs is asked for at its
 * start, none waiting for another: the gains and the bias (model memory, before the PDL wait:
 * pdl.cuh), then h's row, this thread's expert's sums and the blocks' shares of the sum of squares.
 * The logits (with the bias added, as topk_warp adds it) go to the top-k in shared memory, and the
 * MoE's input row is written before the top-k, which does not need it. The first form (session
 * 37) loaded the shares, then the sums, then read the logits back through L2, then h's row: four
 * L2 round trips in a row, 5.3 µs a launch against 4.2 for this one (session 38's CUPTI tables,
 * H100; the same bits, 120b decode at batch 1 +1.0 to +1.2 %). The sum of squares in one fixed
 * order (warp 0: lane i adds shares i, i + 32, …; then the shuffle tree), so every run gives the
 * same bits. */
__global__ void __launch_bounds__(ROUTE_SMALL_MIN_THREADS)
    route_sums_kernel(unsigned long long *acc, const float *ss_part, const float *h,
                      const uint16_t *gain, float eps, int H, const uint16_t *bias, float *logits,
                      uint16_t *y, const moe_routing r) {
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
    route_small_block<false>(s_v, NULL, NULL, MOE_TILE_TOKENS, r);
}

static int g_on = -1;
extern "C" int route_sums_enabled(void) {
    return env_switch(&g_on, "GPTOSS_ROUTER_COLS", 1, 0, 1);
}
extern "C" void route_sums_set(int on) {
    env_switch_set(&g_on, on, 0, 1);
}

extern "C" int route_sums_fits(const float *h, const uint16_t *gain, int H, const float *logits,
                               const uint16_t *y, const moe_routing *r) {
    return h && gain && logits && y && r && r->T == 1 && r->E >= 8 && r->E % 8 == 0 &&
           r->E <= ROUTE_SMALL_MIN_THREADS && r->k >= 1 && r->k <= 8 && r->k <= r->E && H >= 8 &&
           H % 8 == 0 && H / 8 <= 2 * ROUTE_SMALL_MIN_THREADS && !((uintptr_t)h & 15) &&
           !((uintptr_t)gain & 15) && !((uintptr_t)y & 15);
}

extern "C" cudaError_t route_from_sums(unsigned long long *acc, const float *ss_part,
                                       const float *h, const uint16_t *gain, float eps, int H,
                                       const uint16_t *bias, float *logits, uint16_t *y,
                                       const moe_routing *r, cudaStream_t stream) {
    if (!acc || !ss_part || !route_sums_fits(h, gain, H, logits, y, r))
        return cudaErrorInvalidValue;
    pdl_launch(route_sums_kernel, dim3(1), dim3(ROUTE_SMALL_MIN_THREADS), 0, stream, acc, ss_part,
               h, gain, eps, H, bias, logits, y, *r);
    return cudaGetLastError();
}
