/* Tensor parallelism's all-reduce, one-shot over peer memory, fused with the residual add and the
 * RMSNorm that follow it (issue 17; runner_forward.c calls it under --tensor-parallel-size > 1).
 *
 * Under --tensor-parallel-size N each rank's O projection and MoE give a partial [T][H] row per token
 * (model/tp_plan.h): the layer's true output is the sum over the ranks. Every rank needs that sum,
 * then h += sum and the next RMSNorm. At decode the message is tiny (one token: 2,880 values) and
 * latency is everything: NCCL's ring all-reduce costs several round trips. One-shot instead: every
 * rank leaves its partial in its own memory, tells every peer that it is there (a flag written into
 * the peer's memory), waits for the peers' flags, and then reads all N partials straight from the
 * peers' memory (NVLink loads), summing them in rank order 0, 1, …, N−1. Every rank computes the same
 * sum in the same order, so the replicas of h stay bit-identical without a broadcast.
 *
 * Large messages: each rank reads N − 1 whole partials, which at thousands of tokens NCCL's ring
 * does with fewer bytes per rank. Steps of GPTOSS_AR_NCCL_MIN_TOKENS tokens or more can take NCCL
 * instead (allreduce_nccl.h: this file's partial phase and site buffers, ncclAllReduce, then the
 * add + norm as norm.h's kernel); the default, 0, keeps this kernel for every size until the
 * switch point is measured on two GPUs.
 *
 * Flags. Rank r's memory holds flags[block][sender]. Block b of every rank handles the same token
 * rows (t ≡ b mod grid), so a block only waits for block b of the peers. The value written is the
 * block's own call counter (kept in device memory, so a captured graph replays correctly), and the
 * wait is for "at least that value": a fast peer may already have written the next call's.
 *
 * Two buffers per rank, one per call site (ar_site: after attention, after the MoE). A rank may
 * overwrite its site-s buffer only when every peer has finished reading the previous site-s call;
 * between two site-s calls there is always a site-(1−s) call whose barrier no peer passes before it
 * has finished the previous call (stream order). So no closing barrier is needed.
 *
 * A barrier that waits too long gives up (ar_timeout_info below).
 *
 * One device, N "virtual" ranks: the same code runs when every rank's buffers are on one GPU (the
 * peers' pointers are then ordinary device pointers). That is how the sharding and this protocol are
 * tested on one H200 (tests/gpu/test_allreduce.cu): the N kernels run concurrently on N streams, so
 * their grids must be co-resident, which ar_group.max_blocks bounds.
 *
 * All pointers are device pointers; bf16 as uint16_t bits. H a multiple of 8, at most 8192. */
#ifndef GPTOSS_BACKEND_CUDA_ALLREDUCE_H
#define GPTOSS_BACKEND_CUDA_ALLREDUCE_H

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { AR_MAX_RANKS = 8, AR_MAX_BLOCKS = 256, AR_SITES = 2 };

/* The barrier's watchdog. A peer that never arrives (a rank whose host thread is stuck, a kernel of
 * its that cannot be scheduled, calls out of step) would leave the others spinning for good. So a
 * barrier gives up after timeout_ns (GPTOSS_AR_TIMEOUT_S, default 30 s: a healthy peer is at most one
 * layer's kernels behind), records who waited for whom here (host-mapped memory, readable after the
 * kernel died) and traps: the step then fails with a CUDA error instead of hanging, and
 * ar_group_describe_timeout says why. Only the first timeout is recorded. */
typedef struct {
    volatile uint32_t fired;         /* 0 until a barrier gives up */
    int32_t rank, block, peer, what; /* what: 0/1 the all-reduce at that site, 2 the gather */
    uint32_t call;                   /* the call number the waiter was at */
    uint32_t seen;                   /* the peer's flag value it last saw */
    uint32_t peer_counter;           /* the peer's own call counter for that block */
} ar_timeout_info;

/* What one rank's kernel needs: its index, and every rank's buffers (peer pointers mapped). */
typedef struct {
    int n_ranks, rank;
    int max_blocks;                      /* the grid's cap (co-residency, see above) */
    int T_cap, H;                        /* rows each buffer holds */
    float *bufs[AR_SITES][AR_MAX_RANKS]; /* [T_cap][H] fp32 partials, in rank k's memory */
    uint32_t *flags[AR_MAX_RANKS];       /* [AR_MAX_BLOCKS][AR_MAX_RANKS], in rank k's memory */
    uint32_t *counter;                   /* [AR_MAX_BLOCKS] this rank's call counters */
    size_t gather_cap;                   /* floats each gather buffer holds */
    float *gather[AR_MAX_RANKS];      /* rank k's columns of the rows being gathered, its memory */
    uint32_t *counters[AR_MAX_RANKS]; /* every rank's counters (the watchdog's report) */
    ar_timeout_info *timeout_info;    /* the group's, host-mapped */
    unsigned long long timeout_ns;
} ar_rank;

