/* NCCL's all-reduce for large messages. See allreduce_nccl.h. */
#include "backend/cuda/allreduce_nccl.h"
#include "backend/cuda/norm.h"
#include "base/error.h"
#include "base/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#ifdef GPTOSS_HAVE_NCCL
#include <nccl.h>
#endif

enum { AR_NCCL_MAX_MIN_TOKENS = 1 << 20 };

bool ar_nccl_built(void) {
#ifdef GPTOSS_HAVE_NCCL
    return true;
#else
    return false;
#endif
}

int ar_nccl_min_tokens_from_env(int *min_tokens) {
    *min_tokens = 0;
    const char *v = getenv("GPTOSS_AR_NCCL_MIN_TOKENS");
    if (!v || !*v) return 0;
    char *end = NULL;
    errno = 0;
    const long n = strtol(v, &end, 10);
    if (errno || end == v || *end || n < 0 || n > AR_NCCL_MAX_MIN_TOKENS)
        return err_set("GPTOSS_AR_NCCL_MIN_TOKENS=%s: expected a whole number of tokens in [0, %d] "
                       "(0: never use NCCL)",
                       v, AR_NCCL_MAX_MIN_TOKENS);
    *min_tokens = (int)n;
    return 0;
}

/* Rank k's partial, the all-reduce and the norm: CUDA errors named by their step. */
static int cuda_failed(const char *what, int T, int rank, cudaError_t e) {
    return err_set("tensor parallelism: %s (%d tokens, rank %d) failed: %s", what, T, rank,
                   cudaGetErrorString(e));
}

#ifdef GPTOSS_HAVE_NCCL

static int nccl_failed(const char *call, ncclComm_t comm, ncclResult_t res) {
    const char *last = comm ? ncclGetLastError(comm) : ncclGetLastError(NULL);
    return err_set("NCCL: %s failed: %s%s%s", call, ncclGetErrorString(res),
                   last && *last ? ": " : "", last && *last ? last : "");
}

/* One all-reduce of one float on every rank, from this thread (so grouped), then a wait for each
 * device: NCCL's first collective loads its kernels and, lazily connecting, sets up its channels;
 * here nothing else runs on the GPUs, whereas inside a step another rank's kernels could be
 * spinning in a collective while this happens. It also proves the communicators work before the
 * first step depends on them. */
static int warm_up(const ar_nccl *nc) {
    float *one[AR_MAX_RANKS] = {NULL};
    int rc = 0;
    for (int k = 0; k < nc->n_ranks && !rc; k++) {
        cudaError_t e = cudaSetDevice(nc->devices[k]);
        if (e == cudaSuccess) e = cudaMalloc((void **)&one[k], sizeof(float));
        if (e == cudaSuccess) e = cudaMemset(one[k], 0, sizeof(float));
        if (e != cudaSuccess) rc = cuda_failed("NCCL warm-up buffer", 1, k, e);
    }
    if (!rc) {
        ncclResult_t res = ncclGroupStart();
        for (int k = 0; k < nc->n_ranks && res == ncclSuccess; k++)
            res = ncclAllReduce(one[k], one[k], 1, ncclFloat32, ncclSum, nc->comm[k], 0);
        const ncclResult_t end = ncclGroupEnd();
        if (res != ncclSuccess)
            rc = nccl_failed("ncclAllReduce (warm-up)", NULL, res);
        else if (end != ncclSuccess)
            rc = nccl_failed("ncclGroupEnd (warm-up)", NULL, end);
    }
    for (int k = 0; k < nc->n_ranks; k++) {
        cudaSetDevice(nc->devices[k]);
        const cudaError_t e = cudaDeviceSynchronize();
        if (e != cudaSuccess && !rc) rc = cuda_failed("NCCL warm-up all-reduce", 1, k, e);
        cudaFree(one[k]);
    }
    return rc;
}

