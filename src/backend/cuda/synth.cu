/* Synthetic weights on the GPU; see synth.h. The arithmetic repeats model/synthetic.c operation by
 * operation: the integer hashing is base/rng.h's own (compiled for the device too), exact anywhere,
 * and the few float operations use the _rn intrinsics
 * so nvcc cannot fuse a multiply and an add into one FMA (the host code, built for plain x86-64,
 * rounds after each). bf16 narrowing is numfmt.h's f32_to_bf16 (round to nearest even, quiet NaN).
 */
#include "backend/cuda/synth.h"
#include "base/rng.h"

#include <cuda_runtime.h>
#include <stdint.h>

enum { SYNTH_THREADS = 256, SYNTH_MAX_BLOCKS = 8192 };

/* synthetic.c's approx_normal: four 16-bit uniforms summed (Irwin-Hall), centred, scaled. */
static __device__ __forceinline__ float approx_normal(uint64_t bits) {
    const uint32_t s = (uint32_t)(bits & 0xffff) + (uint32_t)((bits >> 16) & 0xffff) +
                       (uint32_t)((bits >> 32) & 0xffff) + (uint32_t)(bits >> 48);
    return __fmul_rn(__fsub_rn(__fmul_rn((float)s, 1.0f / 65536.0f), 2.0f), 1.7320508f);
}

static __device__ __forceinline__ uint16_t to_bf16(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static __device__ __forceinline__ uint16_t dense_value(uint64_t key, uint64_t i, float mean,
                                                       float std) {
    return to_bf16(__fadd_rn(mean, __fmul_rn(std, approx_normal(rng_hash2(key, i)))));
}

__global__ void synth_bf16_kernel(uint16_t *out, uint64_t first, uint64_t n, uint64_t key,
                                  float mean, float std) {
    for (uint64_t j = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; j < n;
         j += (uint64_t)gridDim.x * blockDim.x)
        out[j] = dense_value(key, first + j, mean, std);
}

__global__ void synth_f32_kernel(float *out, uint64_t first, uint64_t n, uint64_t key, float mean,
                                 float std) {
    for (uint64_t j = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; j < n;
         j += (uint64_t)gridDim.x * blockDim.x)
        out[j] = __uint_as_float((uint32_t)dense_value(key, first + j, mean, std) << 16);
}

/* One 64-bit hash gives 8 code bytes (little-endian, as memcpy of the word on the host). */
__global__ void synth_blocks_kernel(uint64_t *out, uint64_t first_word, uint64_t n_words,
                                    uint64_t key) {
    for (uint64_t j = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; j < n_words;
         j += (uint64_t)gridDim.x * blockDim.x)
        out[j] = rng_hash2(key, first_word + j);
}

__global__ void synth_scales_kernel(uint8_t *out, uint64_t first, uint64_t n, uint64_t key,
                                    int base) {
    for (uint64_t j = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; j < n;
         j += (uint64_t)gridDim.x * blockDim.x) {
        const uint64_t r = rng_hash2(key, first + j) & 3;
        int s = base + (r == 0 ? -1 : r == 1 ? 1 : 0);
        out[j] = (uint8_t)(s < 0 ? 0 : s > 254 ? 254 : s);
    }
}

static unsigned grid_for(size_t n) {
    const size_t b = (n + SYNTH_THREADS - 1) / SYNTH_THREADS;
    const size_t cap = (size_t)SYNTH_MAX_BLOCKS;
    return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}

extern "C" uint64_t synth_key(uint64_t seed, int tensor_index) {
    return splitmix64(seed * 0x100000001b3ull + (uint64_t)tensor_index);
}

extern "C" cudaError_t synth_dense_bf16(uint16_t *out, size_t first, size_t n, uint64_t key,
                                        float mean, float std, cudaStream_t stream) {
    if (!out && n) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    synth_bf16_kernel<<<grid_for(n), SYNTH_THREADS, 0, stream>>>(out, first, n, key, mean, std);
    return cudaGetLastError();
}

extern "C" cudaError_t synth_dense_f32(float *out, size_t first, size_t n, uint64_t key, float mean,
                                       float std, cudaStream_t stream) {
    if (!out && n) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    synth_f32_kernel<<<grid_for(n), SYNTH_THREADS, 0, stream>>>(out, first, n, key, mean, std);
    return cudaGetLastError();
}

extern "C" cudaError_t synth_blocks(uint8_t *out, size_t first, size_t n, uint64_t key,
                                    cudaStream_t stream) {
    if ((first % 8) || (n % 8) || ((uintptr_t)out % 8) || (!out && n)) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    synth_blocks_kernel<<<grid_for(n / 8), SYNTH_THREADS, 0, stream>>>((uint64_t *)out, first / 8,
                                                                       n / 8, key);
    return cudaGetLastError();
}

extern "C" cudaError_t synth_scales(uint8_t *out, size_t first, size_t n, uint64_t key, int base,
                                    cudaStream_t stream) {
    if (!out && n) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    synth_scales_kernel<<<grid_for(n), SYNTH_THREADS, 0, stream>>>(out, first, n, key, base);
    return cudaGetLastError();
}
