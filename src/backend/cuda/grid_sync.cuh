/* What the persistent kernels (moe_fused.cu, attn_stream.cu) share to run as one
 * grid whose blocks wait for each other: the grid barrier and the cooperative launch configuration.
 * Device code. */
#pragma once

#include <cuda_runtime.h>

static __device__ __forceinline__ unsigned ld_acquire_u32(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* Every block of the grid waits here until all have arrived; writes before it are visible to every
 * block after it. bar[0] counts arrivals; the last block to arrive resets it and advances bar[1],
 * which the others watch. A block reads the generation before it arrives: it cannot advance until
 * this block has arrived. sync: the block-level barrier of the threads taking part (thread 0 among
 * them): __syncthreads, or attn_stream.cu's named barrier of its consumer warps. */
template <typename Sync>
static __device__ __forceinline__ void grid_barrier_with(unsigned *bar, unsigned spin_ns,
                                                         Sync sync) {
    sync();
    if (threadIdx.x == 0) {
        const unsigned gen = ld_acquire_u32(bar + 1);
        __threadfence(); /* this block's writes (ordered by the block barrier) before the arrival */
        if (atomicAdd(bar, 1u) == gridDim.x - 1) {
            atomicExch(bar, 0u);
            __threadfence();
            atomicAdd(bar + 1, 1u);
        } else {
            const long long t0 = clock64();
            while (ld_acquire_u32(bar + 1) == gen) {
                if (spin_ns) __nanosleep(spin_ns); /* fewer polls in the way of the arrivals */
                if (clock64() - t0 > 4000000000ll) __trap(); /* ~2 s: a block never arrived */
            }
        }
        __threadfence();
    }
    sync();
}

/* A grid barrier in fewer L2 round trips, for a kernel that passes many (the step kernel: six a
 * layer). bar[0] counts every arrival of the launch: barrier n (1, 2, ...) is passed once it
 * reaches n · gridDim.x, which the caller tracks in *target (0 at the launch's start; this adds
 * gridDim.x). An arrival is one release reduction and the wait one acquire poll, where
 * grid_barrier_with reads the generation, fences, adds, and the last block resets the count,
 * fences and advances the generation: about five round trips on the last block's chain against
 * two. The count is never reset between the barriers; grid_exit_counted returns it to 0 at the
 * launch's end (so bar[0] is 0 before and after a launch, as for grid_barrier_with, which may
 * share the words: bar[1] is not touched). */
static __device__ __forceinline__ void red_release_add_u32(unsigned *p, unsigned v) {
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
template <typename Sync>
static __device__ __forceinline__ void grid_barrier_counted(unsigned *bar, unsigned *target,
                                                            Sync sync) {
    *target += gridDim.x;
    sync();
    if (threadIdx.x == 0) {
        red_release_add_u32(bar, 1u); /* this block's writes (ordered by the block barrier) */
        const long long t0 = clock64();
        while ((int)(ld_acquire_u32(bar) - *target) < 0)
            if (clock64() - t0 > 4000000000ll) __trap(); /* ~2 s: a block never arrived */
    }
    sync();
}

/* The end of a launch that used grid_barrier_counted, in place of its last barrier (the kernel's
 * end orders what follows): each block arrives once more, and the last arrival (passes · gridDim
 * + gridDim in all) sets the count back to 0. Every block has then left every earlier barrier's
 * wait, so none reads the count again. */
static __device__ __forceinline__ void grid_exit_counted(unsigned *bar, unsigned target) {
    if (threadIdx.x == 0 && atomicAdd(bar, 1u) == target + gridDim.x - 1) atomicExch(bar, 0u);
}

static __device__ __forceinline__ void grid_barrier(unsigned *bar, unsigned spin_ns) {
    grid_barrier_with(bar, spin_ns, [] { __syncthreads(); });
}

/* The launch configuration of a persistent kernel, with the cooperative attribute when `on` (the driver
 * then refuses a grid that cannot be resident at once, which the grid barrier needs); attr: the
 * caller's storage for it. */
static inline cudaLaunchConfig_t cooperative_config(unsigned grid, unsigned block, size_t smem,
                                                    cudaStream_t stream, cudaLaunchAttribute *attr,
                                                    int on) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(block);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    attr->id = cudaLaunchAttributeCooperative;
    attr->val.cooperative = 1;
    cfg.attrs = attr;
    cfg.numAttrs = on ? 1 : 0;
    return cfg;
}
