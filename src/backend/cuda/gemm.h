/* Dense bf16 GEMM with bias for the attention projections, the router and the unembedding:
 *
 *     y[M][N] = x[M][K] · W[N][K]ᵀ + b[N]        (bf16 in, fp32 accumulate, bf16 or fp32 out)
 *
 * W is a PyTorch Linear weight as stored in the checkpoint (row n = output feature n, K contiguous).
 * Two paths, chosen by M:
 *   - "skinny" (decode, M ≤ 128 — up to 64 tokens per pass over W): our kernel. The matrix is cut into
 *     16-row tiles × K splits so every SM streams weight bytes with 16-byte loads; tensor cores
 *     (mma.sync m16n8k16, weights as the M=16 side, tokens as the N=8 side) do the arithmetic. K splits
 *     are summed by the last block to finish (fixed order: deterministic, no float atomics).
 *   - cuBLASLt (prefill) for everything else.
 * bf16 values travel as uint16_t bit patterns so this header stays plain C.
 *
 * A context owns the cuBLASLt handle and the split-K workspace: use one context per stream (two
 * GEMMs running at once on different streams must not share one). Every call is asynchronous on
 * `stream` and can be captured in a CUDA graph (no allocation, no synchronisation inside). */
#ifndef GPTOSS_BACKEND_CUDA_GEMM_H
#define GPTOSS_BACKEND_CUDA_GEMM_H

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gemm_ctx gemm_ctx;

enum gemm_out { GEMM_OUT_BF16 = 0, GEMM_OUT_F32 = 1 };
enum gemm_path { GEMM_PATH_AUTO = 0, GEMM_PATH_SKINNY = 1, GEMM_PATH_CUBLAS = 2 };

/* Creates a context on the current device (queries its SM count, allocates ~64 MB of workspace). */
cudaError_t gemm_ctx_create(gemm_ctx **out);
void gemm_ctx_destroy(gemm_ctx *ctx);

/* y = x·Wᵀ + bias. x: [M][K] bf16, W: [N][K] bf16, bias: [N] bf16 or NULL, y: [M][N] of `out` type.
 * K must be a multiple of 32 and every pointer 16-byte aligned. Returns cudaErrorInvalidValue on
 * bad shapes, the launch error otherwise (cudaErrorUnknown when cuBLASLt refuses, with a message). */
cudaError_t gemm_bf16(gemm_ctx *ctx, const uint16_t *x, int M, int K, const uint16_t *W, int N,
                      const uint16_t *bias, void *y, enum gemm_out out, cudaStream_t stream);

/* The same with the path forced (tests and benchmarks). GEMM_PATH_SKINNY returns
 * cudaErrorNotSupported when the shape does not fit the skinny kernel's limits. */
cudaError_t gemm_bf16_path(gemm_ctx *ctx, const uint16_t *x, int M, int K, const uint16_t *W, int N,
                           const uint16_t *bias, void *y, enum gemm_out out, enum gemm_path path,
                           cudaStream_t stream);

/* Which path AUTO takes for this shape (1 = skinny, 2 = cuBLASLt), and for the skinny path its plan:
 * K splits, token chunks, tiles per warp. For benchmark labels and tests. */
int gemm_plan_describe(gemm_ctx *ctx, int M, int K, int N, int *splits, int *chunks,
                       int *tiles_per_warp);

#ifdef __cplusplus
}
#endif

#endif
