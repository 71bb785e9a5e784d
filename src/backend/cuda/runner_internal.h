/* What the three files of the step runner share, and nobody else needs:
 *
 *   runner.c            launch (check, pack, upload, enqueue) and collect (wait, host sampling)
 *   runner_forward.c    the forward pass as a sequence of kernel calls
 *   runner_workspace.c  the activation workspace: its plan (one allocation carved per array) and
 *                       the MoE plan the workspace is sized for
 *   runner_masked.c     structured output's constrained rows, sampled on the device at wait
 *   runner_step.c       the step kernel: its layer table, its choice and launch
 *
 * The backend's other files see only runner.h. */
#ifndef GPTOSS_BACKEND_CUDA_RUNNER_INTERNAL_H
#define GPTOSS_BACKEND_CUDA_RUNNER_INTERNAL_H

#include "backend/cuda/runner.h"

/* runner_forward.c's pieces that DEP's forward pass (runner_forward_dep.c) shares with it: one
 * layer's attention block for the plan's T rows (QKV from ws.a and its lo rows, RoPE and the KV
 * write, attention, O into ws.o); the router and routing of T rows of ws.a (lo halves at a_lo);
 * the host and test-hook copies of logits rows [r0, r0 + nr); and the lm_head of nr final rows. */
int runner_attention(struct backend *b, const fwd_plan *p, int l, cudaStream_t s);
int runner_route(struct backend *b, int T, const uint16_t *a_lo, const gpu_layer *ly,
                 moe_routing *rt, cudaStream_t s);
int runner_copy_rows_out(struct backend *b, int r0, int nr);
cudaError_t runner_lm_head_rows(struct backend *b, const uint16_t *x, int nr, const uint16_t *W,
                                int N, float *out, cudaStream_t s);

/* moe_plan_for for a step of T tokens, with the down projection's K split kept within its K steps
 * (I / 64): the small-path kernel refuses more. The workspace's y_slots is sized from it, so the
 * launch must plan with it too. */
moe_plan runner_moe_plan(const struct backend *b, int T);

/* MoE rows per token in y_slots under plan p (k slots, times the K splits on the small path). */
int runner_moe_slots(const struct backend *b, const moe_plan *p);

/* runner_step.c: whether a step takes the step kernel instead of the layer loop, and its launch
 * (every layer; the final rows, lm_head and sampling follow as after the loop). */
bool runner_step_kernel_takes(const struct backend *b, const fwd_plan *p);
int runner_step_kernel(struct backend *b, const fwd_plan *p, cudaStream_t s);

/* Grows a pinned host or device buffer to at least `need` bytes (contents not kept). */
int runner_pinned_reserve(void **p, size_t *cap, size_t need);
int runner_device_reserve(void **p, size_t *cap, size_t need);

/* runner_masked.c. At launch: room for n masked rows (b->masked.n is reset to 0); then each masked
 * row is recorded as its descriptor is filled, and its logits are copied aside from the lm_head
 * chunk that holds them (row_in_chunk of ws.logits). At wait: the masks (published by then) are
 * uploaded, applied, and the rows sampled on the device; their results land in masked.outs_host,
 * and each sampled token in slot_last, as for any device row. */
int runner_masked_reserve(struct backend *b, int n);
int runner_masked_add(struct backend *b, int seq, const gpu_row *row);
int runner_masked_copy(struct backend *b, int k, int row_in_chunk);
int runner_masked_sample(struct backend *b, const step_batch *st);
void runner_masked_free(struct backend *b);

#endif
