/* L2 prefetch of the weights that the next kernels of a decode step will stream (issue 13,
 * "prefetch across boundaries").
 *
 * Why: at batch 1 a layer is ~45 µs of weight-streaming kernels (QKV, O, gate_up, down at 2–2.5
 * TB/s, each paying its own ramp) and ~28 µs of latency-bound small kernels (RoPE, attention and its
 * merge, norms, router, routing) during which DRAM idles (bench/results/bubble-120b-b1-*.md). Weights
 * do not depend on the step, so they can be requested before the kernel that reads them starts: a
 * kernel on a side branch of the step (a second stream, forked and joined by events, so also inside
 * CUDA graphs) issues `cp.async.bulk.prefetch.L2` for them while the main branch runs the small
 * kernels; the streaming kernel then finds its bytes in L2 (50 MB on the H200) or already on the
 * way. The experts are known only after the routing, so their prefetch reads the routing's touched
 * list on the device.
 *
 * A prefetch is a hint: it moves no data the kernels see, so outputs are bit-identical with and
 * without it. Off by default; GPTOSS_L2_PREFETCH is a bit mask of what to prefetch (runner_forward.c):
 *   1  the O projection's weights, once QKV is done (they are read after RoPE and attention);
 *   2  the touched experts' down weights, once the routing is done (read after gate_up);
 *   4  the touched experts' gate_up weights, once the routing is done (read at once: the prefetch
 *      runs ahead of the kernel's own loads);
 *   8  the next layer's QKV weights, once this layer's O is done. */
#ifndef GPTOSS_BACKEND_CUDA_PREFETCH_H
#define GPTOSS_BACKEND_CUDA_PREFETCH_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    L2PF_O = 1,
    L2PF_DOWN = 2,
    L2PF_GATE_UP = 4,
    L2PF_NEXT_QKV = 8,
};

/* The mask of GPTOSS_L2_PREFETCH (0 when unset or not a number), read once. */
int l2_prefetch_mask(void);

/* Prefetch [p, p + bytes) into L2 (the 16-byte aligned interior of it). Asynchronous on stream. */
cudaError_t l2_prefetch(const void *p, size_t bytes, cudaStream_t stream);

/* Prefetch the per-expert slices [e · stride, e · stride + bytes) of `base` for the first
 * *n_touched experts e of touched[] (device arrays, moe.h's routing), nothing when *n_touched >
 * max_experts (a big batch touches most experts: far more bytes than L2 holds). Two bases (codes and
 * scales of one matrix) in one launch; base1 may be NULL. */
cudaError_t l2_prefetch_experts(const void *base0, size_t stride0, const void *base1,
                                size_t stride1, const int *touched, const int *n_touched,
                                int max_experts, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
