/* The one-token attention block with the router by columns whose last block also routes
 * (GPTOSS_ROUTER_COLS=2, a trial: attn_stream_route_last), instantiated apart from the routed
 * kernel the default runs (attn_stream_kernel.cuh says why). */
#include "backend/cuda/attn_stream_kernel.cuh"

as_kernel_last attn_stream_routed_last_kernel(void) {
    return attn_stream_kernel<1, true, true>;
}
