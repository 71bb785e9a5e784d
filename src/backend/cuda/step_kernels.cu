/* Glue kernels of the step runner; see step_kernels.h. All tiny and memory-bound: what matters is
 * that they are one launch each, tolerate padded rows of a CUDA graph, and never read out of range.
 */
#include "backend/cuda/step_kernels.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/norm_row.cuh"
#include "backend/cuda/pdl.cuh"

#include <cuda_runtime.h>
#include <stdint.h>

enum { GLUE_THREADS = 256, FINAL_MAX_H = 8192 };

__global__ void fixups_kernel(const int32_t *pairs, int n, int32_t *slot_last, int max_slots) {
    pdl_prologue(); /* first: see pdl.cuh */
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const int32_t slot = pairs[2 * i], tok = pairs[2 * i + 1];
        if (slot >= 0 && slot < max_slots) slot_last[slot] = tok;
    }
}

__global__ void resolve_kernel(const int32_t *token_ids, const int32_t *token_slot, int T,
                               const int32_t *slot_last, int max_slots, int32_t *ids) {
    pdl_prologue(); /* first: see pdl.cuh */
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    int32_t id = token_ids[t];
    if (id == -1) {
        const int32_t s = token_slot[t];
        id = s >= 0 && s < max_slots ? slot_last[s] : 0;
    }
    ids[t] = id;
}

/* One block per row, one thread per 8 features (as norm.cu). */
__global__ void final_rows_kernel(const float *h, const float *slots, int n_slots,
                                  const gpu_row *rows, int H, const uint16_t *gain, float eps,
                                  uint16_t *out) {
    const int r = blockIdx.x, c = threadIdx.x;
    const bool active = 8 * c < H;
    const uint4 g8 = gain_at(gain, c, active); /* model memory: before the wait (norm_row.cuh) */
    pdl_prologue();                            /* first, but for the gains: see pdl.cuh */
    __shared__ float red[32];
    const int tok = rows[r].tok;
    float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (active) {
        const float *hrow = h + (size_t)tok * H + 8 * c;
        const float4 h0 = *(const float4 *)hrow, h1 = *(const float4 *)(hrow + 4);
        float dsum[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (slots) {
            const float *srow = slots + (size_t)tok * n_slots * H + 8 * c;
            for (int i = 0; i < n_slots; i++) {
                const float4 s0 = *(const float4 *)(srow + (size_t)i * H),
                             s1 = *(const float4 *)(srow + (size_t)i * H + 4);
                dsum[0] += s0.x, dsum[1] += s0.y, dsum[2] += s0.z, dsum[3] += s0.w;
                dsum[4] += s1.x, dsum[5] += s1.y, dsum[6] += s1.z, dsum[7] += s1.w;
            }
        }
        v[0] = h0.x + dsum[0], v[1] = h0.y + dsum[1], v[2] = h0.z + dsum[2], v[3] = h0.w + dsum[3];
        v[4] = h1.x + dsum[4], v[5] = h1.y + dsum[5], v[6] = h1.z + dsum[6], v[7] = h1.w + dsum[7];
    }
    write_norm(v, active, H, g8, eps, out + (size_t)r * H, NULL, c, red);
}

extern "C" cudaError_t step_apply_fixups(const int32_t *pairs, int n, int32_t *slot_last,
                                         int max_slots, cudaStream_t stream) {
    if (n < 0 || (n > 0 && (!pairs || !slot_last))) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    const int needed = (n + GLUE_THREADS - 1) / GLUE_THREADS,
              blocks = needed < 1024 ? needed : 1024;
    pdl_launch(fixups_kernel, dim3(blocks), dim3(GLUE_THREADS), 0, stream, pairs, n, slot_last,
               max_slots);
    return cudaGetLastError();
}

extern "C" cudaError_t step_resolve_tokens(const int32_t *token_ids, const int32_t *token_slot,
                                           int T, const int32_t *slot_last, int max_slots,
                                           int32_t *ids, cudaStream_t stream) {
    if (T < 0 || !token_ids || !token_slot || !slot_last || !ids) return cudaErrorInvalidValue;
    if (T == 0) return cudaSuccess;
    pdl_launch(resolve_kernel, dim3((T + GLUE_THREADS - 1) / GLUE_THREADS), dim3(GLUE_THREADS), 0,
               stream, token_ids, token_slot, T, slot_last, max_slots, ids);
    return cudaGetLastError();
}

extern "C" cudaError_t step_final_rows(const float *h, const float *slots, int n_slots,
                                       const gpu_row *rows, int n_rows, int H, const uint16_t *gain,
                                       float eps, uint16_t *out, cudaStream_t stream) {
    if (n_rows < 0 || H <= 0 || H % 8 || H > FINAL_MAX_H || !h || !rows || !gain || !out ||
        (slots && n_slots < 1))
        return cudaErrorInvalidValue;
    if (n_rows == 0) return cudaSuccess;
    const int threads = ((H / 8 + 31) / 32) * 32;
    pdl_launch(final_rows_kernel, dim3(n_rows), dim3(threads), 0, stream, h, slots,
               slots ? n_slots : 0, rows, H, gain, eps, out);
    return cudaGetLastError();
}
