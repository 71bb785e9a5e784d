/* What the two warp-specialised MoE kernels share (moe_wgmma_ws.cu: the producers copy with
 * cp.async; moe_wgmma_tma.cu: the copy engine does): the raw-slot and A-stage sizes, the ring
 * position, the ordered shared-memory accesses, a dequantising thread's hand-over of its four words
 * and a consumer warpgroup's k step. Device code. */
#pragma once

#include "backend/cuda/moe_dequant.cuh"
#include "backend/cuda/wgmma.cuh"

#include <stdint.h>
#include <type_traits> /* std::integral_constant */

enum {
    WS_CODE_BYTES = 8 * 512,                       /* a k step's codes: 8 row tiles */
    WS_SCALE_BYTES = 8 * 32,                       /* their scale words */
    WS_RAW_BYTES = WS_CODE_BYTES + WS_SCALE_BYTES, /* one raw slot (a multiple of 128) */
    WS_A_BYTES = 128 * 128                         /* an A stage: 128 rows x 64 k bf16 */
};

/* A position in a ring of n entries and the parity of its use count (which phase of the entry's
 * mbarrier the current use is). */
struct ring {
    int i;
    uint32_t par;
    __device__ __forceinline__ void next(int n) {
        if (++i == n) i = 0, par ^= 1;
    }
};

/* Shared-memory accesses the compiler keeps where they are: after the waits that make their data
 * valid, before the arrivals that hand it over. */
static __device__ __forceinline__ uint2 ws_lds64(uint32_t addr) {
    uint2 v;
    asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(addr) : "memory");
    return v;
}

static __device__ __forceinline__ uint32_t ws_lds32(uint32_t addr) {
    uint32_t v;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
    return v;
}

static __device__ __forceinline__ void ws_sts128(uint32_t addr, uint32_t x, uint32_t y, uint32_t z,
                                                 uint32_t w) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(x), "r"(y), "r"(z),
                 "r"(w)
                 : "memory");
}

/* A dequantising thread's step after its waits: its four code words wd (scale word sc) into the A
 * stage at a_base, at its four store offsets, made visible to wgmma (the async proxy). The caller
 * then arrives on the stage's "full" barrier. */
template <bool FOLDED>
static __device__ __forceinline__ void ws_dequant_store(const uint32_t wd[4], uint32_t sc,
                                                        uint32_t a_base, const uint32_t st_off[4]) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
        uint32_t v[4];
        dequant_word_t<FOLDED>(wd[i], sc, i, v);
        ws_sts128(a_base + st_off[i], v[0], v[1], v[2], v[3]);
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* A consumer warpgroup's k step: its 64 rows of the A stage (descriptor da) times the first NN rows
 * of the B stage (db; NN below the tile's width for a tile of at most NN tokens: ws_with_width),
 * four wgmma m64nNNk16 committed as one group. */
template <int NN>
static __device__ __forceinline__ void ws_mma_step(float (&d)[NN / 2], uint64_t da, uint64_t db) {
    static_assert(NN % 16 == 0 && NN <= 128 && NN != 80 && NN != 112, "a width wgmma.cuh has");
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < 4; j++) {
        if constexpr (NN == 128)
            wgmma_ss_m64n128k16(d, da + 2 * j, db + 2 * j);
        else if constexpr (NN == 96)
            wgmma_ss_m64n96k16(d, da + 2 * j, db + 2 * j);
        else if constexpr (NN == 64)
            wgmma_ss_m64n64k16(d, da + 2 * j, db + 2 * j);
        else if constexpr (NN == 48)
            wgmma_ss_m64n48k16(d, da + 2 * j, db + 2 * j);
        else if constexpr (NN == 32)
            wgmma_ss_m64n32k16(d, da + 2 * j, db + 2 * j);
        else
            wgmma_ss_m64n16k16(d, da + 2 * j, db + 2 * j);
    }
    wgmma_commit();
}

/* The narrow form of the consumers' k loop: calls k_loop(std::integral_constant<int, NN>{}) with NN
 * the narrowest MMA width that holds the tile's n tokens — 16, 32, 48 or 64 for 64-token tiles, 32,
 * 64, 96 or 128 for 128-token ones (a copy of the loop for each width, chosen once per block).
 * Why: a tile holds an expert's remaining tokens, and at T = 1024 an expert averages 32 (half of
 * each 64-wide MMA is padding); the tensor work and the consumers' hold on their stages shrink with
 * the width. Each output column depends on its B row alone, so the stored columns are the same
 * bits at any width. k_loop runs the whole tile, epilogue included, on accumulators of its own:
 * with one array for all widths, their join made ptxas serialise the MMAs (C7515). */
template <int BN, class F> static __device__ __forceinline__ void ws_with_width(int n, F &&k_loop) {
    constexpr int Q = BN / 4;
    if (n <= Q)
        k_loop(std::integral_constant<int, Q>{});
    else if (n <= 2 * Q)
        k_loop(std::integral_constant<int, 2 * Q>{});
    else if (n <= 3 * Q)
        k_loop(std::integral_constant<int, 3 * Q>{});
    else
        k_loop(std::integral_constant<int, BN>{});
}
