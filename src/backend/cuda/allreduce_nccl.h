/* NCCL's all-reduce for the large messages of tensor parallelism (issue 17), beside the one-shot
 * kernel of allreduce.h, which stays the path for small ones.
 *
 * Why two paths: the one-shot kernel makes every rank read every peer's whole partial over NVLink,
 * N − 1 full messages per rank: unbeatable at decode (one flag round trip, a few KB), but at
 * thousands of tokens the bytes dominate, and NCCL's ring/tree move fewer of them per rank. Which
 * is faster at which token count is a measurement (gpu_test_allreduce --bench on two GPUs prints
 * both side by side and suggests the switch point), not a guess.
 *
 * The switch: GPTOSS_AR_NCCL_MIN_TOKENS=M in the environment; a reduction of T ≥ M tokens goes
 * through NCCL, smaller ones through the one-shot kernel. The default, 0, is "never": nothing has
 * been measured on two GPUs yet, so the default keeps today's behaviour (no communicator is even
 * made) until the benchmark's suggestion is measured and written in here as the new default.
 * T is the step's token count, the same on every rank and the same for every all-reduce of a step,
 * and a CUDA graph is captured for one T: every rank takes the same path at every call, eager or
 * replayed. Ranks in lockstep on one GPU (GPTOSS_TP_ONE_GPU=1) never use NCCL, which refuses two
 * ranks on one device (tp_backend.c logs that once).
 *
 * The call is the same function as ar_add_rmsnorm (h += Σ_k partial_k, then the RMSNorm):
 *   1. the rank's partial (Σ slots + delta, fp32) into its own site buffer, by the one-shot kernel's
 *      partial phase (allreduce.h: no flags touched);
 *   2. ncclAllReduce (sum, fp32, in place) of that buffer's T rows;
 *   3. h += the sum, then the RMSNorm and its bf16 split: norm_add_rmsnorm_split with the sum as its
 *      one slot (norm.h), the same row math as the one-shot kernel (norm_row.cuh).
 * NCCL gives every rank the same sum, bit for bit, so the replicas of h stay identical. The sum's
 * order is NCCL's, h + (p_0 + … + p_{N−1}) instead of the one-shot's ((h + p_0) + p_1) + …: the two
 * paths may differ in the last bits (with two ranks, p_0 + p_1 is exact to compare: IEEE addition
 * commutes).
 *
 * Buffers: the one-shot group's site buffers (allreduce.h), so the two paths can alternate from one
 * step to the next. The reuse argument of allreduce.h holds for NCCL's calls too: between two calls
 * at one site comes a call at the other site, which no rank completes before every rank has started
 * it, i.e. finished its previous call at the first site.
 *
 * The communicator: one per TP group, every rank's made at once by ncclCommInitAll from the thread
 * that creates the group (one process drives every GPU: tp_backend.c). Each rank's launch thread
 * then calls ncclAllReduce on its own communicator only (NCCL's one-thread-per-GPU usage; not
 * grouped: inside a group the call may return before the all-reduce is on the stream, and step 3
 * must follow it). NCCL's kernels wait on the GPU for the peers, as ours do; the allreduce.h
 * watchdog does not cover them: a rank that never calls leaves the others waiting for good, so a
 * step that some ranks failed to enqueue aborts the communicators (ar_nccl_abort, tp_backend.c);
 * a rank whose kernels fault on the GPU still leaves its peers' NCCL kernels waiting.
 *
 * Errors: functions returning int give 0, or -1 after err_set() naming NCCL and the call. */
#ifndef GPTOSS_BACKEND_CUDA_ALLREDUCE_NCCL_H
#define GPTOSS_BACKEND_CUDA_ALLREDUCE_NCCL_H

#include "backend/cuda/allreduce.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ncclComm; /* nccl.h's ncclComm_t is a struct ncclComm *: only allreduce_nccl.c includes it */

typedef struct {
    int n_ranks;
    int min_tokens;                      /* T ≥ min_tokens takes NCCL; 0: never */
    struct ncclComm *comm[AR_MAX_RANKS]; /* rank k's communicator (on devices[k]) */
    int devices[AR_MAX_RANKS];
} ar_nccl;

/* Whether this build has NCCL (CMake found it); without it ar_nccl_create fails, naming that. */
bool ar_nccl_built(void);

/* GPTOSS_AR_NCCL_MIN_TOKENS: *min_tokens = its value, 0 when unset or empty; -1 (err_set) when it is
 * not a whole number in [0, 1048576]. */
int ar_nccl_min_tokens_from_env(int *min_tokens);

/* One communicator per rank, rank k on devices[k] (distinct GPUs), made together; then one small
 * all-reduce on every rank, so that NCCL's set-up (connections, kernels) is done here and not inside
 * a step. NVLink multicast (NVLS) is kept off, and NCCL connects at init (NCCL_RUNTIME_CONNECT=0),
 * unless the environment says otherwise. n_ranks may be 1 (an all-reduce of one rank is a copy: the
 * tests run the path so on one GPU). */
int ar_nccl_create(ar_nccl *nc, int n_ranks, const int *devices, int min_tokens);
/* Across machines (tp_nodes.h): this process's n_ranks communicators of a group of `world` ranks
 * spread over several processes, global ranks rank0 .. rank0 + n_ranks - 1 on devices[k], made by
 * ncclCommInitRank inside one ncclGroupStart/End. The unique id is ncclGetUniqueId's with
 * NCCL_COMM_ID set by the caller to node 0's address and port in every process: NCCL then derives
 * the same id everywhere from that address, and global rank 0's ncclCommInitRank starts NCCL's
 * bootstrap root listening there (NVIDIA/nccl src/bootstrap.cc and src/init.cc). It waits until
 * every process has joined. Then the same warm-up all-reduce as ar_nccl_create (every process's
 * ranks take part). comm[k] is global rank rank0 + k's. */
int ar_nccl_create_world(ar_nccl *nc, int n_ranks, const int *devices, int world, int rank0,
                         int min_tokens);
void ar_nccl_destroy(ar_nccl *nc);
/* After a step that some ranks failed to enqueue: the others' NCCL kernels would wait for good (no
 * watchdog, above); ncclCommAbort ends them and frees the communicators. nc is then empty. */
void ar_nccl_abort(ar_nccl *nc);

/* Whether a reduction of T tokens takes NCCL. */
static inline bool ar_nccl_wanted(const ar_nccl *nc, int T) {
    return nc && nc->n_ranks > 0 && nc->min_tokens > 0 && T >= nc->min_tokens;
}

/* ar_add_rmsnorm's contract (allreduce.h: the same arguments, the same result up to the summation
 * order above) through NCCL, for rank r->rank of the group r belongs to (nc made over the same
 * devices). Called on that rank's device and launch thread; every rank must call it with the same
 * T. With neither slots nor delta the partial is already in r->bufs[site][r->rank]. */
int ar_nccl_add_rmsnorm(const ar_nccl *nc, const ar_rank *r, int site, const float *slots,
                        int n_slots, const uint16_t *delta, int T, float *h, const uint16_t *gain,
                        float eps, uint16_t *y, uint16_t *y_lo, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
