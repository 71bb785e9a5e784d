/* A ring of shared-memory stages filled by Hopper's bulk copy engine (TMA) and drained by consumer
 * warps, the device helpers: mbarriers and one-dimensional bulk copies (sm_90). Device code.
 *
 * Why: a kernel that streams weights reaches the DRAM's rate only if every SM keeps a steady amount
 * of bytes in flight. Loads into registers come in bursts (a warp issues its loads, waits, computes,
 * issues again: bench/NOTES.md, the wide GEMV), and each burst pays the DRAM latency under load
 * (several µs). With a ring, one producer thread keeps S stages requested; a stage is refilled as
 * soon as its consumers release it, so the copy engine always has work queued.
 *
 * Protocol, per stage s and its n-th use (n = 0, 1, …; parity n & 1):
 *   producer: wait empty[s] (parity (n − 1) & 1, skipped for n = 0); arrive on full[s] announcing the
 *             stage's bytes; issue the bulk copy, which completes full[s]'s phase when they land;
 *   consumer: wait full[s] (parity n & 1); read the stage; one arrive on empty[s] per consumer group.
 * full[s] is initialised with 1 arrival (the producer's), empty[s] with the number of consumer
 * arrivals per use. */
#pragma once

#include "backend/cuda/device_util.cuh" /* smem_u32 */

#include <stdint.h>

static __device__ __forceinline__ void mbar_init(uint64_t *bar, uint32_t arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(arrivals));
}

/* After every mbar_init of the block, before any thread (or the copy engine) uses the barriers;
 * followed by a block-wide barrier. */
static __device__ __forceinline__ void mbar_init_fence(void) {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

static __device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}

static __device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t *bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)),
                 "r"(bytes)
                 : "memory");
}

/* Returns once the phase of the given parity has completed. */
static __device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
    asm volatile("{\n"
                 " .reg .pred done;\n"
                 "WAIT_AGAIN:\n"
                 " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 " @!done bra WAIT_AGAIN;\n"
                 "}" ::"r"(smem_u32(bar)),
                 "r"(parity)
                 : "memory");
}

/* One test of the phase of the given parity: true once it has completed. */
static __device__ __forceinline__ bool mbar_try_wait(uint64_t *bar, uint32_t parity) {
    uint32_t done;
    asm volatile("{\n"
                 " .reg .pred p;\n"
                 " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 " selp.u32 %0, 1, 0, p;\n"
                 "}"
                 : "=r"(done)
                 : "r"(smem_u32(bar)), "r"(parity)
                 : "memory");
    return done != 0;
}

/* mbar_wait that ends the kernel with an error (a trap) after ~2 s instead of hanging: for kernels
 * not yet run on a device, where a wrong byte count or a lost stage would otherwise hold the GPU
 * until the caller's time limit. The clock is read only once the first test has failed. */
static __device__ __forceinline__ void mbar_wait_or_trap(uint64_t *bar, uint32_t parity) {
    if (mbar_try_wait(bar, parity)) return;
    const long long t0 = clock64();
    while (!mbar_try_wait(bar, parity))
        if (clock64() - t0 > 4000000000ll) __trap();
}

/* bytes (a multiple of 16, both addresses 16-byte aligned) from global src to shared dst; their
 * arrival completes the transaction count announced on bar. */
static __device__ __forceinline__ void bulk_copy_g2s(void *dst, const void *src, uint32_t bytes,
                                                     uint64_t *bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
        "[%3];" ::"r"(smem_u32(dst)),
        "l"(src), "r"(bytes), "r"(smem_u32(bar))
        : "memory");
}

/* Asks the bulk copy engine to bring [src, src + bytes) into L2 (no destination, no completion to
 * wait for): for weights a kernel will read after its PDL wait but has no shared memory to stage.
 * src 16-byte aligned, bytes a multiple of 16. */
static __device__ __forceinline__ void bulk_prefetch_l2(const void *src, uint32_t bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
}

/* The L2 cache policy (createpolicy) evict_first, for the copies below of weights streamed once (a
 * step reads each byte once: they should not push out lines still to be read). */
static __device__ __forceinline__ uint64_t l2_policy_evict_first(void) {
    uint64_t p;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}

/* bulk_copy_g2s with an L2 cache policy (l2_policy_evict_first). */
static __device__ __forceinline__ void
bulk_copy_g2s_hint(void *dst, const void *src, uint32_t bytes, uint64_t *bar, uint64_t policy) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint "
                 "[%0], [%1], %2, [%3], %4;" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(policy)
                 : "memory");
}