int ar_nccl_create(ar_nccl *nc, int n_ranks, const int *devices, int min_tokens) {
    memset(nc, 0, sizeof *nc);
    if (n_ranks < 1 || n_ranks > AR_MAX_RANKS || !devices || min_tokens < 0)
        return err_set("NCCL: a group of %d ranks (1 to %d) switching at %d tokens: refused",
                       n_ranks, AR_MAX_RANKS, min_tokens);
    for (int i = 0; i < n_ranks; i++)
        for (int j = 0; j < i; j++)
            if (devices[i] == devices[j])
                return err_set("NCCL: ranks %d and %d are both on GPU %d; NCCL needs one GPU per "
                               "rank",
                               j, i, devices[i]);
    /* The device notes forbid NVLink multicast (NVLS: NCCL's NVSwitch reductions): off unless the
     * environment says otherwise. Connections at init rather than at the first collective of each
     * algorithm, so that no set-up happens inside a step or a graph capture. */
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    setenv("NCCL_RUNTIME_CONNECT", "0", 0);
    int prev = 0;
    cudaGetDevice(&prev);
    ncclComm_t comms[AR_MAX_RANKS] = {NULL};
    const ncclResult_t res = ncclCommInitAll(comms, n_ranks, devices);
    cudaSetDevice(prev);
    if (res != ncclSuccess) return nccl_failed("ncclCommInitAll", NULL, res);
    nc->n_ranks = n_ranks, nc->min_tokens = min_tokens;
    for (int k = 0; k < n_ranks; k++) nc->comm[k] = comms[k], nc->devices[k] = devices[k];
    const int rc = warm_up(nc);
    cudaSetDevice(prev);
    if (rc) {
        ar_nccl_destroy(nc);
        return -1;
    }
    return 0;
}

int ar_nccl_create_world(ar_nccl *nc, int n_ranks, const int *devices, int world, int rank0,
                         int min_tokens) {
    memset(nc, 0, sizeof *nc);
    if (n_ranks < 1 || n_ranks > AR_MAX_RANKS || !devices || min_tokens < 0 || rank0 < 0 ||
        rank0 + n_ranks > world)
        return err_set("NCCL: ranks %d..%d of %d: refused", rank0, rank0 + n_ranks - 1, world);
    if (!getenv("NCCL_COMM_ID"))
        return err_set("NCCL: NCCL_COMM_ID is not set (node 0's address and port)");
    setenv("NCCL_NVLS_ENABLE", "0", 0); /* as ar_nccl_create */
    setenv("NCCL_RUNTIME_CONNECT", "0", 0);
    int prev = 0;
    cudaGetDevice(&prev);
    ncclUniqueId id;
    ncclResult_t res = ncclGetUniqueId(&id);
    if (res != ncclSuccess) return nccl_failed("ncclGetUniqueId (NCCL_COMM_ID)", NULL, res);
    ncclComm_t comms[AR_MAX_RANKS] = {NULL};
    res = ncclGroupStart();
    for (int k = 0; k < n_ranks && res == ncclSuccess; k++) {
        if (cudaSetDevice(devices[k]) != cudaSuccess) {
            res = ncclUnhandledCudaError;
            break;
        }
        res = ncclCommInitRank(&comms[k], world, id, rank0 + k);
    }
    const ncclResult_t end = ncclGroupEnd();
    cudaSetDevice(prev);
    if (res != ncclSuccess || end != ncclSuccess) {
        for (int k = 0; k < n_ranks; k++)
            if (comms[k]) ncclCommAbort(comms[k]);
        return nccl_failed("ncclCommInitRank (ranks of several processes)", NULL,
                           res != ncclSuccess ? res : end);
    }
    nc->n_ranks = n_ranks, nc->min_tokens = min_tokens;
    for (int k = 0; k < n_ranks; k++) nc->comm[k] = comms[k], nc->devices[k] = devices[k];
    const int rc = warm_up(nc);
    cudaSetDevice(prev);
    if (rc) {
        ar_nccl_abort(nc); /* the other processes' warm-up would wait for this one's */
        return -1;
    }
    return 0;
}

/* Finalize every communicator in one group (one thread holds them all: a finalize waits for its
 * peers' finalize, which ungrouped calls one after the other would never reach), then free each. */
void ar_nccl_destroy(ar_nccl *nc) {
    if (!nc || nc->n_ranks < 1) return;
    int prev = 0;
    cudaGetDevice(&prev);
    ncclResult_t res = ncclGroupStart();
    for (int k = 0; k < nc->n_ranks && res == ncclSuccess; k++)
        if (nc->comm[k]) res = ncclCommFinalize(nc->comm[k]);
    const ncclResult_t end = ncclGroupEnd();
    if (res != ncclSuccess || end != ncclSuccess)
        log_warn("NCCL: ncclCommFinalize failed: %s",
                 ncclGetErrorString(res != ncclSuccess ? res : end));
    for (int k = 0; k < nc->n_ranks; k++)
        if (nc->comm[k] && (res = ncclCommDestroy(nc->comm[k])) != ncclSuccess)
            log_warn("NCCL: ncclCommDestroy (rank %d) failed: %s", k, ncclGetErrorString(res));
    cudaSetDevice(prev);
    memset(nc, 0, sizeof *nc);
}

