/* The router by columns in attn_stream's O epilogue (attn_stream.h's attn_stream_router) from the
 * runner's side: its buffers, and whether a step takes it. With it a one-token layer is
 * attn_stream (QKV, attention, O, h + o and the router's sums by columns), route_sums (the
 * routing and the MoE's input row) and the experts: the router's own kernel over the normalised
 * row (gemv_norm_route, ~7.7 µs a layer on an H100 for 0.74 MB of weights: session 36's CUPTI
 * table) gives way to one small launch. */
#include "backend/cuda/attn_stream.h"
#include "backend/cuda/moe_fused.h"
#include "backend/cuda/route_sums.h"
#include "backend/cuda/runner_internal.h"

int runner_router_cols_build(struct backend *b) {
    /* (not under tensor or data parallelism, where no step takes it: runner_router_cols_takes) */
    if (!route_sums_enabled() || b->rcols_acc || b->L < 1 || b->tp_world > 1 || b->dp_size > 1 ||
        !attn_stream_router_supported(&b->dims, b->H, b->E))
        return 0;
    if (runner_router_transposed(b) != cudaSuccess) {
        (void)cudaGetLastError();
        return err_set("cuda backend: the router by columns' transposed router (%d layers)", b->L);
    }
    const size_t acc = (size_t)ATTN_ROUTER_GROUPS * b->E * sizeof(unsigned long long),
                 ss = (size_t)ATTN_ROUTER_MAX_G * sizeof(float);
    cudaError_t e = cudaMalloc((void **)&b->rcols_acc, acc + ss);
    if (e == cudaSuccess) e = cudaMemset(b->rcols_acc, 0, acc + ss);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        cudaFree(b->rcols_acc);
        b->rcols_acc = NULL;
        return err_set("cuda backend: the router by columns' sums: %s", cudaGetErrorString(e));
    }
    b->rcols_ss = (float *)((char *)b->rcols_acc + acc);
    return 0;
}

/* Before runner_step_table_free (which frees the transposed router they share). */
void runner_router_cols_free(struct backend *b) {
    cudaFree(b->rcols_acc);
    b->rcols_acc = NULL, b->rcols_ss = NULL;
}

/* One token on one GPU with every expert (the sums are the whole router's), the router's norm
 * inside its kernel at this token count (the form this replaces) and not the fused MoE kernel
 * (which routes on its own). The caller adds that attn_stream takes the layer's attention. */
bool runner_router_cols_takes(const struct backend *b, const fwd_plan *p) {
    return b->rcols_acc && b->step_router_wt && route_sums_enabled() && p->T == 1 && !b->ar &&
           b->dp_size <= 1 && p->T <= b->norm_route_max_t && !moe_fused_enabled() &&
           b->tp_share.expert0 == 0 && b->tp_share.n_experts == b->E;
}
