/* gemv_mma.h's plain form, its tuning entry and the runner's switches; the kernel is in
 * gemv_mma_kernel.cuh, the fused QKV forms in gemv_mma_qkv.cu. */
#include "backend/cuda/gemv_mma.h"
#include "backend/cuda/gemv_mma_kernel.cuh"
#include "base/env_switch.h"

extern "C" int gemv_mma_supported(int M, int K, int N) {
    return M >= 1 && M <= GEMV_MMA_MAX_M && K >= 32 && K % 32 == 0 && N >= 16 && N % 16 == 0;
}

/* The plain form's arguments (bias may be NULL). */
static gm_args gm_plain_args(const uint16_t *x, const uint16_t *x_lo, int M, int K,
                             const uint16_t *W, int N, const uint16_t *bias, void *y, int out_f32) {
    gm_args a;
    memset(&a, 0, sizeof a);
    a.x = x, a.x_lo = x_lo, a.W = W, a.bias = bias, a.y = y;
    a.M = M, a.K = K, a.N = N, a.out_f32 = out_f32 != 0;
    return a;
}

extern "C" cudaError_t gemv_mma(const uint16_t *x, const uint16_t *x_lo, int M, int K,
                                const uint16_t *W, int N, const uint16_t *bias, void *y,
                                int out_f32, cudaStream_t stream) {
    if (!x || !W || !y || !gemv_mma_supported(M, K, N)) return cudaErrorInvalidValue;
    const gm_args a = gm_plain_args(x, x_lo, M, K, W, N, bias, y, out_f32);
    gm_rope r;
    memset(&r, 0, sizeof r);
    return gm_launch<GM_PLAIN>(a, r, stream);
}

extern "C" cudaError_t gemv_mma_tune(int shape, const uint16_t *x, const uint16_t *x_lo, int M,
                                     int K, const uint16_t *W, int N, const uint16_t *bias, void *y,
                                     int out_f32, cudaStream_t stream) {
    if (!x || !W || !y || !gemv_mma_supported(M, K, N) || shape < 0 ||
        shape >= GEMV_MMA_TUNE_SHAPES)
        return cudaErrorInvalidValue;
    const gm_args a = gm_plain_args(x, x_lo, M, K, W, N, bias, y, out_f32);
    gm_rope r;
    memset(&r, 0, sizeof r);
    switch (shape) { /* gemv_mma.h's table */
    case 0:
        return gm_launch<GM_PLAIN, 4, 8>(a, r, stream);
    case 1:
        return gm_launch<GM_PLAIN, 2, 8>(a, r, stream);
    case 2:
        return gm_launch<GM_PLAIN, 6, 8>(a, r, stream);
    case 3:
        return gm_launch<GM_PLAIN, 4, 4>(a, r, stream);
    case 4:
        return gm_launch<GM_PLAIN, 8, 4>(a, r, stream);
    default:
        return gm_launch<GM_PLAIN, 4, 16>(a, r, stream);
    }
}

static int g_max_t = -1, g_rope = -1, g_norm = -1;

extern "C" int gemv_mma_max_t(void) {
    return env_switch(&g_max_t, "GPTOSS_GEMV_MMA", 0, 0, GEMV_MMA_MAX_M);
}

extern "C" void gemv_mma_set_max_t(int max_t) {
    env_switch_set(&g_max_t, max_t, 0, GEMV_MMA_MAX_M);
}

extern "C" int gemv_mma_rope_on(void) {
    return env_switch(&g_rope, "GPTOSS_GEMV_MMA_ROPE", 0, 0, 1);
}

extern "C" int gemv_mma_norm_max_t(void) {
    return env_switch(&g_norm, "GPTOSS_GEMV_MMA_NORM", 0, 0, GEMV_MMA_NORM_MAX_M);
}
