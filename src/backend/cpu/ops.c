#include "backend/cpu/ops.h"

#include "base/xalloc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void cpu_rmsnorm(const float *x, dense_ref gain, int T, int n, double eps, float *y) {
    for (int t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * n;
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)xr[i] * xr[i];
        float inv = (float)(1.0 / sqrt(ss / n + eps));
        for (int i = 0; i < n; i++) y[(size_t)t * n + i] = xr[i] * inv * dense_at(gain, (size_t)i);
    }
}

/* GPTOSS_FAST_MATH_UNDER_ASAN (cmake -DGPTOSS_SANITIZE_MATH=OFF, for the long fuzzer runs only):
 * the dot-product loops below skip AddressSanitizer's check on each load. Under ASan those checks
 * made a tiny-model decode step cost ~34 ms of lm_head (each of 12.9 M weights checked) against
 * ~10 ms, so a million-request fuzz run against the sanitized server was bound by them; the fuzzer
 * is after the request paths, which stay instrumented, and CI's ASan build keeps these loops
 * checked. */
#ifdef GPTOSS_FAST_MATH_UNDER_ASAN
#define MATH_LOOP __attribute__((no_sanitize_address))
#else
#define MATH_LOOP
#endif

/* bf16_to_f32 (base/numfmt.h) again, with the loops' attribute: an instrumented inline function is
 * not inlined into an uninstrumented caller, and a call per weight cost more than the checks. */
MATH_LOOP static inline float widen_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The dot products below keep 8 partial sums, lane j adding the products i ≡ j (mod 8), in GCC
 * vector types (two SSE registers on baseline x86-64, lowered as the target allows). A single
 * running sum is a chain of dependent adds, ~4 cycles each: the tiny model's 201,088-row lm_head
 * cost ~10 ms a decode step that way, most of a CPU step. The order is fixed (the lanes, then
 * ((0+1)+(2+3))+((4+5)+(6+7)), then the scalar tail of K mod 8), and every product in this file
 * that feeds the model goes through it, so a token's result does not depend on the batch it is in
 * or on which of these functions computed it. */
typedef float v4f __attribute__((vector_size(16)));
typedef uint32_t v4u __attribute__((vector_size(16)));
typedef uint16_t v4h __attribute__((vector_size(8)));

/* 8 lanes as two 16-byte vectors (returning a 32-byte vector would change the ABI without AVX). */
typedef struct {
    v4f lo, hi;
} v8f;

