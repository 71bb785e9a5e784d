/* Tensor parallelism across machines (--nnodes N > 1; issue 17 item 5): the same ranks as
 * tp_backend.c, spread over N processes, one per node, joined by NCCL alone.
 *
 * UNTESTED: this has never run. NCCL refuses two ranks of one communicator on one GPU, so the
 * multi-process path cannot run on the single H200 the project has; it is compiled in CI and off
 * unless --nnodes > 1. What is tested on the CPU: the flags (tests/test_runtime.c,
 * tests/test_cli_engine_args.sh) and the step's wire format (tests/test_step_wire.c).
 *
 * Ranks: -tp T over N nodes puts L = T / N ranks in each node's process, global ranks
 * node_rank x L + k for its local k = 0 .. L - 1, each on GPU k; a rank's share of the model is
 * the plan's rank of its global number (model/tp_plan.h), so the shares are those of one machine
 * with T GPUs. Within a process everything is tp_backend.c's: one struct backend and launch
 * thread per local rank, tp_size = L, tp_rank the local index (runner.h: tp_world and tp_grank are
 * the global ones).
 *
 * Communicators: NCCL's own. Every process sets NCCL_COMM_ID = master_addr:master_port before
 * ncclGetUniqueId, so every process derives the same id from that address, and global rank 0
 * (node 0's first GPU) hosts NCCL's bootstrap root there; each process then makes its L ranks'
 * communicators with ncclCommInitRank inside one group (allreduce_nccl.h's ar_nccl_create_world).
 * NCCL picks its transports (NVLink inside a node, InfiniBand or sockets between nodes). No
 * socket of ours.
 *
 * Collectives: every all-reduce through NCCL (allreduce_nccl.h: the one-shot kernel's partial
 * phase, ncclAllReduce, then the add + RMSNorm kernel), since the peer-memory kernel needs every
 * GPU in one process; the lm_head's logits through ncclAllGather (each rank's piece padded to the
 * largest vocabulary share, then copied into place: tp_nodes_gather). NVLink multicast stays off
 * (NCCL_NVLS_ENABLE=0 unless the environment says otherwise). CUDA graphs are off across nodes in
 * this first form: NCCL documents that graph capture with several GPUs per process may deadlock,
 * and whether an NCCL call is captured must agree on every rank.
 *
 * The step: node 0 (the leader) runs the engine, scheduler and server as on one machine. At every
 * launch it encodes the step and the fix-ups of the last wait (step/step_wire.h) and its global
 * rank 0 broadcasts the bytes (ncclBroadcast, on the ranks' own streams, before the step's
 * kernels): a first broadcast of NODES_FIRST_BYTES (the header and, for most steps, the whole
 * payload), and only for a longer message a second one with the rest. Every rank of every node
 * takes part, as NCCL's collectives require. A headless node's process loops in tp_nodes_follow:
 * receive, decode, finish its ranks' last step (fix-ups), launch its ranks on the step
 * (tp_launch_parts), and again; a SHUTDOWN message, sent when node 0's backend is destroyed, ends
 * the loop. The order of NCCL calls is the same on every rank: broadcasts, then the step's
 * collectives, step after step.
 *
 * Start-up checks: after the communicators exist, one all-reduce (min and max) of what every node
 * must agree on (model dims, block size, --max-num-seqs, --max-model-len, KV dtype, the lm_head
 * chunk, where constrained rows are sampled, the wire version): a difference fails every node at
 * once, naming the setting. The KV pools' block counts take the smallest node's.
 *
 * Failures: a step that fails on a headless node aborts its communicators and ends its process;
 * node 0 notices through NCCL (ncclCommGetAsyncError, polled while it waits for a step) and fails
 * the step instead of waiting for good, and the other way round. NCCL's kernels have no watchdog
 * of ours (allreduce_nccl.h).
 *
 * Errors: functions returning int give 0, or -1 after err_set(). */
#ifndef GPTOSS_BACKEND_CUDA_TP_NODES_H
#define GPTOSS_BACKEND_CUDA_TP_NODES_H

#include "backend/cuda/runner.h"

/* Called by tp_create once the local ranks and their one-shot group exist (b is local rank 0,
 * plan the whole group's): NCCL_COMM_ID, the communicators, the start-up agreement, the gather
 * buffers. Sets b->nodes and every local rank's nodes and nccl. */
int tp_nodes_create(struct backend *b, const backend_options *opt, const tp_plan *plan);
/* Node 0: sends SHUTDOWN (unless NCCL already failed) and waits for it to leave. Headless: nothing.
 * Before the local ranks and the communicators are freed. */
void tp_nodes_shutdown(struct backend *b);
/* Frees the nodes' buffers (b local rank 0; after the other local ranks' streams are idle). */
void tp_nodes_free(struct backend *b);

/* Whether this process is node 0 (runs the engine). */
bool tp_nodes_leads(const struct backend *b);
/* Node 0, tp_launch: the message of step st with the fix-ups the last wait left. */
int tp_nodes_encode(struct backend *b, const step_batch *st);
/* tp_launch_parts, after every local rank's host half and before any enqueue: node 0 broadcasts
 * the message; a headless node has received it already (nothing to do). */
int tp_nodes_publish(struct backend *b);
/* tp_wait, before collecting: until every local rank's step is done, watching NCCL's errors. */
int tp_nodes_wait(struct backend *b);
/* Node 0, tp_wait, after collecting: the fix-ups the other nodes' ranks need (runner_tp_follow's),
 * kept for the next message. */
void tp_nodes_note_results(struct backend *b, const step_batch *st, const step_result *res);
/* A headless node's loop (backend_ops.follow). */
int tp_nodes_follow(struct backend *b);
/* The lm_head's all-gather of nr rows into out ([nr][V]): tp_gather's path across nodes. */
cudaError_t tp_nodes_gather(struct backend *b, int nr, float *out, cudaStream_t s);

#endif
