/* Dense bf16 products of 1-16 token rows on the tensor cores (gemv_mma.h): the kernel and its
 * pieces, device code; gemv_mma.cu launches the plain form, gemv_mma_qkv.cu the fused QKV forms.
 *
 * Block = one 16-row tile of W, GM_WARPS warps. K is cut into 32-wide chunks; warp w takes chunks
 * w, w + GM_WARPS, …, GM_U of them a batch (every load of a batch issued before its MMAs). For one
 * chunk, lane (g, t) loads 16 bytes — k 8t … 8t+7 of the chunk — of W's rows g and g + 8 and of
 * each token tile's token g (and its lo half). mma.sync m16n8k16 wants lane (g, t) to hold the
 * logical k 2t, 2t+1, 2t+8, 2t+9 of a 16-wide k block; any permutation of k gives the same dot
 * product as long as A and B use the same one, so the chunk's first MMA takes the loaded words .x,
 * .y (physical k 8t … 8t+3) and the second .z, .w (8t+4 … 8t+7): all 32 k of the chunk, every byte
 * loaded used once, 16-byte loads only. */
#pragma once

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kv_fp8.cuh"
#include "backend/cuda/norm_row.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/rope_kv.h"
#include "backend/cuda/rope_kv_row.cuh"

#include <string.h>

/* The default shape: GM_WARPS warps a block, GM_U chunks a batch. The kernel takes both as
 * template arguments so that the tuning bench (gemv_mma_tune) can time other shapes. */
enum { GM_WARPS = 8, GM_U = 4 };

struct gm_args {
    const uint16_t *x, *x_lo, *W, *bias;
    void *y;
    int M, K, N;
    int out_f32;
};

/* The fused QKV epilogue's operands (gemv_mma_rope): rope_kv.h's, for head_dim 64. */
struct gm_rope {
    const int32_t *positions, *slots;
    uint16_t *q_out;
    uint8_t *k_cache, *v_cache; /* bf16 or e4m3 elements */
    const float *kv_scales;
    int n_heads, n_kv_heads, bs_shift;
    rope_kv_freq f;
};

/* The attention norm fused in front (gemv_mma_norm_rope): the tokens' rows are RMSNorm(h + Σ
 * slots) · gain, made by every block from h and the previous layer's MoE slots, as norm_add does. */
struct gm_norm {
    float *h; /* [M][K] residual rows: read by every block, rewritten by the last one */
    const float *slots;
    const uint16_t *gain;
    float eps;
    int n_slots;
    int *counter;
};

/* Where the tokens' rows come from: global memory (x, x_lo), or made in shared memory by the
 * block (the norm fused in front: GM_IN_NORM). */
enum { GM_IN_GLOBAL = 0, GM_IN_NORM = 1 };

/* How a block's results leave it: as rows of y (plain), or rotated into q and the KV cache
 * (RoPE fused; the cache bf16 or e4m3). */
enum { GM_PLAIN = 0, GM_ROPE_BF16 = 1, GM_ROPE_FP8 = 2 };

/* W's row for row r (0-15) of tile `tile`. Plain: rows 16·tile + r. With RoPE fused a tile is a
 * quarter j of head h (64 rows): rows 8j … 8j+7 and 32+8j … 32+8j+7, so that the rotation's pairs
 * (i, i + 32) meet in one block; the 4 tiles of a head cover its 64 rows. */
template <int EPI> static __device__ __forceinline__ int gm_row(int tile, int r) {
    if (EPI == GM_PLAIN) return tile * 16 + r;
    return (tile >> 2) * 64 + 8 * (tile & 3) + (r & 7) + (r >> 3) * 32;
}

/* The two MMAs of one chunk: rows g (wg) and g + 8 (w8), token words xv (see the file's comment). */
static __device__ __forceinline__ void gm_chunk(float acc[4], uint4 wg, uint4 w8, uint4 xv) {
    mma_bf16_16816(acc, wg.x, w8.x, wg.y, w8.y, xv.x, xv.y);
    mma_bf16_16816(acc, wg.z, w8.z, wg.w, w8.w, xv.z, xv.w);
}

/* The weight words of the batch of chunks c0, c0 + W, … (zeros past the C chunks). */
template <int U, int W>
static __device__ __forceinline__ void gm_load_w(uint4 (&aw)[U][2], const uint4 *wg,
                                                 const uint4 *w8, int c0, int C) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int c = c0 + W * u;
        aw[u][0] = c < C ? ldg_stream16(wg + 4 * c) : make_uint4(0, 0, 0, 0);
        aw[u][1] = c < C ? ldg_stream16(w8 + 4 * c) : make_uint4(0, 0, 0, 0);
    }
}

