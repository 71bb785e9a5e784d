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

static float dot(const float *a, const float *b, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

void cpu_linear(const float *x, int T, int K, dense_ref W, const dense_ref *b, int N, float *y) {
#pragma omp parallel
    {
        float *row = xmalloc((size_t)K * sizeof *row);
#pragma omp for schedule(static)
        for (int r = 0; r < N; r++) {
            dense_read(W, (size_t)r * K, (size_t)K, row);
            float bias = b ? dense_at(*b, (size_t)r) : 0.0f;
            for (int t = 0; t < T; t++)
                y[(size_t)t * N + r] = dot(x + (size_t)t * K, row, K) + bias;
        }
        free(row);
    }
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

void cpu_mxfp4_linear(const float *x, int T, int K, const uint8_t *blocks, const uint8_t *scales,
                      dense_ref bias, size_t bias_offset, int N, float *y) {
    int nb = K / 32;
#pragma omp parallel
    {
        float *row = xmalloc((size_t)K * sizeof *row);
#pragma omp for schedule(static)
        for (int r = 0; r < N; r++) {
            mxfp4_decode_row(blocks + (size_t)r * nb * 16, scales + (size_t)r * nb, nb, row);
            float b = dense_at(bias, bias_offset + (size_t)r);
            for (int t = 0; t < T; t++) y[(size_t)t * N + r] = dot(x + (size_t)t * K, row, K) + b;
        }
        free(row);
    }
}
