/* The router on the tensor cores with its routing in the last block (router_mma.h).
 *
 * A block is one 16-row tile of W (16 experts) and one K slice of RM_KS, with 8 warps for each tile
 * of 8 tokens (NT tiles: 1 or 2); warp w takes tile w / 8 and the slice's k16 steps w % 8,
 * w % 8 + 8, …. For one k16 step, lane (g, t) holds the mma.sync m16n8k16 fragments straight from
 * global memory: A (W, row-major, the experts as rows) rows g and g + 8 at k 2t, 2t+1 and 2t+8, 2t+9
 * — four 4-byte loads, which a warp turns into 16 rows × 32 contiguous bytes, every byte used — and
 * B (the tokens as columns, x row-major) token 8n + g's k 2t, 2t+1 and 2t+8, 2t+9, zero past M. No
 * shared-memory staging: every load of the warp is issued before its first MMA, W's before the PDL
 * wait (model memory, pdl.cuh); the tiles' warps load the same W fragments (the second and later
 * from L1/L2), so each warp's accumulator stays 16 × 8 and the block's reduction 16 KB at most. The
 * split input's lo half is a second MMA into the same accumulator. Then each tile's 8 warps add
 * their 16 × 8 partial sums in warp order, the block writes its slice's sums, and the last block to
 * arrive adds the RM_KS slices in slice order (so the bits do not depend on which block finished
 * last) and routes the tokens (moe_route_small.cuh, which wants a warp a token: 32 · NT warps ≥ 32
 * M). */
#include "backend/cuda/router_mma.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/moe_route_small.cuh"
#include "backend/cuda/pdl.cuh"

#include <string.h>

/* NT tiles of 8 tokens (1: M ≤ 8, 2: ≤ 16), 8 warps a tile. */
template <int NT> struct rm_shape {
    static constexpr int warps = 8 * NT, threads = warps * 32;
    /* k16 steps a warp takes at most: K / 16 / RM_KS a block over a tile's 8 warps */
    static constexpr int steps = (RM_MAX_K / 16 / RM_KS + 7) / 8;
    static_assert(threads >= (int)ROUTE_SMALL_MIN_THREADS,
                  "the last block routes with all its threads");
};

static_assert((int)RM_MAX_PAIRS == (int)ROUTE_SMALL_MAX_PAIRS, "the routing in the last block");

struct rm_args {
    const uint16_t *x, *x_lo, *W, *bias;
    float *logits, *parts; /* parts: [RM_KS][M][N] */
    int K;
    moe_routing r; /* where the routing goes: r.T tokens (M), r.E experts (N) */
    int *counter;
};

