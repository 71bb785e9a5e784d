/* attn_stream.cu's kernel template (one persistent block an SM: attn_stream_phases.cuh's phases in
 * order), in a header so that its form with the routing inside (ROUTE) is compiled in a translation
 * unit of its own (attn_stream_route.cu): the default kernels' code then does not change with it. */
#pragma once

#include "backend/cuda/attn_stream_phases.cuh"
#include "backend/cuda/grid_sync.cuh"

/* ROUTE: the routing inside too (R, attn_stream_route; one token): a kernel of its own, so that the
 * default one's code does not change. */
template <int T, bool ROUTE = false>
__global__ void __launch_bounds__(AS_THREADS, 1)
    attn_stream_kernel(const as_params P, const as_layout L, const attn_stream_route R) {
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
    /* The consumers' loads go out first, before the producer's copies (as_early). */
    as_early<T> early;
    if (warp < AS_CWARPS) as_early_load<T>(P, L, p0, n_pairs, r0, my_rows, early);
    if (threadIdx.x == 0) {
        for (int s = 0; s < S; s++) mbar_init(&full[s], 1), mbar_init(&empty[s], 1);
        mbar_init(o_go, 1);
        mbar_init_fence();
    }
    __syncthreads();
    if (P.stop_after == 3 || P.stop_after == 4) { /* the fixed costs: launch, one grid barrier */
        if (P.stop_after == 4 && warp < AS_CWARPS)
            grid_barrier_with(a.bar, 0, [] { consumers_sync(); });
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
    as_route rt;
    if constexpr (ROUTE) {
        rt = as_route_at(as_smem + L.route_off, (H + G - 1) / G, R.rr.E);
        as_route_preload(a, R, rt, r0, my_rows);
    }
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
    grid_barrier_with(a.bar, 0, [] { consumers_sync(); });
    if (threadIdx.x == 0) mbar_arrive(o_go);
    if (a.nh && b == 0) /* every block has read h: its new rows (written by this block) */
        for (int i = threadIdx.x; i < T * H / 4; i += AS_CWARPS * 32)
            ((float4 *)a.nh)[i] = ((const float4 *)a.nscratch)[i];
    if (P.stop_after == 1) { /* the probe: phase 2's first chunk may still be on its way */
        cp_async_wait<0>();
        return;
    }

    /* Phase 2: attention (its chunk buffers overlay the staged rows). */
    as_attention(P, L, item, as_smem);
    grid_barrier_with(a.bar, 0, [] { consumers_sync(); });
    if (P.stop_after == 2) return;

    /* Phase 3: O. */
    as_stage_rows(a.attn, T, Q, xs);
    consumers_sync();
    for (int q = n_pairs + (warp - n_pairs % AS_CWARPS + AS_CWARPS) % AS_CWARPS;
         q < n_pairs + n_rows; q += AS_CWARPS) {
        const int s = q % S;
        mbar_wait_or_trap(&full[s], (q / S) & 1);
        float acc[1][T];
        as_rows_dot<T, 1>(ring + (size_t)s * L.stage_bytes, o_row_bytes, Q / 8, xs, acc);
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[s]);
        if (lane < T) {
            const int row = r0 + q - n_pairs;
            const uint16_t bits =
                f32_to_bf16_bits(as_pick<T>(acc[0], lane) + pre.o_bias[q - n_pairs]);
            a.o[(size_t)lane * H + row] = bits;
            if constexpr (ROUTE) rt.o[q - n_pairs] = bf16_bits_to_f32(bits);
        }
    }
    if constexpr (ROUTE) {
        consumers_sync(); /* the block's O outputs in rt.o */
        as_route_tail(a, R, rt, r0, my_rows);
    }
}
