/* What the two warp-specialised MoE kernels share (moe_wgmma_ws.cu: the producers copy with
 * cp.async; moe_wgmma_tma.cu: the copy engine does): the raw-slot and A-stage sizes, the ring
 * position, the ordered shared-memory accesses, a dequantising thread's hand-over of its four words
 * and a consumer warpgroup's k step. Device code. */
#pragma once

#include "backend/cuda/moe_dequant.cuh"
#include "backend/cuda/wgmma.cuh"

#include <stdint.h>

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

/* A consumer warpgroup's k step: its 64 rows of the A stage (descriptor da) times the B stage (db),
 * four wgmma m64nNNk16 committed as one group. NN < BN (the narrow form: a tile with at most NN
 * tokens) multiplies only the first NN B rows, into the first NN/2 accumulators. */
template <int BN, int NN = BN>
static __device__ __forceinline__ void ws_mma_step(float (&acc)[BN / 2], uint64_t da, uint64_t db) {
    static_assert(NN % 16 == 0 && NN <= BN, "a width of 16, 32, 48, 64 or 128");
    float *d = acc; /* the narrow MMAs take the first NN/2 */
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < 4; j++) {
        if constexpr (NN == 128)
            wgmma_ss_m64n128k16(d, da + 2 * j, db + 2 * j);
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
