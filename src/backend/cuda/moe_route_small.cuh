/* Decode-sized MoE routing (T <= 32 tokens, T*k <= 64 pairs) by one block, as device functions:
 * moe_route.cu's moe_route_small_kernel is one block running it, and gemv.cu's router kernel runs it
 * in the last of its blocks to finish (gemv_route, gemv.h), so that one launch makes the router
 * logits and routes them. One copy of the code, so both give the same bytes. Device code. */
#pragma once

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/moe.h"
#include "backend/cuda/moe_topk.cuh"

#include <stdint.h>

/* Decode-sized routing by one block (T <= 32 tokens, T*k <= 64 pairs), with the same outputs as
 * moe_topk_kernel + moe_group_kernel: counts, offsets, the touched list, the tile list and the
 * stable counting sort (pairs in order within an expert). Warp w < T picks token w's experts into
 * shared memory; then thread e < E counts expert e's pairs (a ≤ 64-entry shared scan), three
 * block-wide exclusive scans give its offset, its place in the touched list and its first tile, and
 * thread p < P places pair p after the earlier pairs of its expert. No thread loops over E, and no
 * value makes a round trip through global memory: an earlier version grouped the pairs in one
 * thread, reading back its own global writes, and took ~14 µs per layer at batch 1 (ncu, H200). */
enum {
    ROUTE_SMALL_MIN_THREADS = 256, /* one thread per expert (E <= 256) */
    ROUTE_SMALL_MAX_T = 32,        /* a warp a token */
    ROUTE_SMALL_MAX_PAIRS = 64     /* T·k: a thread a pair (≤ ROUTE_SMALL_MIN_THREADS) */
};

/* The grouping's per-expert outputs from expert tid's pair count c (threads tid < E; every thread of
 * the block calls this, blockDim ≥ 256): count, offset (exclusive prefix sum, also into s_off), the
 * touched list and the large-path tile list, in ascending expert order, and the three totals. Three
 * block-wide exclusive scans (warp shuffles, then the 8 warp totals): no thread walks the E
 * experts. */
static __device__ __forceinline__ void expert_offsets(int c, int E, int BN, int *count, int *offset,
                                                      int *touched, int *n_touched, int *tiles,
                                                      int *n_tiles, int *s_off) {
    __shared__ int s_warp[3][ROUTE_SMALL_MIN_THREADS / 32];
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    if (tid >= E) c = 0;
    const int tc = c > 0, tl = (c + BN - 1) / BN;
    int ic = c, it = tc, il = tl;
    if (tid < ROUTE_SMALL_MIN_THREADS) {
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int a = __shfl_up_sync(0xffffffffu, ic, o),
                      b = __shfl_up_sync(0xffffffffu, it, o),
                      d = __shfl_up_sync(0xffffffffu, il, o);
            if (lane >= o) ic += a, it += b, il += d;
        }
        if (lane == 31) s_warp[0][w] = ic, s_warp[1][w] = it, s_warp[2][w] = il;
    }
    __syncthreads();
    if (tid < ROUTE_SMALL_MIN_THREADS) {
        int pc = 0, pt = 0, pl = 0, tot_c = 0, tot_t = 0, tot_l = 0;
        for (int ww = 0; ww < ROUTE_SMALL_MIN_THREADS / 32; ww++) {
            if (ww < w) pc += s_warp[0][ww], pt += s_warp[1][ww], pl += s_warp[2][ww];
            tot_c += s_warp[0][ww], tot_t += s_warp[1][ww], tot_l += s_warp[2][ww];
        }
        const int oc = pc + ic - c, ot = pt + it - tc, ol = pl + il - tl; /* exclusive */
        if (tid < E) {
            offset[tid] = oc, count[tid] = c, s_off[tid] = oc;
            if (c) touched[ot] = tid;
            for (int b = 0; b < tl; b++) tiles[ol + b] = (tid << 16) | b;
        }
        if (tid == 0) offset[E] = tot_c, *n_touched = tot_t, *n_tiles = tot_l;
    }
    __syncthreads();
}

/* The whole routing of r.T tokens by the calling block (blockDim >= max(ROUTE_SMALL_MIN_THREADS,
 * 32 r.T), every thread calls it): the outputs of moe_topk_kernel + moe_group_kernel (moe_route.cu)
 * into r's arrays, BN tokens a large-path tile. The logits are read through L2 (ld.global.cg), so
 * they may have been written by other blocks of the same kernel (gemv_route, router_mma); CG
 * false: by plain loads (route_sums' early form passes them in shared memory). */
template <bool CG = true>
static __device__ __forceinline__ void
route_small_block(const float *logits, const float *logits_lo, const uint16_t *bias, int BN,
                  const moe_routing &r) {
    __shared__ int s_idx[ROUTE_SMALL_MAX_PAIRS];
    __shared__ float s_w[ROUTE_SMALL_MAX_PAIRS];
    __shared__ int s_off[256];
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, E = r.E, k = r.k, P = r.T * k;
    if (w < r.T)
        topk_warp<CG>(logits + (size_t)w * E, logits_lo ? logits_lo + (size_t)w * E : NULL, bias, E,
                      k, lane, s_idx + w * k, s_w + w * k);
    __syncthreads();
    if (tid < P) r.topk_idx[tid] = s_idx[tid], r.topk_w[tid] = s_w[tid];

    const int e0 = r.e0, n_e = r.n_e;
    int c = 0;
    if (tid < n_e)
        for (int p = 0; p < P; p++) c += s_idx[p] == e0 + tid;
    expert_offsets(c, n_e, BN, r.count, r.offset, r.touched, r.n_touched, r.tiles, r.n_tiles,
                   s_off);
    if (tid < P && s_idx[tid] - e0 >= 0 && s_idx[tid] - e0 < n_e) { /* a pair of a grouped expert */
        const int e = s_idx[tid];
        int q_r = 0;
        for (int q = 0; q < tid; q++) q_r += s_idx[q] == e;
        r.pair_sorted[s_off[e - e0] + q_r] = tid;
    }
}
