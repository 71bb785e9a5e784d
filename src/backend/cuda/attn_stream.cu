/* The attention block of a decode step of 1-4 tokens as one persistent kernel (attn_stream.h):
 * one block an SM, eight consumer warps and one producer warp running the phases of
 * attn_stream_phases.cuh (which says how each works), and the host side: the switch, the plan,
 * the cooperative launch. */
#include "backend/cuda/attn_stream.h"
#include "backend/cuda/attn_stream_phases.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/grid_sync.cuh"
#include "backend/cuda/per_device.h"
#include "base/env_switch.h"

#include <math.h>
#include <string.h>

static constexpr float ATTN_ROUTER_ONE = 16777216.0f; /* 2^24: the router sums' unit */

/* ROUTER: the router by columns in O's epilogue (one token; its own instantiation, so that the
 * kernel without it is the code measured before). */
template <int T, bool ROUTER = false>
__global__ void __launch_bounds__(AS_THREADS, 1)
    attn_stream_kernel(const as_params P, const as_layout L) {
    extern __shared__ __align__(128) unsigned char as_smem[];
    const attn_stream_args &a = P.a;
    unsigned char *ring = as_smem;
    float *xs = (float *)(as_smem + L.xs_off);
    const int S = L.stages;
    uint64_t *full = (uint64_t *)(as_smem + L.bar_off), *empty = full + S;
    uint64_t *o_go =
        full + 2 * AS_MAX_STAGES; /* phase 1 is done over the grid: O's copies may go */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int H = a.H, Q = P.n_heads * AS_HD, G = gridDim.x, b = blockIdx.x;
    int p0, r0;
    const int n_pairs = asp_share(b, G, (P.n_heads + 2 * P.n_kv_heads) * AS_HALF, &p0);
    const int my_rows = asp_share(b, G, H, &r0);
    const int n_rows = P.stop_after && P.stop_after != 5 ? 0 : my_rows; /* the phase probes: no O */
    const int qkv_row_bytes = H * 2, o_row_bytes = Q * 2;
    /* the router by columns in O's epilogue (attn_stream_router): one more stage, its rows of the
     * transposed router, after the block's O rows */
    const attn_stream_router &R = a.router;
    const bool rcols = ROUTER && T == 1 && R.wt && n_rows > 0;
    /* The consumers' loads go out first, before the producer's copies (as_early). */
    as_early<T> early;
    if (warp < AS_CWARPS) as_early_load<T>(P, L, p0, n_pairs, r0, my_rows, early);
    if (threadIdx.x == 0) {
        for (int s = 0; s < S; s++) mbar_init(&full[s], 1), mbar_init(&empty[s], 1);
        mbar_init(o_go, 1);
        mbar_init_fence();
    }
    __syncthreads();
    /* The grid barriers: grid_sync.cuh's counted form (bar_n: the arrivals passed), the count
     * set back to 0 as the consumers leave (grid_exit_counted, on every path that passed one). */
    unsigned bar_n = 0;
    auto barrier = [&] { grid_barrier_counted(a.bar, &bar_n, [] { consumers_sync(); }); };
    if (P.stop_after == 3 || P.stop_after == 4) { /* the fixed costs: launch, one grid barrier */
        if (P.stop_after == 4 && warp < AS_CWARPS) {
            barrier();
            grid_exit_counted(a.bar, bar_n);
        }
        return;
    }

    /* The producer: QKV pairs, then O rows. O's copies wait for phase 1's grid barrier (o_go):
     * issued as stages free during phase 1, they took DRAM from the QKV rows of the blocks still
     * in phase 1, whose late refills queued behind them, and the whole grid waited at the barrier
     * (session 23's ncu: ~9 µs of 38 there). After the barrier they stream during phase 2, whose
     * work is latency, not bytes. */
    if (warp == AS_CWARPS) {
        if (lane != 0) return;
        const uint64_t once = l2_policy_evict_first();
        for (int q = 0; q < n_pairs + n_rows; q++) {
            if (q == n_pairs && P.stop_after != 5) mbar_wait_or_trap(o_go, 0);
            const int s = q % S;
            if (q >= S) mbar_wait_or_trap(&empty[s], (q / S - 1) & 1);
            unsigned char *dst = ring + (size_t)s * L.stage_bytes;
            if (q < n_pairs) {
                const int p = p0 + q, hh = p / AS_HALF, i = p % AS_HALF;
                const uint16_t *w1 = a.qkv_w + (size_t)(hh * AS_HD + i) * H;
                mbar_arrive_expect_tx(&full[s], (uint32_t)(2 * qkv_row_bytes));
                bulk_copy_g2s_hint(dst, w1, (uint32_t)qkv_row_bytes, &full[s], once);
                bulk_copy_g2s_hint(dst + qkv_row_bytes, w1 + (size_t)AS_HALF * H,
                                   (uint32_t)qkv_row_bytes, &full[s], once);
            } else {
                mbar_arrive_expect_tx(&full[s], (uint32_t)o_row_bytes);
                bulk_copy_g2s_hint(dst, a.o_w + (size_t)(r0 + q - n_pairs) * Q,
                                   (uint32_t)o_row_bytes, &full[s], once);
            }
        }
        if (rcols) {
            const int q = n_pairs + n_rows, s = q % S;
            if (q >= S) mbar_wait_or_trap(&empty[s], (q / S - 1) & 1);
            const uint32_t bytes = (uint32_t)(n_rows * R.E * 2);
            mbar_arrive_expect_tx(&full[s], bytes);
            bulk_copy_g2s_hint(ring + (size_t)s * L.stage_bytes, R.wt + (size_t)r0 * R.E, bytes,
                               &full[s], once);
        }
        return;
    }

    if (P.stop_after == 5) { /* the ring alone: every stage released as soon as it lands */
        for (int q = warp; q < n_pairs + n_rows; q += AS_CWARPS) {
            mbar_wait_or_trap(&full[q % S], (q / S) & 1);
            __syncwarp();
            if (lane == 0) mbar_arrive(&empty[q % S]);
        }
        return;
    }

    /* Before the first stage lands: the staged token rows, the epilogues' biases and RoPE factors,
     * this lane's token slot, phase 2's item, from as_early's loads (the barrier below publishes
     * them). */
    as_pre pre;
    pre.qkv_bias = (float *)(as_smem + L.pre_off);
    pre.cs = pre.qkv_bias + 2 * L.max_pairs;
    pre.o_bias = pre.cs + 2 * T * L.max_pairs;
    if (a.nh)
        as_norm_rows<T>(a, xs);
    else
        as_early_rows<T>(early, H, xs);
    as_preload<T>(P, pre, early, p0, n_pairs, r0, my_rows);
    const int slot = early.slot;
    const as_item item = as_item_plan<T>(P, L, early);

    /* Phase 1: QKV pairs, RoPE, the KV write. */
    consumers_sync();
    for (int q = warp; q < n_pairs; q += AS_CWARPS) {
        const int s = q % S;
        mbar_wait_or_trap(&full[s], (q / S) & 1);
        float acc[2][T];
        as_rows_dot<T, 2>(ring + (size_t)s * L.stage_bytes, qkv_row_bytes, H / 8, xs, acc);
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[s]);
        if (lane < T) {
            const int p = p0 + q;
            as_qkv_store<T>(P, pre, q, p / AS_HALF, p % AS_HALF, lane, slot,
                            as_pick<T>(acc[0], lane), as_pick<T>(acc[1], lane));
        }
    }
    as_item_prefetch(P, L, item, as_smem);
    barrier();
    if (threadIdx.x == 0) mbar_arrive(o_go);
    if (a.nh && b == 0) /* every block has read h: its new rows (written by this block) */
        for (int i = threadIdx.x; i < T * H / 4; i += AS_CWARPS * 32)
            ((float4 *)a.nh)[i] = ((const float4 *)a.nscratch)[i];
    if (P.stop_after == 1) { /* the probe: phase 2's first chunk may still be on its way */
        cp_async_wait<0>();
        grid_exit_counted(a.bar, bar_n);
        return;
    }

    /* Phase 2: attention (its chunk buffers overlay the staged rows). */
    as_attention(P, L, item, as_smem);
    barrier();
    grid_exit_counted(a.bar, bar_n); /* the last barrier: every block has left the waits */
    if (P.stop_after == 2) return;

    /* Phase 3: O (and with the router by columns, h + o, its squares and g (h + o) of the
     * block's rows; h and the gain of a row asked for before the row's dot product). */
    __shared__ float s_oc[ATTN_ROUTER_MAX_ROWS], s_sq[ATTN_ROUTER_MAX_ROWS];
    as_stage_rows(a.attn, T, Q, xs);
    consumers_sync();
    for (int q = n_pairs + (warp - n_pairs % AS_CWARPS + AS_CWARPS) % AS_CWARPS;
         q < n_pairs + n_rows; q += AS_CWARPS) {
        const int s = q % S, j = q - n_pairs, row = r0 + j;
        const float hj = rcols && lane == 0 ? __ldcg(R.h + row) : 0.0f;
        const uint16_t gj = rcols && lane == 0 ? __ldg(R.gain + row) : (uint16_t)0;
        mbar_wait_or_trap(&full[s], (q / S) & 1);
        float acc[1][T];
        as_rows_dot<T, 1>(ring + (size_t)s * L.stage_bytes, o_row_bytes, Q / 8, xs, acc);
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[s]);
        if (lane < T) {
            const uint16_t ob = f32_to_bf16_bits(as_pick<T>(acc[0], lane) + pre.o_bias[j]);
            a.o[(size_t)lane * H + row] = ob;
            if (rcols) {                                   /* T = 1: lane 0 */
                const float v = hj + bf16_bits_to_f32(ob); /* the loop's norm_add order */
                R.h[row] = v;
                s_oc[j] = v * bf16_bits_to_f32(gj);
                s_sq[j] = v * v;
            }
        }
    }
    if (!ROUTER || !rcols) return;
    consumers_sync(); /* s_oc, s_sq */
    const int tid = threadIdx.x;
    if (warp == 0) { /* the block's share of the sum of squares, in row order */
        float ss = lane < n_rows ? s_sq[lane] : 0.0f;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if (lane == 0) __stcg(R.ss_part + b, ss);
    }
    if (tid < R.E) { /* expert tid's sum over the block's rows, into group b % GROUPS */
        const int q = n_pairs + n_rows, s = q % S;
        mbar_wait_or_trap(&full[s], (q / S) & 1);
        const uint16_t *wt = (const uint16_t *)(ring + (size_t)s * L.stage_bytes);
        float p = 0.0f;
        for (int j = 0; j < n_rows; j++) p += bf16_bits_to_f32(wt[j * R.E + tid]) * s_oc[j];
        atomicAdd(R.acc + (size_t)(b % ATTN_ROUTER_GROUPS) * R.E + tid,
                  (unsigned long long)__float2ll_rn(p * ATTN_ROUTER_ONE));
    }
}

