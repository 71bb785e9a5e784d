/* The MoE small-batch (decode) work item, as device functions: moe_experts.cu's moe_small_kernel runs
 * one item per block; moe_fused.cu's persistent decode kernel runs several per block, and issues the
 * first weight loads of its down-projection item before the grid barrier that makes the item's
 * input ready (moe_fused.cu says why). One copy of the code, so both compute the same bits.
 *
 * An item is (touched expert i, row block rb of WARPS 16-row tiles, K split s), numbered
 * b = (i · n_rb + rb) · S + s. The block stages the expert's tokens (≤ 8·NTP per pass) in shared
 * memory and each warp streams one 16-row tile's codes over its K range: only the touched experts'
 * bytes are read, once (a second pass for an expert with more tokens re-reads them from L2). */
#pragma once

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/moe_dequant.cuh"
#include "backend/cuda/moe_kernel_common.cuh"
#include "backend/cuda/moe_tail_plan.h"

/* The two MMAs of one 32-wide k chunk for one 16-row tile: rows g (ag) and g+8 (a8), B = 16 bytes of
 * token g's activations at k 8t…8t+7. */
static __device__ __forceinline__ void mma_chunk(float acc[4], const uint32_t ag[4],
                                                 const uint32_t a8[4], uint4 xv) {
    mma_bf16_16816(acc, ag[0], a8[0], ag[1], a8[1], xv.x, xv.y);
    mma_bf16_16816(acc, ag[2], a8[2], ag[3], a8[3], xv.z, xv.w);
}

/* Codes and scale words of k steps kb … kb+U−1 of one warp's tile (zeros past nk). BOUNDED false:
 * the caller knows the batch lies inside the item, so no predicate and no zeroing (small_run's
 * steady loop). */
template <int U, bool BOUNDED = true>
static __device__ __forceinline__ void load_batch(const uint4 *qp, const uint32_t *sp, int kb,
                                                  int nk, uint4 qv[U], uint32_t sv[U]) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        if (!BOUNDED || kb + u < nk) {
            qv[u] = ldg_stream16(qp + (size_t)(kb + u) * 32);
            sv[u] = __ldg(sp + (size_t)(kb + u) * 8);
        } else {
            qv[u] = make_uint4(0, 0, 0, 0);
            sv[u] = 0;
        }
    }
}

/* Measured slower on the H200 (bench/NOTES.md): fewer registers for more resident warps (3–4 k
 * steps per batch), and a block's warps splitting one tile's k steps. */
template <int NTP> struct small_cfg {
    static constexpr int CAP = 8 * NTP;            /* tokens staged per pass */
    static constexpr int WARPS = NTP == 1 ? 4 : 8; /* 16-row tiles per block */
    static constexpr int THREADS = WARPS * 32;
    /* k steps per batch: U–2U × 16 B in flight (two batches; U = 7 spills at 4 blocks) */
    static constexpr int U = 6;
    static constexpr int MIN_BLOCKS = NTP == 1 ? 4 : 2; /* resident blocks an SM */
};

/* Shared memory one item stages: CAP token rows of nk_max·64 values, row stride ≡ 64 B mod 128. */
template <int NTP> static __host__ __device__ inline size_t small_smem_bytes(int nk_max) {
    return (size_t)small_cfg<NTP>::CAP * (nk_max * 64 + 32) * 2;
}

/* One warp's view of an item, and its first batch of weight loads (in flight from small_begin). With
 * small_prefetch, k steps [pre_lo, pre_lo + pre_n) of it wait in shared memory instead (pre: this
 * lane's copies, at pre_base). */
template <int NTP> struct small_item {
    int e, cnt, off, kk0, nk, rt, s;
    bool active;
    const uint4 *qp;
    const uint32_t *sp;
    uint4 qv[small_cfg<NTP>::U];
    uint32_t sv[small_cfg<NTP>::U];
    uint32_t pre_base;
    int pre_lo, pre_n;
};

