/* The MoE block of a decode step of 1-4 tokens as one persistent kernel whose weights stream
 * without a break: moe_decode_fused's mode 3 (moe_fused.h). Router logits, the routing (in every
 * block), gate_up with SwiGLU, a grid barrier, down with its bias and routing weight.
 *
 * Why this form. Session 21's layer probe (tests/gpu/test_layer_probe.cu, the stream forms) asks
 * whether a phase boundary costs DRAM time when a producer warp keeps requesting the next phase's
 * weights while the consumers wait for the boundary. Unlike moe_fused.cu's items (each block loads
 * its item's weights into registers after the barrier, and a phase ran ~40 % slower than as its own
 * kernel), here one producer lane per block walks the block's tiles of both matrices in order and
 * keeps L.stages of them requested in shared memory (bulk copies, tma_ring.cuh's protocol): down's
 * weights do not depend on gate_up's result, so they are in flight while the grid waits at the
 * barrier, and DRAM streams the 53 MB of a 120b layer's four experts as one run.
 *
 * The work. A tile is a 16-row tile of one touched expert's matrix: its codes (KK·512 bytes) and
 * scale words (KK·32), contiguous in the repacked layout (moe.h), one stage. Block b owns tiles b,
 * b + G, … of gate_up's list (touched expert i, row tile rt) and then of down's. Two groups of eight
 * consumer warps take the block's tiles in turn (tile q: group q % 2, stage q % L.stages); within a
 * group the eight warps split the tile's k steps (warp w: steps w, w + 8, …), each with
 * moe_small.cuh's k step (the dequantisation and the two m16n8k16 MMAs a 32-wide chunk, the ≤ 8
 * pairs of the expert as the 8 token columns), so no MMA chain is longer than ~6 steps (session 6's
 * ring lost on 45-step chains, one warp a tile). The warps' partial sums meet in shared memory and
 * one warp of the group adds them in warp order and runs moe_kernel_common.cuh's epilogue.
 *
 * Bits: the sums are split over k differently from moe_small (eight partial sums added at the end),
 * so act and y are within rounding of the unfused path's, not equal; logits and routing are the
 * same code as moe_fused.cu's and equal. */
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/moe_block_parts.cuh"
#include "backend/cuda/moe_topk.cuh"
#include "backend/cuda/norm_row.cuh"
#include "backend/cuda/per_device.h"
#include "backend/cuda/tma_ring.cuh"

enum {
    FS_GROUPS = 2,
    FS_GROUP_WARPS = 8,
    FS_CWARPS = FS_GROUPS * FS_GROUP_WARPS, /* consumer warps */
    FS_WARPS = FS_CWARPS + 1,               /* and the producer */
    FS_THREADS = FS_WARPS * 32,
    FS_MAX_STAGES = 6, /* the ring: 6 stages where they fit beside the staged rows (T ≤ 2), else 4;
                          a multiple of FS_GROUPS, so stage s is always read by group s % FS_GROUPS */
    FS_MAX_SMEM = 224 * 1024
};
static_assert(FS_MAX_STAGES % FS_GROUPS == 0, "each stage read by one group");
static_assert(FS_MAX_T == 4, "the router rows are instantiated for 1 … 4 tokens");

/* Where things sit in dynamic shared memory (host-computed, moe_stream_launch). */
struct fs_layout {
    int stage_stride;      /* bytes a stage: KK_max·544 rounded up to 128 */
    int xs_off, xs_stride; /* the staged rows (bf16 elements a row: K_max + 32, ≡ 64 B mod 128) */
    int nx_off;  /* with the norm inside: x and x_lo, [T][H] bf16 each, inside the staging area */
    int red_off; /* [FS_GROUPS][2][FS_GROUP_WARPS][32] float4 partial sums */
    int bar_off; /* full[stages], empty[stages] */
    int stages;  /* 4 or 6: a multiple of FS_GROUPS */
};

static __device__ __forceinline__ void consumers_sync(void) {
    asm volatile("bar.sync 1, %0;" ::"n"(FS_CWARPS * 32) : "memory");
}
static __device__ __forceinline__ void group_sync(int group) {
    asm volatile("bar.sync %0, %1;" ::"r"(2 + group), "n"(FS_GROUP_WARPS * 32) : "memory");
}

