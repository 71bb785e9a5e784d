/* The large-batch MoE grouped GEMM on Hopper's warpgroup MMA (wgmma, sm_90a): moe_large_kernel's
 * tiles, routing, weight layout and epilogue (moe_experts.cu), with the MMA moved to the tensor cores'
 * asynchronous interface. Not the default any more: moe_wgmma_ws.cu (the same GEMM
 * warp-specialised) at 128-token tiles and its copy-engine-fed form moe_wgmma_tma.cu at 64 measured
 * faster; it stays as their fallback and for comparisons (moe.h: GPTOSS_MOE_WGMMA=1 or 5).
 *
 * ── Block ──────────────────────────────────────────────────────────────────────────────────────
 * 128 weight rows x BN tokens, 256 threads = 2 warpgroups. Warpgroup wg owns rows 64·wg … 64·wg+63
 * against all BN tokens: for every 16-wide k block one wgmma.m64nBNk16, A (the weights) from
 * registers, B (the tokens) from shared memory, BN / 2 fp32 accumulators per thread. BN is the plan's
 * tile width (moe.h, moe_plan.bn): 128 (one routing tile a block) or 64 (two blocks a routing tile,
 * each its half), chosen per launch from the average pairs per expert.
 *
 * ── A from registers ───────────────────────────────────────────────────────────────────────────
 * wgmma's A fragment is mma.m16n8k16's, warp by warp (warp w of the group: rows 16w … 16w+15). So
 * each warp reads and dequantises its row tile's codes exactly as moe_large_kernel does: thread
 * (g, t) gets rows g and g+8 at physical k 32h + 8t … 32h + 8t + 7 of each 32-wide chunk h, as four bf16
 * pairs. Pairs 0-1 feed the chunk's first k16 block as the fragment's logical k {2t, 2t+1} and
 * {2t+8, 2t+9}; pairs 2-3 the second block the same way.
 *
 * ── B in shared memory ─────────────────────────────────────────────────────────────────────────
 * The tokens must then sit in logical k order: in k16 block j = 2h + q, logical k l holds physical
 * k 32h + 4q + 8·((l mod 8) / 2) + 2·(l / 8) + (l mod 2). Pairs stay together, so the copy is one
 * 4-byte cp.async per pair: physical pair P (k 2P, 2P+1) goes to block j = 2·(P / 16) + (P / 2 mod 2),
 * logical pair 4·(P mod 2) + (P / 4 mod 4). Each block is K-major without swizzle: core matrices of 8 tokens x 8 k
 * (128 contiguous bytes, a token's 8 k in 16), the two along k 128 bytes apart (the descriptor's
 * leading byte offset), the BN / 8 along the tokens 256 bytes apart (its stride byte offset).
 *
 * ── Pipeline ───────────────────────────────────────────────────────────────────────────────────
 * WG_STAGES slots of {B 16 KB (8 KB at BN = 64), codes 4 KB, scales 256 B}, filled by cp.async
 * WG_STAGES − 1 k steps ahead. Per k step: wait for its slot; make the copies visible to the tensor
 * cores' (async) proxy (fence.proxy.async) and to everyone (barrier: every warpgroup has also
 * finished the previous step's MMAs, so that slot is free); refill it; dequantise; fence; four wgmma;
 * commit; wait for them. Waiting for one group at a time leaves a block's tensor cores idle while it
 * dequantises, so two blocks share an SM at BN = 128 (83 KB of shared memory, <= 128 registers each;
 * three at BN = 64) and fill each other's gaps. Measured on the H200, neither alternative paid:
 * A dequantised into shared memory with the MMAs in flight across k steps was slower
 * (bench/NOTES.md), and one MMA group kept in flight while the next step's A was dequantised into a
 * second register set (the loop unrolled by two, a set per parity: the rolled form made ptxas
 * serialise every wgmma, C7513) gained nothing — prefill 1k +0.7 %, 8k −0.8 %, the experts alone
 * equal (bench/results/session4-2026-12-02-h200.md) — and was removed. */
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/moe_dequant.cuh"
#include "backend/cuda/moe_kernel_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/wgmma.cuh"
#include "backend/cuda/per_device.h"

