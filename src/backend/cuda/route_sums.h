/* The MoE routing of one token from the router's sums by columns (attn_stream_router, attn_stream.h):
 * the second half of the router when attn_stream's O epilogue made the first. Plain C header. */
#ifndef GPTOSS_ROUTE_SUMS_H
#define GPTOSS_ROUTE_SUMS_H

#include "backend/cuda/attn_stream.h"
#include "backend/cuda/moe.h"

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One block: inv = 1 / rms(h) from the blocks' shares ss_part[0 .. ATTN_ROUTER_MAX_G) (zeros past
 * the grid), logit e = inv · (Σ_g acc[g][e]) · 2^-24 into logits [E] (fp32, the bias not added),
 * acc set back to zero, the routing of r (r->T = 1) as moe_route_split gives from those logits and
 * bias, and the MoE's input y [H] = bf16(h · inv · gain) (norm_split8's hi). h: the residual row
 * with o added (attn_stream wrote it). PDL-launched when GPTOSS_PDL allows. */
/* The runner takes the router by columns at one token (runner_router_cols.c) unless
 * GPTOSS_ROUTER_COLS=0 (or route_sums_set(0)). On by default since session 37 (H100, against
 * gemv_norm_route: 120b decode at batch 1 +1.3 %, 20b +2.5 %; every GPU test passing with it,
 * bench/NOTES.md); route_sums_set(-1) reads the environment again. Read as the backend is made
 * (its buffers) and at each step. Measured and removed (session 38, H100, 120b batch 1): the
 * routing in attn_stream's last block instead of this launch (0.97 of this), the chosen experts'
 * first gate_up bytes asked of L2 once routed (0.77), both (0.73); session 39: the one token's
 * grouping written from the k chosen experts without block scans (4.5 µs a launch against 4.3). */
int route_sums_enabled(void);
void route_sums_set(int on);

cudaError_t route_from_sums(unsigned long long *acc, const float *ss_part, const float *h,
                            const uint16_t *gain, float eps, int H, const uint16_t *bias,
                            float *logits, uint16_t *y, const moe_routing *r, cudaStream_t stream);

/* Whether route_sums' block takes these (one token; E a multiple of 8 up to 256, k ≤ 8, H a
 * multiple of 8 up to 4096, h, gain and y 16-byte aligned). */
int route_sums_fits(const float *h, const uint16_t *gain, int H, const float *logits,
                    const uint16_t *y, const moe_routing *r);

#ifdef __cplusplus
}
#endif

#endif
