/* The attention kernel with the routing inside (attn_stream_kernel.cuh's ROUTE form, one token),
 * compiled in attn_stream_route.cu so that attn_stream.cu's default kernels keep their code. */
#pragma once

#include "backend/cuda/attn_stream_phases.cuh"

typedef void (*as_kernel)(as_params, as_layout, attn_stream_route);

as_kernel attn_stream_route_kernel(void);
