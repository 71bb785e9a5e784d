/* The one-shot all-reduce + residual + RMSNorm (allreduce.h) for N ranks, against the CPU:
 *   - virtual ranks (all on GPU 0, N = 2 and 4: the protocol with the ranks' kernels running at once
 *     on N streams) and, with two GPUs or more, real ranks over peer memory;
 *   - T = 1, 3, 64, 300 (more rows than blocks: the grid loops), partials made by the kernel from
 *     fp32 slots and/or a bf16 delta, or written by the caller into the site buffer;
 *   - every rank's h equal bit for bit to the CPU's fp32 sum in rank order (so the replicas agree),
 *     the normalised row within bf16 rounding of cpu_rmsnorm, hi + lo within 3e-5;
 *   - 400 eager calls alternating the sites and T (1 and 7), then graphs of 20 calls replayed 10
 *     times: the flags and counters stay in step, h exact after every one of them;
 *   - the all-gather of the lm_head's vocabulary shares, exact on every rank;
 *   - DEP's reduce-scatter (the same kernel with a row range): each rank's rows of the rank-order sum
 *     exact, normed, nothing else written, a rank without rows included, with flags and in lockstep;
 *   - lockstep (virtual ranks only): the same cases with every rank's partial half, then every
 *     rank's reduction (and the gather's copies) on one stream, no flags, the same exact results;
 *   - a watchdog: a protocol that deadlocks fails the test after 20 s instead of hanging it;
 *   - the barrier's own watchdog (allreduce.h): one rank alone gives up after GPTOSS_AR_TIMEOUT_S
 *     and its report names who waited for whom (in a child process: the trap ends its context);
 *   - the NCCL path for large messages (allreduce_nccl.h), each rank's calls from its own thread as
 *     in tp_backend.c: a one-rank communicator on GPU 0 (an all-reduce of one rank is a copy, so the
 *     partial, the buffers, the sizes, graph capture and the norm kernel after it are checked on one
 *     GPU), and with two GPUs the real thing; the same cases as above, every T through NCCL, then
 *     the stress with T = 7 through NCCL and T = 1 through the one-shot kernel, mixed on the same
 *     site buffers. The residual must equal the CPU's h + (p_0 + p_1) exactly (NCCL's order; with
 *     one or two ranks that sum has one rounding either way), and y be identical on every rank.
 * --bench: µs per call for T = 1 … 256, 1024 and 4096 (graph replay); with two GPUs, the NCCL path
 * (ncclAllReduce + the add + norm kernel) of the same message beside ours, and the switch point it
 * suggests for GPTOSS_AR_NCCL_MIN_TOKENS (issue 17: ≤ 8 µs for one token across two H200s). */
#include "moe_test_util.h"

extern "C" {
#include "backend/cpu/ops.h"
#include "base/error.h"
}
#include "backend/cuda/allreduce.h"
#include "backend/cuda/allreduce_nccl.h"

#include <string.h>
#include <thread>
#include <unistd.h>

static const int H = 2880;
static const float EPS = 1e-5f;
static int T_CAP = 300;                     /* rows of every buffer: 4096 under --bench */
static const size_t GATHER_CAP = 64 * 4096; /* floats per rank: 64 rows of up to 4096 columns */

typedef struct {
    ar_group g;
    int n;
    cudaStream_t st[AR_MAX_RANKS];
    float *h[AR_MAX_RANKS];        /* each rank's replica of the residual */
    float *slots[AR_MAX_RANKS];    /* [T_CAP][4][H] */
    uint16_t *delta[AR_MAX_RANKS]; /* [T_CAP][H] */
    uint16_t *y[AR_MAX_RANKS], *ylo[AR_MAX_RANKS], *gain[AR_MAX_RANKS];
    ar_nccl *nccl; /* NULL: the one-shot kernel only; else T >= its min_tokens takes NCCL */
} group_ctx;

static void on(const group_ctx *c, int k) {
    CUDA_CHECK(cudaSetDevice(c->g.devices[k]));
}

/* Waits for every rank's stream; a deadlocked protocol ends the test (it cannot be recovered). */
static void wait_all(const group_ctx *c, const char *what) {
    for (int waited_ms = 0;; waited_ms += 1) {
        bool done = true;
        for (int k = 0; k < c->n; k++) {
            on(c, k);
            cudaError_t e = cudaStreamQuery(c->st[k]);
            if (e == cudaErrorNotReady) {
                done = false;
            } else if (e != cudaSuccess) {
                char why[512];
                if (ar_group_describe_timeout(&c->g, why, sizeof why))
                    fprintf(stderr, "FAIL: %s: %s\n", what, why);
                CUDA_CHECK(e);
            }
        }
        if (done) return;
        if (waited_ms > 20000) {
            fprintf(stderr, "FAIL: %s: the ranks did not finish within 20 s (deadlock)\n", what);
            _exit(1);
        }
        usleep(1000);
    }
}