/* ---- host ---- */

enum { AS_AUTO = 3 }; /* the switch unset: the measured default per token count */
static int g_on = -1;
int attn_stream_mode(int T) {
    const int m = env_switch(&g_on, "GPTOSS_ATTN_STREAM", AS_AUTO, 0, AS_AUTO);
    return m == AS_AUTO ? (T == 1 ? 2 : 0) : m;
}
void attn_stream_set(int on) {
    env_switch_set(&g_on, on, 0, AS_AUTO);
}

static int g_stop_after;
void attn_stream_set_probe(int stop_after) {
    g_stop_after = stop_after >= 1 && stop_after <= 5 ? stop_after : 0;
}

extern "C" int attn_stream_supported(const attn_dims *d, const rope_kv_freq *f, int T, int n_seqs,
                                     int H) {
    return T >= 1 && T <= ATTN_STREAM_MAX_T && n_seqs == T && d->head_dim == AS_HD &&
           d->n_kv_heads >= 1 && d->n_kv_heads <= ATTN_STREAM_MAX_KV_HEADS &&
           d->n_heads == AS_GQA * d->n_kv_heads && !d->kv_fp8 && attn_block_shift(d) >= 3 &&
           f->half == AS_HALF && H >= 8 && H % 8 == 0 && H <= ATTN_STREAM_MAX_H &&
           d->n_heads * AS_HD <= ATTN_STREAM_MAX_H;
}

