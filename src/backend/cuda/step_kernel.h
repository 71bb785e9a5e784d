/* Every layer of a one-token decode step as one persistent kernel (step_kernel.cu): issue 13's
 * step kernel, first form. One block an SM, eight consumer warps and one producer warp, as
 * attn_stream.h's kernel, and per layer:
 *   the attention norm (h + the previous layer's MoE rows; the first layer's input comes from
 *   norm_embed_split), QKV + RoPE + KV write, attention, O (attn_stream_phases.cuh's phases, the
 *   same device code), with the router by columns over each block's rows of h + o (its sums
 *   and the MLP norm's sum of squares in shares); the routing, made in every block from those
 *   sums, and the MLP norm of h + o; gate_up with SwiGLU and down with its bias and routing
 *   weight, their tiles streamed through the same ring in chunks once the routing is known
 *   (step_moe.cuh: the small MoE kernel's dequantisation and MMAs, one token);
 * with a grid barrier between the phases instead of a kernel boundary.
 *
 * Why (bench/NOTES.md, sessions 24-28): at batch 1 a layer spends ~70 µs (H100) for 108 MB of
 * weights that stream in ~36. Every form that shortened one kernel's chain gained at most ~2 %;
 * what the layer probe measured as the one large gain (-25 %) is a stream of weights that crosses
 * the phase and layer boundaries. Here the producer walks the dense weights (QKV pairs, O rows,
 * the router's columns) of every layer in order and waits only for a free ring stage (and, for O's
 * rows, for its layer's QKV barrier), so the next layer's QKV rows stream into the ring while this
 * layer's router, routing and experts run.
 *
 * Not the same bits as the layer loop: a tile's chunks are summed apart and then added (the small
 * kernel accumulates the whole k range), down is unsplit (one MoE row an expert), and the router's
 * logits are summed by columns in 2^-24 fixed point (the same bits in any order, not the loop's).
 * The attention phases are the loop's bits.
 *
 * Plain C header; device pointers; bf16 values as uint16_t bit patterns. */
#ifndef GPTOSS_BACKEND_CUDA_STEP_KERNEL_H
#define GPTOSS_BACKEND_CUDA_STEP_KERNEL_H

#include "backend/cuda/attention.h"
#include "backend/cuda/attn_stream.h"
#include "backend/cuda/rope_kv.h"

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One layer's weights and cache, an entry of the device table the kernel walks (built once, after
 * the KV cache exists: step_table_build). */
typedef struct {
    const uint16_t *qkv_w, *qkv_b, *o_w, *o_b;
    const float *sinks;
    void *k_cache, *v_cache;
    const uint16_t *attn_norm, *mlp_norm, *router_w, *router_b;
    const uint8_t *w1_q, *w1_s, *w2_q, *w2_s; /* repacked experts (moe.h), folded scales only */
    const uint16_t *b1, *b2;
    /* the router's weights transposed, [H][E]: a block's rows of h + o select its columns */
    const uint16_t *router_wt;
    int sliding, pad[3];
} step_layer;

typedef struct {
    int L, H, E, k, I; /* the down projection is unsplit: y_slots holds k rows */
    float alpha, limit, eps, scale;
    const step_layer *layers; /* device [L] */
    /* the step (one token of one sequence): its position, its slot in each pool, the sequence as
     * attn_decode sees it for each pool (window: the sliding layers') */
    const int32_t *positions, *slots_full, *slots_swa;
    attn_seqs seqs_full, seqs_swa;
    /* the first layer's input: norm_embed_split's split-bf16 row */
    const uint16_t *x, *x_lo;
    /* the residual stream [H] (in: the embedding row; out: after the last layer's MLP residual),
     * a scratch row [H] (fp32), the MoE rows [k][H] (out: the last layer's), the activations
     * [k][I] (the logits stay in the kernel: router_acc below) */
    float *h, *scratch, *y_slots;
    uint16_t *act;
    /* attention's buffers: q [Q], its output [Q], O's output [H], the split-K partials
     * (attn_stream_workspace_bytes), the grid barrier's two words and the merge counters (zero
     * before the first launch, left so) */
    uint16_t *q, *attn, *o;
    float *part;
    size_t part_bytes;
    unsigned *bar, *counters;
    /* the experts' tile tickets: 2 L words, zero before the first launch, left so (runner_step.c
     * keeps them past the layer table) */
    unsigned *tickets;
    /* the router's sums of a layer as 2^-24 fixed point, [2][ATTN_ROUTER_GROUPS][E] (zero before
     * the first launch, left so), and the blocks' sums of squares of h + o, [2][ATTN_ROUTER_MAX_G]
     * (zero past the grid before the first launch) */
    unsigned long long *router_acc;
    float *ss_part;
} step_kernel_args;

