/* The router on the tensor cores with its routing in the last block (router_mma.h).
 *
 * A block is one 16-row tile of W (16 experts) and one K slice of RM_KS; its 8 warps take the
 * slice's k16 steps w, w + 8, …. For one k16 step, lane (g, t) holds the mma.sync m16n8k16 fragments
 * straight from global memory: A (W, row-major, the experts as rows) rows g and g + 8 at k 2t, 2t+1
 * and 2t+8, 2t+9 — four 4-byte loads, which a warp turns into 16 rows × 32 contiguous bytes, every
 * byte used — and B (the tokens as columns, x row-major) token g's k 2t, 2t+1 and 2t+8, 2t+9, zero for
 * g ≥ M. No shared-memory staging: every load of the warp is issued before its first MMA, W's before
 * the PDL wait (model memory, pdl.cuh). The split input's lo half is a second MMA into the same
 * accumulator. Then the block's 8 warps add their 16 × 8 partial sums in warp order, the block writes
 * its slice's sums, and the last block to arrive adds the RM_KS slices in slice order (so the bits
 * do not depend on which block finished last) and routes the tokens (moe_route_small.cuh). */
#include "backend/cuda/router_mma.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/moe_route_small.cuh"
#include "backend/cuda/norm_row.cuh"
#include "backend/cuda/pdl.cuh"
#include "base/env_switch.h"

#include <string.h>

/* NT n8 tiles of tokens (1: M <= 8, 2: M <= 16) and 8 warps a tile, so that the last block has a
 * warp per token for the routing (moe_route_small.cuh wants blockDim >= 32 T). */
template <int NT> struct rm_shape {
    static constexpr int warps = 8 * NT, threads = warps * 32;
    /* k16 steps a warp takes at most: K / 16 / RM_KS a block, `warps` warps */
    static constexpr int steps = (RM_MAX_K / 16 / RM_KS + warps - 1) / warps;
    static_assert(threads >= (int)ROUTE_SMALL_MIN_THREADS,
                  "the last block routes with all its threads");
};

struct rm_args {
    const uint16_t *x, *x_lo, *W, *bias;
    float *logits, *parts; /* parts: [RM_KS][M][N] */
    int K;
    moe_routing r; /* where the routing goes: r.T tokens (M), r.E experts (N) */
    int *counter;
    gemv_norm_in nm; /* NORM: x is the RMSNorm of h + delta (x, x_lo unused) */
};

/* NORM: the split input's fragments of token m at elements e, e + 1 (the u32 index o = e / 2) of
 * its normalised row, made here from h + delta as norm_split8 makes them (the same operations in
 * the same order, so the same bits as norm_add_rmsnorm_split's y and y_lo); g2: the gains' pair. */
static __device__ __forceinline__ void norm_pair(const gemv_norm_in &nm, int m, int K, int o,
                                                 float inv, uint32_t g2, uint32_t &hi,
                                                 uint32_t &lo) {
    const float2 hv = *(const float2 *)(nm.h + (size_t)m * K + 2 * o);
    float v0 = hv.x, v1 = hv.y;
    if (nm.delta) {
        const uint32_t d = ((const uint32_t *)(nm.delta + (size_t)m * K))[o];
        v0 += bf16_bits_to_f32(d & 0xffffu), v1 += bf16_bits_to_f32(d >> 16);
    }
    const float x0 = v0 * inv * bf16_bits_to_f32(g2 & 0xffffu),
                x1 = v1 * inv * bf16_bits_to_f32(g2 >> 16);
    hi = pack_bf16x2(x0, x1);
    lo = pack_bf16x2(x0 - bf16_bits_to_f32(hi & 0xffffu), x1 - bf16_bits_to_f32(hi >> 16));
}