/* grid_barrier (moe_block_parts.cuh) among the consumer warps only: the producer never waits for
 * the grid. */
static __device__ __forceinline__ void consumers_grid_barrier(unsigned *bar, unsigned spin_ns) {
    grid_barrier_with(bar, spin_ns, [] { consumers_sync(); });
}

/* How many of a list of n_tiles tiles this block owns: tiles b, b + G, … (tile t: touched expert
 * t / RT, row tile t % RT). */
static __device__ __forceinline__ int fs_my_tiles(int n_tiles) {
    return n_tiles > (int)blockIdx.x ? (n_tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
}

/* Rows [0, n) of K bf16 values from src (row stride K) into xs (row stride ld), by the consumers.
 * COHERENT: written by other blocks of this kernel, so read through L2. */
template <bool COHERENT>
static __device__ __forceinline__ void fs_stage_rows(const uint16_t *src, int n, int K,
                                                     uint16_t *xs, int ld) {
    const int vpr = K / 8;
    for (int idx = threadIdx.x; idx < n * vpr; idx += FS_CWARPS * 32) {
        const int r = idx / vpr, v = idx - r * vpr;
        const uint4 *p = (const uint4 *)(src + (size_t)r * K) + v;
        *(uint4 *)(xs + (size_t)r * ld + 8 * v) = COHERENT ? __ldcg(p) : *p;
    }
}

/* One tile by one group: wait for its stage, this warp's k steps, release the stage, the partial
 * sums through shared memory, and (one warp of the group, in turn) their sum and the epilogue. */
template <int MODE, bool FOLDED>
static __device__ __forceinline__ void
fs_tile(const moe_args &a, int tile, unsigned q, const unsigned char *ring, const fs_layout &L,
        uint64_t *full, uint64_t *empty, const uint16_t *xs, float4 *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int group = warp / FS_GROUP_WARPS, wg = warp % FS_GROUP_WARPS;
    const int g = lane >> 2, t = lane & 3;
    const int i = tile / a.RT, rt = tile - i * a.RT;
    const int e = a.touched[i], cnt = a.count[e], off = a.offset[e];
    /* This lane's token column: pair g of the expert (any staged row past cnt: its column of the
     * product is never stored). Gate_up multiplies the pair's token row, down its own act row. */
    const int n = g < cnt ? g : 0;
    const int row = MODE == MODE_GATE_UP ? a.pair_sorted[off + n] / a.topk : off + n;
    const uint32_t xaddr = smem_u32(xs + (size_t)row * L.xs_stride + 8 * t);
    const int s = (int)(q % (unsigned)L.stages);
    const unsigned char *codes = ring + (size_t)s * L.stage_stride;
    const unsigned char *scales = codes + (size_t)a.KK * 512;
    mbar_wait_or_trap(&full[s], (q / (unsigned)L.stages) & 1);
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    /* A k step's shared-memory operands: 4 code words, the scale word, the token fragments of its
     * two 32-wide chunks. Two steps' loads are issued before either is multiplied, so one step's
     * LDS latency hides behind the other's dequantisation (ptxas left a one-step loop with every
     * load right before its use); the MMAs run in the same order either way: the same bits. */
    struct step_ops {
        uint4 q, x0, x1;
        uint32_t sc;
    };
    auto load = [&](int kk) {
        step_ops o;
        o.q = lds128(smem_u32(codes + (size_t)kk * 512 + lane * 16));
        o.sc = *(const uint32_t *)(scales + (size_t)kk * 32 + g * 4);
        o.x0 = lds128(xaddr + (uint32_t)(kk * 128));
        o.x1 = lds128(xaddr + (uint32_t)(kk * 128 + 64));
        return o;
    };
    auto mul = [&](const step_ops &o) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            uint32_t ag[4], a8[4];
            dequant_word_t<FOLDED>(h ? o.q.z : o.q.x, o.sc, 2 * h, ag);
            dequant_word_t<FOLDED>(h ? o.q.w : o.q.y, o.sc, 2 * h + 1, a8);
            mma_chunk(acc, ag, a8, h ? o.x1 : o.x0);
        }
    };
    int kk = wg;
    for (; kk + FS_GROUP_WARPS < a.KK; kk += 2 * FS_GROUP_WARPS) {
        const step_ops first = load(kk), second = load(kk + FS_GROUP_WARPS);
        mul(first);
        mul(second);
    }
    if (kk < a.KK) mul(load(kk));
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[s]); /* this warp has read the stage */
    const int buf = (int)(q / FS_GROUPS) & 1;
    float4 *r = red + ((size_t)(group * 2 + buf) * FS_GROUP_WARPS) * 32;
    r[wg * 32 + lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    group_sync(group);
    /* The group's next tile uses the other buffer; the one after it this one again, written only
     * after the next group_sync, which this warp reaches after its epilogue. */
    if (wg != (int)(q / FS_GROUPS) % FS_GROUP_WARPS) return;
    float sum[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int w = 0; w < FS_GROUP_WARPS; w++) {
        const float4 v = r[w * 32 + lane];
        sum[0] += v.x, sum[1] += v.y, sum[2] += v.z, sum[3] += v.w;
    }
    tile_epilogue<MODE>(a, e, off, rt, 0, cnt, 0, sum);
    if (MODE == MODE_DOWN && a.S > 1) /* y_slots is laid out for the plan's splits: zeros past 0 */
#pragma unroll
        for (int qq = 0; qq < 2; qq++) {
            const int nn = 2 * t + qq;
            if (nn >= cnt) continue;
            const int pair = a.pair_sorted[off + nn];
            const int tok = pair / a.topk, j = pair - tok * a.topk;
            for (int sp = 1; sp < a.S; sp++) {
                float *yrow = a.y + ((size_t)tok * a.topk * a.S + (size_t)j * a.S + sp) * a.R;
                yrow[rt * 16 + g] = 0.f, yrow[rt * 16 + g + 8] = 0.f;
            }
        }
}

