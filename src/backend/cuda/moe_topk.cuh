/* The top-k selection of one token's router logits by one warp, shared by the routing kernels
 * (moe_route.cu) and the fused MoE decode kernel (moe_fused.cu), so that both pick the same experts
 * with the same weights. CPU reference: cpu_topk_softmax (backend/cpu/ops.c). Device code. */
#pragma once

#include "backend/cuda/device_util.cuh"

#include <stdint.h>

/* The top-k of one token's E logits by one warp: k rounds of a warp arg-max (value descending, index
 * ascending), then softmax over the k winners in order, as cpu_topk_softmax does. Lane 0 returns the
 * k (index, weight) pairs. CG: the logits are in global memory and read through L2 (ld.global.cg),
 * since gemv_route (gemv.h) reads logits that other blocks of the same kernel wrote; without it they
 * may be anywhere (moe_fused.cu keeps them in shared memory). */
/* A probe's hook (the step kernel's wait probe): mark(0, s) once the logits are in, mark(1, s) once
 * the rounds are done (s: their sum, then the first winner: a value the hook can wait on). The
 * default does nothing, and the sum is then never computed. */
struct topk_no_mark {
    __device__ void operator()(int, float) const {}
};
template <bool CG = true, typename Mark = topk_no_mark>
static __device__ __forceinline__ void topk_warp(const float *l, const float *l_lo,
                                                 const uint16_t *bias, int E, int k, int lane,
                                                 int *idx, float *wts, Mark mark = {}) {
    float v[8];
    unsigned taken = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int ex = lane + 32 * i;
        /* logit = hi (+ lo) (+ bias), in this order (the split-bf16 router GEMM, norm.h) */
        v[i] = ex < E ? (CG ? __ldcg(l + ex) : l[ex]) : 0.0f;
        if (ex < E && l_lo) v[i] += CG ? __ldcg(l_lo + ex) : l_lo[ex];
        if (ex < E && bias) v[i] += bf16_bits_to_f32(bias[ex]);
        if (ex >= E) taken |= 1u << i;
    }
    mark(0, ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7])));
    float sel_v[8];
    int sel_i[8];
    const int NONE = 0x7fffffff;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        if (j >= k) break;
        float bv = 0.0f;
        int bi = NONE;
#pragma unroll
        for (int i = 0; i < 8; i++) /* indices ascend with i: strict > keeps the lowest on ties */
            if (!((taken >> i) & 1u) && (bi == NONE || v[i] > bv)) bv = v[i], bi = lane + 32 * i;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (oi != NONE && (bi == NONE || ov > bv || (ov == bv && oi < bi))) bv = ov, bi = oi;
        }
        /* Every lane holds the same winner unless NaNs broke the order: take lane 0's. */
        bv = __shfl_sync(0xffffffffu, bv, 0);
        bi = __shfl_sync(0xffffffffu, bi, 0);
        if (bi == NONE || bi < 0 || bi >= E) bi = 0; /* unreachable for k ≤ E */
        sel_v[j] = bv, sel_i[j] = bi;
        if ((bi & 31) == lane) taken |= 1u << (bi >> 5);
    }
    mark(1, sel_v[0]);
    if (lane == 0) {
        float ex[8], sum = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++)
            if (j < k) sum += (ex[j] = expf(sel_v[j] - sel_v[0]));
#pragma unroll
        for (int j = 0; j < 8; j++) {
            if (j >= k) break;
            idx[j] = sel_i[j];
            wts[j] = ex[j] / sum;
        }
    }
}
