/* The row kernels' shared pieces (norm.cu, allreduce.cu): a block-wide sum and the normalised row
 * written as bf16 with its rounding residue. One block per token row, one thread per 8 features. */
#pragma once

#include "backend/cuda/device_util.cuh"

#include <stdint.h>

/* Sum over the block; every thread gets the total (fixed reduction tree: deterministic). */
static __device__ __forceinline__ float block_sum(float v, float *red) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) red[w] = v;
    __syncthreads();
    float s = lane < nw ? red[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

/* The sum of squares of one thread's 8 values, in the order every row kernel uses. */
static __device__ __forceinline__ float sumsq8(const float v[8]) {
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) ss += v[i] * v[i];
    return ss;
}

/* 8 normalised values v · inv · gain as bf16 (hi), and their rounding residues bf16(x − bf16(x))
 * (lo), so that hi + lo carries x to ~16 significant bits (the "split bf16" input of the QKV and
 * router GEMMs, runner_forward.c). gain8: the 8 gains of these features, as bf16 bits (gain_at). */
static __device__ __forceinline__ void norm_split8(const float v[8], float inv, uint4 gain8,
                                                   uint4 &hi, uint4 &lo) {
    float gf[8], x[8], h[8];
    unpack_bf16x8(gain8, gf);
#pragma unroll
    for (int i = 0; i < 8; i++) x[i] = v[i] * inv * gf[i];
    hi.x = pack_bf16x2(x[0], x[1]);
    hi.y = pack_bf16x2(x[2], x[3]);
    hi.z = pack_bf16x2(x[4], x[5]);
    hi.w = pack_bf16x2(x[6], x[7]);
    unpack_bf16x8(hi, h);
    lo.x = pack_bf16x2(x[0] - h[0], x[1] - h[1]);
    lo.y = pack_bf16x2(x[2] - h[2], x[3] - h[3]);
    lo.z = pack_bf16x2(x[4] - h[4], x[5] - h[5]);
    lo.w = pack_bf16x2(x[6] - h[6], x[7] - h[7]);
}

/* v's 8 values into dst (16-byte aligned) as two float4 stores. */
static __device__ __forceinline__ void store8_f32(const float v[8], float *dst) {
    float4 *d = (float4 *)dst;
    d[0] = make_float4(v[0], v[1], v[2], v[3]);
    d[1] = make_float4(v[4], v[5], v[6], v[7]);
}

/* A split-bf16 group (norm_split8's hi and lo, or a row of x and x_lo) summed in fp32 element by
 * element, as gemv_x8 sums them, into dst (16-byte aligned): the fp32 input the GEMV-class kernels
 * stage in shared memory. */
static __device__ __forceinline__ void store_split8_f32(uint4 hi, uint4 lo, float *dst) {
    float f[8], g[8];
    unpack_bf16x8(hi, f);
    unpack_bf16x8(lo, g);
#pragma unroll
    for (int e = 0; e < 8; e++) f[e] += g[e];
    store8_f32(f, dst);
}

/* The gains of 8-feature group c (zeros when the group is past the row). The row kernels load them
 * first, before their PDL wait (model memory, pdl.cuh): read after the row's sum, as they were, the
 * gains were a DRAM round trip on the kernel's critical path (they leave L2 between steps), after
 * the row's own reads and the block's reduction. */
static __device__ __forceinline__ uint4 gain_at(const uint16_t *gain, int c, bool active) {
    return active && gain ? __ldg((const uint4 *)(gain + 8 * c)) : make_uint4(0, 0, 0, 0);
}

static __device__ __forceinline__ float rms_inv(float ss, int H, float eps) {
    return 1.0f / sqrtf(ss / (float)H + eps);
}

/* Normalises v (this thread's 8 values, already final) and writes them as bf16; with ylo also the
 * rounding residue (norm_split8). gain8: gain_at's. */
static __device__ __forceinline__ void write_norm(const float v[8], bool active, int H, uint4 gain8,
                                                  float eps, uint16_t *yrow, uint16_t *ylorow,
                                                  int c, float *red) {
    const float ss = block_sum(active ? sumsq8(v) : 0.0f, red);
    if (!active) return;
    uint4 hi, lo;
    norm_split8(v, rms_inv(ss, H, eps), gain8, hi, lo);
    *(uint4 *)(yrow + 8 * c) = hi;
    if (ylorow) *(uint4 *)(ylorow + 8 * c) = lo;
}

