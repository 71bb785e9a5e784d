/* CUDA_CHECK(call): if a CUDA runtime call fails, print file:line, the call and the CUDA error string,
 * then exit(1). For programs and tests; library functions return their cudaError_t instead. */
#ifndef GPTOSS_BACKEND_CUDA_CUDA_CHECK_H
#define GPTOSS_BACKEND_CUDA_CUDA_CHECK_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CUDA_CHECK(x)                                                                              \
    do {                                                                                           \
        cudaError_t cuda_check_err_ = (x);                                                         \
        if (cuda_check_err_ != cudaSuccess) {                                                      \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,                             \
                    cudaGetErrorString(cuda_check_err_));                                          \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#endif
