/* L2 prefetch kernels (prefetch.h).
 *
 * One `cp.async.bulk.prefetch.L2.global [p], n` asks the SM's copy engine (TMA) to bring n bytes
 * into L2; it returns at once and the kernel may exit while the bytes are on their way. A request
 * is cut into 4 KB chunks, one chunk per thread, spread over many small blocks so that the copy
 * engines of many SMs share the work (one SM's engine alone would issue the requests of 24 MB too
 * slowly to run ahead of the kernel that needs them). There is no CPU reference: nothing a kernel
 * reads changes, so the check is that the step's outputs stay bit-identical (runner tests) and the
 * benchmark is the step itself (bench/NOTES.md). */
#include "backend/cuda/prefetch.h"

#include <stdlib.h>

enum { PF_CHUNK = 4096, PF_THREADS = 32, PF_MAX_BLOCKS = 1024 };

static __device__ __forceinline__ void bulk_prefetch_l2(uintptr_t p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#else
    (void)p, (void)bytes;
#endif
}

/* One 128-byte line through the load/store unit instead of the copy engine. */
static __device__ __forceinline__ void line_prefetch_l2(uintptr_t p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p) : "memory");
}

/* How the kernels prefetch (GPTOSS_L2_PREFETCH_MODE, for measurements): 0 bulk copies by the copy
 * engine, 1 nothing (the side branch's own cost), 2 one prefetch instruction per 128-byte line. */
enum { PF_BULK = 0, PF_DRY = 1, PF_LINES = 2 };

/* The 16-byte aligned interior [lo, hi) of [p, p + bytes), chunk c by worker c, c + n, … */
static __device__ void prefetch_span(uintptr_t p, size_t bytes, unsigned worker, unsigned workers,
                                     int mode) {
    const uintptr_t lo = (p + 15) & ~(uintptr_t)15, hi = (p + bytes) & ~(uintptr_t)15;
    if (mode == PF_DRY) return;
    if (mode == PF_LINES) {
        for (uintptr_t a = lo + (uintptr_t)worker * 128; a < hi; a += (uintptr_t)workers * 128)
            line_prefetch_l2(a);
        return;
    }
    for (uintptr_t a = lo + (uintptr_t)worker * PF_CHUNK; a < hi;
         a += (uintptr_t)workers * PF_CHUNK)
        bulk_prefetch_l2(a, (uint32_t)(hi - a < PF_CHUNK ? hi - a : PF_CHUNK));
}

__global__ void __launch_bounds__(PF_THREADS)
    l2_prefetch_kernel(uintptr_t p, size_t bytes, int mode) {
    prefetch_span(p, bytes, blockIdx.x * PF_THREADS + threadIdx.x, gridDim.x * PF_THREADS, mode);
}

/* blockIdx.y: the expert's place in touched[]; blockIdx.x · 32 + lane: the chunk worker. */
__global__ void __launch_bounds__(PF_THREADS)
    l2_prefetch_experts_kernel(uintptr_t base0, size_t stride0, uintptr_t base1, size_t stride1,
                               const int *touched, const int *n_touched, int max_experts,
                               int mode) {
    const int n = *n_touched;
    if (n > max_experts || (int)blockIdx.y >= n) return;
    const size_t e = (size_t)touched[blockIdx.y];
    const unsigned worker = blockIdx.x * PF_THREADS + threadIdx.x, workers = gridDim.x * PF_THREADS;
    prefetch_span(base0 + e * stride0, stride0, worker, workers, mode);
    if (base1) prefetch_span(base1 + e * stride1, stride1, worker, workers, mode);
}

static unsigned blocks_for(size_t bytes) {
    const size_t chunks = (bytes + PF_CHUNK - 1) / PF_CHUNK;
    const size_t b = (chunks + PF_THREADS - 1) / PF_THREADS;
    return (unsigned)(b < 1 ? 1 : b > (size_t)PF_MAX_BLOCKS ? (size_t)PF_MAX_BLOCKS : b);
}

static int prefetch_mode(void) {
    static int cached = -1;
    if (cached < 0) {
        const char *v = getenv("GPTOSS_L2_PREFETCH_MODE");
        cached = v ? (int)strtol(v, NULL, 0) : PF_BULK;
    }
    return cached;
}

extern "C" int l2_prefetch_mask(void) {
    static int cached = -1; /* benign race: every thread computes the same value */
    if (cached < 0) {
        const char *v = getenv("GPTOSS_L2_PREFETCH");
        cached = v ? (int)(strtol(v, NULL, 0) & 15) : 0;
    }
    return cached;
}

extern "C" cudaError_t l2_prefetch(const void *p, size_t bytes, cudaStream_t stream) {
    if (!p || bytes < 16) return cudaSuccess;
    l2_prefetch_kernel<<<blocks_for(bytes), PF_THREADS, 0, stream>>>((uintptr_t)p, bytes,
                                                                     prefetch_mode());
    return cudaGetLastError();
}

extern "C" cudaError_t l2_prefetch_experts(const void *base0, size_t stride0, const void *base1,
                                           size_t stride1, const int *touched, const int *n_touched,
                                           int max_experts, cudaStream_t stream) {
    if (!base0 || !touched || !n_touched || max_experts < 1) return cudaErrorInvalidValue;
    const dim3 grid(blocks_for(stride0), (unsigned)max_experts);
    l2_prefetch_experts_kernel<<<grid, PF_THREADS, 0, stream>>>(
        (uintptr_t)base0, stride0, (uintptr_t)base1, base1 ? stride1 : 0, touched, n_touched,
        max_experts, prefetch_mode());
    return cudaGetLastError();
}