static int slots_for(const attn_dims *d, int T, int sms) {
    return sms / (T * d->n_kv_heads);
}

/* The router by columns' shapes: one token, a lane a row of the block's (at most 32), the rows'
 * columns in one stage, a consumer thread an expert, the shares' room, the arrays given and
 * aligned for the bulk copy (E a multiple of 8: a row's columns are 16-byte multiples). */
static bool attn_stream_router_fits(int T, int H, int E, int sms, int stage_bytes,
                                    const attn_stream_router *r) {
    const int rows = (H + sms - 1) / sms;
    return T == 1 && E >= 8 && E % 8 == 0 && E <= 256 && E <= AS_CWARPS * 32 &&
           rows <= ATTN_ROUTER_MAX_ROWS && (size_t)rows * E * 2 <= (size_t)stage_bytes &&
           sms <= ATTN_ROUTER_MAX_G && r->gain && r->h && r->acc && r->ss_part &&
           ((uintptr_t)r->wt & 15) == 0;
}

extern "C" int attn_stream_router_supported(const attn_dims *d, int H, int E) {
    const int sms = per_device_sm_count();
    as_layout L;
    size_t xs_bytes;
    attn_stream_router r;
    memset(&r, 0, sizeof r);
    r.gain = (const uint16_t *)16, r.h = (float *)16, r.acc = (unsigned long long *)16;
    r.ss_part = (float *)16; /* only the shapes are asked about */
    return as_plan_layout(d, 1, H, sms, 0, &L, &xs_bytes) > 0 &&
           attn_stream_router_fits(1, H, E, sms, L.stage_bytes, &r);
}

