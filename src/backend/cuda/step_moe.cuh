/* The experts of a one-token decode step as ring chunks, for the step kernel (step_kernel.cu).
 *
 * A 16-row MXFP4 tile of moe.h's repacked layout (codes [KK][32 lanes][16 B], scale words
 * [KK][8][4 B], each contiguous) comes through the kernel's ring in chunks of kc k steps: one
 * stage holds a chunk's codes (kc · 512 bytes) and then its scale words (kc · 32 bytes), two bulk
 * copies by the producer once the routing has named the experts. The consumer warp that owns the
 * stage multiplies the chunk with the token's row staged in shared memory on mma.sync m16n8k16, as
 * the small MoE kernel's k loop does (moe_small.cuh: the same dequantisation, the same MMAs in the
 * same k order inside a chunk), and the chunks' partial sums of one tile meet in shared memory:
 * the warp that brings the last of them adds them in chunk order (the same bits whichever warp that
 * is) and writes the epilogue.
 *
 * One token: every lane reads the token row's fragment (k 8t … 8t + 7 of each 32-wide chunk)
 * whatever its group g, so each of the MMA's 8 columns holds the same token and column 0 (lanes
 * with t = 0: acc[0] row g, acc[2] row g + 8) is the result. Device code. */
#pragma once

#include "backend/cuda/moe_dequant.cuh"
#include "backend/cuda/moe_kernel_common.cuh"
#include "backend/cuda/moe_small.cuh"

enum {
    SK_CHUNK_STEP_BYTES = 512 + 32, /* a k step of a tile: its codes and its scale words */
    SK_MAX_TILES = 16,              /* tiles of one matrix a block (gate_up's, down's) */
    SK_MAX_CHUNKS = 4               /* chunks a tile */
};

/* The partial sums of the block's tiles and their arrival counts (shared memory). */
struct sk_partials {
    float sum[SK_MAX_TILES][SK_MAX_CHUNKS][16]; /* rows 0-15 of the tile's column 0 */
    int count[SK_MAX_TILES];                    /* chunks arrived; reset by the last */
};

/* acc = the chunk at stage st (nk k steps: codes, then scale words) · the token, whose fragment
 * for the chunk's first k step is at the shared address xa (this lane's 16 bytes). */
template <bool FOLDED>
static __device__ __forceinline__ void sk_chunk(uint32_t st, int nk, uint32_t xa, float acc[4]) {
    const int lane = threadIdx.x & 31;
    acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
    const uint32_t qa = st + (uint32_t)lane * 16, sa = st + (uint32_t)nk * 512 + (lane >> 2) * 4;
#pragma unroll 3
    for (int ks = 0; ks < nk; ks++) {
        const uint4 q = lds128(qa + (uint32_t)ks * 512);
        uint32_t sc;
        asm volatile("ld.shared.u32 %0, [%1];" : "=r"(sc) : "r"(sa + (uint32_t)ks * 32));
#pragma unroll
        for (int h = 0; h < 2; h++) { /* the two 32-wide chunks of this k step */
            uint32_t ag[4], a8[4];
            dequant_word_t<FOLDED>(h ? q.z : q.x, sc, 2 * h, ag);
            dequant_word_t<FOLDED>(h ? q.w : q.y, sc, 2 * h + 1, a8);
            mma_chunk(acc, ag, a8, lds128(xa + (uint32_t)(ks * 128 + h * 64)));
        }
    }
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
