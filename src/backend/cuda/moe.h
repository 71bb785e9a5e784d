/* gpt-oss mixture-of-experts on the GPU: routing (top-k + softmax + grouping by expert) and the MXFP4
 * expert matrices (gate_up with the clamped SwiGLU fused, down with bias and routing weight fused).
 *
 * Math (spec §2.5), per token t with normalised input x_t (H values):
 *   logits = router(x_t) (a dense GEMM, gemm.h);  top-k by raw logit (lowest index wins ties);
 *   w_j = softmax over the k selected logits;
 *   for each selected expert e_j:  u = W1_e·x_t + b1_e  (2I values, rows interleaved: even = gate,
 *   odd = up);  act = min(gate,7)·σ(1.702·min(gate,7))·(clamp(up,±7) + 1);
 *   y_j = w_j · (W2_e·act + b2_e).
 * moe_experts() writes every y_j (as fp32 rows, possibly split into K partial sums); the sum over j
 * is done in a fixed order by the residual-add + RMSNorm kernel of norm.h (deterministic, no atomics).
 *
 * Weights stay MXFP4 in GPU memory (4.25 bits/weight). They are re-packed once at load into a layout
 * where one 16-byte load per thread holds exactly the codes its tensor-core fragments need:
 *
 *   q: [E][R/16][K/64][32 lanes][16 bytes]      (4 bits per weight — same bytes as the checkpoint)
 *   s: [E][R/16][K/64][8][4 bytes]              (the e8m0 scale bytes, one per 32 weights)
 *
 * For row tile rt, k step kk (64 wide) and lane (g = lane/4, t = lane%4) the 16 bytes are 4 words:
 * word 0 = row ρ(g) at k ∈ 64kk + [8t, 8t+8), word 1 = row ρ(g+8) at the same k, words 2 and 3 the
 * same rows at k + 32. Inside a word the 8 codes are bit-shuffled so that a few shifts and masks
 * place them straight into bf16 bit positions (moe_dequant.cuh: 9 operations for 8 codes). ρ is
 * the identity (ρ(i) = 16rt + i) for down; for gate_up ρ(g) = 2(8rt+g) (gate) and
 * ρ(g+8) = 2(8rt+g)+1 (up), so that one thread ends up holding both halves of each SwiGLU pair.
 * Scale word g holds the 4 scale bytes of words 0…3 of lanes 4g…4g+3. Requires K % 64 == 0 and
 * R % 16 == 0 (2880 and 5760 are).
 *
 * All device pointers; bf16 values as uint16_t bit patterns so this header stays plain C. */
#ifndef GPTOSS_BACKEND_CUDA_MOE_H
#define GPTOSS_BACKEND_CUDA_MOE_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- weights ---- */

size_t moe_repack_q_bytes(int E, int R, int K); /* E·R·K/2 */
size_t moe_repack_s_bytes(int E, int R, int K); /* E·R·K/32 */

/* Checkpoint layout (blocks [E][R][K/32][16], scales [E][R][K/32]) → repacked q, s (device pointers,
 * asynchronous on stream). gate_up != 0 applies the gate/up row pairing. cudaErrorInvalidValue on
 * unsupported shapes. */
cudaError_t moe_repack_device(const uint8_t *blocks, const uint8_t *scales, int E, int R, int K,
                              int gate_up, uint8_t *q, uint8_t *s, cudaStream_t stream);

typedef struct {
    const uint8_t *w1_q, *w1_s; /* gate_up, repacked: R = 2I rows, K = H */
    const uint16_t *b1;         /* [E][2I] bf16, checkpoint order (interleaved) */
    const uint8_t *w2_q, *w2_s; /* down, repacked: R = H rows, K = I */
    const uint16_t *b2;         /* [E][H] bf16 */
    int E, H, I;
    float swiglu_alpha, swiglu_limit; /* 1.702, 7.0 */
    int w1_folded,
        w2_folded; /* every scale byte of w1 (w2) ≤ 128: one multiply per dequantised pair
                               * (moe_dequant.cuh); set from moe_scales_max, 0 is always correct */
} moe_weights;

/* The largest byte of n scale bytes (device pointer) into *max_out (host), synchronously on stream. */
cudaError_t moe_scales_max(const uint8_t *s, size_t n, int *max_out, cudaStream_t stream);
enum { MOE_FOLDED_SCALE_MAX = 128 };