extern "C" size_t attn_stream_workspace_bytes(const attn_dims *d, int T) {
    const int sl = slots_for(d, T, per_device_sm_count());
    return (size_t)T * d->n_heads * (sl > 0 ? sl : 1) * (AS_HD + 2) * sizeof(float);
}

static unsigned long long g_setup_done;

typedef void (*as_kernel)(as_params, as_layout);
static as_kernel kernel_for(int T, bool router = false) {
    static_assert(ATTN_STREAM_MAX_T == 4, "one instantiation a token count");
    return T == 1 && router ? attn_stream_kernel<1, true>
           : T == 1         ? attn_stream_kernel<1>
           : T == 2         ? attn_stream_kernel<2>
           : T == 3         ? attn_stream_kernel<3>
                            : attn_stream_kernel<4>;
}

/* The shared-memory layout for T tokens of hidden size H on sms SMs, and the bytes it takes; 0 when
 * there are no split slots or fewer stages than consumer warps fit. min_stage: the least stage
 * size (0: a QKV pair's or an O row's; the step kernel's expert chunks may need more). xs_bytes:
 * the staged rows' room (at xs_off). */
size_t as_plan_layout(const attn_dims *d, int T, int H, int sms, int min_stage, as_layout *L,
                      size_t *xs_bytes) {
    L->slots = slots_for(d, T, sms);
    if (L->slots < 1) return 0;
    const int Q = d->n_heads * AS_HD;
    int stage = 4 * H > 2 * Q ? 4 * H : 2 * Q;
    if (stage < min_stage) stage = min_stage;
    L->stage_bytes = (stage + 127) / 128 * 128;
    /* the staged token rows (phase 1: x, phase 3: the attention output) and phase 2's two chunk
     * buffers: B over x's rows, A past them (asked for while phase 1 reads x) */
    const size_t x_rows = ((size_t)T * H * 4 + 127) / 128 * 128;
    size_t xs = (size_t)T * Q * 4;
    if (xs < x_rows + AS_KV_BUF) xs = x_rows + AS_KV_BUF;
    if (xs < (size_t)AS_KV_BUF + AS_KV_BUF) xs = 2 * AS_KV_BUF;
    xs = (xs + 127) / 128 * 128;
    /* the preloaded values: per pair its biases and T (cos, sin), per O row its bias */
    const int pairs_all = (d->n_heads + 2 * d->n_kv_heads) * AS_HALF;
    L->max_pairs = (pairs_all + sms - 1) / sms;
    const size_t pre = ((size_t)L->max_pairs * (2 + 2 * T) + (size_t)(H + sms - 1) / sms) * 4;
    /* as many stages as fit beside the staged rows, the barriers and those, in whole multiples of
     * the consumer warps (16 up to two tokens, 8 at three and four): stage q goes to warp q % 8,
     * so every use of a stage is then one warp's, in order. With 14 stages a warp could wait for a
     * stage's second fill before its first had landed; that wait's parity names the phase before,
     * which counts as complete, and the warp would read a stage still being filled (session 6's
     * ring flaw, found again in session 23 by reading; the tests had passed by timing). */
    const size_t bars = (2 * AS_MAX_STAGES + 2) * sizeof(uint64_t), rest = xs + bars + pre;
    L->stages = rest < AS_MAX_SMEM ? (int)((AS_MAX_SMEM - rest) / L->stage_bytes) : 0;
    if (L->stages > AS_MAX_STAGES) L->stages = AS_MAX_STAGES;
    L->stages -= L->stages % AS_CWARPS;
    if (L->stages < AS_CWARPS) return 0;
    L->xs_off = L->stages * L->stage_bytes;
    L->kv_a_off = L->xs_off + (int)(x_rows > (size_t)AS_KV_BUF ? x_rows : (size_t)AS_KV_BUF);
    L->bar_off = L->xs_off + (int)xs;
    L->pre_off = L->bar_off + (int)bars;
    *xs_bytes = xs;
    return (size_t)L->pre_off + pre;
}