MATH_LOOP static inline v4f load4_f32(const float *p) {
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* 4 bf16 values widened to fp32: the 16 bits become the high half of each word. */
MATH_LOOP static inline v4f load4_bf16(const uint16_t *p) {
    v4h h;
    memcpy(&h, p, sizeof h);
    v4u u = __builtin_convertvector(h, v4u) << 16;
    v4f f;
    memcpy(&f, &u, sizeof f);
    return f;
}

MATH_LOOP static inline v8f load8_f32(const float *p) {
    return (v8f){load4_f32(p), load4_f32(p + 4)};
}
MATH_LOOP static inline v8f load8_bf16(const uint16_t *p) {
    return (v8f){load4_bf16(p), load4_bf16(p + 4)};
}

/* s += a * b, lane by lane. (MATH_LOOP on these helpers too: under ASan an instrumented inline
 * function is not inlined into an uninstrumented caller, and a call per 8 weights cost 40 % of the
 * fuzzer's server.) */
MATH_LOOP static inline void fma8(v8f *s, v8f a, v8f b) {
    s->lo += a.lo * b.lo;
    s->hi += a.hi * b.hi;
}

MATH_LOOP static inline float hsum8(v8f v) {
    return ((v.lo[0] + v.lo[1]) + (v.lo[2] + v.lo[3])) +
           ((v.hi[0] + v.hi[1]) + (v.hi[2] + v.hi[3]));
}

MATH_LOOP static float dot(const float *a, const float *b, int n) {
    v8f s = {{0}, {0}};
    int i = 0;
    for (; i + 8 <= n; i += 8) fma8(&s, load8_f32(a + i), load8_f32(b + i));
    float tail = 0;
    for (; i < n; i++) tail += a[i] * b[i];
    return hsum8(s) + tail;
}

/* Up to 4 tokens' dot products with one weight row, each in dot()'s order (so bit-identical to
 * dot() per token), with each weight vector loaded once for the 4 tokens. Token u's row is
 * x + u * xs; LOAD8 and LOAD1 read the row's weights i..i+7 and i. */
#define DOTS4(LOAD8, LOAD1)                                                                        \
    do {                                                                                           \
        const float *x0 = x, *x1 = x + (nt > 1 ? xs : 0), *x2 = x + (nt > 2 ? 2 * xs : 0),         \
                    *x3 = x + (nt > 3 ? 3 * xs : 0);                                               \
        v8f s0 = {{0}, {0}}, s1 = s0, s2 = s0, s3 = s0;                                            \
        int i = 0;                                                                                 \
        for (; i + 8 <= K; i += 8) {                                                               \
            v8f w = LOAD8;                                                                         \
            fma8(&s0, load8_f32(x0 + i), w);                                                       \
            fma8(&s1, load8_f32(x1 + i), w);                                                       \
            fma8(&s2, load8_f32(x2 + i), w);                                                       \
            fma8(&s3, load8_f32(x3 + i), w);                                                       \
        }                                                                                          \
        float t0 = 0, t1 = 0, t2 = 0, t3 = 0;                                                      \
        for (; i < K; i++) {                                                                       \
            float w = LOAD1;                                                                       \
            t0 += x0[i] * w;                                                                       \
            t1 += x1[i] * w;                                                                       \
            t2 += x2[i] * w;                                                                       \
            t3 += x3[i] * w;                                                                       \
        }                                                                                          \
        out[0] = hsum8(s0) + t0;                                                                   \
        if (nt > 1) out[1] = hsum8(s1) + t1;                                                       \
        if (nt > 2) out[2] = hsum8(s2) + t2;                                                       \
        if (nt > 3) out[3] = hsum8(s3) + t3;                                                       \
    } while (0)

/* x holds nt <= 4 rows of K, xs apart; out[t] = x[t] . row. */
MATH_LOOP static void dots4_f32(const float *x, size_t xs, int nt, int K, const float *row,
                                float *out) {
    DOTS4(load8_f32(row + i), row[i]);
}

/* The same with the bf16 row widened as it is read (no row buffer: for decode a row serves one to
 * four tokens, and widening it first cost a store and a load per weight; it was most of a CPU
 * decode step, the lm_head being 201,088 rows). */
MATH_LOOP static void dots4_bf16(const float *x, size_t xs, int nt, int K, const uint16_t *row,
                                 float *out) {
    DOTS4(load8_bf16(row + i), widen_bf16(row[i]));
}

void cpu_linear_strided(const float *x, size_t x_stride, int T, int K, dense_ref W, size_t w_stride,
                        const dense_ref *b, int N, float *y, size_t y_stride) {
    int widen_rows = W.dtype == ST_F32 || T > 4;
#pragma omp parallel
    {
        float *row = widen_rows ? xmalloc((size_t)(K > 0 ? K : 1) * sizeof *row) : NULL;
#pragma omp for schedule(static)
        for (int r = 0; r < N; r++) {
            float bias = b ? dense_at(*b, (size_t)r) : 0.0f;
            if (widen_rows) dense_read(W, (size_t)r * w_stride, (size_t)K, row);
            for (int t = 0; t < T; t += 4) {
                int nt = T - t < 4 ? T - t : 4;
                float out[4];
                if (widen_rows)
                    dots4_f32(x + (size_t)t * x_stride, x_stride, nt, K, row, out);
                else
                    dots4_bf16(x + (size_t)t * x_stride, x_stride, nt, K,
                               (const uint16_t *)W.data + (size_t)r * w_stride, out);
                for (int u = 0; u < nt; u++) y[(size_t)(t + u) * y_stride + r] = out[u] + bias;
            }
        }
        free(row);
    }
}

void cpu_linear(const float *x, int T, int K, dense_ref W, const dense_ref *b, int N, float *y) {
    cpu_linear_strided(x, (size_t)K, T, K, W, (size_t)K, b, N, y, (size_t)N);
}

void cpu_sink_attention_rows(const float *q, const float *const *k_rows, const float *const *v_rows,
                             int64_t n, int head_dim, float scale, float sink, float *out) {
    float *s = xmalloc((size_t)(n ? n : 1) * sizeof *s);
    float m = sink; /* the sink joins the max so exp() never overflows */
    for (int64_t u = 0; u < n; u++) {
        s[u] = scale * dot(q, k_rows[u], head_dim);
        if (s[u] > m) m = s[u];
    }
    double denom = exp((double)sink - m);
    for (int64_t u = 0; u < n; u++) denom += (s[u] = expf(s[u] - m));
    for (int d = 0; d < head_dim; d++) out[d] = 0;
    for (int64_t u = 0; u < n; u++) {
        float p = (float)(s[u] / denom);
        for (int d = 0; d < head_dim; d++) out[d] += p * v_rows[u][d];
    }
    free(s);
}

void cpu_sink_attention(const float *q, const float *k_cache, const float *v_cache, int kv_dim,
                        int kv_head, int head_dim, int64_t k0, int64_t k1, float scale, float sink,
                        float *out) {
    int64_t n = k1 - k0 + 1;
    const float **k_rows = xmalloc((size_t)n * sizeof *k_rows),
                **v_rows = xmalloc((size_t)n * sizeof *v_rows);
    for (int64_t u = 0; u < n; u++) {
        k_rows[u] = k_cache + (size_t)(k0 + u) * kv_dim + (size_t)kv_head * head_dim;
        v_rows[u] = v_cache + (size_t)(k0 + u) * kv_dim + (size_t)kv_head * head_dim;
    }
    cpu_sink_attention_rows(q, k_rows, v_rows, n, head_dim, scale, sink, out);
    free(k_rows), free(v_rows);
}

void cpu_topk_softmax(const float *logits, int n, int k, int *idx, float *weight) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < n; e++) {
            int taken = 0;
            for (int i = 0; i < j; i++) taken |= idx[i] == e;
            if (!taken && (best < 0 || logits[e] > logits[best])) best = e;
        }
        idx[j] = best;
    }
    float m = logits[idx[0]], sum = 0;
    for (int j = 0; j < k; j++) sum += (weight[j] = expf(logits[idx[j]] - m));
    for (int j = 0; j < k; j++) weight[j] /= sum;
}

