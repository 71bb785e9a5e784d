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
