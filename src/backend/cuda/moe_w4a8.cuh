/* The MoE small-batch work item with FP8 activations (W4A8): the weights stay MXFP4, the tokens go
 * into the tensor cores as e4m3, and each 32-wide k chunk is one mma.sync m16n8k32 (e4m3 x e4m3 ->
 * fp32) instead of two bf16 m16n8k16. Device code, included by moe_experts.cu. Off by default: the
 * model builds the W4A8 layout only under GPTOSS_MOE_W4A8=1 (weights_gpu.c), and the issue's rule
 * for a default (top-1 agreement with bf16 activations >= 99.5 % on the fixtures) is not yet
 * measured.
 *
 * Why: the bf16 small path is bound by the instructions that turn codes into bf16 (15 a word of 8
 * codes: 11 bit moves and 4 bf16 multiplies by the block scale; ncu at batch 64: ALU pipe 69 %,
 * issue 70 %, bench/NOTES.md). An e2m1 code is an e4m3 code with fewer bits: s e1 e0 m placed at
 * e4m3 bits 7, 4, 3, 2 reads as value x 2^-6 (normal codes: 2^(e-7)(1 + m/2); e = 0: the e4m3
 * subnormal 2^-6 . 4m/8 = 2^-6 . m/2). So the repack (moe_repack.cu, moe_relayout_w4a8) puts a
 * word's 8 codes where two masks and two shifts make the fragment's two registers:
 *
 *     byte j (j = 0..3) of the word:  code j     at bits 7 (s), 4 (e1), 3 (e0), 2 (m)  -> lo
 *                                     code 4 + j at bits 5 (s), 6 (e1), 1 (e0), 0 (m)  -> hi
 *     lo = w & 0x9C9C9C9C;   hi = (w << 2 & 0x8C8C8C8C) | (w >> 2 & 0x10101010)
 *
 * 5 operations a word instead of 15. The block scale 2^(S-127) no longer goes into the weights: each
 * chunk's MMA starts from zero and its 4 results are added to the accumulators times the rows'
 * scales (x 2^6), 4 FFMAs a chunk per 8 tokens. fp32 accumulation of the chunks' sums also keeps
 * the tensor cores' reduced-precision FP8 accumulation to 32 products.
 *
 * The tokens: each block stages its pass's tokens over its K range as e4m3, one scale per token
 * (its largest |x| over that range / 448, so the largest maps to 448), and the epilogue multiplies
 * it back. Down's K splits each quantise their own range, so each partial sum carries its own
 * scale. Rounding x to e4m3 (3 mantissa bits) is the only new error: ~2^-5 relative per value. */
#pragma once

#include "backend/cuda/kv_fp8.cuh"
#include "backend/cuda/moe_small.cuh"

/* One W4A8-layout word (codes of one row, k 8t .. 8t+7 of a chunk) -> the m16n8k32 A registers of
 * that row: lo = codes 0-3 (the fragment's k 4t .. 4t+3), hi = codes 4-7 (k 16+4t ..), each byte
 * the code's value x 2^-6 in e4m3. */
static __device__ __forceinline__ void w4a8_word(uint32_t w, uint32_t &lo, uint32_t &hi) {
    lo = w & 0x9C9C9C9Cu;
    hi = ((w << 2) & 0x8C8C8C8Cu) | ((w >> 2) & 0x10101010u);
}

/* Scale byte j of a scale word as the float 2^(S - 127) . 2^6 (exponent field S + 6; S <= 248). */
static __device__ __forceinline__ float w4a8_scale(uint32_t sw, int j) {
    const uint32_t s = __byte_perm(sw, 0u, 0x4440u | (uint32_t)j);
    return __uint_as_float(s * 0x00800000u + 0x03000000u);
}

/* d = A B for one 16-row x 32-k x 8-token block, e4m3 operands, fp32 result (from zero). */
static __device__ __forceinline__ void mma_e4m3_16832(float d[4], uint32_t a0, uint32_t a1,
                                                      uint32_t a2, uint32_t a3, uint32_t b0,
                                                      uint32_t b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%10,%10,%10,%10};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.0f));
}

/* Staged row stride in bytes for nk k steps: ≡ 64 mod 128, so the 8 lanes of a 16-byte shared load
 * phase (two tokens, 64 bytes each) fall on different banks. */
static __host__ __device__ inline int w4a8_row_bytes(int nk) {
    return nk * 64 + ((nk & 1) ? 0 : 64);
}

/* Shared memory of one W4A8 item: CAP rows of e4m3 tokens, then CAP token scales. */
template <int NTP> static __host__ __device__ inline size_t small_a8_smem_bytes(int nk_max) {
    return (size_t)small_cfg<NTP>::CAP * (w4a8_row_bytes(nk_max) + 4);
}

/* The largest |value| of 8 bf16 values. */
static __device__ __forceinline__ float absmax_bf16x8(uint4 q) {
    const uint32_t u[4] = {q.x, q.y, q.z, q.w};
    float m = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; i++)
        m = fmaxf(m, fmaxf(fabsf(bf16x2_lo(u[i])), fabsf(bf16x2_hi(u[i]))));
    return m;
}