/* RoPE fused: the 8·NT·8 (token, pair) items of the block's tile after the warps' sums meet in
 * red. Item (token m, pair p) is x[i] and x[i + 32] of head h at i = 8j + p (gm_row), plus their
 * biases, rotated at the token's position (q and k heads) and stored as rope_kv.cu stores them:
 * q to q_out, k and v to the cache at the token's slot (none when the slot is < 0), bf16 or e4m3
 * of x · 1/scale. The same fp32 operations on the same values as gemv_mma + rope_kv_launch_f32
 * (rope_kv_row.cuh), so the same bits. pos: the token's position (loaded before the k loop). */
template <int NT, int EPI, int W>
static __device__ __forceinline__ void gm_rope_out(const gm_args &a, const gm_rope &r,
                                                   const float (&red)[W][32][4 * NT], int tile,
                                                   int pos) {
    const int n = threadIdx.x >> 6, tk = (threadIdx.x >> 3) & 7, p = threadIdx.x & 7;
    const int m = 8 * n + tk;
    const int l1 = mma_c_lane(p, tk), j1 = 4 * n + mma_c_reg(p, tk);
    const int l2 = mma_c_lane(p + 8, tk), j2 = 4 * n + mma_c_reg(p + 8, tk);
    float x1 = 0.f, x2 = 0.f;
#pragma unroll
    for (int w = 0; w < W; w++) x1 += red[w][l1][j1];
#pragma unroll
    for (int w = 0; w < W; w++) x2 += red[w][l2][j2];
    const int h = tile >> 2, i = 8 * (tile & 3) + p, col = h * 64 + i;
    if (a.bias) {
        x1 += bf16_bits_to_f32(a.bias[col]);
        x2 += bf16_bits_to_f32(a.bias[col + 32]);
    }
    if (m >= a.M) return;
    if (h < r.n_heads + r.n_kv_heads) { /* q and k heads rotate; v heads are stored as they are */
        float c, s;
        rope_cos_sin_at(pos, r.f.inv_freq[i], r.f.concentration, &c, &s);
        rope_rotate(x1, x2, c, s, &x1, &x2);
    }
    if (h < r.n_heads) {
        uint16_t *q = r.q_out + ((size_t)m * (size_t)r.n_heads + (size_t)h) * 64;
        q[i] = f32_to_bf16_bits(x1);
        q[i + 32] = f32_to_bf16_bits(x2);
        return;
    }
    const int slot = r.slots[m];
    if (slot < 0) return;
    const bool is_k = h < r.n_heads + r.n_kv_heads;
    const int kv = h - r.n_heads - (is_k ? 0 : r.n_kv_heads);
    const size_t at = kv_cache_offset(slot, kv, r.n_kv_heads, 64, r.bs_shift) + (size_t)i;
    uint8_t *cache = is_k ? r.k_cache : r.v_cache;
    if (EPI == GM_ROPE_FP8) {
        const float inv = r.kv_scales[(is_k ? 2 : 3) * r.n_kv_heads + kv];
        cache[at] = (uint8_t)pack_e4m3x2(x1 * inv, 0.f);
        cache[at + 32] = (uint8_t)pack_e4m3x2(x2 * inv, 0.f);
    } else {
        uint16_t *c16 = (uint16_t *)cache;
        c16[at] = f32_to_bf16_bits(x1);
        c16[at + 32] = f32_to_bf16_bits(x2);
    }
}

/* Plain: the tile's 16 × 8·NT sums, warp 0's + warp 1's + …: item (tile n, row, token) of the
 * 128 · NT reads that C element of every warp (mma_c_lane, mma_c_reg), adds the bias and writes. */
template <int NT, int W>
static __device__ __forceinline__ void gm_plain_out(const gm_args &a,
                                                    const float (&red)[W][32][4 * NT], int tile) {
    for (int idx = threadIdx.x; idx < 128 * NT; idx += W * 32) {
        const int n = idx >> 7, row = (idx >> 3) & 15, tk = idx & 7;
        const int ln = mma_c_lane(row, tk), j = 4 * n + mma_c_reg(row, tk);
        const int m = 8 * n + tk, col = tile * 16 + row;
        float s = 0.f;
#pragma unroll
        for (int w = 0; w < W; w++) s += red[w][ln][j];
        if (a.bias) s += bf16_bits_to_f32(a.bias[col]);
        if (m < a.M) {
            if (a.out_f32)
                ((float *)a.y)[(size_t)m * a.N + col] = s;
            else
                ((uint16_t *)a.y)[(size_t)m * a.N + col] = f32_to_bf16_bits(s);
        }
    }
}

