/* The one-token attention block with the router by columns in O's epilogue
 * (attn_stream_layer_routed, attn_stream.h), instantiated apart from the plain kernels
 * (attn_stream_kernel.cuh says why). */
#include "backend/cuda/attn_stream_kernel.cuh"

as_kernel attn_stream_routed_kernel(void) {
    return attn_stream_kernel<1, true>;
}