template <bool FOLDED1, bool FOLDED2>
__global__ void __launch_bounds__(FS_THREADS, 1)
    moe_stream_kernel(const fused_args fa, const fs_layout L) {
    extern __shared__ __align__(128) unsigned char fs_smem[];
    unsigned char *ring = fs_smem;
    uint16_t *xs = (uint16_t *)(fs_smem + L.xs_off);
    float4 *red = (float4 *)(fs_smem + L.red_off);
    const unsigned S = (unsigned)L.stages;
    uint64_t *full = (uint64_t *)(fs_smem + L.bar_off), *empty = full + S;
    __shared__ int s_idx[FS_MAX_P], s_pair[FS_MAX_P], s_touched[FS_MAX_P], s_nt;
    __shared__ int s_count[FU_MAX_E], s_offset[FU_MAX_E];
    __shared__ float s_w[FS_MAX_P];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int T = fa.T, E = fa.E, k = fa.k;
    if (threadIdx.x == 0) {
        for (unsigned s = 0; s < S; s++)
            mbar_init(&full[s], 1), mbar_init(&empty[s], FS_GROUP_WARPS);
        mbar_init_fence();
    }
    /* The next kernel's first weights (the next layer's QKV rows) to L2 now: until the routing is
     * known (norm, router, barrier, top-k: several µs) this kernel has no weights to stream, so
     * DRAM would idle; they are asked with evict_last, the experts' tiles with evict_first. */
    if (threadIdx.x == FS_CWARPS * 32) l2_prefetch_share(fa.l2_next, fa.l2_next_bytes);

    /* Phase 0, with the norm inside: every block makes x = RMSNorm(h + delta) · gain as split bf16
     * in shared memory, in norm_add_kernel's arithmetic and reduction tree (norm_row.cuh's replay:
     * the same bits as norm_add_rmsnorm_split), and keeps h + delta for block 0 to write back once
     * every block has read h (after the barrier below). */
    const uint16_t *x = fa.x, *x_lo = fa.x_lo;
    float hv[FS_MAX_T][8];
    const int H = fa.H, c = threadIdx.x;
    const bool norm_here = fa.nh && c < H / 8;
    if (fa.nh) {
        __shared__ float s_red[32];
        uint16_t *nx = (uint16_t *)(fs_smem + L.nx_off), *nx_lo = nx + (size_t)T * H;
        const uint4 g8 = gain_at(fa.ngain, c, norm_here);
        for (int m = 0; m < T; m++) {
            float v[1][8];
            const float ss = norm_replay_row<1>(fa.nh + (size_t)m * H, NULL, 0,
                                                fa.ndelta + (size_t)m * H, H, v, s_red);
            if (!norm_here) continue;
            uint4 hi, lo;
            norm_split8(v[0], rms_inv(ss, H, fa.neps), g8, hi, lo);
            *(uint4 *)(nx + (size_t)m * H + 8 * c) = hi;
            *(uint4 *)(nx_lo + (size_t)m * H + 8 * c) = lo;
#pragma unroll
            for (int i = 0; i < 8; i++) hv[m][i] = v[0][i];
        }
        __syncthreads();
        x = nx, x_lo = nx_lo;
    }

    /* Phase 1: router logits, a warp a row (rows b, b + G, … for warps 0, 1, …). */
    for (int e_row = blockIdx.x + w * gridDim.x; e_row < E; e_row += FS_WARPS * gridDim.x) {
        if (T == 1)
            router_row<1>(fa, e_row, x, x_lo);
        else if (T == 2)
            router_row<2>(fa, e_row, x, x_lo);
        else if (T == 3)
            router_row<3>(fa, e_row, x, x_lo);
        else
            router_row<4>(fa, e_row, x, x_lo);
    }
    grid_barrier(fa.bar, fa.spin_ns);
    if (blockIdx.x == 0 && norm_here) /* every block has read h */
        for (int m = 0; m < T; m++) {
            float4 *dst = (float4 *)(fa.nh + (size_t)m * H + 8 * c);
            dst[0] = make_float4(hv[m][0], hv[m][1], hv[m][2], hv[m][3]);
            dst[1] = make_float4(hv[m][4], hv[m][5], hv[m][6], hv[m][7]);
        }

    /* Phase 2: the routing, in every block (the logits in the staging area). */
    moe_args gu, dn;
    const block_route br = {s_idx, s_pair, s_touched, s_count, s_offset, &s_nt, s_w};
    const int nt = route_in_block(fa, (float *)xs, br, gu, dn);
    const int n_gu = fs_my_tiles(nt * gu.RT), n_dn = fs_my_tiles(nt * dn.RT);
    __syncthreads(); /* s_logits (in xs) read by every warp before xs is staged */

    if (w ==
        FS_CWARPS) { /* the producer: gate_up's tiles, then down's, never waiting for the grid */
        if (lane != 0) return;
        const uint64_t once = l2_policy_evict_first();
        for (unsigned q = 0; q < (unsigned)(n_gu + n_dn); q++) {
            const bool up = q < (unsigned)n_gu;
            const int RT = up ? gu.RT : dn.RT, KK = up ? gu.KK : dn.KK;
            const int tile = (int)blockIdx.x + (int)(up ? q : q - n_gu) * (int)gridDim.x;
            const int i = tile / RT, rt = tile - i * RT;
            const size_t tk = ((size_t)s_touched[i] * RT + rt) * KK; /* the tile's first step */
            const int s = (int)(q % S);
            if (q >= S) mbar_wait_or_trap(&empty[s], (q / S - 1) & 1);
            unsigned char *dst = ring + (size_t)s * L.stage_stride;
            mbar_arrive_expect_tx(&full[s], (uint32_t)KK * 544);
            bulk_copy_g2s_hint(dst, (up ? gu.wq : dn.wq) + tk * 32, (uint32_t)KK * 512, &full[s],
                               once);
            bulk_copy_g2s_hint(dst + (size_t)KK * 512, (up ? gu.wsc : dn.wsc) + tk * 8,
                               (uint32_t)KK * 32, &full[s], once);
        }
        return;
    }

    /* The consumers. Gate_up's input: the T token rows (written before this kernel). */
    const int group = w / FS_GROUP_WARPS;
    fs_stage_rows<false>(x, T, gu.K, xs, L.xs_stride);
    consumers_sync();
    unsigned q = 0;
    for (int j = 0; j < n_gu; j++, q++)
        if ((int)(q % FS_GROUPS) == group)
            fs_tile<MODE_GATE_UP, FOLDED1>(gu, (int)blockIdx.x + j * (int)gridDim.x, q, ring, L,
                                           full, empty, xs, red);
    /* Down's input is every block's gate_up output. */
    consumers_grid_barrier(fa.bar, fa.spin_ns);
    fs_stage_rows<true>(gu.act, T * k, dn.K, xs, L.xs_stride);
    consumers_sync();
    for (int j = 0; j < n_dn; j++, q++)
        if ((int)(q % FS_GROUPS) == group)
            fs_tile<MODE_DOWN, FOLDED2>(dn, (int)blockIdx.x + j * (int)gridDim.x, q, ring, L, full,
                                        empty, xs, red);
}

