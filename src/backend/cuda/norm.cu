/* Residual add + RMSNorm and the embedding gather. See norm.h.
 *
 * One block per token row, one thread per 8 features (H = 2880: 360 threads of a 384-thread block):
 * the row is read once with 16-byte loads, updated and written back, its sum of squares reduced
 * across the block (warp shuffles, then one value per warp through shared memory), and the
 * normalised row written as bf16. Memory-bound: at 4096 tokens and 4 MoE slots a pass moves
 * ≈ 280 MB, ~70 µs at 4 TB/s; at one token it is a few µs of latency. */
#include "backend/cuda/norm.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/norm_row.cuh"
#include "backend/cuda/pdl.cuh"

enum { NORM_MAX_H = 8192, NORM_MAX_THREADS = 1024 };

__global__ void norm_add_kernel(float *h, const uint16_t *delta, const float *slots, int n_slots,
                                int H, const uint16_t *gain, float eps, uint16_t *y,
                                uint16_t *ylo) {
    const int t = blockIdx.x, c = threadIdx.x; /* c: 8-feature group */
    const bool active = 8 * c < H;
    const uint4 g8 = gain_at(y ? gain : NULL, c, active); /* model memory: before the wait */
    pdl_prologue(); /* first, but for the gains: see pdl.cuh */
    __shared__ float red[32];
    float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    float *hrow = h + (size_t)t * H;
    if (active) {
        /* Σ slots in order 0, 1, …: the deterministic MoE combine */
        residual8(hrow, slots ? slots + (size_t)t * n_slots * H : NULL, n_slots,
                  delta ? delta + (size_t)t * H : NULL, H, c, v);
        if (slots || delta) {
            *(float4 *)(hrow + 8 * c) = make_float4(v[0], v[1], v[2], v[3]);
            *(float4 *)(hrow + 8 * c + 4) = make_float4(v[4], v[5], v[6], v[7]);
        }
    }
    if (y)
        write_norm(v, active, H, g8, eps, y + (size_t)t * H, ylo ? ylo + (size_t)t * H : NULL, c,
                   red);
}

__global__ void norm_embed_kernel(const int32_t *tokens, const uint16_t *table, int vocab, int H,
                                  float *h, const uint16_t *gain, float eps, uint16_t *y,
                                  uint16_t *ylo) {
    const int t = blockIdx.x, c = threadIdx.x;
    const bool active = 8 * c < H;
    const uint4 g8 = gain_at(y ? gain : NULL, c, active); /* model memory: before the wait */
    pdl_prologue(); /* first, but for the gains: see pdl.cuh */
    __shared__ float red[32];
    float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (active) {
        const int id = tokens[t];
        if (id >= 0 && id < vocab)
            unpack_bf16x8(*(const uint4 *)(table + (size_t)id * H + 8 * c), v);
        float *hrow = h + (size_t)t * H + 8 * c;
        *(float4 *)hrow = make_float4(v[0], v[1], v[2], v[3]);
        *(float4 *)(hrow + 4) = make_float4(v[4], v[5], v[6], v[7]);
    }
    if (gain && y)
        write_norm(v, active, H, g8, eps, y + (size_t)t * H, ylo ? ylo + (size_t)t * H : NULL, c,
                   red);
}

static int threads_for(int H) {
    return ((H / 8 + 31) / 32) * 32;
}

static int shape_ok(int T, int H) {
    return T >= 0 && H > 0 && H % 8 == 0 && H <= NORM_MAX_H;
}

cudaError_t norm_add_rmsnorm_split(float *h, const uint16_t *delta, const float *slots, int n_slots,
                                   int T, int H, const uint16_t *gain, float eps, uint16_t *y,
                                   uint16_t *y_lo, cudaStream_t stream) {
    if (!shape_ok(T, H) || !h || (slots && n_slots < 1) || (y && !gain) || (y_lo && !y))
        return cudaErrorInvalidValue;
    if (T == 0) return cudaSuccess;
    return pdl_launch(norm_add_kernel, dim3(T), dim3(threads_for(H)), 0, stream, h, delta, slots,
                      slots ? n_slots : 0, H, gain, eps, y, y_lo);
}

cudaError_t norm_embed_split(const int32_t *tokens, int T, const uint16_t *table, int vocab, int H,
                             float *h, const uint16_t *gain, float eps, uint16_t *y, uint16_t *y_lo,
                             cudaStream_t stream) {
    if (!shape_ok(T, H) || !tokens || !table || !h || vocab < 1 || (gain && !y) || (y_lo && !y))
        return cudaErrorInvalidValue;
    if (T == 0) return cudaSuccess;
    return pdl_launch(norm_embed_kernel, dim3(T), dim3(threads_for(H)), 0, stream, tokens, table,
                      vocab, H, h, gain, eps, y, y_lo);
}
