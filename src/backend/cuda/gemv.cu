/* Dense bf16 GEMV for decode (gemv.h): y = (x + x_lo) · Wᵀ + bias at M ≤ 8 tokens.
 *
 * Work split. A block of 8 warps stages the M token rows in shared memory as fp32 (x + x_lo added
 * once); each warp then owns rows n = (block · 8 + warp) + i · (grid · 8), i < rows_per_warp, chosen
 * so that every warp has the same number of rows and the grid fits on the GPU at once (one wave, no
 * tail of late blocks).
 *
 * One row: lane L reads 16 bytes (8 bf16 weights) at k = 8 (L + 32 j), j < ceil(K / 256): each load
 * instruction of the warp covers 512 contiguous bytes of the row, and a lane's NJ loads are all issued
 * before the first is used. The multiply of row i consumes its loads one by one and refills each
 * register with the same j of row i + 1 as soon as it is used, so the next row's bytes are in flight
 * while this row is multiplied (a rolling pipeline in NJ registers, not a second buffer). The lane's
 * partial sums (one per token) are then added across the warp with shuffles.
 *
 * Arithmetic per 16-byte load at M tokens: 8 bf16→fp32 unpacks, then per token two 16-byte shared
 * loads of x and 8 FMAs: ~28 instructions at M = 2; at the router's 0.74 MB even M = 8 is a few
 * hundred cycles per SM, so CUDA cores suffice. */
#include "backend/cuda/gemv.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.cuh"

template <int M, bool OUT_F32>
__global__ void __launch_bounds__(GV_THREADS) gemv_kernel(const gemv_args a) {
    extern __shared__ float4 gv_smem[];
    gemv_block<M, OUT_F32>(a, (float *)gv_smem); /* [M][K] staged tokens */
}

typedef void (*gemv_fn)(const gemv_args);

static gemv_fn gemv_kernel_for(int M, int out_f32) {
#define GV_CASE(m)                                                                                 \
    case m:                                                                                        \
        return out_f32 ? gemv_kernel<m, true> : gemv_kernel<m, false>;
    switch (M) {
        GV_CASE(1) GV_CASE(2) GV_CASE(3) GV_CASE(4) GV_CASE(5) GV_CASE(6) GV_CASE(7) GV_CASE(8)
    }
#undef GV_CASE
    return NULL;
}

extern "C" int gemv_supported(int M, int K, int N) {
    return M >= 1 && M <= GEMV_MAX_M && K >= 8 && K <= GEMV_MAX_K && K % 8 == 0 && N >= 1;
}

/* Equal rows per warp, and a grid that is resident at once. */
int gemv_grid(int N, int resident, int *rows_per_warp) {
    const long warps = (long)resident * GV_WARPS;
    const int rpw = (int)((N + warps - 1) / warps);
    *rows_per_warp = rpw;
    return (int)(((long)N + (long)rpw * GV_WARPS - 1) / ((long)rpw * GV_WARPS));
}

/* Blocks of one kernel that fit on the GPU at once (queried once per kernel). */
static int resident_blocks(int M, int out_f32, size_t smem) {
    static int cache[GEMV_MAX_M + 1][2][2]; /* [M][out][smem > 48 KB] */
    int *c = &cache[M][out_f32][smem > 48 * 1024];
    if (*c) return *c;
    int dev = 0, sms = 0, per = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
        return 0;
    const gemv_fn f = gemv_kernel_for(M, out_f32);
    if (cudaFuncSetAttribute((const void *)f, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             GEMV_MAX_M * GEMV_MAX_K * 4) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, f, GV_THREADS, smem) != cudaSuccess)
        return 0;
    *c = per * sms;
    return *c;
}

extern "C" cudaError_t gemv_bf16(const uint16_t *x, const uint16_t *x_lo, int M, int K,
                                 const uint16_t *W, int N, const uint16_t *bias, void *y,
                                 int out_f32, cudaStream_t stream) {
    if (!x || !W || !y || !gemv_supported(M, K, N)) return cudaErrorInvalidValue;
    const size_t smem = (size_t)M * K * sizeof(float);
    const int resident = resident_blocks(M, out_f32 != 0, smem);
    if (resident < 1) return cudaErrorInvalidConfiguration;
    int rpw = 0;
    const int blocks = gemv_grid(N, resident, &rpw);
    gemv_args a;
    a.x = x, a.x_lo = x_lo, a.W = W, a.bias = bias, a.y = y, a.M = M, a.K = K, a.N = N;
    a.rows_per_warp = rpw;
    return pdl_launch(gemv_kernel_for(M, out_f32 != 0), dim3((unsigned)blocks), dim3(GV_THREADS),
                      smem, stream, a);
}
