/* The routing of one token from the router's sums by columns (route_sums.h). CPU reference: the
 * router's logits and cpu_topk_softmax (backend/cpu/ops.c), which the forward tests hold the whole
 * step against. */
#include "backend/cuda/route_sums.h"
#include "backend/cuda/attn_stream.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/route_sums.cuh"
#include "base/env_switch.h"

/* 256 threads (ROUTE_SMALL_MIN_THREADS): route_sums.cuh's block, its wait the PDL one (pdl.cuh:
 * the gains, model memory, are asked for before it). */
__global__ void __launch_bounds__(ROUTE_SMALL_MIN_THREADS)
    route_sums_kernel(unsigned long long *acc, const float *ss_part, const float *h,
                      const uint16_t *gain, float eps, int H, const uint16_t *bias, float *logits,
                      uint16_t *y, const moe_routing r) {
    __shared__ float s_inv;
    route_sums_block(acc, ss_part, h, gain, eps, H, bias, logits, y, r, s_inv, true);
}

/* The same with route_prefetch's trial (GPTOSS_ROUTER_COLS=3). */
__global__ void __launch_bounds__(ROUTE_SMALL_MIN_THREADS)
    route_sums_prefetch_kernel(unsigned long long *acc, const float *ss_part, const float *h,
                               const uint16_t *gain, float eps, int H, const uint16_t *bias,
                               float *logits, uint16_t *y, const moe_routing r,
                               const route_prefetch pf) {
    __shared__ float s_inv;
    route_sums_block(acc, ss_part, h, gain, eps, H, bias, logits, y, r, s_inv, true, &pf);
}

static int g_on = -1;
extern "C" int route_sums_enabled(void) {
    return env_switch(&g_on, "GPTOSS_ROUTER_COLS", 1, 0, 4);
}
extern "C" void route_sums_set(int on) {
    env_switch_set(&g_on, on, 0, 4);
}

extern "C" int route_sums_fits(const float *h, const uint16_t *gain, int H, const float *logits,
                               const uint16_t *y, const moe_routing *r) {
    return h && gain && logits && y && r && r->T == 1 && r->E >= 8 && r->E % 8 == 0 &&
           r->E <= ROUTE_SMALL_MIN_THREADS && r->k >= 1 && r->k <= 8 && r->k <= r->E && H >= 8 &&
           H % 8 == 0 && H / 8 <= 2 * ROUTE_SMALL_MIN_THREADS && !((uintptr_t)h & 15) &&
           !((uintptr_t)gain & 15) && !((uintptr_t)y & 15);
}

/* route_from_sums' checks and launch, with route_prefetch's trial when pf is non-NULL. */
static cudaError_t launch(unsigned long long *acc, const float *ss_part, const float *h,
                          const uint16_t *gain, float eps, int H, const uint16_t *bias,
                          float *logits, uint16_t *y, const moe_routing *r,
                          const route_prefetch *pf, cudaStream_t stream) {
    if (!acc || !ss_part || !route_sums_fits(h, gain, H, logits, y, r))
        return cudaErrorInvalidValue;
    if (pf) {
        if (!route_prefetch_ok(pf)) return cudaErrorInvalidValue;
        pdl_launch(route_sums_prefetch_kernel, dim3(1), dim3(ROUTE_SMALL_MIN_THREADS), 0, stream,
                   acc, ss_part, h, gain, eps, H, bias, logits, y, *r, *pf);
        return cudaGetLastError();
    }
    pdl_launch(route_sums_kernel, dim3(1), dim3(ROUTE_SMALL_MIN_THREADS), 0, stream, acc, ss_part,
               h, gain, eps, H, bias, logits, y, *r);
    return cudaGetLastError();
}

extern "C" cudaError_t route_from_sums(unsigned long long *acc, const float *ss_part,
                                       const float *h, const uint16_t *gain, float eps, int H,
                                       const uint16_t *bias, float *logits, uint16_t *y,
                                       const moe_routing *r, cudaStream_t stream) {
    return launch(acc, ss_part, h, gain, eps, H, bias, logits, y, r, NULL, stream);
}

extern "C" cudaError_t route_from_sums_prefetch(unsigned long long *acc, const float *ss_part,
                                                const float *h, const uint16_t *gain, float eps,
                                                int H, const uint16_t *bias, float *logits,
                                                uint16_t *y, const moe_routing *r,
                                                const route_prefetch *pf, cudaStream_t stream) {
    return pf ? launch(acc, ss_part, h, gain, eps, H, bias, logits, y, r, pf, stream)
              : cudaErrorInvalidValue;
}

extern "C" int route_prefetch_ok(const route_prefetch *pf) {
    return pf && pf->wq && pf->ws && pf->RT > 0 && pf->KK > 0 && pf->code_bytes >= 512 &&
           pf->code_bytes % 512 == 0 && pf->code_bytes <= pf->KK * 512 &&
           !((uintptr_t)pf->wq & 15) && !((uintptr_t)pf->ws & 15);
}
