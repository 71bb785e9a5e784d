/* The MoE expert matrices on the GPU (moe.h): gate_up with the clamped SwiGLU fused, down with its
 * bias and the routing weight fused, over the MXFP4 weights in moe_repack.cu's layout, dequantised
 * in registers (moe_dequant.cuh). CPU reference: cpu_mxfp4_linear and cpu_swiglu
 * (backend/cpu/ops.c); tests/gpu/test_moe.cu holds the two side by side.
 *
 * ── Tensor-core fragments without shuffles ─────────────────────────────────────────────────────
 * mma.sync m16n8k16 (bf16 → fp32): A = 16 weight rows × 16 k, B = 16 k × 8 tokens. A sum over k does
 * not care about the order of k, so we let thread (g, t) own physical k = 8t … 8t+7 of a 32-wide chunk
 * and call them the fragment's logical k {2t, 2t+1, 2t+8, 2t+9} (first MMA) and the same for the
 * second MMA: one word of codes per row per chunk feeds two MMAs, and 16 bytes of activations
 * (token g, k 8t…8t+7) loaded from shared memory give both MMAs' B operands.
 *
 * ── Two schedules ─────────────────────────────────────────────────────────────────────────────
 * Small batch (decode): the work list is (touched expert, row block, K split); a block stages the
 * expert's tokens (≤ 8·NTP per pass) in shared memory and each warp streams one 16-row tile's codes
 * over its K range. Bandwidth-bound: only the touched experts' bytes are read, once (a second pass for
 * an expert with more tokens re-reads them from L2).
 * Large batch (prefill): a grouped GEMM over (expert, 128-token tile, 128-row block); the tile's
 * tokens (gathered by expert), the codes and the scales go through a 4-stage cp.async ring in shared
 * memory; each warp reads its A fragments (16 B / lane / k-step, already in fragment order) and
 * dequantises them in registers, then runs mma.sync against 64 tokens. */
#include "base/env_switch.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/moe_dequant.cuh"
#include "backend/cuda/moe_kernel_common.cuh"
#include "backend/cuda/moe_small.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/per_device.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------- */
/* Small batch: one block per (touched expert, row block of WARPS tiles, K split): moe_small.cuh    */

template <int NTP, int MODE, bool FOLDED>
__global__ void __launch_bounds__(small_cfg<NTP>::THREADS, small_cfg<NTP>::MIN_BLOCKS)
    moe_small_kernel(const moe_args a) {
    pdl_prologue(); /* first: see pdl.cuh */
    extern __shared__ uint4 smem_raw[];
    small_item<NTP> it;
    if (!small_begin<NTP>(a, blockIdx.x, it)) return; /* a work item past the touched experts */
    small_run<NTP, MODE, FOLDED, false>(a, it, (uint16_t *)smem_raw);
}

/* The down projection under the tail-split trial (moe_plan.tail_split; small_begin_tail). */
template <int NTP, bool FOLDED>
__global__ void __launch_bounds__(small_cfg<NTP>::THREADS, small_cfg<NTP>::MIN_BLOCKS)
    moe_small_tail_kernel(const moe_args a) {
    pdl_prologue(); /* first: see pdl.cuh */
    extern __shared__ uint4 smem_raw[];
    small_item<NTP> it;
    int nsplit;
    if (!small_begin_tail<NTP>(a, blockIdx.x, it, nsplit)) return;
    small_run<NTP, MODE_DOWN, FOLDED, false>(a, it, (uint16_t *)smem_raw);
    if (it.s == nsplit - 1) small_zero_rest<NTP>(a, it, nsplit);
}

/* ---------------------------------------------------------------------------------------------- */
/* Large batch: grouped GEMM, block = 128 rows × 128 tokens, 8 warps as 4 (rows) × 2 (tokens).      */
/* Each warp owns 32 rows × 64 tokens (64 fp32 accumulators per thread); 140 registers, so one block */
/* per SM (capping at 128 for two blocks spilled in the inner loop). A 4-stage cp.async ring brings  */
/* the gathered tokens, the block's 8 row tiles of codes and their scales into shared memory.        */

