/* Tensor parallelism on the CUDA backend: --tensor-parallel-size N > 1, with
 * --enable-expert-parallel or not (issue 17).
 *
 * One process drives N ranks from one thread, each rank a whole `struct backend` on its own GPU
 * (stream, cuBLASLt context, weights, workspace, CUDA graphs, KV pools): rank 0 is the backend the
 * engine holds, the others hang off it (tp_peer). Each rank holds its share of the model
 * (model/tp_plan.h: its query and KV heads, its intermediate units of every expert or, under EP,
 * its experts (below), its vocabulary rows; weights_shard.c) and runs the same forward pass (runner_forward.c) on the same step, with
 * three collective points per layer pair and step (allreduce.h):
 *   - after the O projection and after the MoE: the one-shot all-reduce fused with the residual add
 *     and the next RMSNorm (every rank then holds the same residual stream, bit for bit); or, for
 *     steps of GPTOSS_AR_NCCL_MIN_TOKENS tokens or more, NCCL's all-reduce followed by the same
 *     add + norm as a kernel of its own (allreduce_nccl.h; off by default until the switch point
 *     is measured on two GPUs, and never with the ranks on one GPU);
 *   - after the lm_head: an all-gather of the vocabulary shares, so that every rank holds the full
 *     logits rows and samples them itself; the same kernels on the same numbers give the same tokens,
 *     so every rank's device-side last tokens (async scheduling) stay equal without a broadcast.
 * Rows that rank 0 samples on the host or at wait (penalties, structured output's masks) reach the
 * other ranks as fix-ups at the next launch (runner_tp_follow).
 *
 * Host threads: one per GPU. The engine's thread packs and enqueues rank 0's step while one worker
 * thread per other rank does the same for its rank at the same time (an eager prefill step is
 * hundreds of launches: enqueued rank after rank, rank 0's GPU would wait at its first all-reduce
 * for the others' CPU time). A rank's all-reduce kernels wait on the GPU for the others, never on the
 * host. The host halves of the launch (runner_launch_prepare: checks, packing, buffer growth, which
 * may wait for a whole device) run first for every rank, one after the other on the engine's
 * thread; only the enqueues run side by side. So a failed check leaves nothing enqueued, and only a
 * CUDA error during the enqueues can leave one rank's step waiting for another's: fatal anyway.
 *
 * GPUs: N of them, peer access between each pair (NVLink on an H200 node). GPTOSS_TP_ONE_GPU=1 puts
 * every rank on one GPU instead, in lockstep on one stream (below): the sharded model is tested that
 * way on one H200 (tests/gpu/test_cuda_forward.cu's --tp). An earlier version ran the ranks' streams
 * side by side there, with the flag barriers; it hung at TP4 and on the whole 120b at TP2 (a rank's
 * spinning all-reduce blocks and another rank's kernels sharing one GPU's SMs: on separate GPUs
 * that cannot happen, each GPU's work ends up waiting only for the other GPU).
 *
 * Expert parallelism (--enable-expert-parallel): the MoE by experts instead, the rest as above.
 * Rank r holds experts [expert0, expert0 + n_experts) whole (gate_up, down, both biases; the
 * router whole). Every rank routes every token alike (the same router weights on the same residual
 * stream); each groups and runs only its own experts' (token, slot) pairs, and the other pairs' rows
 * of its y_slots are zeros (moe.h), so the same all-reduce sums the ranks' y_slots into the whole
 * MoE output. Each rank adds the down bias of its own experts. Every pair is computed whole by one
 * rank, so the MoE partials need no intermediate-dimension padding (I stays 2,880).
 *
 * Weights: synthetic models (made in place) and checkpoints (each rank maps the checkpoint and
 * sends its share through the staging pipeline), both by weights_shard.c. Not done yet: the
 * measured default for GPTOSS_AR_NCCL_MIN_TOKENS (gpu_test_allreduce --bench on two GPUs; today 0,
 * the one-shot kernel for every size); EP's all-to-all dispatch (today every rank reads every
 * token's row and the all-reduce moves whole y_slots, as under TP).
 *
 * DEP2 (data-parallel attention + expert-parallel MoE: --data-parallel-size 2 with
 * --enable-expert-parallel; dp_backend.c, runner_forward_dep.c), built in its first form on these
 * ranks: tp_plan_make_dep's shares (whole attention and lm_head, half the experts each), each rank
 * its own sequences, their KV in its own pools and their slots' last tokens. One global scheduler,
 * not one per rank (engine/scheduler.c says why): the engine builds one step whose sequences are
 * grouped by rank (step/batch.h's dp_seq0; each sequence's rank chosen at admission by free KV
 * blocks), and tp_launch_parts hands each rank its part. Per layer each rank runs attention on its
 * rows; the MoE's input rows are all-gathered (rank order: the gather buffers of allreduce.h, two
 * rows of bf16 pairs, hi and lo halves), every rank routes all of them and runs its experts' pairs
 * (the others' rows zero, as under EP), and y_slots is reduce-scattered: the one-shot all-reduce's
 * kernel summing every rank's slots for this rank's rows only, fused with the next attention norm.
 * Not yet: graphs (DEP is eager), structured output's masks, NCCL, and the later form that
 * dispatches only the routed rows to their experts' ranks and combines them back (all-to-all over
 * NVLink) instead of gathering every row and reducing whole y_slots.
 *
 * Across machines (--nnodes N > 1; tp_nodes.h, not yet run): this process holds tp_size = -tp / N
 * of the ranks (tp_rank the local index, tp_grank the global one), everything above holds within
 * it, and NCCL takes every collective: the all-reduces (tp_all_reduce), the logits' all-gather
 * (tp_gather), and node 0's broadcast of each step to the other nodes' processes (tp_launch_parts,
 * between the host halves and the enqueues). */
