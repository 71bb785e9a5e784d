/* Dense bf16 products of 1-16 token rows on the tensor cores, for the decode steps' QKV and O
 * projections (the router has its own form: router_mma.h):
 *
 *     y[m][n] = (x[m] + x_lo[m]) · W[n] + bias[n]        (fp32 sums; y fp32 or bf16)
 *
 * W is row-major [N][K] bf16 (nn.Linear's layout), x [M][K], x_lo (may be NULL) the split input's lo
 * halves [M][K]: a second MMA into the same accumulator, so the sum is the one cuBLASLt's 2M-row
 * product gives (in another order: the results are within rounding of it, not its bits).
 *
 * Why: steps of 2-16 tokens run QKV and O on cuBLASLt, whose products stream the weights at ~2-2.8
 * TB/s there (120b batch 8: QKV 10.4 µs for 29.5 MB, O 9.3 µs plus a 2.2 µs split-K reduce for 23.6
 * MB; bench/NOTES.md session 18), and gemv.h's forms lose from two tokens (their fp32 token staging:
 * every weight meets M fp32 tokens read back from shared memory). Here, as in router_mma, the tokens
 * are mma.sync m16n8k16's N and every fragment comes straight from global memory: a block is one
 * 16-row tile of W and its 8 warps take the K range's 32-wide chunks in turn, 4 chunks a batch; lane
 * (g, t) loads 16 contiguous bytes of rows g and g + 8 and of token g (k 8t … 8t+7 of the chunk),
 * the two MMAs of the chunk taking them in the permuted k order both operands share (as the MoE's
 * small kernel does, moe_small.cuh). The warps' sums meet in shared memory in warp order, so the
 * bits do not depend on timing. Not yet measured on the H200: the runner takes it only under
 * GPTOSS_GEMV_MMA (gemv_mma_max_t). */
#ifndef GPTOSS_BACKEND_CUDA_GEMV_MMA_H
#define GPTOSS_BACKEND_CUDA_GEMV_MMA_H

#include "backend/cuda/rope_kv.h"

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { GEMV_MMA_MAX_M = 16 };

/* Whether gemv_mma takes this shape: 1 ≤ M ≤ GEMV_MMA_MAX_M, K a positive multiple of 32, N a
 * positive multiple of 16. */
int gemv_mma_supported(int M, int K, int N);

/* y: fp32 [M][N] when out_f32, else bf16. bias (bf16 [N]) may be NULL. */
cudaError_t gemv_mma(const uint16_t *x, const uint16_t *x_lo, int M, int K, const uint16_t *W,
                     int N, const uint16_t *bias, void *y, int out_f32, cudaStream_t stream);

/* The largest step (tokens) whose QKV and O products the runner gives this form wherever it would
 * call cuBLASLt: GPTOSS_GEMV_MMA (read once; gemv_mma_set_max_t for tests), 0 … GEMV_MMA_MAX_M; 0
 * (none) unless set, until measured. */
int gemv_mma_max_t(void);
void gemv_mma_set_max_t(int max_t);

/* For the tuning bench only (tests/gpu/test_gemv_mma.cu --bench), until the block shape is chosen
 * on the H200: gemv_mma with shape s of (chunks a batch, warps a block) = (4, 8) (the default),
 * (2, 8), (6, 8), (4, 4), (8, 4), (4, 16). */
enum { GEMV_MMA_TUNE_SHAPES = 6 };
cudaError_t gemv_mma_tune(int shape, const uint16_t *x, const uint16_t *x_lo, int M, int K,
                          const uint16_t *W, int N, const uint16_t *bias, void *y, int out_f32,
                          cudaStream_t stream);

