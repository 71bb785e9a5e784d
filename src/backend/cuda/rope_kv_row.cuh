/* The per-value pieces of RoPE + the KV write (rope_kv.h has the math and the layout): the angle,
 * the rotation and the cache address, one definition for any kernel that writes q and the cache
 * (rope_kv.cu's pass; session 19's fused QKV epilogue used it too, measured no faster and removed
 * in session 20), so that each produces the same bits from the same fp32 inputs. Device code. */
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>

/* cos and sin of the angle pos · inv_freq, times the YaRN concentration: accurate sincosf (angles
 * reach 131072 rad; __sincosf would be off by far more than bf16). */
static __device__ __forceinline__ void rope_cos_sin_at(int pos, float inv_freq, float concentration,
                                                       float *c, float *s) {
    float sn, cs;
    sincosf((float)pos * inv_freq, &sn, &cs);
    *c = cs * concentration;
    *s = sn * concentration;
}

/* The rotation of the pair (x1 = x[i], x2 = x[i + half]) by (c, s): x1 c − x2 s and x2 c + x1 s,
 * each the first product fused into the sum (written out, so that no kernel's contraction choice
 * can differ from another's: the form nvcc chose for rope_kv.cu before this was shared). */
static __device__ __forceinline__ void rope_rotate(float x1, float x2, float c, float s, float *o1,
                                                   float *o2) {
    *o1 = __fmaf_rn(x1, c, -__fmul_rn(x2, s));
    *o2 = __fmaf_rn(x2, c, __fmul_rn(x1, s));
}

/* Element offset of (slot, kv head) in the head-major paged cache: block, head, row, dim. */
static __device__ __forceinline__ size_t kv_cache_offset(int slot, int kv_head, int n_kv_heads,
                                                         int head_dim, int bs_shift) {
    size_t block = (size_t)(slot >> bs_shift), row = (size_t)(slot & ((1 << bs_shift) - 1));
    return (((block * (size_t)n_kv_heads + (size_t)kv_head) << bs_shift) + row) * (size_t)head_dim;
}