enum { LG_THREADS = 256, LG_BN = MOE_TILE_TOKENS, LG_STAGES = 4 };
/* One pipeline stage: B = 128 tokens × 64 k bf16 (16 KB), A = 8 row tiles × 512 B of codes (4 KB),
 * scales = 8 row tiles × 32 B. */
enum { LG_B_BYTES = LG_BN * 64 * 2, LG_A_BYTES = 8 * 512, LG_S_BYTES = 8 * 32 };
enum {
    LG_STAGE_BYTES = LG_B_BYTES + LG_A_BYTES + LG_S_BYTES,
    LG_SMEM = LG_STAGES * LG_STAGE_BYTES
};

template <int MODE>
__global__ void __launch_bounds__(LG_THREADS, 1) moe_large_kernel(const moe_args a) {
    pdl_prologue(); /* first: see pdl.cuh */
    extern __shared__ uint4 smem_raw[];
    char *smem = (char *)
        smem_raw; /* LG_STAGES × { B [128][64] bf16 swizzled | A [8][512 B] | S [8][32 B] } */

    tile_pos tp;
    if (!tile_of_block(a, LG_BN, &tp)) return;
    const int e = tp.e, off = tp.off, n_base = tp.n_base, n_valid = tp.n_valid;
    const int rb = blockIdx.x;

    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, t = lane & 3;
    const int wm = w & 3, wn = w >> 2;

    /* cp.async jobs of this thread, per stage:
     *  B: 16-byte chunk cc of token rows r = tid/8 + 32·i (i < 4). Chunk c of row r is stored at chunk
     *     c ^ 4·(r&1): a quarter-warp reading rows 2m, 2m+1 then touches all 32 banks once.
     *  A: 16 bytes of row tile tid/32 (its 512-byte k-step block: lane tid%32).
     *  S: threads < 16: 16 bytes of the 8 tiles' scale words (tile tid/2, half tid%2). */
    __shared__ uint32_t row_off[LG_BN];
    tile_row_table<MODE>(a, off, n_base, n_valid, row_off, LG_BN);
    const int cc = tid & 7;
    /* Rows r and r + 32i have the same parity, so one swizzled offset serves all four. */
    const int dst0 = ((tid >> 3) * 64 + ((cc ^ (((tid >> 3) & 1) << 2)) * 8)) * 2;
    const tile_weight_src ws = tile_weight_sources(a, e, rb, tid);

    auto load_stage = [&](int kk, int stage) {
        char *base = smem + stage * LG_STAGE_BYTES;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t o = row_off[(tid >> 3) + 32 * i];
            const uint16_t *src = a.x + (o == ~0u ? 0u : o) + cc * 8 +
                                  (size_t)kk * 64; /* valid even when zero-filling */
            cp_async16(smem_u32(base + dst0 + i * 32 * 128), src, o == ~0u ? 0 : 16);
        }
        copy_tile_weights(ws, kk, tid, base + LG_B_BYTES, base + LG_B_BYTES + LG_A_BYTES);
    };

    int rts[2];
    bool rt_ok[2];
#pragma unroll
    for (int mi = 0; mi < 2; mi++) {
        rts[mi] = rb * 8 + wm * 2 + mi;
        rt_ok[mi] = rts[mi] < a.RT;
    }

    float acc[2][8][4];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
            acc[mi][nt][0] = acc[mi][nt][1] = acc[mi][nt][2] = acc[mi][nt][3] = 0.0f;

