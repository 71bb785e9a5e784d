/* The MoE block of a decode step in one persistent kernel (moe_fused.h): router logits,
 * top-k routing, gate_up with SwiGLU, and down with its bias and routing weight, for steps of at most
 * FU_MAX_T tokens. Unfused, the same work is four launches (router GEMV, routing, gate_up, down).
 *
 * Why one kernel. On the H200 the graph-replayed 120b step at batch 1 has almost no gaps between
 * kernels (1.9 % of the step: bench/results/session4-2026-12-02-h200.md); the time is inside the
 * kernels, and a small kernel's time is mostly its ramp: the router GEMV takes ~4.2 µs for 0.77 MB,
 * the routing ~5 µs for a few hundred instructions, and down cannot start streaming its 17.7 MB of
 * weights before gate_up's last block has finished. Here the phases are separated by grid barriers
 * instead of kernel boundaries, and a phase whose weights do not depend on the previous phase issues
 * its first loads before the barrier: each block's first down-projection item has its first batch of
 * codes in flight while the grid waits for gate_up to finish (moe_small.cuh's small_begin).
 *
 *   phase 1  router: warp (block·4 + w) computes expert row e = block·4 + w for every token, the
 *            dense GEMV's order of operations (gemv_row.cuh), into the fp32 logits buffer;
 *   barrier
 *   phase 2  routing, redundantly in every block (cheaper than another barrier): the T rows of
 *            logits into shared memory through L2, one warp per token picks the top-k
 *            (moe_topk.cuh), one warp groups the ≤ 32 pairs by expert with shuffles; block 0 also
 *            writes the routing to global memory in moe_route_split's format;
 *            gate_up: moe_experts' small-path items, block b taking items b, b + G, …;
 *            down: the block's first item begun (weights in flight);
 *   barrier
 *   phase 3  down: the items, the first one already streaming.
 *
 * The results are bit-identical to the unfused path's (gemv_bf16 + moe_route_split + moe_experts)
 * wherever that path runs the router as a GEMV (T ≤ 4): the same code computes every value in the
 * same order (tests/gpu/test_moe_fused.cu asserts it).
 *
 * Measured on the H200 (bench/results/session4-2026-12-02-h200.md): SLOWER — the MoE block at one
 * token 36.3 → 47.6 µs, 120b decode at batch 1 −22 %. By phase: launch + router + barrier 9.2 µs
 * (the GEMV kernel 4.2), routing 3.2 (5.0), gate_up 22–24 (15.7 as a kernel; 19.5 built for 3
 * blocks an SM, 152 registers), down 10.7 (9.3); polling backoff changes nothing, the cooperative
 * attribute ~1 µs. So it is off (GPTOSS_MOE_FUSED=1 or 2 turns it on for measurements) and kept as
 * the working base of the persistent-kernel step of issue 13, with its probes
 * (moe_fused_set_probe). Why gate_up runs slower here than as its own kernel is the open question.
 *
 * The grid barrier needs every block resident at once: the kernel is launched cooperatively (the
 * driver refuses a grid that cannot be resident) with as many blocks as fit. The barrier is a counter
 * and a generation word, reset by the last block to arrive, so it needs no clearing between launches
 * or graph replays; a block that waits more than ~2 s traps (an error, not a hang). */
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/moe_block_parts.cuh"
#include "backend/cuda/moe_fused.h"
#include "backend/cuda/moe_topk.cuh"
#include "backend/cuda/per_device.h"
#include "base/env_switch.h"

