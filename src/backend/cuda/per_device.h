/* Setup done once per GPU, not once per process: a kernel's attributes (cudaFuncSetAttribute, e.g.
 * more than 48 KiB of dynamic shared memory) belong to the current device's context, so with
 * tensor parallelism every GPU needs its own call. A mask holds one bit per device; launch threads of
 * several ranks may test and mark it at once (relaxed atomics: at worst a setup runs twice). Host
 * code, C or C++. */
#ifndef GPTOSS_BACKEND_CUDA_PER_DEVICE_H
#define GPTOSS_BACKEND_CUDA_PER_DEVICE_H

#include <cuda_runtime_api.h>
#include <stdbool.h>

/* The current device's bit (0 when it cannot be told: no device, or beyond 64). */
static inline unsigned long long per_device_bit(void) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 0;
    return 1ull << dev;
}

/* Whether the current device's setup is done. */
static inline bool per_device_done(const unsigned long long *mask) {
    const unsigned long long bit = per_device_bit();
    return bit && (__atomic_load_n(mask, __ATOMIC_RELAXED) & bit);
}

/* Marks it done (after the setup succeeded). */
static inline void per_device_mark(unsigned long long *mask) {
    __atomic_fetch_or(mask, per_device_bit(), __ATOMIC_RELAXED);
}

/* The current device's SM count (0 when it cannot be told; the error is cleared): the grid of the
 * one-block-an-SM kernels. */
static inline int per_device_sm_count(void) {
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return sms;
}

#endif
