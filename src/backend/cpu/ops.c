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

MATH_LOOP static float dot(const float *a, const float *b, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* Up to 4 tokens' dot products with one weight row: each token keeps its own running sum, added in
 * the order i = 0..K-1 exactly as dot() does (so the results are bit-identical to calling dot() per
 * token), but the 4 sums are independent chains, so the adds overlap instead of each waiting for
 * the last, and each weight is loaded once for the 4 tokens. Token u's row is x + u * xs. */
#define DOTS4(LOAD)                                                                                \
    do {                                                                                           \
        const float *x0 = x, *x1 = x + (nt > 1 ? xs : 0), *x2 = x + (nt > 2 ? 2 * xs : 0),         \
                    *x3 = x + (nt > 3 ? 3 * xs : 0);                                               \
        float s0 = 0, s1 = 0, s2 = 0, s3 = 0;                                                      \
        for (int i = 0; i < K; i++) {                                                              \
            float w = LOAD;                                                                        \
            s0 += x0[i] * w;                                                                       \
            s1 += x1[i] * w;                                                                       \
            s2 += x2[i] * w;                                                                       \
            s3 += x3[i] * w;                                                                       \
        }                                                                                          \
        out[0] = s0;                                                                               \
        if (nt > 1) out[1] = s1;                                                                   \
        if (nt > 2) out[2] = s2;                                                                   \
        if (nt > 3) out[3] = s3;                                                                   \
    } while (0)

/* x holds nt <= 4 rows of K, xs apart; out[t] = x[t] . row. */
MATH_LOOP static void dots4_f32(const float *x, size_t xs, int nt, int K, const float *row,
                                float *out) {
    DOTS4(row[i]);
}

/* The same with the bf16 row widened as it is read (no row buffer: for decode a row serves one to
 * four tokens, and widening it first cost a store and a load per weight; it was most of a CPU
 * decode step, the lm_head being 201,088 rows). */
MATH_LOOP static void dots4_bf16(const float *x, size_t xs, int nt, int K, const uint16_t *row,
                                 float *out) {
    DOTS4(widen_bf16(row[i]));
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
