/* The CUDA backend's extras for tests and tools, beyond backend.h (which is all the engine uses).
 * No CUDA types here. */
#ifndef GPTOSS_BACKEND_CUDA_CUDA_BACKEND_H
#define GPTOSS_BACKEND_CUDA_CUDA_BACKEND_H

#include "step/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* While out is not NULL, every later step also copies its logits rows to out (room for cap_rows
 * rows of vocab floats), in row order: for each sequence all its new tokens when it asks for prompt
 * logprobs, else its last token when it samples. After wait(), cuda_backend_debug_rows() says how
 * many rows the step wrote. For tests that compare logits with a reference. */
void cuda_backend_debug_logits(backend *b, float *out, int cap_rows);
int cuda_backend_debug_rows(const backend *b);

typedef struct {
    long graph_captures, graph_replays, eager_decode_steps;
    double weights_gb, workspace_gb, kv_gb;
    int kv_fp8;     /* the KV cache holds e4m3 (--kv-cache-dtype fp8) */
    long kv_tokens; /* tokens the full-attention pool holds */
    int graph_max_batch;
    long host_sampled_rows;  /* rows sampled on the host from a copy (penalties, filters, ...) */
    long device_masked_rows; /* constrained rows sampled on the device (GPTOSS_GPU_MASKS=0: none) */
    long
        step_kernel_launches; /* forward passes enqueued as the step kernel (a graph: its capture) */
} cuda_backend_stats;

void cuda_backend_get_stats(const backend *b, cuda_backend_stats *out);

#ifdef __cplusplus
}
#endif

#endif
