/* The attention block of a decode step of 1-4 tokens as one persistent kernel whose weights
 * stream without a break (attn_stream.cu): QKV with its bias, RoPE and the KV-cache write; a grid
 * barrier; attention over the paged cache with its split-K merge; a grid barrier; O with its bias.
 * It replaces runner_attention's four or five launches (cuBLASLt QKV, rope_kv, attn_decode and its
 * merge, cuBLASLt O) for pure decode steps of T ≤ ATTN_STREAM_MAX_T sequences, one token each.
 *
 * Why (bench/NOTES.md, session 22): at batch 1 those launches span ~29-32 µs of a 120b layer's ~78
 * (session 16's timeline) for 53 MB of QKV and O weights (13 µs at 4 TB/s). Every kernel of them
 * starts its weight stream cold after the previous one ended. Here a producer warp per SM streams
 * the block's QKV rows and then its O rows through a ring of shared-memory stages (bulk copies,
 * tma_ring.cuh): O's weights arrive while the grid computes attention (session 23: only after
 * QKV's grid barrier, so that they never compete with the QKV rows).
 *
 * Same math as the launches, not the same bits: QKV sums x + x_lo in fp32 before the products (the
 * GEMV's early form does too) where cuBLASLt multiplies the two halves apart; the attention keeps P
 * in fp32 where attn_decode rounds it to bf16 for its MMA. tests/gpu/test_attn_stream.cu holds the
 * outputs to the launches' within rounding.
 *
 * All pointers are device pointers; bf16 values are uint16_t bit patterns (plain C header). */
#ifndef GPTOSS_BACKEND_CUDA_ATTN_STREAM_H
#define GPTOSS_BACKEND_CUDA_ATTN_STREAM_H

#include "backend/cuda/attention.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/rope_kv.h"

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    ATTN_STREAM_MAX_T = 4,         /* tokens (= sequences) a step */
    ATTN_STREAM_MAX_KV_HEADS = 64, /* the merge counters a caller provides: T · n_kv_heads */
    ATTN_STREAM_MAX_H = 4096       /* hidden size: the staged input rows must fit beside the ring */
};

/* Optional, at one token (T = 1; wt NULL: off): the MoE router by columns in O's epilogue. After
 * O every block owns its rows j of h + o: it writes them back into h, and adds W_r[:, j] ·
 * gain_j (h + o)_j over them for every expert (its ring stage holds those rows of the transposed
 * router, [H][E]) into acc as 2^-24 fixed point (integer adds: the same bits in any order; block
 * b into group b % ATTN_ROUTER_GROUPS), and writes its share of the sum of squares of h + o into
 * ss_part[b]. route_sums.h then scales the sums by 1 / rms, routes, and writes the MoE's input
 * row: the router's own launch over the normalised row is gone (the step kernel's phase 3 since
 * session 35). */
#define ATTN_ROUTER_ONE 16777216.0f /* 2^24: the sums' unit (the step kernel's too) */
enum {
    ATTN_ROUTER_GROUPS = 8,   /* acc's groups (132 blocks do not queue on E lines) */
    ATTN_ROUTER_MAX_G = 256,  /* ss_part's entries: blocks (zero past the grid) */
    ATTN_ROUTER_MAX_ROWS = 32 /* h rows a block (H / SMs rounded up) */
};
typedef struct {
    const uint16_t *wt;      /* the router transposed, [H][E] bf16 */
    const uint16_t *gain;    /* the MLP norm's gain [H] bf16 */
    float *h;                /* the residual [H] (after the attention norm's add): h + o out */
    unsigned long long *acc; /* [ATTN_ROUTER_GROUPS][E], zero before the launch */
    float *ss_part;          /* [ATTN_ROUTER_MAX_G] */
    int E;                   /* experts: a multiple of 8, at most 256 */
} attn_stream_router;

