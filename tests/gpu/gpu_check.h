/* Helpers shared by the GPU tests (compiled by nvcc as C++): fresh seeds, random bf16 data, NaN
 * poisoning, relative error that never lets a NaN pass, device fills, and timing by graph replay. */
#ifndef GPTOSS_TESTS_GPU_CHECK_H
#define GPTOSS_TESTS_GPU_CHECK_H

#include "check.h"

#include "backend/cuda/cuda_check.h"
extern "C" {
#include "base/numfmt.h"
#include "base/rng.h"
}

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* --seed N reproduces a run; otherwise every run draws a new seed (printed). */
static inline uint64_t gpu_test_seed(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--seed")) return strtoull(argv[i + 1], NULL, 0);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return splitmix64((uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec);
}
static inline int gpu_test_flag(int argc, char **argv, const char *flag) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], flag)) return 1;
    return 0;
}

static inline float bf16_round(float x) {
    return bf16_to_f32(f32_to_bf16(x));
}
static inline float rng_unif(rng_t *r, float lo, float hi) {
    return lo + (hi - lo) * rng_uniform01(rng_next(r));
}
/* Standard normal (Box-Muller). */
static inline float rng_normal(rng_t *r) {
    double u1 = rng_uniform01d(rng_next(r)), u2 = rng_uniform01d(rng_next(r));
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
static inline int rng_below(rng_t *r, int n) {
    return (int)(rng_next(r) % (uint64_t)n);
}
static inline void rng_shuffle(rng_t *r, int32_t *a, int n) {
    for (int i = n - 1; i > 0; i--) {
        int j = rng_below(r, i + 1);
        int32_t t = a[i];
        a[i] = a[j], a[j] = t;
    }
}

/* All-ones bytes: a NaN in bf16 (0xFFFF) and in fp32 (0xFFFFFFFF). */
static inline void gpu_poison(void *p, size_t bytes) {
    CUDA_CHECK(cudaMemset(p, 0xFF, bytes));
}
static inline int bf16_is_poison(uint16_t h) {
    return h == 0xFFFF;
}

/* ||out - ref|| / ||ref|| over n values; +inf when out holds a NaN or an infinity. */
typedef struct {
    double num, den;
    long nonfinite;
} relerr_acc;
static inline void relerr_add(relerr_acc *a, float out, float ref) {
    if (!isfinite(out)) {
        a->nonfinite++;
        return;
    }
    double d = (double)out - (double)ref;
    a->num += d * d, a->den += (double)ref * ref;
}
static inline double relerr_get(const relerr_acc *a) {
    if (a->nonfinite) return INFINITY;
    return a->den > 0 ? sqrt(a->num / a->den) : sqrt(a->num);
}

static inline void *gpu_alloc(size_t bytes) {
    void *p = NULL;
    CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 16));
    return p;
}
static inline void *gpu_upload(const void *host, size_t bytes) {
    void *p = gpu_alloc(bytes);
    if (bytes) CUDA_CHECK(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice));
    return p;
}

/* Device fill with bf16 values uniform in [-scale, scale) (for benchmarks: never time zeros). */
static __global__ void gpu_fill_bf16_kernel(uint16_t *p, size_t n, uint64_t seed, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const uint64_t h = splitmix64(seed ^ splitmix64(i));
        const float u = rng_uniform01(h);
        p[i] = (uint16_t)(__float_as_uint((2.f * u - 1.f) * scale) >> 16);
    }
}
static inline void gpu_fill_bf16(uint16_t *p, size_t n, uint64_t seed, float scale) {
    gpu_fill_bf16_kernel<<<1024, 256>>>(p, n, seed, scale);
    CUDA_CHECK(cudaGetLastError());
}
/* The same values in fp32. */
static __global__ void gpu_fill_f32_kernel(float *p, size_t n, uint64_t seed, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = (2.f * rng_uniform01(splitmix64(seed ^ splitmix64(i))) - 1.f) * scale;
}
static inline void gpu_fill_f32(float *p, size_t n, uint64_t seed, float scale) {
    gpu_fill_f32_kernel<<<1024, 256>>>(p, n, seed, scale);
    CUDA_CHECK(cudaGetLastError());
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}
static inline float median_f(float *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_float);
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

/* Times a captured graph that holds `reps` launches of the work: warm-up replays, then the median over
 * `trials` replays of the time per launch, in microseconds. */
static inline float gpu_time_graph_us(cudaGraphExec_t exec, cudaStream_t st, int reps, int trials) {
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; i++) CUDA_CHECK(cudaGraphLaunch(exec, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    float *ts = (float *)malloc((size_t)trials * sizeof(float));
    for (int i = 0; i < trials; i++) {
        CUDA_CHECK(cudaEventRecord(e0, st));
        CUDA_CHECK(cudaGraphLaunch(exec, st));
        CUDA_CHECK(cudaEventRecord(e1, st));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float ms;
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        ts[i] = ms * 1000.f / (float)reps;
    }
    float med = median_f(ts, trials);
    free(ts);
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    return med;
}

/* Ceilings measured on this workplace's H200 (KINDS.md): copy bandwidth and dense bf16 matrix rate. */
#define H200_GBPS   4200.0
#define H200_TFLOPS 790.0

#endif