enum { WG_THREADS = 256, WG_STAGES = 4 };
enum {
    WG_A_BYTES = 8 * 512, /* a k step's codes: 8 row tiles */
    WG_S_BYTES = 8 * 32   /* their scale words */
};
/* A stage at BN tokens: B (four k16 blocks of BN tokens x 16 k bf16), the codes, the scales. */
template <int BN> __host__ __device__ constexpr int wg_stage_bytes() {
    return 4 * BN * 16 * 2 + WG_A_BYTES + WG_S_BYTES;
}
static_assert(wg_stage_bytes<64>() % 128 == 0 && wg_stage_bytes<128>() % 128 == 0,
              "stages stay 128-byte aligned");

/* Copies 4 bytes (through L1, .ca: the only size-4 form); src_bytes 0 writes zeros. */
static __device__ __forceinline__ void cp_async4(uint32_t smem_dst, const void *src,
                                                 int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(smem_dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}

/* BN: the token tile, 128 or 64 (m64n64 MMAs, 32 accumulators a thread, 12.5 KB a stage, three
 * blocks an SM). Where experts average few pairs a 128-token tile multiplies mostly padding (at 1k
 * prompt tokens, 32 pairs an expert, ~75 %); 64-token tiles halve it for the same weight traffic
 * (moe_plan_for picks the width: moe_experts.cu). */
template <int MODE, int BN>
__global__ void __launch_bounds__(WG_THREADS, BN == 64 ? 3 : 2) moe_wgmma_kernel(const moe_args a) {
    constexpr int ST = WG_STAGES;                     /* stages */
    constexpr int KB = BN * 16 * 2;                   /* one k16 block of B */
    constexpr int BB = 4 * KB;                        /* B of a 64-wide k step */
    constexpr int STB = BB + WG_A_BYTES + WG_S_BYTES; /* a stage */
    constexpr int NACC = BN / 2;                      /* accumulators a thread */
    static_assert(BN == 64 || BN == 128, "64- or 128-token tiles");
    static_assert(STB == wg_stage_bytes<BN>(), "the launch's stage size");
    pdl_prologue(); /* first: see pdl.cuh */
    extern __shared__ __align__(128) uint4 wg_smem_raw[];
    char *smem = (char *)wg_smem_raw;

    tile_pos tp;
    if (!tile_of_block_bn<BN>(a, &tp)) return;
    const int rb = blockIdx.x;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2;
    const int wg = w >> 2, w4 = w & 3;

    __shared__ uint32_t row_off[BN];
    tile_row_table<MODE>(a, tp.off, tp.n_base, tp.n_valid, row_off, BN);

    /* B copies: lane L takes token n = 8·group + L / 4 and logical pair position L mod 4 of every
     * (k16 block j, k half hi): 32 lanes, 8 tokens x 4 positions, 32 different banks per copy
     * (letting a warp copy one token's 128 contiguous bytes instead sent all 32 lanes to 4 banks).
     * Each warp takes token group w (and w + 8 with 128-token tiles). */
    const int b_tok = lane >> 2, b_pos = lane & 3;
    /* Codes: 16 bytes of row tile tid / 32 (lane tid % 32 of its 512-byte k step); scales: threads
     * < 16, 16 bytes of the 8 tiles' scale words — as moe_large_kernel. */
    const tile_weight_src ws = tile_weight_sources(a, tp.e, rb, tid);

    auto load_stage = [&](int kk, int stage) {
        char *base = smem + stage * STB;
        const uint32_t bb = smem_u32(base) + (uint32_t)(b_tok * 16 + b_pos * 4);
#pragma unroll
        for (int gi = 0; gi < BN / 64; gi++) {
            const int grp = w + 8 * gi, n = 8 * grp + b_tok;
            const uint32_t o = row_off[n];
            const uint16_t *row = a.x + (o == ~0u ? 0u : o) + (size_t)kk * 64;
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int hi = 0; hi < 2; hi++) {
                    /* physical pair 16·(j / 2) + 4·pos + 2·(j mod 2) + hi (the header's map) */
                    const int pp = 16 * (j >> 1) + 4 * b_pos + 2 * (j & 1) + hi;
                    cp_async4(bb + (uint32_t)(j * KB + grp * 256 + hi * 128), row + 2 * pp,
                              o == ~0u ? 0 : 4);
                }
        }
        copy_tile_weights(ws, kk, tid, base + BB, base + BB + WG_A_BYTES);
    };

    float acc[NACC];
#pragma unroll
    for (int i = 0; i < NACC; i++) acc[i] = 0.0f;

    constexpr int AHEAD = ST - 1; /* steps ahead of the current one that the refill fetches */
#pragma unroll
    for (int st = 0; st < AHEAD; st++) {
        if (st < a.KK) load_stage(st, st);
        cp_async_commit();
    }

    const int my_tile = 4 * wg + w4; /* row tile of this warp within the block */
    /* Step kk's A fragments (the four k16 blocks), dequantised from its stage. */
    auto make_a = [&](int kk, uint32_t ar[16]) {
        const char *base = smem + (kk % ST) * STB;
        const uint4 qc = *(const uint4 *)(base + BB + my_tile * 512 + lane * 16);
        const uint32_t sc = *(const uint32_t *)(base + BB + WG_A_BYTES + my_tile * 32 + g * 4);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            uint32_t ag[4], a8[4];
            dequant_word(h ? qc.z : qc.x, scale_pair(sc, 2 * h), ag);
            dequant_word(h ? qc.w : qc.y, scale_pair(sc, 2 * h + 1), a8);
#pragma unroll
            for (int q = 0; q < 2; q++) {
                uint32_t *f = ar + 4 * (2 * h + q);
                f[0] = ag[2 * q], f[1] = a8[2 * q], f[2] = ag[2 * q + 1], f[3] = a8[2 * q + 1];
            }
        }
    };
    /* Wait for step kk's copies, publish them, refill the stage AHEAD steps on. */
    auto arrive = [&](int kk) {
        cp_async_wait<AHEAD - 1>(); /* this thread's copies of step kk have landed */
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads(); /* everyone's; and the MMAs that read the refilled stage are retired */
        if (kk + AHEAD < a.KK) load_stage(kk + AHEAD, (kk + AHEAD) % ST);
        cp_async_commit();
    };
    auto mma_step = [&](int kk, const uint32_t ar[16]) {
        const uint32_t b0 = smem_u32(smem + (kk % ST) * STB);
        wgmma_fence();
#pragma unroll
        for (int j = 0; j < 4; j++) {
            if constexpr (BN == 128)
                wgmma_m64n128k16(acc, ar + 4 * j, smem_desc(b0 + j * KB, 128, 256), 1);
            else
                wgmma_m64n64k16(acc, ar + 4 * j, smem_desc(b0 + j * KB, 128, 256), 1);
        }
        wgmma_commit();
    };
    for (int kk = 0; kk < a.KK; kk++) {
        arrive(kk);
        uint32_t ar[16];
        make_a(kk, ar);
        mma_step(kk, ar);
        wgmma_wait<0>();
    }
    wgmma_wait<0>();
    fence_acc(acc);
    cp_async_wait<0>();

    store_tile_n<MODE, BN / 8>(a, tp, rb * 8 + my_tile, acc);
}

