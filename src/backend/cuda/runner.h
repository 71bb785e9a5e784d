/* The CUDA backend's insides, shared by its files (never included by the engine):
 *
 *   cuda_backend.c      the backend_ops entry points, options, the memory plan (weights, workspace,
 *                       KV)
 *   weights_gpu.c       weights on the device: checkpoint upload (mmap -> pinned staging -> device)
 *                       and synthetic weights generated in place
 *   weights_upload.c    the staging pipeline those uploads go through (weights_upload.h)
 *   weights_shard.c     a tensor-parallel rank's share of the weights, synthetic or checkpoint
 *   runner.c            one step: launch (check, pack, upload, enqueue) and collect (wait, results)
 *   runner_forward.c    the forward pass as a sequence of kernel calls
 *   runner_workspace.c  the activation workspace and the MoE plan it is sized for
 *   graphs.c            CUDA graphs of decode steps, one per (batch bucket, block-table stride class)
 *
 * Memory plan (device):
 *   weights     dense tensors bf16 (QKV concatenated per layer so one GEMM makes the [q|k|v] row
 *               that rope_kv reads; sinks fp32), experts MXFP4 in moe.h's repacked layout
 *   workspace   one allocation carved per step kind, sized for T_cap tokens and R_cap logits rows
 *               (workspace_ensure; grows on demand, which drops the captured graphs)
 *   step data   what the host packs per step, uploaded with one copy: an eager buffer (grows) and
 *               the graphs' buffer (fixed address, sized for the largest graph layout)
 *   slot_last   each slot's last sampled token (STEP_TOKEN_FROM_DEVICE)
 *   KV          per layer its pool's K and V, [num_blocks][n_kv_heads][block_size][head_dim] bf16,
 *               or e4m3 (1 byte, --kv-cache-dtype fp8: twice the blocks in the same memory) with
 *               the layer's scale table (attention.h), everything left under
 *               --gpu-memory-utilization */
#ifndef GPTOSS_BACKEND_CUDA_RUNNER_H
#define GPTOSS_BACKEND_CUDA_RUNNER_H

#include "step/backend.h"
#include "backend/cuda/attention.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/rope_kv.h"
#include "backend/cuda/sampling.h"
#include "backend/cuda/step_kernel.h"
#include "backend/cuda/allreduce.h"
#include "backend/cuda/allreduce_nccl.h"
#include "base/barrier.h"
#include "base/error.h"
#include "model/config.h"
#include "model/tensors.h"
#include "model/tp_plan.h"

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Returns -1 with a message naming the call when a CUDA runtime call fails. */
#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t cu_err_ = (call);                                                              \
        if (cu_err_ != cudaSuccess)                                                                \
            return err_set("cuda backend: %s failed: %s (%s:%d)", #call,                           \
                           cudaGetErrorString(cu_err_), __FILE__, __LINE__);                       \
    } while (0)

/* ---- weights ---- */

typedef struct {
    uint16_t *attn_norm, *qkv_w, *qkv_b, *o_w, *o_b, *mlp_norm, *router_w, *router_b;
    float *sinks;                       /* [n_heads] fp32 */
    uint8_t *w1_q, *w1_s, *w2_q, *w2_s; /* repacked experts */
    uint16_t *b1, *b2;
    moe_weights moe;         /* the views moe_experts takes */
    void *k_cache, *v_cache; /* this layer's storage in its pool (bf16 or e4m3: dims.kv_fp8) */
    float *kv_scales;        /* FP8: the layer's scale table (attention.h), device; else NULL */
} gpu_layer;

typedef struct {
    uint16_t *embed, *final_norm, *lm_head;
    gpu_layer *layers;
    size_t bytes;
} gpu_weights;

/* ---- activations ---- */

