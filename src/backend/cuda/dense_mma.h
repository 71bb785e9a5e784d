/* A dense projection of a few tokens on the tensor cores, for the decode steps of 2-8 tokens:
 *
 *     y[m][n] = bias[n] + Σ_k (x[m][k] + x_lo[m][k]) · W[n][k]        (fp32 sums)
 *
 * W is bf16 [N][K] (row-major, as released), x and x_lo bf16 [M][K] (x_lo may be NULL: the split
 * input's lo half, added as a second MMA into the same accumulator), bias bf16 [N] or NULL, y fp32
 * or bf16 [M][N]. What it replaces: cuBLASLt's product (at 2-8 tokens a split-K GEMM and its reduce
 * kernel: the O projection ran at ~1.4 TB/s, QKV at ~2.0 on an H100, session 24's kernel table).
 *
 * The work: a block of 4 warps owns a 16-row tile of W and splits K in four; each warp streams its
 * rows' 16-byte pieces with two register batches in flight (the next batch's loads issued before
 * the current one is multiplied), W's first batches before the PDL wait (model memory, pdl.cuh).
 * One 32-wide k chunk is two mma.sync m16n8k16 whose k order is permuted so that every lane loads
 * 16 contiguous bytes of a W row and of a token (moe_small.cuh's mma_chunk: the sum over k does not
 * depend on the order in which A and B both list it). The 4 warps' 16 × 8 sums meet in shared
 * memory in warp order: the bits do not depend on timing.
 * Measured on an H100 (bench/NOTES.md, session 24; alone, µs against cuBLASLt as the runner calls
 * it): O 13.6-14.2 against 15.8-16.1 at 2-8 tokens (~1.7 TB/s against ~1.5: cuBLASLt's split-K
 * GEMM and its reduce kernel); QKV 16.9-17.9 against 15.6 (slower: each warp reads 64-byte pieces
 * of 16 rows 8 KB apart, not the long runs a DRAM page wants). So the runner takes it for O. */
#ifndef GPTOSS_BACKEND_CUDA_DENSE_MMA_H
#define GPTOSS_BACKEND_CUDA_DENSE_MMA_H

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { DENSE_MMA_MAX_M = 8, DENSE_MMA_MAX_K = 8192 };

/* Whether dense_mma takes this shape: 1 ≤ M ≤ DENSE_MMA_MAX_M, K a multiple of 32 (32-wide chunks)
 * from 256 to DENSE_MMA_MAX_K (a chunk or more a warp), N a multiple of 16. */
int dense_mma_supported(int M, int K, int N);

/* out_f32: y is float [M][N], else bf16 bits [M][N]. */
cudaError_t dense_mma(const uint16_t *x, const uint16_t *x_lo, int M, int K, const uint16_t *W,
                      int N, const uint16_t *bias, void *y, int out_f32, cudaStream_t stream);

/* Where the runner takes dense_mma for steps of 2-8 tokens: GPTOSS_DENSE_MMA=0 nowhere (cuBLASLt),
 * 1 (the default) for the O projection, 2 for O and QKV. Mode 3, the whole-row form (a block an
 * SM streaming its rows through a bulk-copy ring), measured slower in session 25 and was removed
 * (bench/NOTES.md). */
enum { DENSE_MMA_OFF = 0, DENSE_MMA_O = 1, DENSE_MMA_O_QKV = 2 };
int dense_mma_mode(void);

#ifdef __cplusplus
}
#endif

#endif
