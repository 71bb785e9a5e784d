/* The host-side switches of programmatic dependent launch (pdl.cuh has the launch and the contract),
 * callable from C. */
#ifndef GPTOSS_BACKEND_CUDA_PDL_H
#define GPTOSS_BACKEND_CUDA_PDL_H

#ifdef __cplusplus
extern "C" {
#endif

/* GPTOSS_PDL=1: every pdl_launch with the attribute (off by default: pdl.cuh). */
int pdl_enabled(void);

/* The shared-memory carveout (percent of the most an SM can give, cudaLaunchAttribute
 * PreferredSharedMemoryCarveout) every pdl_launch asks for; -1: none (the driver's choice).
 * Why: a block of a kernel launched early (PDL) can share an SM with its predecessor's blocks only
 * if the SM's L1/shared split already fits both; an SM changes its split only once it is empty, so
 * with the driver choosing a small split for a 64 KB attention block, a 145 KB early block waits
 * for the attention to drain — and starts no earlier than without PDL. With every kernel asking for
 * the largest split, no SM has to drain. Set by the CUDA backend when an early form is on (gemv.h);
 * GPTOSS_CARVEOUT=0..100 or "none" overrides it (measurements). */
void pdl_set_carveout(int percent);
int pdl_carveout(void);

#ifdef __cplusplus
}
#endif

#endif