template <bool FOLDED1, bool FOLDED2, int MIN_BLOCKS = small_cfg<1>::MIN_BLOCKS>
__global__ void __launch_bounds__(FU_THREADS, MIN_BLOCKS) moe_fused_kernel(const fused_args fa) {
    extern __shared__ uint4 fu_smem[];
    uint16_t *xs = (uint16_t *)fu_smem; /* the items' token staging (phase 2 first: the logits) */
    __shared__ int s_idx[FU_MAX_P], s_pair[FU_MAX_P], s_touched[FU_MAX_P], s_nt;
    __shared__ int s_count[FU_MAX_E], s_offset[FU_MAX_E];
    __shared__ float s_w[FU_MAX_P];
    const int w = threadIdx.x >> 5;
    const int T = fa.T, E = fa.E;

    /* Phase 1: router logits. */
    const int e_row = blockIdx.x * FU_WARPS + w;
    if (e_row < E) {
        switch (T) {
        case 1:
            router_row<1>(fa, e_row, fa.x, fa.x_lo);
            break;
        case 2:
            router_row<2>(fa, e_row, fa.x, fa.x_lo);
            break;
        case 3:
            router_row<3>(fa, e_row, fa.x, fa.x_lo);
            break;
        case 4:
            router_row<4>(fa, e_row, fa.x, fa.x_lo);
            break;
        case 5:
            router_row<5>(fa, e_row, fa.x, fa.x_lo);
            break;
        case 6:
            router_row<6>(fa, e_row, fa.x, fa.x_lo);
            break;
        case 7:
            router_row<7>(fa, e_row, fa.x, fa.x_lo);
            break;
        default:
            router_row<8>(fa, e_row, fa.x, fa.x_lo);
            break;
        }
    }
    grid_barrier(fa.bar, fa.spin_ns);
    if (fa.stop_after == 1) return;

    /* Phase 2: routing, in every block. */
    moe_args gu, dn;
    const block_route br = {s_idx, s_pair, s_touched, s_count, s_offset, &s_nt, s_w};
    const int nt = route_in_block(fa, (float *)fu_smem, br, gu, dn);

    if (fa.stop_after == 2) return;
    const int n_gu = nt * gu.n_rb * gu.S, n_dn = nt * dn.n_rb * dn.S;
    for (int b = blockIdx.x; b < n_gu; b += gridDim.x) {
        small_item<1> it;
        if (small_begin<1>(gu, b, it)) small_run<1, MODE_GATE_UP, FOLDED1, false>(gu, it, xs);
    }
    /* The first down item's weights do not depend on gate_up: in flight across the barrier (mode
     * 2: partly in shared memory too). */
    const int b0 = fa.deep ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    small_item<1> first;
    const bool has_first = b0 < n_dn && small_begin<1>(dn, b0, first);
    if (has_first && fa.pre_steps > 0)
        small_prefetch<1>(first,
                          smem_u32((char *)fu_smem + fa.pre_off) +
                              (uint32_t)(w * small_prefetch_warp_bytes(fa.pre_steps)),
                          small_cfg<1>::U, fa.pre_steps);
    grid_barrier(fa.bar, fa.spin_ns);
    if (fa.stop_after == 3) return;

    /* Phase 3: down (its input, gate_up's activations, through L2). */
    if (has_first) small_run<1, MODE_DOWN, FOLDED2, true, true>(dn, first, xs);
    for (int b = b0 + gridDim.x; b < n_dn; b += gridDim.x) {
        small_item<1> it;
        if (small_begin<1>(dn, b, it)) small_run<1, MODE_DOWN, FOLDED2, true, true>(dn, it, xs);
    }
}

/* ---------------------------------------------------------------------------------------------- */

typedef void (*fused_fn)(fused_args);
static fused_fn fused_kernel_for(int f1, int f2, int three = 0) {
    if (three) /* measurement: 3 blocks an SM, up to 168 registers (moe_fused_set_probe) */
        return f1 ? (f2 ? moe_fused_kernel<true, true, 3> : moe_fused_kernel<true, false, 3>)
                  : (f2 ? moe_fused_kernel<false, true, 3> : moe_fused_kernel<false, false, 3>);
    return f1 ? (f2 ? moe_fused_kernel<true, true> : moe_fused_kernel<true, false>)
              : (f2 ? moe_fused_kernel<false, true> : moe_fused_kernel<false, false>);
}

static int g_fused = -1; /* -1: not decided yet */

void moe_set_fused(int mode) {
    g_fused = mode >= 1 && mode <= 2 ? mode : 0;
}

int moe_fused_enabled(void) {
    return env_switch(&g_fused, "GPTOSS_MOE_FUSED", 0, 0, 2);
}

static unsigned g_spin_ns;
void moe_fused_set_spin_ns(unsigned ns) {
    g_spin_ns = ns;
}

static int g_stop_after, g_plain_launch, g_three;
void moe_fused_set_probe(int stop_after, int plain_launch, int three_blocks) {
    g_stop_after = stop_after >= 1 && stop_after <= 3 ? stop_after : 0;
    g_plain_launch = plain_launch != 0, g_three = three_blocks != 0;
}

int moe_fused_supported(int T, int E, int k, int H, int I, const moe_plan *plan) {
    return plan && !plan->large && plan->ntp == 1 && T >= 1 && T <= FU_MAX_T && k >= 1 && k <= 8 &&
           T * k <= FU_MAX_P && E >= k && E <= FU_MAX_E && H % 64 == 0 && H <= FU_MAX_H &&
           I % 64 == 0 && H > 0 && I > 0;
}

/* Resident blocks of the kernel with smem bytes of staging: the cooperative grid. Cached per device
 * and variant for the last staging size asked (one per model). */
enum { FU_DEVICES = 64 };
static unsigned long long g_attrs_set;
static struct {
    size_t smem;
    int grid;
} g_resident[FU_DEVICES][8];

static cudaError_t resident_grid(int variant, size_t smem, int *grid) {
    int dev = 0, sms = 0, per = 0;
    CUDA_TRY(cudaGetDevice(&dev));
    if (dev < 0 || dev >= FU_DEVICES) return cudaErrorInvalidDevice;
    const fused_fn f = fused_kernel_for(variant & 1, (variant >> 1) & 1, variant >> 2);
    if (!per_device_done(&g_attrs_set)) {
        for (int v = 0; v < 8; v++)
            CUDA_TRY(
                cudaFuncSetAttribute((const void *)fused_kernel_for(v & 1, (v >> 1) & 1, v >> 2),
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, FU_MAX_SMEM));
        per_device_mark(&g_attrs_set);
    }
    if (g_resident[dev][variant].smem != smem || !g_resident[dev][variant].grid) {
        CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        CUDA_TRY(
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, (const void *)f, FU_THREADS, smem));
        g_resident[dev][variant].smem = smem, g_resident[dev][variant].grid = per * sms;
    }
    *grid = g_resident[dev][variant].grid;
    return cudaSuccess;
}

