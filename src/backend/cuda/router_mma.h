/* The MoE router and its routing in one launch for 1-16 tokens, on the tensor cores:
 *
 *     logits[m][e] = (x[m] + x_lo[m]) · W[e]        (fp32 sums)
 *
 * then, in the same kernel, what moe_route_split(logits, NULL, bias, r) gives for r->T = M (gemv.h's
 * gemv_route does the same on CUDA cores). Why a second form: gemv_route stages the tokens as fp32
 * in shared memory, so every bf16 weight meets M fp32 tokens read back from there; at 8 tokens that
 * is 32 bytes of shared reads per 2 bytes of weights (~740 KB a block of 16 rows, ~3 µs at 128 B a
 * clock), and 8-token steps run the router as three launches instead (cuBLASLt's 2T-row product,
 * its split-K reduce, moe_route_split: 13.3 µs a layer on the H200, bench/NOTES.md session 17).
 * Here the tokens are mma.sync m16n8k16's N: a warp's B fragment is 4 bytes of a token per 16 k, and
 * the split input's two halves are two MMAs into one fp32 accumulator (the sum cuBLASLt's 2T rows
 * make, in another order: the logits are within rounding of gemv_route's, not its bits).
 *
 * Work split: block (16-row tile of W, K slice) of 8 warps a tile of 8 tokens (8 up to 8 tokens, 16
 * up to 16: the last block routes with a warp a token), warp w of W taking the slice's k16 steps w,
 * w + W, …; every load (W's fragments before the PDL wait: model memory) in flight before the first
 * MMA. The warps' sums meet in shared memory in warp order, the block's in partial sums in global
 * memory (logits + M·N: RM_KS slices, part[s][m][e]), and the last block to arrive adds the slices in
 * order and routes (moe_route_small.cuh, as gemv_route): the logits' bits do not depend on timing.
 * counter: as gemv_route's (0 before, 0 after; one stream). logits must hold (1 + RM_KS)·M·N floats. */
#ifndef GPTOSS_BACKEND_CUDA_ROUTER_MMA_H
#define GPTOSS_BACKEND_CUDA_ROUTER_MMA_H

#include "backend/cuda/gemv.h" /* gemv_norm_in */
#include "backend/cuda/moe.h"

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { RM_MAX_M = 16, RM_KS = 8, RM_MAX_K = 4096, RM_NORM_MAX_M = 4 };

/* Whether router_mma_route takes this shape: 1 ≤ M ≤ RM_MAX_M (also M·k ≤ 64 for the routing), K a multiple of 16 up to RM_MAX_K,
 * N a multiple of 16 up to 256. */
int router_mma_supported(int M, int K, int N);

cudaError_t router_mma_route(const uint16_t *x, const uint16_t *x_lo, int M, int K,
                             const uint16_t *W, int N, float *logits, const uint16_t *bias,
                             const moe_routing *r, int *counter, cudaStream_t stream);

/* The residual add and RMSNorm in front of the router (norm.h's norm_add_rmsnorm_split(h, delta,
 * NULL, 0, M, K, gain, eps, y, y_lo)) and router_mma_route, in one launch, for M ≤ RM_NORM_MAX_M:
 * as gemv_norm_route (gemv.h) does it for the CUDA-core form — every block sums the squares of the M
 * rows itself (a few KB from L2, in norm_add_kernel's order), then makes its own fragments of the
 * normalised rows from h, delta and the gains; the blocks of the first 16 experts write y (the hi
 * halves; y_lo is not written: only the router reads it) over their K slices, and the last block
 * writes h back before it routes. The bytes of the two launches. */
cudaError_t router_mma_norm_route(const gemv_norm_in *nm, int M, int K, const uint16_t *W, int N,
                                  float *logits, const uint16_t *bias, const moe_routing *r,
                                  int *counter, cudaStream_t stream);

/* The largest step (tokens) the runner gives this form, from 2 tokens up: GPTOSS_ROUTER_MMA (read
 * once; router_mma_set for tests) 0 none, 1 up to 8 (the default: measured, router_mma.h's notes),
 * 2 up to 16 (not yet measured). */
int router_mma_max_t(void);
void router_mma_set(int mode);
/* The largest step the runner gives router_mma_norm_route instead of gemv_norm_route (one token)
 * and the separate norm (2 … 4 tokens): GPTOSS_ROUTER_MMA_NORM (read once; router_mma_norm_set for
 * tests), 0 (none: the default, not yet measured) … RM_NORM_MAX_M. */
int router_mma_norm_max_t(void);
void router_mma_norm_set(int max_t);

#ifdef __cplusplus
}
#endif

#endif
