/* One-shot all-reduce + residual add + RMSNorm over peer memory. See allreduce.h for the protocol.
 *
 * The kernel, per block b (rows t ≡ b mod grid), one thread per 8 features as in norm.cu:
 *   1. (if given) the rank's partial rows: Σ slots + delta, stored to its own site buffer;
 *   2. barrier with the peers: __syncthreads (the block's stores are done), then thread k < N
 *      fences at system scope and writes the block's call number into rank k's flags[b][rank]
 *      (a release store), and spins until this rank's flags[b][k] has reached it (acquire loads);
 *      __syncthreads again, so every thread's later loads are ordered after the acquires;
 *   3. each row: h += partial_0 + … + partial_{N−1}, loaded from the peers through L2 (ld.cg: no
 *      stale L1 line can be hit), then the norm (norm_row.cuh).
 * Cost at one token and two ranks: one flag round trip and one 11.5 KB read over NVLink, each ~1–2 µs;
 * the target is ≤ 8 µs for the whole call (issue 17). */
#include "backend/cuda/allreduce.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/norm_row.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { AR_MAX_H = 8192 };

/* What every barrier needs: the flags, the counters, the watchdog. */
struct ar_sync {
    uint32_t *flags[AR_MAX_RANKS];
    uint32_t *counters[AR_MAX_RANKS]; /* [rank] = that rank's; this rank's is counters[rank] */
    ar_timeout_info *info;
    unsigned long long timeout_ns;
    int n, rank, what;
};

struct ar_args {
    ar_sync sync;
    float *bufs[AR_MAX_RANKS];
    int T, H;
    int phases; /* AR_PHASE_*: the whole call, or one half of it (ranks in lockstep, allreduce.h) */
    const float *slots;
    int n_slots;
    const uint16_t *delta;
    float *h;
    const uint16_t *gain;
    float eps;
    uint16_t *y, *ylo;
    int row0, n_rows; /* the rows reduced: [row0, row0 + n_rows) of the T, into h's rows 0 .. */
};