/* ---- routing ---- */

/* Device arrays describing one step's routing; carve them out of one buffer of moe_routing_bytes().
 * A pair is (token t, slot j), numbered p = t·k + j.
 *
 * Expert parallelism: [e0, e0 + n_e) are the experts this rank holds (moe_routing_carve: 0, E, all
 * of them). Every rank routes every token (topk_idx, topk_w: global expert ids), but the grouping
 * (count .. n_tiles) holds only the pairs of those experts, numbered locally (expert e0 + i is i,
 * as in the rank's moe_weights, whose E is n_e): the other pairs are simply not grouped, so the
 * expert kernels never see them, and moe_down writes zeros in their y_slots rows. */
typedef struct {
    int T, E, k;
    int e0, n_e;      /* the experts grouped (EP: this rank's); default 0, E */
    int *topk_idx;    /* [T·k] expert of pair p */
    float *topk_w;    /* [T·k] its routing weight */
    int *count;       /* [n_e] pairs per (grouped) expert */
    int *offset;      /* [n_e+1] exclusive prefix sum of count */
    int *pair_sorted; /* [T·k] pair ids grouped by expert (ascending), ascending inside a group */
    int *touched;     /* [n_e] experts with count > 0, ascending; entries past n_touched unused */
    int *n_touched;   /* [1] */
    int *tiles;       /* [moe_max_tiles] large-batch tiles, (expert << 16) | tile index */
    int *n_tiles;     /* [1] */
} moe_routing;

enum { MOE_TILE_TOKENS = 128 }; /* tokens per tile on the large-batch path */

/* Room for the large path's tile list: each expert's pairs in ceil(count / MOE_TILE_TOKENS) tiles. */
static inline size_t moe_max_tiles(int T, int E, int k) {
    return (size_t)T * k / MOE_TILE_TOKENS + E;
}

size_t moe_routing_bytes(int T, int E, int k);
void moe_routing_carve(moe_routing *r, void *buf, int T, int E, int k);

/* From fp32 router logits [T][E]: top-k (lowest index on ties), softmax over the k, and the grouping
 * by expert (of the pairs of experts [e0, e0 + n_e) only). The logit of (t, e) is logits[t][e] + logits_lo[t][e] + bias[e], fp32 sums in that order
 * (logits_lo and the bf16 bias [E] may be NULL): the two halves of the split-bf16 router GEMM
 * (norm.h) and the router bias. E ≤ 256, k ≤ 8. One launch on stream for decode-sized steps, two
 * otherwise. */
cudaError_t moe_route_split(const float *logits, const float *logits_lo, const uint16_t *bias,
                            const moe_routing *r, cudaStream_t stream);

/* ---- experts ---- */

typedef struct {
    int large; /* 1: grouped GEMM over 128-token routing tiles (prefill, big batches); 0:
                  per-expert streaming (decode) */
    int ntp;   /* small path: tokens staged per pass = 8·ntp (1 or 2) */
    int down_splits; /* K splits of the down projection (small path); y_slots has k·down_splits rows per token */
    int bn;         /* large path on wgmma: tokens per block, 64 (two blocks a routing tile) or 128;
               moe_plan_for takes 64 when experts average under 128 pairs (moe_experts.cu) */
    int tail_split; /* small path's down projection, GPTOSS_MOE_TAIL_SPLIT=1 (off by default,
                       a trial): 0, every item split down_splits ways; else the resident blocks
                       of the launch, against which the items of the last partial wave are split
                       over K into up to down_splits slots and the others run whole
                       (moe_small.cuh's small_begin_tail) */
} moe_plan;

/* The plan for T tokens (a pure function of its arguments, so the caller can size buffers). */
moe_plan moe_plan_for(int T, int E, int k, int sm_count);
/* p (a small-path plan) with the tail split on: two slots, waves of the resident blocks of
 * sm_count SMs. What moe_plan_for gives at 2+ tokens under GPTOSS_MOE_TAIL_SPLIT=1. */
moe_plan moe_plan_tail_split(moe_plan p, int sm_count);

size_t moe_act_bytes(int T, int k, int I);                           /* T·k·I bf16 */
size_t moe_y_slots_bytes(int T, int k, int H, const moe_plan *plan); /* T·k·splits·H fp32 */

