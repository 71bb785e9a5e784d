/* What both forms of moe_wgmma_tma.cu share on the device: the launch's tensor maps and the bulk
 * tensor copies; and the shared-memory form's copier, which fills its raw-slot and B rings (the
 * register-A form, moe_wgmma_rs.cuh, fills its one ring itself). Device code. */
#pragma once

#include "backend/cuda/moe_ws_parts.cuh" /* ring, WS_RAW_BYTES */
#include "backend/cuda/tma_ring.cuh"     /* mbarriers */

#include <cuda.h> /* CUtensorMap */

#include <stdint.h>

/* The three tensor maps of a launch (a kernel parameter: __grid_constant__). */
struct moe_tma_maps {
    CUtensorMap codes;  /* u32 [E·RT][KK][128], box [8][1][128]: a step's 8 row tiles */
    CUtensorMap scales; /* u32 [E·RT][KK][8], box [8][1][8] */
    CUtensorMap b;      /* bf16 [rows][K], box [BN][64], 128-byte swizzle */
};

static __device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap *map, int c0,
                                                   int c1, uint64_t *bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
                 "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(smem_u32(bar))
                 : "memory");
}

static __device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap *map, int c0,
                                                   int c1, int c2, uint64_t *bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(dst),
                 "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(smem_u32(bar))
                 : "memory");
}

/* The copier's side of the rings both forms share (one lane issues every copy): raw step kk (the
 * block's 8 row tiles' codes and scale words) and B step kk (BB bytes: BN token rows of 64 k) into
 * the next slot of their rings, each after that slot's release by the step R (SB) before. */
template <int R, int SB, int BB> struct tma_copier {
    const moe_tma_maps *maps;
    uint64_t *full_r, *empty_r, *full_b, *empty_b;
    uint32_t r0, b0; /* the rings' shared-memory addresses */
    int tile0, row0; /* the block's first row tile (all experts' numbering) and B row */
    ring wr{0, 0}, wb{0, 0};
    __device__ __forceinline__ void raw(int kk) {
        if (kk >= R) mbar_wait(&empty_r[wr.i], wr.par ^ 1);
        mbar_arrive_expect_tx(&full_r[wr.i], WS_RAW_BYTES);
        const uint32_t slot = r0 + wr.i * WS_RAW_BYTES;
        tma_load_3d(slot, &maps->codes, 0, kk, tile0, &full_r[wr.i]);
        tma_load_3d(slot + WS_CODE_BYTES, &maps->scales, 0, kk, tile0, &full_r[wr.i]);
        wr.next(R);
    }
    __device__ __forceinline__ void b(int kk) {
        if (kk >= SB) mbar_wait(&empty_b[wb.i], wb.par ^ 1);
        mbar_arrive_expect_tx(&full_b[wb.i], BB);
        tma_load_2d(b0 + wb.i * BB, &maps->b, kk * 64, row0, &full_b[wb.i]);
        wb.next(SB);
    }
    /* the first DR raw steps and DB B steps, before the k loop */
    __device__ __forceinline__ void prime(int KK, int DR, int DB) {
        for (int kk = 0; kk < DR && kk < KK; kk++) raw(kk);
        for (int kk = 0; kk < DB && kk < KK; kk++) b(kk);
    }
};
