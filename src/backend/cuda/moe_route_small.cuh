/* Decode-sized MoE routing (T <= 32 tokens, T*k <= 64 pairs) by one block, as device functions:
 * moe_route.cu's moe_route_small_kernel is one block running it, and gemv.cu's router kernel runs it
 * in the last of its blocks to finish (gemv_route, gemv.h), so that one launch makes the router
 * logits and routes them. One copy of the code, so both give the same bytes. Device code. */
#pragma once

#include "backend/cuda/device_util.cuh"
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
enum { ROUTE_SMALL_MIN_THREADS = 256 }; /* one thread per expert (E <= 256) */

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

/* The whole routing of T tokens by the calling block (blockDim >= max(ROUTE_SMALL_MIN_THREADS, 32 T),
 * every thread calls it): the outputs of moe_topk_kernel + moe_group_kernel (moe_route.cu). The
 * logits are read through L2 (ld.global.cg), so they may have been written by other blocks of the
 * same kernel (gemv_route). */
static __device__ __forceinline__ void
route_small_block(const float *logits, const float *logits_lo, const uint16_t *bias, int T, int E,
                  int k, int e0, int n_e, int BN, int *idx_out, float *w_out, int *count,
                  int *offset, int *pair_sorted, int *touched, int *n_touched, int *tiles,
                  int *n_tiles) {
    __shared__ int s_idx[64];
    __shared__ float s_w[64];
    __shared__ int s_off[256];
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, P = T * k;
    if (w < T)
        topk_warp(logits + (size_t)w * E, logits_lo ? logits_lo + (size_t)w * E : NULL, bias, E, k,
                  lane, s_idx + w * k, s_w + w * k);
    __syncthreads();
    if (tid < P) idx_out[tid] = s_idx[tid], w_out[tid] = s_w[tid];

    int c = 0;
    if (tid < n_e)
        for (int p = 0; p < P; p++) c += s_idx[p] == e0 + tid;
    expert_offsets(c, n_e, BN, count, offset, touched, n_touched, tiles, n_tiles, s_off);
    if (tid < P && s_idx[tid] - e0 >= 0 && s_idx[tid] - e0 < n_e) { /* a pair of a grouped expert */
        const int e = s_idx[tid];
        int r = 0;
        for (int q = 0; q < tid; q++) r += s_idx[q] == e;
        pair_sorted[s_off[e - e0] + r] = tid;
    }
}

/* route_small_block's outputs for P = T·k ≤ 32 pairs (decode steps of a few tokens), with the
 * grouping done by one warp instead of three block-wide scans: lane p holds pair p's expert, a
 * match gives each expert's pairs (count, and a pair's rank among them: its place in pair_sorted),
 * and lane L sums the experts [L·EPL, (L+1)·EPL) that one warp scan turns into offsets, touched and
 * tile positions. Called by every thread of the block (blockDim ≥ 32·T); the first __syncthreads
 * gathers the T warps' top-k picks, after which only warp 0 works. Used by gemv_route's last block
 * (gemv.h), where the routing is the tail of the router kernel; gpu_test_gemv holds its bytes to
 * route_small_block's (moe_route_split). */
static __device__ __forceinline__ void route_tiny_block(const float *logits, const float *logits_lo,
                                                        const uint16_t *bias, int T, int E, int k,
                                                        int e0, int n_e, int BN, int *idx_out,
                                                        float *w_out, int *count, int *offset,
                                                        int *pair_sorted, int *touched,
                                                        int *n_touched, int *tiles, int *n_tiles) {
    __shared__ int t_idx[32];
    __shared__ float t_w[32];
    __shared__ int t_cnt[256], t_off[256];
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, P = T * k;
    if (w < T)
        topk_warp(logits + (size_t)w * E, logits_lo ? logits_lo + (size_t)w * E : NULL, bias, E, k,
                  lane, t_idx + w * k, t_w + w * k);
    __syncthreads();
    if (w != 0) return;
    const int EPL = (n_e + 31) >> 5; /* experts per lane, ≤ 8 */
    const int ep = lane < P ? t_idx[lane] - e0 : -1;
    const bool grouped = lane < P && ep >= 0 && ep < n_e;
    if (lane < P) idx_out[lane] = t_idx[lane], w_out[lane] = t_w[lane];
    for (int j = 0; j < EPL; j++) {
        const int e = lane * EPL + j;
        if (e < n_e) t_cnt[e] = 0;
    }
    __syncwarp();
    /* Lanes of the same grouped expert match; every other lane gets a key of its own. */
    const unsigned same = __match_any_sync(0xffffffffu, grouped ? ep : -1 - lane);
    const int rank = __popc(same & ((1u << lane) - 1u));
    if (grouped && rank == 0) t_cnt[ep] = __popc(same);
    __syncwarp();
    int lc = 0, lt = 0, ll = 0; /* this lane's experts: pairs, touched, tiles */
    for (int j = 0; j < EPL; j++) {
        const int e = lane * EPL + j;
        const int c = e < n_e ? t_cnt[e] : 0;
        lc += c, lt += c > 0, ll += (c + BN - 1) / BN;
    }
    int ic = lc, it = lt, il = ll;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int a = __shfl_up_sync(0xffffffffu, ic, o), b = __shfl_up_sync(0xffffffffu, it, o),
                  d = __shfl_up_sync(0xffffffffu, il, o);
        if (lane >= o) ic += a, it += b, il += d;
    }
    int oc = ic - lc, ot = it - lt, ol = il - ll; /* exclusive: where this lane's experts start */
    for (int j = 0; j < EPL; j++) {
        const int e = lane * EPL + j;
        if (e >= n_e) break;
        const int c = t_cnt[e], tl = (c + BN - 1) / BN;
        offset[e] = oc, count[e] = c, t_off[e] = oc;
        if (c) touched[ot++] = e;
        for (int b = 0; b < tl; b++) tiles[ol + b] = (e << 16) | b;
        oc += c, ol += tl;
    }
    if (lane == 31) offset[n_e] = ic, *n_touched = it, *n_tiles = il;
    __syncwarp();
    if (grouped) pair_sorted[t_off[ep] + rank] = lane;
}
