/* The large-batch MoE grouped GEMM on wgmma with warp specialisation (sm_90a): the same tiles,
 * routing, weights and epilogue as moe_wgmma.cu, with the work split between a producer warpgroup that
 * brings and dequantises the operands and two consumer warpgroups that only multiply.
 * GPTOSS_MOE_WGMMA=2 (moe_set_wgmma(2)) selects it; off by default until measured.
 *
 * ── Why ───────────────────────────────────────────────────────────────────────────────────────
 * In moe_wgmma.cu every warp copies its share of the operands, dequantises its A fragment in
 * registers, issues the MMAs and waits for them, one k step after another: ncu at prefill 8k has the
 * tensor pipe 30 % busy and 0.6 eligible warps per scheduler. Keeping an MMA group in flight while
 * the next A is made is what the tensor cores need, and with A in registers ptxas cannot do it
 * (C7513). With A in shared memory it can: the consumers' only work per k step is to wait for the
 * stage, issue four wgmma and release the stage they finished one step earlier, so their MMAs run
 * back to back while the producer prepares the next stages. (A in shared memory *without* the split
 * was slower, bench/NOTES.md: the same warps then stored, fenced and waited.)
 *
 * ── Block: 384 threads, 128 weight rows x BN tokens ───────────────────────────────────────────
 * warpgroup 0, the producer:
 *   - warp 0 keeps RAW k steps of codes and scales requested by bulk copies (TMA) into a ring of raw
 *     slots (16 copies a step, one a lane: 8 row tiles' 512 bytes of codes and 32 of scale words;
 *     the layout of moe.h makes each one contiguous), completing the slot's mbarrier;
 *   - every producer thread copies its share of the step's BN token rows (16-byte cp.async, gathered
 *     through the row table) into the stage's B, and dequantises two row tiles' words of the raw slot
 *     into the stage's A (bf16, 16-byte shared stores), then arrives on the stage's "full" barrier.
 * warpgroups 1 and 2, the consumers: warpgroup c multiplies rows 64c … 64c + 63 of A by all of B
 *   (four wgmma m64nBNk16 a step, both operands from shared memory), keeps one group in flight and
 *   releases the stage of the step before (one arrival per warp on its "empty" barrier).
 *
 * A and B are 128-byte-swizzled K-major tiles (wgmma.cuh): a row of 64 k is 128 bytes, so a stage is
 * 128 A rows and BN B rows in natural k order; the dequantised word (8 codes of one row, k 8c … 8c+7
 * after the repack's shuffle) is exactly one 16-byte chunk. A thread (g, t) of a row tile holds
 * rows g and g + 8 at chunks t and 4 + t; lanes with odd g store their chunk 4 + t first, so that each
 * quarter warp's eight stores cover eight different bank groups.
 *
 * The accumulators are laid out as mma.m16n8's, warp w of a consumer holding rows 16w … 16w + 15:
 * the epilogue is moe_wgmma.cu's (store_tile_n). Within each output the sums run over the k16 blocks
 * in order, as in moe_wgmma.cu, but over natural k instead of the register fragments' permuted k, so
 * the bits may differ from it in the last place (gpu_test_moe bounds both against the CPU).
 *
 * ── Stages and deadlock freedom ───────────────────────────────────────────────────────────────
 * A has SA stages, B SB. The producer requests step kk + D's tokens (B stage (kk + D) % SB) before it
 * dequantises step kk, so it waits for the consumers' release of step kk + D − SB; and it writes A
 * stage kk % SA after their release of step kk − SA. The consumers release step kk − 1 only after
 * issuing step kk, which needs only what the producer has finished by its step kk. So with the
 * producer at step kk they can have released everything up to kk − 2: SB ≥ D + 2 and SA ≥ 2 leave
 * no cycle. */
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/moe_dequant.cuh"
#include "backend/cuda/moe_kernel_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/per_device.h"
#include "backend/cuda/tma_ring.cuh"
#include "backend/cuda/wgmma.cuh"

