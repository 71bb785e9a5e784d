/* The residual stream and its RMSNorms (spec §2.1, §2.2):
 *
 *   h = Embedding[token]                          (layer 0 input)
 *   a = rmsnorm(h)·g_attn;  h += Attention(a)
 *   m = rmsnorm(h)·g_mlp;   h += Σ_j MoE slot j   (k slots, or k·splits partial rows, see moe.h)
 *   final: rmsnorm(h)·g_final → lm_head           (step_kernels.h: step_final_rows, logits rows only)
 *
 * Residual stream choice: h is kept in fp32 ([T][H] floats, 11.5 KB per token), as the Metal
 * reference does. The references in bf16 round h after every add; fp32 costs 2× the bytes of a
 * bf16 stream in these small kernels (≈ 5 µs per layer at 4096 tokens) and removes 72 roundings
 * per token from the model. Normalised outputs (the GEMM inputs) are bf16.
 *
 * rmsnorm(v)_i = v_i / sqrt(mean(v²) + eps) · g_i, statistics in fp32. One block per token row;
 * H must be a multiple of 8 and ≤ 8192. All pointers are device pointers; bf16 as uint16_t bits. */
#ifndef GPTOSS_BACKEND_CUDA_NORM_H
#define GPTOSS_BACKEND_CUDA_NORM_H

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* h[t] = table[tokens[t]] widened to fp32 (ids outside [0, vocab) give a zero row); if gain is not
 * NULL also y[t] = rmsnorm(h[t])·gain (bf16), and with y_lo the rounding residue (below). */
cudaError_t norm_embed_split(const int32_t *tokens, int T, const uint16_t *table, int vocab, int H,
                             float *h, const uint16_t *gain, float eps, uint16_t *y, uint16_t *y_lo,
                             cudaStream_t stream);

/* h[t] += delta[t] (bf16 [T][H], may be NULL) + (slots[t][0] + … + slots[t][n_slots−1]) (fp32
 * [T][n_slots][H], may be NULL; summed in this fixed order first), then, if y is not NULL,
 * y[t] = rmsnorm(h[t])·gain (bf16). This is the MoE combine and the residual add in one pass. With
 * neither delta nor slots it is a plain RMSNorm of h (h only read).
 *
 * y_lo (may be NULL) receives the normalised row's bf16 rounding residue: y_lo[t] = bf16(x − y[t])
 * where x is the fp32 result, so y + y_lo holds x to ~16 significant bits. A GEMM over the 2T rows
 * [y; y_lo] summed per token is then nearly an fp32-input GEMM for the price of the same weight bytes
 * (runner_forward.c does this for QKV and the router: bf16 rounding of their inputs moved router
 * logits enough to swap near-tied experts, bench/NOTES.md). */
cudaError_t norm_add_rmsnorm_split(float *h, const uint16_t *delta, const float *slots, int n_slots,
                                   int T, int H, const uint16_t *gain, float eps, uint16_t *y,
                                   uint16_t *y_lo, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
