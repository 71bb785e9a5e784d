/* Tensor parallelism across machines. See tp_nodes.h (and why none of it has run yet). */
#include "backend/cuda/tp_nodes.h"

#include "base/log.h"
#include "base/timeutil.h"
#include "base/xalloc.h"
#include "step/step_wire.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef GPTOSS_HAVE_NCCL
#include <nccl.h>
#endif

_Static_assert((int)TP_MAX_NODE <= (int)AR_MAX_RANKS, "a node's ranks must fit the one-shot group");

/* The first broadcast of every message: the header and, for most steps (a decode step of 64
 * sequences is about 6 KB), the whole payload, so that a step costs one broadcast. Its size is
 * fixed because a broadcast's count must be the same on every rank, and a headless node learns the
 * message's length from this part only. */
enum { NODES_FIRST_BYTES = 16384 };

/* A wait spins (yielding) this long, then sleeps between polls: a decode step's wait stays a spin,
 * a headless node idle between requests does not burn a core. */
static const double SPIN_S = 0.02;

struct tp_nodes {
    int nnodes, node_rank, world, rank0, local;
    bool leader;
    bool broken;       /* NCCL failed or was aborted: nothing more is sent */
    uint32_t seq;      /* messages sent (node 0) or received (headless) */
    step_wire_buf msg; /* node 0: this launch's message */
    int32_t *fix;      /* node 0: (slot, token) pairs of the last wait, for the next message */
    int n_fix, cap_fix;
    unsigned char *host; /* pinned: the message on its way to or from the device */
    size_t host_cap;
    void *dev[TP_MAX_NODE]; /* each local rank's copy of the message (device) */
    size_t dev_cap;
    float *gat[TP_MAX_NODE]; /* each local rank's landing of the logits all-gather */
    int max_v;               /* the largest vocabulary share: every rank's piece is padded to it */
    int col0[TP_MAX], ncols[TP_MAX]; /* every global rank's vocabulary share */
    step_wire_step rx[2];            /* headless: the step being launched and the one before */
    int rx_cur;
};

/* ---- buffers ---- */

static int host_reserve(struct tp_nodes *nd, size_t need, size_t keep) {
    if (need <= nd->host_cap) return 0;
    size_t cap = need > 2 * nd->host_cap ? need : 2 * nd->host_cap;
    unsigned char *p = NULL;
    CU(cudaHostAlloc((void **)&p, cap, cudaHostAllocDefault));
    if (keep) memcpy(p, nd->host, keep);
    if (nd->host) cudaFreeHost(nd->host);
    nd->host = p, nd->host_cap = cap;
    return 0;
}

/* Every local rank's message buffer to at least need bytes (its contents are not kept: called
 * between broadcasts, when the data that matters is in the host copy). Waits for the ranks'
 * streams first: cudaFree waits for the whole device anyway. */
static int dev_reserve(struct backend *b, size_t need) {
    struct tp_nodes *nd = b->nodes;
    if (need <= nd->dev_cap) return 0;
    const size_t cap = need > 2 * nd->dev_cap ? need : 2 * nd->dev_cap;
    for (int k = 0; k < nd->local; k++) {
        struct backend *br = b->tp_peer[k];
        CU(cudaSetDevice(br->device));
        CU(cudaStreamSynchronize(br->stream));
        cudaFree(nd->dev[k]);
        nd->dev[k] = NULL;
        CU(cudaMalloc(&nd->dev[k], cap));
    }
    nd->dev_cap = cap;
    CU(cudaSetDevice(b->device));
    return 0;
}

void tp_nodes_free(struct backend *b) {
    struct tp_nodes *nd = b->nodes;
    if (!nd) return;
    for (int k = 0; k < nd->local; k++) {
        cudaSetDevice(b->tp_peer[k] ? b->tp_peer[k]->device : k);
        cudaFree(nd->dev[k]);
        cudaFree(nd->gat[k]);
    }
    cudaSetDevice(b->device);
    if (nd->host) cudaFreeHost(nd->host);
    step_wire_buf_free(&nd->msg);
    step_wire_step_free(&nd->rx[0]);
    step_wire_step_free(&nd->rx[1]);
    free(nd->fix);
    free(nd);
    for (int k = 0; k < TP_MAX_NODE; k++)
        if (b->tp_peer[k]) b->tp_peer[k]->nodes = NULL;
    b->nodes = NULL;
}

/* Ends every NCCL call of this process's ranks (ncclCommAbort ends their kernels too): after a
 * failure, the peers' collectives would otherwise wait for good. The other nodes see the
 * communicators go and fail in turn. */
