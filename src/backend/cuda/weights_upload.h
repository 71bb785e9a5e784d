/* The staging pipeline: a checkpoint's bytes (the safetensors mapping) -> pinned staging buffer ->
 * device, on one stream. Two 64 MiB pinned buffers alternate: while the DMA engine copies one to
 * the device, the CPU fills the other (OpenMP threads, which also fault the mapping's pages in
 * parallel - the disk or page cache is the limit, not one core's memcpy). An event per buffer says
 * when it may be refilled. Dense tensors arrive bf16 (F32 checkpoints are narrowed on the host) or
 * fp32 (the sinks, widened). Everything is asynchronous on the stream: the mapping must stay until
 * the stream is synchronised, and the uploader until then too (up_free waits for its buffers).
 *
 * Users: weights_gpu.c (a whole checkpoint, one GPU) and weights_shard.c (a tensor-parallel rank's
 * share of one). Host code, plain C. */
#ifndef GPTOSS_BACKEND_CUDA_WEIGHTS_UPLOAD_H
#define GPTOSS_BACKEND_CUDA_WEIGHTS_UPLOAD_H

#include "model/weights.h"

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct {
    cudaStream_t stream;
    unsigned char *pin[2];
    cudaEvent_t ev[2];
    int cur;
    size_t done, total; /* bytes sent; expected (0: unknown, the progress line shows no total) */
    double t0, last_print;
    char what[64]; /* the progress line's subject, e.g. "cuda backend: rank 1 of 2" */
} uploader;

/* Pinned buffers and events for uploads on `stream` (on the current device). On failure everything
 * made so far is still released by up_free. */
int up_init(uploader *u, cudaStream_t stream, size_t total, const char *what);
/* Waits for the buffers' last copies, then frees them. */
void up_free(uploader *u);
/* The last progress line (bytes, time, GB/s). */
void up_report(uploader *u);

/* Raw bytes, host -> device. */
int up_bytes(uploader *u, void *dst, const void *src, size_t n);
/* A dense tensor (or a run of it: dense_shift) of n elements to bf16 (dst_f32 = 0) or fp32
 * (dst_f32 = 1) device memory, converting from the file's dtype (BF16 or F32) on the way. */
int up_dense(uploader *u, dense_ref src, size_t n, void *dst, int dst_f32);

/* The bytes of every tensor the checkpoint binds (what a whole upload reads). */
size_t up_checkpoint_bytes(const model_weights *mw);

#endif