template <int NT, bool NORM>
__global__ void __launch_bounds__(rm_shape<NT>::threads) router_mma_kernel(const rm_args a) {
    constexpr int WARPS = rm_shape<NT>::warps, THREADS = rm_shape<NT>::threads,
                  STEPS = rm_shape<NT>::steps;
    __shared__ float red[WARPS][32][4 * NT];
    __shared__ uint16_t s_bias[256];
    const int M = a.r.T, N = a.r.E;
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int tile = blockIdx.x, ks = blockIdx.y;
    const int S16 = a.K >> 4, lo = ks * S16 / RM_KS, hi = (ks + 1) * S16 / RM_KS;

    /* W's fragments of this warp's steps (u32 index kb / 2 + t is element kb + 2t), and the bias for
     * the routing: model memory, before the wait. */
    const uint32_t *w0 = (const uint32_t *)(a.W + (size_t)(tile * 16 + g) * a.K),
                   *w8 = (const uint32_t *)(a.W + (size_t)(tile * 16 + g + 8) * a.K);
    uint32_t af[STEPS][4];
#pragma unroll
    for (int i = 0; i < STEPS; i++) {
        const int step = lo + wp + WARPS * i, o = step * 8 + t;
        const bool valid = step < hi;
        af[i][0] = valid ? __ldg(w0 + o) : 0u;
        af[i][1] = valid ? __ldg(w8 + o) : 0u;
        af[i][2] = valid ? __ldg(w0 + o + 4) : 0u;
        af[i][3] = valid ? __ldg(w8 + o + 4) : 0u;
    }
    const uint16_t bias_reg = a.bias && (int)threadIdx.x < N ? __ldg(a.bias + threadIdx.x) : 0;
    uint32_t gn[NORM ? STEPS : 1][2]; /* NORM: the gains of the fragments' elements */
    if constexpr (NORM)
#pragma unroll
        for (int i = 0; i < STEPS; i++) {
            const int step = lo + wp + WARPS * i, o = step * 8 + t;
            const bool valid = step < hi;
            gn[i][0] = valid ? __ldg((const uint32_t *)a.nm.gain + o) : 0u;
            gn[i][1] = valid ? __ldg((const uint32_t *)a.nm.gain + o + 4) : 0u;
        }
    pdl_prologue();

    /* The tokens' fragments: tile n's token g + 8n's row, hi and lo (zeros past M). */
    uint32_t bh[STEPS][NT][2], bl[STEPS][NT][2];
    if constexpr (NORM) {
        /* Every block sums the squares of the M rows of h + delta as norm_add_kernel does
         * (norm_replay_row: the same bits), then makes its fragments from h, delta and the gains;
         * the blocks of tile 0 write y (the hi halves) over their K slices, the last block h. */
        __shared__ float s_inv[RM_NORM_MAX_M], red_n[32];
        for (int m = 0; m < M; m++) {
            float v[2][8];
            const float ss =
                norm_replay_row<2>(a.nm.h + (size_t)m * a.K, NULL, 0,
                                   a.nm.delta ? a.nm.delta + (size_t)m * a.K : NULL, a.K, v, red_n);
            if (threadIdx.x == 0) s_inv[m] = rms_inv(ss, a.K, a.nm.eps);
        }
        __syncthreads();
        const bool tok = g < M;
        const float inv = tok ? s_inv[g] : 0.f;
        uint32_t *y32 = (uint32_t *)(a.nm.y + (size_t)g * a.K);
#pragma unroll
        for (int i = 0; i < STEPS; i++) {
            const int step = lo + wp + WARPS * i, o = step * 8 + t;
            bh[i][0][0] = bh[i][0][1] = bl[i][0][0] = bl[i][0][1] = 0u;
            if (!tok || step >= hi) continue;
            norm_pair(a.nm, g, a.K, o, inv, gn[i][0], bh[i][0][0], bl[i][0][0]);
            norm_pair(a.nm, g, a.K, o + 4, inv, gn[i][1], bh[i][0][1], bl[i][0][1]);
            if (tile == 0) y32[o] = bh[i][0][0], y32[o + 4] = bh[i][0][1];
        }
    } else
#pragma unroll
        for (int n = 0; n < NT; n++) {
            const int m = g + 8 * n;
            const bool tok = m < M;
            const uint32_t *xh = (const uint32_t *)(a.x + (size_t)(tok ? m : 0) * a.K),
                           *xl = a.x_lo ? (const uint32_t *)(a.x_lo + (size_t)(tok ? m : 0) * a.K)
                                        : NULL;
#pragma unroll
            for (int i = 0; i < STEPS; i++) {
                const int step = lo + wp + WARPS * i, o = step * 8 + t;
                const bool valid = tok && step < hi;
                bh[i][n][0] = valid ? xh[o] : 0u;
                bh[i][n][1] = valid ? xh[o + 4] : 0u;
                bl[i][n][0] = valid && xl ? xl[o] : 0u;
                bl[i][n][1] = valid && xl ? xl[o + 4] : 0u;
            }
        }
    float acc[NT][4] = {};
#pragma unroll
    for (int i = 0; i < STEPS; i++) {
        if (lo + wp + WARPS * i >= hi) break; /* warp-uniform */
#pragma unroll
        for (int n = 0; n < NT; n++) {
            mma_bf16_16816(acc[n], af[i], bh[i][n][0], bh[i][n][1]);
            if (NORM || a.x_lo) mma_bf16_16816(acc[n], af[i], bl[i][n][0], bl[i][n][1]);
        }
    }

    /* The block's 16 × 8·NT sums, warp 0's + warp 1's + …: thread (row, token) of the first 128·NT
     * reads lane (row % 8, token % 8 / 2)'s accumulator (row / 8) · 2 + token % 2 of tile token / 8
     * (mma's C layout). */
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int j = 0; j < 4; j++) red[wp][lane][4 * n + j] = acc[n][j];
    __syncthreads();
    if (threadIdx.x < 128 * NT) {
        const int row = threadIdx.x / (8 * NT), tk = threadIdx.x % (8 * NT), t8 = tk & 7;
        const int ln = (row & 7) * 4 + (t8 >> 1), j = (tk >> 3) * 4 + (row >> 3) * 2 + (t8 & 1);
        float s = 0.f;
#pragma unroll
        for (int w = 0; w < WARPS; w++) s += red[w][ln][j];
        if (tk < M) a.parts[((size_t)ks * M + tk) * N + tile * 16 + row] = s;
    }

    /* The last block: the slices in order, then the routing (gemv.cu's route tail does the same). */
    if ((int)threadIdx.x < N) s_bias[threadIdx.x] = bias_reg;
    if (!last_block_arrive(a.counter)) return;
    if constexpr (NORM) /* every block has read h: h += delta, as norm_add_kernel writes it */
        if (a.nm.delta)
            for (int i = threadIdx.x; i < M * (a.K >> 1); i += THREADS) {
                float2 *h2 = (float2 *)a.nm.h + i;
                const uint32_t d = ((const uint32_t *)a.nm.delta)[i];
                float2 v = *h2;
                v.x += bf16_bits_to_f32(d & 0xffffu), v.y += bf16_bits_to_f32(d >> 16);
                *h2 = v;
            }
    const int MN = M * N;
    for (int i = threadIdx.x; i < MN; i += THREADS) {
        float v = 0.f;
        for (int s = 0; s < RM_KS; s++) v += __ldcg(a.parts + (size_t)s * MN + i);
        a.logits[i] = v;
    }
    __syncthreads();
    route_small_block(a.logits, NULL, a.bias ? s_bias : NULL, MOE_TILE_TOKENS, a.r);
    if (threadIdx.x == 0) *a.counter = 0;
}