/* A group of n ranks: devices[k] is rank k's GPU (all equal: virtual ranks on one GPU). Allocates
 * each rank's buffers on its device (zeroed flags and counters) and enables peer access between
 * distinct devices; fails (cudaErrorPeerAccessUnsupported, ...) when two GPUs cannot reach each
 * other. max_blocks: the grid cap (0: the device's SM count divided by the ranks on it). */
typedef struct {
    int n_ranks;
    int devices[AR_MAX_RANKS];
    ar_rank rank[AR_MAX_RANKS];
    ar_timeout_info *timeout_info; /* cudaHostAlloc'd, mapped */
} ar_group;

cudaError_t ar_group_create(ar_group *g, int n_ranks, const int *devices, int T_cap, int H,
                            int max_blocks, size_t gather_cap);
void ar_group_free(ar_group *g);

/* After a failed step: 1 and a sentence in buf if a barrier of the group timed out, else 0. */
int ar_group_describe_timeout(const ar_group *g, char *buf, size_t n);

/* Rank r's side of one all-reduce at call site `site` (0 or 1), for T rows (T ≤ T_cap):
 *   1. its partial: if slots or delta is given, partial[t] = slots[t][0] + … + slots[t][n_slots−1]
 *      (fp32) + delta[t] (bf16), written to its site buffer; with neither, the caller already wrote
 *      the partial there (a GEMM's fp32 output, for instance);
 *   2. the flags: it waits until every rank's partial is in place;
 *   3. h[t] += partial_0[t] + … + partial_{N−1}[t] (this order), then, if y is not NULL,
 *      y[t] = rmsnorm(h[t])·gain (bf16) and y_lo its rounding residue (norm.h's split form).
 * Every rank must make the same sequence of calls with the same T, each on its own stream and
 * device; a rank that never calls leaves the others waiting. Launched without PDL. */
cudaError_t ar_add_rmsnorm(const ar_rank *r, int site, const float *slots, int n_slots,
                           const uint16_t *delta, int T, float *h, const uint16_t *gain, float eps,
                           uint16_t *y, uint16_t *y_lo, cudaStream_t stream);

/* DEP's reduce-scatter (tp_backend.c): the same call over T rows of partials (every rank's slots
 * for all T rows, as in 1.), but step 3 only for this rank's rows [row0, row0 + n_rows), into h,
 * y and y_lo's rows 0 .. n_rows − 1. Every rank passes the same T (the grid, and so the barrier's
 * blocks, are a function of T alone); n_rows may be 0 (a rank without rows still joins the
 * barrier). phases as in ar_add_rmsnorm_phases below (AR_PHASE_ALL on separate GPUs). */
cudaError_t ar_reduce_scatter_rmsnorm(const ar_rank *r, int phases, int site, const float *slots,
                                      int n_slots, int T, int row0, int n_rows, float *h,
                                      const uint16_t *gain, float eps, uint16_t *y, uint16_t *y_lo,
                                      cudaStream_t stream);

/* The all-gather of row pieces (tensor parallelism's lm_head: rank k computes the logits of its
 * vocabulary share [col0[k], col0[k] + ncols[k]) for every row). Rank k's piece sits in its gather
 * buffer as [R][ncols[k]] fp32 (the lm_head GEMM writes it there); after the same flag barrier as
 * ar_add_rmsnorm, every rank copies every piece into out ([R][ld] fp32, ld ≥ the sum of ncols), so
 * each rank holds every full row and samples them itself (the same kernels on the same numbers: the
 * same tokens on every rank). A second barrier closes the call: the next lm_head chunk of the step
 * rewrites the gather buffers, which a peer must have finished copying. R * ncols[k] ≤ gather_cap. */
cudaError_t ar_gather_rows(const ar_rank *r, const int *col0, const int *ncols, int R, float *out,
                           int ld, cudaStream_t stream);

/* Ranks in lockstep: every rank's kernels on one stream, one after the other (tp_backend.c's test
 * mode with every rank on one GPU). There a rank's kernel must not wait for a peer's, which comes
 * later in the same stream; instead the caller orders the halves of each call across the ranks:
 *   ar_add_rmsnorm_phases(AR_PHASE_PARTIAL) on every rank, then (AR_PHASE_REDUCE) on every rank;
 *   the lm_head pieces on every rank, then ar_gather_copy on every rank, then the next chunk.
 * No flags are touched, so nothing here depends on which kernels can run at the same time. */
enum { AR_PHASE_PARTIAL = 1, AR_PHASE_BARRIER = 2, AR_PHASE_REDUCE = 4, AR_PHASE_ALL = 7 };
cudaError_t ar_add_rmsnorm_phases(const ar_rank *r, int phases, int site, const float *slots,
                                  int n_slots, const uint16_t *delta, int T, float *h,
                                  const uint16_t *gain, float eps, uint16_t *y, uint16_t *y_lo,
                                  cudaStream_t stream);
cudaError_t ar_gather_copy(const ar_rank *r, const int *col0, const int *ncols, int R, float *out,
                           int ld, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
