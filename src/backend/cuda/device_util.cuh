/* Device helpers shared by the kernel files: bf16 bit conversions, the streaming 16-byte load, the
 * bf16 tensor-core MMA, and cp.async. One definition each; every kernel that needs one of these
 * includes this header rather than writing its own (the PTX and the cache hints are chosen once).
 *
 * bf16 values travel as uint16_t bit patterns (the headers of the backend stay plain C), two of them
 * packed into a uint32_t "bf16x2" with the lower-index value in the low half, as the tensor cores
 * and 16-byte vector loads want them. bf16 is the top half of an fp32, so widening is a shift;
 * narrowing rounds to nearest even (cvt.rn: NaN stays NaN). */
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

/* ---- bf16 <-> fp32 ---- */

/* The bf16 in the low 16 bits of h (higher bits are ignored), widened exactly. */
static __device__ __forceinline__ float bf16_bits_to_f32(uint32_t h) {
    return __uint_as_float(h << 16);
}

/* The two halves of a bf16x2 word, widened exactly. */
static __device__ __forceinline__ float bf16x2_lo(uint32_t u) {
    return bf16_bits_to_f32(u);
}
static __device__ __forceinline__ float bf16x2_hi(uint32_t u) {
    return __uint_as_float(u & 0xffff0000u);
}

/* Eight bf16 (one 16-byte vector, lowest index in .x's low half) -> eight floats. */
static __device__ __forceinline__ void unpack_bf16x8(uint4 u, float f[8]) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = bf16_bits_to_f32(w[i] & 0xffffu);
        f[2 * i + 1] = bf16_bits_to_f32(w[i] >> 16);
    }
}

/* fp32 -> bf16 bits, round to nearest even. */
static __device__ __forceinline__ uint16_t f32_to_bf16_bits(float f) {
    uint16_t r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
}

/* Two floats -> one bf16x2 word (each rounded to nearest even), lo in the low half. */
static __device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;"
        : "=r"(r)
        : "f"(hi), "f"(lo)); /* first source -> upper half */
    return r;
}

/* ---- loads ---- */

/* Asks for the line holding p in this SM's L1 (and L2) without waiting for it: for a few bytes a
 * kernel reads only at its end (a bias, a routing entry), so that the read there is an L1 hit
 * instead of a round trip to DRAM after everything else. p must be a global address. */
static __device__ __forceinline__ void prefetch_l1(const void *p) {
    asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
}

/* ---- clocks ---- */

/* %globaltimer: nanoseconds, the same on every SM (a probe's marks across blocks). */
static __device__ __forceinline__ unsigned long long global_ns(void) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
/* Its low 32 bits (one register: spans of a few seconds). */
static __device__ __forceinline__ unsigned global_ns_lo(void) {
    unsigned t;
    asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(t));
    return t;
}

/* A basic-block boundary ptxas cannot remove: the loads issued before it stay before it. ptxas
 * schedules global loads late — next to their first use when it reuses one register quad for
 * several loads — and a branch on an opaque value (the clock, never all ones in practice; the
 * branch only skips an empty asm) is the one thing its scheduler does not move them across
 * (bench/NOTES.md, session 16). */
static __device__ __forceinline__ void sched_fence(void) {
    uint32_t c;
    asm volatile("mov.u32 %0, %%clock;" : "=r"(c));
    if (c == 0xFFFFFFFFu) asm volatile("nanosleep.u32 0;");
}

/* A 16-byte streaming load of read-only data that is used once: through the non-coherent path,
 * without allocating in L1 (weights that would only evict what is reused). */
static __device__ __forceinline__ uint4 ldg_stream16(const void *p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

/* ---- tensor cores: mma.sync m16n8k16, bf16 inputs, fp32 accumulators ----
 * c[16x8] += A[16x16] B[16x8]. With g = lane / 4 and t = lane % 4, each lane holds
 *   A: a0 = A[g][2t,2t+1]  a1 = A[g+8][2t,2t+1]  a2 = A[g][2t+8,2t+9]  a3 = A[g+8][2t+8,2t+9]
 *   B: b0 = B[2t,2t+1][g]  b1 = B[2t+8,2t+9][g]
 *   C: c0,c1 = C[g][2t,2t+1]  c2,c3 = C[g+8][2t,2t+1]
 * (each a/b register a bf16x2 word, the lower k in the low half). */
static __device__ __forceinline__ void mma_bf16_16816(float c[4], uint32_t a0, uint32_t a1,
                                                      uint32_t a2, uint32_t a3, uint32_t b0,
                                                      uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
/* Where C[row][col] (row < 16, col < 8) of an accumulator lives, by the C layout above: lane
 * mma_c_lane, register mma_c_reg. Kernels that add several warps' accumulators in shared memory
 * read them back through these. */
static __device__ __forceinline__ int mma_c_lane(int row, int col) {
    return (row & 7) * 4 + (col >> 1);
}
static __device__ __forceinline__ int mma_c_reg(int row, int col) {
    return (row >> 3) * 2 + (col & 1);
}
/* The same with A as a fragment array {a0, a1, a2, a3}. */
static __device__ __forceinline__ void mma_bf16_16816(float c[4], const uint32_t a[4], uint32_t b0,
                                                      uint32_t b1) {
    mma_bf16_16816(c, a[0], a[1], a[2], a[3], b0, b1);
}

/* ---- cp.async: global -> shared copies that do not pass through registers ---- */

/* The shared-memory address (state space .shared) of a generic pointer into shared memory. */
static __device__ __forceinline__ uint32_t smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* Copies 16 bytes, through L2 only (.cg); reads src_bytes (0 or 16) of them and zero-fills the rest,
 * so src_bytes = 0 writes 16 zeros without reading src. */
static __device__ __forceinline__ void cp_async16(uint32_t smem_dst, const void *src,
                                                  int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}
/* Closes the group of copies issued since the last commit. */
static __device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}
/* Waits until at most N committed groups are still in flight. */
template <int N> static __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* 16 bytes from shared memory at a 32-bit shared-window address (__cvta_generic_to_shared), so a
 * loop can keep one register for the address instead of a generic pointer. volatile: it must not
 * move above the __syncthreads that published the data. */
static __device__ __forceinline__ uint4 lds128(uint32_t addr) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(addr));
    return v;
}

/* The "last block" hand-off: every thread of every block calls it once it has written what the last
 * block will read; it returns true in every thread of the last block to arrive. No fences: the
 * block barrier orders every thread's stores before thread 0's arrival, an atomic add with release
 * and acquire semantics at GPU scope publishes them (release is cumulative: it covers what the
 * barrier ordered before it) and, in the last block, orders the reads after it, which the next
 * barrier passes on to the block's other threads (the pattern of CUTLASS's GenericBarrier). The
 * last block reads the others' data through L2 (ld.global.cg) and resets the counter to zero for
 * the next launch. */
static __device__ __forceinline__ bool last_block_arrive(int *counter) {
    __shared__ int s_last;
    __syncthreads();
    if (threadIdx.x == 0) {
        int old;
        asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;"
                     : "=r"(old)
                     : "l"(counter)
                     : "memory");
        s_last = old == (int)(gridDim.x * gridDim.y * gridDim.z) - 1;
    }
    __syncthreads();
    return s_last != 0;
}