void cpu_swiglu(const float *gate_up, int n, float alpha, float limit, float *out) {
    for (int i = 0; i < n; i++) {
        float g = fminf(gate_up[2 * i], limit);
        float u = fminf(fmaxf(gate_up[2 * i + 1], -limit), limit);
        out[i] = g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
    }
}

void cpu_mxfp4_linear_part(const float *x, int T, int K, const uint8_t *blocks,
                           const uint8_t *scales, size_t row_blocks, const dense_ref *bias,
                           size_t bias_offset, int N, float *y) {
    int nb = K / 32;
#pragma omp parallel
    {
        float *row = xmalloc((size_t)(K > 0 ? K : 1) * sizeof *row);
#pragma omp for schedule(static)
        for (int r = 0; r < N; r++) {
            mxfp4_decode_row(blocks + (size_t)r * row_blocks * 16, scales + (size_t)r * row_blocks,
                             nb, row);
            float b = bias ? dense_at(*bias, bias_offset + (size_t)r) : 0.0f;
            for (int t = 0; t < T; t++) y[(size_t)t * N + r] = dot(x + (size_t)t * K, row, K) + b;
        }
        free(row);
    }
}

void cpu_mxfp4_linear(const float *x, int T, int K, const uint8_t *blocks, const uint8_t *scales,
                      dense_ref bias, size_t bias_offset, int N, float *y) {
    cpu_mxfp4_linear_part(x, T, K, blocks, scales, (size_t)K / 32, &bias, bias_offset, N, y);
}