typedef struct {
    int T_cap, R_cap; /* tokens per step, logits rows per lm_head chunk */
    void *base;
    size_t bytes;
    int32_t *ids;   /* [T] resolved token ids */
    float *h;       /* [T][H] residual stream */
    uint16_t *a;    /* [2T][H] normalised input of the next GEMM: T rows bf16, T rows residue */
    float *qkv;     /* [2T][QKV] fp32 products of the two halves of a (bias added in rope_kv) */
    uint16_t *q;    /* [T][Q] after RoPE */
    uint16_t *attn; /* [T][Q] attention output */
    uint16_t *o;    /* [T][H] O projection */
    float *router;  /* [2T][E] the same for the router (bias added in the routing) */
    void *routing;  /* moe_routing_bytes(T) */
    uint16_t *act;  /* moe act */
    float *y_slots; /* moe per-slot outputs */
    float *dec_ws;  /* decode split-K partials */
    size_t dec_ws_bytes;
    uint16_t *sel;     /* [R][H] final-normed rows */
    float *logits;     /* [R][V] */
    gpu_row_out *outs; /* [T] one per logits row */
    void *samp_ws;     /* sampling_workspace_bytes(R_cap): the greedy fast path's scratch, zeroed
                          once at allocation (every launch leaves its counters at 0) */
    unsigned *moe_bar; /* the fused MoE kernel's grid barrier (moe_fused.h): zeroed once, left
                          ready by every launch */
    int *route_ctr; /* gemv_route's arrival counter (gemv.h): zeroed once, left 0 by every launch */
    unsigned *stream_ctr; /* attn_stream's merge counters (attn_stream.h; its grid barrier is
                             moe_bar: the persistent kernels run one after another): zeroed once,
                             left 0 by every launch */
} gpu_workspace;

/* ---- the step as uploaded: offsets of each array inside the packed buffer ---- */

enum {
    UP_TOKEN_IDS,
    UP_TOKEN_SLOT,
    UP_POSITIONS,
    UP_SLOTS_FULL,
    UP_SLOTS_SWA,
    UP_QUERY_START,
    UP_START_POS,
    UP_SWA_FIRST,
    UP_FULL_TABLES,
    UP_SWA_TABLES,
    UP_WORK_FULL,
    UP_WORK_SWA,
    UP_ROWS,
    UP_FIXUPS,
    UP_COUNT
};

typedef struct {
    size_t off[UP_COUNT];
    size_t total;
} up_layout;

/* Sizes: n sequences, T tokens, table strides, prefill tiles per pool kind, logits rows, fixups.
 * The fixups come last, so a layout's other offsets do not depend on them. */
void up_layout_compute(up_layout *L, int n, int T, int full_stride, int swa_stride, int work_full,
                       int work_swa, int rows, int fixups);

/* Everything the forward pass needs to enqueue a step (device pointers into an upload buffer). */
typedef struct {
    int T, n_seqs, n_rows;
    int full_stride, swa_stride;
    int n_work_full, n_work_swa; /* prefill tiles (sequences with >= 2 new tokens) */
    bool has_decode;             /* some sequence has exactly one new token */
    int splits_full, splits_swa; /* attn_decode split counts */
    moe_plan moe;
    int n_slots; /* MoE rows per token in y_slots */
    /* DEP (dp_backend.c; 0 without): the step's rows over every rank (the MoE runs on all of
     * them: moe and n_slots are planned for dep_T_all), this rank's first among them (its rows
     * are [dep_row0, dep_row0 + T) in rank order), and every rank's count (the all-gather). */
    int dep_T_all, dep_row0, dep_rows[DP_MAX];
    const int32_t *token_ids, *token_slot, *positions, *slots_full, *slots_swa;
    const int32_t *query_start, *start_pos, *swa_first, *full_tables, *swa_tables, *work_full,
        *work_swa;
    const gpu_row *rows;
} fwd_plan;

/* ---- CUDA graphs ---- */

enum { GRAPH_MAX_BUCKETS = 16, GRAPH_MAX_CLASSES = 16 };

typedef struct {
    cudaGraphExec_t exec;
    int state; /* 0: not captured yet, 1: ready, -1: capture failed (runs eagerly) */
} graph_slot;

typedef struct {
    int max_size; /* largest captured batch; 0 = graphs off */
    int n_buckets, bucket[GRAPH_MAX_BUCKETS];
    int n_classes, full_class[GRAPH_MAX_CLASSES]; /* full-table strides (blocks), ascending */
    int swa_stride;                               /* the sliding table stride of every graph */
    graph_slot slot[GRAPH_MAX_BUCKETS][GRAPH_MAX_CLASSES];
    void *up_dev; /* the graphs' upload buffer (fixed address) */
    size_t up_bytes;
    long captures, replays, eager_decodes;
} graph_cache;