#include "backend/cuda/runner.h"
#include "backend/cuda/tp_nodes.h"
#include "base/barrier.h"
#include "base/log.h"
#include "base/xalloc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- lockstep (every rank on one GPU) ---- */

/* With GPTOSS_TP_ONE_GPU=1 the ranks share rank 0's stream and their kernels run one after another,
 * so no rank's kernel may wait for a peer's (it would wait for a kernel queued behind it). Each
 * launch thread still enqueues its own rank's step; at every collective the threads meet here,
 * so that all ranks' partials are enqueued before any rank's reduction (allreduce.h's halves). A
 * rank whose enqueue fails breaks the barrier, and every waiting rank then fails too instead of
 * waiting for good (b->tp_lock, base/barrier.h). Graphs are off in this mode (one stream, N threads). */
static void lockstep_free(barrier *l) {
    if (!l) return;
    barrier_destroy(l);
    free(l);
}

/* ---- the launch threads ---- */

typedef struct {
    struct backend *b; /* its rank */
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const step_batch *job; /* the step to launch; NULL once launched */
    bool quit;
    int rc;
    char err[512];
} tp_worker;

struct tp_workers {
    int n; /* ranks 1 .. n */
    tp_worker w[TP_MAX];
};

static void *worker_main(void *arg) {
    tp_worker *w = arg;
    cudaSetDevice(w->b->device);
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->job && !w->quit) pthread_cond_wait(&w->cv, &w->mu);
        if (w->quit) break;
        pthread_mutex_unlock(&w->mu);
        const int rc = runner_launch_enqueue(w->b); /* its host half ran in tp_launch */
        if (rc && w->b->tp_lock) barrier_break(w->b->tp_lock, w->b->tp_rank);
        pthread_mutex_lock(&w->mu);
        w->rc = rc;
        if (rc) snprintf(w->err, sizeof w->err, "%s", err_msg());
        w->job = NULL;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static int workers_start(struct backend *b) {
    struct tp_workers *ws = xcalloc(1, sizeof *ws);
    b->tp_threads = ws;
    for (int r = 1; r < b->tp_size; r++) {
        tp_worker *w = &ws->w[r];
        w->b = b->tp_peer[r];
        pthread_mutex_init(&w->mu, NULL);
        pthread_cond_init(&w->cv, NULL);
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            pthread_mutex_destroy(&w->mu);
            pthread_cond_destroy(&w->cv);
            return err_set("--tensor-parallel-size: cannot start the launch thread of rank %d", r);
        }
        w->started = true;
        ws->n = r;
    }
    return 0;
}

static void workers_stop(struct backend *b) {
    struct tp_workers *ws = b->tp_threads;
    if (!ws) return;
    for (int r = 1; r <= ws->n; r++) {
        tp_worker *w = &ws->w[r];
        if (!w->started) continue;
        pthread_mutex_lock(&w->mu);
        w->quit = true;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
    }
    free(ws);
    b->tp_threads = NULL;
}