typedef struct {
    int T; /* tokens = sequences (each with exactly one new token), 1 … ATTN_STREAM_MAX_T */
    int H; /* hidden size (2880) */
    /* the step: per token its position and its cache slot in this layer's pool (< 0: no KV
     * write, a graph's padding row); the sequences as attn_decode sees them (n_seqs = T) */
    const int32_t *positions, *slots;
    attn_seqs seqs;
    /* input: the attention norm's split-bf16 output [T][H] (x_lo may be NULL) */
    const uint16_t *x, *x_lo;
    /* Or, with the attention norm inside (nh non-NULL; x and x_lo unused): h ← h + Σ_i slots[i]
     * (nh [T][H] fp32, nslots [T][n_slots][H] fp32: the previous layer's MoE rows) and the input
     * x = RMSNorm(h) · ngain made in every block with norm_add_rmsnorm_split's arithmetic, so the
     * same bits as that launch + this kernel on its output. nscratch ([T][H] fp32, not read by the
     * kernel otherwise) holds h's new rows until every block has read h; then block 0 writes them. */
    float *nh, *nscratch;
    const float *nslots;
    int n_slots;
    const uint16_t *ngain;
    float neps;
    /* weights: QKV [(n_heads + 2 n_kv_heads) · head_dim][H] and its bias; O [H][n_heads · head_dim]
     * and its bias; the sinks [n_heads] (fp32); biases may be NULL */
    const uint16_t *qkv_w, *qkv_b, *o_w, *o_b;
    const float *sinks;
    float scale; /* on the scores (0.125) */
    void *k_cache, *v_cache;
    /* outputs: q after RoPE and the attention output [T][n_heads · head_dim], O's [T][H] bf16 */
    uint16_t *q, *attn, *o;
    /* scratch: the split-K partials (attn_stream_workspace_bytes), the grid barrier's 2 words and
     * T · n_kv_heads merge counters, all zero before the first launch and left so by each */
    float *part;
    size_t part_bytes;
    unsigned *bar, *counters;
} attn_stream_args;

/* The form for a pure decode step of T tokens: 0 the launches, 1 this kernel, 2 this kernel with
 * the attention norm inside too (layers after the first). GPTOSS_ATTN_STREAM=0, 1 or 2 (or
 * attn_stream_set) fixes it for every T; unset (or 3), it is 2 at one token and 0 above: session
 * 23 measured, on an H100, +4.3 % for 120b at batch 1 (+2.4 % without the norm inside; the closing
 * run, the default against =0: +3.1 %), -0.2 to -2.6 % at 2 and -7 to -12 % at 4
 * (bench/NOTES.md). attn_stream_set(-1): read the environment
 * again. */
int attn_stream_mode(int T);
void attn_stream_set(int on);

/* A measurement probe (test_attn_stream --bench): stop_after 1 ends the kernel after QKV and its
 * grid barrier, 2 after the attention and its barrier (the producer then streams no O rows), 3 at
 * once (the cooperative launch alone: its fixed cost), 4 after one grid barrier, 5 streams QKV's
 * and O's rows through the ring with nothing computed (each stage released as it lands: the
 * ring's own rate); 0 runs it whole. Outputs are incomplete with 1-5. */
void attn_stream_set_probe(int stop_after);

/* Whether a step of T one-token sequences (n_seqs of them) of hidden size H fits the kernel:
 * 1 ≤ T = n_seqs ≤ ATTN_STREAM_MAX_T, gpt-oss's head shapes (head_dim 64, 8 query heads a KV
 * head, at most ATTN_STREAM_MAX_KV_HEADS KV heads), a bf16 cache, H a multiple of 8 up to ATTN_STREAM_MAX_H, RoPE's half = 32. */
int attn_stream_supported(const attn_dims *d, const rope_kv_freq *f, int T, int n_seqs, int H);

/* Bytes of the partials for T sequences on this device (its SM count sets the splits). */
size_t attn_stream_workspace_bytes(const attn_dims *d, int T);

/* Whether the router by columns (attn_stream_router) fits one token of these shapes on this
 * device (attn_stream_supported aside). */
int attn_stream_router_supported(const attn_dims *d, int H, int E);

/* One cooperative launch on stream (it needs every SM: not beside another kernel of the step,
 * not under tensor parallelism on one GPU). Measured and removed (session 40, H100, 120b batch 1):
 * the launch without the cooperative attribute, 0.998 (20b 0.994); and the preferred carveout of
 * route_sums and the small MoE kernels set to this kernel's (233 KB, where the driver gave them
 * 33, 201 and 135 KB: ncu), 0.996 (20b 1.003): the SMs' reconfiguration between kernels costs
 * nothing measurable. cudaErrorInvalidValue for a step
 * attn_stream_supported refuses or a workspace too small. */
cudaError_t attn_stream_layer(const attn_dims *d, const rope_kv_freq *f, const attn_stream_args *a,
                              cudaStream_t stream);
/* The same with the router by columns in O's epilogue (r: one token; attn_stream_router). Its
 * own kernel instantiation, and a kernel parameter past the others: without it the kernel is the
 * one measured before, bit for bit in its parameters. Measured and removed (session 39, H100,
 * 120b batch 1): its producer asking L2 for the next layer's first N QKV pairs of its block after
 * its last copy, N = 6 +0.9 % (inside a 3.4 % spread), 12 +0.2 %, 64 -1.0 % (-1.2 % with an
 * evict_last hint: the experts and this kernel both slower). */
cudaError_t attn_stream_layer_routed(const attn_dims *d, const rope_kv_freq *f,
                                     const attn_stream_args *a, const attn_stream_router *r,
                                     cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