/* ---- per-step host bookkeeping (built at launch, read at wait) ---- */

/* A row mode of the bookkeeping only (the device sees GPU_ROW_NONE): a constrained row sampled at
 * wait with its mask (runner_masked.c). */
enum { RUNNER_ROW_MASKED = 16 };

typedef struct {
    int n_rows, cap_rows; /* device rows of the step (graphs: one per padded token) */
    int32_t *row_mode;    /* enum gpu_row_mode of each row */
    int32_t *row_host;    /* index into the host logits copy for GPU_ROW_HOST rows, else -1 */
    int32_t *row_masked;  /* index among the masked rows (runner_masked.c), else -1 */
    int n_host;
    int cap_seqs;
    int32_t *seq_row0;  /* first row of each sequence */
    int32_t *seq_nrows; /* rows of each sequence (0: it needs no logits) */
    int n_out_rows;     /* rows whose results are read back (graphs: the real sequences') */
    bool graph;         /* replayed or captured: rows are per sequence, not compacted */
} step_book;

/* ---- structured output's masks on the device (runner_masked.c) ---- */

typedef struct {
    int n, cap;          /* masked rows of the step in flight */
    int32_t *seq;        /* [cap] their sequence */
    gpu_row *desc;       /* [cap] their descriptors for the sampling at wait */
    float *logits;       /* device [cap][V]: their logits, copied aside as the lm_head makes them */
    size_t logits_bytes; /* of logits */
    unsigned char *up_host; /* pinned: descriptors, mask_of_row, masks */
    size_t up_host_cap;
    void *up_dev;
    size_t up_dev_cap;
    gpu_row_out *outs_dev, *outs_host; /* [cap] each */
    size_t outs_dev_bytes, outs_host_bytes;
    long rows_total; /* rows sampled so far (cuda_backend_get_stats) */
} runner_masked;

/* ---- the backend ---- */

/* What the early form covers (runner.h's early mask). */
enum {
    RUNNER_EARLY_O = 1,
    RUNNER_EARLY_QKV = 2,
    RUNNER_EARLY_ROUTER = 4,
    RUNNER_EARLY_LM_HEAD = 8
};

struct backend {
    model_config cfg;
    int V, H, Q, KVD, QKV, E, K, I, L, W;
    float eps, scale;
    attn_dims dims;
    rope_kv_freq freq;
    int block_size, max_slots, max_model_len;
    int num_full, num_swa, n_full_layers, n_swa_layers;
    int sm_count;
    size_t kv_bytes;

    cudaStream_t stream;
    cudaEvent_t done;
    cudaEvent_t t_start,
        t_end; /* timing: the step's own time on the device (step_result.seconds) */
    gemm_ctx *gemm;
    gpu_weights gw;
    gpu_workspace ws;
    /* The step kernel's table of every layer's weights and cache (device; runner_step.c), built
     * once the KV cache exists. */
    step_layer *step_layers;
    uint16_t *step_router_wt; /* every layer's router transposed, [L][H][E] */
    /* the router by columns in attn_stream's O (runner_router_cols.c): its sums and shares */
    unsigned long long *rcols_acc;
    float *rcols_ss;
    long step_kernel_launches; /* cuda_backend_stats */
    int T_reserve;

    int32_t *slot_last;      /* device [max_slots] */
    int32_t *slot_last_host; /* host mirror, updated at wait */

    unsigned char *up_host; /* pinned staging of the packed step */
    size_t up_host_cap;
    void *up_dev; /* device copy for eager steps */
    size_t up_dev_cap;
    graph_cache graphs;

    gpu_row_out *outs_host; /* pinned: the rows' results */
    size_t outs_host_bytes;
    float *hl_host; /* pinned: logits rows sampled on the host */
    size_t hl_host_bytes;

