/* A trial, off by default (GPTOSS_CARVEOUT=N, 0-100): the preferred shared-memory carveout (the
 * share of each SM's 256 KB of L1 and shared memory given to shared memory) of the one-token
 * decode step's short kernels, set to N % (cudaFuncAttributePreferredSharedMemoryCarveout).
 *
 * Why: at batch 1 a layer is attn_stream (218 KB of shared memory a block: the largest carveout),
 * route_sums (one block, 1.5 KB), gate_up and down (47 KB a block). Where the driver gives the
 * short kernels a smaller carveout, an SM reconfigures its L1 and shared memory between each pair
 * of kernels of different carveouts, twice a layer; a carveout of 100 for every kernel of the
 * layer makes them all the same. Unset (the default), nothing is set: the driver's choice.
 * Plain C header. */
#ifndef GPTOSS_BACKEND_CUDA_CARVEOUT_H
#define GPTOSS_BACKEND_CUDA_CARVEOUT_H

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The switch: N in [0, 100], or -1 (unset, or not a whole number in range: nothing is set). Read
 * once. */
int carveout_percent(void);

/* Sets kernel fn's preferred carveout to carveout_percent() when that is not -1. */
cudaError_t carveout_apply(const void *fn);

#ifdef __cplusplus
}
#endif

#endif