/* The path is a function of T alone (allreduce_nccl.h), so every rank takes the same one at every
 * call of a step, and a captured graph keeps it. */
int tp_all_reduce(struct backend *b, int site, const float *slots, int n_slots,
                  const uint16_t *delta, int T, float *h, const uint16_t *gain, float eps,
                  uint16_t *y, uint16_t *y_lo, cudaStream_t s) {
    /* across nodes every all-reduce is NCCL's (tp_nodes.h); on one machine from
     * GPTOSS_AR_NCCL_MIN_TOKENS tokens on, never in lockstep (tp_create) */
    if (b->nodes || ar_nccl_wanted(b->nccl, T))
        return ar_nccl_add_rmsnorm(b->nccl, b->ar, site, slots, n_slots, delta, T, h, gain, eps, y,
                                   y_lo, s);
    if (!b->tp_lock) {
        CU(ar_add_rmsnorm(b->ar, site, slots, n_slots, delta, T, h, gain, eps, y, y_lo, s));
        return 0;
    }
    CU(ar_add_rmsnorm_phases(b->ar, AR_PHASE_PARTIAL, site, slots, n_slots, delta, T, h, gain, eps,
                             y, y_lo, s));
    if (barrier_wait(b->tp_lock)) /* a peer failed: its message is the one tp_launch shows */
        return err_set("rank %d: the all-reduce's partners failed (lockstep)", b->tp_rank);
    CU(ar_add_rmsnorm_phases(b->ar, AR_PHASE_REDUCE, site, slots, n_slots, delta, T, h, gain, eps,
                             y, y_lo, s));
    return 0;
}

cudaError_t tp_gather(struct backend *b, int nr, float *out, cudaStream_t s) {
    if (b->nodes) return tp_nodes_gather(b, nr, out, s);
    if (!b->tp_lock) return ar_gather_rows(b->ar, b->tp_col0, b->tp_ncols, nr, out, b->V, s);
    /* every rank's piece, then every rank's copy, then (the next chunk rewrites the pieces) again */
    if (barrier_wait(b->tp_lock)) return cudaErrorLaunchFailure;
    cudaError_t e = ar_gather_copy(b->ar, b->tp_col0, b->tp_ncols, nr, out, b->V, s);
    if (e != cudaSuccess) return e;
    return barrier_wait(b->tp_lock) ? cudaErrorLaunchFailure : cudaSuccess;
}

/* Local rank r of n in this process, global rank g of the plan: its dims (its heads, its
 * intermediate share padded to I_pad, its vocabulary rows). On one machine r = g and n = the
 * plan's size. */
static void apply_share(struct backend *b, const tp_plan *plan, int g, int r, int n, int device,
                        int I_pad) {
    const tp_rank *k = &plan->rank[g];
    const int D = b->cfg.head_dim;
    b->tp_size = n, b->tp_rank = r, b->tp_share = *k, b->device = device;
    b->tp_world = plan->size, b->tp_grank = g;
    b->Q = k->n_q_heads * D, b->KVD = k->n_kv_heads * D, b->QKV = b->Q + 2 * b->KVD;
    b->dims.n_heads = k->n_q_heads, b->dims.n_kv_heads = k->n_kv_heads;
    b->I_model = b->cfg.intermediate, b->I = I_pad;
    b->V0 = k->vocab0, b->V_lm = k->n_vocab;
    for (int j = 0; j < plan->size; j++)
        b->tp_col0[j] = plan->rank[j].vocab0, b->tp_ncols[j] = plan->rank[j].n_vocab;
}

/* The all-reduce group again, for b->ws.T_cap rows. Every rank idle first (the last step's
 * collectives all have their partners, so this ends); the new group's counters start at 0 on every
 * rank alike. */
static int grow_collectives(struct backend *b) {
    ar_group *g = b->ar_owned;
    int devices[AR_MAX_RANKS];
    const int n = g->n_ranks, H = g->rank[0].H;
    /* DEP gathers every row's normed input (T_cap x H floats' worth of bf16 pairs, hi and lo) */
    const size_t gather_cap =
        b->dp_size > 1 ? (size_t)b->ws.T_cap * (size_t)H : g->rank[0].gather_cap;
    memcpy(devices, g->devices, sizeof devices);
    for (int r = 0; r < b->tp_size; r++) {
        CU(cudaSetDevice(b->tp_peer[r]->device));
        CU(cudaStreamSynchronize(b->tp_peer[r]->stream));
    }
    log_info("cuda backend: a step of %d tokens: growing the all-reduce buffers", b->ws.T_cap);
    ar_group_free(g);
    cudaError_t e = ar_group_create(g, n, devices, b->ws.T_cap, H, 0, gather_cap);
    CU(cudaSetDevice(b->device));
    if (e != cudaSuccess)
        return err_set("--tensor-parallel-size: cannot grow the all-reduce buffers to %d rows: %s",
                       b->ws.T_cap, cudaGetErrorString(e));
    for (int r = 0; r < b->tp_size; r++) b->tp_peer[r]->ar = &g->rank[r];
    return 0;
}

