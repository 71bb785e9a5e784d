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
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/gemv_row.cuh"
#include "backend/cuda/pdl.cuh"

enum { GV_WARPS = 8, GV_THREADS = GV_WARPS * 32, GV_NJ = GEMV_MAX_K / 256 };

struct gemv_args {
    const uint16_t *x, *x_lo, *W, *bias;
    void *y;
    int M, K, N;
    int rows_per_warp;
};

template <int M, bool OUT_F32>
__global__ void __launch_bounds__(GV_THREADS) gemv_kernel(const gemv_args a) {
    extern __shared__ float4 gv_smem[];
    float *xs = (float *)gv_smem; /* [M][K] */
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int K8 = a.K >> 3;                 /* 16-byte words per row */
    const int nj = (K8 + 31) >> 5;           /* loads per lane per row */
    const int stride = gridDim.x * GV_WARPS; /* rows between a warp's consecutive rows */
    int row = blockIdx.x * GV_WARPS + w;
    int left = row < a.N ? a.rows_per_warp : 0;
    if (row + (left - 1) * stride >= a.N) /* the last rows of the last warps: only those < N */
        left = left > 0 ? (a.N - 1 - row) / stride + 1 : 0;

    /* The first row's weights: model memory, so before the wait (pdl.cuh). */
    uint4 wv[GV_NJ];
#pragma unroll
    for (int j = 0; j < GV_NJ; j++) {
        const int c = lane + 32 * j;
        wv[j] = make_uint4(0, 0, 0, 0);
        if (j < nj && c < K8 && left > 0)
            wv[j] = ldg_stream16(a.W + (size_t)row * a.K + (size_t)c * 8);
    }
    pdl_prologue();

    /* Stage the tokens as fp32: x (+ x_lo). */
    for (int i = threadIdx.x; i < M * K8; i += GV_THREADS) {
        const int m = i / K8, c = i - m * K8;
        float f[8];
        gemv_x8(a.x, a.x_lo, (size_t)m * a.K + (size_t)c * 8, f);
        float4 *dst = (float4 *)(xs + (size_t)m * a.K + (size_t)c * 8);
        dst[0] = make_float4(f[0], f[1], f[2], f[3]);
        dst[1] = make_float4(f[4], f[5], f[6], f[7]);
    }
    __syncthreads();

    for (; left > 0; left--, row += stride) {
        const bool more = left > 1;
        const size_t next = (size_t)(row + stride) * a.K;
        float acc[M];
#pragma unroll
        for (int m = 0; m < M; m++) acc[m] = 0.0f;
#pragma unroll
        for (int j = 0; j < GV_NJ; j++) {
            const int c = lane + 32 * j;
            if (j < nj && c < K8) {
                const uint4 cur = wv[j];
                if (more) wv[j] = ldg_stream16(a.W + next + (size_t)c * 8); /* the next row's j */
#pragma unroll
                for (int m = 0; m < M; m++) {
                    const float4 *xp = (const float4 *)(xs + (size_t)m * a.K + (size_t)c * 8);
                    acc[m] = dot8(cur, xp[0], xp[1], acc[m]);
                }
            }
        }
        gemv_warp_sum<M>(acc);
        if (lane < M) {
            float v = acc[0];
#pragma unroll
            for (int m = 1; m < M; m++)
                if (lane == m) v = acc[m];
            if (a.bias) v += bf16_bits_to_f32(a.bias[row]);
            const size_t o = (size_t)lane * a.N + row;
            if (OUT_F32)
                ((float *)a.y)[o] = v;
            else
                ((uint16_t *)a.y)[o] = f32_to_bf16_bits(v);
        }
    }
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

/* Blocks of one kernel that fit on the GPU at once (queried once per kernel and device: the
 * attribute is the device's, per_device.h). */
enum { GV_DEVICES = 8 };
static int resident_blocks(int M, int out_f32, size_t smem) {
    static int cache[GV_DEVICES][GEMV_MAX_M + 1][2][2]; /* [device][M][out][smem > 48 KB] */
    int dev = 0, sms = 0, per = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= GV_DEVICES ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
        return 0;
    int *c = &cache[dev][M][out_f32][smem > 48 * 1024];
    if (*c) return *c;
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
    /* Equal rows per warp, and a grid that is resident at once. */
    const long warps = (long)resident * GV_WARPS;
    const int rpw = (int)((N + warps - 1) / warps);
    const int blocks = (int)(((long)N + (long)rpw * GV_WARPS - 1) / ((long)rpw * GV_WARPS));
    gemv_args a;
    a.x = x, a.x_lo = x_lo, a.W = W, a.bias = bias, a.y = y, a.M = M, a.K = K, a.N = N;
    a.rows_per_warp = rpw;
    return pdl_launch(gemv_kernel_for(M, out_f32 != 0), dim3((unsigned)blocks), dim3(GV_THREADS),
                      smem, stream, a);
}