template <int BN>
static cudaError_t wgmma_launch_t(const moe_args &a, int mode, dim3 grid, cudaStream_t stream) {
    constexpr int SMEM = WG_STAGES * wg_stage_bytes<BN>();
    static_assert((BN == 64 ? 3 : 2) * (SMEM + 1024 + BN * 4) <= 228 * 1024,
                  "the blocks an SM that the launch bounds promise");
    static unsigned long long attrs_set; /* per device: per_device.h */
    if (!per_device_done(&attrs_set)) {
        CUDA_TRY(cudaFuncSetAttribute((const void *)moe_wgmma_kernel<MODE_GATE_UP, BN>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
        CUDA_TRY(cudaFuncSetAttribute((const void *)moe_wgmma_kernel<MODE_DOWN, BN>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
        per_device_mark(&attrs_set);
    }
    grid.y *= MOE_TILE_TOKENS / BN; /* BN = 64: two blocks a routing tile */
    if (mode == MODE_GATE_UP)
        CUDA_TRY(pdl_launch(moe_wgmma_kernel<MODE_GATE_UP, BN>, grid, dim3(WG_THREADS), SMEM,
                            stream, a));
    else
        CUDA_TRY(
            pdl_launch(moe_wgmma_kernel<MODE_DOWN, BN>, grid, dim3(WG_THREADS), SMEM, stream, a));
    return cudaGetLastError();
}

cudaError_t moe_wgmma_launch(const moe_args &a, int mode, int bn, dim3 grid, cudaStream_t stream) {
    if (bn == 64) return wgmma_launch_t<64>(a, mode, grid, stream);
    if (bn == 128) return wgmma_launch_t<128>(a, mode, grid, stream);
    return cudaErrorInvalidValue;
}