extern "C" cudaError_t attn_stream_layer(const attn_dims *d, const rope_kv_freq *f,
                                         const attn_stream_args *a, cudaStream_t stream) {
    const bool norm = a->nh != NULL;
    if (norm && (!a->nscratch || !a->ngain || (a->nslots && a->n_slots < 1) ||
                 a->H / 8 > 2 * AS_CWARPS * 32 || ((uintptr_t)a->nh & 15) ||
                 ((uintptr_t)a->nscratch & 15) || ((uintptr_t)a->nslots & 15) ||
                 ((uintptr_t)a->ngain & 15)))
        return cudaErrorInvalidValue;
    if (!attn_stream_supported(d, f, a->T, a->seqs.n_seqs, a->H) || (!norm && !a->x) || !a->qkv_w ||
        !a->o_w || !a->sinks || !a->q || !a->attn || !a->o || !a->bar || !a->counters ||
        ((uintptr_t)a->x & 15) || ((uintptr_t)a->x_lo & 15) || ((uintptr_t)a->qkv_w & 15) ||
        ((uintptr_t)a->o_w & 15) || ((uintptr_t)a->q & 15) || ((uintptr_t)a->attn & 15) ||
        ((uintptr_t)a->part & 15))
        return cudaErrorInvalidValue;
    const int sms = per_device_sm_count();
    as_layout L;
    size_t xs_bytes;
    const size_t smem = as_plan_layout(d, a->T, a->H, sms, 0, &L, &xs_bytes);
    if (!smem || a->part_bytes < attn_stream_workspace_bytes(d, a->T) || !a->part)
        return cudaErrorInvalidValue;
    if (a->router.wt &&
        !attn_stream_router_fits(a->T, a->H, a->router.E, sms, L.stage_bytes, &a->router))
        return cudaErrorInvalidValue;

    as_params P;
    P.a = *a, P.f = *f;
    P.n_heads = d->n_heads, P.n_kv_heads = d->n_kv_heads, P.bs_shift = attn_block_shift(d);
    P.stop_after = g_stop_after;
    void (*kern)(as_params, as_layout) = kernel_for(a->T, a->router.wt != NULL);
    /* Once per device: the shared-memory opt-in, and that one block an SM fits (the cooperative
     * launch would refuse the grid otherwise; the layout is the same for every step of a model). */
    if (!per_device_done(&g_setup_done)) {
        for (int t = 0; t <= ATTN_STREAM_MAX_T; t++) { /* t = 0: one token with the router */
            const void *k = (const void *)(t ? kernel_for(t) : kernel_for(1, true));
            CUDA_TRY(
                cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, AS_MAX_SMEM));
            int per = 0;
            CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k, AS_THREADS, smem));
            if (per < 1) return cudaErrorInvalidConfiguration;
        }
        per_device_mark(&g_setup_done);
    }
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg =
        cooperative_config((unsigned)sms, AS_THREADS, smem, stream, &attr, 1);
    CUDA_TRY(cudaLaunchKernelEx(&cfg, kern, P, L));
    return cudaGetLastError();
}
