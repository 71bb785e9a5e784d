/* Helpers shared by the GPU tests of the GEMM, MoE and norm kernels: random bf16 data, relative
 * errors, NaN poisoning, device buffers, and CUDA-event timing for the --bench mode.
 *
 * Every check draws fresh random data (seeded from the clock unless GPTOSS_TEST_SEED is set; the seed
 * is printed so a failure can be replayed). */
#ifndef GPTOSS_TESTS_GPU_MOE_TEST_UTIL_H
#define GPTOSS_TESTS_GPU_MOE_TEST_UTIL_H

#include "check.h"

extern "C" {
#include "base/numfmt.h"
#include "base/rng.h"
}
#include "backend/cuda/cuda_check.h"

#include <algorithm>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vector>

/* Peak figures the benchmark rows are held against (DESIGN.md, performance-anchors §8). */
static const double TU_PEAK_GBPS = 4200.0;
static const double TU_PEAK_TFLOPS = 790.0;

static rng_t tu_rng;

static inline uint64_t tu_seed_from_env(void) {
    const char *s = getenv("GPTOSS_TEST_SEED");
    if (s && *s) return strtoull(s, NULL, 0);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
}

static inline void tu_init(const char *name) {
    const uint64_t seed = tu_seed_from_env();
    rng_seed(&tu_rng, seed);
    fprintf(stderr, "%s: seed %llu (set GPTOSS_TEST_SEED to replay)\n", name,
            (unsigned long long)seed);
}

static inline float tu_uniform(float lo, float hi) {
    return lo + (hi - lo) * rng_uniform01(rng_next(&tu_rng));
}

/* Fills n bf16 values uniform in [lo, hi); also returns their exact float values when f != NULL. */
static inline void tu_fill_bf16(uint16_t *b, float *f, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) {
        b[i] = f32_to_bf16(tu_uniform(lo, hi));
        if (f) f[i] = bf16_to_f32(b[i]);
    }
}

static inline void tu_fill_bytes(uint8_t *p, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v = rng_next(&tu_rng);
        memcpy(p + i, &v, 8);
    }
    for (; i < n; i++) p[i] = (uint8_t)rng_next(&tu_rng);
}

/* ‖a − ref‖ / ‖ref‖ in double; NaN if either holds a non-finite value. */
static inline double tu_rel_err(const float *a, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(ref[i])) return NAN;
        const double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static inline size_t tu_count_nonfinite_f32(const float *a, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += !isfinite(a[i]);
    return c;
}
static inline size_t tu_count_nonfinite_bf16(const uint16_t *a, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += (a[i] & 0x7f80u) == 0x7f80u;
    return c;
}

/* NaN poison: all-ones bytes are NaN in both bf16 and fp32. */
static inline void tu_poison(void *d, size_t bytes, cudaStream_t s) {
    CUDA_CHECK(cudaMemsetAsync(d, 0xff, bytes, s));
}

template <typename T> static inline T *tu_dev_alloc(size_t n) {
    T *p = NULL;
    CUDA_CHECK(cudaMalloc((void **)&p, n * sizeof(T) > 0 ? n * sizeof(T) : 1));
    return p;
}
template <typename T> static inline T *tu_dev_upload(const T *h, size_t n) {
    T *p = tu_dev_alloc<T>(n);
    CUDA_CHECK(cudaMemcpy(p, h, n * sizeof(T), cudaMemcpyHostToDevice));
    return p;
}
template <typename T> static inline void tu_download(T *h, const T *d, size_t n) {
    CUDA_CHECK(cudaMemcpy(h, d, n * sizeof(T), cudaMemcpyDeviceToHost));
}

/* A router case on the device: weights [E][K] in ±0.05, tokens [T][K] in ±2 and their split
 * input's lo halves in ±0.01 (lo NULL when not asked for), bias [E] in ±0.5 (test_gemv's route
 * checks and test_router_mma). Free with tu_router_free. */
struct tu_router {
    uint16_t *w, *x, *lo, *bias;
};
static inline tu_router tu_router_upload(int E, int T, int K, bool with_lo) {
    const size_t wn = (size_t)E * K, xn = (size_t)T * K;
    std::vector<uint16_t> hw(wn), hx(xn), hl(xn), hb(E);
    tu_fill_bf16(hw.data(), NULL, wn, -0.05f, 0.05f);
    tu_fill_bf16(hx.data(), NULL, xn, -2.0f, 2.0f);
    tu_fill_bf16(hl.data(), NULL, xn, -0.01f, 0.01f);
    tu_fill_bf16(hb.data(), NULL, E, -0.5f, 0.5f);
    tu_router r;
    r.w = tu_dev_upload(hw.data(), wn), r.x = tu_dev_upload(hx.data(), xn);
    r.lo = with_lo ? tu_dev_upload(hl.data(), xn) : NULL, r.bias = tu_dev_upload(hb.data(), E);
    return r;
}
static inline void tu_router_free(tu_router *r) {
    CUDA_CHECK(cudaFree(r->w));
    CUDA_CHECK(cudaFree(r->x));
    if (r->lo) CUDA_CHECK(cudaFree(r->lo));
    CUDA_CHECK(cudaFree(r->bias));
}

static inline int tu_sm_count(void) {
    int dev = 0, n = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    return n;
}

static inline bool tu_has_flag(int argc, char **argv, const char *flag) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], flag)) return true;
    return false;
}

/* Median time in µs of `reps` runs of fn(rep) (after `warmup` runs), each bracketed by its own pair
 * of CUDA events on `stream`. fn gets the repetition number so it can rotate weight copies. */
template <typename F>
static inline double tu_time_us(cudaStream_t stream, int warmup, int reps, F fn) {
    for (int i = 0; i < warmup; i++) fn(i);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<cudaEvent_t> ev(2 * reps);
    for (auto &e : ev) CUDA_CHECK(cudaEventCreate(&e));
    for (int i = 0; i < reps; i++) {
        CUDA_CHECK(cudaEventRecord(ev[2 * i], stream));
        fn(warmup + i);
        CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], stream));
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaGetLastError());
    std::vector<double> t(reps);
    for (int i = 0; i < reps; i++) {
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
        t[i] = ms * 1000.0;
    }
    for (auto &e : ev) CUDA_CHECK(cudaEventDestroy(e));
    std::sort(t.begin(), t.end());
    return t[reps / 2];
}

static inline void tu_bench_header(void) {
    printf("| case | time µs | bytes MB | GB/s | of 4.2 TB/s | TFLOP/s | of 790 |\n");
    printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
}

/* One markdown row; flops = 0 leaves the compute columns empty. */
static inline void tu_bench_row(const char *name, double us, double bytes, double flops) {
    const double gbps = bytes / (us * 1e-6) / 1e9;
    if (flops > 0) {
        const double tf = flops / (us * 1e-6) / 1e12;
        printf("| %s | %.1f | %.2f | %.0f | %.0f%% | %.1f | %.1f%% |\n", name, us, bytes / 1e6,
               gbps, 100.0 * gbps / TU_PEAK_GBPS, tf, 100.0 * tf / TU_PEAK_TFLOPS);
    } else {
        printf("| %s | %.1f | %.2f | %.0f | %.0f%% | | |\n", name, us, bytes / 1e6, gbps,
               100.0 * gbps / TU_PEAK_GBPS);
    }
    fflush(stdout);
}

#endif