enum { WS_THREADS = 384, WS_PRODUCERS = 128 };
enum {
    WS_CODE_BYTES = 8 * 512,                       /* a k step's codes: 8 row tiles */
    WS_SCALE_BYTES = 8 * 32,                       /* their scale words */
    WS_RAW_BYTES = WS_CODE_BYTES + WS_SCALE_BYTES, /* one raw slot */
    WS_A_BYTES = 128 * 128                         /* 128 rows x 64 k bf16 */
};

/* The shapes per token tile: SA stages of A, SB of B, the tokens requested D steps ahead (SB = D + 2:
 * see "Stages" in the header), RAW raw slots, blocks an SM. The token rows come mostly from L2, whose
 * latency under load is ~1-2 µs: a lookahead of one step left every step waiting for it (measured:
 * 2x slower than moe_wgmma.cu). BN = 64: two blocks an SM (~110 KB each); BN = 128: one. */
template <int BN> struct ws_cfg {
    static constexpr int SA = 3;
    static constexpr int D = BN == 64 ? 3 : 4;
    static constexpr int SB = D + 2;
    static constexpr int RAW = BN == 64 ? 5 : 8;
    static constexpr int BLOCKS = BN == 64 ? 2 : 1;
    static constexpr int B_BYTES = BN * 128; /* a multiple of 1024 */
    /* barriers: full[SA], empty_a[SA], empty_b[SB], raw[RAW]; then the row table */
    static constexpr int BAR_BYTES = 8 * (2 * SA + SB + RAW);
    static constexpr int SMEM = SA * WS_A_BYTES + SB * B_BYTES + RAW * WS_RAW_BYTES +
                                ((BAR_BYTES + BN * 4 + 15) / 16) * 16 + 1024;
};
static_assert(2 * (ws_cfg<64>::SMEM + 1024) <= 228 * 1024, "two 64-token blocks an SM");
static_assert(ws_cfg<128>::SMEM <= 227 * 1024, "one 128-token block an SM");

/* The 128 producer threads' own barrier (id 1; __syncthreads is 0). */
static __device__ __forceinline__ void producer_sync() {
    asm volatile("bar.sync 1, 128;" ::: "memory");
}

static __device__ __forceinline__ void sts128(uint32_t addr, uint32_t x, uint32_t y, uint32_t z,
                                              uint32_t w) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(x), "r"(y), "r"(z),
                 "r"(w)
                 : "memory");
}