void ar_nccl_abort(ar_nccl *nc) {
    if (!nc || nc->n_ranks < 1) return;
    int prev = 0;
    cudaGetDevice(&prev);
    for (int k = 0; k < nc->n_ranks; k++) {
        ncclResult_t res;
        if (nc->comm[k] && (res = ncclCommAbort(nc->comm[k])) != ncclSuccess)
            log_warn("NCCL: ncclCommAbort (rank %d) failed: %s", k, ncclGetErrorString(res));
    }
    cudaSetDevice(prev);
    memset(nc, 0, sizeof *nc);
}

static int all_reduce(const ar_nccl *nc, int rank, float *buf, size_t count, cudaStream_t stream) {
    ncclComm_t comm = nc->comm[rank];
    const ncclResult_t res = ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, stream);
    return res == ncclSuccess ? 0 : nccl_failed("ncclAllReduce", comm, res);
}

#else /* built without NCCL: the one-shot kernel serves every size */

int ar_nccl_create(ar_nccl *nc, int n_ranks, const int *devices, int min_tokens) {
    (void)n_ranks, (void)devices, (void)min_tokens;
    memset(nc, 0, sizeof *nc);
    return err_set("NCCL: this build has no NCCL (CMake did not find libnccl and nccl.h)");
}

int ar_nccl_create_world(ar_nccl *nc, int n_ranks, const int *devices, int world, int rank0,
                         int min_tokens) {
    (void)n_ranks, (void)devices, (void)world, (void)rank0, (void)min_tokens;
    memset(nc, 0, sizeof *nc);
    return err_set("NCCL: this build has no NCCL (CMake did not find libnccl and nccl.h); "
                   "--nnodes needs it");
}

void ar_nccl_destroy(ar_nccl *nc) {
    if (nc) memset(nc, 0, sizeof *nc);
}

void ar_nccl_abort(ar_nccl *nc) {
    ar_nccl_destroy(nc);
}

static int all_reduce(const ar_nccl *nc, int rank, float *buf, size_t count, cudaStream_t stream) {
    (void)nc, (void)rank, (void)buf, (void)count, (void)stream;
    return err_set("NCCL: this build has no NCCL");
}

#endif

int ar_nccl_add_rmsnorm(const ar_nccl *nc, const ar_rank *r, int site, const float *slots,
                        int n_slots, const uint16_t *delta, int T, float *h, const uint16_t *gain,
                        float eps, uint16_t *y, uint16_t *y_lo, cudaStream_t stream) {
    if (!nc || !r || nc->n_ranks != r->n_ranks || r->rank < 0 || r->rank >= r->n_ranks ||
        site < 0 || site >= AR_SITES || T < 0 || T > r->T_cap || !h || (y && !gain))
        return err_set("tensor parallelism: NCCL all-reduce of %d tokens at site %d: bad arguments",
                       T, site);
    if (T == 0) return 0;
    float *buf = r->bufs[site][r->rank];
    cudaError_t e;
    if (slots || delta) { /* 1. the partial, by the one-shot kernel's first phase */
        e = ar_add_rmsnorm_phases(r, AR_PHASE_PARTIAL, site, slots, n_slots, delta, T, h, NULL, eps,
                                  NULL, NULL, stream);
        if (e != cudaSuccess) return cuda_failed("the all-reduce's partial rows", T, r->rank, e);
    }
    if (all_reduce(nc, r->rank, buf, (size_t)T * (size_t)r->H, stream)) /* 2. */
        return err_prefix("rank %d, %d tokens", r->rank, T);
    /* 3. h += the sum (the norm kernel's one slot), then the norm */
    e = norm_add_rmsnorm_split(h, NULL, buf, 1, T, r->H, gain, eps, y, y_lo, stream);
    if (e != cudaSuccess)
        return cuda_failed("the residual add + RMSNorm after NCCL", T, r->rank, e);
    return 0;
}