static void nodes_abort(struct backend *b) {
    struct tp_nodes *nd = b->nodes;
    if (nd) nd->broken = true;
    if (!b->nccl_owned) return;
    log_warn("cuda backend: node %d: aborting its NCCL communicators", nd ? nd->node_rank : -1);
    ar_nccl_abort(b->nccl_owned);
    for (int k = 0; k < b->tp_size; k++) b->tp_peer[k]->nccl = NULL;
    free(b->nccl_owned);
    b->nccl_owned = NULL;
}

#ifdef GPTOSS_HAVE_NCCL

static int nccl_err(const char *what, ncclResult_t r) {
    const char *last = ncclGetLastError(NULL);
    return err_set("NCCL: %s failed: %s%s%s", what, ncclGetErrorString(r),
                   last && *last ? ": " : "", last && *last ? last : "");
}

/* An error NCCL's own threads found (a node gone, a network failure): 0 when there is none. */
static int async_error(const struct backend *b) {
    const ar_nccl *nc = b->nccl_owned;
    for (int k = 0; nc && k < nc->n_ranks; k++) {
        ncclResult_t e = ncclSuccess;
        const ncclResult_t r = ncclCommGetAsyncError(nc->comm[k], &e);
        if (r != ncclSuccess) return nccl_err("ncclCommGetAsyncError", r);
        if (e != ncclSuccess && e != ncclInProgress)
            return nccl_err("a collective between the nodes (ncclCommGetAsyncError)", e);
    }
    return 0;
}

/* Bytes [off, off + count) of the message from global rank 0 to every rank: every local rank's
 * broadcast in one group (one thread drives this process's GPUs), each on its rank's stream. */
static int bcast(struct backend *b, size_t off, size_t count) {
    struct tp_nodes *nd = b->nodes;
    const ar_nccl *nc = b->nccl_owned;
    if (!nc) return err_set("NCCL: the communicators were aborted");
    ncclResult_t r = ncclGroupStart();
    for (int k = 0; k < nd->local && r == ncclSuccess; k++) {
        unsigned char *p = (unsigned char *)nd->dev[k] + off;
        r = ncclBroadcast(p, p, count, ncclUint8, 0, nc->comm[k], b->tp_peer[k]->stream);
    }
    const ncclResult_t end = ncclGroupEnd();
    if (r != ncclSuccess || end != ncclSuccess)
        return nccl_err("ncclBroadcast (the step to the other nodes)", r != ncclSuccess ? r : end);
    return 0;
}