static __device__ __forceinline__ void st_release_sys(uint32_t *p, uint32_t v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

static __device__ __forceinline__ uint32_t ld_acquire_sys(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

static __device__ __forceinline__ void add8(float v[8], const float *p) {
    const float4 a = __ldcg((const float4 *)p), b = __ldcg((const float4 *)(p + 4));
    v[0] += a.x, v[1] += a.y, v[2] += a.z, v[3] += a.w;
    v[4] += b.x, v[5] += b.y, v[6] += b.z, v[7] += b.w;
}

/* The watchdog (allreduce.h): the first barrier to give up says who it waited for, then traps. */
static __device__ __noinline__ void ar_give_up(ar_timeout_info *info, const uint32_t *peer_counters,
                                               int rank, int peer, int what, uint32_t call,
                                               uint32_t seen) {
    if (info && atomicCAS((unsigned int *)&info->fired, 0u, 1u) == 0u) {
        info->rank = rank, info->block = blockIdx.x, info->peer = peer, info->what = what;
        info->call = call, info->seen = seen;
        info->peer_counter = *(volatile const uint32_t *)(peer_counters + blockIdx.x);
        __threadfence_system();
    }
    __trap();
}

/* The flag barrier of allreduce.h, for block b: every rank's work before it is visible after it. */
static __device__ __forceinline__ void ar_barrier(const ar_sync &s) {
    const int b = blockIdx.x, c = threadIdx.x;
    uint32_t *counter = s.counters[s.rank];
    __syncthreads();
    const uint32_t call = counter[b] + 1;
    if (c < s.n) {
        __threadfence_system();
        st_release_sys(s.flags[c] + (size_t)b * AR_MAX_RANKS + s.rank, call);
        const uint32_t *mine = s.flags[s.rank] + (size_t)b * AR_MAX_RANKS + c;
        uint32_t seen;
        unsigned long long t0 = 0;
        for (unsigned int spin = 0; (int32_t)((seen = ld_acquire_sys(mine)) - call) < 0; spin++) {
            if ((spin & 1023u) == 0) { /* the clock now and then: the loads are the fast path */
                const unsigned long long now = global_ns();
                if (t0 == 0)
                    t0 = now;
                else if (now - t0 > s.timeout_ns)
                    ar_give_up(s.info, s.counters[c], s.rank, c, s.what, call, seen);
            }
        }
    }
    __syncthreads();
    if (c == 0) counter[b] = call;
}

__global__ void ar_add_rmsnorm_kernel(const ar_args a) {
    __shared__ float red[32];
    const int b = blockIdx.x, c = threadIdx.x, H = a.H;
    const bool active = 8 * c < H;
    const uint4 g8 =
        gain_at(a.y ? a.gain : NULL, c, active); /* model memory: first (norm_row.cuh) */

    /* 1. This rank's partial rows. */
    if ((a.phases & AR_PHASE_PARTIAL) && (a.slots || a.delta) && active) {
        float *mine = a.bufs[a.sync.rank];
        for (int t = b; t < a.T; t += gridDim.x) {
            float d[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            if (a.slots) { /* slot 0 + slot 1 + …: the MoE combine's order (norm.cu) */
                const float *srow = a.slots + (size_t)t * a.n_slots * H + 8 * c;
                for (int i = 0; i < a.n_slots; i++) {
                    const float4 s0 = *(const float4 *)(srow + (size_t)i * H),
                                 s1 = *(const float4 *)(srow + (size_t)i * H + 4);
                    d[0] += s0.x, d[1] += s0.y, d[2] += s0.z, d[3] += s0.w;
                    d[4] += s1.x, d[5] += s1.y, d[6] += s1.z, d[7] += s1.w;
                }
            }
            if (a.delta) {
                float db[8];
                unpack_bf16x8(*(const uint4 *)(a.delta + (size_t)t * H + 8 * c), db);
#pragma unroll
                for (int i = 0; i < 8; i++) d[i] += db[i];
            }
            float *prow = mine + (size_t)t * H + 8 * c;
            *(float4 *)prow = make_float4(d[0], d[1], d[2], d[3]);
            *(float4 *)(prow + 4) = make_float4(d[4], d[5], d[6], d[7]);
        }
    }

    /* 2. The barrier with block b of every rank. */
    if (a.phases & AR_PHASE_BARRIER) ar_barrier(a.sync);
    if (!(a.phases & AR_PHASE_REDUCE)) return;

    /* 3. The sum in rank order, the residual, the norm: of this rank's rows only (all T but
     * under DEP's reduce-scatter). Block b still walks rows t ≡ b mod grid, the rows its peers'
     * block b wrote before the barrier; a skipped row is skipped by the whole block. */
    for (int t = b; t < a.T; t += gridDim.x) {
        if (t < a.row0 || t >= a.row0 + a.n_rows) continue;
        const int u = t - a.row0; /* the row of h and y */
        float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        float *hrow = a.h + (size_t)u * H + 8 * c;
        if (active) {
            const float4 h0 = *(const float4 *)hrow, h1 = *(const float4 *)(hrow + 4);
            v[0] = h0.x, v[1] = h0.y, v[2] = h0.z, v[3] = h0.w;
            v[4] = h1.x, v[5] = h1.y, v[6] = h1.z, v[7] = h1.w;
            for (int k = 0; k < a.sync.n; k++) add8(v, a.bufs[k] + (size_t)t * H + 8 * c);
            *(float4 *)hrow = make_float4(v[0], v[1], v[2], v[3]);
            *(float4 *)(hrow + 4) = make_float4(v[4], v[5], v[6], v[7]);
        }
        if (a.y)
            write_norm(v, active, H, g8, a.eps, a.y + (size_t)u * H,
                       a.ylo ? a.ylo + (size_t)u * H : NULL, c, red);
        __syncthreads(); /* red[] is reused by the next row */
    }
}

struct ar_gather_args {
    ar_sync sync;
    bool barriers; /* false: ranks in lockstep (allreduce.h) */
    const float *parts[AR_MAX_RANKS];
    int col0[AR_MAX_RANKS], ncols[AR_MAX_RANKS];
    int R, ld;
    float *out;
};

/* After the barrier, block b copies the float4 groups b, b + grid, … of every piece (pieces of a
 * multiple of 4 columns: 16-byte loads from the peers through L2), else floats one by one; then the
 * closing barrier (allreduce.h). */
__global__ void ar_gather_kernel(const ar_gather_args a) {
    if (a.barriers) ar_barrier(a.sync);
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (int k = 0; k < a.sync.n; k++) {
        const int nc = a.ncols[k];
        const float *src = a.parts[k];
        float *dst = a.out + a.col0[k];
        const bool vec = nc % 4 == 0 && a.col0[k] % 4 == 0 && a.ld % 4 == 0;
        const size_t groups = vec ? (size_t)a.R * (nc / 4) : (size_t)a.R * nc;
        for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < groups; i += stride) {
            if (vec) {
                const size_t row = i / (nc / 4), g = i % (nc / 4);
                *(float4 *)(dst + row * a.ld + 4 * g) = __ldcg((const float4 *)src + i);
            } else {
                const size_t row = i / nc, col = i % nc;
                dst[row * a.ld + col] = __ldcg(src + i);
            }
        }
    }
    if (a.barriers) ar_barrier(a.sync);
}

/* The barrier fields of rank r's calls. */
static ar_sync sync_of(const ar_rank *r, int what) {
    ar_sync s;
    memset(&s, 0, sizeof s);
    for (int k = 0; k < r->n_ranks; k++) s.flags[k] = r->flags[k], s.counters[k] = r->counters[k];
    s.info = r->timeout_info, s.timeout_ns = r->timeout_ns;
    s.n = r->n_ranks, s.rank = r->rank, s.what = what;
    return s;
}

static cudaError_t gather(const ar_rank *r, const int *col0, const int *ncols, int R, float *out,
                          int ld, bool barriers, cudaStream_t stream) {
    if (!r || !col0 || !ncols || R < 0 || !out || r->n_ranks < 1 || r->n_ranks > AR_MAX_RANKS ||
        r->max_blocks < 1)
        return cudaErrorInvalidValue;
    ar_gather_args a;
    memset(&a, 0, sizeof a);
    for (int k = 0; k < r->n_ranks; k++) {
        if (ncols[k] < 0 || col0[k] < 0 || col0[k] + ncols[k] > ld ||
            (size_t)R * (size_t)ncols[k] > r->gather_cap)
            return cudaErrorInvalidValue;
        a.parts[k] = r->gather[k];
        a.col0[k] = col0[k], a.ncols[k] = ncols[k];
    }
    if (R == 0) return cudaSuccess;
    a.sync = sync_of(r, 2);
    a.barriers = barriers;
    a.R = R, a.ld = ld, a.out = out;
    ar_gather_kernel<<<r->max_blocks, 256, 0, stream>>>(a);
    return cudaGetLastError();
}

cudaError_t ar_gather_rows(const ar_rank *r, const int *col0, const int *ncols, int R, float *out,
                           int ld, cudaStream_t stream) {
    return gather(r, col0, ncols, R, out, ld, true, stream);
}

cudaError_t ar_gather_copy(const ar_rank *r, const int *col0, const int *ncols, int R, float *out,
                           int ld, cudaStream_t stream) {
    return gather(r, col0, ncols, R, out, ld, false, stream);
}

static cudaError_t add_rmsnorm(const ar_rank *r, int phases, int site, const float *slots,
                               int n_slots, const uint16_t *delta, int T, int row0, int n_rows,
                               float *h, const uint16_t *gain, float eps, uint16_t *y,
                               uint16_t *y_lo, cudaStream_t stream) {
    if (!r || phases < 1 || phases > AR_PHASE_ALL || site < 0 || site >= AR_SITES || T < 0 ||
        T > r->T_cap || (!h && n_rows > 0) || (slots && n_slots < 1) || (y && !gain) ||
        (y_lo && !y) || r->n_ranks < 1 || r->n_ranks > AR_MAX_RANKS || r->rank < 0 ||
        r->rank >= r->n_ranks || r->max_blocks < 1 || r->H % 8 || r->H > AR_MAX_H || row0 < 0 ||
        n_rows < 0 || row0 + n_rows > T)
        return cudaErrorInvalidValue;
    if (T == 0) return cudaSuccess;
    ar_args a;
    memset(&a, 0, sizeof a);
    for (int k = 0; k < r->n_ranks; k++) a.bufs[k] = r->bufs[site][k];
    a.sync = sync_of(r, site);
    a.T = T, a.H = r->H, a.phases = phases;
    a.slots = slots, a.n_slots = slots ? n_slots : 0, a.delta = delta;
    a.h = h, a.gain = gain, a.eps = eps, a.y = y, a.ylo = y_lo;
    a.row0 = row0, a.n_rows = n_rows;
    const int grid = T < r->max_blocks ? T : r->max_blocks;
    const int per_row = ((r->H / 8 + 31) / 32) * 32, threads = per_row < 32 ? 32 : per_row;
    ar_add_rmsnorm_kernel<<<grid, threads, 0, stream>>>(a);
    return cudaGetLastError();
}

cudaError_t ar_add_rmsnorm_phases(const ar_rank *r, int phases, int site, const float *slots,
                                  int n_slots, const uint16_t *delta, int T, float *h,
                                  const uint16_t *gain, float eps, uint16_t *y, uint16_t *y_lo,
                                  cudaStream_t stream) {
    return add_rmsnorm(r, phases, site, slots, n_slots, delta, T, 0, T, h, gain, eps, y, y_lo,
                       stream);
}

cudaError_t ar_reduce_scatter_rmsnorm(const ar_rank *r, int phases, int site, const float *slots,
                                      int n_slots, int T, int row0, int n_rows, float *h,
                                      const uint16_t *gain, float eps, uint16_t *y, uint16_t *y_lo,
                                      cudaStream_t stream) {
    return add_rmsnorm(r, phases, site, slots, n_slots, NULL, T, row0, n_rows, h, gain, eps, y,
                       y_lo, stream);
}

cudaError_t ar_add_rmsnorm(const ar_rank *r, int site, const float *slots, int n_slots,
                           const uint16_t *delta, int T, float *h, const uint16_t *gain, float eps,
                           uint16_t *y, uint16_t *y_lo, cudaStream_t stream) {
    return ar_add_rmsnorm_phases(r, AR_PHASE_ALL, site, slots, n_slots, delta, T, h, gain, eps, y,
                                 y_lo, stream);
}

/* ---- the group ---- */

void ar_group_free(ar_group *g) {
    int prev = 0;
    cudaGetDevice(&prev);
    for (int k = 0; k < g->n_ranks; k++) {
        cudaSetDevice(g->devices[k]);
        ar_rank *r = &g->rank[k];
        for (int s = 0; s < AR_SITES; s++) cudaFree(r->bufs[s][k]);
        cudaFree(r->flags[k]);
        cudaFree(r->gather[k]);
        cudaFree(r->counter);
    }
    if (g->timeout_info) cudaFreeHost(g->timeout_info);
    cudaSetDevice(prev);
    memset(g, 0, sizeof *g);
}

/* GPTOSS_AR_TIMEOUT_S (seconds, > 0), else 30. */
static unsigned long long timeout_ns_from_env(void) {
    const char *v = getenv("GPTOSS_AR_TIMEOUT_S");
    char *end = NULL;
    const double sec = v ? strtod(v, &end) : 0.0;
    if (!v || end == v || *end || !(sec > 0.0) || sec > 3600.0) return 30ull * 1000000000ull;
    return (unsigned long long)(sec * 1e9);
}

int ar_group_describe_timeout(const ar_group *g, char *buf, size_t n) {
    const ar_timeout_info *t = g ? g->timeout_info : NULL;
    if (!t || !t->fired) return 0;
    static const char *const what[] = {"the all-reduce after attention",
                                       "the all-reduce after the MoE", "the logits gather"};
    snprintf(
        buf, n,
        "%s timed out (GPTOSS_AR_TIMEOUT_S): rank %d, block %d, at call %u, waited for rank %d, "
        "whose flag showed call %u and whose own counter was at %u (%s)",
        what[t->what >= 0 && t->what <= 2 ? t->what : 2], t->rank, t->block, t->call, t->peer,
        t->seen, t->peer_counter,
        (int32_t)(t->peer_counter - t->call) >= 0
            ? "it had passed that call: the ranks' calls are out of step"
            : "it had not reached that call: its kernels or its host thread are behind");
    return 1;
}

static cudaError_t group_alloc(ar_group *g, int T_cap, int H, size_t gather_cap) {
    for (int k = 0; k < g->n_ranks; k++) {
        cudaError_t e = cudaSetDevice(g->devices[k]);
        ar_rank *r = &g->rank[k];
        const size_t buf_bytes = (size_t)T_cap * H * sizeof(float),
                     flag_bytes = (size_t)AR_MAX_BLOCKS * AR_MAX_RANKS * sizeof(uint32_t),
                     counter_bytes = (size_t)AR_MAX_BLOCKS * sizeof(uint32_t);
        for (int s = 0; s < AR_SITES && e == cudaSuccess; s++)
            e = cudaMalloc((void **)&r->bufs[s][k], buf_bytes ? buf_bytes : 256);
        if (e == cudaSuccess && gather_cap)
            e = cudaMalloc((void **)&r->gather[k], gather_cap * sizeof(float));
        if (e == cudaSuccess) e = cudaMalloc((void **)&r->flags[k], flag_bytes);
        if (e == cudaSuccess) e = cudaMemset(r->flags[k], 0, flag_bytes);
        if (e == cudaSuccess) e = cudaMalloc((void **)&r->counter, counter_bytes);
        if (e == cudaSuccess) e = cudaMemset(r->counter, 0, counter_bytes);
        if (e != cudaSuccess) return e;
    }
    return cudaDeviceSynchronize();
}

static cudaError_t group_peer_access(const ar_group *g) {
    for (int i = 0; i < g->n_ranks; i++)
        for (int j = 0; j < g->n_ranks; j++) {
            const int di = g->devices[i], dj = g->devices[j];
            if (di == dj) continue;
            int ok = 0;
            cudaError_t e = cudaDeviceCanAccessPeer(&ok, di, dj);
            if (e != cudaSuccess) return e;
            if (!ok) return cudaErrorPeerAccessUnsupported;
            if ((e = cudaSetDevice(di)) != cudaSuccess) return e;
            e = cudaDeviceEnablePeerAccess(dj, 0);
            if (e == cudaErrorPeerAccessAlreadyEnabled)
                (void)cudaGetLastError();
            else if (e != cudaSuccess)
                return e;
        }
    return cudaSuccess;
}

cudaError_t ar_group_create(ar_group *g, int n_ranks, const int *devices, int T_cap, int H,
                            int max_blocks, size_t gather_cap) {
    memset(g, 0, sizeof *g);
    if (n_ranks < 1 || n_ranks > AR_MAX_RANKS || !devices || T_cap < 0 || H < 8 || H % 8 ||
        H > AR_MAX_H || max_blocks < 0)
        return cudaErrorInvalidValue;
    int prev = 0;
    cudaError_t e = cudaGetDevice(&prev);
    if (e != cudaSuccess) return e;
    g->n_ranks = n_ranks;
    memcpy(g->devices, devices, (size_t)n_ranks * sizeof *devices);

    /* The grid cap: every rank's grid must be resident at once on its device, next to the other
     * ranks' grids placed on the same device (one 384-thread block per SM is always possible). */
    int cap = max_blocks;
    if (cap == 0) {
        cap = AR_MAX_BLOCKS;
        for (int k = 0; k < n_ranks; k++) {
            int sms = 0, on_device = 0;
            e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, devices[k]);
            if (e != cudaSuccess) return e;
            for (int j = 0; j < n_ranks; j++) on_device += devices[j] == devices[k];
            if (sms / on_device < cap) cap = sms / on_device;
        }
    }
    if (cap > AR_MAX_BLOCKS) cap = AR_MAX_BLOCKS;
    if (cap < 1) return cudaErrorInvalidValue;

    e = group_alloc(g, T_cap, H, gather_cap);
    if (e == cudaSuccess) e = group_peer_access(g);
    if (e == cudaSuccess)
        e = cudaHostAlloc((void **)&g->timeout_info, sizeof *g->timeout_info,
                          cudaHostAllocMapped | cudaHostAllocPortable);
    if (e == cudaSuccess) memset((void *)g->timeout_info, 0, sizeof *g->timeout_info);
    /* Load both kernels on every device now: under lazy module loading a kernel's first launch can
     * wait for the device's running kernels, and those may be another rank's, spinning in the
     * barrier until this rank's launch arrives (the all-gather's first call deadlocked so). */
    for (int k = 0; k < n_ranks && e == cudaSuccess; k++) {
        struct cudaFuncAttributes fa;
        e = cudaSetDevice(devices[k]);
        if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, ar_add_rmsnorm_kernel);
        if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, ar_gather_kernel);
    }
    cudaSetDevice(prev);
    if (e != cudaSuccess) {
        ar_group_free(g);
        return e;
    }
    /* Every rank sees every rank's buffers and flags. */
    for (int k = 0; k < n_ranks; k++) {
        ar_rank *r = &g->rank[k];
        r->n_ranks = n_ranks, r->rank = k, r->max_blocks = cap, r->T_cap = T_cap, r->H = H;
        r->gather_cap = gather_cap;
        r->timeout_info = g->timeout_info; /* unified addressing: the host pointer maps */
        r->timeout_ns = timeout_ns_from_env();
        for (int j = 0; j < n_ranks; j++) {
            r->counters[j] = g->rank[j].counter;
            for (int s = 0; s < AR_SITES; s++) r->bufs[s][j] = g->rank[j].bufs[s][j];
            r->flags[j] = g->rank[j].flags[j];
            r->gather[j] = g->rank[j].gather[j];
        }
    }
    return cudaSuccess;
}