/* The arguments both forms take (the caller has checked the pointers). */
static cudaError_t fill_args(fused_args &fa, const moe_weights *w, const uint16_t *x,
                             const uint16_t *x_lo, const uint16_t *router_w,
                             const uint16_t *router_b, float *logits, const moe_routing *r,
                             const moe_plan *plan, uint16_t *act, float *y_slots, unsigned *bar) {
    memset(&fa, 0, sizeof fa);
    moe_args &g = fa.gu, &d = fa.dn;
    g.wq = (const uint4 *)w->w1_q, g.wsc = (const uint32_t *)w->w1_s, g.bias = w->b1;
    g.x = x, g.act = act, g.K = w->H, g.R = 2 * w->I, g.RT = g.R / 16, g.KK = g.K / 64, g.S = 1;
    d.wq = (const uint4 *)w->w2_q, d.wsc = (const uint32_t *)w->w2_s, d.bias = w->b2;
    d.x = act, d.y = y_slots, d.K = w->I, d.R = w->H, d.RT = d.R / 16, d.KK = d.K / 64;
    d.S = plan->down_splits;
    if (d.S < 1 || d.S > d.KK) return cudaErrorInvalidValue; /* y_slots is laid out for this S */
    g.n_rb = (g.RT + FU_WARPS - 1) / FU_WARPS, d.n_rb = (d.RT + FU_WARPS - 1) / FU_WARPS;
    g.topk = d.topk = r->k;
    g.alpha = d.alpha = w->swiglu_alpha, g.limit = d.limit = w->swiglu_limit;
    fa.x = x, fa.x_lo = x_lo, fa.router_w = router_w, fa.router_b = router_b, fa.logits = logits;
    fa.r = *r, fa.bar = bar, fa.T = r->T, fa.E = w->E, fa.k = r->k, fa.H = w->H;
    fa.spin_ns = g_spin_ns;
    return cudaSuccess;
}

cudaError_t moe_decode_fused(const moe_weights *w, const uint16_t *x, const uint16_t *x_lo,
                             const uint16_t *router_w, const uint16_t *router_b, float *logits,
                             const moe_routing *r, const moe_plan *plan, uint16_t *act,
                             float *y_slots, unsigned *bar, cudaStream_t stream) {
    if (!w || !x || !router_w || !logits || !r || !plan || !act || !y_slots || !bar ||
        r->E != w->E || r->n_e != r->E || !moe_fused_supported(r->T, w->E, r->k, w->H, w->I, plan))
        return cudaErrorInvalidValue;
    fused_args fa;
    CUDA_TRY(fill_args(fa, w, x, x_lo, router_w, router_b, logits, r, plan, act, y_slots, bar));
    moe_args &g = fa.gu, &d = fa.dn;
    const int variant = (w->w1_folded ? 1 : 0) | (w->w2_folded ? 2 : 0) | (g_three ? 4 : 0);

    const int nk_dn = (d.KK + d.S - 1) / d.S, nk_max = g.KK > nk_dn ? g.KK : nk_dn;
    size_t smem = small_smem_bytes<1>(nk_max);
    if ((size_t)fa.T * fa.E * 4 > smem) smem = (size_t)fa.T * fa.E * 4;
    fa.deep = moe_fused_enabled() == 2;
    fa.spin_ns = g_spin_ns, fa.stop_after = g_stop_after;
    if (fa.deep) {
        /* As many k steps past the register batch as fit beside the down staging within the
         * budget that keeps 4 blocks an SM (or within what gate_up's staging already takes). */
        const size_t stage = (small_smem_bytes<1>(nk_dn) + 127) / 128 * 128;
        const size_t budget = smem > FU_DEEP_SMEM ? smem : (size_t)FU_DEEP_SMEM;
        const int room = stage < budget
                             ? (int)((budget - stage) / (FU_WARPS * small_prefetch_warp_bytes(1)))
                             : 0;
        const int want = d.KK / d.S - small_cfg<1>::U; /* the shortest split's remaining steps */
        fa.pre_steps = room < want ? room : want > 0 ? want : 0;
        fa.pre_off = (int)stage;
        const size_t need = stage + FU_WARPS * small_prefetch_warp_bytes(fa.pre_steps);
        if (fa.pre_steps > 0 && need > smem) smem = need;
    }
    if (smem > FU_MAX_SMEM) return cudaErrorInvalidValue;
    int grid = 0;
    CUDA_TRY(resident_grid(variant, smem, &grid));
    if (grid * FU_WARPS < fa.E) return cudaErrorInvalidConfiguration; /* a warp per router row */

    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg =
        cooperative_config((unsigned)grid, FU_THREADS, smem, stream, &attr, !g_plain_launch);
    CUDA_TRY(cudaLaunchKernelEx(&cfg, fused_kernel_for(w->w1_folded, w->w2_folded, g_three), fa));
    return cudaGetLastError();
}
