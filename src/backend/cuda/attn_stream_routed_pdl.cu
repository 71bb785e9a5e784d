/* The one-token attention block with the router by columns, launched with PDL so that its producer
 * fills the ring with QKV's weights while the kernel before finishes (GPTOSS_ATTN_PDL=1, a trial:
 * attn_stream_kernel.cuh's PDL_EARLY), instantiated apart from the routed kernel the default runs
 * (attn_stream_kernel.cuh says why). */
#include "backend/cuda/attn_stream_kernel.cuh"

as_kernel attn_stream_routed_pdl_kernel(void) {
    return attn_stream_kernel<1, true, false, true>;
}