extern "C" int router_mma_supported(int M, int K, int N) {
    return M >= 1 && M <= RM_MAX_M && K >= 16 && K <= RM_MAX_K && K % 16 == 0 && N >= 16 &&
           N <= 256 && N % 16 == 0;
}

/* The checks and the launch of both forms (nm NULL: x given). */
static cudaError_t rm_launch(const uint16_t *x, const uint16_t *x_lo, const gemv_norm_in *nm, int M,
                             int K, const uint16_t *W, int N, float *logits, const uint16_t *bias,
                             const moe_routing *r, int *counter, cudaStream_t stream) {
    if ((!x && !nm) || !W || !logits || !r || !counter || !router_mma_supported(M, K, N) ||
        r->T != M || r->E != N || r->k < 1 || r->k > 8 || r->k > N || M * r->k > 64 || r->e0 < 0 ||
        r->n_e < 1 || r->e0 + r->n_e > N)
        return cudaErrorInvalidValue;
    if (nm && (!nm->h || !nm->gain || !nm->y || M > RM_NORM_MAX_M)) return cudaErrorInvalidValue;
    rm_args a;
    memset(&a, 0, sizeof a);
    a.x = x, a.x_lo = x_lo, a.W = W, a.bias = bias, a.logits = logits;
    a.parts = logits + (size_t)M * N, a.K = K;
    a.r = *r, a.counter = counter;
    const dim3 grid((unsigned)(N / 16), RM_KS);
    if (nm) {
        a.nm = *nm;
        return pdl_launch(router_mma_kernel<1, true>, grid, dim3(rm_shape<1>::threads), 0, stream,
                          a);
    }
    if (M <= 8)
        return pdl_launch(router_mma_kernel<1, false>, grid, dim3(rm_shape<1>::threads), 0, stream,
                          a);
    return pdl_launch(router_mma_kernel<2, false>, grid, dim3(rm_shape<2>::threads), 0, stream, a);
}

extern "C" cudaError_t router_mma_route(const uint16_t *x, const uint16_t *x_lo, int M, int K,
                                        const uint16_t *W, int N, float *logits,
                                        const uint16_t *bias, const moe_routing *r, int *counter,
                                        cudaStream_t stream) {
    return rm_launch(x, x_lo, NULL, M, K, W, N, logits, bias, r, counter, stream);
}

extern "C" cudaError_t router_mma_norm_route(const gemv_norm_in *nm, int M, int K,
                                             const uint16_t *W, int N, float *logits,
                                             const uint16_t *bias, const moe_routing *r,
                                             int *counter, cudaStream_t stream) {
    if (!nm) return cudaErrorInvalidValue;
    return rm_launch(NULL, NULL, nm, M, K, W, N, logits, bias, r, counter, stream);
}

static int g_mode = -1, g_norm = -1;

extern "C" int router_mma_max_t(void) {
    static const int max_t[3] = {0, 8, 16};
    return max_t[env_switch(&g_mode, "GPTOSS_ROUTER_MMA", 1, 0, 2)];
}

extern "C" int router_mma_norm_max_t(void) {
    return env_switch(&g_norm, "GPTOSS_ROUTER_MMA_NORM", 0, 0, RM_NORM_MAX_M);
}

extern "C" void router_mma_norm_set(int max_t) {
    env_switch_set(&g_norm, max_t, 0, RM_NORM_MAX_M);
}

extern "C" void router_mma_set(int mode) {
    env_switch_set(&g_mode, mode, 0, 2);
}
