/* attn_stream_kernel<1, true>: the attention block with the MLP norm, the router and the routing
 * inside (attn_stream.h's attn_stream_route), in a translation unit of its own (attn_stream_route.h). */
#include "backend/cuda/attn_stream_route.h"
#include "backend/cuda/attn_stream_kernel.cuh"

as_kernel attn_stream_route_kernel(void) {
    return attn_stream_kernel<1, true>;
}
