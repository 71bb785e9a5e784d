/* CUDA_CHECK(call): on failure print file:line, the call and CUDA's error string, then abort.
 * For host code of the CUDA backend and its tests; a launch is checked with
 * CUDA_CHECK(cudaGetLastError()) right after it.
 * CUDA_TRY(call): on failure return the cudaError_t to the caller (the kernel files' launch
 * functions, which report errors rather than abort). */
#ifndef GPTOSS_BACKEND_CUDA_CUDA_CHECK_H
#define GPTOSS_BACKEND_CUDA_CUDA_CHECK_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#define CUDA_CHECK(x)                                                                              \
    do {                                                                                           \
        cudaError_t cuda_check_err_ = (x);                                                         \
        if (cuda_check_err_ != cudaSuccess) {                                                      \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x,                      \
                    cudaGetErrorString(cuda_check_err_));                                          \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define CUDA_TRY(x)                                                                                \
    do {                                                                                           \
        cudaError_t cuda_try_err_ = (x);                                                           \
        if (cuda_try_err_ != cudaSuccess) return cuda_try_err_;                                    \
    } while (0)

#endif
