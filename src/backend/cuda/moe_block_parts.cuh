/* The parts of the MoE block's persistent kernel (moe_fused.cu): its arguments, the router rows,
 * the grouping of a few pairs by expert, and block 0's copy of the routing in moe_route_split's
 * global format (the grid barrier and the cooperative launch: grid_sync.cuh). Device code, included
 * by moe_fused.cu only (session 21's stream form shared it until it was removed). */
#pragma once

#include "backend/cuda/gemv_row.cuh"
#include "backend/cuda/grid_sync.cuh"
#include "backend/cuda/moe_small.cuh"
#include "backend/cuda/moe_fused.h"
#include "backend/cuda/moe_topk.cuh"

#include <cuda_runtime.h>

#include <limits.h>

enum {
    FU_WARPS = small_cfg<1>::WARPS,
    FU_THREADS = small_cfg<1>::THREADS,
    FU_MAX_T = 8,  /* tokens: the router rows' accumulators are templated up to GEMV_MAX_M */
    FU_MAX_P = 32, /* pairs: one lane each in the grouping warp */
    FU_MAX_E = 256,
    FU_MAX_H = 3072, /* gpt-oss: 2880 */
    FU_NJ =
        FU_MAX_H / 256, /* 16-byte words per lane of one router row (16 for GEMV_MAX_K spilled) */
    FU_MAX_SMEM = 200 * 1024, /* dynamic shared memory: the staging of one item, or the logits */
    FU_DEEP_SMEM = 53 * 1024  /* mode 2: 4 blocks an SM with the static 2.6 KB and 1 KB reserved */
};

struct fused_args {
    moe_args gu, dn; /* gate_up and down; their routing pointers are replaced by the block's own */
    const uint16_t *x, *x_lo; /* [T][H] the MLP norm's split-bf16 output (x_lo may be NULL) */
    const uint16_t *router_w, *router_b; /* [E][H], [E] (bias may be NULL) */
    float *logits;                       /* [T][E] fp32 */
    moe_routing r;                       /* the routing's global copy (block 0 writes it) */
    unsigned *bar;                       /* [2]: arrivals, generation */
    int T, E, k, H;
    /* Mode 2 (deep prefetch): down items are dealt from the last block backwards, so that blocks
     * with no gate_up item get one first, and each block's first down item copies k steps
     * [U, U + pre_steps) into shared memory at byte pre_off (after its token staging) on top of the
     * U steps in registers. Mode 1: down items from block 0, registers only. */
    int deep, pre_steps, pre_off;
    unsigned spin_ns; /* the barrier's sleep between polls (measurement: moe_fused_set_spin_ns) */
    int stop_after;   /* measurement: 1 router, 2 + routing, 3 + gate_up; 0: the whole block */
};

/* Router logits of expert row e for the T tokens (lane m < T writes token m's), from x + x_lo
 * ([T][H] split bf16: fa.x and fa.x_lo). */
template <int M>
static __device__ __forceinline__ void router_row(const fused_args &fa, int e, const uint16_t *x,
                                                  const uint16_t *x_lo) {
    float acc[M];
    gemv_row_direct<M, FU_NJ>(fa.router_w + (size_t)e * fa.H, x, x_lo, fa.H, acc);
    const int lane = threadIdx.x & 31;
    if (lane < M) {
        float v = acc[0];
#pragma unroll
        for (int m = 1; m < M; m++)
            if (lane == m) v = acc[m];
        fa.logits[(size_t)lane * fa.E + e] = v;
    }
}

/* The grouping of P ≤ 32 pairs by expert (lane p holds pair p's expert), by one warp, with the same
 * results as moe_route_small_kernel: pairs in expert order, in pair order within an expert; counts and
 * offsets (only the touched experts' entries are written); the touched experts ascending. */