/* The residual row of norm_add_kernel (norm.cu) for the 8 features of group c: h + (Σ slots in
 * order 0, 1, … + delta), each term added in that kernel's order. slots: [n_slots][H] of this row
 * (may be NULL), delta: this row (may be NULL). CG: every row read through L2 (ld.global.cg): rows
 * that other blocks of the same kernel wrote (step_kernel.cu's layers read h, the slots and o at
 * the same addresses each layer, so an L1 line of an earlier layer's read could be stale). */
template <bool CG = false>
static __device__ __forceinline__ void residual8(const float *hrow, const float *srow, int n_slots,
                                                 const uint16_t *drow, int H, int c, float v[8]) {
    auto ld4 = [](const float *p) { return CG ? __ldcg((const float4 *)p) : *(const float4 *)p; };
    const float4 h0 = ld4(hrow + 8 * c), h1 = ld4(hrow + 8 * c + 4);
    float d[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (srow)
        for (int i = 0; i < n_slots; i++) {
            const float4 s0 = ld4(srow + (size_t)i * H + 8 * c),
                         s1 = ld4(srow + (size_t)i * H + 8 * c + 4);
            d[0] += s0.x, d[1] += s0.y, d[2] += s0.z, d[3] += s0.w;
            d[4] += s1.x, d[5] += s1.y, d[6] += s1.z, d[7] += s1.w;
        }
    if (drow) {
        float db[8];
        const uint4 *dp = (const uint4 *)(drow + 8 * c);
        unpack_bf16x8(CG ? __ldcg(dp) : *dp, db);
#pragma unroll
        for (int i = 0; i < 8; i++) d[i] += db[i];
    }
    v[0] = h0.x + d[0], v[1] = h0.y + d[1], v[2] = h0.z + d[2], v[3] = h0.w + d[3];
    v[4] = h1.x + d[4], v[5] = h1.y + d[5], v[6] = h1.z + d[6], v[7] = h1.w + d[7];
}

/* norm_add_kernel's row (residual8, then the block_sum of a block of one thread per group), replayed
 * by the first `nthreads` threads of a block (a multiple of 32; sync: their block-level barrier):
 * thread t plays groups c = t + r · nthreads, r < R (every warp of it then covers exactly one warp of
 * the norm kernel's block, so the two-level shuffle tree is the same and so are the bits). Needs
 * R · nthreads ≥ H / 8 and H / 8 ≤ 1024. Returns the row's sum of squares (every taking part
 * thread); v[r]: group c's residual values (zeros past H / 8). Every one of the threads calls it.
 * CG: residual8's. */
template <int R, bool CG = false, typename Sync>
static __device__ __forceinline__ float
norm_replay_row_with(unsigned nthreads, Sync sync, const float *hrow, const float *srow,
                     int n_slots, const uint16_t *drow, int H, float v[R][8], float *red) {
    const int C = H >> 3, nvw = (C + 31) >> 5, lane = threadIdx.x & 31, w = threadIdx.x >> 5,
              nw = nthreads >> 5;
    float part[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int c = threadIdx.x + r * nthreads;
#pragma unroll
        for (int i = 0; i < 8; i++) v[r][i] = 0.0f;
        float ss = 0.0f;
        if (c < C) {
            residual8<CG>(hrow, srow, n_slots, drow, H, c, v[r]);
            ss = sumsq8(v[r]);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        part[r] = ss;
    }
    if (lane == 0)
#pragma unroll
        for (int r = 0; r < R; r++)
            if (w + r * nw < nvw) red[w + r * nw] = part[r];
    sync();
    float tot = lane < nvw ? red[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) tot += __shfl_xor_sync(0xffffffffu, tot, o);
    sync(); /* red may be reused at once */
    return tot;
}

/* norm_replay_row_with by the whole block. */
template <int R>
static __device__ __forceinline__ float norm_replay_row(const float *hrow, const float *srow,
                                                        int n_slots, const uint16_t *drow, int H,
                                                        float v[R][8], float *red) {
    return norm_replay_row_with<R>(
        blockDim.x, [] { __syncthreads(); }, hrow, srow, n_slots, drow, H, v, red);
}
