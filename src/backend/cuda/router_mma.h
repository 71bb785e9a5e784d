/* The MoE router and its routing in one launch for 1-16 tokens, on the tensor cores:
 *
 *     logits[m][e] = (x[m] + x_lo[m]) · W[e]        (fp32 sums)
 *
 * then, in the same kernel, what moe_route_split(logits, NULL, bias, r) gives for r->T = M (gemv.h's
 * gemv_route does the same on CUDA cores). Why a second form: gemv_route stages the tokens as fp32
 * in shared memory, so every bf16 weight meets M fp32 tokens read back from there; at 8 tokens that
 * is 32 bytes of shared reads per 2 bytes of weights (~740 KB a block of 16 rows, ~3 µs at 128 B a
 * clock), and steps of 5 or more tokens ran the router as three launches instead (cuBLASLt's
 * 2T-row product, its split-K reduce, moe_route_split: 13.3 µs a layer at 8 tokens on the H200,
 * bench/NOTES.md session 17). Here the tokens are mma.sync m16n8k16's N: a warp's B fragment is 4
 * bytes of a token per 16 k, and the split input's two halves are two MMAs into one fp32
 * accumulator (the sum cuBLASLt's 2T rows make, in another order: the logits are within rounding of
 * gemv_route's, not its bits).
 *
 * Work split: block (16-row tile of W, K slice) with 8 warps for each tile of 8 tokens, warp w of a
 * tile taking the slice's k16 steps w, w + 8, …; every load (W's fragments before the PDL wait:
 * model memory) in flight before the first MMA. A tile's warps' sums meet in shared memory in warp
 * order, the block's in partial sums in global memory (logits + M·N: RM_KS slices, part[s][m][e]),
 * and the last block to arrive adds the slices in order and routes (moe_route_small.cuh, as
 * gemv_route): the logits' bits do not depend on timing. counter: as gemv_route's (0 before, 0
 * after; one stream). logits must hold (1 + RM_KS)·M·N floats.
 * Measured on the H200 (bench/NOTES.md, session 18), 120b decode against gemv_route (2-4 tokens) and
 * the three launches (5-16): +1.8-2.4 % at batch 2, +3.3 % at 4, +2.9-3.0 % at 8, +0.7-1.0 % at 16;
 * 20b +3.1-3.5 % at 4, +1.6-2.1 % at 16. Past 16 tokens (four tiles, the routing for 128 pairs)
 * nothing beyond the noise at 32 (0.990, spread 4 %; 17.6 against 19.8 µs alone): not kept. */
#ifndef GPTOSS_BACKEND_CUDA_ROUTER_MMA_H
#define GPTOSS_BACKEND_CUDA_ROUTER_MMA_H

#include "backend/cuda/moe.h"

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { RM_MAX_M = 16, RM_MAX_PAIRS = 64, RM_KS = 8, RM_MAX_K = 4096 };

/* Whether router_mma_route takes this shape: 1 ≤ M ≤ RM_MAX_M (and M·k ≤ RM_MAX_PAIRS for the routing: router_mma_route checks it), K
 * a multiple of 16 up to RM_MAX_K, N a multiple of 16 up to 256. */
int router_mma_supported(int M, int K, int N);

cudaError_t router_mma_route(const uint16_t *x, const uint16_t *x_lo, int M, int K,
                             const uint16_t *W, int N, float *logits, const uint16_t *bias,
                             const moe_routing *r, int *counter, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