static __device__ __forceinline__ void group_pairs(int P, const int *idx, int *pair_sorted,
                                                   int *touched, int *count, int *offset,
                                                   int *n_touched) {
    const int lane = threadIdx.x & 31;
    const int e = lane < P ? idx[lane] : INT_MAX;
    int less = 0, same = 0, before = 0;
    for (int q = 0; q < P; q++) {
        const int eq = __shfl_sync(0xffffffffu, e, q);
        less += eq < e, same += eq == e, before += eq == e && q < lane;
    }
    const bool first = lane < P && before == 0;
    const unsigned firsts = __ballot_sync(0xffffffffu, first);
    int distinct_less = 0;
    for (int q = 0; q < P; q++) {
        const int eq = __shfl_sync(0xffffffffu, e, q);
        distinct_less += ((firsts >> q) & 1u) && eq < e;
    }
    if (lane < P) pair_sorted[less + before] = lane;
    if (first) count[e] = same, offset[e] = less, touched[distinct_less] = e;
    if (lane == 0) *n_touched = __popc(firsts);
}

/* Block 0: the routing in moe_route_split's global format (moe.h), for whoever reads it after the
 * step (tests; the unfused path's consumers). Every touched expert has ≤ 32 pairs: one tile each. */
static __device__ void write_routing(const fused_args &fa, const int *idx, const float *wts,
                                     const int *pair_sorted, const int *touched, int nt) {
    const moe_routing &r = fa.r;
    const int P = fa.T * fa.k;
    for (int i = threadIdx.x; i < P; i += blockDim.x)
        r.topk_idx[i] = idx[i], r.topk_w[i] = wts[i], r.pair_sorted[i] = pair_sorted[i];
    for (int e = threadIdx.x; e < fa.E; e += blockDim.x) {
        int c = 0, lt = 0;
        for (int p = 0; p < P; p++) c += idx[p] == e, lt += idx[p] < e;
        r.count[e] = c, r.offset[e] = lt;
    }
    for (int i = threadIdx.x; i < nt; i += blockDim.x)
        r.touched[i] = touched[i], r.tiles[i] = touched[i] << 16;
    if (threadIdx.x == 0) r.offset[fa.E] = P, *r.n_touched = nt, *r.n_tiles = nt;
}

/* A step's routing in a block's shared memory (phase 2; arrays of T·k pairs and E
 * experts). */
struct block_route {
    int *idx, *pair, *touched, *count, *offset, *nt;
    float *w;
};

/* Phase 2, by every thread of the block: the logits (written by other blocks of the
 * kernel: read through L2) into s_logits ([T][E]), the top-k a warp a token, the grouping by warp
 * 0, block 0's global copy of the routing; gu and dn then read the routing from shared memory.
 * Returns the touched experts. */
static __device__ __forceinline__ int route_in_block(const fused_args &fa, float *s_logits,
                                                     const block_route &br, moe_args &gu,
                                                     moe_args &dn) {
    const int T = fa.T, E = fa.E, k = fa.k, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    for (int i = threadIdx.x; i < T * E; i += blockDim.x) s_logits[i] = __ldcg(fa.logits + i);
    __syncthreads();
    for (int t = w; t < T; t += (int)(blockDim.x >> 5))
        topk_warp<false>(s_logits + (size_t)t * E, NULL, fa.router_b, E, k, lane, br.idx + t * k,
                         br.w + t * k);
    __syncthreads();
    if (w == 0) group_pairs(T * k, br.idx, br.pair, br.touched, br.count, br.offset, br.nt);
    __syncthreads();
    const int nt = *br.nt;
    if (blockIdx.x == 0) write_routing(fa, br.idx, br.w, br.pair, br.touched, nt);
    gu = fa.gu, dn = fa.dn;
    gu.count = dn.count = br.count, gu.offset = dn.offset = br.offset;
    gu.pair_sorted = dn.pair_sorted = br.pair, gu.touched = dn.touched = br.touched;
    gu.n_touched = dn.n_touched = br.nt, gu.topk_w = dn.topk_w = br.w;
    return nt;
}
