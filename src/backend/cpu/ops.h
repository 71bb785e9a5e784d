/* The CPU reference's building blocks, float32 and obvious loops (OpenMP across output rows).
 * Each function is the formula of spec §2 with nothing clever in between. */
#ifndef GPTOSS_BACKEND_CPU_OPS_H
#define GPTOSS_BACKEND_CPU_OPS_H

#include "model/weights.h"

#include <stdint.h>

/* y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * gain, for T rows of n. */
void cpu_rmsnorm(const float *x, dense_ref gain, int T, int n, double eps, float *y);

/* y[t][r] = sum_k x[t][k] * W[r][k] + b[r] for T rows; W is N x K in its file dtype. b may be NULL. */
void cpu_linear(const float *x, int T, int K, dense_ref W, const dense_ref *b, int N, float *y);

/* A part of a linear map (tensor parallelism, model/tp_plan.h): y[t][r] = sum_{k<K} x[t][k] * W[r][k]
 * + b[r], where x's rows are x_stride floats apart, W's rows w_stride elements apart and y's rows
 * y_stride floats apart: a block of columns (the caller offsets x and W by its first column) or of
 * rows (the caller offsets W, b and y) of a larger product. b may be NULL. Bit-identical to
 * cpu_linear on the same numbers. */
void cpu_linear_strided(const float *x, size_t x_stride, int T, int K, dense_ref W, size_t w_stride,
                        const dense_ref *b, int N, float *y, size_t y_stride);

/* Attention of one query head over n visible keys: softmax over the scaled scores plus a sink logit
 * that has no value, then the weighted sum of V. k_rows[u] / v_rows[u] point at key u's head vector
 * (head_dim values); q has head_dim values; out gets head_dim values. */
void cpu_sink_attention_rows(const float *q, const float *const *k_rows, const float *const *v_rows,
                             int64_t n, int head_dim, float scale, float sink, float *out);

/* The same over keys [k0, k1] of a contiguous cache laid out [pos][kv_dim], reading KV head kv_head. */
void cpu_sink_attention(const float *q, const float *k_cache, const float *v_cache, int kv_dim,
                        int kv_head, int head_dim, int64_t k0, int64_t k1, float scale, float sink,
                        float *out);

/* Top-k of n logits (largest first; among equal values the lower index wins), then softmax over the
 * k selected logits. */
void cpu_topk_softmax(const float *logits, int n, int k, int *idx, float *weight);

/* gpt-oss's clamped SwiGLU on an interleaved gate/up row of 2n values (even = gate, odd = up):
 * out[i] = min(g,limit) * sigmoid(alpha * min(g,limit)) * (clamp(u, -limit, limit) + 1). */
void cpu_swiglu(const float *gate_up, int n, float alpha, float limit, float *out);

/* y[t][r] = sum_k x[t][k] * W_e[r][k] + bias[r] for an MXFP4 expert matrix of N rows and K inputs
 * (blocks: N x K/32 x 16 bytes, scales: N x K/32), decoding each row once for all T rows. */
void cpu_mxfp4_linear(const float *x, int T, int K, const uint8_t *blocks, const uint8_t *scales,
                      dense_ref bias, size_t bias_offset, int N, float *y);
/* The same over K inputs that are a block range of wider rows (tensor parallelism): row r's blocks
 * start at blocks + r * row_blocks * 16 and its scales at scales + r * row_blocks (the caller
 * offsets both by the first block). bias may be NULL (no bias). */
void cpu_mxfp4_linear_part(const float *x, int T, int K, const uint8_t *blocks,
                           const uint8_t *scales, size_t row_blocks, const dense_ref *bias,
                           size_t bias_offset, int N, float *y);

#endif
