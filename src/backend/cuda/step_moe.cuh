/* The experts of a one-token decode step as ring chunks, for the step kernel (step_kernel.cu).
 *
 * A 16-row MXFP4 tile of moe.h's repacked layout (codes [KK][32 lanes][16 B], scale words
 * [KK][8][4 B], each contiguous) comes through the kernel's ring in chunks of kc k steps: one stage
 * holds a chunk's codes (kc · 512 bytes: one bulk copy by the producer once the routing has named
 * the experts; 120b: a tile in two chunks of 23 and 22 steps). Its scale words (1/16 of the bytes)
 * the consumer warp loads itself, before it waits for the stage: with them in the stage every
 * chunk was two copies, and an SM's copies, not its bytes, bounded the experts' stream (session
 * 29: 8 KB and 0.5 KB copies, gate_up at 1.2 TB/s). The warp that owns the stage multiplies the
 * chunk with the token's row staged in shared memory on mma.sync m16n8k16, as the small MoE
 * kernel's k loop does (moe_small.cuh: the same dequantisation, the same MMAs in the same k order
 * inside a chunk), and the chunks' partial sums of one tile meet in shared memory: the warp that
 * brings the last of them adds them in chunk order (the same bits whichever warp that is) and
 * writes the epilogue.
 *
 * One token: every lane reads the token row's fragment (k 8t … 8t + 7 of each 32-wide chunk)
 * whatever its group g, so each of the MMA's 8 columns holds the same token and column 0 (lanes
 * with t = 0: acc[0] row g, acc[2] row g + 8) is the result. Device code. */
#pragma once

#include "backend/cuda/moe_dequant.cuh"
#include "backend/cuda/moe_kernel_common.cuh"
#include "backend/cuda/moe_small.cuh"

enum {
    SK_STEP_CODE_BYTES = 512, /* a k step of a tile's codes */
    SK_MAX_KC = 23,           /* k steps a chunk */
    SK_MAX_TILES = 16,        /* tiles of one matrix a block (gate_up's, down's) */
    SK_MAX_CHUNKS = 4         /* chunks a tile */
};

/* The partial sums of the block's tiles and their arrival counts (shared memory). */
struct sk_partials {
    float sum[SK_MAX_TILES][SK_MAX_CHUNKS][16]; /* rows 0-15 of the tile's column 0 */
    int count[SK_MAX_TILES];                    /* chunks arrived; reset by the last */
};

/* This lane's scale words of a chunk's nk k steps (sp: the chunk's first, this lane's word g). */
static __device__ __forceinline__ void sk_chunk_scales(const uint32_t *sp, int nk,
                                                       uint32_t sc[SK_MAX_KC]) {
#pragma unroll
    for (int ks = 0; ks < SK_MAX_KC; ks++) sc[ks] = ks < nk ? __ldg(sp + (size_t)ks * 8) : 0u;
}

/* acc = the chunk's codes at stage st (nk k steps), scaled by sc, · the token, whose fragment for
 * the chunk's first k step is at the shared address xa (this lane's 16 bytes). Even and odd k
 * steps go to two accumulators, added at the end: one chain of dependent MMAs a warp was the
 * arithmetic's limit with 8 warps an SM (session 29's probe: gate_up's arithmetic alone ~23 µs a
 * layer against ~12 for its bytes). */
template <bool FOLDED>
static __device__ __forceinline__ void sk_chunk(uint32_t st, int nk, const uint32_t sc[SK_MAX_KC],
                                                uint32_t xa, float acc[4]) {
    const int lane = threadIdx.x & 31;
    float a2[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    const uint32_t qa = st + (uint32_t)lane * 16;
#pragma unroll
    for (int ks = 0; ks < SK_MAX_KC; ks++) {
        if (ks >= nk) break;
        const uint4 q = lds128(qa + (uint32_t)ks * SK_STEP_CODE_BYTES);
#pragma unroll
        for (int h = 0; h < 2; h++) { /* the two 32-wide chunks of this k step */
            uint32_t ag[4], a8[4];
            dequant_word_t<FOLDED>(h ? q.z : q.x, sc[ks], 2 * h, ag);
            dequant_word_t<FOLDED>(h ? q.w : q.y, sc[ks], 2 * h + 1, a8);
            mma_chunk(a2[ks & 1], ag, a8, lds128(xa + (uint32_t)(ks * 128 + h * 64)));
        }
    }
#pragma unroll
    for (int i = 0; i < 4; i++) acc[i] = a2[0][i] + a2[1][i];
}

/* Chunk c of the block's tile lt (of nc chunks) is in acc: true for the warp whose chunk was the
 * tile's last to arrive, whose lanes t = 0 then hold the tile's rows g (out[0]) and g + 8 (out[1]),
 * the chunks' sums added in chunk order. */
static __device__ __forceinline__ bool sk_tile_meet(sk_partials *p, int lt, int c, int nc,
                                                    const float acc[4], float out[2]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    if (t == 0) p->sum[lt][c][g] = acc[0], p->sum[lt][c][g + 8] = acc[2];
    __threadfence_block();
    __syncwarp();
    int last = 0;
    if (lane == 0) last = atomicAdd(&p->count[lt], 1) == nc - 1;
    last = __shfl_sync(0xffffffffu, last, 0);
    if (!last) return false;
    __threadfence_block();
    out[0] = out[1] = 0.0f;
    if (t == 0)
        for (int j = 0; j < nc; j++) {
            out[0] += *(volatile float *)&p->sum[lt][j][g];
            out[1] += *(volatile float *)&p->sum[lt][j][g + 8];
        }
    if (lane == 0) p->count[lt] = 0; /* ready for the next matrix */
    return true;
}