/* Shared memory small_prefetch needs per warp for n k steps: 16 bytes of codes and a 4-byte scale
 * word per lane and step (each lane reads back only what it copied: no barrier is needed). */
static __host__ __device__ inline size_t small_prefetch_warp_bytes(int n) {
    return (size_t)n * 32 * 20;
}

/* Issues cp.async copies of k steps [lo, lo + n) of the item begun by small_begin into this warp's
 * area at warp_base (a shared-window address, small_prefetch_warp_bytes(n) bytes): the weights of an
 * item whose input is not ready yet, brought on chip while the grid waits (moe_fused.cu). */
template <int NTP>
static __device__ __forceinline__ void small_prefetch(small_item<NTP> &it, uint32_t warp_base,
                                                      int lo, int n) {
    const int lane = threadIdx.x & 31;
    it.pre_lo = lo, it.pre_n = it.active ? max(0, min(n, it.nk - lo)) : 0;
    it.pre_base = warp_base;
    for (int j = 0; j < it.pre_n; j++) {
        cp_async16(warp_base + (uint32_t)((j * 32 + lane) * 16), it.qp + (size_t)(lo + j) * 32, 16);
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(
                         warp_base + (uint32_t)(n * 512 + (j * 32 + lane) * 4)),
                     "l"(it.sp + (size_t)(lo + j) * 8)
                     : "memory");
    }
    cp_async_commit();
}

/* load_batch for an item that may have k steps waiting in shared memory (PRE). */
template <bool PRE, int NTP, int U>
static __device__ __forceinline__ void load_batch_item(const small_item<NTP> &it, int kb, int nk,
                                                       uint4 qv[U], uint32_t sv[U]) {
    if (!PRE) {
        load_batch<U>(it.qp, it.sp, kb, nk, qv, sv);
        return;
    }
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int j = kb + u - it.pre_lo;
        if (kb + u < nk && j >= 0 && j < it.pre_n) {
            qv[u] = lds128(it.pre_base + (uint32_t)((j * 32 + lane) * 16));
            asm volatile("ld.shared.u32 %0, [%1];"
                         : "=r"(sv[u])
                         : "r"(it.pre_base + (uint32_t)(it.pre_n * 512 + (j * 32 + lane) * 4)));
        } else if (kb + u < nk) {
            qv[u] = ldg_stream16(it.qp + (size_t)(kb + u) * 32);
            sv[u] = __ldg(it.sp + (size_t)(kb + u) * 8);
        } else {
            qv[u] = make_uint4(0, 0, 0, 0);
            sv[u] = 0;
        }
    }
}

/* Decodes item b and issues its first batch of codes: it depends only on the item (model memory), so
 * its loads fly while the tokens are staged — or, in the fused kernel, while the grid waits for the
 * tokens to exist. False (for the whole block) when b is past the touched experts. Measured and
 * removed (session 40, H100, 120b batch 1): a one-token form that loaded the touched count and the
 * expert together, took count 1 and offset i without their loads and asked for the epilogue's
 * values at the start: gate_up 16.10 -> 15.89 µs, down 9.71 -> 10.26, 120b 1.004 (spread 0.9 %),
 * 20b 1.002. The L2 chain before the weights is not what these launches wait for. */
/* Item (touched expert i, row block rb), split it.s of nsplit over K: the expert, its tokens and
 * this warp's tile, and the first batch of codes (small_begin and small_begin_tail). */