    step_book book;
    /* On unless GPTOSS_GPU_MASKS=0: constrained rows are sampled
     * on the device with their mask (runner_masked.c) instead of from a host copy of the row. */
    bool gpu_masks;
    /* GPTOSS_EARLY_WEIGHTS (bits: RUNNER_EARLY_*; RUNNER_EARLY_O unless set), for steps of at
     * most early_max_t tokens (GPTOSS_EARLY_MAX_T, 1 unless set) on one GPU: the projections whose
     * kernels request their weights before their PDL wait and are launched to start while the
     * previous kernel runs (gemv.h's early form; runner_forward.c). */
    int early, early_max_t;
    /* The MLP norm inside the router's kernel (gemv.h's gemv_norm_route) for steps of at most this
     * many tokens: GPTOSS_NORM_ROUTE (0 … 4), 1 unless set. Measured on the H200 (bench/NOTES.md,
     * session 8): 120b +1.1 % at batch 1, −1.5 % at 2, −4 % at 4 (each block normalises every
     * token before its rows). */
    int norm_route_max_t;
    runner_masked masked;
    long host_rows_total; /* rows sampled on the host so far (cuda_backend_get_stats) */
    int32_t *fix;         /* (slot, token) pairs sampled on the host, applied at the next launch */
    int n_fix, cap_fix;

    float *dbg_logits; /* test hook: every logits row also copied here */
    int dbg_cap, dbg_rows;

    bool running;
    const step_batch *inflight;
    /* Between runner_launch_prepare and runner_launch_enqueue: the step being launched. */
    struct {
        const step_batch *st;
        fwd_plan p;
        size_t up_bytes;
        unsigned char *dev;
        const int32_t *fixups;
        bool graph;
        int bucket_i, cls, n_fix;
    } pending;

    /* Tensor parallelism (--tensor-parallel-size N > 1; tp_backend.c). This backend is rank
     * tp_rank of tp_size, on GPU `device`: its Q, KVD, QKV, I (padded, see weights_shard.c) and
     * dims are its shares, and its lm_head holds vocabulary rows [V0, V0 + V_lm) (V stays the whole
     * vocabulary: every rank gathers full logits rows and samples them itself). Its experts are
     * tp_share's [expert0, expert0 + n_experts): every one but under --enable-expert-parallel (E
     * stays the router's whole count; the moe_weights' E is n_experts). Rank 0 is the
     * backend the engine holds; it owns the others (tp_peer[r], tp_peer[0] = itself) and the
     * all-reduce group. Without TP: tp_size 1, V_lm = V, V0 = 0, every expert, ar NULL.
     * Across machines (--nnodes > 1, tp_nodes.h) tp_size and tp_rank are this process's ranks and
     * this one's index among them (what tp_peer, ar and the launch threads are indexed by), and
     * tp_world and tp_grank the whole group's size and this rank's place in it (its share of the
     * model is plan rank tp_grank); on one machine they are equal. */
    int tp_size, tp_rank, device;
    int tp_world, tp_grank;
    struct tp_nodes *nodes; /* --nnodes > 1: the nodes' state, every local rank's the same (its
                               rank 0 owns it); NULL on one machine */
    tp_rank tp_share;
    int V_lm, V0, I_model; /* I_model: the model's intermediate size (I is this rank's, padded) */
    const ar_rank *ar;
    ar_group *ar_owned;
    /* NCCL for the all-reduces of T >= GPTOSS_AR_NCCL_MIN_TOKENS tokens (allreduce_nccl.h): the
     * group's communicators, owned by rank 0; NULL when the option is 0 (the default) or the ranks
     * share one GPU. */
    const ar_nccl *nccl;
    ar_nccl *nccl_owned;
    struct backend *tp_peer[TP_MAX];
    struct tp_workers *tp_threads; /* rank 0: the host threads that launch ranks 1.. */
    barrier *tp_lock; /* every rank on one GPU: the launch threads meet here at each collective */
    bool stream_borrowed; /* b->stream is rank 0's (lockstep): not this rank's to destroy */
    int tp_col0[TP_MAX], tp_ncols[TP_MAX]; /* every rank's vocabulary share, for the gather */