/* small_run for the W4A8 layout (it.qp points into it; the scale words are the bf16 layout's). */
template <int NTP, int MODE>
static __device__ __forceinline__ void small_run_a8(const moe_args &a, small_item<NTP> &it,
                                                    uint8_t *xs) {
    typedef small_cfg<NTP> C;
    const int nk = it.nk, kk0 = it.kk0, cnt = it.cnt, off = it.off;
    const int rowb = w4a8_row_bytes(nk);
    float *tscale = (float *)(xs + (size_t)C::CAP * rowb); /* [CAP] per-token scales */
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    /* This lane's 16 bytes of token g at k step ks: chunk 0's k 8t .. 8t+7, then chunk 1's (the
     * staging puts them side by side) */
    const uint32_t xaddr = smem_u32(xs + g * rowb + 16 * t);
    const int vpr = nk * 8; /* 16-byte pieces (8 values) of a token's K range */

    for (int p0 = 0; p0 < cnt; p0 += C::CAP) {
        const int pc = min(C::CAP, cnt - p0);
        const int ngroups = (pc + 7) >> 3;
        auto row_of = [&](int r) {
            const size_t row = MODE == MODE_GATE_UP ? (size_t)(a.pair_sorted[off + p0 + r] / a.topk)
                                                    : (size_t)(off + p0 + r);
            return (const uint4 *)(a.x + row * a.K + (size_t)kk0 * 64);
        };
        /* 1. each token's largest |x| over the range: a warp a token */
        for (int r = w; r < pc; r += C::WARPS) {
            const uint4 *src = row_of(r);
            float m = 0.0f;
            for (int v = lane; v < vpr; v += 32) m = fmaxf(m, absmax_bf16x8(src[v]));
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
            if (lane == 0) tscale[r] = m;
        }
        __syncthreads();
        /* 2. the tokens as e4m3, x . 448 / max (the scale kept is max / 448); piece v of k step
         * ks = v / 8 is chunk h = (v / 4) % 2, lane slot tt = v % 4: at 16 tt + 8 h */
        for (int idx = threadIdx.x; idx < pc * vpr; idx += C::THREADS) {
            const int r = idx / vpr, v = idx - r * vpr;
            const float m = tscale[r];
            const float inv = m > 0.0f ? 448.0f / m : 0.0f;
            const uint4 q = row_of(r)[v];
            const uint32_t u[4] = {q.x, q.y, q.z, q.w};
            uint32_t o[2];
#pragma unroll
            for (int i = 0; i < 2; i++)
                o[i] = pack_e4m3x4(bf16x2_lo(u[2 * i]) * inv, bf16x2_hi(u[2 * i]) * inv,
                                   bf16x2_lo(u[2 * i + 1]) * inv, bf16x2_hi(u[2 * i + 1]) * inv);
            const int ks = v >> 3, h = (v >> 2) & 1, tt = v & 3;
            *(uint2 *)(xs + r * rowb + ks * 64 + 16 * tt + 8 * h) = make_uint2(o[0], o[1]);
        }
        __syncthreads();

        if (it.active) {
            float acc[NTP][4];
#pragma unroll
            for (int nt = 0; nt < NTP; nt++)
                acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
            if (p0 > 0) load_batch<C::U>(it.qp, it.sp, 0, nk, it.qv, it.sv); /* from L2 */
            auto k_step = [&](const uint4 q, const uint32_t sc, int ks) {
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    uint32_t g_lo, g_hi, e_lo, e_hi; /* rows g and g + 8 */
                    w4a8_word(h ? q.z : q.x, g_lo, g_hi);
                    w4a8_word(h ? q.w : q.y, e_lo, e_hi);
                    const float fg = w4a8_scale(sc, 2 * h), fe = w4a8_scale(sc, 2 * h + 1);
#pragma unroll
                    for (int nt = 0; nt < NTP; nt++) {
                        if (nt > 0 && nt >= ngroups) break; /* block-uniform */
                        /* absent tokens' lanes read their row's leftovers: only their own
                         * column of the product, which the epilogue never stores */
                        const uint4 xv = lds128(xaddr + (uint32_t)(nt * 8 * rowb + ks * 64));
                        float d[4];
                        mma_e4m3_16832(d, g_lo, e_lo, g_hi, e_hi, h ? xv.z : xv.x,
                                       h ? xv.w : xv.y);
                        acc[nt][0] = fmaf(d[0], fg, acc[nt][0]);
                        acc[nt][1] = fmaf(d[1], fg, acc[nt][1]);
                        acc[nt][2] = fmaf(d[2], fe, acc[nt][2]);
                        acc[nt][3] = fmaf(d[3], fe, acc[nt][3]);
                    }
                }
            };
            int kb = 0;
            for (; kb + C::U <= nk; kb += C::U) {
                uint4 qn[C::U];
                uint32_t sn[C::U];
                load_batch<C::U>(it.qp, it.sp, kb + C::U, nk, qn, sn);
#pragma unroll
                for (int u = 0; u < C::U; u++) k_step(it.qv[u], it.sv[u], kb + u);
#pragma unroll
                for (int u = 0; u < C::U; u++) it.qv[u] = qn[u], it.sv[u] = sn[u];
            }
#pragma unroll
            for (int u = 0; u < C::U; u++)
                if (kb + u < nk) k_step(it.qv[u], it.sv[u], kb + u);
#pragma unroll
            for (int nt = 0; nt < NTP; nt++) {
                if (nt >= ngroups) continue;
                /* the tokens' scales (columns 2t, 2t + 1 of this group) */
                const int c0 = min(nt * 8 + 2 * t, C::CAP - 1), c1 = min(c0 + 1, C::CAP - 1);
                const float s0 = tscale[c0] * (1.0f / 448.0f), s1 = tscale[c1] * (1.0f / 448.0f);
                float v[4] = {acc[nt][0] * s0, acc[nt][1] * s1, acc[nt][2] * s0, acc[nt][3] * s1};
                tile_epilogue<MODE>(a, it.e, off, it.rt, p0 + nt * 8, p0 + pc, it.s, v);
            }
        }
        __syncthreads(); /* the next pass overwrites xs and the scales */
    }
}