template <int NTP>
static __device__ __forceinline__ void small_item_at(const moe_args &a, int i, int rb, int nsplit,
                                                     small_item<NTP> &it) {
    typedef small_cfg<NTP> C;
    it.e = a.touched[i], it.cnt = a.count[it.e], it.off = a.offset[it.e];
    it.kk0 = (int)((long)it.s * a.KK / nsplit);
    it.nk = (int)((long)(it.s + 1) * a.KK / nsplit) - it.kk0;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2;
    it.rt = rb * C::WARPS + w;
    it.active = it.rt < a.RT;
    const size_t tile_kk = ((size_t)it.e * a.RT + (it.active ? it.rt : 0)) * a.KK + it.kk0;
    it.qp = a.wq + tile_kk * 32 + lane;
    it.sp = a.wsc + tile_kk * 8 + g;
    it.pre_base = 0, it.pre_lo = 0, it.pre_n = 0;
    load_batch<C::U>(it.qp, it.sp, 0, it.active ? it.nk : 0, it.qv, it.sv);
}

template <int NTP>
static __device__ __forceinline__ bool small_begin(const moe_args &a, int b, small_item<NTP> &it) {
    it.s = b % a.S;
    b /= a.S;
    const int rb = b % a.n_rb, i = b / a.n_rb;
    if (i >= *a.n_touched) return false;
    small_item_at<NTP>(a, i, rb, a.S, it);
    return true;
}

/* small_begin for the tail-split trial (moe_plan.tail_split, down only): of the n = touched ·
 * n_rb items, the first W = ⌊n / slots⌋ · slots (whole waves of resident blocks) run whole, and
 * the R = n − W of the last partial wave are split over K f = min(S, ⌊slots / R⌋) ways, so that the
 * last wave's blocks are f times shorter instead of leaving most SMs idle while they finish
 * (moe_tail_plan.h, checked on the host by tests/test_moe_tail_plan.c).
 * Why: a down block at 8 tokens streams ~98 KB in ~18 µs (H100), and 28 touched experts make 2.4
 * waves of them (bench/NOTES.md, session 41); splitting every item instead (S = 2 for all) doubles
 * each block's fixed start (~3-4 µs) and measured +0.2 % (session 24). Block b ≥ W + R·f has
 * nothing to do (the grid is sized for the most touched experts). *nsplit: the item's splits
 * (1 for a whole item), for the slots past it that small_zero_rest clears. */
template <int NTP>
static __device__ __forceinline__ bool small_begin_tail(const moe_args &a, int b,
                                                        small_item<NTP> &it, int &nsplit) {
    int item;
    if (!mtp_block(b, *a.n_touched * a.n_rb, a.slots, a.S, &item, &it.s, &nsplit)) return false;
    small_item_at<NTP>(a, item / a.n_rb, item % a.n_rb, nsplit, it);
    return true;
}

/* The slots [nsplit, S) of this warp's 16 rows for every pair of the item: zero, so that the
 * consumer's sum over S slots holds only the splits that ran (small_begin_tail). Called by the
 * item's last split. */
template <int NTP>
static __device__ __forceinline__ void small_zero_rest(const moe_args &a, const small_item<NTP> &it,
                                                       int nsplit) {
    if (!it.active || nsplit >= a.S) return;
    const int lane = threadIdx.x & 31, per = 16 * (a.S - nsplit);
    for (int idx = lane; idx < it.cnt * per; idx += 32) {
        const int n = idx / per, rest = idx - n * per, s = nsplit + rest / 16;
        const int pair = a.pair_sorted[it.off + n];
        const int tok = pair / a.topk, j = pair - tok * a.topk;
        a.y[((size_t)tok * a.topk * a.S + (size_t)j * a.S + s) * a.R + it.rt * 16 + (rest & 15)] =
            0.0f;
    }
}

/* Runs the item begun by small_begin: stage each pass's tokens into xs, stream the rest of the codes,
 * multiply, and write the epilogue (SwiGLU activations or weighted output rows). Every thread of the
 * block calls it (it holds block barriers). COHERENT: the tokens were written by other blocks of the
 * same kernel (the fused kernel's down projection reads gate_up's activations), so they are read
 * through L2 (ld.global.cg), never from a stale L1 line. */