/* NCCL for large all-reduces (allreduce_nccl.h), when GPTOSS_AR_NCCL_MIN_TOKENS asks for it: the
 * communicators of every rank at once (ncclCommInitAll) from this thread, before the launch threads
 * start: one process holds every GPU, so NCCL's single-process initialisation fits, and there is no
 * unique id to hand between threads as ncclCommInitRank would need. Not in lockstep: NCCL refuses
 * two ranks on one GPU. The KV pools are sized before this (cuda_rank_setup) but leave
 * (1 - gpu_memory_utilization) of each GPU free, which holds NCCL's buffers. */
static int nccl_setup(struct backend *b, int N, const int *devices, bool one_gpu) {
    int min_tokens = 0;
    if (ar_nccl_min_tokens_from_env(&min_tokens)) return -1;
    if (min_tokens == 0) return 0; /* the default: the one-shot kernel serves every size */
    if (one_gpu) {
        log_info("cuda backend: GPTOSS_AR_NCCL_MIN_TOKENS=%d ignored: the ranks share one GPU "
                 "(GPTOSS_TP_ONE_GPU=1), where NCCL cannot run; the one-shot all-reduce serves "
                 "every size",
                 min_tokens);
        return 0;
    }
    b->nccl_owned = xcalloc(1, sizeof *b->nccl_owned);
    if (ar_nccl_create(b->nccl_owned, N, devices, min_tokens)) {
        free(b->nccl_owned);
        b->nccl_owned = NULL;
        return err_prefix("--tensor-parallel-size %d (GPTOSS_AR_NCCL_MIN_TOKENS=%d)", N,
                          min_tokens);
    }
    for (int r = 0; r < N; r++) b->tp_peer[r]->nccl = b->nccl_owned;
    log_info("cuda backend: all-reduces of %d tokens or more through NCCL, smaller ones through "
             "the one-shot kernel (GPTOSS_AR_NCCL_MIN_TOKENS)",
             min_tokens);
    return 0;
}

/* Some ranks failed to enqueue a step: NCCL's kernels have no watchdog, and the other ranks' would
 * wait for good (and shutdown with them); aborting the communicators ends them. The one-shot kernel
 * serves whatever runs after (the failure is fatal to the step anyway). */
static void nccl_abort(struct backend *b) {
    if (!b->nccl_owned) return;
    log_warn("cuda backend: a step failed on some ranks only%s: aborting the NCCL communicators",
             b->nodes ? " (or on this node, whose step the other nodes' ranks wait for)" : "");
    ar_nccl_abort(b->nccl_owned);
    for (int r = 0; r < b->tp_size; r++) b->tp_peer[r]->nccl = NULL;
    free(b->nccl_owned);
    b->nccl_owned = NULL;
}