#pragma unroll
    for (int st = 0; st < LG_STAGES - 1; st++) {
        if (st < a.KK) load_stage(st, st);
        cp_async_commit();
    }

    for (int kk = 0; kk < a.KK; kk++) {
        cp_async_wait<LG_STAGES - 2>();
        __syncthreads(); /* stage kk landed for everyone; the stage read in step kk−1 is free again */
        if (kk + LG_STAGES - 1 < a.KK)
            load_stage(kk + LG_STAGES - 1, (kk + LG_STAGES - 1) % LG_STAGES);
        cp_async_commit();

        const char *base = smem + (kk % LG_STAGES) * LG_STAGE_BYTES;
        const uint16_t *bstage = (const uint16_t *)base;
        uint4 qc[2];
        uint32_t sc[2];
#pragma unroll
        for (int mi = 0; mi < 2; mi++) {
            qc[mi] = *(const uint4 *)(base + LG_B_BYTES + (wm * 2 + mi) * 512 + lane * 16);
            sc[mi] =
                *(const uint32_t *)(base + LG_B_BYTES + LG_A_BYTES + (wm * 2 + mi) * 32 + g * 4);
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            uint32_t ag[2][4], a8[2][4];
#pragma unroll
            for (int mi = 0; mi < 2; mi++) {
                dequant_word(h ? qc[mi].z : qc[mi].x, scale_pair(sc[mi], 2 * h), ag[mi]);
                dequant_word(h ? qc[mi].w : qc[mi].y, scale_pair(sc[mi], 2 * h + 1), a8[mi]);
            }
            const int pc = (h * 4 + t) ^ ((g & 1) << 2);
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                const int r = wn * 64 + nt * 8 + g;
                const uint4 xv = *(const uint4 *)(bstage + r * 64 + pc * 8);
#pragma unroll
                for (int mi = 0; mi < 2; mi++) mma_chunk(acc[mi][nt], ag[mi], a8[mi], xv);
            }
        }
    }
    cp_async_wait<0>();