/* GM_IN_NORM: the M token rows RMSNorm(h + Σ slots) · gain as bf16 hi and lo (norm_split8) into
 * xh, xl ([M][K] each, shared memory), bit for bit what norm_add_rmsnorm_split writes to y and
 * y_lo: norm_replay_row plays that kernel's threads c = 0 … K/8 − 1 (this block's threads t and
 * t + 256 each cover one of its warps), so the reduction tree and the bits are the same. g8: the
 * gains of groups t and t + 256 (gain_at, read before the PDL wait). */
static __device__ __forceinline__ void
gm_norm_tokens(const gm_norm &nm, int M, int K, const uint4 (&g8)[2], uint16_t *xh, uint16_t *xl) {
    __shared__ float nred[32];
    const int C = K >> 3;
    for (int m = 0; m < M; m++) {
        float v[2][8];
        const float ss =
            norm_replay_row<2>(nm.h + (size_t)m * K, nm.slots + (size_t)m * nm.n_slots * K,
                               nm.n_slots, NULL, K, v, nred);
        const float inv = rms_inv(ss, K, nm.eps);
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int c = threadIdx.x + r * blockDim.x;
            if (c >= C) continue;
            uint4 hi, lo;
            norm_split8(v[r], inv, g8[r], hi, lo);
            *(uint4 *)(xh + (size_t)m * K + 8 * c) = hi;
            *(uint4 *)(xl + (size_t)m * K + 8 * c) = lo;
        }
    }
}

/* GM_IN_NORM's tail: once every block has read h (the last to arrive), the residual rows h + Σ
 * slots written back — residual8 again, the values norm_add writes — and the counter left at 0. */
static __device__ __forceinline__ void gm_norm_tail(const gm_norm &nm, int M, int K) {
    if (!last_block_arrive(nm.counter)) return;
    const int C = K >> 3;
    for (int i = threadIdx.x; i < M * C; i += blockDim.x) {
        const int m = i / C, c = i - m * C;
        float *hrow = nm.h + (size_t)m * K;
        float v[8];
        residual8(hrow, nm.slots + (size_t)m * nm.n_slots * K, nm.n_slots, NULL, K, c, v);
        *(float4 *)(hrow + 8 * c) = make_float4(v[0], v[1], v[2], v[3]);
        *(float4 *)(hrow + 8 * c + 4) = make_float4(v[4], v[5], v[6], v[7]);
    }
    if (threadIdx.x == 0) *nm.counter = 0;
}

/* NT token tiles of 8 (1: M ≤ 8, 2: M ≤ 16); LO: the split input's lo halves given; EPI: how the
 * results leave (GM_PLAIN, GM_ROPE_*); IN: where the tokens come from (GM_IN_*); W warps a block,
 * U chunks a batch. */
