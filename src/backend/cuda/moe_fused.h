/* The MoE block of a small decode step in one persistent kernel (moe_fused.cu): router logits, top-k
 * routing, gate_up + SwiGLU and down, separated by grid barriers instead of four launches.
 * All device pointers; bf16 values as uint16_t bit patterns so this header stays plain C. */
#ifndef GPTOSS_BACKEND_CUDA_MOE_FUSED_H
#define GPTOSS_BACKEND_CUDA_MOE_FUSED_H

#include "backend/cuda/moe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether moe_decode_fused handles a step of T tokens (E experts, top-k, hidden H, intermediate I)
 * under plan: the small path with 8-token passes, T ≤ 8, T·k ≤ 32, E ≤ 256. */
int moe_fused_supported(int T, int E, int k, int H, int I, const moe_plan *plan);

/* The fused path's switch, process-wide (a measurement switch: measured slower than the four
 * launches, so off unless GPTOSS_MOE_FUSED=1 or 2, or moe_set_fused): 0 off, 1 on, 2 on with the
 * deep prefetch of down's weights (moe_fused.cu). (Modes 3 and 4, a stream form with a producer
 * warp, measured 0.81-0.89 of the launches' step in session 23, were removed.) */
void moe_set_fused(int mode);
/* The grid barrier's sleep between polls of its generation word, in ns (0: spin; a measurement
 * knob of tests/gpu/test_moe_fused.cu --bench). */
void moe_fused_set_spin_ns(unsigned ns);
/* Measurement probes (test_moe_fused --bench): stop_after 1, 2, 3 ends the kernel after the router,
 * the routing, gate_up (0: whole); plain_launch drops the cooperative attribute (the grid is still
 * sized to be resident); three_blocks compiles for 3 blocks an SM (168 registers instead of 128).
 * Outputs are incomplete with stop_after != 0. */
void moe_fused_set_probe(int stop_after, int plain_launch, int three_blocks);
int moe_fused_enabled(void);

/* The MoE block for the T = r->T tokens of x (+ x_lo, the split-bf16 MLP norm output, [T][H]):
 * router logits into logits [T][E] fp32 (router_w [E][H], no bias there), the routing into r
 * (moe_route_split's format, router_b added to the logits first), gate_up's activations into act and
 * down's weighted rows into y_slots — the same outputs as gemv_bf16 + moe_route_split + moe_experts.
 * bar: 2 words of device memory, zero before the first launch, that this kernel alone uses (it leaves
 * them ready for the next launch). One cooperative launch on stream; it must be the only kernel
 * running on the GPU's SMs' share it needs (not under tensor parallelism on one GPU). */
cudaError_t moe_decode_fused(const moe_weights *w, const uint16_t *x, const uint16_t *x_lo,
                             const uint16_t *router_w, const uint16_t *router_b, float *logits,
                             const moe_routing *r, const moe_plan *plan, uint16_t *act,
                             float *y_slots, unsigned *bar, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
