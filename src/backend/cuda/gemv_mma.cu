/* Dense bf16 products of 1-16 token rows on the tensor cores (gemv_mma.h).
 *
 * Block = one 16-row tile of W, GM_WARPS warps. K is cut into 32-wide chunks; warp w takes chunks
 * w, w + GM_WARPS, …, GM_U of them a batch (every load of a batch issued before its MMAs). For one
 * chunk, lane (g, t) loads 16 bytes — k 8t … 8t+7 of the chunk — of W's rows g and g + 8 and of
 * each token tile's token g (and its lo half). mma.sync m16n8k16 wants lane (g, t) to hold the
 * logical k 2t, 2t+1, 2t+8, 2t+9 of a 16-wide k block; any permutation of k gives the same dot
 * product as long as A and B use the same one, so the chunk's first MMA takes the loaded words .x,
 * .y (physical k 8t … 8t+3) and the second .z, .w (8t+4 … 8t+7): all 32 k of the chunk, every byte
 * loaded used once, 16-byte loads only. */
#include "backend/cuda/gemv_mma.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/pdl.cuh"
#include "base/env_switch.h"

#include <string.h>

enum { GM_WARPS = 8, GM_THREADS = GM_WARPS * 32, GM_U = 4 };

struct gm_args {
    const uint16_t *x, *x_lo, *W, *bias;
    void *y;
    int M, K, N;
    int out_f32;
};

/* The two MMAs of one chunk: rows g (wg) and g + 8 (w8), token words xv (see the file's comment). */
static __device__ __forceinline__ void gm_chunk(float acc[4], uint4 wg, uint4 w8, uint4 xv) {
    mma_bf16_16816(acc, wg.x, w8.x, wg.y, w8.y, xv.x, xv.y);
    mma_bf16_16816(acc, wg.z, w8.z, wg.w, w8.w, xv.z, xv.w);
}

/* The weight words of the batch of chunks c0, c0 + GM_WARPS, … (zeros past the C chunks). */
static __device__ __forceinline__ void gm_load_w(uint4 (&aw)[GM_U][2], const uint4 *wg,
                                                 const uint4 *w8, int c0, int C) {
#pragma unroll
    for (int u = 0; u < GM_U; u++) {
        const int c = c0 + GM_WARPS * u;
        aw[u][0] = c < C ? ldg_stream16(wg + 4 * c) : make_uint4(0, 0, 0, 0);
        aw[u][1] = c < C ? ldg_stream16(w8 + 4 * c) : make_uint4(0, 0, 0, 0);
    }
}