#pragma unroll
    for (int mi = 0; mi < 2; mi++) {
        if (!rt_ok[mi]) continue;
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
            tile_epilogue<MODE>(a, e, off, rts[mi], n_base + wn * 64 + nt * 8, n_base + n_valid, 0,
                                acc[mi][nt]);
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Plans and launches                                                                              */

/* The pairs per expert from which the large path runs: 16 (moe_plan_for says why), or
 * GPTOSS_MOE_LARGE_AVG (a whole number, for measuring the crossover again). */
static int large_min_avg(void) {
    static int v = -1;
    return env_switch(&v, "GPTOSS_MOE_LARGE_AVG", 16, 1, 1 << 20);
}

/* The most pairs per expert at which the small path stages 8 tokens a pass (NTP 1: 4 warps, 4 blocks
 * an SM) rather than 16 (NTP 2: 8 warps, 2 blocks): 4, or GPTOSS_MOE_NTP1_MAX_AVG (a whole number).
 * Above it an expert with more than 8 tokens re-reads its weights for a second pass. Measured on the
 * H200 (bench/results/session16/call6-ntp.md; 120b, experts alone): at 4 pairs (T = 128, where
 * ~2 % of experts hold more than 8 tokens) NTP 1 took 470 µs against NTP 2's 508 (it streams at
 * ~84 % of 4.2 TB/s, NTP 2 at ~77 %; decode 128 +1.9 %); at 8 pairs (T = 256, ~40 % of experts
 * past 8 tokens) 694 against 567 (decode 256 0.83); in the step (call 7, interleaved) 20b decode
 * 32 (4 pairs at E = 32) +3.9 %, 120b decode 128 +0.6 %. Until session 16 the bound was 3. */
static int ntp1_max_avg(void) {
    static int v = -1;
    return env_switch(&v, "GPTOSS_MOE_NTP1_MAX_AVG", 4, 1, 1 << 20);
}

/* GPTOSS_MOE_DOWN_SPLITS: 0 or unset, the rule below; 1-5, that many K splits at every batch on
 * the small path (for measuring the rule again). */
static int down_splits_switch(void) {
    static int v = -1;
    return env_switch(&v, "GPTOSS_MOE_DOWN_SPLITS", 0, 0, 5);
}

/* The K splits of the small path's down projection at T tokens. Expected touched experts
 * E·(1 − (1 − k/E)^T); the down projection has H/16 row tiles per expert in blocks of 4 or 8
 * warps, and 4 (resp. 2) such blocks fit on an SM at once. Split K as far as one wave of resident
 * blocks allows (a second, nearly empty wave would cost a whole block time). */
/* The small path's resident blocks: its launch bounds' MIN_BLOCKS an SM (4 at NTP 1, 2 at NTP 2; the
 * down projection's staged tokens of a whole K, 46.6 or 93.2 KB a block, fit beside them). */
static int resident_blocks(int ntp, int sm_count) {
    return (ntp == 1 ? small_cfg<1>::MIN_BLOCKS : small_cfg<2>::MIN_BLOCKS) *
           (sm_count > 0 ? sm_count : 132);
}

static int down_splits_for(int T, int E, int k, int ntp, int sm_count) {
    const int forced = down_splits_switch();
    if (forced >= 1) return forced;
    const double touched = E * (1.0 - pow(1.0 - (double)k / E, (double)T));
    const double blocks = touched * (ntp == 1 ? 45.0 : 23.0);
    const double resident = resident_blocks(ntp, sm_count);
    const int S = (int)floor(resident / (blocks > 1 ? blocks : 1));
    return S < 1 ? 1 : (S > 5 ? 5 : S);
}

/* GPTOSS_MOE_TAIL_SPLIT=1: moe_plan.tail_split at 2 tokens or more (a trial, off by default). */
static int tail_split_switch(void) {
    static int v = -1;
    return env_switch(&v, "GPTOSS_MOE_TAIL_SPLIT", 0, 0, 1);
}

moe_plan moe_plan_for(int T, int E, int k, int sm_count) {
    moe_plan p;
    memset(&p, 0, sizeof p);
    const double avg = (double)T * k / E; /* pairs per expert */
    /* The crossover, measured on the H200 at E = 128 (120b). On mma.sync the small path beat the
     * large one at T = 256 (0.76 vs 3.18 ms) and T = 1024 (1.92 vs 3.27 ms, 32 pairs per expert)
     * (bench/results/kernels-2026-11-30-h200.md); on wgmma with 128-token tiles, from 24 pairs per
     * expert gained nothing and from 8 decode at batch 256 ran at 0.43×
     * (bench/results/wgmma-tp-2026-12-02-h200.md). With 64-token tiles (bn below) and the large
     * path from 24 pairs per expert (T = 768 for 120b; bench/results/session4-2026-12-02-h200.md):
     * decode batch 1024 +17.3 % (11,934 → 14,003 tok/s), prefill 1k +21.6 % (13,879 → 16,870),
     * decode batch 256 (8 pairs: the small path) unchanged. With the register-A form of
     * moe_wgmma_tma.cu (session 12) the large path from 16 pairs: decode 512 +2.5 % (10,677 →
     * 10,948 tok/s), the rest unchanged; below 16 not measured. */
    p.large = avg >= large_min_avg();
    /* The wgmma token tile, per launch: 64 while experts average under 128 pairs, where 128-token
     * tiles are mostly padding, else 128. Experts alone in the same session (gpu_test_moe --bench,
     * 120b shapes, µs, 128 vs 64 tokens): T = 256 1848.6 vs 1321.6, T = 1024 1994.3 vs 1407.6,
     * T = 4096 (128 pairs) 3789.4 vs 3771.1, T = 16384 12619.1 vs 13220.9; prefill 8k (256 pairs)
     * was 4.7 % slower with 64 everywhere (24,706 → 23,537 tok/s). The split by average is drawn
     * from those runs; the combined rule itself has not been timed end to end. */
    p.bn = avg < 128.0 ? 64 : 128;
    p.ntp = avg <= ntp1_max_avg() ? 1 : 2;
    p.down_splits = p.large ? 1 : down_splits_for(T, E, k, p.ntp, sm_count);
    /* The trial: two slots, every item whole but those of the last partial wave (split in two
     * where that wave is at most half the resident blocks). One token keeps the rule above (its
     * items are one partial wave, split as far as it allows). */
    if (!p.large && T >= 2 && tail_split_switch()) p = moe_plan_tail_split(p, sm_count);
    return p;
}

moe_plan moe_plan_tail_split(moe_plan p, int sm_count) {
    p.tail_split = resident_blocks(p.ntp == 1 ? 1 : 2, sm_count), p.down_splits = 2;
    return p;
}

size_t moe_act_bytes(int T, int k, int I) {
    return (size_t)T * k * I * 2;
}

size_t moe_y_slots_bytes(int T, int k, int H, const moe_plan *plan) {
    return (size_t)T * k * (plan->large ? 1 : plan->down_splits) * H * sizeof(float);
}

static unsigned long long g_attrs_set; /* per device: per_device.h */

static int g_wgmma = -1; /* -1: not decided yet (GPTOSS_MOE_WGMMA at first use, moe.h) */

void moe_set_wgmma(int on) {
    g_wgmma = on >= 1 && on <= 5 ? on : 0;
}

int moe_wgmma_on(void) {
    return env_switch(&g_wgmma, "GPTOSS_MOE_WGMMA", 3, 0, 5);
}

typedef void (*small_fn)(moe_args);
static small_fn small_kernel_for(int ntp, int mode, int folded) {
#define SMALL_CASE(n, m)                                                                           \
    if (ntp == n && mode == m)                                                                     \
    return folded ? moe_small_kernel<n, m, true> : moe_small_kernel<n, m, false>
    SMALL_CASE(1, MODE_GATE_UP);
    SMALL_CASE(1, MODE_DOWN);
    SMALL_CASE(2, MODE_GATE_UP);
    SMALL_CASE(2, MODE_DOWN);
#undef SMALL_CASE
    return NULL;
}

static small_fn small_tail_kernel_for(int ntp, int folded) {
    if (ntp == 1) return folded ? moe_small_tail_kernel<1, true> : moe_small_tail_kernel<1, false>;
    return folded ? moe_small_tail_kernel<2, true> : moe_small_tail_kernel<2, false>;
}

static cudaError_t set_attrs(void) {
    if (per_device_done(&g_attrs_set)) return cudaSuccess;
    for (int ntp = 1; ntp <= 2; ntp++)
        for (int mode = 0; mode < 2; mode++)
            for (int folded = 0; folded < 2; folded++)
                CUDA_TRY(cudaFuncSetAttribute((const void *)small_kernel_for(ntp, mode, folded),
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              227 * 1024));
    for (int ntp = 1; ntp <= 2; ntp++)
        for (int folded = 0; folded < 2; folded++)
            CUDA_TRY(cudaFuncSetAttribute((const void *)small_tail_kernel_for(ntp, folded),
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024));
    CUDA_TRY(cudaFuncSetAttribute((const void *)moe_large_kernel<MODE_GATE_UP>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, LG_SMEM));
    CUDA_TRY(cudaFuncSetAttribute((const void *)moe_large_kernel<MODE_DOWN>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, LG_SMEM));
    per_device_mark(&g_attrs_set);
    return cudaSuccess;
}

static moe_args base_args(const moe_weights *w, const moe_routing *r) {
    moe_args a;
    memset(&a, 0, sizeof a);
    a.count = r->count, a.offset = r->offset, a.pair_sorted = r->pair_sorted,
    a.touched = r->touched;
    a.n_touched = r->n_touched, a.tiles = r->tiles, a.n_tiles = r->n_tiles, a.topk_w = r->topk_w;
    a.topk = r->k;
    a.alpha = w->swiglu_alpha, a.limit = w->swiglu_limit;
    return a;
}

/* The down projection under the tail-split trial: shared memory for a whole item's K (the items of
 * the full waves are not split), and a grid of the most items plus one wave of resident blocks
 * (small_begin_tail's split last wave has at most that many blocks). slots only shapes the
 * waves: every item is covered whatever it is (tests/test_moe_tail_plan.c). */
static cudaError_t launch_tail(moe_args &a, int ntp, int folded, int slots, int max_touched,
                               cudaStream_t stream) {
    const size_t smem = (size_t)8 * ntp * (a.KK * 64 + 32) * 2;
    if (smem > 227 * 1024 || slots < 1) return cudaErrorInvalidValue;
    if (max_touched < 1) return cudaSuccess;
    a.slots = slots;
    const int threads = ntp == 1 ? small_cfg<1>::THREADS : small_cfg<2>::THREADS;
    const long blocks = (long)max_touched * a.n_rb + a.slots;
    CUDA_TRY(pdl_launch(small_tail_kernel_for(ntp, folded), dim3((unsigned)blocks), dim3(threads),
                        smem, stream, a));
    return cudaGetLastError();
}

/* scratch: gate_up's room for its B rows in sorted order when the large path runs on
 * moe_wgmma_tma.cu (T·k·H bf16; NULL: that kernel is not used). n_experts: the weights'. */
static cudaError_t launch(const moe_args &a0, int mode, int folded, const moe_plan *plan,
                          const moe_routing *r, int n_experts, uint16_t *scratch, int rs,
                          cudaStream_t stream) {
    moe_args a = a0;
    const int max_touched = r->n_e < r->T * r->k ? r->n_e : r->T * r->k; /* grouped experts */
    if (plan->large) {
        /* The large kernel keeps row offsets into its input as 32-bit element offsets. */
        if ((size_t)r->T * r->k * a.K >= 0xffffffffull) return cudaErrorInvalidValue;
        a.S = 1;
        a.n_rb = (a.RT + 7) / 8;
        const dim3 grid((unsigned)a.n_rb, (unsigned)moe_max_tiles(r->T, r->n_e, r->k));
        const int kind = moe_wgmma_on();
        const int tma = kind == 4 || (kind == 3 && plan->bn == 64);
        if (rs || (tma && (mode == MODE_DOWN || scratch) && moe_wgmma_tma_available()))
            return moe_wgmma_tma_launch(a, mode, plan->bn, folded, rs, n_experts, r->T * r->k,
                                        scratch, grid, stream);
        if (kind == 2 || kind == 4 || ((kind == 3 || kind == 5) && plan->bn == 128))
            return moe_wgmma_ws_launch(a, mode, plan->bn, folded, grid, stream);
        if (moe_wgmma_on()) return moe_wgmma_launch(a, mode, plan->bn, grid, stream);
        if (mode == MODE_GATE_UP)
            pdl_launch(moe_large_kernel<MODE_GATE_UP>, dim3(grid), dim3(LG_THREADS), LG_SMEM,
                       stream, a);
        else
            pdl_launch(moe_large_kernel<MODE_DOWN>, dim3(grid), dim3(LG_THREADS), LG_SMEM, stream,
                       a);
        return cudaGetLastError();
    }
    const int ntp = plan->ntp == 1 ? 1 : 2;
    const int warps = ntp == 1 ? small_cfg<1>::WARPS : small_cfg<2>::WARPS;
    a.n_rb = (a.RT + warps - 1) / warps;
    if (mode == MODE_DOWN && plan->tail_split)
        return launch_tail(a, ntp, folded, plan->tail_split, max_touched, stream);
    const int nk_max = (a.KK + a.S - 1) / a.S;
    const size_t smem = (size_t)8 * ntp * (nk_max * 64 + 32) * 2; /* CAP staged token rows */
    if (smem > 227 * 1024) return cudaErrorInvalidValue;
    const long blocks = (long)max_touched * a.n_rb * a.S;
    if (blocks < 1) return cudaSuccess;
    const int threads = ntp == 1 ? small_cfg<1>::THREADS : small_cfg<2>::THREADS;
    CUDA_TRY(pdl_launch(small_kernel_for(ntp, mode, folded), dim3((unsigned)blocks), dim3(threads),
                        smem, stream, a));
    return cudaGetLastError();
}

static int weights_ok(const moe_weights *w) {
    return w && w->E >= 1 && w->H % 64 == 0 && w->I % 64 == 0 && w->H > 0 && w->I > 0 && w->w1_q &&
           w->w1_s && w->b1 && w->w2_q && w->w2_s && w->b2;
}

static cudaError_t gate_up(const moe_weights *w, const uint16_t *x, const moe_routing *r,
                           const moe_plan *plan, uint16_t *act, uint16_t *scratch, int rs,
                           cudaStream_t stream) {
    if (!weights_ok(w) || !x || !r || !plan || !act || r->n_e != w->E) return cudaErrorInvalidValue;
    if (r->T == 0) return cudaSuccess;
    CUDA_TRY(set_attrs());
    moe_args a = base_args(w, r);
    a.wq = (const uint4 *)w->w1_q, a.wsc = (const uint32_t *)w->w1_s, a.bias = w->b1;
    a.x = x, a.act = act;
    a.K = w->H, a.R = 2 * w->I, a.RT = a.R / 16, a.KK = a.K / 64, a.S = 1;
    return launch(a, MODE_GATE_UP, w->w1_folded, plan, r, w->E, scratch, rs, stream);
}

cudaError_t moe_gate_up(const moe_weights *w, const uint16_t *x, const moe_routing *r,
                        const moe_plan *plan, uint16_t *act, cudaStream_t stream) {
    return gate_up(w, x, r, plan, act, NULL, 0, stream);
}

/* rs: act is in fragment order, from gate_up on the register-A form (moe_experts). */
static cudaError_t down(const moe_weights *w, const moe_routing *r, const moe_plan *plan,
                        const uint16_t *act, float *y_slots, int rs, cudaStream_t stream) {
    if (!weights_ok(w) || !r || !plan || !act || !y_slots || r->n_e != w->E)
        return cudaErrorInvalidValue;
    if (r->T == 0) return cudaSuccess;
    CUDA_TRY(set_attrs());
    /* Expert parallelism: the pairs of other ranks' experts are not grouped (moe.h), so no kernel
     * writes their rows, and they must add zero in the all-reduce. Zeroing the whole buffer first is
     * the simplest way that is right for every path (the small path's K splits, the large path's
     * tiles): one memset, no kernel to keep in step with the grouping. It costs one more write of
     * y_slots (T·k·S·H fp32, which the all-reduce reads whole anyway); without EP it is not
     * issued, so one GPU and TP run exactly as before. */
    if (r->n_e < r->E)
        CUDA_TRY(cudaMemsetAsync(y_slots, 0, moe_y_slots_bytes(r->T, r->k, w->H, plan), stream));
    moe_args a = base_args(w, r);
    a.wq = (const uint4 *)w->w2_q, a.wsc = (const uint32_t *)w->w2_s, a.bias = w->b2;
    a.x = act, a.y = y_slots;
    a.K = w->I, a.R = w->H, a.RT = a.R / 16, a.KK = a.K / 64;
    a.S = plan->large ? 1 : plan->down_splits;
    if (a.S < 1 || a.S > a.KK) return cudaErrorInvalidValue; /* y_slots is laid out for this S */
    return launch(a, MODE_DOWN, w->w2_folded, plan, r, w->E, NULL, rs, stream);
}

cudaError_t moe_down(const moe_weights *w, const moe_routing *r, const moe_plan *plan,
                     const uint16_t *act, float *y_slots, cudaStream_t stream) {
    return down(w, r, plan, act, y_slots, 0, stream);
}

cudaError_t moe_experts(const moe_weights *w, const uint16_t *x, const moe_routing *r,
                        const moe_plan *plan, uint16_t *act, float *y_slots, cudaStream_t stream) {
    /* The register-A form of moe_wgmma_tma.cu (64-token tiles) runs both halves or neither: its act
     * is in an order of its own. It takes the place of the tma kernel at 64-token plans and of ws
     * at 128-token ones (GPTOSS_MOE_TMA_RS=1: at 64-token plans only). */
    const int kind = moe_wgmma_on(), rs_mode = moe_wgmma_tma_rs();
    const int rs = plan && plan->large && (kind == 3 || kind == 4) && rs_mode &&
                   (plan->bn == 64 || (plan->bn == 128 && rs_mode == 2)) &&
                   moe_wgmma_tma_available();
    moe_plan p64;
    if (rs) p64 = *plan, p64.bn = 64, plan = &p64;
    /* y_slots is written only by the down projection, after gate_up: until then it is gate_up's
     * scratch (T·k·H bf16 fit in its T·k·S·H fp32). */
    CUDA_TRY(gate_up(w, x, r, plan, act, (uint16_t *)y_slots, rs, stream));
    return down(w, r, plan, act, y_slots, rs, stream);
}
