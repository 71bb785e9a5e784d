/* The large-batch MoE grouped GEMM on wgmma with warp specialisation (sm_90a): the same tiles,
 * routing, weights and epilogue as moe_wgmma.cu, with the work split between producer warpgroups
 * that bring and dequantise the operands and two consumer warpgroups that only multiply.
 * The default at 128-token tiles (moe.h: GPTOSS_MOE_WGMMA; prefill 8k +10.2 % on the H200); at 64
 * (GPTOSS_MOE_WGMMA=2) it measured 5 % slower than moe_wgmma.cu (bench/NOTES.md). Its consumers'
 * MMAs are only as wide as a tile's tokens need (moe_ws_parts.cuh's ws_with_width: prefill 8k
 * +1.8 %, session 11).
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
 * ── Block: 128 weight rows x BN tokens, NPW producer warpgroups (ws_cfg) and two consumers ───
 * the producers:
 *   - every producer thread copies (16-byte cp.async) the codes it will dequantise itself, DR k
 *     steps ahead, into a ring of raw slots (the first lanes of each warp also the scale words of
 *     its row tiles), and its share of the step's BN token rows, D steps ahead, into B (gathered
 *     through the row table); one cp.async group a step, so a thread's wait_group says when both
 *     have landed;
 *   - then it dequantises its row tiles' words of the raw slot into the stage's A (bf16, 16-byte
 *     shared stores) and arrives on the stage's "full" barrier.
 *   The first form requested the codes by bulk copies (TMA, 16 copies of 512 and 32 bytes a step
 *   from one warp, the slots handed over by mbarriers): correct, but 1.8-2x slower than
 *   moe_wgmma.cu whatever the token lookahead (bench/NOTES.md).
 * the last two warpgroups, the consumers: warpgroup c multiplies rows 64c … 64c + 63 of A by all of B
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
#include "base/env_switch.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/moe_kernel_common.cuh"
#include "backend/cuda/moe_ws_parts.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/per_device.h"
#include "backend/cuda/tma_ring.cuh" /* mbarriers */

#include <stdlib.h>
#include <string.h>

/* The shapes per token tile: SA stages of A, SB of B, the tokens requested D steps ahead (SB = D + 2:
 * see "Stages" in the header), the codes DR steps ahead into RAW = DR + 2 raw slots (a slot is
 * rewritten two steps after its last read: the warp barrier of the step between orders the lanes'
 * reads of the scale words before the copying lanes overwrite them), blocks an SM. BN = 64: two blocks an
 * SM (~106 KB each); BN = 128: one. */
template <int BN> struct ws_cfg {
    /* producer warpgroups: two, so that each producer thread dequantises one row tile's 16 bytes a
     * step. With one (two tiles a thread) the producers bounded the kernel: ncu had their warps
     * issuing every ~9 cycles on their dependency chains, ~2,000 cycles a k step. */
    static constexpr int NPW = 2;
    static constexpr int PRODUCERS = 128 * NPW;
    static constexpr int THREADS = PRODUCERS + 256;
    /* SA ≥ 2 and SB ≥ D + 2 avoid a deadlock; each stage more is a step of slack between the
     * producers and the consumers (at the minimum they advance in lockstep, a hand-off a step). */
    static constexpr int SA = BN == 64 ? 3 : 4;
    static constexpr int D = BN == 64 ? 2 : 4;
    static constexpr int SB = D + (BN == 64 ? 2 : 4);
    static constexpr int DR = BN == 64 ? 4 : 5;
    static constexpr int RAW = DR + 2;
    static constexpr int BLOCKS = BN == 64 ? 2 : 1;
    static constexpr int B_BYTES = BN * 128; /* a multiple of 1024 */
    /* barriers: full[SA], empty_a[SA], empty_b[SB]; then the row table */
    static constexpr int BAR_BYTES = 8 * (2 * SA + SB);
    static constexpr int SMEM = SA * WS_A_BYTES + SB * B_BYTES + RAW * WS_RAW_BYTES +
                                ((BAR_BYTES + BN * 4 + 15) / 16) * 16 + 1024;
};
static_assert(2 * (ws_cfg<64>::SMEM + 1024) <= 228 * 1024, "two 64-token blocks an SM");
static_assert(ws_cfg<128>::SMEM <= 227 * 1024, "one 128-token block an SM");

