/* Dense bf16 matrix–vector products for decode steps of at most GEMV_MAX_M tokens (the router):
 *
 *     y[m][n] = (x[m] + x_lo[m]) · W[n] + bias[n]        (fp32 sums, bf16 or fp32 out)
 *
 * W is a PyTorch Linear weight [N][K] (row n contiguous), as gemm.h. x_lo (may be NULL) is the low
 * half of a split-bf16 input (norm.h): the two halves are added in fp32 when the tokens are staged,
 * so the product is the fp32 input's, in one pass and without doubling the rows.
 *
 * Why not gemm.h's kernels: at M ≤ 8 every weight byte is used at most 8 times, so the time is the
 * stream of W plus the kernel's fixed latency. A warp reads whole rows, 512 contiguous bytes per
 * load, and each lane keeps one row's loads in flight while it multiplies the previous row's; no K
 * splits, so no fix-up of partial sums, and the bias is added where the sum is finished. Measured on
 * the H200 (bench/NOTES.md): for the router (128 × 2880) 6.0 µs against 8.9 for the skinny kernel at
 * one token, 9.2 against 15.2 at four (rows form); lm_head at one token 266.6 µs (4.34 TB/s, ring
 * form) against cuBLASLt's 279.6 (the step's lm_head at one row: runner_forward.c). For QKV and O
 * cuBLASLt stays faster at every M (QKV at one token
 * 12.8 µs against 14.5 for the ring form, 20.7 for the rows form; 2–4 tokens 12.8 against 18–26),
 * so those stay on gemm.h. The weight loads of a warp's first row (rows form) and the first ring
 * stages (ring form) are issued before the kernel waits for its predecessor (PDL): they do not
 * depend on it.
 *
 * K must be a multiple of 8, pointers 16-byte aligned. CPU reference: tests/gpu/test_gemm.cu compares
 * with a double-precision product. */
#ifndef GPTOSS_BACKEND_CUDA_GEMV_H
#define GPTOSS_BACKEND_CUDA_GEMV_H

#include "backend/cuda/moe.h"

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { GEMV_MAX_M = 8, GEMV_MAX_K = 4096 };

/* Two kernels (gemv.cu), the same bits: the rows form (each warp walks a few rows, a row's loads in
 * flight while the previous one is multiplied; the router's) and the ring form (one block an SM
 * streaming its rows through a ring of shared-memory stages filled by the bulk copy engine, at most
 * 4 tokens; lm_head's). AUTO takes the ring form from GEMV_RING_MIN_N rows.
 * GPTOSS_GEMV_FORM=1|2 forces the rows or the ring form until gemv_set_form is called. */
enum { GEMV_FORM_AUTO = 0, GEMV_FORM_ROWS = 1, GEMV_FORM_RING = 2, GEMV_RING_MIN_N = 1024 };
void gemv_set_form(int form);

/* Whether gemv_bf16 takes this shape. */
int gemv_supported(int M, int K, int N);

/* out_f32: y is float [M][N], else bf16 bits [M][N]. bias (bf16 [N]) and x_lo may be NULL. */
cudaError_t gemv_bf16(const uint16_t *x, const uint16_t *x_lo, int M, int K, const uint16_t *W,
                      int N, const uint16_t *bias, void *y, int out_f32, cudaStream_t stream);

/* The early form: the ring form launched with the PDL attribute whatever GPTOSS_PDL says, with a
 * ring as large as GR_EARLY_RING_BYTES allows (every row of a block when they fit) and the rows
 * past it requested toward L2 — all before the kernel waits for its predecessor. Its blocks are then
 * resident while the previous kernel runs, and its weights stream while DRAM would otherwise idle
 * (at one token the attention kernels before O read ~1 MB in ~5–10 µs). The same bits as
 * gemv_bf16. gemv_early_supported: M ≤ 4 and K ≤ 4096 (the one row of a ring stage).
 * Measured on the H200 (bench/NOTES.md, session 8): O at one token +1.2 to +2.5 % for the 120b
 * step, the runner's default there. The CUPTI timeline says why no more: O's blocks start ~7 µs
 * before the attention ends, but the attention kernels, latency-bound, run twice as long (4.6 →
 * 8.6 µs) behind O's 24 MB saturating DRAM: the window's idle bandwidth is ~5 µs, O needs ~6. QKV,
 * the router and lm_head early gain nothing (lm_head's predecessor is short; QKV's ring is slower
 * than cuBLASLt alone). */
int gemv_early_supported(int M, int K, int N);
cudaError_t gemv_bf16_early(const uint16_t *x, const uint16_t *x_lo, int M, int K,
                            const uint16_t *W, int N, const uint16_t *bias, void *y, int out_f32,
                            cudaStream_t stream);

/* The MoE router and its routing in one launch, for decode-sized steps: gemv_bf16(x, x_lo, M, K, W,
 * N, NULL, logits, out_f32 = 1) on the rows form, then, in the same kernel, what
 * moe_route_split(logits, NULL, bias, r) gives for r->T = M (M·k ≤ 64, N = r->E ≤ 256): the last
 * block to finish its rows routes the tokens (moe_route_small.cuh, the same code, so the same
 * bytes), and the routing costs no launch of its own. counter: a device int that is 0 before the
 * launch and 0 again after it (the kernels sharing one counter must not overlap: one stream).
 * early: launched with the PDL attribute whatever GPTOSS_PDL says (the router's weights, all in
 * flight before the wait, then load while the previous kernel runs). */
cudaError_t gemv_route(const uint16_t *x, const uint16_t *x_lo, int M, int K, const uint16_t *W,
                       int N, float *logits, const uint16_t *bias, const moe_routing *r,
                       int *counter, int early, cudaStream_t stream);

/* The residual add and RMSNorm in front of the router (norm.h's norm_add_rmsnorm_split(h, delta,
 * NULL, 0, M, K, gain, eps, y, y_lo)) and gemv_route, in one launch: every block normalises the M
 * rows itself (a few KB from L2), block 0 writes y, the last block writes h back before it routes.
 * h, y, the logits and the routing get the bytes of the two launches (y_lo is not written: at
 * M ≤ 4 only the router reads it). One launch instead of two in front of the experts at decode.
 * Measured on the H200 (bench/NOTES.md, session 8): the router's kernel 8.4 → 8.8–10.0 µs with the
 * norm (2.5 µs) gone, 120b +1.1 % at one token, slower at 2 and 4 (each of its blocks normalises
 * every token before its rows); the runner uses it at one token (runner.h). */
typedef struct {
    float *h;              /* [M][K] fp32, updated in place */
    const uint16_t *delta; /* bf16 [M][K], may be NULL */
    const uint16_t *gain;  /* bf16 [K] */
    float eps;
    uint16_t *y; /* bf16 [M][K] */
} gemv_norm_in;
cudaError_t gemv_norm_route(const gemv_norm_in *nm, int M, int K, const uint16_t *W, int N,
                            float *logits, const uint16_t *bias, const moe_routing *r, int *counter,
                            int early, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