int tp_create(struct backend *b, const backend_options *opt, bool synthetic, uint64_t seed) {
    const int D = opt->data_parallel_size > 1 ? opt->data_parallel_size : 1;
    const int N = D > 1 ? D : opt->tensor_parallel_size > 0 ? opt->tensor_parallel_size : 1;
    const bool ep = opt->enable_expert_parallel;
    /* Across nodes (tp_nodes.h) this process holds L of the N ranks, global g0 .. g0 + L - 1. */
    const int nn = opt->nnodes > 1 ? opt->nnodes : 1;
    const int L = N / nn, g0 = nn > 1 ? opt->node_rank * L : 0;
    if (N < 2) return err_set("--tensor-parallel-size %d: nothing to shard", N);
    if (D > 1 && (!ep || opt->tensor_parallel_size > 1))
        return err_set("--data-parallel-size %d needs --enable-expert-parallel and "
                       "--tensor-parallel-size 1",
                       D);
    const char *one = getenv("GPTOSS_TP_ONE_GPU");
    const bool one_gpu = one && !strcmp(one, "1");
    if (nn > 1 && (D > 1 || N % nn || L > AR_MAX_RANKS || opt->node_rank < 0 ||
                   opt->node_rank >= nn || !opt->master_addr))
        return err_set("--nnodes %d: --tensor-parallel-size %d, --node-rank %d, --master-addr %s "
                       "and --data-parallel-size %d do not fit together",
                       nn, N, opt->node_rank, opt->master_addr ? opt->master_addr : "(none)", D);
    if (nn > 1 && one_gpu)
        return err_set("--nnodes %d cannot run with GPTOSS_TP_ONE_GPU=1 (NCCL needs one GPU per "
                       "rank)",
                       nn);
    tp_plan plan;
    if (D > 1 ? tp_plan_make_dep(&b->cfg, D, &plan) : tp_plan_make(&b->cfg, N, ep, &plan))
        return synthetic ? err_prefix("%s", opt->model) : err_prefix("%s/config.json", opt->model);
    int ndev = 0;
    CU(cudaGetDeviceCount(&ndev));
    if (nn > 1 && ndev < L)
        return err_set("--tensor-parallel-size %d over --nnodes %d needs %d GPUs on every node; "
                       "node %d has %d",
                       N, nn, L, opt->node_rank, ndev);
    if (!one_gpu && ndev < L)
        return err_set("--%s-parallel-size %d needs %d GPUs; this machine has %d "
                       "(GPTOSS_TP_ONE_GPU=1 runs the ranks in turn on one GPU, for tests)",
                       D > 1 ? "data" : "tensor", N, N, ndev);
    /* the padding of every rank's intermediate share: the same on every node (the whole plan's) */
    int devices[TP_MAX], max_units = 0;
    for (int r = 0; r < N; r++)
        if (plan.rank[r].n_units > max_units) max_units = plan.rank[r].n_units;
    for (int r = 0; r < L; r++) devices[r] = one_gpu ? b->device : r;
    const int I_pad = (max_units * TP_UNIT + 63) / 64 * 64;

    const struct backend proto = *b; /* config and dims only: nothing is allocated yet */
    b->tp_peer[0] = b;
    for (int r = 1; r < L; r++) {
        b->tp_peer[r] = xcalloc(1, sizeof *b);
        *b->tp_peer[r] = proto;
    }
    for (int r = 0; r < L; r++) {
        apply_share(b->tp_peer[r], &plan, g0 + r, r, L, devices[r], I_pad);
        b->tp_peer[r]->dp_size = D > 1 ? D : 0;
    }
    backend_options o = *opt;
    /* lockstep: no graphs (see above); DEP: eager only in its first form (the ranks' row counts
     * differ from step to step, and a graph's buckets would have to agree across the ranks);
     * across nodes: eager in its first form too (tp_nodes.h) */
    if (one_gpu || D > 1 || nn > 1) o.enforce_eager = true;
    for (int r = 0; r < L; r++)
        if (cuda_rank_setup(b->tp_peer[r], &o, synthetic, seed, r ? b : NULL, one_gpu ? N - 1 : 0))
            return err_prefix("rank %d of %d", g0 + r, N);
    if (one_gpu) { /* lockstep on rank 0's stream */
        b->tp_lock = xcalloc(1, sizeof *b->tp_lock);
        if (barrier_init(b->tp_lock, N)) {
            free(b->tp_lock);
            b->tp_lock = NULL;
            return -1;
        }
        for (int r = 1; r < N; r++) {
            struct backend *br = b->tp_peer[r];
            CU(cudaStreamSynchronize(br->stream));
            CU(cudaStreamDestroy(br->stream));
            br->stream = b->stream, br->stream_borrowed = true, br->tp_lock = b->tp_lock;
        }
    }

    /* The all-reduce group of this process's ranks: the residual rows of the largest step, the
     * gather of R_cap rows (DEP: no logits gather, each rank has the whole lm_head; the gather of
     * T_cap normed rows). Across nodes NCCL does the reducing and gathering, in these buffers. */
    int max_v = 0;
    for (int r = 0; r < N; r++)
        if (plan.rank[r].n_vocab > max_v) max_v = plan.rank[r].n_vocab;
    const size_t gather_cap =
        D > 1 ? (size_t)b->ws.T_cap * (size_t)b->H : (size_t)b->ws.R_cap * (size_t)max_v;
    b->ar_owned = xcalloc(1, sizeof *b->ar_owned);
    cudaError_t e = ar_group_create(b->ar_owned, L, devices, b->ws.T_cap, b->H, 0, gather_cap);
    if (e != cudaSuccess) {
        free(b->ar_owned);
        b->ar_owned = NULL;
        return err_set("--tensor-parallel-size %d: cannot set up the all-reduce between the GPUs: "
                       "%s",
                       N, cudaGetErrorString(e));
    }
    for (int r = 0; r < L; r++) b->tp_peer[r]->ar = &b->ar_owned->rank[r];
    if (nn > 1) {
        if (tp_nodes_create(b, opt, &plan)) return -1;
    } else if (D < 2 && nccl_setup(b, N, devices, one_gpu)) {
        /* DEP's reduce-scatter is the one-shot kernel's only (allreduce.h); NCCL is not used */
        return -1;
    }
    CU(cudaSetDevice(b->device));
    if (workers_start(b)) return -1;
    if (D > 1) {
        log_info("cuda backend: data + expert parallel (DEP) over %d ranks (%s): whole attention "
                 "and lm_head on each, with its own sequences and KV; %d of %d experts each",
                 D, one_gpu ? "all on one GPU in lockstep, GPTOSS_TP_ONE_GPU=1" : "one GPU each",
                 plan.rank[0].n_experts, b->cfg.n_experts);
        return 0;
    }
    char moe[96], where[96];
    if (ep)
        snprintf(moe, sizeof moe, "%d of %d experts whole", plan.rank[0].n_experts,
                 b->cfg.n_experts);
    else
        snprintf(moe, sizeof moe, "%d of %d intermediate (padded to %d)",
                 plan.rank[0].n_units * TP_UNIT, b->cfg.intermediate, I_pad);
    if (nn > 1)
        snprintf(where, sizeof where, "%d nodes of %d GPUs, NCCL between all of them", nn, L);
    else
        snprintf(where, sizeof where, "%s",
                 one_gpu ? "all on one GPU in lockstep, GPTOSS_TP_ONE_GPU=1" : "one GPU each");
    log_info("cuda backend: %s parallel over %d ranks (%s): %d query heads, %d KV heads, %s and %d "
             "vocabulary rows per rank",
             ep ? "tensor + expert" : "tensor", N, where, plan.rank[0].n_q_heads,
             plan.rank[0].n_kv_heads, moe, plan.rank[0].n_vocab);
    return 0;
}