    /* DEP (--data-parallel-size N > 1 with --enable-expert-parallel; dp_backend.c): the tp ranks
     * above are the data-parallel ranks (dp_size = tp_size = N, model/tp_plan.h's
     * tp_plan_make_dep: whole attention and lm_head, experts by rank), each with its own KV pools
     * and its own sequences. dp_rows: every rank's rows in the step being launched (set on every
     * rank before the ranks' preparation: the MoE's workspace and plan are for their sum). Rank 0
     * keeps each rank's part of the step (step/batch_split.h) until wait. 0 / unused without. */
    int dp_size;
    int dp_rows[DP_MAX];
    step_batch dp_part[DP_MAX];
    int32_t *dp_qs[DP_MAX]; /* the parts' rebased query_start */
    int dp_qs_cap[DP_MAX];
};

/* weights_gpu.c */
int weights_gpu_alloc(struct backend *b);
int weights_gpu_upload(struct backend *b, const char *dir);
int weights_gpu_synthetic(struct backend *b, uint64_t seed);
void weights_gpu_free(struct backend *b);
/* Shared with weights_shard.c: where a dense tensor goes (bf16 unless *f32), synthetic.c's scale
 * base exponent for a standard deviation, whether every expert matrix may fold its scales. */
void *weights_gpu_dense_dst(struct backend *b, const tensor_spec *s, int *f32);
int weights_gpu_scale_base(double std);
int weights_gpu_decide_folded(struct backend *b);

/* weights_shard.c: this rank's shares (tp_size > 1) of the synthetic model or of the checkpoint in
 * dir (mapped by each rank, sent through weights_upload.h's pipeline), each element equal to the
 * one weights_gpu_synthetic or weights_gpu_upload puts at the same place of the whole tensor;
 * experts padded to I. */
int weights_shard_synthetic(struct backend *b, uint64_t seed);
int weights_shard_checkpoint(struct backend *b, const char *dir);

/* runner_workspace.c: makes the workspace hold steps of T tokens (a no-op when it does). */
int workspace_ensure(struct backend *b, int T);
void workspace_free(struct backend *b);

/* runner_step.c: the step kernel's table of every layer's weights and cache (step_layers), built
 * once the KV cache exists (cuda_rank_setup), freed with the backend. */
int runner_step_table_build(struct backend *b);
void runner_step_table_free(struct backend *b);
cudaError_t runner_router_transposed(struct backend *b); /* b->step_router_wt, built once */

/* runner_router_cols.c: the router by columns in attn_stream's O epilogue at one token (on by
 * default, GPTOSS_ROUTER_COLS=0 off; attn_stream.h's attn_stream_router, route_sums.h): its
 * buffers, built before the KV cache and freed before the step kernel's table, and whether a
 * step takes it. */
int runner_router_cols_build(struct backend *b);
void runner_router_cols_free(struct backend *b);
bool runner_router_cols_takes(const struct backend *b, const fwd_plan *p);

/* runner_forward.c: enqueues the step p describes; copy_host_rows also copies the logits rows the
 * host samples (and the test hook's rows) out after each lm_head chunk (eager steps only). */
int runner_forward(struct backend *b, const fwd_plan *p, bool copy_host_rows);

/* runner.c. runner_launch = runner_launch_prepare, then runner_launch_enqueue. The first is the host
 * half (checks, packing, growing buffers: cudaFree and friends, which wait for the whole device);
 * the second only enqueues on the rank's stream and never waits for the device. Tensor parallelism
 * prepares every rank before any rank enqueues: a rank whose step waits in an all-reduce for the
 * others would otherwise block a device-wide wait on the same GPU for good (tp_backend.c). */
int runner_launch(struct backend *b, const step_batch *st);
int runner_launch_prepare(struct backend *b, const step_batch *st);
int runner_launch_enqueue(struct backend *b);
int runner_collect(struct backend *b, step_result *res);
void runner_free(struct backend *b);

/* cuda_backend.c: one rank's device state (stream, weights, workspace, graphs, KV) on b->device,
 * once b's config, dims and share are set; lead (under TP, rank 0 for the others) gives the KV
 * block counts; others_on_device: ranks still to be set up on the same GPU (kv_alloc). */
int cuda_rank_setup(struct backend *b, const backend_options *opt, bool synthetic, uint64_t seed,
                    const struct backend *lead, int others_on_device);
