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
 * the chunk's first k step is at the shared address xa (this lane's 16 bytes).
 * Why this shape (session 30; session 29's form, one step at a time into one of two accumulators,
 * was the experts' arithmetic limit: ~22 µs a layer of gate_up against the small kernel's whole
 * 16.1, with 8 warps an SM):
 * - Four independent accumulators, (step parity, 32-wide half), their MMAs issued round-robin: a
 *   step's four MMAs on one accumulator made a chain of four dependent HMMAs (each waits out the
 *   one before: the SASS had them back to back), and with two warps a scheduler nothing filled
 *   that wait. Now each accumulator's next MMA comes four MMAs later.
 * - Two steps at a time, both dequantised before their MMAs, so the warp has independent work.
 * - No exit from the loop: a step past nk multiplies codes of zero (FP4 +0: exact zero products,
 *   so the sums keep their bits) with step 0's token fragments (finite: a fragment past the row
 *   could hold a NaN, and 0 · NaN is NaN). With `if (ks >= nk) break` after each step, every step
 *   began with its branch and then its code load. The cost at 120b: one step of zeros in the
 *   22-step chunks (half of them: ~2 % of the arithmetic).
 * The sums add the same products in another grouping than the small kernel's: not its bits. */
template <bool FOLDED>
static __device__ __forceinline__ void sk_chunk(uint32_t st, int nk, const uint32_t sc[SK_MAX_KC],
                                                uint32_t xa, float acc[4]) {
    const int lane = threadIdx.x & 31;
    float a4[2][2][4]; /* [step parity][half] */
#pragma unroll
    for (int i = 0; i < 16; i++) (&a4[0][0][0])[i] = 0.f;
    const uint32_t qa = st + (uint32_t)lane * 16;
    /* step ks's A fragments (its codes dequantised; zero past nk) and token fragments */
    auto operands = [&](int ks, uint32_t(&f)[2][2][4], uint4(&x)[2]) {
        const bool on = ks < nk;
        const uint32_t kq = on ? (uint32_t)ks : 0u; /* an address inside the chunk either way */
        uint4 q = lds128(qa + kq * SK_STEP_CODE_BYTES);
        if (!on) q = make_uint4(0u, 0u, 0u, 0u);
        x[0] = lds128(xa + kq * 128u);
        x[1] = lds128(xa + kq * 128u + 64u);
#pragma unroll
        for (int h = 0; h < 2; h++) { /* the two 32-wide chunks of this k step */
            dequant_word_t<FOLDED>(h ? q.z : q.x, sc[ks], 2 * h, f[h][0]);
            dequant_word_t<FOLDED>(h ? q.w : q.y, sc[ks], 2 * h + 1, f[h][1]);
        }
    };
    /* MMA m (0: k 0-15, 1: k 16-31) of half h of a step: moe_small.cuh's mma_chunk, split */
    auto mma = [&](float(&c)[4], const uint32_t(&f)[2][4], uint4 x, int m) {
        mma_bf16_16816(c, f[0][2 * m], f[1][2 * m], f[0][2 * m + 1], f[1][2 * m + 1], m ? x.z : x.x,
                       m ? x.w : x.y);
    };
#pragma unroll
    for (int ks = 0; ks + 1 < SK_MAX_KC; ks += 2) {
        uint32_t f0[2][2][4], f1[2][2][4];
        uint4 x0[2], x1[2];
        operands(ks, f0, x0);
        operands(ks + 1, f1, x1);
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                mma(a4[0][h], f0[h], x0[h], m);
                mma(a4[1][h], f1[h], x1[h], m);
            }
    }
    if constexpr (SK_MAX_KC % 2) {
        constexpr int ks = SK_MAX_KC - 1;
        if (ks < nk) {
            uint32_t f0[2][2][4];
            uint4 x0[2];
            operands(ks, f0, x0);
#pragma unroll
            for (int m = 0; m < 2; m++)
#pragma unroll
                for (int h = 0; h < 2; h++) mma(a4[0][h], f0[h], x0[h], m);
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
