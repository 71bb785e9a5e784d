/* The shared-memory carveout trial (carveout.h). */
#include "backend/cuda/carveout.h"

#include "base/env_switch.h"

enum { CARVEOUT_UNSET = 101 }; /* env_switch's default: not a carveout */

static int g_carveout = -1;

int carveout_percent(void) {
    const int v = env_switch(&g_carveout, "GPTOSS_CARVEOUT", CARVEOUT_UNSET, 0, 100);
    return v == CARVEOUT_UNSET ? -1 : v;
}

cudaError_t carveout_apply(const void *fn) {
    const int v = carveout_percent();
    if (v < 0) return cudaSuccess;
    return cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout, v);
}