static void ctx_init(group_ctx *c, int n, const int *devs, const std::vector<uint16_t> &gain) {
    memset(c, 0, sizeof *c);
    c->n = n;
    CUDA_CHECK(ar_group_create(&c->g, n, devs, T_CAP, H, 0, GATHER_CAP));
    for (int k = 0; k < n; k++) {
        on(c, k);
        CUDA_CHECK(cudaStreamCreateWithFlags(&c->st[k], cudaStreamNonBlocking));
        c->h[k] = tu_dev_alloc<float>((size_t)T_CAP * H);
        c->slots[k] = tu_dev_alloc<float>((size_t)T_CAP * 4 * H);
        c->delta[k] = tu_dev_alloc<uint16_t>((size_t)T_CAP * H);
        c->y[k] = tu_dev_alloc<uint16_t>((size_t)T_CAP * H);
        c->ylo[k] = tu_dev_alloc<uint16_t>((size_t)T_CAP * H);
        c->gain[k] = tu_dev_upload(gain.data(), (size_t)H);
    }
    CUDA_CHECK(cudaSetDevice(devs[0]));
}

static void ctx_free(group_ctx *c) {
    for (int k = 0; k < c->n; k++) {
        on(c, k);
        CUDA_CHECK(cudaStreamDestroy(c->st[k]));
        void *ps[] = {c->h[k], c->slots[k], c->delta[k], c->y[k], c->ylo[k], c->gain[k]};
        for (void *p : ps) CUDA_CHECK(cudaFree(p));
    }
    ar_group_free(&c->g);
    CUDA_CHECK(cudaSetDevice(c->g.n_ranks ? c->g.devices[0] : 0));
}

/* fn(k) for every rank k, with its device current: with NCCL on its own thread, as tp_backend.c's
 * launch threads do (a rank's ncclAllReduce may wait on the host for its peers' calls, and must not
 * be grouped: the norm kernel has to follow it on the stream); else one rank after the other here. */
template <typename F> static void each_rank(group_ctx *c, F fn) {
    if (!c->nccl) {
        for (int k = 0; k < c->n; k++) {
            on(c, k);
            fn(k);
        }
    } else {
        std::vector<std::thread> ts;
        for (int k = 0; k < c->n; k++)
            ts.emplace_back([c, k, &fn] {
                on(c, k);
                fn(k);
            });
        for (auto &t : ts) t.join();
    }
    on(c, 0);
}

/* Rank k's side of one call (mode 0: slots + delta, 1: slots only, 2: delta only, 3: the partial
 * already in the site buffer): NCCL's path when the context has it and T reaches its switch point,
 * else the one-shot kernel (whole, or one lockstep half). A failure ends the test (threads). */
static void call_rank(group_ctx *c, int k, int phases, int site, int mode, int T, bool norm,
                      cudaStream_t st) {
    const float *s = (mode == 0 || mode == 1) ? c->slots[k] : NULL;
    const uint16_t *d = (mode == 0 || mode == 2) ? c->delta[k] : NULL;
    const uint16_t *gain = norm ? c->gain[k] : NULL;
    uint16_t *y = norm ? c->y[k] : NULL, *ylo = norm ? c->ylo[k] : NULL;
    if (phases == AR_PHASE_ALL && ar_nccl_wanted(c->nccl, T)) {
        if (ar_nccl_add_rmsnorm(c->nccl, &c->g.rank[k], site, s, 4, d, T, c->h[k], gain, EPS, y,
                                ylo, st)) {
            fprintf(stderr, "FAIL: rank %d, T=%d: %s\n", k, T, err_msg());
            exit(1);
        }
        return;
    }
    CUDA_CHECK(ar_add_rmsnorm_phases(&c->g.rank[k], phases, site, s, 4, d, T, c->h[k], gain, EPS, y,
                                     ylo, st));
}

/* One call on every rank (each on its device and stream). */
static void call_all(group_ctx *c, int site, int mode, int T, bool norm, bool lockstep = false) {
    /* lockstep (allreduce.h): every rank's partial half, then every rank's reduction, all on rank
     * 0's stream, no flags; otherwise one whole call per rank on its own stream. */
    if (!lockstep) {
        each_rank(c, [&](int k) { call_rank(c, k, AR_PHASE_ALL, site, mode, T, norm, c->st[k]); });
        return;
    }
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < c->n; k++) {
            on(c, k);
            call_rank(c, k, pass ? AR_PHASE_REDUCE : AR_PHASE_PARTIAL, site, mode, T, norm,
                      c->st[0]);
        }
}

/* The host side of the case: inputs per rank, and each rank's partial in the kernel's order. */
typedef struct {
    std::vector<float> h0, slots[AR_MAX_RANKS], part[AR_MAX_RANKS];
    std::vector<uint16_t> delta[AR_MAX_RANKS];
} host_case;