/* A failed step's message, with the all-reduce watchdog's report when a barrier gave up. */
static int with_timeout_report(struct backend *b) {
    char why[512];
    if (!ar_group_describe_timeout(b->ar_owned, why, sizeof why)) return -1;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", err_msg());
    return err_set("%s; %s", msg, why);
}

int tp_launch(struct backend *b, const step_batch *st) {
    if (b->nodes && tp_nodes_encode(b, st)) return -1; /* node 0: the other nodes' copy */
    const step_batch *parts[TP_MAX];
    for (int r = 0; r < b->tp_size; r++) parts[r] = st;
    return tp_launch_parts(b, parts);
}

int tp_launch_parts(struct backend *b, const step_batch *const *parts) {
    struct tp_workers *ws = b->tp_threads;
    /* Every rank's host half first, here, one after the other: growing a buffer there may wait for
     * the whole device (cudaFree), and with the ranks on one GPU a rank already waiting in this
     * step's first all-reduce would keep that wait from ever ending. Nothing of this step is
     * enqueued yet, and the last step's collectives all have their partners, so here it ends. */
    for (int r = 0; r < b->tp_size; r++) {
        CU(cudaSetDevice(b->tp_peer[r]->device));
        if (runner_launch_prepare(b->tp_peer[r], parts[r])) {
            for (int j = 0; j < r; j++) b->tp_peer[j]->pending.st = NULL;
            cudaSetDevice(b->device);
            return r ? err_prefix("rank %d", r) : -1;
        }
    }
    /* A host half may have grown the workspace past the collectives' rows: grow those too. */
    if (b->ws.T_cap > b->ar_owned->rank[0].T_cap && grow_collectives(b)) {
        for (int r = 0; r < b->tp_size; r++) b->tp_peer[r]->pending.st = NULL;
        return -1;
    }
    /* Across nodes, node 0 sends the step now: every local rank's checks passed, none has
     * enqueued anything (tp_nodes.h). */
    if (b->nodes && tp_nodes_publish(b)) {
        for (int r = 0; r < b->tp_size; r++) b->tp_peer[r]->pending.st = NULL;
        return -1;
    }
    if (b->tp_lock) barrier_reset(b->tp_lock); /* no thread is inside a wait between steps */
    for (int r = 1; r < b->tp_size; r++) {
        tp_worker *w = &ws->w[r];
        pthread_mutex_lock(&w->mu);
        w->job = parts[r], w->rc = 0;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
    CU(cudaSetDevice(b->device));
    int n_failed = 0;
    bool failed[TP_MAX] = {false};
    char errs[TP_MAX][512];
    if (runner_launch_enqueue(b)) {
        if (b->tp_lock) barrier_break(b->tp_lock, 0);
        failed[0] = true, n_failed++;
        snprintf(errs[0], sizeof errs[0], "%s", err_msg());
    }
    for (int r = 1; r < b->tp_size; r++) {
        tp_worker *w = &ws->w[r];
        pthread_mutex_lock(&w->mu);
        while (w->job) pthread_cond_wait(&w->cv, &w->mu);
        if (w->rc) failed[r] = true, n_failed++, snprintf(errs[r], sizeof errs[r], "%s", w->err);
        pthread_mutex_unlock(&w->mu);
    }
    /* The first failure's message; in lockstep, the rank that broke the barrier's (the others only
     * failed because it did). */
    int shown = b->tp_lock ? barrier_breaker(b->tp_lock) : -1;
    for (int r = 0; r < b->tp_size && (shown < 0 || !failed[shown]); r++)
        if (failed[r]) shown = r;
    char msg[600] = "";
    if (n_failed) snprintf(msg, sizeof msg, "rank %d: %s", shown, errs[shown]);
    if (n_failed == 0) return 0;
    /* The checks that can fail fail in the host halves, before anything is enqueued; a CUDA error
     * on some ranks only leaves the others' step waiting for them (until the watchdog): fatal. */
    /* Across nodes the other nodes' ranks wait for this step's collectives whatever failed here. */
    if (n_failed < b->tp_size || b->nodes) nccl_abort(b);
    err_set("%s%s", msg,
            n_failed == b->tp_size ? "" : " (the other ranks' step cannot finish without it)");
    return with_timeout_report(b);
}

int tp_wait(struct backend *b, step_result *res) {
    const step_batch *st = b->inflight;
    CU(cudaSetDevice(b->device));
    /* across nodes, the wait watches NCCL for a node that failed (tp_nodes.h) */
    if (b->nodes && tp_nodes_wait(b)) {
        memset(res, 0, sizeof *res);
        b->inflight = NULL;
        for (int r = 1; r < b->tp_size; r++) b->tp_peer[r]->inflight = NULL;
        return -1;
    }
    int rc = runner_collect(b, res);
    if (b->nodes && rc == 0) tp_nodes_note_results(b, st, res);
    for (int r = 1; r < b->tp_size; r++) {
        struct backend *br = b->tp_peer[r];
        CU(cudaSetDevice(br->device));
        static const step_result none;
        if (runner_tp_follow(br, b, st, rc == 0 ? res : &none) && rc == 0) rc = -1;
    }
    CU(cudaSetDevice(b->device));
    return rc ? with_timeout_report(b) : 0;
}

void tp_destroy_peers(struct backend *b) {
    workers_stop(b);
    dp_free(b);
    if (b->stream) cudaSetDevice(b->device), cudaStreamSynchronize(b->stream);
    tp_nodes_shutdown(b); /* node 0: the other nodes stop too */
    for (int r = 1; r < b->tp_size; r++) {
        if (!b->tp_peer[r]) continue;
        cuda_rank_destroy(b->tp_peer[r]);
        free(b->tp_peer[r]);
        b->tp_peer[r] = NULL;
    }
    tp_nodes_free(b);
    if (b->nccl_owned) { /* every stream is idle: workers stopped, rank 0 synchronised */
        ar_nccl_destroy(b->nccl_owned);
        free(b->nccl_owned);
        b->nccl_owned = NULL;
        b->nccl = NULL;
    }
    if (b->ar_owned) {
        ar_group_free(b->ar_owned);
        free(b->ar_owned);
        b->ar_owned = NULL;
    }
    lockstep_free(b->tp_lock);
    b->tp_lock = NULL;
    cudaSetDevice(b->device);
}