template <int NT, bool LO, int EPI, int U = GM_U, int W = GM_WARPS, int IN = GM_IN_GLOBAL>
__global__ void __launch_bounds__(W * 32)
    gemv_mma_kernel(const gm_args a, const gm_rope r, const gm_norm nm) {
    static_assert(W * 32 >= 64 * NT, "the RoPE epilogue's items, a thread each");
    static_assert(
        IN == GM_IN_GLOBAL || (NT == 1 && LO && W == 8),
        "the fused norm: one token tile, both halves, the norm kernel's warps in 2 rounds");
    __shared__ float red[W][32][4 * NT];
    extern __shared__ __align__(16) uint16_t gm_xs[]; /* GM_IN_NORM: [M][K] hi, then [M][K] lo */
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int tile = blockIdx.x, C = a.K >> 5, M = a.M;
    /* uint4 index c · 4 + t of a row is k 32c + 8t … +7 */
    const uint4 *wg = (const uint4 *)(a.W + (size_t)gm_row<EPI>(tile, g) * a.K) + t,
                *w8 = (const uint4 *)(a.W + (size_t)gm_row<EPI>(tile, g + 8) * a.K) + t;
    const uint16_t *x = IN == GM_IN_NORM ? gm_xs : a.x,
                   *x_lo = IN == GM_IN_NORM ? gm_xs + (size_t)M * a.K : a.x_lo;
    const uint4 *xr[NT], *xl[NT];
    bool tok[NT];
#pragma unroll
    for (int n = 0; n < NT; n++) {
        const int m = 8 * n + g;
        tok[n] = m < M;
        xr[n] = (const uint4 *)(x + (size_t)(tok[n] ? m : 0) * a.K) + t;
        xl[n] = LO ? (const uint4 *)(x_lo + (size_t)(tok[n] ? m : 0) * a.K) + t : NULL;
    }
    float acc[NT][4] = {};

    /* The first batch's weights before the wait (model memory, pdl.cuh); the fence keeps them
     * there: ptxas moves griddepcontrol.wait above non-coherent loads (bench/NOTES.md, session 18).
     * The fused norm's gains too (model memory). */
    uint4 aw[U][2];
    gm_load_w<U, W>(aw, wg, w8, wp, C);
    uint4 g8[2] = {make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
    if constexpr (IN == GM_IN_NORM) {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int c = threadIdx.x + i * W * 32;
            g8[i] = gain_at(nm.gain, c, c < (a.K >> 3));
        }
    }
    sched_fence();
    pdl_prologue();
    /* The fused norm: the token rows made here while the first weights fly. */
    if constexpr (IN == GM_IN_NORM) {
        gm_norm_tokens(nm, M, a.K, g8, gm_xs, gm_xs + (size_t)M * a.K);
        __syncthreads();
    }

    /* RoPE fused: the item's position requested now, its angle computed after the k loop
     * (gm_rope_out): the load's round trip hides behind the loop instead of delaying its start. */
    int rpos = 0;
    if (EPI != GM_PLAIN && threadIdx.x < 64 * NT) {
        const int m = 8 * (threadIdx.x >> 6) + ((threadIdx.x >> 3) & 7);
        rpos = m < M ? r.positions[m] : 0;
    }

    for (int c0 = wp; c0 < C; c0 += W * U) {
        if (c0 != wp) gm_load_w<U, W>(aw, wg, w8, c0, C); /* later batches: with their tokens */
        uint4 bx[U][NT], bl[U][NT];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int n = 0; n < NT; n++) {
                const int c = c0 + W * u;
                const bool v = tok[n] && c < C;
                /* plain loads: the compiler keeps them after pdl_prologue's wait (a "memory"
                 * clobber), which a non-volatile asm load (ldg_stream16) need not be */
                bx[u][n] = v ? xr[n][4 * c] : make_uint4(0, 0, 0, 0);
                if (LO) bl[u][n] = v ? xl[n][4 * c] : make_uint4(0, 0, 0, 0);
            }
        /* Every load of the batch before its first MMA: left alone, ptxas put each chunk's token
         * load right before that chunk's MMAs, into the same registers — a round trip a chunk
         * instead of one a batch (scripts/sass/disasm.sh). Chunks past K multiply zeros (their
         * loads gave zeros), so no branch sits between the loads and the MMAs either. */
        sched_fence();
#pragma unroll
        for (int u = 0; u < U; u++) {
#pragma unroll
            for (int n = 0; n < NT; n++) {
                gm_chunk(acc[n], aw[u][0], aw[u][1], bx[u][n]);
                if (LO) gm_chunk(acc[n], aw[u][0], aw[u][1], bl[u][n]);
            }
        }
    }

    /* Every warp's accumulators to shared memory, then out: plain rows or RoPE'd q and cache. */
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int j = 0; j < 4; j++) red[wp][lane][4 * n + j] = acc[n][j];
    __syncthreads();
    if constexpr (EPI != GM_PLAIN) {
        if (threadIdx.x < 64 * NT) gm_rope_out<NT, EPI, W>(a, r, red, tile, rpos);
    } else {
        gm_plain_out<NT, W>(a, red, tile);
    }
    if constexpr (IN == GM_IN_NORM) {
        gm_norm_tail(nm, M, a.K);
    }
}

template <int EPI, int U = GM_U, int W = GM_WARPS>
static cudaError_t gm_launch(const gm_args &a, const gm_rope &r, cudaStream_t stream) {
    const dim3 grid((unsigned)(a.N / 16)), block(W * 32);
    gm_norm nm;
    memset(&nm, 0, sizeof nm);
    if (a.M <= 8)
        return a.x_lo ? pdl_launch(gemv_mma_kernel<1, true, EPI, U, W>, grid, block, 0, stream, a,
                                   r, nm)
                      : pdl_launch(gemv_mma_kernel<1, false, EPI, U, W>, grid, block, 0, stream, a,
                                   r, nm);
    return a.x_lo
               ? pdl_launch(gemv_mma_kernel<2, true, EPI, U, W>, grid, block, 0, stream, a, r, nm)
               : pdl_launch(gemv_mma_kernel<2, false, EPI, U, W>, grid, block, 0, stream, a, r, nm);
}