static void make_case(group_ctx *c, host_case *hc, int mode, int site, float scale) {
    const size_t n = (size_t)T_CAP * H;
    hc->h0.resize(n);
    for (auto &v : hc->h0) v = tu_uniform(-4.0f, 4.0f);
    for (int k = 0; k < c->n; k++) {
        hc->slots[k].resize(n * 4);
        hc->delta[k].resize(n);
        hc->part[k].assign(n, 0.0f);
        for (auto &v : hc->slots[k]) v = tu_uniform(-scale, scale);
        tu_fill_bf16(hc->delta[k].data(), NULL, n, -scale, scale);
        for (size_t t = 0; t < (size_t)T_CAP; t++)
            for (int i = 0; i < H; i++) {
                float d = 0.0f;
                if (mode == 0 || mode == 1)
                    for (int s = 0; s < 4; s++) d += hc->slots[k][(t * 4 + s) * H + i];
                if (mode == 0 || mode == 2) d += bf16_to_f32(hc->delta[k][t * H + i]);
                if (mode == 3) d = tu_uniform(-scale, scale);
                hc->part[k][t * H + i] = d;
            }
        on(c, k);
        CUDA_CHECK(cudaMemcpy(c->h[k], hc->h0.data(), n * 4, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(c->slots[k], hc->slots[k].data(), n * 16, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(c->delta[k], hc->delta[k].data(), n * 2, cudaMemcpyHostToDevice));
        if (mode == 3)
            CUDA_CHECK(cudaMemcpy(c->g.rank[k].bufs[site][k], hc->part[k].data(), n * 4,
                                  cudaMemcpyHostToDevice));
        tu_poison(c->y[k], n * 2, 0);
        tu_poison(c->ylo[k], n * 2, 0);
        CUDA_CHECK(cudaDeviceSynchronize());
    }
}

/* h_ref rows [0, T) += part_0 + … + part_{N−1}: in that order, ((h + p_0) + p_1) + … (the one-shot
 * kernel's), or when the call takes NCCL h + (p_0 + p_1 + …) (NCCL's sum, then the norm kernel's
 * add; with one or two ranks NCCL's sum is exactly this one). */
static void cpu_step(const group_ctx *c, const host_case *hc, std::vector<float> &h_ref, int T) {
    const bool nccl = ar_nccl_wanted(c->nccl, T);
    for (size_t i = 0; i < (size_t)T * H; i++) {
        float v = nccl ? 0.0f : h_ref[i];
        for (int k = 0; k < c->n; k++) v += hc->part[k][i];
        h_ref[i] = nccl ? h_ref[i] + v : v;
    }
}

/* Every rank's h equals h_ref exactly (rows [0, T_CAP)); returns the number of ranks that differ. */
static int compare_h(group_ctx *c, const std::vector<float> &h_ref, const char *what) {
    const size_t n = (size_t)T_CAP * H;
    std::vector<float> got(n);
    int bad_ranks = 0;
    for (int k = 0; k < c->n; k++) {
        on(c, k);
        tu_download(got.data(), c->h[k], n);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += memcmp(&got[i], &h_ref[i], 4) != 0;
        CHECK(bad == 0, "%s: rank %d: %zu residual values differ from the CPU's rank-order sum",
              what, k, bad);
        bad_ranks += bad != 0;
    }
    return bad_ranks;
}

static void check_case(group_ctx *c, int T, int mode, int site, const std::vector<uint16_t> &gain,
                       const char *label, bool lockstep = false) {
    host_case hc;
    make_case(c, &hc, mode, site, 2.0f);
    call_all(c, site, mode, T, true, lockstep);
    char what[160];
    snprintf(what, sizeof what, "%s T=%d mode=%d site=%d%s", label, T, mode, site,
             lockstep ? " lockstep" : "");
    wait_all(c, what);
    std::vector<float> h_ref = hc.h0;
    cpu_step(c, &hc, h_ref, T);
    compare_h(c, h_ref, what);

    const size_t n = (size_t)T * H;
    std::vector<float> ref(n);
    dense_ref g = {gain.data(), ST_BF16};
    cpu_rmsnorm(h_ref.data(), g, T, H, EPS, ref.data());
    std::vector<uint16_t> y0(n), y(n), lo(n);
    for (int k = 0; k < c->n; k++) {
        on(c, k);
        tu_download(y.data(), c->y[k], n);
        tu_download(lo.data(), c->ylo[k], n);
        if (k == 0) y0 = y;
        CHECK(tu_count_nonfinite_bf16(y.data(), n) == 0, "%s rank %d: y not fully written", what,
              k);
        CHECK(!memcmp(y.data(), y0.data(), n * 2), "%s: rank %d's y differs from rank 0's", what,
              k);
        std::vector<float> yf(n), sum(n);
        for (size_t i = 0; i < n; i++) {
            yf[i] = bf16_to_f32(y[i]);
            sum[i] = yf[i] + bf16_to_f32(lo[i]);
        }
        const double e1 = tu_rel_err(yf.data(), ref.data(), n),
                     e2 = tu_rel_err(sum.data(), ref.data(), n);
        CHECK(e1 <= 1e-2, "%s rank %d: rmsnorm rel err %.3g", what, k, e1);
        CHECK(e2 <= 3e-5, "%s rank %d: hi + lo rel err %.3g", what, k, e2);
        if (k == 0 && (T == 1 || T == 300))
            fprintf(stderr, "  %s: rel err %.2e, split %.2e\n", what, e1, e2);
    }
    /* Rows past T untouched. */
    if (T < T_CAP) {
        std::vector<float> got((size_t)T_CAP * H);
        on(c, 0);
        tu_download(got.data(), c->h[0], got.size());
        CHECK(!memcmp(got.data() + n, hc.h0.data() + n, (got.size() - n) * 4),
              "%s: rows past T were written", what);
    }
    CUDA_CHECK(cudaSetDevice(c->g.devices[0]));
}

/* DEP's reduce-scatter (ar_reduce_scatter_rmsnorm): T rows of slots on every rank, rank k keeping
 * rows [row0_k, row0_k + n_k) (the T rows split in rank order; with first_empty rank 0 has none),
 * summed into its h's rows 0 .. n_k - 1 exactly in rank order, normed within bf16, and nothing past
 * n_k written. With flags (each rank's whole call on its own stream) or in lockstep. */
static void check_scatter(group_ctx *c, int T, bool first_empty, const std::vector<uint16_t> &gain,
                          const char *label, bool lockstep) {
    host_case hc;
    make_case(c, &hc, 1, 1, 2.0f);
    int row0[AR_MAX_RANKS], nrows[AR_MAX_RANKS];
    for (int k = 0, r = 0; k < c->n; k++) {
        nrows[k] = first_empty && k == 0 ? 0 : k == c->n - 1 ? T - r : T / c->n;
        row0[k] = r, r += nrows[k];
    }
    auto call = [&](int k, int phases, cudaStream_t st) {
        CUDA_CHECK(ar_reduce_scatter_rmsnorm(&c->g.rank[k], phases, 1, c->slots[k], 4, T, row0[k],
                                             nrows[k], c->h[k], c->gain[k], EPS, c->y[k], c->ylo[k],
                                             st));
    };
    if (!lockstep)
        each_rank(c, [&](int k) { call(k, AR_PHASE_ALL, c->st[k]); });
    else
        for (int pass = 0; pass < 2; pass++)
            for (int k = 0; k < c->n; k++)
                on(c, k), call(k, pass ? AR_PHASE_REDUCE : AR_PHASE_PARTIAL, c->st[0]);
    char what[160];
    snprintf(what, sizeof what, "%s reduce-scatter T=%d%s%s", label, T,
             first_empty ? " (rank 0 empty)" : "", lockstep ? " lockstep" : "");
    wait_all(c, what);
    dense_ref g = {gain.data(), ST_BF16};
    for (int k = 0; k < c->n; k++) {
        const size_t n = (size_t)nrows[k] * H, all = (size_t)T_CAP * H;
        std::vector<float> ref = hc.h0, got(all), yref(n > 0 ? n : 1);
        for (size_t i = 0; i < n; i++) {
            float v = hc.h0[i];
            for (int j = 0; j < c->n; j++) v += hc.part[j][(size_t)row0[k] * H + i];
            ref[i] = v;
        }
        on(c, k);
        tu_download(got.data(), c->h[k], all);
        size_t bad = 0;
        for (size_t i = 0; i < all; i++) bad += memcmp(&got[i], &ref[i], 4) != 0;
        CHECK(bad == 0,
              "%s: rank %d: %zu residual values differ (its %d rows from %d, the rest "
              "untouched)",
              what, k, bad, nrows[k], row0[k]);
        if (n == 0) continue;
        cpu_rmsnorm(ref.data(), g, nrows[k], H, EPS, yref.data());
        std::vector<uint16_t> y(n);
        tu_download(y.data(), c->y[k], n);
        std::vector<float> yf(n);
        for (size_t i = 0; i < n; i++) yf[i] = bf16_to_f32(y[i]);
        const double e = tu_rel_err(yf.data(), yref.data(), n);
        CHECK(e <= 1e-2, "%s rank %d: rmsnorm rel err %.3g", what, k, e);
    }
    CUDA_CHECK(cudaSetDevice(c->g.devices[0]));
}

/* Many calls in a row: eager (alternating sites and T), then graphs replayed. */
static void check_stress(group_ctx *c, const char *label) {
    host_case hc;
    make_case(c, &hc, 0, 0, 1e-3f); /* small partials: h stays finite over hundreds of adds */
    std::vector<float> h_ref = hc.h0;
    char what[160];
    auto T_of = [](int i) { return (i % 3 == 2) ? 7 : 1; };
    if (c->nccl) /* each rank's 400 calls from its own thread, as its launch thread would */
        each_rank(c, [&](int k) {
            for (int i = 0; i < 400; i++)
                call_rank(c, k, AR_PHASE_ALL, i & 1, 0, T_of(i), (i % 5) == 0, c->st[k]);
        });
    else
        for (int i = 0; i < 400; i++) call_all(c, i & 1, 0, T_of(i), (i % 5) == 0);
    for (int i = 0; i < 400; i++) cpu_step(c, &hc, h_ref, T_of(i));
    snprintf(what, sizeof what, "%s: 400 eager calls", label);
    wait_all(c, what);
    compare_h(c, h_ref, what);

    /* A graph of 20 calls per rank, captured on its stream, replayed 10 times. */
    cudaGraphExec_t exec[AR_MAX_RANKS];
    /* with NCCL: T = 5 through it, T = 1 through the one-shot kernel */
    each_rank(c, [&](int k) {
        cudaGraph_t graph;
        CUDA_CHECK(cudaStreamBeginCapture(c->st[k], cudaStreamCaptureModeRelaxed));
        for (int i = 0; i < 20; i++)
            call_rank(c, k, AR_PHASE_ALL, i & 1, 0, (i % 4 == 3) ? 5 : 1, true, c->st[k]);
        CUDA_CHECK(cudaStreamEndCapture(c->st[k], &graph));
        CUDA_CHECK(cudaGraphInstantiate(&exec[k], graph, 0));
        CUDA_CHECK(cudaGraphDestroy(graph));
    });
    for (int r = 0; r < 10; r++) {
        for (int k = 0; k < c->n; k++) {
            on(c, k);
            CUDA_CHECK(cudaGraphLaunch(exec[k], c->st[k]));
        }
        for (int i = 0; i < 20; i++) cpu_step(c, &hc, h_ref, (i % 4 == 3) ? 5 : 1);
    }
    snprintf(what, sizeof what, "%s: 10 replays of 20-call graphs", label);
    wait_all(c, what);
    compare_h(c, h_ref, what);
    for (int k = 0; k < c->n; k++) {
        on(c, k);
        CUDA_CHECK(cudaGraphExecDestroy(exec[k]));
    }
    CUDA_CHECK(cudaSetDevice(c->g.devices[0]));
}

/* The all-gather of the lm_head's vocabulary shares (tp_plan's split: the first V % N ranks one
 * column more): every rank ends with every full row. V = 4000 (shares of a multiple of 4: 16-byte
 * copies) and 4001 (odd shares: one float at a time), interleaved with all-reduce calls. */
static void check_gather(group_ctx *c, int R, int V, const char *label, bool lockstep = false) {
    int col0[AR_MAX_RANKS], ncols[AR_MAX_RANKS];
    for (int k = 0, at = 0; k < c->n; k++) {
        ncols[k] = V / c->n + (k < V % c->n ? 1 : 0);
        col0[k] = at;
        at += ncols[k];
    }
    std::vector<float> full((size_t)R * V);
    for (auto &v : full) v = tu_uniform(-10.0f, 10.0f);
    float *out[AR_MAX_RANKS];
    for (int k = 0; k < c->n; k++) {
        on(c, k);
        std::vector<float> piece((size_t)R * ncols[k]);
        for (int r = 0; r < R; r++)
            memcpy(&piece[(size_t)r * ncols[k]], &full[(size_t)r * V + col0[k]],
                   (size_t)ncols[k] * 4);
        CUDA_CHECK(cudaMemcpy(c->g.rank[k].gather[k], piece.data(), piece.size() * 4,
                              cudaMemcpyHostToDevice));
        out[k] = tu_dev_alloc<float>((size_t)R * V);
        tu_poison(out[k], (size_t)R * V * 4, 0);
        CUDA_CHECK(cudaDeviceSynchronize());
    }
    for (int k = 0; k < c->n; k++) { /* an all-reduce first: the two kernels share the counters */
        on(c, k);
        if (lockstep) { /* every piece is in place already: the copies alone, on one stream */
            CUDA_CHECK(ar_gather_copy(&c->g.rank[k], col0, ncols, R, out[k], V, c->st[0]));
            continue;
        }
        CUDA_CHECK(ar_add_rmsnorm(&c->g.rank[k], 0, NULL, 0, c->delta[k], 2, c->h[k], NULL, EPS,
                                  NULL, NULL, c->st[k]));
        CUDA_CHECK(ar_gather_rows(&c->g.rank[k], col0, ncols, R, out[k], V, c->st[k]));
    }
    char what[160];
    snprintf(what, sizeof what, "%s gather R=%d V=%d%s", label, R, V, lockstep ? " lockstep" : "");
    wait_all(c, what);
    std::vector<float> got((size_t)R * V);
    for (int k = 0; k < c->n; k++) {
        on(c, k);
        tu_download(got.data(), out[k], got.size());
        CHECK(!memcmp(got.data(), full.data(), got.size() * 4), "%s: rank %d's rows differ", what,
              k);
        CUDA_CHECK(cudaFree(out[k]));
    }
    /* Too many columns for the buffers: refused. */
    int big[AR_MAX_RANKS];
    for (int k = 0; k < c->n; k++) big[k] = (int)(GATHER_CAP / 2);
    CHECK(ar_gather_rows(&c->g.rank[0], col0, big, 3, c->h[0], (int)(GATHER_CAP * AR_MAX_RANKS),
                         c->st[0]) == cudaErrorInvalidValue,
          "%s: a gather past the buffers accepted", what);
    CUDA_CHECK(cudaSetDevice(c->g.devices[0]));
}

/* µs per call of `calls` calls on every rank: enqueue() puts them on the ranks' streams, which
 * start together (after an event on rank 0's stream); the time is rank 0's, from that event to the
 * last rank's end. The median of 6 trials after a warm-up. */
template <typename F> static double time_ranks(group_ctx *c, int calls, F enqueue) {
    std::vector<double> ts;
    for (int trial = 0; trial < 7; trial++) {
        cudaEvent_t start, stop, ends[AR_MAX_RANKS];
        on(c, 0);
        CUDA_CHECK(cudaEventCreate(&start));
        CUDA_CHECK(cudaEventCreate(&stop));
        CUDA_CHECK(cudaEventRecord(start, c->st[0]));
        for (int k = 1; k < c->n; k++) {
            on(c, k);
            CUDA_CHECK(cudaStreamWaitEvent(c->st[k], start, 0));
        }
        enqueue();
        for (int k = 0; k < c->n; k++) {
            on(c, k);
            CUDA_CHECK(cudaEventCreateWithFlags(&ends[k], cudaEventDisableTiming));
            CUDA_CHECK(cudaEventRecord(ends[k], c->st[k]));
        }
        on(c, 0);
        for (int k = 1; k < c->n; k++) CUDA_CHECK(cudaStreamWaitEvent(c->st[0], ends[k], 0));
        CUDA_CHECK(cudaEventRecord(stop, c->st[0]));
        wait_all(c, "bench");
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        if (trial) ts.push_back(ms * 1000.0 / calls);
        for (int k = 0; k < c->n; k++) {
            on(c, k);
            CUDA_CHECK(cudaEventDestroy(ends[k]));
        }
        on(c, 0);
        CUDA_CHECK(cudaEventDestroy(start));
        CUDA_CHECK(cudaEventDestroy(stop));
    }
    std::sort(ts.begin(), ts.end());
    return ts[ts.size() / 2];
}

/* A graph of `calls` calls per rank, captured on its stream (with NCCL on each rank's thread), the
 * partial already in the site buffers: ours (the one-shot kernel) or NCCL's path (ncclAllReduce,
 * then the add + norm kernel). */
static double time_calls(group_ctx *c, int T, int calls, bool nccl) {
    cudaGraphExec_t exec[AR_MAX_RANKS];
    each_rank(c, [&](int k) {
        cudaGraph_t graph;
        CUDA_CHECK(cudaStreamBeginCapture(c->st[k], cudaStreamCaptureModeRelaxed));
        for (int i = 0; i < calls; i++) {
            if (!nccl) {
                CUDA_CHECK(ar_add_rmsnorm(&c->g.rank[k], i & 1, NULL, 0, NULL, T, c->h[k],
                                          c->gain[k], EPS, c->y[k], c->ylo[k], c->st[k]));
            } else if (ar_nccl_add_rmsnorm(c->nccl, &c->g.rank[k], i & 1, NULL, 0, NULL, T, c->h[k],
                                           c->gain[k], EPS, c->y[k], c->ylo[k], c->st[k])) {
                fprintf(stderr, "FAIL: NCCL bench, rank %d, T=%d: %s\n", k, T, err_msg());
                exit(1);
            }
        }
        CUDA_CHECK(cudaStreamEndCapture(c->st[k], &graph));
        CUDA_CHECK(cudaGraphInstantiate(&exec[k], graph, 0));
        CUDA_CHECK(cudaGraphDestroy(graph));
    });
    const double us = time_ranks(c, calls, [&] {
        for (int k = 0; k < c->n; k++) {
            on(c, k);
            CUDA_CHECK(cudaGraphLaunch(exec[k], c->st[k]));
        }
    });
    for (int k = 0; k < c->n; k++) {
        on(c, k);
        CUDA_CHECK(cudaGraphExecDestroy(exec[k]));
    }
    on(c, 0);
    return us;
}

/* µs per call of ours, and with a communicator (two GPUs) NCCL's path beside it; then the switch
 * point the table suggests: the smallest T from which NCCL's path is faster at every larger size
 * measured (0 when it is not faster even at the largest). The partials are zeros: the time does not
 * depend on the values. */
static void bench(group_ctx *c, const char *label) {
    static const int sizes[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096};
    const int n_sizes = (int)(sizeof sizes / sizeof sizes[0]);
    printf("\n%s (%d ranks): µs per call, graph replay of 50 calls\n\n", label, c->n);
    printf("| tokens | bytes per rank | ours (AR + residual + RMSNorm) | NCCL (AR, then the add + "
           "RMSNorm kernel) |\n");
    printf("| ---: | ---: | ---: | ---: |\n");
    for (int k = 0; k < c->n; k++) {
        on(c, k);
        for (int s = 0; s < AR_SITES; s++)
            CUDA_CHECK(cudaMemset(c->g.rank[k].bufs[s][k], 0, (size_t)T_CAP * H * sizeof(float)));
    }
    on(c, 0);
    double ours[16], theirs[16];
    int measured = 0;
    for (int i = 0; i < n_sizes && sizes[i] <= T_CAP; i++, measured++) {
        const int T = sizes[i];
        ours[i] = time_calls(c, T, 50, false);
        theirs[i] = c->nccl ? time_calls(c, T, 50, true) : 0.0;
        char nccl[32] = "-";
        if (c->nccl) snprintf(nccl, sizeof nccl, "%.1f", theirs[i]);
        printf("| %d | %zu | %.1f | %s |\n", T, (size_t)T * H * 4, ours[i], nccl);
    }
    if (!c->nccl || measured == 0) return;
    int from = measured;
    while (from > 0 && theirs[from - 1] < ours[from - 1]) from--;
    if (from == measured)
        printf("\nsuggested GPTOSS_AR_NCCL_MIN_TOKENS=0: the one-shot kernel is as fast or faster "
               "at every size measured (up to %d tokens)\n",
               sizes[measured - 1]);
    else if (from == 0)
        printf("\nsuggested GPTOSS_AR_NCCL_MIN_TOKENS=1: NCCL's path is faster at every size "
               "measured (1 to %d tokens)\n",
               sizes[measured - 1]);
    else
        printf("\nsuggested GPTOSS_AR_NCCL_MIN_TOKENS=%d: NCCL's path is faster at %d tokens and "
               "every larger size measured (up to %d), the one-shot kernel at %d\n",
               sizes[from], sizes[from], sizes[measured - 1], sizes[from - 1]);
}

/* --timeout-case, run in a child process by main (a trapped kernel leaves the context unusable):
 * two virtual ranks, only rank 0 calls; its barrier must give up after GPTOSS_AR_TIMEOUT_S, the
 * step fail, and the report name the waiter, the peer and the call. Exit 0 when it does. */
static int timeout_case(void) {
    ar_group g;
    const int devs[2] = {0, 0};
    CUDA_CHECK(ar_group_create(&g, 2, devs, 8, H, 0, 0));
    float *h = tu_dev_alloc<float>(8 * H);
    uint16_t *delta = tu_dev_alloc<uint16_t>(8 * H);
    CUDA_CHECK(cudaMemset(delta, 0, 8 * H * 2));
    char why[512] = "";
    CHECK(!ar_group_describe_timeout(&g, why, sizeof why), "a report before any timeout");
    CUDA_CHECK(ar_add_rmsnorm(&g.rank[0], 0, NULL, 0, delta, 3, h, NULL, EPS, NULL, NULL, 0));
    const cudaError_t e = cudaDeviceSynchronize();
    CHECK(e != cudaSuccess, "rank 0 alone: the barrier returned (%s)", cudaGetErrorString(e));
    CHECK(ar_group_describe_timeout(&g, why, sizeof why), "no timeout report after the failure");
    fprintf(stderr, "  report: %s\n", why);
    CHECK(strstr(why, "rank 0, block") && strstr(why, "waited for rank 1") &&
              strstr(why, "at call 1") && strstr(why, "had not reached"),
          "the report lacks the waiter, the peer, the call or the verdict: %s", why);
    return check_report("test_allreduce --timeout-case");
}

int main(int argc, char **argv) {
    /* Virtual ranks on one GPU run side by side on separate streams and wait for each other: their
     * streams must sit on distinct hardware queues (8 by default, taken round robin). */
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    setenv("CUDA_MODULE_LOADING", "EAGER", 1); /* see cuda_backend.c: ranks wait on each other */
    setenv("GPTOSS_AR_TIMEOUT_S", "10", 0);    /* the barrier's report before wait_all's 20 s */
    if (tu_has_flag(argc, argv, "--timeout-case")) {
        tu_init("test_allreduce --timeout-case");
        return timeout_case();
    }
    tu_init("test_allreduce");
    const bool do_bench = tu_has_flag(argc, argv, "--bench");
    if (do_bench) T_CAP = 4096; /* the table's largest message */
    std::vector<uint16_t> gain(H);
    tu_fill_bf16(gain.data(), NULL, H, 0.5f, 1.5f);
    int n_dev = 0;
    CUDA_CHECK(cudaGetDeviceCount(&n_dev));

    /* Argument checks. */
    {
        ar_group g;
        const int devs[2] = {0, 0};
        CHECK(ar_group_create(&g, 0, devs, 8, H, 0, 0) == cudaErrorInvalidValue,
              "0 ranks accepted");
        CHECK(ar_group_create(&g, 2, devs, 8, 100, 0, 0) == cudaErrorInvalidValue,
              "H = 100 (not a multiple of 8) accepted");
        CUDA_CHECK(ar_group_create(&g, 2, devs, 8, H, 0, 0));
        float *h = tu_dev_alloc<float>(16 * H);
        CHECK(ar_add_rmsnorm(&g.rank[0], 2, NULL, 0, NULL, 1, h, NULL, EPS, NULL, NULL, 0) ==
                  cudaErrorInvalidValue,
              "site 2 accepted");
        CHECK(ar_add_rmsnorm(&g.rank[0], 0, NULL, 0, NULL, 9, h, NULL, EPS, NULL, NULL, 0) ==
                  cudaErrorInvalidValue,
              "T above T_cap accepted");
        CHECK(ar_add_rmsnorm(&g.rank[0], 0, NULL, 0, NULL, 1, h, NULL, EPS, (uint16_t *)h, NULL,
                             0) == cudaErrorInvalidValue,
              "y without a gain accepted");
        CUDA_CHECK(cudaFree(h));
        ar_group_free(&g);
    }

    /* nccl: the group's calls of T >= its switch point through NCCL (allreduce_nccl.h); under
     * --bench a real group gets a communicator for the side-by-side column instead. */
    struct {
        int n;
        int devs[AR_MAX_RANKS];
        bool real, nccl;
        const char *label;
    } groups[6];
    int n_groups = 0;
    groups[n_groups++] = {2, {0, 0}, false, false, "virtual 2 ranks on GPU 0"};
    groups[n_groups++] = {4, {0, 0, 0, 0}, false, false, "virtual 4 ranks on GPU 0"};
    if (!ar_nccl_built())
        fprintf(stderr, "  SKIP: every NCCL case (this build has no NCCL)\n");
    else if (!do_bench)
        groups[n_groups++] = {1, {0}, false, true, "NCCL path, 1 rank on GPU 0"};
    if (n_dev >= 2) {
        groups[n_groups++] = {2, {0, 1}, true, false, "GPUs 0 and 1"};
        if (ar_nccl_built() && !do_bench)
            groups[n_groups++] = {2, {0, 1}, true, true, "NCCL path, GPUs 0 and 1"};
    } else {
        fprintf(stderr, "  one GPU: the peer-memory case (two GPUs) is not run\n");
        fprintf(stderr, "  SKIP: %s (two GPUs needed, one here)\n",
                do_bench ? "NCCL's all-reduce beside ours" : "the NCCL path across two GPUs");
    }

    for (int gi = 0; gi < n_groups; gi++) {
        group_ctx c;
        ctx_init(&c, groups[gi].n, groups[gi].devs, gain);
        fprintf(stderr, "%s: grid cap %d blocks\n", groups[gi].label, c.g.rank[0].max_blocks);
        ar_nccl nc;
        memset(&nc, 0, sizeof nc);
        if (groups[gi].nccl || (do_bench && groups[gi].real && ar_nccl_built())) {
            if (ar_nccl_create(&nc, groups[gi].n, groups[gi].devs, 1)) {
                CHECK(false, "%s: %s", groups[gi].label, err_msg());
                ctx_free(&c);
                continue;
            }
            c.nccl = &nc;
        }
        if (do_bench) {
            bench(&c, groups[gi].label);
        } else if (groups[gi].nccl) {
            for (int T : {1, 3, 64, 300}) /* min_tokens 1: every call through NCCL */
                for (int mode = 0; mode < 4; mode++)
                    check_case(&c, T, mode, (T + mode) & 1, gain, groups[gi].label);
            nc.min_tokens = 5; /* T = 7 (and 5 in the graphs) through NCCL, T = 1 the one-shot */
            check_stress(&c, groups[gi].label);
        } else {
            for (int T : {1, 3, 64, 300})
                for (int mode = 0; mode < 4; mode++)
                    check_case(&c, T, mode, (T + mode) & 1, gain, groups[gi].label);
            check_stress(&c, groups[gi].label);
            for (int R : {1, 5, 64})
                for (int V : {4000, 4001}) check_gather(&c, R, V, groups[gi].label);
            for (int T : {1, 7, 300}) /* DEP's reduce-scatter, then the flags still in step */
                for (bool empty : {false, true})
                    check_scatter(&c, T, empty, gain, groups[gi].label, false);
            check_stress(&c, groups[gi].label);
            if (!groups[gi].real) { /* lockstep: the halves in rank order on one stream */
                for (int T : {1, 64, 300})
                    for (int mode = 0; mode < 4; mode++)
                        check_case(&c, T, mode, (T + mode) & 1, gain, groups[gi].label, true);
                for (int V : {4000, 4001}) check_gather(&c, 5, V, groups[gi].label, true);
                for (int T : {1, 300})
                    for (bool empty : {false, true})
                        check_scatter(&c, T, empty, gain, groups[gi].label, true);
                check_stress(&c, groups[gi].label); /* the flags still in step after them */
            }
        }
        if (c.nccl) { /* before the buffers it reduced are freed */
            wait_all(&c, "NCCL teardown");
            ar_nccl_destroy(&nc);
            c.nccl = NULL;
        }
        ctx_free(&c);
    }
    if (!do_bench) { /* the watchdog: a barrier whose peer never comes fails, in a child process */
        char cmd[4200];
        char self[4096];
        const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        CHECK(n > 0, "cannot find this test's binary for the timeout case");
        if (n > 0) {
            self[n] = 0;
            snprintf(cmd, sizeof cmd, "GPTOSS_AR_TIMEOUT_S=0.5 '%s' --timeout-case", self);
            const int rc = system(cmd);
            CHECK(rc == 0, "the watchdog case failed (status %d; its output above)", rc);
        }
    }
    return check_report("test_allreduce");
}
