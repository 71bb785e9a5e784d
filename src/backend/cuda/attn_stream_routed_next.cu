/* The one-token attention block with the router by columns whose producer then asks L2 for the
 * next layer's first QKV pairs (GPTOSS_QKV_PREFETCH, a trial: attn_stream_next), instantiated apart
 * from the routed kernel the default runs (attn_stream_kernel.cuh says why). */
#include "backend/cuda/attn_stream_kernel.cuh"

as_kernel_next attn_stream_routed_next_kernel(void) {
    return attn_stream_kernel<1, true, true>;
}
