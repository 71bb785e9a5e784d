/* The attention block's persistent kernel (attn_stream.h), as a template for the translation
 * units that instantiate it: attn_stream.cu the plain kernel at 1-4 tokens, attn_stream_routed.cu
 * the one-token kernel with the router by columns. Apart because ptxas compiled the plain
 * one-token kernel differently (+6 instructions, other instruction choices in its prologue) with
 * the routed one beside it in the module: apart, each kernel is the one measured, instruction for
 * instruction (sessions 36-37; the O loop is written so that it stays so for both). Device code. */
#pragma once

#include "backend/cuda/attn_stream.h"
#include "backend/cuda/attn_stream_phases.cuh"
#include "backend/cuda/grid_sync.cuh"

typedef void (*as_kernel)(as_params, as_layout, attn_stream_router);

/* ROUTER: the router by columns in O's epilogue (one token; its own instantiation, so that the
 * kernel without it is the code measured before). */
template <int T, bool ROUTER = false>
__global__ void __launch_bounds__(AS_THREADS, 1)
    attn_stream_kernel(const as_params P, const as_layout L, const attn_stream_router R) {
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
    static_assert(!ROUTER || T == 1, "the router by columns is one token's");
    const bool rcols = ROUTER && R.wt && n_rows > 0;
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

    /* Phase 3: O. */
    as_stage_rows(a.attn, T, Q, xs);
    consumers_sync();
    /* ROUTER (T = 1): h + o, its square and g (h + o) of the block's rows too, h and the gain of
     * a row asked for before the row's dot product; then the block's share of the sum of squares
     * and its rows' router sums */
    __shared__ float s_oc[ROUTER ? ATTN_ROUTER_MAX_ROWS : 1],
        s_sq[ROUTER ? ATTN_ROUTER_MAX_ROWS : 1];
    for (int q = n_pairs + (warp - n_pairs % AS_CWARPS + AS_CWARPS) % AS_CWARPS;
         q < n_pairs + n_rows; q += AS_CWARPS) {
        const int s = q % S;
        float hj = 0.0f;
        uint16_t gj = 0;
        if constexpr (ROUTER) {
            const int row = r0 + (q - n_pairs);
            hj = lane == 0 ? __ldcg(R.h + row) : 0.0f;
            gj = lane == 0 ? __ldg(R.gain + row) : (uint16_t)0;
        }
        mbar_wait_or_trap(&full[s], (q / S) & 1);
        float acc[1][T];
        as_rows_dot<T, 1>(ring + (size_t)s * L.stage_bytes, o_row_bytes, Q / 8, xs, acc);
        __syncwarp();
        if constexpr (!ROUTER) {
            if (lane == 0) mbar_arrive(&empty[s]);
            if (lane < T) {
                const int row = r0 + q - n_pairs;
                a.o[(size_t)lane * H + row] =
                    f32_to_bf16_bits(as_pick<T>(acc[0], lane) + pre.o_bias[q - n_pairs]);
            }
        } else if (lane == 0) {
            const int j = q - n_pairs, row = r0 + j;
            mbar_arrive(&empty[s]);
            const uint16_t ob = f32_to_bf16_bits(as_pick<T>(acc[0], 0) + pre.o_bias[j]);
            a.o[row] = ob;
            const float v = hj + bf16_bits_to_f32(ob); /* the loop's norm_add order */
            R.h[row] = v;
            s_oc[j] = v * bf16_bits_to_f32(gj);
            s_sq[j] = v * v;
        }
    }
    if constexpr (ROUTER) {
        if (!rcols) return; /* (n_rows = 0 only in the probes, which do not route) */
        consumers_sync();   /* s_oc, s_sq */
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
}

/* attn_stream_routed.cu: attn_stream_kernel<1, true>. */
as_kernel attn_stream_routed_kernel(void);
