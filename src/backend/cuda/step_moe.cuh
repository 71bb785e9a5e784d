/* The experts of a one-token decode step as warp tiles, for the step kernel (step_kernel.cu): a warp
 * streams one 16-row MXFP4 tile's codes (moe.h's repacked layout) over a k range and multiplies
 * them with the token's row staged in shared memory, on mma.sync m16n8k16 — the small MoE kernel's k
 * loop (moe_small.cuh: the same loads, the same dequantisation, the same MMAs in the same order, so
 * a tile's sums are that kernel's bits).
 *
 * One token: every lane reads the token row's fragment (k 8t … 8t + 7 of each 32-wide chunk) whatever
 * its group g, so each of the MMA's 8 columns holds the same token and the accumulator's column 0
 * (lanes with t = 0: acc[0] row g, acc[2] row g + 8) is the result. Device code. */
#pragma once

#include "backend/cuda/moe_kernel_common.cuh"
#include "backend/cuda/moe_small.cuh"

/* acc = tile · token over k steps [0, nk) of the tile at qp / sp (this lane's codes and scale word of
 * the range's first k step: moe_small.cuh's small_begin), the token fragment at the shared address
 * xa (k step 0 of the range, this lane's 16 bytes). Two register batches in flight, as small_run's
 * steady loop, then the bounded batches. SM_U: k steps a register batch (the small kernel's 6; with
 * one block an SM there are registers for more bytes in flight a warp). */
template <int SM_U, bool FOLDED>
static __device__ __forceinline__ void step_tile(const uint4 *qp, const uint32_t *sp, int nk,
                                                 uint32_t xa, float acc[4]) {
    acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
    uint4 qv[SM_U];
    uint32_t sv[SM_U];
    load_batch<SM_U>(qp, sp, 0, nk, qv, sv);
    auto k_step = [&](const uint4 q, const uint32_t sc, int ks) {
#pragma unroll
        for (int h = 0; h < 2; h++) { /* the two 32-wide chunks of this k step */
            uint32_t ag[4], a8[4];
            dequant_word_t<FOLDED>(h ? q.z : q.x, sc, 2 * h, ag);
            dequant_word_t<FOLDED>(h ? q.w : q.y, sc, 2 * h + 1, a8);
            mma_chunk(acc, ag, a8, lds128(xa + (uint32_t)(ks * 128 + h * 64)));
        }
    };
    int kb = 0;
#pragma unroll 2
    for (; kb + 2 * SM_U <= nk; kb += SM_U) {
        uint4 qn[SM_U];
        uint32_t sn[SM_U];
        load_batch<SM_U, false>(qp, sp, kb + SM_U, nk, qn, sn);
#pragma unroll
        for (int u = 0; u < SM_U; u++) k_step(qv[u], sv[u], kb + u);
#pragma unroll
        for (int u = 0; u < SM_U; u++) qv[u] = qn[u], sv[u] = sn[u];
    }
    for (; kb + SM_U <= nk; kb += SM_U) {
        uint4 qn[SM_U];
        uint32_t sn[SM_U];
        load_batch<SM_U>(qp, sp, kb + SM_U, nk, qn, sn);
#pragma unroll
        for (int u = 0; u < SM_U; u++) k_step(qv[u], sv[u], kb + u);
#pragma unroll
        for (int u = 0; u < SM_U; u++) qv[u] = qn[u], sv[u] = sn[u];
    }
#pragma unroll
    for (int u = 0; u < SM_U; u++)
        if (kb + u < nk) k_step(qv[u], sv[u], kb + u);
}

/* The tile's first code word and scale word for this lane: expert e's row tile rt of RT, k steps
 * from kk0 of KK (moe.h: q [E][RT][KK][32][16 B], s [E][RT][KK][8][4 B]). */
static __device__ __forceinline__ void step_tile_at(const uint8_t *wq, const uint8_t *ws, int e,
                                                    int rt, int RT, int kk0, int KK,
                                                    const uint4 **qp, const uint32_t **sp) {
    const int lane = threadIdx.x & 31;
    const size_t tile_kk = ((size_t)e * RT + rt) * KK + kk0;
    *qp = (const uint4 *)wq + tile_kk * 32 + lane;
    *sp = (const uint32_t *)ws + tile_kk * 8 + (lane >> 2);
}