template <int NTP, int MODE, bool FOLDED, bool COHERENT, bool PRE = false>
static __device__ __forceinline__ void small_run(const moe_args &a, small_item<NTP> &it,
                                                 uint16_t *xs) {
    typedef small_cfg<NTP> C;
    const int nk = it.nk, kk0 = it.kk0, cnt = it.cnt, off = it.off;
    const int lds =
        nk * 64 + 32; /* row stride ≡ 64 bytes mod 128: rows g, g+1 on different banks */
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    /* This lane's token fragment (token g, k 8t …) in shared memory, as a 32-bit shared address. */
    const uint32_t xaddr = smem_u32(xs + g * lds + 8 * t);

    for (int p0 = 0; p0 < cnt; p0 += C::CAP) {
        const int pc = min(C::CAP, cnt - p0);
        /* 8-token groups this pass really has: at batch 256 an expert averages 8 tokens, so with
         * 16-token passes about half the blocks would multiply a group of zeros (and stage it). */
        const int ngroups = (pc + 7) >> 3;
        /* Stage the pass's pc real tokens for k in [64·kk0, 64·kk1); the lanes of absent tokens
         * (g ≥ pc in the last group) read an unstaged row into columns nobody stores. At batch 8
         * an expert averages 1–2 tokens, so padding to 8 rows wrote ~4× the shared memory the
         * tokens need, through the same issue slots as the dequantisation (120b decode +7.5 % at
         * batch 8, +6.5 % at 64, +2.3 % at 1: bench/NOTES.md). */
        const int vpr = nk * 8;
        if (!PRE) {
            /* A warp a row: the row's address once, and copies that hold no registers (cp.async
             * through L2, so also coherent), instead of a division and a routing read per 16
             * bytes. ncu at T = 256 (session 15): the staging's barrier and its loads were ~11 %
             * of gate_up's stall samples, and at ~16 tokens it moves half as many bytes as the
             * block's weights (every row block of an expert stages the same tokens). Measured:
             * 120b decode +6.6 % at batch 256, +4.1 % at 64 (bench/NOTES.md). The fused kernel
             * (PRE, off by default) keeps the older form below, a thread per 16 bytes: its
             * prefetched weights share the cp.async groups. */
            const int lane = threadIdx.x & 31;
            for (int r = threadIdx.x >> 5; r < pc; r += C::WARPS) {
                const size_t row = pair_row<MODE>(a, off + p0 + r);
                const uint4 *src = (const uint4 *)(a.x + row * a.K + (size_t)kk0 * 64);
                const uint32_t dst = smem_u32(xs + r * lds);
                for (int v = lane; v < vpr; v += 32) cp_async16(dst + v * 16, src + v, 16);
            }
            cp_async_commit();
            cp_async_wait<0>();
        } else {
            for (int idx = threadIdx.x; idx < pc * vpr; idx += C::THREADS) {
                const int r = idx / vpr, v = idx - r * vpr;
                const size_t row = pair_row<MODE>(a, off + p0 + r);
                const uint4 *src = (const uint4 *)(a.x + row * a.K + (size_t)kk0 * 64 + v * 8);
                *(uint4 *)(xs + r * lds + v * 8) = COHERENT ? __ldcg(src) : *src;
            }
        }
        __syncthreads();

        if (it.active) {
            float acc[NTP][4];
#pragma unroll
            for (int nt = 0; nt < NTP; nt++)
                acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
            /* Two register batches: the loads of batch kb + U are issued before batch kb is
             * dequantised and multiplied, so a warp always has up to 2U 16-byte loads in flight
             * instead of draining to zero once per batch (a K range of 45 steps was ~6 full memory
             * round trips in a row). */
            if (PRE && p0 == 0) cp_async_wait<0>(); /* this lane's own copies (small_prefetch) */
            if (p0 > 0)                             /* another pass: from L2 */
                load_batch_item<PRE, NTP, C::U>(it, 0, nk, it.qv, it.sv);
            /* One k step: dequantise its 4 words and multiply them with the staged tokens. The
             * token fragments are read through a 32-bit shared address computed once (with a
             * generic pointer the compiler rebuilt the address every step, ~6 instructions of ~87). */
            auto k_step = [&](const uint4 q, const uint32_t sc, int ks) {
#pragma unroll
                for (int h = 0; h < 2; h++) { /* the two 32-wide chunks of this k step */
                    uint32_t ag[4], a8[4];
                    dequant_word_t<FOLDED>(h ? q.z : q.x, sc, 2 * h, ag);
                    dequant_word_t<FOLDED>(h ? q.w : q.y, sc, 2 * h + 1, a8);
#pragma unroll
                    for (int nt = 0; nt < NTP; nt++) {
                        if (nt > 0 && nt >= ngroups) break; /* block-uniform */
                        /* Lanes of absent tokens (row g ≥ pc) read whatever their row holds (an
                         * earlier pass's token, or nothing yet): it reaches only their own column
                         * of the product (C[i][g] = Σ_k A[i][k]·B[k][g]), which the epilogue never
                         * stores. Zeroing it instead cost two register moves per load on the busy
                         * ALU pipe (120b decode +1–2 % at batch 1–8 without them, H200). */
                        const uint4 xv =
                            lds128(xaddr + (uint32_t)(nt * 16 * lds + ks * 128 + h * 64));
                        mma_chunk(acc[nt], ag, a8, xv);
                    }
                }
            };
            /* Full batches without a per-step bound check, then the tail batch (its loads were
             * issued by the last full batch, or before staging when nk < U). */
            int kb = 0;
            /* While the next batch lies wholly inside the item, it is loaded without a bound, in
             * a loop unrolled by two. SASS: the bounded loop below spends 24 register copies (the
             * loaded batch moved into the other set) and 15 zeroings (a bounded load must leave a
             * defined value in the register it may skip) in each batch of six steps; this one has
             * neither: 464 -> 430 instructions a batch at one token group, 525 -> 473 at two,
             * registers <= 120, no spills. Only the batch that crosses the item's end is bounded
             * (the loop below, at most once outside PRE). Measured (session 28, H100, three
             * rounds): 120b decode +1.5 / +0.4 / +0.1 / +0.2 % at batch 1 / 8 / 64 / 256, 20b +1.3 /
             * -0.3 % at 1 / 64; the same loads not unrolled lost up to 0.9 %, and a form reading
             * past the item's end (session 27) lost 1.5-3.4 %: bench/NOTES.md. */
            if constexpr (!PRE) {
#pragma unroll 2
                for (; kb + 2 * C::U <= nk; kb += C::U) {
                    uint4 qn[C::U];
                    uint32_t sn[C::U];
                    load_batch<C::U, false>(it.qp, it.sp, kb + C::U, nk, qn, sn);
#pragma unroll
                    for (int u = 0; u < C::U; u++) k_step(it.qv[u], it.sv[u], kb + u);
#pragma unroll
                    for (int u = 0; u < C::U; u++) it.qv[u] = qn[u], it.sv[u] = sn[u];
                }
            }
            for (; kb + C::U <= nk; kb += C::U) {
                uint4 qn[C::U];
                uint32_t sn[C::U];
                load_batch_item<PRE, NTP, C::U>(it, kb + C::U, nk, qn, sn);
#pragma unroll
                for (int u = 0; u < C::U; u++) k_step(it.qv[u], it.sv[u], kb + u);
#pragma unroll
                for (int u = 0; u < C::U; u++) it.qv[u] = qn[u], it.sv[u] = sn[u];
            }
#pragma unroll
            for (int u = 0; u < C::U; u++)
                if (kb + u < nk) k_step(it.qv[u], it.sv[u], kb + u);
#pragma unroll
            for (int nt = 0; nt < NTP; nt++)
                if (nt < ngroups)
                    tile_epilogue<MODE>(a, it.e, off, it.rt, p0 + nt * 8, p0 + pc, it.s, acc[nt]);
        }
        __syncthreads(); /* the next pass overwrites xs */
    }
}