/* The smallest of each of n values over every rank (host in, host out; start-up only). */
static int all_min(struct backend *b, int32_t *v, int n) {
    struct tp_nodes *nd = b->nodes;
    const ar_nccl *nc = b->nccl_owned;
    int32_t *d[TP_MAX_NODE] = {NULL};
    const size_t bytes = (size_t)n * sizeof *v;
    int rc = 0;
    for (int k = 0; k < nd->local && !rc; k++) {
        if (cudaSetDevice(b->tp_peer[k]->device) != cudaSuccess ||
            cudaMalloc((void **)&d[k], bytes) != cudaSuccess ||
            cudaMemcpy(d[k], v, bytes, cudaMemcpyHostToDevice) != cudaSuccess)
            rc = err_set("cuda backend: the nodes' agreement: a buffer on GPU %d failed",
                         b->tp_peer[k]->device);
    }
    if (!rc) {
        ncclResult_t r = ncclGroupStart();
        for (int k = 0; k < nd->local && r == ncclSuccess; k++)
            r = ncclAllReduce(d[k], d[k], (size_t)n, ncclInt32, ncclMin, nc->comm[k],
                              b->tp_peer[k]->stream);
        const ncclResult_t end = ncclGroupEnd();
        if (r != ncclSuccess || end != ncclSuccess)
            rc = nccl_err("ncclAllReduce (the nodes' agreement)", r != ncclSuccess ? r : end);
    }
    for (int k = 0; k < nd->local; k++) {
        cudaSetDevice(b->tp_peer[k]->device);
        if (!rc && cudaStreamSynchronize(b->tp_peer[k]->stream) != cudaSuccess)
            rc = err_set("cuda backend: the nodes' agreement failed on GPU %d",
                         b->tp_peer[k]->device);
        if (!rc && k == 0 && cudaMemcpy(v, d[0], bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
            rc = err_set("cuda backend: the nodes' agreement: reading it back failed");
        cudaFree(d[k]);
    }
    cudaSetDevice(b->device);
    return rc;
}

cudaError_t tp_nodes_gather(struct backend *b, int nr, float *out, cudaStream_t s) {
    const struct tp_nodes *nd = b->nodes;
    const ar_nccl *nc = b->nccl;
    if (!nc) {
        log_warn("cuda backend: rank %d: the logits all-gather after NCCL was aborted",
                 b->tp_grank);
        return cudaErrorUnknown;
    }
    /* Each rank's piece is [nr][its ncols] at the start of its gather buffer (the lm_head wrote
     * it there); nr x max_v floats from each (the tail is padding nobody reads) land in rank
     * order, then every piece is copied to its columns of out. */
    const size_t count = (size_t)nr * (size_t)nd->max_v;
    float *land = nd->gat[b->tp_rank];
    const ncclResult_t r =
        ncclAllGather(b->ar->gather[b->tp_rank], land, count, ncclFloat32, nc->comm[b->tp_rank], s);
    if (r != ncclSuccess) {
        nccl_err("ncclAllGather (the logits)", r);
        log_warn("cuda backend: rank %d: %s", b->tp_grank, err_msg());
        return cudaErrorUnknown;
    }
    for (int k = 0; k < nd->world; k++) {
        const size_t w = (size_t)nd->ncols[k] * sizeof(float);
        const cudaError_t e =
            cudaMemcpy2DAsync(out + nd->col0[k], (size_t)b->V * sizeof(float), land + k * count, w,
                              w, (size_t)nr, cudaMemcpyDeviceToDevice, s);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

#else /* without NCCL nothing spans machines: tp_nodes_create refuses */

static int async_error(const struct backend *b) {
    (void)b;
    return 0;
}

static int bcast(struct backend *b, size_t off, size_t count) {
    (void)b, (void)off, (void)count;
    return err_set("NCCL: this build has no NCCL");
}

static int all_min(struct backend *b, int32_t *v, int n) {
    (void)b, (void)v, (void)n;
    return err_set("NCCL: this build has no NCCL");
}

cudaError_t tp_nodes_gather(struct backend *b, int nr, float *out, cudaStream_t s) {
    (void)b, (void)nr, (void)out, (void)s;
    return cudaErrorNotSupported;
}

#endif

/* Until ev (or, with ev NULL, stream s) is done, watching for NCCL's errors meanwhile: a node that
 * failed leaves this one's collectives waiting for good, and only NCCL's threads see it go. */
static int wait_done(struct backend *b, cudaStream_t s, cudaEvent_t ev, const char *what) {
    const double t0 = now_seconds();
    for (unsigned i = 0;; i++) {
        const cudaError_t e = ev ? cudaEventQuery(ev) : cudaStreamQuery(s);
        if (e == cudaSuccess) return 0;
        if (e != cudaErrorNotReady)
            return err_set("cuda backend: %s failed on the device: %s", what,
                           cudaGetErrorString(e));
        if (i % 256 == 255 && async_error(b)) {
            nodes_abort(b);
            return err_prefix("cuda backend: %s", what);
        }
        if (now_seconds() - t0 < SPIN_S) {
            sched_yield();
        } else {
            const struct timespec ts = {0, 50 * 1000};
            nanosleep(&ts, NULL);
        }
    }
}

/* ---- start-up ---- */

/* What every node must agree on, and the KV block counts every node lowers to the smallest. */
typedef struct {
    const char *name;
    int32_t value;
} agreed;

static int agree(struct backend *b, const backend_options *opt) {
    const model_config *c = &b->cfg;
    const size_t mlen = strlen(opt->model);
    const agreed v[] = {
        {"the step wire version (every node must run the same gptoss)", STEP_WIRE_VERSION},
        {"--tensor-parallel-size", b->tp_world},
        {"--nnodes", opt->nnodes},
        {"--model (the same path on every node)",
         (int32_t)(step_wire_checksum(opt->model, mlen) & 0x7fffffff)},
        {"the model's layers", c->n_layers},
        {"the model's hidden size", c->hidden},
        {"the model's vocabulary", c->vocab},
        {"the model's experts", c->n_experts},
        {"the model's intermediate size", c->intermediate},
        {"--enable-expert-parallel", opt->enable_expert_parallel},
        {"--block-size", b->block_size},
        {"--max-num-seqs", b->max_slots},
        {"--max-model-len", b->max_model_len},
        {"--kv-cache-dtype", b->dims.kv_fp8},
        {"the lm_head's rows a chunk (--max-cudagraph-capture-size)", b->ws.R_cap},
        {"GPTOSS_GPU_MASKS", b->gpu_masks},
        {"CUDA graphs (off across nodes)", b->graphs.max_size},
    };
    enum { N = sizeof v / sizeof v[0] };
    int32_t m[2 * N + 2];
    for (int i = 0; i < N; i++) m[i] = v[i].value, m[N + i] = -v[i].value;
    m[2 * N] = b->num_full, m[2 * N + 1] = b->num_swa;
    if (all_min(b, m, 2 * N + 2)) return -1;
    for (int i = 0; i < N; i++)
        if (m[i] != -m[N + i])
            return err_set("cuda backend: the nodes disagree on %s (%d here; %d to %d over the "
                           "nodes): start every node with the same model and options",
                           v[i].name, v[i].value, m[i], -m[N + i]);
    if (m[2 * N] != b->num_full || m[2 * N + 1] != b->num_swa)
        log_info("cuda backend: node %d: the KV pools use %d full and %d sliding blocks, the "
                 "smallest node's (%d and %d here)",
                 b->nodes->node_rank, m[2 * N], m[2 * N + 1], b->num_full, b->num_swa);
    /* the pools stay as allocated; only the blocks the one block manager hands out shrink */
    for (int k = 0; k < b->tp_size; k++)
        b->tp_peer[k]->num_full = m[2 * N], b->tp_peer[k]->num_swa = m[2 * N + 1];
    return 0;
}

int tp_nodes_create(struct backend *b, const backend_options *opt, const tp_plan *plan) {
    if (!ar_nccl_built())
        return err_set("--nnodes %d: this build has no NCCL (CMake did not find libnccl and "
                       "nccl.h), which carries every collective between the nodes",
                       opt->nnodes);
    struct tp_nodes *nd = xcalloc(1, sizeof *nd);
    nd->nnodes = opt->nnodes, nd->node_rank = opt->node_rank, nd->world = plan->size;
    nd->local = b->tp_size, nd->rank0 = opt->node_rank * b->tp_size;
    nd->leader = opt->node_rank == 0;
    b->nodes = nd;
    for (int k = 0; k < nd->local; k++) b->tp_peer[k]->nodes = nd;
    for (int r = 0; r < plan->size; r++) {
        nd->col0[r] = plan->rank[r].vocab0, nd->ncols[r] = plan->rank[r].n_vocab;
        if (nd->ncols[r] > nd->max_v) nd->max_v = nd->ncols[r];
    }

    char id[300];
    if (backend_nodes_comm_id(opt->master_addr, opt->master_port, id, sizeof id)) return -1;
    const char *env = getenv("NCCL_COMM_ID");
    if (env && strcmp(env, id))
        log_warn("cuda backend: NCCL_COMM_ID=%s in the environment replaced by %s (--master-addr, "
                 "--master-port)",
                 env, id);
    setenv("NCCL_COMM_ID", id, 1);
    int min_tokens = 0;
    if (ar_nccl_min_tokens_from_env(&min_tokens)) return -1;
    if (min_tokens > 1)
        log_info("cuda backend: GPTOSS_AR_NCCL_MIN_TOKENS=%d ignored: across nodes every "
                 "all-reduce goes through NCCL",
                 min_tokens);
    int devices[TP_MAX_NODE];
    for (int k = 0; k < nd->local; k++) devices[k] = b->tp_peer[k]->device;
    log_info("cuda backend: node %d of %d: global ranks %d to %d of %d on GPUs 0 to %d; joining "
             "NCCL at %s (%s)",
             nd->node_rank, nd->nnodes, nd->rank0, nd->rank0 + nd->local - 1, nd->world,
             nd->local - 1, id,
             nd->leader ? "this node hosts its bootstrap root" : "node 0 hosts its bootstrap root");
    b->nccl_owned = xcalloc(1, sizeof *b->nccl_owned);
    /* min_tokens 1: every all-reduce of a step (T >= 1) through NCCL */
    if (ar_nccl_create_world(b->nccl_owned, nd->local, devices, nd->world, nd->rank0, 1)) {
        free(b->nccl_owned);
        b->nccl_owned = NULL;
        return err_prefix("--nnodes %d --node-rank %d", nd->nnodes, nd->node_rank);
    }
    for (int k = 0; k < nd->local; k++) b->tp_peer[k]->nccl = b->nccl_owned;
    if (agree(b, opt)) {
        nodes_abort(b);
        return -1;
    }

    /* The all-gather's landing: every rank's padded piece of R_cap rows. A failure from here on
     * aborts the communicators, so that the other nodes fail at once instead of waiting. */
    const size_t land = (size_t)nd->world * (size_t)b->ws.R_cap * (size_t)nd->max_v;
    for (int k = 0; k < nd->local; k++) {
        cudaError_t e = cudaSetDevice(b->tp_peer[k]->device);
        if (e == cudaSuccess) e = cudaMalloc((void **)&nd->gat[k], land * sizeof(float));
        if (e != cudaSuccess) {
            err_set("cuda backend: the logits all-gather's %.2f GB on GPU %d: %s",
                    (double)land * sizeof(float) / 1e9, b->tp_peer[k]->device,
                    cudaGetErrorString(e));
            nodes_abort(b);
            return -1;
        }
    }
    CU(cudaSetDevice(b->device));
    if (host_reserve(nd, NODES_FIRST_BYTES, 0) || dev_reserve(b, NODES_FIRST_BYTES)) {
        nodes_abort(b);
        return -1;
    }
    log_info("cuda backend: node %d: NCCL joined the %d ranks of %d nodes; every all-reduce and "
             "the logits all-gather (%.2f GB a GPU) through NCCL; %s",
             nd->node_rank, nd->world, nd->nnodes, (double)land * sizeof(float) / 1e9,
             nd->leader ? "this node runs the engine and sends each step"
                        : "headless: this node runs the steps node 0 sends");
    return 0;
}

/* ---- node 0 ---- */

bool tp_nodes_leads(const struct backend *b) {
    return b->nodes && b->nodes->leader;
}

int tp_nodes_encode(struct backend *b, const step_batch *st) {
    struct tp_nodes *nd = b->nodes;
    if (!nd->leader) return 0;
    return step_wire_encode_step(&nd->msg, nd->seq, st, nd->fix, nd->n_fix);
}

/* The message in nd->msg from global rank 0 to every rank. */
static int send_msg(struct backend *b) {
    struct tp_nodes *nd = b->nodes;
    if (nd->broken) return err_set("cuda backend: NCCL between the nodes failed earlier");
    const size_t total = nd->msg.len;
    const size_t span = total > NODES_FIRST_BYTES ? total : NODES_FIRST_BYTES;
    if (host_reserve(nd, span, 0) || dev_reserve(b, span)) return -1;
    memcpy(nd->host, nd->msg.data, total);
    CU(cudaSetDevice(b->device));
    CU(cudaMemcpyAsync(nd->dev[0], nd->host, total, cudaMemcpyHostToDevice, b->stream));
    if (bcast(b, 0, NODES_FIRST_BYTES) ||
        (total > NODES_FIRST_BYTES && bcast(b, NODES_FIRST_BYTES, total - NODES_FIRST_BYTES))) {
        nodes_abort(b);
        return -1;
    }
    CU(cudaSetDevice(b->device));
    nd->seq++;
    return 0;
}

int tp_nodes_publish(struct backend *b) {
    struct tp_nodes *nd = b->nodes;
    if (!nd->leader) return 0;
    if (send_msg(b)) return -1;
    nd->n_fix = 0; /* they are on their way */
    return 0;
}

int tp_nodes_wait(struct backend *b) {
    for (int k = 0; k < b->tp_size; k++) {
        struct backend *br = b->tp_peer[k];
        if (br->inflight && wait_done(b, NULL, br->done, "the step")) return -1;
    }
    return 0;
}

void tp_nodes_note_results(struct backend *b, const step_batch *st, const step_result *res) {
    struct tp_nodes *nd = b->nodes;
    if (!nd->leader || !res->seqs) return;
    for (int i = 0; i < st->n_seqs; i++) {
        if (!runner_lead_sampled(b, st, i)) continue;
        if (nd->n_fix == nd->cap_fix) {
            nd->cap_fix = nd->cap_fix ? 2 * nd->cap_fix : 64;
            nd->fix = xrealloc(nd->fix, (size_t)nd->cap_fix * 2 * sizeof *nd->fix);
        }
        nd->fix[2 * nd->n_fix] = st->slot[i], nd->fix[2 * nd->n_fix + 1] = res->seqs[i].token;
        nd->n_fix++;
    }
}

void tp_nodes_shutdown(struct backend *b) {
    struct tp_nodes *nd = b->nodes;
    if (!nd || !nd->leader || nd->broken || !b->nccl_owned) return;
    step_wire_encode_shutdown(&nd->msg, nd->seq);
    if (send_msg(b) || wait_done(b, b->stream, NULL, "the shutdown message")) {
        log_warn("cuda backend: the shutdown message to the other nodes failed: %s", err_msg());
        return;
    }
    log_info("cuda backend: node 0 told the other %d nodes to stop", nd->nnodes - 1);
}

/* ---- a headless node ---- */

/* The next message into nd->host; its header in *h. */
static int receive(struct backend *b, step_wire_header *h) {
    struct tp_nodes *nd = b->nodes;
    if (bcast(b, 0, NODES_FIRST_BYTES)) return -1;
    CU(cudaSetDevice(b->device));
    CU(cudaMemcpyAsync(nd->host, nd->dev[0], NODES_FIRST_BYTES, cudaMemcpyDeviceToHost, b->stream));
    if (wait_done(b, b->stream, NULL, "receiving a step")) return -1;
    if (step_wire_header_read(nd->host, NODES_FIRST_BYTES, h)) return -1;
    if (h->seq != nd->seq)
        return err_set("cuda backend: message %u from node 0, expected %u", (unsigned)h->seq,
                       (unsigned)nd->seq);
    const size_t total = STEP_WIRE_HEADER_BYTES + (size_t)h->payload_bytes;
    if (total > NODES_FIRST_BYTES) {
        if (host_reserve(nd, total, NODES_FIRST_BYTES) || dev_reserve(b, total)) return -1;
        if (bcast(b, NODES_FIRST_BYTES, total - NODES_FIRST_BYTES)) return -1;
        CU(cudaSetDevice(b->device));
        CU(cudaMemcpyAsync(nd->host + NODES_FIRST_BYTES,
                           (unsigned char *)nd->dev[0] + NODES_FIRST_BYTES,
                           total - NODES_FIRST_BYTES, cudaMemcpyDeviceToHost, b->stream));
        if (wait_done(b, b->stream, NULL, "receiving a step")) return -1;
    }
    nd->seq++;
    return 0;
}

/* The last step on every local rank done, then the fix-ups node 0 sent (runner_tp_follow's on one
 * machine) queued for the step about to launch. */
static int finish_last(struct backend *b, const step_wire_step *m) {
    for (int k = 0; k < b->tp_size; k++) {
        struct backend *br = b->tp_peer[k];
        if (br->inflight && wait_done(b, NULL, br->done, "the last step")) return -1;
        br->inflight = NULL;
        for (int f = 0; f < m->n_fixups; f++) {
            const int32_t slot = m->fixups[2 * f], token = m->fixups[2 * f + 1];
            if (slot < 0 || slot >= br->max_slots || token < 0 || token >= br->V)
                return err_set("cuda backend: a fix-up of slot %d, token %d from node 0 is out of "
                               "range",
                               slot, token);
            runner_add_fixup(br, slot, token);
        }
    }
    return 0;
}

int tp_nodes_follow(struct backend *b) {
    struct tp_nodes *nd = b->nodes;
    if (!nd || nd->leader)
        return err_set("cuda backend: only a headless node (--headless, --node-rank > 0) follows "
                       "node 0");
    log_info("cuda backend: node %d: following node 0's steps", nd->node_rank);
    long steps = 0;
    for (;;) {
        step_wire_header h;
        if (receive(b, &h)) break;
        if (h.kind == STEP_WIRE_SHUTDOWN) {
            const step_wire_step none = {0};
            if (finish_last(b, &none)) break;
            log_info("cuda backend: node %d: node 0 stopped after %ld steps", nd->node_rank, steps);
            return 0;
        }
        step_wire_step *m = &nd->rx[nd->rx_cur];
        step_wire_step_free(m);
        if (step_wire_decode_step(&h, nd->host + STEP_WIRE_HEADER_BYTES, (size_t)h.payload_bytes,
                                  m) ||
            finish_last(b, m))
            break;
        const step_batch *parts[TP_MAX];
        for (int k = 0; k < b->tp_size; k++) parts[k] = &m->st;
        if (tp_launch_parts(b, parts)) break;
        /* the step before is done on every rank: its arrays may go */
        nd->rx_cur ^= 1;
        step_wire_step_free(&nd->rx[nd->rx_cur]);
        steps++;
    }
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", err_msg());
    nodes_abort(b);
    return err_set("headless node %d, after %ld steps: %s (its NCCL communicators were aborted, so "
                   "node 0's step fails too)",
                   nd->node_rank, steps, msg);
}
