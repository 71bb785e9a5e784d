/* Synthetic weights generated in GPU memory, bit for bit what model/synthetic.c writes to disk for
 * the same config and seed (so `--model synthetic:20b` and a `gptoss make-model --preset 20b`
 * checkpoint are the same model, and a test can hold them side by side):
 *
 *   dense tensor t (index in checkpoint order), element i:
 *       key = splitmix64(seed * 0x100000001b3 + t)
 *       bf16( mean + std * approx_normal(rng_hash2(key, i)) )     (float mul, then float add)
 *   MXFP4 blocks: byte 8w + j = byte j (little-endian) of rng_hash2(key, w)
 *   MXFP4 scales: base + {-1, +1, 0, 0}[rng_hash2(key, i) & 3], clamped to [0, 254]
 *
 * The distributions (mean, std per tensor kind, and the scales' base exponent) are synthetic.c's
 * draw_for and fill_scales; weights_gpu.c holds the table and says so. Every function takes the
 * index `first` of the first element to generate, so a tensor can be made in pieces. Asynchronous
 * on stream. Plain C header. */
#ifndef GPTOSS_BACKEND_CUDA_SYNTH_H
#define GPTOSS_BACKEND_CUDA_SYNTH_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The tensor's key (host): splitmix64(seed * 0x100000001b3 + index). */
uint64_t synth_key(uint64_t seed, int tensor_index);

/* out[j] = bf16 value of element first + j, j < n. */
cudaError_t synth_dense_bf16(uint16_t *out, size_t first, size_t n, uint64_t key, float mean,
                             float std, cudaStream_t stream);
/* The same values widened to fp32 (the attention sinks). */
cudaError_t synth_dense_f32(float *out, size_t first, size_t n, uint64_t key, float mean, float std,
                            cudaStream_t stream);
/* Raw MXFP4 code bytes first .. first + n - 1 (first and n multiples of 8). */
cudaError_t synth_blocks(uint8_t *out, size_t first, size_t n, uint64_t key, cudaStream_t stream);
/* Scale bytes first .. first + n - 1 around the base exponent. */
cudaError_t synth_scales(uint8_t *out, size_t first, size_t n, uint64_t key, int base,
                         cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