void cuda_rank_destroy(struct backend *b);

/* tp_backend.c: --tensor-parallel-size N > 1. tp_create turns b (config set) into rank 0 and makes
 * the other ranks; launch and wait drive them all; tp_destroy_peers frees ranks 1.. and the group. */
int tp_create(struct backend *b, const backend_options *opt, bool synthetic, uint64_t seed);
int tp_launch(struct backend *b, const step_batch *st);
int tp_wait(struct backend *b, step_result *res);
void tp_destroy_peers(struct backend *b);
/* The forward pass's collectives (allreduce.h): the all-reduce + residual + RMSNorm (0, or -1 with
 * err_set), and the logits gather of nr rows into out. Ranks on their own GPUs run the all-reduce as
 * one kernel each, or for T >= GPTOSS_AR_NCCL_MIN_TOKENS as NCCL's all-reduce and the norm kernel
 * (allreduce_nccl.h); ranks in lockstep on one GPU (tp_lock) order the halves across the ranks on
 * the host. */
int tp_all_reduce(struct backend *b, int site, const float *slots, int n_slots,
                  const uint16_t *delta, int T, float *h, const uint16_t *gain, float eps,
                  uint16_t *y, uint16_t *y_lo, cudaStream_t s);
cudaError_t tp_gather(struct backend *b, int nr, float *out, cudaStream_t s);

/* dp_backend.c: DEP. dp_launch splits the step into the ranks' parts and launches them (each rank
 * its own part, tp_launch_parts); dp_wait collects every rank's results into the step's. The
 * forward pass's two collectives (runner_forward_dep.c): the all-gather of the ranks' MLP-normed
 * rows (ws.a's T hi and T lo rows -> dep_T_all hi and lo rows, rank order, in ws.a), and the
 * reduce-scatter of y_slots (dep_T_all rows, the ranks' expert outputs summed in rank order) into
 * this rank's T rows of h, followed by the RMSNorm with gain into y, y_lo when gain is given. */
int dp_launch(struct backend *b, const step_batch *st);
int dp_wait(struct backend *b, step_result *res);
void dp_free(struct backend *b);
int dep_gather_rows(struct backend *b, const fwd_plan *p, cudaStream_t s);
int dep_reduce_scatter(struct backend *b, const fwd_plan *p, const uint16_t *gain, uint16_t *y,
                       uint16_t *y_lo, cudaStream_t s);
/* tp_backend.c: launches rank r's part parts[r] on every rank (tp_launch: the same step on all). */
int tp_launch_parts(struct backend *b, const step_batch *const *parts);
/* runner_forward_dep.c: DEP's forward pass of this rank's part (p->T may be 0: the rank still
 * joins every collective); copies the host and test-hook rows out as runner_forward does. */
int runner_forward_dep(struct backend *b, const fwd_plan *p);

/* runner.c: whether rank 0 (lead) sampled sequence i's row of its step st on the host or at wait
 * (the other ranks take its token as a fix-up); and queuing such a fix-up on a rank for its next
 * launch. */
bool runner_lead_sampled(const struct backend *lead, const step_batch *st, int i);
void runner_add_fixup(struct backend *b, int32_t slot, int32_t token);

/* runner.c, for a rank other than 0 at wait: waits for its step, then takes rank 0's tokens of the
 * rows rank 0 sampled on the host or at wait (the peer sampled the others itself, identically) as
 * fix-ups for its next launch. */
int runner_tp_follow(struct backend *peer, const struct backend *lead, const step_batch *st,
                     const step_result *res);

/* graphs.c */
int graphs_init(struct backend *b, int max_size);
void graphs_invalidate(struct backend *b);
void graphs_free(struct backend *b);
/* Whether a decode-only step of n sequences with these strides fits a graph; gives its bucket and
 * class. */
bool graphs_pick(const struct backend *b, int n, int full_stride, int swa_stride, int *bucket,
                 int *cls);
/* Runs the step described by p (already uploaded to the graphs' buffer): replays the graph of
 * (bucket, cls), or on first use runs it eagerly and captures it for the next time. */
int graphs_run(struct backend *b, int bucket_index, int cls, const fwd_plan *p);

#endif