/* QKV with RoPE and the KV-cache write fused into the product's epilogue (issue 13's "QKV → RoPE
 * → KV write"): what gemv_mma(x, x_lo, M, K, W, N, NULL, y, fp32) followed by
 * rope_kv_launch_f32(d, f, y, NULL, bias, N, M, positions, slots, q_out, k_cache, v_cache,
 * kv_scales) stores, in one launch and without the fp32 rows y: N = (n_heads + 2 n_kv_heads) · 64
 * rows of W in rope_kv.h's order, bias (bf16 [N]) may be NULL. A block's 16-row tile is a quarter
 * of a head, rows i and i + 32 together, so its epilogue rotates the pairs it holds; the fp32
 * operations are rope_kv.cu's (rope_kv_row.cuh), so the bits are the two launches'. Why: at 1-16
 * tokens rope_kv is a latency-bound launch of ~3 µs a layer (bench/NOTES.md, session 16's batch-1
 * step by kernel). Needs head_dim 64 and a power-of-two block size. */
/* Whether gemv_mma_rope takes this step: gemv_mma_supported's shape, N the (n_heads + 2 n_kv_heads)
 * · 64 rows of d, head_dim 64, a power-of-two block size. */
int gemv_mma_rope_supported(int M, int K, int N, const attn_dims *d, const rope_kv_freq *f);
cudaError_t gemv_mma_rope(const uint16_t *x, const uint16_t *x_lo, int M, int K, const uint16_t *W,
                          const uint16_t *bias, const attn_dims *d, const rope_kv_freq *f,
                          const int32_t *positions, const int32_t *slots, uint16_t *q_out,
                          void *k_cache, void *v_cache, const float *kv_scales,
                          cudaStream_t stream);

/* Whether the runner takes gemv_mma_rope for the QKV steps gemv_mma takes: GPTOSS_GEMV_MMA_ROPE=1
 * (read once); 0, the default, until measured on the H200. */
int gemv_mma_rope_on(void);

/* And the attention norm in front of it (gemv_mma_norm_rope): what norm_add_rmsnorm_split(h, NULL,
 * slots, n_slots, M, K, gain, eps, y, y_lo) followed by gemv_mma_rope(y, y_lo, …) does, in one
 * launch — every block makes the M normalised rows itself in shared memory (the norm kernel's
 * arithmetic and reduction tree: the same bits), while its first weights are in flight, and the
 * last block to finish writes the residual rows h + Σ slots back (counter: an int at 0, left at 0).
 * Why: at 1-4 tokens the norm is a launch of ~3 µs a layer of latency (bench/NOTES.md, session 16);
 * here it costs each block M rows of L2 reads (h and the slots: ~58 KB a token for 4 slots), so
 * it is for the smallest steps only. M ≤ GEMV_MMA_NORM_MAX_M, K / 8 ≤ 512, M · K · 4 ≤ 48 KB. */
enum { GEMV_MMA_NORM_MAX_M = 4 };
typedef struct {
    float *h;           /* [M][K]: the residual rows, updated */
    const float *slots; /* [M][n_slots][K]: the previous layer's MoE outputs */
    int n_slots;
    const uint16_t *gain; /* the attention norm's bf16 gains [K] */
    float eps;
    int *counter;
} gemv_mma_norm_in;
int gemv_mma_norm_supported(int M, int K, int N, const attn_dims *d, const rope_kv_freq *f);
cudaError_t gemv_mma_norm_rope(const gemv_mma_norm_in *in, int M, int K, const uint16_t *W,
                               const uint16_t *bias, const attn_dims *d, const rope_kv_freq *f,
                               const int32_t *positions, const int32_t *slots, uint16_t *q_out,
                               void *k_cache, void *v_cache, const float *kv_scales,
                               cudaStream_t stream);
/* The largest step the runner gives it (with GPTOSS_GEMV_MMA and GPTOSS_GEMV_MMA_ROPE on):
 * GPTOSS_GEMV_MMA_NORM, 0 … GEMV_MMA_NORM_MAX_M; 0 (never) until measured. */
int gemv_mma_norm_max_t(void);

#ifdef __cplusplus
}
#endif

#endif
