/* YaRN RoPE on q and k, and the KV-cache write, in one pass over the QKV projection's output.
 *
 * Input row of token t: [q: n_heads x head_dim | k: n_kv_heads x head_dim | v: n_kv_heads x head_dim]
 * (5120 values for gpt-oss), fp32: the sum of up to two GEMM products and the bias (below), rounded
 * to bf16 only once, on output. For every q and k head, dimension i < half rotates with i + half
 * (half = head_dim / 2, "half-split" pairing, spec §2.3):
 *     angle = (float)pos * inv_freq[i]                  (fp32, as the reference)
 *     c = cos(angle) * concentration,  s = sin(angle) * concentration
 *     x'[i] = x[i] c - x[i+half] s,    x'[i+half] = x[i+half] c + x[i] s
 * with accurate sincosf (angles reach 131072 rad; __sincosf would be off by far more than bf16).
 * inv_freq and the concentration come from rope_init (model/rope.c) on the host, so the GPU uses
 * bit-identical frequencies to the CPU reference.
 *
 * Outputs: rotated q to q_out[n_tokens][n_heads][head_dim]; rotated k and plain v to the paged cache at
 * the token's slot (layout in attention.h: slot = physical block * block_size + row).
 *
 * Why a slot mapping instead of block tables: the step runner computes slots once per step for each pool
 * (rope_kv_slots below, on the host, uploaded with the step) and all layers of that pool reuse it, so the
 * kernel does one indexed store and no table walk; a slot < 0 skips the KV write, which is how padded
 * token rows of a CUDA graph (batch rounded up to a captured size) stay harmless. */
#ifndef GPTOSS_BACKEND_CUDA_ROPE_KV_H
#define GPTOSS_BACKEND_CUDA_ROPE_KV_H

#include "backend/cuda/attention.h"

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { ROPE_KV_MAX_HALF = 64 };

/* Passed by value to the kernel. */
typedef struct {
    int half;                         /* head_dim / 2 */
    float inv_freq[ROPE_KV_MAX_HALF]; /* from rope_table.inv_freq */
    float concentration;              /* from rope_table.concentration */
} rope_kv_freq;

/* Copies the host-computed table (rope_init's inv_freq[0..half) and concentration). Returns -1 when
 * half is out of range. */
int rope_kv_freq_init(rope_kv_freq *f, const float *inv_freq, int half, float concentration);

/* Host: the slot of every new token of the step in one pool: for token j of sequence i at position
 * p = start_pos[i] + j, slot = tables[i * stride + p / block_size - first_i] * block_size + p % block_size
 * (first_i = table_first ? table_first[i] : 0). Arrays are host copies; slots gets query_start[n_seqs]
 * entries. A missing block (logical index out of the table or a -1 entry) gives slot -1 and returns -1
 * (the engine's contract says it cannot happen); otherwise returns 0. */
int rope_kv_slots(int n_seqs, const int32_t *query_start, const int32_t *start_pos,
                  const int32_t *tables, int stride, const int32_t *table_first, int block_size,
                  int32_t *slots);

/* Input row t = qkv[t] (+ qkv_lo[t]) (+ bias), summed in fp32 in that order, then rotated and rounded
 * to bf16 once. runner_forward.c passes the two halves of a split-bf16 GEMM (norm.h) and the bias
 * here, so q, k and v are rounded once instead of after the GEMM and again after RoPE. qkv_lo and bias
 * may be NULL. qkv_stride is the distance between token rows of both row arrays in elements (a
 * multiple of 8, at least (n_heads + 2 n_kv_heads) head_dim); positions and slots are per token.
 * With d->kv_fp8 the caches hold e4m3 codes and kv_scales is the layer's scale table (attention.h):
 * K and V are stored as e4m3(x * inv_scale) instead of bf16(x); the q rows are bf16 either way. */
cudaError_t rope_kv_launch_f32(const attn_dims *d, const rope_kv_freq *f, const float *qkv,
                               const float *qkv_lo, const uint16_t *bias, int qkv_stride,
                               int n_tokens, const int32_t *positions, const int32_t *slots,
                               uint16_t *q_out, void *k_cache, void *v_cache,
                               const float *kv_scales, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
