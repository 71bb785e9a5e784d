/* The tail-split trial's work map (moe_plan.tail_split; moe_small.cuh's small_begin_tail), as a
 * plain integer function that the kernel runs on the device and tests/test_moe_tail_plan.c runs on
 * the host: which item and which K split block b of the down projection takes. Plain C, host and
 * device.
 *
 * Of n items (touched experts × row blocks) and `slots` resident blocks, the first
 * W = ⌊n / slots⌋ · slots (the full waves) run whole; the R = n − W of the last partial wave are
 * split over K f = min(S, ⌊slots / R⌋) ways (at least 1), consecutive blocks taking one item's
 * splits. Blocks from W + R·f on have nothing to do: a grid of n + slots blocks always covers the
 * map, whatever n is at run time. */
#ifndef GPTOSS_BACKEND_CUDA_MOE_TAIL_PLAN_H
#define GPTOSS_BACKEND_CUDA_MOE_TAIL_PLAN_H

#ifdef __CUDACC__
#define MTP_FN static __host__ __device__ __forceinline__
#else
#define MTP_FN static inline
#endif

/* Block b's item (*item), its split (*s) and the item's split count (*nsplit: 1 for a whole item);
 * 0 when b has nothing to do. n ≥ 0, slots ≥ 1, S ≥ 1. */
MTP_FN int mtp_block(int b, int n, int slots, int S, int *item, int *s, int *nsplit) {
    const int W = n / slots * slots, R = n - W;
    if (b < W) {
        *item = b, *s = 0, *nsplit = 1;
        return 1;
    }
    int f = R > 0 ? slots / R : 1;
    f = f < 1 ? 1 : f > S ? S : f;
    const int j = b - W;
    if (j >= R * f) return 0;
    *item = W + j / f, *s = j % f, *nsplit = f;
    return 1;
}

#endif
