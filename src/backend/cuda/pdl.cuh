/* Programmatic dependent launch (PDL): let the next kernel's blocks be launched while this one
 * finishes, so the launch latency between two small kernels (~1–3 µs, ten times a layer at batch
 * 1) hides behind the tail of the first.
 *
 * The contract has two halves. The host launches a kernel with
 * cudaLaunchAttributeProgrammaticStreamSerialization (pdl_launch below); such a kernel may start
 * before its predecessor in the stream has finished. So every kernel launched that way calls
 * pdl_prologue() first, in every thread, before it touches global memory: griddepcontrol.wait
 * returns once the predecessor grid has completed and its writes are visible (a no-op when the
 * kernel was launched without the attribute). Calling it before any early return also keeps the
 * chain transitive: no kernel completes before its predecessor did. The prologue then signals
 * launch_dependents, which lets the *next* kernel's blocks be scheduled once every block of this
 * one has started; they spin in their own wait until this grid completes.
 *
 * Captured into CUDA graphs, the attribute becomes a programmatic edge.
 *
 * OFF by default; GPTOSS_PDL=1 turns it on. Measured on the H200 (bench/NOTES.md): +1–2 % at batch
 * 1 (310 → 316 tokens/s), nothing at batch 256 — and with it on, gpu_test_cuda_forward failed
 * nondeterministically (a few top-1 flips in one run, a 20b real-width mismatch in another) while
 * it passes with it off. Some pair of launches is not covered by the contract above (suspects:
 * cuBLASLt's own kernels between ours, whose PDL behaviour we do not control); until that is
 * found, correctness wins. */
#pragma once

#include <cuda_runtime.h>

#include <utility>

extern "C" int pdl_enabled(void);

static __device__ __forceinline__ void pdl_prologue(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* The one exception to "pdl_prologue first": loads of memory that no kernel of the step writes
 * (model weights) may be issued before it, so that they fly while the predecessor finishes. Such a
 * kernel issues those loads, then calls pdl_prologue before any other global access. */

/* The launch with the attribute when `on`. pdl_launch below asks pdl_enabled(); a kernel whose
 * blocks must start early to be worth anything (weights requested before the wait: gemv.h's early
 * form) passes on = 1 itself. One such edge is race-free by the contract above whatever the other
 * launches do: its kernel waits before it touches anything a kernel of the step writes. */
template <typename... KArgs, typename... Args>
static cudaError_t pdl_launch_attr(int on, void (*kernel)(KArgs...), dim3 grid, dim3 block,
                                   size_t smem, cudaStream_t stream, Args &&...args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = on ? 1 : 0;
    /* Each argument converted to its parameter's type first (NULL, int → size_t, …), as <<<>>> does. */
    static_assert(sizeof...(KArgs) == sizeof...(Args),
                  "pdl_launch: wrong number of kernel arguments");
    return cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(std::forward<Args>(args))...);
}

template <typename... KArgs, typename... Args>
static cudaError_t pdl_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                              cudaStream_t stream, Args &&...args) {
    return pdl_launch_attr(pdl_enabled(), kernel, grid, block, smem, stream,
                           std::forward<Args>(args)...);
}