template <int NT>
__global__ void __launch_bounds__(rm_shape<NT>::threads) router_mma_kernel(const rm_args a) {
    constexpr int WARPS = rm_shape<NT>::warps, THREADS = rm_shape<NT>::threads,
                  STEPS = rm_shape<NT>::steps;
    __shared__ float red[WARPS][32][4];
    __shared__ uint16_t s_bias[256];
    const int M = a.r.T, N = a.r.E;
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int n8 = wp >> 3, ws = wp & 7; /* this warp's token tile and step slot */
    const int tile = blockIdx.x, ks = blockIdx.y;
    const int S16 = a.K >> 4, lo = ks * S16 / RM_KS, hi = (ks + 1) * S16 / RM_KS;
    const bool live = 8 * n8 < M; /* warp-uniform: a tile with tokens */

    /* W's fragments of this warp's steps (u32 index kb / 2 + t is element kb + 2t), and the bias for
     * the routing: model memory, before the wait. */
    const uint32_t *w0 = (const uint32_t *)(a.W + (size_t)(tile * 16 + g) * a.K),
                   *w8 = (const uint32_t *)(a.W + (size_t)(tile * 16 + g + 8) * a.K);
    uint32_t af[STEPS][4];
#pragma unroll
    for (int i = 0; i < STEPS; i++) {
        const int step = lo + ws + 8 * i, o = step * 8 + t;
        const bool valid = live && step < hi;
        af[i][0] = valid ? __ldg(w0 + o) : 0u;
        af[i][1] = valid ? __ldg(w8 + o) : 0u;
        af[i][2] = valid ? __ldg(w0 + o + 4) : 0u;
        af[i][3] = valid ? __ldg(w8 + o + 4) : 0u;
    }
    const uint16_t bias_reg = a.bias && (int)threadIdx.x < N ? __ldg(a.bias + threadIdx.x) : 0;
    pdl_prologue();

    /* The tokens' fragments: token 8 n8 + g's row, hi and lo (zeros past M). */
    uint32_t bh[STEPS][2], bl[STEPS][2];
    const int m = 8 * n8 + g;
    const bool tok = m < M;
    const uint32_t *xh = (const uint32_t *)(a.x + (size_t)(tok ? m : 0) * a.K),
                   *xl = a.x_lo ? (const uint32_t *)(a.x_lo + (size_t)(tok ? m : 0) * a.K) : NULL;
#pragma unroll
    for (int i = 0; i < STEPS; i++) {
        const int step = lo + ws + 8 * i, o = step * 8 + t;
        const bool valid = tok && step < hi;
        bh[i][0] = valid ? xh[o] : 0u;
        bh[i][1] = valid ? xh[o + 4] : 0u;
        bl[i][0] = valid && xl ? xl[o] : 0u;
        bl[i][1] = valid && xl ? xl[o + 4] : 0u;
    }
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    if (live)
#pragma unroll
        for (int i = 0; i < STEPS; i++) {
            if (lo + ws + 8 * i >= hi) break; /* warp-uniform */
            mma_bf16_16816(acc, af[i], bh[i][0], bh[i][1]);
            if (a.x_lo) mma_bf16_16816(acc, af[i], bl[i][0], bl[i][1]);
        }

        /* Each tile's 16 × 8 sums, its warp 0's + warp 1's + …: thread (tile n, row, token) of the first
     * 128 · NT reads that C element of the tile's warps (mma_c_lane, mma_c_reg). */
#pragma unroll
    for (int j = 0; j < 4; j++) red[wp][lane][j] = acc[j];
    __syncthreads();
    if (threadIdx.x < 128 * NT) {
        const int n = threadIdx.x >> 7, row = (threadIdx.x >> 3) & 15, tk = threadIdx.x & 7;
        const int ln = mma_c_lane(row, tk), j = mma_c_reg(row, tk);
        float s = 0.f;
#pragma unroll
        for (int w = 0; w < 8; w++) s += red[8 * n + w][ln][j];
        if (8 * n + tk < M) a.parts[((size_t)ks * M + 8 * n + tk) * N + tile * 16 + row] = s;
    }

    /* The last block: the slices in order, then the routing (gemv.cu's route tail does the same). */
    if ((int)threadIdx.x < N) s_bias[threadIdx.x] = bias_reg;
    if (!last_block_arrive(a.counter)) return;
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

extern "C" cudaError_t router_mma_route(const uint16_t *x, const uint16_t *x_lo, int M, int K,
                                        const uint16_t *W, int N, float *logits,
                                        const uint16_t *bias, const moe_routing *r, int *counter,
                                        cudaStream_t stream) {
    if (!x || !W || !logits || !r || !counter || !router_mma_supported(M, K, N) || r->T != M ||
        r->E != N || r->k < 1 || r->k > 8 || r->k > N || M * r->k > RM_MAX_PAIRS || r->e0 < 0 ||
        r->n_e < 1 || r->e0 + r->n_e > N)
        return cudaErrorInvalidValue;
    rm_args a;
    memset(&a, 0, sizeof a);
    a.x = x, a.x_lo = x_lo, a.W = W, a.bias = bias, a.logits = logits;
    a.parts = logits + (size_t)M * N, a.K = K;
    a.r = *r, a.counter = counter;
    const dim3 grid((unsigned)(N / 16), RM_KS);
    if (M <= 8)
        return pdl_launch(router_mma_kernel<1>, grid, dim3(rm_shape<1>::threads), 0, stream, a);
    return pdl_launch(router_mma_kernel<2>, grid, dim3(rm_shape<2>::threads), 0, stream, a);
}
