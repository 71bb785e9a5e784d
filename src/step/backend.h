/* The one interface the engine calls. A backend owns the weights, the paged KV storage and the
 * per-slot sampling state, and runs steps described by step/batch.h:
 *
 *   launch(step)  starts the step and returns at once (the CUDA backend enqueues it on its stream;
 *                 the CPU backend hands it to a worker thread);
 *   wait(result)  blocks until the launched step is done and fills the sampled tokens and logprobs.
 *
 * At most one step is in flight. Between launch and wait the engine may prepare the next step but
 * must not touch the launched step's arrays. */
#ifndef GPTOSS_STEP_BACKEND_H
#define GPTOSS_STEP_BACKEND_H

#include "step/batch.h"
#include "model/config.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct backend backend;

typedef struct {
    const char *model;   /* checkpoint folder (or "synthetic:…" for backends that support it) */
    int block_size;      /* tokens per KV block */
    int num_full_blocks; /* KV blocks for the full-attention layers; 0 = let the backend size it */
    int num_swa_blocks;  /* KV blocks for the sliding-window layers; 0 = derived */
    int max_slots;       /* sequences that can be in flight at once (= --max-num-seqs) */
    int max_model_len;   /* longest sequence */
    double gpu_memory_utilization; /* GPU backends: share of device memory to use (0 = 0.9) */
    /* CUDA: decode steps up to this batch replay graphs (0 = BACKEND_CUDAGRAPH_CAPTURE_DEFAULT,
     * < 0 = off); --max-cudagraph-capture-size. */
    int max_cudagraph_capture_size;
    bool
        enforce_eager; /* CUDA: no graphs at all, every step launched kernel by kernel (--enforce-eager) */
    /* --kv-cache-dtype: BACKEND_KV_AUTO keeps each backend's own (CUDA bf16, CPU float32);
     * BACKEND_KV_FP8 stores K and V as e4m3 with per-(layer, KV head) scales (CUDA), or rounds them
     * so on the CPU (the reference of the GPU kernels; see backend/cpu/cpu_model.h). */
    int kv_dtype;
    /* --tensor-parallel-size (0 or 1: one device) and --enable-expert-parallel, as planned by
     * model/tp_plan.h. The CPU backend emulates the ranks one after the other (the sharding maths,
     * tested in CI); the CUDA backend runs one rank per GPU (backend/cuda/tp_backend.c;
     * synthetic models so far, tensor parallel only). */
    int tensor_parallel_size;
    bool enable_expert_parallel;
    /* --data-parallel-size (0 or 1: off; 2: DEP, with enable_expert_parallel and one tensor-parallel
     * rank; model/tp_plan.h's tp_plan_make_dep): each rank holds the whole attention and its share
     * of the experts, and runs attention on its own sequences with its own KV pools. kv_blocks then
     * gives one rank's pool sizes (every rank's are the same), and the steps say which sequences
     * are whose (step_batch.dp_size, dp_seq0). The CPU backend emulates the ranks in turn; the CUDA
     * backend runs one rank per GPU, or all on one GPU in lockstep (GPTOSS_TP_ONE_GPU=1). */
    int data_parallel_size;
    /* Tensor parallelism across machines (--nnodes N > 1, --node-rank R, --master-addr,
     * --master-port, --headless; the CUDA backend's backend/cuda/tp_nodes.h): one process per
     * node holds tensor_parallel_size / nnodes ranks, global ranks R x that + its local index; the
     * communicators come from NCCL's own bootstrap at master_addr:master_port (node 0's address).
     * Node 0 (the leader) runs the engine; a headless node (R > 0) runs only its ranks, on the steps
     * node 0 sends it (backend_ops.follow). nnodes 0 or 1: one machine, these unused. */
    int nnodes, node_rank;
    const char *master_addr;
    int master_port;
    bool headless;
} backend_options;

/* NCCL's bootstrap address for the nodes' communicator (NCCL_COMM_ID: "<ipv4>:<port>",
 * "[<ipv6>]:<port>" or "<hostname>:<port>") from --master-addr and --master-port, in buf (n bytes).
 * 0, or -1 + err_set naming the flag when the address is empty, holds a space, already names a
 * port, or does not fit. */
int backend_nodes_comm_id(const char *master_addr, int master_port, char *buf, size_t n);

enum { BACKEND_KV_AUTO = 0, BACKEND_KV_FP8 = 1 };

/* The largest decode batch the CUDA backend captures in a graph unless told otherwise. */
enum { BACKEND_CUDAGRAPH_CAPTURE_DEFAULT = 512 };

typedef struct {
    const char *name;
    int (*create)(const backend_options *opt, backend **out);
    /* The loaded model's config and the KV geometry actually allocated (the engine's block manager
     * must use exactly these). */
    const model_config *(*config)(backend *b);
    void (*kv_blocks)(backend *b, int *num_full_blocks, int *num_swa_blocks, int *block_size);
    int (*launch)(backend *b, const step_batch *step);
    int (*wait)(backend *b, step_result *result);
    void (*destroy)(backend *b);
    /* A headless node (backend_options.headless): runs the steps node 0 sends until node 0 says
     * stop (0), or fails (-1 + err_set). NULL for a backend that cannot span machines. */
    int (*follow)(backend *b);
} backend_ops;

extern const backend_ops cpu_backend_ops;
#ifdef GPTOSS_HAVE_CUDA
extern const backend_ops cuda_backend_ops;
#endif

/* "cpu" or "cuda" (when built). */
const backend_ops *backend_find(const char *name);

#endif