template <int MODE, int BN>
__global__ void __launch_bounds__(WS_THREADS, ws_cfg<BN>::BLOCKS)
    moe_wgmma_ws_kernel(const moe_args a) {
    using C = ws_cfg<BN>;
    constexpr int SA = C::SA, SB = C::SB, D = C::D, RAW = C::RAW;
    static_assert(BN == 64 || BN == 128, "64- or 128-token tiles");
    pdl_prologue(); /* first: see pdl.cuh */
    extern __shared__ __align__(1024) uint8_t ws_smem_raw[];
    /* The swizzled tiles need 1024-byte alignment: round the dynamic window's start up (the launch
     * asks for 1024 bytes more). */
    const uint32_t raw_base = smem_u32(ws_smem_raw);
    uint8_t *smem = ws_smem_raw + (((raw_base + 1023u) & ~1023u) - raw_base);
    uint8_t *a_st = smem;                   /* SA x A */
    uint8_t *b_st = a_st + SA * WS_A_BYTES; /* SB x B */
    uint8_t *raws = b_st + SB * C::B_BYTES; /* RAW x {codes, scales} */
    uint64_t *full = (uint64_t *)(raws + RAW * WS_RAW_BYTES);
    uint64_t *empty_a = full + SA;
    uint64_t *empty_b = empty_a + SA;
    uint64_t *rawbar = empty_b + SB;
    uint32_t *row_off = (uint32_t *)(rawbar + RAW);

    tile_pos tp;
    if (!tile_of_block_bn<BN>(a, &tp)) return;
    const int rb = blockIdx.x;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;

    if (tid == 0) {
        for (int s = 0; s < SA; s++) {
            mbar_init(&full[s], WS_PRODUCERS);
            mbar_init(&empty_a[s], 8); /* one arrival per consumer warp */
        }
        for (int s = 0; s < SB; s++) mbar_init(&empty_b[s], 8);
        for (int r = 0; r < RAW; r++) mbar_init(&rawbar[r], 1);
        mbar_init_fence();
    }
    tile_row_table<MODE>(a, tp.off, tp.n_base, tp.n_valid, row_off, BN); /* ends with a barrier */

    if (w < 4) {
        /* ── producer ── */
        const int p = tid;
        /* Raw step kk into slot kk % RAW, by lanes 0-15 of producer warp 0: lane i < 8 copies row
         * tile i's codes, lane 8 + i its scale words (tiles past the matrix repeat its last tile,
         * never stored: the slot's byte count stays constant). Lane 0 announces the bytes first. */
        auto issue_raw = [&](int kk) {
            const int slot = kk % RAW;
            uint8_t *dst = raws + slot * WS_RAW_BYTES;
            if (lane == 0) mbar_arrive_expect_tx(&rawbar[slot], WS_RAW_BYTES);
            __syncwarp();
            if (lane < 16) {
                const int i = lane & 7;
                const int rt = min(rb * 8 + i, a.RT - 1);
                const size_t at = ((size_t)tp.e * a.RT + rt) * a.KK + kk;
                if (lane < 8)
                    bulk_copy_g2s(dst + i * 512, (const char *)a.wq + at * 512, 512, &rawbar[slot]);
                else
                    bulk_copy_g2s(dst + WS_CODE_BYTES + i * 32, (const char *)a.wsc + at * 32, 32,
                                  &rawbar[slot]);
            }
        };
        /* Step kk's token rows into B stage kk % SB: chunk q = p + 128·i is token q / 8's 16-byte
         * chunk q % 8 (eight threads a token: its 128 contiguous bytes). Rows past the tile's tokens
         * are zeros. */
        auto copy_b = [&](int kk) {
            const uint32_t b = smem_u32(b_st + (kk % SB) * C::B_BYTES);
#pragma unroll
            for (int i = 0; i < BN * 8 / WS_PRODUCERS; i++) {
                const int q = p + WS_PRODUCERS * i, n = q >> 3, c = q & 7;
                const uint32_t o = row_off[n];
                const uint16_t *src = a.x + (o == ~0u ? 0u : o) + (size_t)kk * 64 + 8 * c;
                cp_async16(b + sw128_offset(n, c), src, o == ~0u ? 0 : 16);
            }
        };
        if (w == 0)
            for (int kk = 0; kk < RAW && kk < a.KK; kk++) issue_raw(kk);
        for (int j = 0; j < D; j++) {
            if (j < a.KK) copy_b(j);
            cp_async_commit();
        }

        /* This thread's two row tiles (warp w and w + 4) and its place in them. */
        const int g = lane >> 2, t = lane & 3, odd = g & 1;
        for (int kk = 0; kk < a.KK; kk++) {
            const int s = kk % SA;
            if (kk + D < a.KK) {
                const int ub = (kk + D) / SB;
                if (ub >= 1) mbar_wait(&empty_b[(kk + D) % SB], (ub - 1) & 1);
                copy_b(kk + D);
            }
            cp_async_commit();

            const int slot = kk % RAW;
            mbar_wait(&rawbar[slot], (kk / RAW) & 1);
            const uint8_t *rs = raws + slot * WS_RAW_BYTES;
            uint4 qc[2];
            uint32_t sc[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int tile = w + 4 * h;
                qc[h] = *(const uint4 *)(rs + tile * 512 + lane * 16);
                sc[h] = *(const uint32_t *)(rs + WS_CODE_BYTES + tile * 32 + g * 4);
            }
            producer_sync(); /* every producer has read the slot: refill it */
            if (w == 0 && kk + RAW < a.KK) issue_raw(kk + RAW);

            if (kk >= SA) mbar_wait(&empty_a[s], ((kk / SA) - 1) & 1);
            const uint32_t a_base = smem_u32(a_st + s * WS_A_BYTES);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int r0 = 16 * (w + 4 * h) + g; /* rows r0 (words x, z) and r0 + 8 (y, w) */
                /* word j: x = (r0, chunk t, scale byte 0), y = (r0 + 8, t, 1), z = (r0, 4 + t, 2),
                 * w = (r0 + 8, 4 + t, 3); odd g stores z, w first (bank groups, header). */
                const uint32_t wd[4] = {odd ? qc[h].z : qc[h].x, odd ? qc[h].w : qc[h].y,
                                        odd ? qc[h].x : qc[h].z, odd ? qc[h].y : qc[h].w};
                const int jb = odd ? 2 : 0;
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    uint32_t v[4];
                    const int j = (jb + i) & 3;
                    dequant_word(wd[i], scale_pair(sc[h], j), v);
                    const int r = r0 + 8 * (j & 1), c = t + 4 * (j >> 1);
                    sts128(a_base + sw128_offset(r, c), v[0], v[1], v[2], v[3]);
                }
            }
            cp_async_wait<D>(); /* this thread's token copies of step kk have landed */
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); /* visible to wgmma */
            mbar_arrive(&full[s]);
        }
        cp_async_wait<0>();
        return;
    }

    /* ── consumers ── */
    const int cw = (w >> 2) - 1, w4 = w & 3; /* consumer warpgroup 0 or 1, warp within it */
    constexpr int NACC = BN / 2;
    float acc[NACC];
