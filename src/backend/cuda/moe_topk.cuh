/* The top-k selection of one token's router logits by one warp, shared by the routing kernels
 * (moe_route.cu) and the fused MoE decode kernel (moe_fused.cu), so that both pick the same experts
 * with the same weights. CPU reference: cpu_topk_softmax (backend/cpu/ops.c). Device code. */
#pragma once

#include "backend/cuda/device_util.cuh"

#include <stdint.h>

/* An order-preserving map of the logits to 32-bit keys, so that a round's warp arg-max is two
 * redux.sync (a hardware warp-wide max/min, sm_80+) instead of five shuffle levels of value and
 * index: a greater float gives a greater key; -0 and +0 the same one (they compare equal, so the
 * lower index must win between them, as in the CPU reference); a NaN the key 1, below every number,
 * so it is taken last (no comparison ever prefers a NaN); 0 marks a taken or absent logit. */
static __device__ __forceinline__ unsigned topk_key(float x) {
    if (x == 0.0f) x = 0.0f;
    if (x != x) return 1u;
    const unsigned u = __float_as_uint(x);
    return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}
static __device__ __forceinline__ float topk_key_value(unsigned key) {
    return __uint_as_float((key & 0x80000000u) ? key & 0x7fffffffu : ~key);
}

/* The top-k of one token's E logits by one warp: k rounds of a warp arg-max (value descending, index
 * ascending), then softmax over the k winners in order, as cpu_topk_softmax does. Lane 0 returns the
 * k (index, weight) pairs. CG: the logits are in global memory and read through L2 (ld.global.cg),
 * since gemv_route (gemv.h) reads logits that other blocks of the same kernel wrote; without it they
 * may be anywhere (moe_fused.cu keeps them in shared memory).
 * A round: each lane's greatest key (its lowest index on ties: indices lane + 32 i ascend with i),
 * the warp's greatest by redux max, then the lowest index among the lanes that hold it by redux
 * min. Two dependent warp-wide steps a round; the shuffle form took ~2 µs for 4 rounds in the step
 * kernel (session 33's wait probe, H100). Measured (session 34, H100, batch 1): the layer loop
 * +0.5 % (120b) and +1.0 % (20b); the step kernel's phase 5 -0.6 µs a layer. */
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
    unsigned key[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int ex = lane + 32 * i;
        /* logit = hi (+ lo) (+ bias), in this order (the split-bf16 router GEMM, norm.h) */
        v[i] = ex < E ? (CG ? __ldcg(l + ex) : l[ex]) : 0.0f;
        if (ex < E && l_lo) v[i] += CG ? __ldcg(l_lo + ex) : l_lo[ex];
        if (ex < E && bias) v[i] += bf16_bits_to_f32(bias[ex]);
        key[i] = ex < E ? topk_key(v[i]) : 0u;
    }
    mark(0, ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7])));
    float sel_v[8];
    int sel_i[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        if (j >= k) break;
        unsigned bk = key[0];
        int bi = 0;
#pragma unroll
        for (int i = 1; i < 8; i++) /* strict >: the lowest i on ties */
            if (key[i] > bk) bk = key[i], bi = i;
        const unsigned m = __reduce_max_sync(0xffffffffu, bk);
        unsigned win = __reduce_min_sync(0xffffffffu, bk == m ? (unsigned)(lane + 32 * bi) : ~0u);
        if (m == 0u || win >= (unsigned)E) win = 0; /* unreachable for k ≤ E */
        sel_v[j] = topk_key_value(m), sel_i[j] = (int)win;
#pragma unroll
        for (int i = 0; i < 8; i++)
            if (win == (unsigned)(lane + 32 * i)) key[i] = 0u;
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
