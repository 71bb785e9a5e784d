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

/* A chunk's scale words (nk k steps of 8 words, contiguous from sp: the chunk's first), loaded by
 * the warp at once and held SK_SC_WORDS a lane: lane L's word i is the chunk's word L + 32 i, i.e.
 * k step 4 i + L / 8, row group L % 8; k step ks's word for row group g is then lane
 * (ks % 4) · 8 + g's word ks / 4 (sk_chunk takes it with a shuffle). */
enum { SK_SC_WORDS = (SK_MAX_KC * 8 + 31) / 32 };
static __device__ __forceinline__ void sk_chunk_scales(const uint32_t *sp, int nk,
                                                       uint32_t sw[SK_SC_WORDS]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < SK_SC_WORDS; i++)
        sw[i] = lane + 32 * i < nk * 8 ? __ldg(sp + lane + 32 * i) : 0u;
}

/* acc = the chunk's codes at stage st (nk k steps), scaled by sk_chunk_scales's words sw, · the
 * token, whose fragment for the chunk's first k step is at the shared address xa (this lane's 16
 * bytes).
 * A loop of four k steps a trip, not unrolled (session 30): unrolled over the chunk's 23 steps the
 * loop was ~3,800 instructions (60 KB) an instance, and ncu's source counters on the step kernel
 * (call 4, the experts' arithmetic alone) had 23-44 % of the expert loops' stall samples waiting
 * for instructions (no_instruction): eight warps streaming 60 KB of straight-line code each through
 * the instruction caches. Four steps (~5 KB) stay cached; the scale words then come from the six
 * words a lane holds (a shuffle a step) instead of 23 registers indexed by the step.
 * Four accumulators, (step parity, 32-wide half), their MMAs issued round-robin (a step's four MMAs
 * on one accumulator were a chain of dependent HMMAs back to back in the SASS). The sums add the
 * same products in another grouping than the small MoE kernel's: not its bits.
 * Folded scales only (moe_dequant.cuh): the step kernel's table requires them (runner_step.c). */
static __device__ __forceinline__ void
sk_chunk(uint32_t st, int nk, const uint32_t sw_in[SK_SC_WORDS], uint32_t xa, float acc[4]) {
    const int lane = threadIdx.x & 31, g8 = lane >> 2;
    float a4[2][2][4]; /* [step parity][half] */
#pragma unroll
    for (int i = 0; i < 16; i++) (&a4[0][0][0])[i] = 0.f;
    uint32_t sw[SK_SC_WORDS];
#pragma unroll
    for (int i = 0; i < SK_SC_WORDS; i++) sw[i] = sw_in[i];
    const uint32_t qa = st + (uint32_t)lane * 16;
    /* MMA m (0: k 0-15, 1: k 16-31) of half h of a step: moe_small.cuh's mma_chunk, split */
    auto mma = [&](float(&c)[4], const uint32_t(&f)[2][4], uint4 x, int m) {
        mma_bf16_16816(c, f[0][2 * m], f[1][2 * m], f[0][2 * m + 1], f[1][2 * m + 1], m ? x.z : x.x,
                       m ? x.w : x.y);
    };
#pragma unroll 1
    for (int k0 = 0; k0 < nk; k0 += 4) {
        const uint32_t w = sw[0]; /* steps k0 .. k0 + 3's words, then the next four's in place */
#pragma unroll
        for (int i = 0; i + 1 < SK_SC_WORDS; i++) sw[i] = sw[i + 1];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int ks = k0 + j;
            if (ks >= nk) break; /* warp-uniform: the chunk's last trip */
            const uint32_t sc = __shfl_sync(0xffffffffu, w, j * 8 + g8);
            const uint4 q = lds128(qa + (uint32_t)ks * SK_STEP_CODE_BYTES);
            const uint4 x[2] = {lds128(xa + (uint32_t)ks * 128u),
                                lds128(xa + (uint32_t)ks * 128u + 64u)};
            uint32_t f[2][2][4];
#pragma unroll
            for (int h = 0; h < 2; h++) { /* the two 32-wide chunks of this k step */
                dequant_word_t<true>(h ? q.z : q.x, sc, 2 * h, f[h][0]);
                dequant_word_t<true>(h ? q.w : q.y, sc, 2 * h + 1, f[h][1]);
            }
#pragma unroll
            for (int m = 0; m < 2; m++)
#pragma unroll
                for (int h = 0; h < 2; h++) mma(a4[j & 1][h], f[h], x[h], m);
        }
    }
#pragma unroll
    for (int i = 0; i < 4; i++) acc[i] = (a4[0][0][i] + a4[0][1][i]) + (a4[1][0][i] + a4[1][1][i]);
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