typedef void (*stream_fn)(fused_args, fs_layout);
static stream_fn stream_kernel_for(int f1, int f2) {
    return f1 ? (f2 ? moe_stream_kernel<true, true> : moe_stream_kernel<true, false>)
              : (f2 ? moe_stream_kernel<false, true> : moe_stream_kernel<false, false>);
}

static unsigned long long g_stream_attrs_set;

cudaError_t moe_stream_launch(const fused_args &fa, int folded1, int folded2, cudaStream_t stream) {
    const int P = fa.T * fa.k;
    const int kk_max = fa.gu.KK > fa.dn.KK ? fa.gu.KK : fa.dn.KK;
    fs_layout L;
    L.stage_stride = (kk_max * 544 + 127) / 128 * 128;
    L.xs_stride = kk_max * 64 + 32;
    size_t xs_bytes = (size_t)P * L.xs_stride * 2;
    if ((size_t)fa.T * fa.E * 4 > xs_bytes) xs_bytes = (size_t)fa.T * fa.E * 4; /* the logits */
    /* With the norm inside, x and x_lo sit past gate_up's staged rows and the logits. */
    size_t nx = (size_t)fa.T * L.xs_stride * 2;
    if ((size_t)fa.T * fa.E * 4 > nx) nx = (size_t)fa.T * fa.E * 4;
    const int nx_rel = (int)((nx + 15) / 16 * 16);
    if (fa.nh) {
        if (fa.H / 8 > FS_THREADS || !fa.ndelta || !fa.ngain) return cudaErrorInvalidValue;
        const size_t need = (size_t)nx_rel + 4 * (size_t)fa.T * fa.H;
        if (need > xs_bytes) xs_bytes = need;
    }
    xs_bytes = (xs_bytes + 127) / 128 * 128;
    const size_t red_bytes = FS_GROUPS * 2 * FS_GROUP_WARPS * 32 * 16;
    /* The ring: 6 stages where they fit beside the staged rows (T ≤ 2 at gpt-oss's shapes), else
     * 4 (T = 3, 4: 12-16 activation rows of down; 4 stages are still ~98 KB in flight an SM). */
    L.stages = FS_MAX_STAGES;
    while (L.stages > 2 * FS_GROUPS &&
           (size_t)L.stages * (L.stage_stride + 16) + xs_bytes + red_bytes > FS_MAX_SMEM)
        L.stages -= FS_GROUPS;
    L.xs_off = L.stages * L.stage_stride;
    L.nx_off = L.xs_off + nx_rel;
    L.red_off = L.xs_off + (int)xs_bytes;
    L.bar_off = L.red_off + (int)red_bytes;
    const size_t smem = (size_t)L.bar_off + 2 * (size_t)L.stages * sizeof(uint64_t);
    if (smem > FS_MAX_SMEM) return cudaErrorInvalidValue;
    if (!per_device_done(&g_stream_attrs_set)) {
        for (int v = 0; v < 4; v++)
            CUDA_TRY(cudaFuncSetAttribute((const void *)stream_kernel_for(v & 1, v >> 1),
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          FS_MAX_SMEM));
        per_device_mark(&g_stream_attrs_set);
    }
    int dev = 0, sms = 0, per = 0;
    const stream_fn f = stream_kernel_for(folded1, folded2);
    CUDA_TRY(cudaGetDevice(&dev));
    CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CUDA_TRY(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, (const void *)f, FS_THREADS, smem));
    if (per < 1) return cudaErrorInvalidConfiguration;
    cudaLaunchAttribute attr;
    /* one block an SM: the ring takes its shared memory */
    const cudaLaunchConfig_t cfg =
        cooperative_config((unsigned)sms, FS_THREADS, smem, stream, &attr, 1);
    CUDA_TRY(cudaLaunchKernelEx(&cfg, f, fa, L));
    return cudaGetLastError();
}