/* x: [T][H] bf16 (the MLP RMSNorm output). act: scratch [T·k][I] bf16 (rows in pair_sorted order).
 * y_slots: [T][k·S][H] fp32, S = plan->down_splits (1 on the large path): row j·S + s of token t is
 * split s of w_j·(W2·act + b2) (the bias in split 0). Every row is written: under expert
 * parallelism (r->n_e < r->E) the rows of the pairs of other ranks' experts are zeros, so that the
 * ranks' y_slots summed (allreduce.h) are the whole MoE output. w->E must be r->n_e. */
cudaError_t moe_experts(const moe_weights *w, const uint16_t *x, const moe_routing *r,
                        const moe_plan *plan, uint16_t *act, float *y_slots, cudaStream_t stream);

/* The large path's MMA, process-wide: 3 (the default) = the warp-specialised wgmma kernel
 * (moe_wgmma_ws.cu: producer warpgroups feeding two consumer warpgroups) at 128-token tiles and its
 * form fed by the copy engine (moe_wgmma_tma.cu) at 64, where each measured fastest on the H200
 * (bench/NOTES.md) — but both give way to moe_wgmma_tma.cu's register-A form unless
 * moe_wgmma_tma_set_rs says otherwise; 1 = moe_wgmma.cu (wgmma with A in registers) at both; 2 = moe_wgmma_ws.cu at
 * both; 4 = moe_wgmma_tma.cu at both; 5 = ws at 128 and moe_wgmma.cu at 64 (the default before,
 * for comparisons); 0 = mma.sync (moe_large_kernel, kept as the tests' second implementation; it
 * ignores plan->bn). moe_wgmma_tma.cu runs through moe_experts only (which lends it y_slots as
 * scratch) and when the driver's tensor-map encoder is found; otherwise ws (4) or moe_wgmma.cu (3)
 * takes its place. Until moe_set_wgmma is called, GPTOSS_MOE_WGMMA=0, 1, 2, 4 or 5 selects those
 * (any other value, or none, 3). moe_wgmma_on returns the choice. */
void moe_set_wgmma(int on);
int moe_wgmma_on(void);
/* The narrow form of moe_wgmma_ws.cu (MMAs as wide as a tile's tokens rounded up to a quarter of
 * the tile, the same bits; moe_wgmma_tma.cu has it at 64-token tiles always): 1 on, 0 off (the
 * full width, for comparisons and as the tests' reference), negative: as GPTOSS_MOE_WS_NARROW says
 * (0 off; anything else, or nothing, on: the default). */
void moe_wgmma_ws_set_narrow(int on);
/* moe_wgmma_tma.cu's register-A form (A dequantised into the consumers' registers, no dequantising
 * warps, 64-token tiles; bits within rounding of ws's, not equal): 2 for every large plan (the
 * default), 1 only where the plan has 64-token tiles, 0 never, negative: as GPTOSS_MOE_TMA_RS says
 * (0, 1 or 2; anything else, or nothing, 2). Used by moe_experts only (its act is in an order of
 * its own); moe_gate_up and moe_down alone never take it. */
void moe_wgmma_tma_set_rs(int on);
/* The register-A form's block shape (moe_wgmma_rs.cuh's rs_shape): MOE_RS_NARROW = 64 tokens x 128
 * weight rows (two blocks an SM), MOE_RS_WIDE = 128 tokens x 192 rows (one block an SM: each weight
 * dequantised once a 128-token routing tile, each B stage shared by three warpgroups),
 * MOE_RS_BY_PLAN (the default) = wide where the experts average at least 192 pairs (120b from
 * T = 6144), else narrow. Both shapes give the same bits. Negative: as GPTOSS_MOE_RS_SHAPE says
 * (0, 1 or 2; anything else, or nothing, 2). moe_wgmma_rs_shape returns the setting. */
enum { MOE_RS_NARROW = 0, MOE_RS_WIDE = 1, MOE_RS_BY_PLAN = 2 };
void moe_wgmma_rs_set_shape(int shape);
int moe_wgmma_rs_shape(void);
/* The two halves, for benchmarks and tests. */
cudaError_t moe_gate_up(const moe_weights *w, const uint16_t *x, const moe_routing *r,
                        const moe_plan *plan, uint16_t *act, cudaStream_t stream);
cudaError_t moe_down(const moe_weights *w, const moe_routing *r, const moe_plan *plan,
                     const uint16_t *act, float *y_slots, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