/* GPTOSS_STEP_KERNEL=1 (or step_kernel_set(1)): the runner takes this kernel for one-token decode
 * steps it supports. Off by default until measured; step_kernel_set(-1) reads the environment
 * again. */
int step_kernel_enabled(void);
void step_kernel_set(int on);

/* A measurement probe (test_cuda_forward --step-kernel --bench): with stamps (device, 8 · L
 * entries) non-NULL, every later launch writes block 0's %globaltimer (ns) at layer l's start
 * (stamps[8 l]) and as it leaves each of phases 0-6 (stamps[8 l + 1 + i]: the input norm and
 * preloads; after the grid barriers of QKV, attention, O, the MLP norm + router, gate_up, down).
 * NULL: off. */
void step_kernel_set_probe(unsigned long long *stamps);
/* The blocks' probe (test_cuda_forward --step-kernel --bench): with stamps (device, 12 · L · G
 * entries, G the SM count) non-NULL, block b writes at stamps[(12 l + i) · G + b] the low 32 bits
 * of its %globaltimer (ns) as its consumers finish phase i of layer l (i = 1-6: QKV, attention, O,
 * MLP norm + router, gate_up, down; before the grid barrier), as its routing is done (i = 7), and
 * inside the attention (blocks with a split only: 8 its first keys landed, 9 its keys done, 10 the
 * merge counter answered when its head has more than one split, 11 the merge done, by the merging
 * block); i = 0: its SM id. The probe adds a block barrier a phase. NULL: off. */
void step_kernel_set_block_probe(unsigned *stamps);
/* The wait probe (test_cuda_forward --step-kernel --bench): with probe (device, L · G · 9 · 24
 * words, zeroed) non-NULL, each warp w of block b (w = 8: the producer) keeps 24 words of layer l at
 * probe[((l · G + b) · 9 + w) · 24]: sums over every launch of %clock cycles in the expert phases
 * (consumers: waiting for the stage's issue, for its copy, multiplying, the meet and epilogue,
 * and the chunks, for gate_up at 0-4 and down at 5-9; the producer: waiting for a free stage,
 * issuing, its chunks at the same places, and the waits for a free stage before the experts, for
 * the QKV barrier, for the routing, and the tiles' taking at 2, 3, 7, 8), then the last launch's
 * points of phases 5-6 on the block's %clock (10-18) and warp 0's %globaltimer at two of them
 * (19, 20), and of the multiply, the cycles until lane 0's scale words are in (21 gate_up,
 * 22 down); layer 0's block 0 producer word 23 counts the launches. step_kernel.cu's SKW_ enum
 * names each word. NULL: off. Compiled in only with -DGPTOSS_STEP_WAIT_PROBE=1 (its off path cost
 * 1.3-1.8 % of decode); returns 1 when compiled in, else 0 (the words then stay as they are). */
int step_kernel_set_wait_probe(unsigned *probe);
/* The experts' probe (with the phase probe): 1 their chunks are waited for and released but not
 * multiplied (the stream alone), 2 they are multiplied but not copied (whatever the stage holds:
 * the arithmetic alone); 0 off. Outputs are meaningless under 1 and 2. */
void step_kernel_set_moe_probe(int mode);

/* Whether the model's shapes fit: attn_stream's (one token), at least 8 QKV row pairs a block,
 * E ≤ the SM count (a router row a block), k ≤ 8, H and I multiples of 64, the staged rows beside
 * the ring, at most 16 tiles of each expert matrix a block and 4 chunks a tile. */
int step_kernel_supported(const attn_dims *d, const rope_kv_freq *f, int H, int E, int k, int I);

/* One cooperative launch on stream (every SM: nothing else of the step beside it).
 * cudaErrorInvalidValue for shapes step_kernel_supported refuses or missing buffers. */
cudaError_t step_kernel_launch(const attn_dims *d, const rope_kv_freq *f, const step_kernel_args *a,
                               cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