/* FOLDED: the one-multiply dequantisation (moe_dequant.cuh; the same bits), when every scale byte of
 * the matrix allows it: 16 of a producer thread's ~200 instructions a step go (measured on the
 * H200: 2–3 % faster at T = 1024 … 16384, bench/NOTES.md). */
template <int MODE, int BN, bool FOLDED, bool NARROW = false>
__global__ void __launch_bounds__(ws_cfg<BN>::THREADS, ws_cfg<BN>::BLOCKS)
    moe_wgmma_ws_kernel(const moe_args a) {
    using C = ws_cfg<BN>;
    constexpr int SA = C::SA, SB = C::SB, D = C::D, DR = C::DR, RAW = C::RAW;
    constexpr int NPW = C::NPW, PRODUCERS = C::PRODUCERS;
    static_assert(NPW == 2, "a producer thread per row-tile lane");
    static_assert(DR >= D, "a step's codes are requested no later than its tokens");
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
    uint32_t *row_off = (uint32_t *)(empty_b + SB);

    tile_pos tp;
    if (!tile_of_block_bn<BN>(a, &tp)) return;
    const int rb = blockIdx.x;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;

    if (tid == 0) {
        for (int s = 0; s < SA; s++) {
            mbar_init(&full[s], PRODUCERS);
            mbar_init(&empty_a[s], 8); /* one arrival per consumer warp */
        }
        for (int s = 0; s < SB; s++) mbar_init(&empty_b[s], 8);
        mbar_init_fence();
    }
    tile_row_table<MODE>(a, tp.off, tp.n_base, tp.n_valid, row_off, BN); /* ends with a barrier */

    if (w < 4 * NPW) {
        /* ── producer: thread (warp w, lane (g, t)) owns row tile w ── */
        const int p = tid, tile = w;
        const int g = lane >> 2, t = lane & 3, odd = g & 1;
        /* Its codes of a raw step: 16 bytes of its tile (tiles past the matrix repeat its last one,
         * never stored); lanes 0-1 also copy the tile's 32 bytes of scale words. */
        const int rt = min(rb * 8 + tile, a.RT - 1);
        const size_t tile_at = ((size_t)tp.e * a.RT + rt) * a.KK;
        const char *code_src = (const char *)a.wq + tile_at * 512 + lane * 16;
        const char *scale_src = (const char *)a.wsc + tile_at * 32 + (lane & 1) * 16;
        const uint32_t raw0 = smem_u32(raws);
        const uint32_t code_at = tile * 512 + lane * 16;
        const uint32_t scale_dst = WS_CODE_BYTES + tile * 32 + (lane & 1) * 16;
        /* Its token chunks: q = p + PRODUCERS·i is token q / 8's 16-byte chunk q % 8 (eight threads a
         * token: its 128 contiguous bytes); a row past the tile's tokens is zero-filled. */
        constexpr int NB = BN * 8 / PRODUCERS;
        const char *b_src[NB];
        uint32_t b_dst[NB];
        int b_bytes[NB];
#pragma unroll
        for (int i = 0; i < NB; i++) {
            const int q = p + PRODUCERS * i, n = q >> 3, c = q & 7;
            const uint32_t o = row_off[n];
            b_src[i] = (const char *)(a.x + (o == ~0u ? 0u : o) + 8 * c);
            b_bytes[i] = o == ~0u ? 0 : 16;
            b_dst[i] = smem_u32(b_st) + sw128_offset(n, c);
        }
        auto copy_raw = [&](int kk, int slot) {
            const uint32_t rs = raw0 + slot * WS_RAW_BYTES;
            cp_async16(rs + code_at, code_src + (size_t)kk * 512, 16);
            if (lane < 2) cp_async16(rs + scale_dst, scale_src + (size_t)kk * 32, 16);
        };
        auto copy_b = [&](int kk, int stage) {
#pragma unroll
            for (int i = 0; i < NB; i++)
                cp_async16(b_dst[i] + stage * C::B_BYTES, b_src[i] + (size_t)kk * 128, b_bytes[i]);
        };
        /* Where its words go: word x = (row r0, chunk t, scale byte 0), y = (r0 + 8, t, 1),
         * z = (r0, 4 + t, 2), w = (r0 + 8, 4 + t, 3). Odd g reads its 16 bytes halves swapped
         * (z, w first) and its scale bytes permuted alike, so that each quarter warp's stores of a
         * step cover eight bank groups (header) without a select. */
        const int r0 = 16 * tile + g;
        const int c1 = odd ? 4 + t : t, c2 = odd ? t : 4 + t;
        const uint32_t st_off[4] = {sw128_offset(r0, c1), sw128_offset(r0 + 8, c1),
                                    sw128_offset(r0, c2), sw128_offset(r0 + 8, c2)};
        const uint32_t rd1 = code_at + (odd ? 8 : 0), rd2 = code_at + (odd ? 0 : 8);
        const uint32_t rd_scale = WS_CODE_BYTES + tile * 32 + g * 4;
        const uint32_t sc_perm = odd ? 0x1032u : 0x3210u;

        /* Groups: j < DR in the prologue (raw j, and B j for j < D), then at step kk raw kk + DR and
         * B kk + D. Step kk's latest group is step kk − D's: wait_group D. */
        for (int j = 0; j < DR; j++) {
            if (j < a.KK) copy_raw(j, j);
            if (j < D && j < a.KK) copy_b(j, j);
            cp_async_commit();
        }
        ring ra{0, 0}, rr{0, 0}, rw{DR, 0}, bw{D, 0}; /* A stage; raw read, write; B write */
        const uint32_t a0 = smem_u32(a_st);
        for (int kk = 0; kk < a.KK; kk++) {
            if (kk + DR < a.KK) copy_raw(kk + DR, rw.i);
            rw.next(RAW);
            if (kk + D < a.KK) {
                if (kk + D >= SB) mbar_wait(&empty_b[bw.i], bw.par ^ 1);
                copy_b(kk + D, bw.i);
            }
            bw.next(SB);
            cp_async_commit();
            cp_async_wait<D>(); /* this thread's copies of step kk (codes and tokens) have landed */
            __syncwarp();       /* and lanes 0-1's scale words */

            const uint32_t rs = raw0 + rr.i * WS_RAW_BYTES;
            rr.next(RAW);
            const uint2 q1 = ws_lds64(rs + rd1), q2 = ws_lds64(rs + rd2);
            const uint32_t sc = __byte_perm(ws_lds32(rs + rd_scale), 0u, sc_perm);
            const uint32_t wd[4] = {q1.x, q1.y, q2.x, q2.y};

            if (kk >= SA) mbar_wait(&empty_a[ra.i], ra.par ^ 1);
            const uint32_t a_base = a0 + ra.i * WS_A_BYTES;
            ws_dequant_store<FOLDED>(wd, sc, a_base, st_off);
            mbar_arrive(&full[ra.i]);
            ra.next(SA);
        }
        cp_async_wait<0>();
        return;
    }

    /* ── consumers ── */
    const int cw = (w >> 2) - NPW, w4 = w & 3; /* consumer warpgroup 0 or 1, warp within it */
    /* Descriptors of stage 0's k16 slice 0; a stage and a slice add their offsets in 16-byte
     * units (the address field is the low 14 bits, and no sum leaves the shared window). */
    const uint64_t da0 = smem_desc_sw128(smem_u32(a_st) + cw * 64 * 128);
    const uint64_t db0 = smem_desc_sw128(smem_u32(b_st));
    ring ca{0, 0}, cb{0, 0};
    int pa = 0, pb = 0; /* the stages of the step before */
    /* The tile with MMAs NN tokens wide, epilogue included (ws_with_width says why). */
    auto k_loop = [&](auto nn) {
        constexpr int NN = decltype(nn)::value;
        float acc[NN / 2];
#pragma unroll
        for (int i = 0; i < NN / 2; i++) acc[i] = 0.0f;
        for (int kk = 0; kk < a.KK; kk++) {
            mbar_wait(&full[ca.i], ca.par);
            const uint64_t da = da0 + (uint64_t)(ca.i * (WS_A_BYTES >> 4));
            const uint64_t db = db0 + (uint64_t)(cb.i * (C::B_BYTES >> 4));
            ws_mma_step<NN>(acc, da, db);
            wgmma_wait<1>(); /* step kk − 1's MMAs are done: its stages may be refilled */
            if (kk >= 1 && lane == 0) {
                mbar_arrive(&empty_a[pa]);
                mbar_arrive(&empty_b[pb]);
            }
            pa = ca.i, pb = cb.i;
            ca.next(SA);
            cb.next(SB);
        }
        wgmma_wait<0>();
        fence_acc(acc);
        store_tile_n<MODE, NN / 8>(a, tp, rb * 8 + 4 * cw + w4, acc);
    };
    if constexpr (NARROW) /* the default (moe.h: moe_wgmma_ws_set_narrow) */
        ws_with_width<BN>(tp.n_valid, k_loop);
    else
        k_loop(std::integral_constant<int, BN>{});
}