/* NT token tiles of 8 (1: M ≤ 8, 2: M ≤ 16); LO: the split input's lo halves given. */
template <int NT, bool LO>
__global__ void __launch_bounds__(GM_THREADS) gemv_mma_kernel(const gm_args a) {
    __shared__ float red[GM_WARPS][32][4 * NT];
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int tile = blockIdx.x, C = a.K >> 5, M = a.M;
    /* uint4 index c · 4 + t of a row is k 32c + 8t … +7 */
    const uint4 *wg = (const uint4 *)(a.W + (size_t)(tile * 16 + g) * a.K) + t,
                *w8 = (const uint4 *)(a.W + (size_t)(tile * 16 + g + 8) * a.K) + t;
    const uint4 *xr[NT], *xl[NT];
    bool tok[NT];
#pragma unroll
    for (int n = 0; n < NT; n++) {
        const int m = 8 * n + g;
        tok[n] = m < M;
        xr[n] = (const uint4 *)(a.x + (size_t)(tok[n] ? m : 0) * a.K) + t;
        xl[n] = LO ? (const uint4 *)(a.x_lo + (size_t)(tok[n] ? m : 0) * a.K) + t : NULL;
    }
    float acc[NT][4] = {};

    /* The first batch's weights before the wait (model memory, pdl.cuh); the fence keeps them
     * there: ptxas moves griddepcontrol.wait above non-coherent loads (bench/NOTES.md, session 18). */
    uint4 aw[GM_U][2];
    gm_load_w(aw, wg, w8, wp, C);
    sched_fence();
    pdl_prologue();

    for (int c0 = wp; c0 < C; c0 += GM_WARPS * GM_U) {
        if (c0 != wp) gm_load_w(aw, wg, w8, c0, C); /* later batches: with their tokens */
        uint4 bx[GM_U][NT], bl[GM_U][NT];
#pragma unroll
        for (int u = 0; u < GM_U; u++)
#pragma unroll
            for (int n = 0; n < NT; n++) {
                const int c = c0 + GM_WARPS * u;
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
        for (int u = 0; u < GM_U; u++) {
#pragma unroll
            for (int n = 0; n < NT; n++) {
                gm_chunk(acc[n], aw[u][0], aw[u][1], bx[u][n]);
                if (LO) gm_chunk(acc[n], aw[u][0], aw[u][1], bl[u][n]);
            }
        }
    }

    /* The tile's 16 × 8·NT sums, warp 0's + warp 1's + …: thread (tile n, row, token) of the first
     * 128 · NT reads that C element of every warp (mma_c_lane, mma_c_reg), adds the bias and
     * writes. */
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int j = 0; j < 4; j++) red[wp][lane][4 * n + j] = acc[n][j];
    __syncthreads();
    if (threadIdx.x < 128 * NT) {
        const int n = threadIdx.x >> 7, row = (threadIdx.x >> 3) & 15, tk = threadIdx.x & 7;
        const int ln = mma_c_lane(row, tk), j = 4 * n + mma_c_reg(row, tk);
        const int m = 8 * n + tk, col = tile * 16 + row;
        float s = 0.f;
#pragma unroll
        for (int w = 0; w < GM_WARPS; w++) s += red[w][ln][j];
        if (a.bias) s += bf16_bits_to_f32(a.bias[col]);
        if (m < M) {
            if (a.out_f32)
                ((float *)a.y)[(size_t)m * a.N + col] = s;
            else
                ((uint16_t *)a.y)[(size_t)m * a.N + col] = f32_to_bf16_bits(s);
        }
    }
}

extern "C" int gemv_mma_supported(int M, int K, int N) {
    return M >= 1 && M <= GEMV_MMA_MAX_M && K >= 32 && K % 32 == 0 && N >= 16 && N % 16 == 0;
}

extern "C" cudaError_t gemv_mma(const uint16_t *x, const uint16_t *x_lo, int M, int K,
                                const uint16_t *W, int N, const uint16_t *bias, void *y,
                                int out_f32, cudaStream_t stream) {
    if (!x || !W || !y || !gemv_mma_supported(M, K, N)) return cudaErrorInvalidValue;
    gm_args a;
    memset(&a, 0, sizeof a);
    a.x = x, a.x_lo = x_lo, a.W = W, a.bias = bias, a.y = y;
    a.M = M, a.K = K, a.N = N, a.out_f32 = out_f32 != 0;
    const dim3 grid((unsigned)(N / 16)), block(GM_THREADS);
    if (M <= 8)
        return x_lo ? pdl_launch(gemv_mma_kernel<1, true>, grid, block, 0, stream, a)
                    : pdl_launch(gemv_mma_kernel<1, false>, grid, block, 0, stream, a);
    return x_lo ? pdl_launch(gemv_mma_kernel<2, true>, grid, block, 0, stream, a)
                : pdl_launch(gemv_mma_kernel<2, false>, grid, block, 0, stream, a);
}

static int g_max_t = -1;

extern "C" int gemv_mma_max_t(void) {
    return env_switch(&g_max_t, "GPTOSS_GEMV_MMA", 0, 0, GEMV_MMA_MAX_M);
}

extern "C" void gemv_mma_set_max_t(int max_t) {
    env_switch_set(&g_max_t, max_t, 0, GEMV_MMA_MAX_M);
}