#pragma unroll
    for (int i = 0; i < NACC; i++) acc[i] = 0.0f;
    for (int kk = 0; kk < a.KK; kk++) {
        mbar_wait(&full[kk % SA], (kk / SA) & 1);
        const uint32_t a0 = smem_u32(a_st + (kk % SA) * WS_A_BYTES) + cw * 64 * 128;
        const uint32_t b0 = smem_u32(b_st + (kk % SB) * C::B_BYTES);
        wgmma_fence();
#pragma unroll
        for (int j = 0; j < 4; j++) {
            if constexpr (BN == 128)
                wgmma_ss_m64n128k16(acc, smem_desc_sw128(a0 + 32 * j),
                                    smem_desc_sw128(b0 + 32 * j));
            else
                wgmma_ss_m64n64k16(acc, smem_desc_sw128(a0 + 32 * j), smem_desc_sw128(b0 + 32 * j));
        }
        wgmma_commit();
        wgmma_wait<1>(); /* step kk − 1's MMAs are done: its stages may be refilled */
        if (kk >= 1 && lane == 0) {
            mbar_arrive(&empty_a[(kk - 1) % SA]);
            mbar_arrive(&empty_b[(kk - 1) % SB]);
        }
    }
    wgmma_wait<0>();
    fence_acc(acc);
    store_tile_n<MODE, BN / 8>(a, tp, rb * 8 + 4 * cw + w4, acc);
}

template <int BN>
static cudaError_t ws_launch_t(const moe_args &a, int mode, dim3 grid, cudaStream_t stream) {
    constexpr int SMEM = ws_cfg<BN>::SMEM;
    static unsigned long long attrs_set; /* per device: per_device.h */
    if (!per_device_done(&attrs_set)) {
        CUDA_TRY(cudaFuncSetAttribute((const void *)moe_wgmma_ws_kernel<MODE_GATE_UP, BN>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
        CUDA_TRY(cudaFuncSetAttribute((const void *)moe_wgmma_ws_kernel<MODE_DOWN, BN>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
        per_device_mark(&attrs_set);
    }
    grid.y *= MOE_TILE_TOKENS / BN; /* BN = 64: two blocks a routing tile */
    if (mode == MODE_GATE_UP)
        CUDA_TRY(pdl_launch(moe_wgmma_ws_kernel<MODE_GATE_UP, BN>, grid, dim3(WS_THREADS), SMEM,
                            stream, a));
    else
        CUDA_TRY(pdl_launch(moe_wgmma_ws_kernel<MODE_DOWN, BN>, grid, dim3(WS_THREADS), SMEM,
                            stream, a));
    return cudaGetLastError();
}

cudaError_t moe_wgmma_ws_launch(const moe_args &a, int mode, int bn, dim3 grid,
                                cudaStream_t stream) {
    if (bn == 64) return ws_launch_t<64>(a, mode, grid, stream);
    if (bn == 128) return ws_launch_t<128>(a, mode, grid, stream);
    return cudaErrorInvalidValue;
}