template <int BN, bool FOLDED, bool NARROW>
static cudaError_t ws_launch_t(const moe_args &a, int mode, dim3 grid, cudaStream_t stream) {
    constexpr int SMEM = ws_cfg<BN>::SMEM;
    static unsigned long long attrs_set; /* per device: per_device.h */
    if (!per_device_done(&attrs_set)) {
        CUDA_TRY(cudaFuncSetAttribute(
            (const void *)moe_wgmma_ws_kernel<MODE_GATE_UP, BN, FOLDED, NARROW>,
            cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
        CUDA_TRY(
            cudaFuncSetAttribute((const void *)moe_wgmma_ws_kernel<MODE_DOWN, BN, FOLDED, NARROW>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
        per_device_mark(&attrs_set);
    }
    grid.y *= MOE_TILE_TOKENS / BN; /* BN = 64: two blocks a routing tile */
    if (mode == MODE_GATE_UP)
        CUDA_TRY(pdl_launch(moe_wgmma_ws_kernel<MODE_GATE_UP, BN, FOLDED, NARROW>, grid,
                            dim3(ws_cfg<BN>::THREADS), SMEM, stream, a));
    else
        CUDA_TRY(pdl_launch(moe_wgmma_ws_kernel<MODE_DOWN, BN, FOLDED, NARROW>, grid,
                            dim3(ws_cfg<BN>::THREADS), SMEM, stream, a));
    return cudaGetLastError();
}

/* The ws kernel's narrow form (moe.h: moe_wgmma_ws_set_narrow), the default: measured prefill 8k
 * +1.8 %, the experts alone −4 % at T = 4096 and −0.8 % at 16384 (H200, session 11).
 * GPTOSS_MOE_WS_NARROW=0 gives the full width (comparisons; the tests' reference). */
static int g_ws_narrow = -1;

void moe_wgmma_ws_set_narrow(int on) {
    env_switch_set(&g_ws_narrow, on, 0, 1);
}

static int ws_narrow(void) {
    return env_switch(&g_ws_narrow, "GPTOSS_MOE_WS_NARROW", 1, 0, 1);
}

template <int BN>
static cudaError_t ws_launch_bn(const moe_args &a, int mode, int folded, dim3 grid,
                                cudaStream_t stream) {
    if (ws_narrow())
        return folded ? ws_launch_t<BN, true, true>(a, mode, grid, stream)
                      : ws_launch_t<BN, false, true>(a, mode, grid, stream);
    return folded ? ws_launch_t<BN, true, false>(a, mode, grid, stream)
                  : ws_launch_t<BN, false, false>(a, mode, grid, stream);
}

cudaError_t moe_wgmma_ws_launch(const moe_args &a, int mode, int bn, int folded, dim3 grid,
                                cudaStream_t stream) {
    if (bn == 64) return ws_launch_bn<64>(a, mode, folded, grid, stream);
    if (bn == 128) return ws_launch_bn<128>(a, mode, folded, grid, stream);
    return cudaErrorInvalidValue;
}
