/* Small glue kernels of the step runner (runner*.c): everything between the step's uploaded arrays
 * and the big kernels that is too small to deserve a file of its own.
 *
 *   step_apply_fixups    slot_last[slot] = token for tokens that were sampled on the host in the
 *                        previous step (so STEP_TOKEN_FROM_DEVICE finds them);
 *   step_resolve_tokens  the step's token ids with STEP_TOKEN_FROM_DEVICE (-1) replaced by the
 *                        slot's last sampled token (input of norm_embed_split);
 *   step_final_rows      for each logits row: h[tok] + sum of the MoE slots of the last layer (the
 *                        combine the next layer's norm would have done), then the final RMSNorm, as
 *                        bf16 rows for the lm_head GEMM; only rows that need logits are touched.
 *
 * Device pointers throughout; bf16 as uint16_t bit patterns. Plain C header. */
#ifndef GPTOSS_BACKEND_CUDA_STEP_KERNELS_H
#define GPTOSS_BACKEND_CUDA_STEP_KERNELS_H

#include "backend/cuda/sampling.h"

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* pairs: [n][2] (slot, token); slots outside [0, max_slots) are ignored. */
cudaError_t step_apply_fixups(const int32_t *pairs, int n, int32_t *slot_last, int max_slots,
                              cudaStream_t stream);

/* ids[t] = token_ids[t], or slot_last[token_slot[t]] when token_ids[t] == -1 (0 if that slot is out
 * of range). */
cudaError_t step_resolve_tokens(const int32_t *token_ids, const int32_t *token_slot, int T,
                                const int32_t *slot_last, int max_slots, int32_t *ids,
                                cudaStream_t stream);

/* out[r] = rmsnorm(h[rows[r].tok] + sum_j slots[rows[r].tok][j]) * gain for r < n_rows. h: [T][H]
 * fp32, slots: [T][n_slots][H] fp32 (NULL: none), out: [n_rows][H] bf16. H % 8 == 0, H <= 8192. The
 * additions happen in norm_add_rmsnorm's order (slots in order, then onto h). */
cudaError_t step_final_rows(const float *h, const float *slots, int n_slots, const gpu_row *rows,
                            int n_rows, int H, const uint16_t *gain, float eps, uint16_t *out,
                            cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
