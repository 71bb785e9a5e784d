/* The whole CUDA forward pass (testing ladder step 3) through the backend interface, against the
 * CPU reference. (The sampling kernels alone: test_sampling.cu.)
 *
 *   (a) a synthetic model with head_dim 64 and 8 query heads per KV head (hidden 128, 16 heads,
 *       2 KV heads, intermediate 128, 8 experts top-4, 4 layers, window 16, vocab 1024), written
 *       with synthetic_write: teacher-forced prompts of several lengths (one token to past the
 *       window) as whole prompts, in chunks, decode-like (one token a step: the decode kernel and
 *       the CUDA graphs) and all together in mixed steps; with graphs on and off. Logits vs
 *       cpu_forward: relative L2 error, max|d|/max|logit| (reported), top-1 agreement on >= 99% of
 *       the positions where the CPU's top-1 margin is > 0.05. Then greedy generation through the
 *       engine (async scheduling, chunked prefill) with the CUDA and the CPU backend: the same
 *       tokens wherever the CPU's margin is clear; and seeded sampling on the GPU path and on the
 *       host path (top-k + penalty) gives the same tokens with async scheduling on and off.
 *   (b) batched vs alone on the GPU: 8 sequences alone (whole prompt) vs inside a batch of 64 with
 *       chunked prefill, staggered arrivals and mixed steps: top-1 >= 99%, logits within bf16
 *       tolerance.
 *   (c) a 2-layer real-width gpt-oss-20b (synthetic_write to /tmp, ~3.3 GB): CUDA vs CPU top-1 on
 *       >= 99% of the checked positions of a 40-token prompt; and `synthetic:20b:layers=2` made on
 *       the GPU gives bit-identical logits to the same checkpoint loaded from disk. --skip-real
 *       skips it.
 *   (d) the transformers fixture tests/fixtures/tiny64 (+ tiny64_reference.safetensors), when
 *       present: logits within tolerance, greedy tokens where the reference margin is > 0.05.
 *   (e) FP8 KV cache (--kv-cache-dtype fp8): (a)'s teacher-forced schedules with the CUDA backend
 *       storing e4m3 K/V against the CPU reference emulating the same rounding (cpu_model.kv_fp8),
 *       at (a)'s bounds; the same sequences fp8 vs bf16 on the GPU (loose: relL2 <= 0.2, top-1 >= 95%
 *       of the clear positions); (a)'s engine comparison with both backends in fp8; and through the
 *       engine on the GPU in fp8: prefix-cache hits and preemption (a pool far too small) give the
 *       greedy tokens of each request alone with the cache off and a large pool, wherever the
 *       alone run's margin is clear (the same rule as (a)'s CUDA-vs-CPU check). (d) runs with fp8
 *       too, against the transformers logits. --skip-fp8 skips (e).
 *   (f) tensor parallelism: synthetic:120b:layers=2 under --tensor-parallel-size 2 and 4 (ranks on
 *       one GPU with GPTOSS_TP_ONE_GPU=1 when there are fewer GPUs) against one rank, the same
 *       teacher-forced prompts whole and one token a step (graphs): relL2 <= 3e-2, top-1 >= 99% of
 *       the clear positions; then a `make-model` 20b x 2 layers checkpoint (synthetic_write to
 *       /tmp, two files): TP2 vs TP1 at the same bounds, TP2 from the checkpoint bit-identical to
 *       TP2 of synthetic:20b:layers=2:seed=0, and TP3 refused naming config.json. Expert
 *       parallelism (--enable-expert-parallel): EP2 and EP4 of synthetic:20b:layers=2:seed=0 (32
 *       experts, 16 or 8 a rank) against its TP1, at the same bounds; EP2 from the checkpoint
 *       against TP1 of the checkpoint, and bit-identical to EP2 of the synthetic model; and EP4
 *       over a small checkpoint of 6 experts refused, naming the flag and config.json. --skip-tp
 *       skips it (and (g)); --tp runs only it.
 *   (g) DEP2 (--data-parallel-size 2 --enable-expert-parallel; ranks in lockstep on one GPU with
 *       GPTOSS_TP_ONE_GPU=1 when there is one): synthetic:20b:layers=2:seed=0, six sequences on
 *       two ranks (k % 2, each rank's own KV pools, steps grouped by rank), three schedules (one
 *       sequence a step, so one rank is empty; all at once, prefill then decode; staggered 7-token
 *       chunks) against one GPU running the same schedules: (f)'s bounds (relL2, top-1 >= 99% of
 *       the clear positions); and --data-parallel-size 2 without --enable-expert-parallel, and 3,
 *       refused naming the flags. --dep runs only it.
 *   (h) the step kernel (step_kernel.h: every layer of a one-token decode step in one launch)
 *       against the layer loop on the same backend model: synthetic:20b:layers=3 (sliding and full
 *       layers, 32 experts) and synthetic:120b:layers=2 (128 experts), two sequences of 40 and 200
 *       tokens one at a time (a 10-token prefill, then one token a step: past the 128-token window),
 *       eager and through the CUDA graphs. The kernel must have run (the backend's count of its
 *       launches), the logits within (f)'s bounds of the loop's (relL2 <= 3e-2, top-1 equal on
 *       >= 99% of the clear positions): the same phases and arithmetic but for the experts' sums,
 *       rounded apart (a tile's chunks summed apart, down unsplit), the kind of change TP makes
 *       (session 29 measured 7.8e-3 at 20b x 3 layers, 1.8e-3 at 120b x 2; bit-identical before
 *       the chunks). --step-kernel runs only it; --step-kernel --bench instead times the
 *       kernel's phases (step_kernel_set_probe) in a decode step of synthetic:120b:layers=12 at a
 *       1k context, one row a phase (the mean over layers 1-11: block 0's clock), then with the
 *       blocks' probe and the wait probe; --step-kernel --waits runs only the wait probe's. With GPTOSS_STEP_KERNEL=1 in the environment
 *       every other check runs on the kernel too (wherever a step is one it takes).
 * --kv-accuracy: instead of the tests, the measurement of issue 15: teacher-forced logits of
 * synthetic:20b:layers=4 (real width) with an fp8 KV cache against bf16, at contexts 2k, 8k and 32k
 * (4 sequences, the last 64 positions of each): relative L2, max|d|/max|logit|, top-1 agreement (all
 * positions and those with a clear bf16 margin), one markdown row per context; and the tiny64 fixture
 * fp8 vs transformers. It fails only on non-finite logits (the 99% target is printed, not asserted).
 * --seed N reproduces a run. */
#include "gpu_check.h"

/* sampling_params.h initialises with {0}, which g++ -Wextra (C++) flags; the headers are C. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
extern "C" {
#include "step/backend.h"
#include "backend/cpu/cpu_model.h"
#include "base/error.h"
#include "base/log.h"
#include "base/timeutil.h"
#include "base/xalloc.h"
#include "engine/engine.h"
#include "step/sampler.h"
#include "model/safetensors.h"
#include "model/synthetic.h"
#include "model/weights.h"
}
#pragma GCC diagnostic pop
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/step_kernel.h"

#include <dirent.h>
#include <float.h>
#include <stdarg.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

static const double MARGIN = 0.05;

/* The KV dtype of the backends the tests make (BACKEND_KV_FP8 in (e)); the CPU reference emulates
 * it. */
static int g_kv_dtype = BACKEND_KV_AUTO;

/* Bounds that an FP8 cache loosens, GPU against the CPU emulating it: the CPU rounds fp32 K and V
 * to e4m3, the GPU its bf16-path K and V, so wherever those differ by bf16 noise near an e4m3
 * rounding midpoint (a few percent of the values) the two store neighbouring codes, 2^-3 apart in
 * relative terms. That is noise of ~1% on K and V, on top of the bf16 path's own: the teacher-forced
 * relative L2 bound goes from 3e-2 to 5e-2, top-1 on clear positions from 99% to 98%, and a greedy
 * divergence counts as clear beyond a margin of 0.5 instead of 0.25. (A real bug — a wrong code,
 * a stale block, a bad scale — breaks every sequence, far beyond these.) */
static double tf_l2_tol(void) {
    return g_kv_dtype == BACKEND_KV_FP8 ? 5e-2 : 3e-2;
}
static double top1_min(void) {
    return g_kv_dtype == BACKEND_KV_FP8 ? 0.98 : 0.99;
}
static double clear_margin(void) {
    return g_kv_dtype == BACKEND_KV_FP8 ? 0.5 : 0.25;
}

/* ------------------------------------------------------------------------------------------------
 */
/* Comparing logits */

typedef struct {
    double max_diff, max_ref, d2, r2;
    long rows, clear, clear_agree, agree;
    long outliers;  /* rows whose max |d| exceeds OUTLIER x their max |logit| */
    long nonfinite; /* rows with a non-finite logit */
} cmp_stats;

static const double OUTLIER = 0.25;

static void top2(const float *x, int V, int *arg, double *margin) {
    int a = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > x[a]) a = i;
    double second = -INFINITY;
    for (int i = 0; i < V; i++)
        if (i != a && x[i] > second) second = x[i];
    *arg = a, *margin = (double)x[a] - second;
}

static void cmp_rows(cmp_stats *s, const float *got, const float *ref, int rows, int V) {
    for (int r = 0; r < rows; r++) {
        const float *g = got + (size_t)r * V, *f = ref + (size_t)r * V;
        double row_d = 0.0, row_ref = 0.0;
        bool finite = true;
        for (int i = 0; i < V; i++) {
            double d = (double)g[i] - f[i];
            if (!isfinite(g[i])) d = INFINITY, finite = false;
            row_d = fmax(row_d, fabs(d));
            row_ref = fmax(row_ref, fabs((double)f[i]));
            s->d2 += d * d, s->r2 += (double)f[i] * f[i];
        }
        s->max_diff = fmax(s->max_diff, row_d);
        s->max_ref = fmax(s->max_ref, row_ref);
        s->outliers += row_d > OUTLIER * row_ref;
        s->nonfinite += !finite;
        int ag, af;
        double mg, mf;
        top2(g, V, &ag, &mg);
        top2(f, V, &af, &mf);
        s->rows++;
        s->agree += ag == af;
        if (mf > MARGIN) s->clear++, s->clear_agree += ag == af;
    }
}

static double rel_l2(const cmp_stats *s) {
    return s->r2 > 0 ? sqrt(s->d2 / s->r2) : sqrt(s->d2);
}

/* The headline numbers, printed last (the device script shows each test's last lines). */
static char g_summary[4][256];
static void summary_add(int line, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void summary_add(int line, const char *fmt, ...) {
    char buf[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    size_t n = strlen(g_summary[line]);
    snprintf(g_summary[line] + n, sizeof g_summary[line] - n, "%s%s", n ? "; " : "", buf);
}

/* Prints and checks: every logit finite, relative L2 <= l2_tol, max|d|/max|logit| <= max_tol, top-1
 * on >= 99% of the clear positions.
 *
 * many_rows: the teacher-forced schedules on the random tiny models. There the CUDA path (bf16
 * activations) and the fp32 CPU disagree on ~0.3 % of clear positions, mostly where a token's 4th and
 * 5th router logits nearly tie and bf16 noise swaps an expert; such a swap can move one row's logits
 * by a large fraction (measured by emulating each rounding point on the CPU, bench/NOTES.md). At ~275
 * positions "top-1 ≥ 99 %" was a 3-flip threshold a fair run crossed by chance, and one swapped row
 * is enough to break a max bound. So these check top-1 once over the union of the schedules (~1,200
 * distinct positions) and, instead of the max, that at most 1 % of rows are outliers (row max |d| >
 * 0.25 x row max |logit|): a real bug — a wrong slot, a stale block — spoils whole chunks of rows. */
static void cmp_report(const char *what, const cmp_stats *s, double l2_tol, double max_tol,
                       bool many_rows = false, bool check_top1 = true) {
    const double l2 = rel_l2(s), mx = s->max_ref > 0 ? s->max_diff / s->max_ref : s->max_diff;
    const double top1 = s->clear ? (double)s->clear_agree / s->clear : 1.0;
    if (strstr(what, "all schedules") || strstr(what, "alone") || strstr(what, "20b") ||
        strstr(what, "tiny64"))
        summary_add(strstr(what, "all schedules") ? 1 : 2, "%s: relL2 %.1e max %.1e top1 %.3f",
                    what, l2, mx, top1);
    fprintf(stderr,
            "  %-44s rows %5ld  relL2 %.2e  max|d|/max|logit| %.2e  top1 %.4f (%ld/%ld clear), all "
            "%.4f, outlier rows %ld\n",
            what, s->rows, l2, mx, top1, s->clear_agree, s->clear,
            s->rows ? (double)s->agree / s->rows : 1.0, s->outliers);
    CHECK(s->rows > 0, "%s: no rows compared", what);
    CHECK(s->nonfinite == 0, "%s: %ld rows with non-finite logits", what, s->nonfinite);
    CHECK(l2 <= l2_tol, "%s: relative L2 error %.3e > %.1e", what, l2, l2_tol);
    if (many_rows)
        CHECK(s->outliers * 100 <= s->rows,
              "%s: %ld of %ld rows off by more than %.2f of their max logit", what, s->outliers,
              s->rows, OUTLIER);
    else
        CHECK(mx <= max_tol, "%s: max|d|/max|logit| %.3e > %.2f", what, mx, max_tol);
    if (check_top1)
        CHECK(top1 >= top1_min(), "%s: top-1 agreement %.4f < %.2f on %ld clear positions", what,
              top1, top1_min(), s->clear);
}

/* ------------------------------------------------------------------------------------------------
 */
/* A hand-driven paged KV: sequences, two block pools, steps built like the engine builds them */

typedef struct {
    std::vector<int32_t> toks;
    int done;
    std::vector<int32_t> full, swa; /* physical blocks; swa[j] holds logical block swa_first + j */
    int swa_first, slot;
    int rank; /* DEP (driver.dp > 1): the rank whose pools hold its blocks */
    std::vector<float>
        logits; /* [len][V], filled as rows come back; [len - logit0][V] with logit0 */
    int logit0; /* > 0: only steps whose last token is at >= logit0 make a logits row (accuracy) */
} tf_seq;

typedef struct {
    const backend_ops *ops;
    backend *be;
    int V, bs, W;
    std::vector<int32_t> free_full, free_swa;
    std::vector<float> dbg;
    int dbg_cap;
    int dp; /* > 1: DEP, one pair of pools per rank (pools_of) and steps grouped by rank */
    std::vector<int32_t> dp_full[2], dp_swa[2];
} driver;

/* The free blocks a sequence draws from: its rank's under DEP. */
static std::vector<int32_t> &full_pool(driver *d, const tf_seq *s) {
    return d->dp > 1 ? d->dp_full[s->rank] : d->free_full;
}
static std::vector<int32_t> &swa_pool(driver *d, const tf_seq *s) {
    return d->dp > 1 ? d->dp_swa[s->rank] : d->free_swa;
}

static void drv_init(driver *d, const backend_ops *ops, backend *be, int max_rows, rng_t *rng) {
    d->ops = ops, d->be = be;
    d->dp = 0;
    const model_config *c = ops->config(be);
    d->V = c->vocab, d->bs = 32, d->W = c->sliding_window;
    int nf = 0, ns = 0, kbs = 0;
    ops->kv_blocks(be, &nf, &ns, &kbs);
    CHECK(kbs == 32, "the backend's KV blocks hold %d tokens, the driver uses 32", kbs);
    d->free_full.clear(), d->free_swa.clear();
    for (int i = 0; i < nf; i++) d->free_full.push_back(i);
    for (int i = 0; i < ns; i++) d->free_swa.push_back(i);
    rng_shuffle(rng, d->free_full.data(), nf); /* blocks all over the pools */
    rng_shuffle(rng, d->free_swa.data(), ns);
    d->dbg_cap = max_rows;
    d->dbg.assign((size_t)max_rows * d->V, NAN);
    if (ops == &cuda_backend_ops) cuda_backend_debug_logits(be, d->dbg.data(), max_rows);
}

static int32_t take(std::vector<int32_t> &pool) {
    if (pool.empty()) {
        fprintf(stderr, "test driver: KV pool exhausted\n");
        exit(1);
    }
    int32_t b = pool.back();
    pool.pop_back();
    return b;
}

static void drv_release(driver *d, tf_seq *s) {
    for (int32_t b : s->full) full_pool(d, s).push_back(b);
    for (int32_t b : s->swa) swa_pool(d, s).push_back(b);
    s->full.clear(), s->swa.clear(), s->swa_first = 0;
}

/* One step: sequence seqs[idx[k]] gets n_new[k] new tokens; every new token's logits come back
 * (prompt logprobs on, prompt_len = the whole sequence). Returns 0, or -1 when the backend failed.
 */
static int drv_step(driver *d, std::vector<tf_seq> &seqs, const std::vector<int> &idx_in,
                    const std::vector<int> &n_new_in) {
    /* DEP: the sequences grouped by rank, in rank order (step/batch.h), the order kept within */
    std::vector<int> idx = idx_in, n_new = n_new_in;
    int dp_seq0[STEP_DP_MAX + 1] = {0};
    if (d->dp > 1) {
        std::vector<int> order(idx.size());
        for (size_t k = 0; k < order.size(); k++) order[k] = (int)k;
        std::stable_sort(order.begin(), order.end(),
                         [&](int a, int b) { return seqs[idx_in[a]].rank < seqs[idx_in[b]].rank; });
        for (size_t k = 0; k < order.size(); k++)
            idx[k] = idx_in[order[k]], n_new[k] = n_new_in[order[k]];
        for (int r = 0; r < d->dp; r++) {
            dp_seq0[r + 1] = dp_seq0[r];
            for (int k : idx) dp_seq0[r + 1] += seqs[k].rank == r;
        }
    }
    const int n = (int)idx.size(), bs = d->bs;
    int T = 0;
    for (int k = 0; k < n; k++) T += n_new[k];
    std::vector<int32_t> token_ids(T), positions(T), slot(n), qs(n + 1), sp(n), sfirst(n),
        out_len(n), hist_len(n), prompt_len(n);
    std::vector<const int32_t *> history(n, nullptr);
    std::vector<sampling_params> params(n);
    bool *sample = (bool *)calloc((size_t)n, sizeof(bool)),
         *reset = (bool *)calloc((size_t)n, sizeof(bool));
    int fstride = 1, sstride = 1;
    qs[0] = 0;
    for (int k = 0; k < n; k++) {
        tf_seq *s = &seqs[idx[k]];
        const int p0 = s->done, nn = n_new[k], last = p0 + nn - 1;
        while ((int)s->full.size() <= last / bs) s->full.push_back(take(full_pool(d, s)));
        /* Sliding: give back the blocks before the first new token's window, then grow. */
        const int lo = (p0 - d->W + 1 > 0 ? p0 - d->W + 1 : 0) / bs;
        while (s->swa_first < lo && !s->swa.empty()) {
            swa_pool(d, s).push_back(s->swa.front());
            s->swa.erase(s->swa.begin());
            s->swa_first++;
        }
        if (s->swa.empty()) s->swa_first = lo;
        while (s->swa_first + (int)s->swa.size() <= last / bs)
            s->swa.push_back(take(swa_pool(d, s)));
        for (int j = 0; j < nn; j++)
            token_ids[qs[k] + j] = s->toks[p0 + j], positions[qs[k] + j] = p0 + j;
        qs[k + 1] = qs[k] + nn;
        slot[k] = s->slot, sp[k] = p0, sfirst[k] = s->swa_first;
        sample[k] = s->logit0 > 0 ? p0 + nn - 1 >= s->logit0 : p0 + nn == (int)s->toks.size();
        reset[k] = p0 == 0;
        params[k] = sampling_params_default();
        params[k].temperature = 0;
        params[k].prompt_logprobs = s->logit0 > 0 ? 0 : 1;
        out_len[k] = 0, hist_len[k] = 0, prompt_len[k] = (int)s->toks.size();
        fstride = std::max(fstride, (int)s->full.size());
        sstride = std::max(sstride, (int)s->swa.size());
    }
    std::vector<int32_t> ft((size_t)n * fstride, -1), stb((size_t)n * sstride, -1);
    for (int k = 0; k < n; k++) {
        tf_seq *s = &seqs[idx[k]];
        std::copy(s->full.begin(), s->full.end(), ft.begin() + (size_t)k * fstride);
        std::copy(s->swa.begin(), s->swa.end(), stb.begin() + (size_t)k * sstride);
    }
    step_batch sb;
    memset(&sb, 0, sizeof sb);
    sb.n_seqs = n, sb.n_tokens = T, sb.block_size = bs;
    sb.token_ids = token_ids.data(), sb.positions = positions.data(), sb.slot = slot.data();
    sb.query_start = qs.data(), sb.start_pos = sp.data(), sb.swa_first = sfirst.data();
    sb.sample = sample, sb.reset_slot = reset, sb.params = params.data(),
    sb.output_len = out_len.data();
    sb.history = history.data(), sb.history_len = hist_len.data(),
    sb.prompt_len = prompt_len.data();
    sb.full_tables = ft.data(), sb.full_stride = fstride, sb.swa_tables = stb.data(),
    sb.swa_stride = sstride;
    if (d->dp > 1) sb.dp_size = d->dp, memcpy(sb.dp_seq0, dp_seq0, sizeof sb.dp_seq0);
    step_result res;
    memset(&res, 0, sizeof res);
    int rc = d->ops->launch(d->be, &sb);
    if (rc == 0) rc = d->ops->wait(d->be, &res);
    if (rc != 0) fprintf(stderr, "step failed: %s\n", err_msg());
    if (rc == 0 && d->ops == &cuda_backend_ops && seqs[idx[0]].logit0 > 0) {
        /* accuracy mode: one row per sampling sequence, the logits after its last new token */
        const int rows = cuda_backend_debug_rows(d->be);
        for (int k = 0, r = 0; k < n; k++) {
            if (!sample[k]) continue;
            tf_seq *s = &seqs[idx[k]];
            const int p = s->done + n_new[k] - 1;
            CHECK(r < rows, "accuracy step: %d rows, wanted more", rows);
            if (r < rows)
                memcpy(s->logits.data() + (size_t)(p - s->logit0) * d->V,
                       d->dbg.data() + (size_t)r * d->V, (size_t)d->V * sizeof(float));
            r++;
        }
    } else if (rc == 0 && d->ops == &cuda_backend_ops) {
        const int rows = cuda_backend_debug_rows(d->be);
        CHECK(rows == T, "debug rows %d != step tokens %d", rows, T);
        for (int k = 0, r = 0; k < n && rows == T; k++) {
            tf_seq *s = &seqs[idx[k]];
            for (int j = 0; j < n_new[k]; j++, r++)
                memcpy(s->logits.data() + (size_t)(s->done + j) * d->V,
                       d->dbg.data() + (size_t)r * d->V, (size_t)d->V * sizeof(float));
        }
        /* The prompt logprobs must be the softmax of those rows: check the first sequence's first
         * row. */
        if (rows == T && res.seqs && res.seqs[0].n_prompt_rows == n_new[0]) {
            const float *row = d->dbg.data();
            int32_t id;
            float lp;
            sampler_top_logprobs(row, d->V, 0, 1, &id, &lp);
            CHECK(res.seqs[0].prompt_top_ids[0] == id &&
                      fabsf(res.seqs[0].prompt_top_logprobs[0] - lp) < 1e-4f,
                  "prompt logprob %d %.6f vs %d %.6f", res.seqs[0].prompt_top_ids[0],
                  res.seqs[0].prompt_top_logprobs[0], id, lp);
        }
    }
    for (int k = 0; k < n; k++) seqs[idx[k]].done += n_new[k];
    step_result_free(&res, n);
    free(sample), free(reset);
    return rc;
}

/* Chunk policies: how many tokens sequence k takes at its step-th step (0 = sits the step out). */
enum { POL_WHOLE, POL_CHUNK7, POL_DECODE, POL_RANDOM };

static int policy_chunk(int pol, int step, int remaining, rng_t *rng) {
    int c;
    switch (pol) {
    case POL_WHOLE:
        c = remaining;
        break;
    case POL_CHUNK7:
        c = 7;
        break;
    case POL_DECODE:
        c = step == 0 ? 10 : 1;
        break; /* a 10-token prefill, then decode steps */
    default:
        c = 1 + rng_below(rng, 24);
        break;
    }
    return c < remaining ? c : remaining;
}

/* Runs every sequence to its end. batched: all active sequences in each step (sequence k joins at
 * step k / stagger); else one sequence at a time. */
static int run_schedule(driver *d, std::vector<tf_seq> &seqs, int pol, bool batched, int stagger,
                        rng_t *rng) {
    const int n = (int)seqs.size();
    for (auto &s : seqs) s.done = 0, s.logits.assign(s.toks.size() * (size_t)d->V, NAN);
    if (!batched) {
        for (int k = 0; k < n; k++)
            for (int step = 0; seqs[k].done < (int)seqs[k].toks.size(); step++) {
                std::vector<int> idx{k},
                    nn{policy_chunk(pol, step, (int)seqs[k].toks.size() - seqs[k].done, rng)};
                if (drv_step(d, seqs, idx, nn)) return -1;
            }
    } else {
        std::vector<int> steps(n, 0);
        for (int step = 0;; step++) {
            std::vector<int> idx, nn;
            for (int k = 0; k < n; k++) {
                const int rem = (int)seqs[k].toks.size() - seqs[k].done;
                if (rem <= 0 || (stagger > 0 && step < k / stagger)) continue;
                idx.push_back(k), nn.push_back(policy_chunk(pol, steps[k]++, rem, rng));
            }
            if (idx.empty()) break;
            if (drv_step(d, seqs, idx, nn)) return -1;
        }
    }
    for (auto &s : seqs) drv_release(d, &s);
    return 0;
}

static std::vector<tf_seq> make_seqs(const std::vector<int> &lens, int V, rng_t *rng, int slot0) {
    std::vector<tf_seq> seqs(lens.size());
    for (size_t k = 0; k < lens.size(); k++) {
        seqs[k].toks.resize(lens[k]);
        for (auto &t : seqs[k].toks) t = rng_below(rng, V);
        seqs[k].done = 0, seqs[k].swa_first = 0, seqs[k].slot = slot0 + (int)k;
        seqs[k].logit0 = 0, seqs[k].rank = 0;
    }
    return seqs;
}

/* The CPU reference logits of every position of every sequence. */
static std::vector<std::vector<float>> cpu_reference(const model_weights *w,
                                                     const std::vector<tf_seq> &seqs) {
    cpu_model m;
    cpu_model_init(&m, w);
    m.kv_fp8 = g_kv_dtype == BACKEND_KV_FP8; /* the e4m3 rounding of the GPU's cache */
    std::vector<std::vector<float>> out(seqs.size());
    for (size_t k = 0; k < seqs.size(); k++) {
        cpu_kv_cache kv;
        cpu_kv_init(&kv, &w->cfg);
        out[k].assign(seqs[k].toks.size() * (size_t)w->cfg.vocab, 0.0f);
        int rc = cpu_forward(&m, &kv, seqs[k].toks.data(), (int)seqs[k].toks.size(), CPU_LOGITS_ALL,
                             out[k].data());
        CHECK(rc == 0, "cpu forward: %s", err_msg());
        cpu_kv_free(&kv);
    }
    return out;
}

static backend *make_cuda(const char *model, int max_slots, int graphs, int blocks,
                          int max_model_len = 2048, int tp = 1, bool ep = false, int dp = 0) {
    backend_options bo;
    memset(&bo, 0, sizeof bo);
    bo.model = model, bo.block_size = 32, bo.num_full_blocks = blocks, bo.num_swa_blocks = blocks;
    bo.max_slots = max_slots, bo.max_model_len = max_model_len,
    bo.max_cudagraph_capture_size = graphs;
    bo.tensor_parallel_size = tp;
    bo.enable_expert_parallel = ep;
    bo.data_parallel_size = dp;
    bo.kv_dtype = g_kv_dtype;
    backend *b = NULL;
    if (cuda_backend_ops.create(&bo, &b) != 0) {
        fprintf(stderr, "cuda backend (%s): %s\n", model, err_msg());
        return NULL;
    }
    return b;
}

/* ------------------------------------------------------------------------------------------------
 */
/* (a) and (b): the small model */

static void small_config(model_config *c) {
    config_preset_tiny(
        c); /* 20b's RoPE/YaRN, norms, SwiGLU, 8 experts top-4, 4 layers, window 16 */
    c->hidden = 128, c->n_heads = 16, c->n_kv_heads = 2, c->head_dim = 64, c->intermediate = 128;
    c->vocab = 1024;
}

static void teacher_forced(const char *dir, const model_weights *w, rng_t *rng) {
    const int V = w->cfg.vocab;
    const std::vector<int> lens{1, 2, 5, 15, 16, 17, 33, 40, 64, 100, 129, 200, 256, 300};
    for (int graphs = 0; graphs < 2; graphs++) {
        backend *be = make_cuda(dir, 16, graphs ? 0 : -1, 2048);
        CHECK(be != NULL, "cuda backend on %s", dir);
        if (!be) return;
        fprintf(stderr, "(a) teacher-forced logits vs the CPU, CUDA graphs %s\n",
                graphs ? "on" : "off");
        driver d;
        drv_init(&d, &cuda_backend_ops, be, 2048, rng);
        std::vector<tf_seq> seqs = make_seqs(lens, V, rng, 0);
        std::vector<std::vector<float>> ref = cpu_reference(w, seqs);
        const char *names[] = {"whole prompts", "chunks of 7", "10-token prefill + decode",
                               "all together, random chunks"};
        cmp_stats all;
        memset(&all, 0, sizeof all);
        for (int pol = 0; pol < 4; pol++) {
            const bool batched = pol == 3;
            CHECK(run_schedule(&d, seqs, batched ? POL_RANDOM : pol, batched, 0, rng) == 0,
                  "schedule %s", names[pol]);
            cmp_stats s;
            memset(&s, 0, sizeof s);
            for (size_t k = 0; k < seqs.size(); k++)
                cmp_rows(&s, seqs[k].logits.data(), ref[k].data(), (int)seqs[k].toks.size(), V);
            cmp_report(names[pol], &s, tf_l2_tol(), 0.25, true, false);
            all.max_diff = fmax(all.max_diff, s.max_diff),
            all.max_ref = fmax(all.max_ref, s.max_ref);
            all.d2 += s.d2, all.r2 += s.r2, all.rows += s.rows, all.clear += s.clear;
            all.clear_agree += s.clear_agree, all.agree += s.agree;
            all.outliers += s.outliers, all.nonfinite += s.nonfinite;
        }
        cmp_report(g_kv_dtype == BACKEND_KV_FP8 ? "all schedules (fp8 KV)" : "all schedules", &all,
                   tf_l2_tol(), 0.25, true, true);
        cuda_backend_stats st;
        cuda_backend_get_stats(be, &st);
        fprintf(stderr, "  graphs: %ld captured, %ld replays, %ld eager decode steps\n",
                st.graph_captures, st.graph_replays, st.eager_decode_steps);
        if (graphs)
            summary_add(3, "graphs: %ld captured, %ld replays", st.graph_captures,
                        st.graph_replays);
        if (graphs)
            CHECK(st.graph_replays > 0 && st.graph_captures > 0,
                  "decode steps never replayed a graph");
        cuda_backend_ops.destroy(be);
    }
}

static void batched_vs_alone(const char *dir, rng_t *rng) {
    fprintf(stderr, "(b) batched (64, chunked prefill) vs alone, on the GPU\n");
    backend *be = make_cuda(dir, 128, 0, 4096);
    CHECK(be != NULL, "cuda backend");
    if (!be) return;
    const int V = cuda_backend_ops.config(be)->vocab;
    driver d;
    drv_init(&d, &cuda_backend_ops, be, 4096, rng);
    std::vector<int> lens(64);
    for (auto &l : lens) l = 24 + rng_below(rng, 73);
    std::vector<tf_seq> batch = make_seqs(lens, V, rng, 0);
    CHECK(run_schedule(&d, batch, POL_RANDOM, true, 8, rng) == 0, "batched run");
    std::vector<tf_seq> alone(8);
    for (int k = 0; k < 8; k++) alone[k] = batch[k * 8 + 3], alone[k].slot = 64 + k;
    CHECK(run_schedule(&d, alone, POL_WHOLE, false, 0, rng) == 0, "alone runs");
    cmp_stats s;
    memset(&s, 0, sizeof s);
    for (int k = 0; k < 8; k++)
        cmp_rows(&s, batch[k * 8 + 3].logits.data(), alone[k].logits.data(),
                 (int)alone[k].toks.size(), V);
    cmp_report("batch of 64 vs alone", &s, 1.5e-2, 0.25);
    /* Each clear position that disagrees, with its margins and its row's error: an expert swap at
     * a router near-tie moves a whole row (relL2 ~0.1, session 36's seed 5015698386277711680 had
     * one such flip), a bug would spoil many. */
    for (int k = 0; k < 8; k++)
        for (size_t t = 0; t < alone[k].toks.size(); t++) {
            const float *g = batch[k * 8 + 3].logits.data() + t * V,
                        *f = alone[k].logits.data() + t * V;
            int ag, af;
            double mg, mf;
            top2(g, V, &ag, &mg);
            top2(f, V, &af, &mf);
            if (mf <= MARGIN || ag == af) continue;
            cmp_stats one;
            memset(&one, 0, sizeof one);
            cmp_rows(&one, g, f, 1, V);
            fprintf(stderr,
                    "  batch of 64 vs alone: sequence %d position %zu: top-1 %d (margin %.3e) vs "
                    "alone %d (margin %.3e), the row's relL2 %.2e\n",
                    k * 8 + 3, t, ag, mg, af, mf, rel_l2(&one));
        }
    /* GPU against GPU, the same weights and bf16 arithmetic on other paths (the batch takes the
     * large MoE path and other attention splits): their logits differ by ~1e-3 relative, so every
     * clear position (top-2 margin > MARGIN) must agree, and only near-ties may flip. Over the
     * ~400 positions, 7 of 10 runs on the H200 flipped none, two flipped 1 and seed
     * 2649030588438148102 flipped 4 (of its 24 near-ties, relL2 1.5e-3): "every position ≥ 0.99"
     * was a 3-flip threshold that noise crossed. Hence all clear positions, and 98 % of all. */
    const double all = s.rows ? (double)s.agree / s.rows : 0;
    CHECK(s.clear_agree == s.clear, "batch of 64 vs alone: %ld of %ld clear positions disagree",
          s.clear - s.clear_agree, s.clear);
    CHECK(all >= 0.98, "top-1 agreement over every position %.4f < 0.98", all);
    cuda_backend_ops.destroy(be);
}

/* ---- through the engine ---- */

typedef struct {
    std::vector<int32_t> toks;
    std::vector<float> lp0, lp1, lp;
    bool done;
} eng_out;

static void on_out(const engine_output *o, void *user) {
    eng_out *e = (eng_out *)user;
    for (int i = 0; i < o->n_tokens; i++) {
        e->toks.push_back(o->tokens[i]);
        e->lp.push_back(o->logprobs[i]);
        if (o->top_k >= 2) {
            e->lp0.push_back(o->top_logprobs[(size_t)i * o->top_k]);
            e->lp1.push_back(o->top_logprobs[(size_t)i * o->top_k + 1]);
        }
    }
    if (o->finished) e->done = true;
}

static engine_metrics g_last_metrics; /* of the last run_engine */

/* Engine knobs of run_engine beyond the defaults: the KV pools' blocks, prefix caching, and steps
 * that let later requests in after earlier ones have run (arrival, in engine steps, per request). */
typedef struct {
    int blocks;
    bool prefix;
    int stagger; /* request k is submitted after k * stagger steps (0: all at once) */
} eng_knobs;

static std::vector<eng_out> run_engine(const backend_ops *ops, const char *model,
                                       const std::vector<std::vector<int32_t>> &prompts,
                                       const sampling_params &params, int max_tokens, bool async,
                                       eng_knobs kn = {512, true, 0}) {
    std::vector<eng_out> outs(prompts.size());
    backend_options bo;
    memset(&bo, 0, sizeof bo);
    bo.model = model, bo.block_size = 32, bo.num_full_blocks = kn.blocks,
    bo.num_swa_blocks = kn.blocks;
    bo.max_slots = 8, bo.max_model_len = 512;
    bo.kv_dtype = g_kv_dtype;
    backend *b = NULL;
    if (ops->create(&bo, &b) != 0) {
        CHECK(false, "%s backend: %s", ops->name, err_msg());
        return outs;
    }
    engine_options eo;
    engine_options_default(&eo);
    eo.max_num_seqs = 8, eo.max_num_batched_tokens = 48, eo.max_model_len = 512,
    eo.async_scheduling = async;
    eo.enable_prefix_caching = kn.prefix;
    engine *e = NULL;
    if (engine_create(&eo, ops, b, &e) != 0) {
        CHECK(false, "engine: %s", err_msg());
        return outs;
    }
    size_t next = 0;
    for (int step = 0;; step++) {
        for (; next < prompts.size() && (int)next * kn.stagger <= step; next++) {
            engine_request r;
            memset(&r, 0, sizeof r);
            r.id = next, r.prompt = prompts[next].data(), r.n_prompt = (int)prompts[next].size();
            r.params = params, r.max_tokens = max_tokens, r.ignore_eos = true, r.n = 1;
            r.on_output = on_out, r.user = &outs[next];
            CHECK(engine_submit(e, &r) == 0, "submit: %s", err_msg());
        }
        const int rc = engine_step(e);
        CHECK(rc >= 0, "%s engine step failed", ops->name);
        if (rc < 0 || (rc == 0 && next == prompts.size())) break;
    }
    engine_get_metrics(e, &g_last_metrics);
    engine_destroy(e);
    for (auto &o : outs)
        CHECK(o.done && (int)o.toks.size() == max_tokens, "request unfinished (%zu tokens)",
              o.toks.size());
    return outs;
}

/* The GPU's own greedy token after `toks` by the hand driver: the first n_prompt tokens in one
 * prefill step, the rest one decode step each (as the engine ran them), alone. *margin: its top-1
 * minus top-2 logit. -1 when the backend cannot be made. */
static int gpu_teacher_forced_token(const char *dir, const std::vector<int32_t> &toks, int n_prompt,
                                    double *margin) {
    backend *be = make_cuda(dir, 4, -1, 256);
    CHECK(be != NULL, "cuda backend on %s", dir);
    if (!be) return -1;
    rng_t local; /* the driver shuffles its blocks; the caller's stream stays as it was */
    rng_seed(&local, 7);
    driver d;
    drv_init(&d, &cuda_backend_ops, be, 512, &local);
    std::vector<tf_seq> seqs = make_seqs({(int)toks.size()}, d.V, &local, 0);
    seqs[0].toks = toks;
    seqs[0].logits.assign(toks.size() * (size_t)d.V, NAN);
    const std::vector<int> idx{0};
    int rc = drv_step(&d, seqs, idx, std::vector<int>{n_prompt});
    while (rc == 0 && seqs[0].done < (int)toks.size()) rc = drv_step(&d, seqs, idx, {1});
    CHECK(rc == 0, "teacher-forced replay of a diverged request");
    int arg = -1;
    if (rc == 0) top2(seqs[0].logits.data() + (toks.size() - 1) * (size_t)d.V, d.V, &arg, margin);
    drv_release(&d, &seqs[0]);
    cuda_backend_ops.destroy(be);
    return arg;
}

static void engine_checks(const char *dir, rng_t *rng) {
    fprintf(stderr, "(a) generation through the engine: CUDA vs CPU\n");
    std::vector<std::vector<int32_t>> prompts;
    const int plens[] = {3, 20, 33, 70};
    for (int L : plens) {
        std::vector<int32_t> p(L);
        for (auto &t : p) t = rng_below(rng, 1024);
        prompts.push_back(p);
    }
    sampling_params g = sampling_params_default();
    g.temperature = 0, g.logprobs = 2;
    std::vector<eng_out> cpu = run_engine(&cpu_backend_ops, dir, prompts, g, 24, true);
    std::vector<eng_out> gpu = run_engine(&cuda_backend_ops, dir, prompts, g, 24, true);
    /* A request may diverge at a clear margin once: one near-tied router logit that bf16 rounding
     * tips the other way swaps an expert and can move a row's logits by a large fraction (the
     * teacher-forced checks above allow such outlier rows). Seed 16950537826046204227 does that at
     * token 21 of request 3 (CPU margin 0.444), with the MoE kernels of 43ba997 and of add467e
     * alike (their outputs are bit-identical); seed 8805477850756882405 at token 2 of request 1
     * (margin 1.589), with every default-off path of 00fa5a9 on and off alike. An engine bug
     * (positions, KV blocks, token feedback) breaks every request, from its first tokens, and the
     * engine's token then differs from what the GPU's own forward pass gives for the same tokens.
     * So at most one request may diverge at a clear margin: after 8 equal tokens, or earlier when
     * the GPU's forward pass over the CPU's tokens, driven by hand, gives the engine's token too
     * (the divergence is the forward pass's numerics, which the teacher-forced checks bound). */
    int compared = 0, bad = 0, diverged = 0, late_clear = 0;
    for (size_t k = 0; k < prompts.size(); k++) {
        for (size_t i = 0; i < cpu[k].toks.size() && i < gpu[k].toks.size(); i++) {
            const double margin =
                i < cpu[k].lp1.size() ? (double)cpu[k].lp0[i] - cpu[k].lp1[i] : 1.0;
            if (cpu[k].toks[i] != gpu[k].toks[i]) {
                fprintf(
                    stderr,
                    "  request %zu token %zu: CPU %d, CUDA %d (CPU margin %.3f): stop comparing\n",
                    k, i, cpu[k].toks[i], gpu[k].toks[i], margin);
                if (margin > clear_margin()) {
                    bool explained = i >= 8;
                    if (!explained) {
                        std::vector<int32_t> seq = prompts[k];
                        seq.insert(seq.end(), cpu[k].toks.begin(), cpu[k].toks.begin() + i);
                        double gm = 0;
                        const int tf =
                            gpu_teacher_forced_token(dir, seq, (int)prompts[k].size(), &gm);
                        explained = tf == gpu[k].toks[i];
                        fprintf(stderr,
                                "    the GPU's forward pass over the CPU's tokens gives %d (margin "
                                "%.3f): %s\n",
                                tf, gm,
                                explained ? "the forward pass's numerics"
                                          : "NOT the engine's token");
                    }
                    if (explained && late_clear == 0)
                        late_clear++;
                    else
                        bad++;
                }
                diverged++;
                break;
            }
            compared++;
        }
    }
    fprintf(stderr,
            "  greedy: %d tokens equal, %d requests diverged (%d at a clear margin, %d of them "
            "allowed: late or the forward pass's, the only one)\n",
            compared, diverged, bad + late_clear, late_clear);
    summary_add(0, "engine greedy: %d equal, %d diverged, %d at a clear margin (%d allowed)",
                compared, diverged, bad + late_clear, late_clear);
    CHECK(bad == 0,
          "%d greedy tokens differ where the CPU's margin is > %.2f (beyond one late or "
          "forward-pass divergence)",
          bad, clear_margin());
    CHECK(compared >= 12, "only %d greedy tokens agreed before divergence", compared);

    /* Seeded sampling, GPU path (temperature) and host path (top-k + presence penalty): async
     * scheduling on and off must give the same tokens (one request: the same steps either way). */
    sampling_params t = sampling_params_default();
    t.temperature = 0.8f, t.seed = 1234, t.has_seed = true, t.logprobs = 3;
    sampling_params h = t;
    h.top_k = 40, h.presence_penalty = 0.5f, h.seed = 77;
    const sampling_params *ps[2] = {&t, &h};
    const char *pn[2] = {"temperature (GPU)", "top-k + penalty (host)"};
    for (int v = 0; v < 2; v++) {
        std::vector<std::vector<int32_t>> one{prompts[1]};
        std::vector<eng_out> a = run_engine(&cuda_backend_ops, dir, one, *ps[v], 20, true);
        std::vector<eng_out> s = run_engine(&cuda_backend_ops, dir, one, *ps[v], 20, false);
        CHECK(a[0].toks == s[0].toks, "%s: async and sync scheduling give different tokens", pn[v]);
        bool lp_same = a[0].lp.size() == s[0].lp.size();
        for (size_t i = 0; lp_same && i < a[0].lp.size(); i++) lp_same = a[0].lp[i] == s[0].lp[i];
        CHECK(lp_same, "%s: logprobs differ between async and sync", pn[v]);
        fprintf(stderr, "  %s: %zu tokens, async == sync: %s\n", pn[v], a[0].toks.size(),
                a[0].toks == s[0].toks ? "yes" : "NO");
    }
}

/* ------------------------------------------------------------------------------------------------
 */
/* (e) FP8 KV cache */

/* Greedy tokens of `got` against `ref` (each request's own run): equal until the first difference,
 * and a difference only where ref's margin (top-1 minus top-2 logprob) is <= clear_margin(), or late (>= 8
 * equal tokens) in at most one request; as engine_checks. Returns the number of equal tokens. */
static int compare_greedy(const char *what, const std::vector<eng_out> &ref,
                          const std::vector<eng_out> &got) {
    int compared = 0, bad = 0, late = 0, diverged = 0;
    for (size_t k = 0; k < ref.size() && k < got.size(); k++)
        for (size_t i = 0; i < ref[k].toks.size() && i < got[k].toks.size(); i++) {
            if (ref[k].toks[i] == got[k].toks[i]) {
                compared++;
                continue;
            }
            const double margin = i < ref[k].lp1.size() ? (double)ref[k].lp0[i] - ref[k].lp1[i] : 1;
            if (margin > clear_margin()) {
                if (i >= 8 && late == 0)
                    late++;
                else
                    bad++;
            }
            diverged++;
            fprintf(stderr, "  %s: request %zu token %zu: %d vs %d (margin %.3f)\n", what, k, i,
                    ref[k].toks[i], got[k].toks[i], margin);
            break;
        }
    fprintf(stderr, "  %s: %d tokens equal, %d requests diverged (%d at a clear margin, %d late)\n",
            what, compared, diverged, bad + late, late);
    CHECK(bad == 0, "%s: %d requests differ where the margin is clear", what, bad);
    return compared;
}

static void fp8_checks(const char *dir, const model_weights *w, rng_t *rng) {
    fprintf(stderr, "(e) FP8 KV cache\n");
    g_kv_dtype = BACKEND_KV_FP8;
    /* 1. (a)'s schedules against the CPU emulating the e4m3 rounding. */
    teacher_forced(dir, w, rng);

    /* 2. fp8 vs bf16 on the GPU, the same prompts whole: loose. */
    const int V = w->cfg.vocab;
    const std::vector<int> lens{5, 17, 64, 129, 300};
    std::vector<tf_seq> seqs = make_seqs(lens, V, rng, 0);
    std::vector<std::vector<float>> got[2];
    for (int f8 = 0; f8 < 2; f8++) {
        g_kv_dtype = f8 ? BACKEND_KV_FP8 : BACKEND_KV_AUTO;
        backend *be = make_cuda(dir, 16, -1, 2048);
        CHECK(be != NULL, "cuda backend");
        if (!be) continue;
        driver d;
        drv_init(&d, &cuda_backend_ops, be, 2048, rng);
        CHECK(run_schedule(&d, seqs, POL_WHOLE, true, 0, rng) == 0, "fp8 vs bf16 run");
        for (auto &s : seqs) got[f8].push_back(s.logits);
        cuda_backend_ops.destroy(be);
    }
    if (got[0].size() == seqs.size() && got[1].size() == seqs.size()) {
        cmp_stats s;
        memset(&s, 0, sizeof s);
        for (size_t k = 0; k < seqs.size(); k++)
            cmp_rows(&s, got[1][k].data(), got[0][k].data(), (int)seqs[k].toks.size(), V);
        const double top1 = s.clear ? (double)s.clear_agree / s.clear : 1.0;
        fprintf(stderr, "  fp8 vs bf16 KV on the GPU: rows %ld relL2 %.2e top1 %.4f (clear)\n",
                s.rows, rel_l2(&s), top1);
        summary_add(3, "fp8 vs bf16 KV: relL2 %.1e top1 %.3f", rel_l2(&s), top1);
        CHECK(s.nonfinite == 0, "fp8 vs bf16: non-finite logits");
        CHECK(rel_l2(&s) <= 0.2, "fp8 vs bf16 KV: relative L2 %.3e > 0.2", rel_l2(&s));
        /* What e4m3 with the fixed scale 1.0 costs on these random models, measured on the H200:
         * top-1 0.941–0.957 over four runs (and 84 % at 8k on 20b real width: issue 15's 99 % is
         * not met, bench/NOTES.md). This bound catches a broken cache (a wrong dequantisation
         * agrees on almost nothing), not the accuracy target. */
        CHECK(top1 >= 0.90, "fp8 vs bf16 KV: top-1 %.4f < 0.90 on clear positions", top1);
    }

    /* 3. (a)'s engine comparison, both backends in fp8. */
    g_kv_dtype = BACKEND_KV_FP8;
    engine_checks(dir, rng);

    /* 4. Prefix caching and preemption in fp8 on the GPU: 6 requests sharing a 100-token prefix
     * (later ones hit the cache; blocks written by one request are read by another), then the same
     * with a pool of 24 blocks (preemption, recomputation into fresh fp8 blocks). Reference: each
     * request alone, prefix caching off, a large pool. */
    std::vector<int32_t> shared(100);
    for (auto &t : shared) t = rng_below(rng, V);
    std::vector<std::vector<int32_t>> prompts;
    for (int k = 0; k < 6; k++) {
        std::vector<int32_t> p = shared;
        const int extra = 5 + 9 * k;
        for (int i = 0; i < extra; i++) p.push_back(rng_below(rng, V));
        prompts.push_back(p);
    }
    sampling_params g = sampling_params_default();
    g.temperature = 0, g.logprobs = 2;
    std::vector<eng_out> alone;
    for (auto &p : prompts) {
        std::vector<std::vector<int32_t>> one{p};
        std::vector<eng_out> o =
            run_engine(&cuda_backend_ops, dir, one, g, 24, true, eng_knobs{512, false, 0});
        alone.push_back(o[0]);
    }
    std::vector<eng_out> cached =
        run_engine(&cuda_backend_ops, dir, prompts, g, 24, true, eng_knobs{512, true, 6});
    const unsigned long long hits = (unsigned long long)g_last_metrics.prefix_cache_hits;
    fprintf(stderr, "  fp8 prefix cache: %llu tokens hit\n", hits);
    CHECK(hits >= 64, "fp8: the prefix cache hit only %llu tokens", hits);
    const int eq1 = compare_greedy("fp8 prefix cache vs alone", alone, cached);
    /* Preemption: running sequences must keep needing blocks after admission, so 96 new tokens (3
     * blocks of 32) per request (24 never preempted on the H200, even with 8 blocks: a request grew
     * by one block at most). Pools from 24 blocks down until the scheduler has to preempt. */
    std::vector<eng_out> alone_long, tight;
    for (auto &p : prompts) {
        std::vector<std::vector<int32_t>> one{p};
        alone_long.push_back(
            run_engine(&cuda_backend_ops, dir, one, g, 96, true, eng_knobs{512, false, 0})[0]);
    }
    unsigned long long pre = 0;
    int pool = 0;
    for (int nb : {24, 16, 12, 8}) {
        tight = run_engine(&cuda_backend_ops, dir, prompts, g, 96, true, eng_knobs{nb, true, 0});
        pre = (unsigned long long)g_last_metrics.num_preemptions, pool = nb;
        if (pre > 0) break;
    }
    fprintf(stderr, "  fp8 tight pool: %llu preemptions with %d blocks\n", pre, pool);
    CHECK(pre > 0, "fp8: no preemption with pools of 24 down to 8 blocks");
    const int eq2 = compare_greedy("fp8 preemption vs alone", alone_long, tight);
    summary_add(0, "fp8 prefix cache: %d equal (%llu hit); preemption: %d equal (%llu)", eq1, hits,
                eq2, pre);
    g_kv_dtype = BACKEND_KV_AUTO;
}

/* --kv-accuracy: fp8 vs bf16 KV at real width and long contexts (see the header). */
static void kv_accuracy(rng_t *rng) {
    const char *model = "synthetic:20b:layers=4";
    const int ctxs[3] = {2048, 8192, 32768}, NS = 4, TAIL = 64, CHUNK = 4096;
    printf(
        "| model | context | rows | logits relL2 | max abs err / max logit | top-1 agree | "
        "top-1 agree (bf16 margin > %.2f) |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        MARGIN);
    for (int ci = 0; ci < 3; ci++) {
        const int C = ctxs[ci];
        std::vector<std::vector<float>> got[2];
        std::vector<std::vector<int32_t>> toks(NS);
        int V = 0;
        for (int f8 = 0; f8 < 2; f8++) {
            g_kv_dtype = f8 ? BACKEND_KV_FP8 : BACKEND_KV_AUTO;
            const int blocks = NS * ((C + 31) / 32 + 2) + 4 * CHUNK / 32;
            backend *be = make_cuda(model, NS, -1, blocks, C + 64);
            CHECK(be != NULL, "cuda backend %s", model);
            if (!be) return;
            V = cuda_backend_ops.config(be)->vocab;
            if (f8 == 0)
                for (auto &t : toks) {
                    t.resize(C);
                    for (auto &x : t) x = rng_below(rng, V);
                }
            driver d;
            drv_init(&d, &cuda_backend_ops, be, NS, rng);
            std::vector<tf_seq> seqs(NS);
            for (int k = 0; k < NS; k++) {
                seqs[k].toks = toks[k], seqs[k].done = 0, seqs[k].swa_first = 0, seqs[k].slot = k;
                seqs[k].logit0 = C - TAIL;
                seqs[k].logits.assign((size_t)TAIL * V, NAN);
            }
            /* prefill up to logit0 in chunks, one sequence at a time, then teacher-forced decode */
            bool ok = true;
            for (int k = 0; k < NS && ok; k++)
                while (ok && seqs[k].done < C - TAIL) {
                    const int nn = std::min(CHUNK, C - TAIL - seqs[k].done);
                    ok = drv_step(&d, seqs, std::vector<int>{k}, std::vector<int>{nn}) == 0;
                }
            std::vector<int> all(NS), ones(NS, 1);
            for (int k = 0; k < NS; k++) all[k] = k;
            for (int j = 0; j < TAIL && ok; j++) ok = drv_step(&d, seqs, all, ones) == 0;
            CHECK(ok, "kv accuracy run (ctx %d, %s)", C, f8 ? "fp8" : "bf16");
            for (auto &s : seqs) got[f8].push_back(s.logits);
            cuda_backend_ops.destroy(be);
        }
        cmp_stats s;
        memset(&s, 0, sizeof s);
        for (int k = 0; k < NS; k++) cmp_rows(&s, got[1][k].data(), got[0][k].data(), TAIL, V);
        const double l2 = rel_l2(&s), mx = s.max_ref > 0 ? s.max_diff / s.max_ref : s.max_diff;
        const double top1 = s.rows ? (double)s.agree / s.rows : 0,
                     top1c = s.clear ? (double)s.clear_agree / s.clear : 1;
        printf("| 20b x 4 layers (synthetic) | %d | %ld | %.2e | %.2e | %.4f | %.4f (%ld rows) |\n",
               C, s.rows, l2, mx, top1, top1c, s.clear);
        fflush(stdout);
        CHECK(s.nonfinite == 0, "kv accuracy ctx %d: %ld rows with non-finite logits", C,
              s.nonfinite);
        if (C == 8192)
            printf("target (issue 15): top-1 agreement >= 99%% at 8k: %.2f%% -> %s\n", 100 * top1,
                   top1 >= 0.99 ? "met" : "NOT met");
    }
    g_kv_dtype = BACKEND_KV_AUTO;
}

/* ------------------------------------------------------------------------------------------------
 */
/* (f) tensor parallelism: the same model sharded over 2 and 4 ranks against one rank */

/* One backend's teacher-forced logits for (f): the prompts of `lens` whole, then the same sequences
 * one token a step (decode kernel, graphs); the sequences of both runs, whole ones first (empty when
 * the backend could not be made or a schedule failed). With fewer GPUs than ranks, the ranks run in
 * lockstep on GPU 0 (GPTOSS_TP_ONE_GPU=1). The same prompts and block shuffles for every call.
 * ep: --enable-expert-parallel. */
static std::vector<tf_seq> tp_run(const char *model, const char *name, int tp,
                                  const std::vector<int> &lens, int *V, rng_t *rng,
                                  bool ep = false) {
    int n_dev = 0;
    CUDA_CHECK(cudaGetDeviceCount(&n_dev));
    if (tp > n_dev) setenv("GPTOSS_TP_ONE_GPU", "1", 1);
    backend *be = make_cuda(model, 16, 0, 512, 2048, tp, ep);
    unsetenv("GPTOSS_TP_ONE_GPU");
    const char *epf = ep ? " --enable-expert-parallel" : "";
    CHECK(be != NULL, "cuda backend %s, --tensor-parallel-size %d%s", name, tp, epf);
    if (!be) return {};
    *V = cuda_backend_ops.config(be)->vocab;
    driver d;
    drv_init(&d, &cuda_backend_ops, be, 1024, rng);
    rng_t same;
    rng_seed(&same, 1234);
    d.free_full.clear(), d.free_swa.clear();
    int nf = 0, ns = 0, kbs = 0;
    cuda_backend_ops.kv_blocks(be, &nf, &ns, &kbs);
    for (int i = 0; i < nf; i++) d.free_full.push_back(i);
    for (int i = 0; i < ns; i++) d.free_swa.push_back(i);
    std::vector<tf_seq> seqs = make_seqs(lens, *V, &same, 0);
    bool ok = run_schedule(&d, seqs, POL_WHOLE, false, 0, &same) == 0;
    std::vector<tf_seq> dec = make_seqs(lens, *V, &same, 8);
    for (size_t k = 0; k < dec.size(); k++) dec[k].toks = seqs[k].toks;
    ok = ok && run_schedule(&d, dec, POL_DECODE, true, 0, &same) == 0;
    CHECK(ok, "%s --tensor-parallel-size %d%s: the schedules failed", name, tp, epf);
    fprintf(stderr, "(f) %s --tensor-parallel-size %d%s%s\n", name, tp, epf,
            tp > n_dev ? " (ranks on one GPU)" : "");
    cuda_backend_ops.destroy(be);
    if (!ok) return {};
    seqs.insert(seqs.end(), dec.begin(), dec.end());
    return seqs;
}

/* TP N against TP 1: TP moves where the sums are split and rounded (the O and MoE partials in fp32,
 * summed in rank order): noise of the kind (a) bounds between the GPU and the CPU, so the same
 * bound. Measured (synthetic 120b x 2 layers): TP2 2.1e-2 relL2, top-1 0.995 on clear positions. */
static void tp_compare(const char *what, const std::vector<tf_seq> &got,
                       const std::vector<tf_seq> &ref, int V) {
    CHECK(got.size() == ref.size() && !got.empty(), "%s: %zu sequences against %zu", what,
          got.size(), ref.size());
    if (got.size() != ref.size()) return;
    cmp_stats st;
    memset(&st, 0, sizeof st);
    for (size_t k = 0; k < got.size(); k++)
        cmp_rows(&st, got[k].logits.data(), ref[k].logits.data(), (int)got[k].toks.size(), V);
    cmp_report(what, &st, tf_l2_tol(), 0.25, true, true);
}

static void remove_dir(const char *dir);
static bool write_20b_two_layers(char *dir, int files, model_config *c);

/* The checkpoint's run and the synthetic model's, the same weights sharded alike: the same logits
 * bit for bit (weights_shard.c's two sources put the same bytes in every rank's share). */
static void tp_identical(const char *what, const std::vector<tf_seq> &got,
                         const std::vector<tf_seq> &syn) {
    if (got.empty() || syn.empty()) return; /* a failed run, already reported */
    bool same = got.size() == syn.size();
    double max_d = 0;
    for (size_t k = 0; same && k < got.size(); k++) {
        same = got[k].logits.size() == syn[k].logits.size();
        for (size_t i = 0; same && i < got[k].logits.size(); i++)
            max_d = fmax(max_d, fabs((double)got[k].logits[i] - syn[k].logits[i]));
        same = same && !memcmp(got[k].logits.data(), syn[k].logits.data(),
                               got[k].logits.size() * sizeof(float));
    }
    CHECK(same, "%s: the checkpoint's shares and synthetic:20b:layers=2's differ (max |d| %.3e)",
          what, max_d);
    fprintf(stderr, "  %s checkpoint == %s synthetic:20b (bit for bit): %s\n", what, what,
            same ? "yes" : "NO");
}

/* The same on a checkpoint: a `make-model` 20b x 2 layers (synthetic_write, seed 0, two files) in a
 * temporary folder, TP2 and EP2 against TP1 (the bound above), and TP2 (EP2) from the checkpoint
 * against TP2 (ep2_syn: EP2) of synthetic:20b:layers=2:seed=0 made on the GPU: bit for bit
 * (tp_identical). And a size that does not divide the heads is refused, naming the checkpoint's
 * config.json. */
static void tp_checkpoint(rng_t *rng, const std::vector<tf_seq> &ep2_syn) {
    char dir[] = "/tmp/gptoss-tp-ckpt-XXXXXX";
    model_config c;
    if (!write_20b_two_layers(dir, 2, &c)) return;
    const std::vector<int> lens{1, 7, 33, 64, 130, 200};
    int V = 0;
    const std::vector<tf_seq> ref = tp_run(dir, "checkpoint 20b x 2 layers", 1, lens, &V, rng);
    const std::vector<tf_seq> got = tp_run(dir, "checkpoint 20b x 2 layers", 2, lens, &V, rng);
    if (!ref.empty() && !got.empty())
        tp_compare("TP2 vs TP1 (20b x 2 layers checkpoint)", got, ref, V);
    const std::vector<tf_seq> syn =
        tp_run("synthetic:20b:layers=2:seed=0", "synthetic:20b:layers=2:seed=0", 2, lens, &V, rng);
    tp_identical("TP2", got, syn);
    const std::vector<tf_seq> ep2 =
        tp_run(dir, "checkpoint 20b x 2 layers", 2, lens, &V, rng, true);
    if (!ref.empty() && !ep2.empty())
        tp_compare("EP2 vs TP1 (20b x 2 layers checkpoint)", ep2, ref, V);
    tp_identical("EP2", ep2, ep2_syn);
    /* 64 heads over 3 ranks: refused before anything is made, naming the file */
    backend *bad = make_cuda(dir, 16, 0, 512, 2048, 3);
    CHECK(bad == NULL && strstr(err_msg(), "config.json") && strstr(err_msg(), "does not divide"),
          "--tensor-parallel-size 3 on the checkpoint: expected a refusal naming config.json, got "
          "'%s'",
          bad ? "(accepted)" : err_msg());
    if (bad) cuda_backend_ops.destroy(bad);
    remove_dir(dir);
}

/* Expert parallelism over a count of ranks that does not divide the experts (6 over 4, in a small
 * checkpoint whose 16 heads and 2 KV heads would split): refused before anything is made, naming
 * the flag and the checkpoint's config.json. */
static void ep_refused(void) {
    char dir[] = "/tmp/gptoss-ep-odd-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(false, "mkdtemp failed");
        return;
    }
    model_config c;
    small_config(&c);
    c.n_experts = 6;
    if (synthetic_write(&c, dir, 1, 1) != 0) {
        CHECK(false, "synthetic_write (6 experts): %s", err_msg());
        remove_dir(dir);
        return;
    }
    backend *bad = make_cuda(dir, 16, 0, 64, 2048, 4, true);
    CHECK(bad == NULL && strstr(err_msg(), "config.json") &&
              strstr(err_msg(), "--enable-expert-parallel") && strstr(err_msg(), "6 experts"),
          "--tensor-parallel-size 4 --enable-expert-parallel over 6 experts: expected a refusal "
          "naming the flag and config.json, got '%s'",
          bad ? "(accepted)" : err_msg());
    if (bad) cuda_backend_ops.destroy(bad);
    remove_dir(dir);
}

static void tp_checks(rng_t *rng) {
    const char *model = "synthetic:120b:layers=2";
    const std::vector<int> lens{1, 7, 33, 64, 130, 200};
    std::vector<tf_seq> ref;
    int V = 0;
    for (int tp : {1, 2, 4}) {
        std::vector<tf_seq> got = tp_run(model, model, tp, lens, &V, rng);
        if (got.empty()) return;
        if (tp == 1) {
            ref = got;
        } else {
            char what[64];
            snprintf(what, sizeof what, "TP%d vs TP1 (120b x 2 layers)", tp);
            tp_compare(what, got, ref, V);
        }
    }
    /* Expert parallelism: the MoE by experts (20b's 32: 16 or 8 a rank), the rest as TP. Its
     * rounding moves like TP's (attention by heads; each pair's expert output whole on its owner,
     * summed with the other ranks' zeros), so the same bounds against one rank. */
    const char *m20 = "synthetic:20b:layers=2:seed=0";
    const std::vector<tf_seq> ref20 = tp_run(m20, m20, 1, lens, &V, rng);
    std::vector<tf_seq> ep2;
    for (int n : {2, 4}) {
        std::vector<tf_seq> got = tp_run(m20, m20, n, lens, &V, rng, true);
        if (!ref20.empty() && !got.empty()) {
            char what[64];
            snprintf(what, sizeof what, "EP%d vs TP1 (20b x 2 layers)", n);
            tp_compare(what, got, ref20, V);
        }
        if (n == 2) ep2 = got;
    }
    ep_refused();
    tp_checkpoint(rng, ep2);
}

/* ------------------------------------------------------------------------------------------------
 */
/* (g) DEP2: data-parallel attention, expert-parallel MoE (--data-parallel-size 2) */

/* Teacher-forced logits of the sequences of `lens` under three schedules: whole prompts one
 * sequence a step (the other rank has no rows: it still joins every MoE), a 10-token prefill then
 * decode steps for all at once (both ranks' parts in every step until the short ones end), and
 * 7-token chunks with staggered starts (mixed prefill and decode parts). dp 2: sequence k lives on
 * rank k % 2 (its blocks from that rank's pools; steps grouped by rank, as the engine lays them
 * out); dp 0: one GPU, the reference (the rank is ignored). Ranks in lockstep on one GPU when
 * there is only one. The same prompts and block orders for every call. */
static std::vector<tf_seq> dep_run(const char *model, int dp, const std::vector<int> &lens,
                                   int *V) {
    int n_dev = 0;
    CUDA_CHECK(cudaGetDeviceCount(&n_dev));
    if (dp > n_dev) setenv("GPTOSS_TP_ONE_GPU", "1", 1);
    backend *be = make_cuda(model, 16, 0, 512, 2048, 1, dp > 1, dp);
    unsetenv("GPTOSS_TP_ONE_GPU");
    CHECK(be != NULL, "cuda backend %s, --data-parallel-size %d", model, dp);
    if (!be) return {};
    *V = cuda_backend_ops.config(be)->vocab;
    rng_t same;
    rng_seed(&same, 4321);
    driver d;
    drv_init(&d, &cuda_backend_ops, be, 1024, &same);
    int nf = 0, ns = 0, kbs = 0;
    cuda_backend_ops.kv_blocks(be, &nf, &ns, &kbs); /* DEP: each rank's pools' sizes */
    d.dp = dp;
    for (int r = 0; r < 2; r++) {
        d.dp_full[r].clear(), d.dp_swa[r].clear();
        for (int i = 0; i < nf; i++) d.dp_full[r].push_back(i);
        for (int i = 0; i < ns; i++) d.dp_swa[r].push_back(i);
        rng_shuffle(&same, d.dp_full[r].data(), nf);
        rng_shuffle(&same, d.dp_swa[r].data(), ns);
    }
    std::vector<tf_seq> all;
    const int pols[3] = {POL_WHOLE, POL_DECODE, POL_CHUNK7};
    const bool batched[3] = {false, true, true};
    bool ok = true;
    std::vector<tf_seq> first = make_seqs(lens, *V, &same, 0);
    for (int i = 0; i < 3 && ok; i++) {
        std::vector<tf_seq> seqs = make_seqs(lens, *V, &same, 0);
        for (size_t k = 0; k < seqs.size(); k++) seqs[k].toks = first[k].toks, seqs[k].rank = k % 2;
        ok = run_schedule(&d, seqs, pols[i], batched[i], i == 2 ? 1 : 0, &same) == 0;
        all.insert(all.end(), seqs.begin(), seqs.end());
    }
    CHECK(ok, "%s --data-parallel-size %d: the schedules failed", model, dp);
    fprintf(stderr, "(g) %s --data-parallel-size %d%s\n", model, dp,
            dp > n_dev ? " (ranks on one GPU)" : "");
    cuda_backend_ops.destroy(be);
    return ok ? all : std::vector<tf_seq>{};
}

/* DEP2 against one GPU: attention whole on each rank (its rows' numbers are TP1's), the MoE as EP2
 * (each pair's expert output whole on its owner, the ranks' slots summed in fp32), so the bound of
 * EP2 against TP1 (f); and the flag's refusals. */
static void dep_checks(void) {
    const char *m20 = "synthetic:20b:layers=2:seed=0";
    const std::vector<int> lens{1, 7, 33, 64, 130, 200};
    int V = 0;
    const std::vector<tf_seq> ref = dep_run(m20, 0, lens, &V);
    const std::vector<tf_seq> got = dep_run(m20, 2, lens, &V);
    if (!ref.empty() && !got.empty()) tp_compare("DEP2 vs TP1 (20b x 2 layers)", got, ref, V);
    backend *bad = make_cuda(m20, 16, 0, 64, 2048, 1, false, 2);
    CHECK(bad == NULL && strstr(err_msg(), "--data-parallel-size") &&
              strstr(err_msg(), "--enable-expert-parallel"),
          "--data-parallel-size 2 without --enable-expert-parallel: expected a refusal naming "
          "both flags, got '%s'",
          bad ? "(accepted)" : err_msg());
    if (bad) cuda_backend_ops.destroy(bad);
    bad = make_cuda(m20, 16, 0, 64, 2048, 1, true, 3);
    CHECK(bad == NULL && strstr(err_msg(), "--data-parallel-size 3"),
          "--data-parallel-size 3: expected a refusal naming the flag, got '%s'",
          bad ? "(accepted)" : err_msg());
    if (bad) cuda_backend_ops.destroy(bad);
}

/* ------------------------------------------------------------------------------------------------
 */
/* (c) real width */

/* ------------------------------------------------------------------------------------------------
 */
/* (h) the step kernel against the layer loop */

/* Teacher-forced logits of the sequences of `lens`, one sequence at a time (a 10-token prefill, then
 * one token a step), with the step kernel on or off; *launches: the backend's count of step
 * kernel launches. The same prompts and block shuffles for every call. */
static std::vector<tf_seq> step_run(const char *model, bool on, int graphs,
                                    const std::vector<int> &lens, int *V, long *launches) {
    step_kernel_set(on ? 1 : 0);
    backend *be = make_cuda(model, 16, graphs, 512, 2048);
    CHECK(be != NULL, "cuda backend %s", model);
    *launches = 0;
    if (!be) {
        step_kernel_set(-1);
        return {};
    }
    *V = cuda_backend_ops.config(be)->vocab;
    rng_t same;
    rng_seed(&same, 4321);
    driver d;
    drv_init(&d, &cuda_backend_ops, be, 1024, &same);
    std::vector<tf_seq> seqs = make_seqs(lens, *V, &same, 0);
    const bool ok = run_schedule(&d, seqs, POL_DECODE, false, 0, &same) == 0;
    CHECK(ok, "%s (step kernel %s, graphs %d): the schedule failed", model, on ? "on" : "off",
          graphs);
    cuda_backend_stats st;
    cuda_backend_get_stats(be, &st);
    *launches = st.step_kernel_launches;
    cuda_backend_ops.destroy(be);
    step_kernel_set(-1);
    return ok ? seqs : std::vector<tf_seq>{};
}

/* With the blocks' probe (step_kernel_set_block_probe): how the blocks' arrivals at each phase's
 * grid barrier spread, from the phase's start by block 0's clock (all blocks leave a barrier within
 * its poll), over layers 1-11: the first, median, 90th percentile and last arrival, then the
 * barrier's tail (block 0 leaving it, less the last arrival). A phase whose last arrival is far past
 * its median is bound by its slowest blocks; the SMs most often among the 5 last follow (a fixed
 * share of the bytes to every SM is as slow as the slowest SM's share of the DRAM). */
static void step_kernel_spread(const unsigned long long *st, const unsigned *bst, int NL, int NS,
                               int NB, int G) {
    /* a block's stamp: the low 32 bits of the clock, from block 0's 64-bit stamp t0 of the phase */
    auto since = [](unsigned lo, unsigned long long t0) {
        return (double)(int)(lo - (unsigned)t0) * 1e-3;
    };
    static const char *const name[7] = {
        "",       "1: QKV", "2: attention", "3: O", "4: MLP norm, router", "5: routing, gate_up",
        "6: down"};
    printf("\nthe blocks' arrivals at each phase's barrier, µs from the phase's start (%d blocks, "
           "layers 1-%d):\n\n| phase | first | median | p90 | last | tail | slowest SMs (times "
           "among the 5 last) |\n| --- | ---: | ---: | ---: | ---: | ---: | --- |\n",
           G, NL - 2);
    for (int p = 1; p <= 6; p++) {
        double a[4] = {0, 0, 0, 0}, tail = 0;
        std::vector<int> late(G, 0);
        const int n = NL - 2; /* layers 1 .. NL - 2 (the last layer's phase 6 has no barrier) */
        for (int l = 1; l <= n; l++) {
            const unsigned long long t0 = st[l * NS + p], t1 = st[l * NS + p + 1];
            std::vector<std::pair<double, int>> v(G);
            for (int b = 0; b < G; b++) v[b] = {since(bst[((size_t)l * NB + p) * G + b], t0), b};
            std::sort(v.begin(), v.end());
            a[0] += v[0].first, a[1] += v[G / 2].first, a[2] += v[(G * 9) / 10].first;
            a[3] += v[G - 1].first;
            tail += (double)((long long)(t1 - t0)) * 1e-3 - v[G - 1].first;
            for (int j = G - 5; j < G; j++) late[v[j].second]++;
        }
        std::vector<std::pair<int, int>> top;
        for (int b = 0; b < G; b++)
            if (late[b]) top.push_back({-late[b], b});
        std::sort(top.begin(), top.end());
        char who[160] = "";
        for (size_t j = 0; j < top.size() && j < 5; j++) {
            const int b = top[j].second;
            char one[40];
            snprintf(one, sizeof one, "%sSM %u ×%d", j ? ", " : "", bst[(size_t)NB * G + b],
                     -top[j].first);
            strncat(who, one, sizeof who - strlen(who) - 1);
        }
        printf("| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %s |\n", name[p], a[0] / n, a[1] / n,
               a[2] / n, a[3] / n, tail / n, who);
    }
    double r[3] = {0, 0, 0};
    for (int l = 1; l <= NL - 2; l++) {
        std::vector<double> v(G);
        for (int b = 0; b < G; b++) v[b] = since(bst[((size_t)l * NB + 7) * G + b], st[l * NS + 5]);
        std::sort(v.begin(), v.end());
        r[0] += v[0], r[1] += v[G / 2], r[2] += v[G - 1];
    }
    printf("| 5a: routing done (of phase 5) | %.1f | %.1f | | %.1f | | |\n", r[0] / (NL - 2),
           r[1] / (NL - 2), r[2] / (NL - 2));
    /* inside the attention (slots 8-11, written only by blocks with a split, the merges' only by the
     * merging block: each step overwrites the marks its blocks reach, so a mark counts only if it
     * falls inside this step's phases 1-2 of the layer), from phase 2's start, the layers with
     * most blocks splitting (full) apart from the others */
    auto at = [&](int l, int k, int b, double *u) {
        const unsigned t = bst[((size_t)l * NB + 8 + k) * G + b];
        const double a0 = since(t, st[l * NS + 1]), a1 = since(t, st[l * NS + 3]);
        *u = since(t, st[l * NS + 2]);
        return t != ~0u && a0 >= 0 && a1 <= 0;
    };
    static const char *const mark[4] = {"first keys landed", "keys done", "merge counter answered",
                                        "merge done"};
    printf("\ninside the attention, µs from phase 2's start (the mean over the layers of each kind "
           "of the median and last block; blocks: how many wrote the mark):\n\n| layers | mark | "
           "blocks | median | last |\n| --- | --- | ---: | ---: | ---: |\n");
    for (int full = 1; full >= 0; full--)
        for (int k = 0; k < 4; k++) {
            double med = 0, last = 0, cnt = 0;
            int n = 0;
            for (int l = 1; l <= NL - 2; l++) {
                int splits = 0;
                double u;
                for (int b = 0; b < G; b++) splits += at(l, 0, b, &u);
                if ((splits > G / 2) != (full == 1)) continue;
                std::vector<double> v;
                for (int b = 0; b < G; b++)
                    if (at(l, k, b, &u)) v.push_back(u);
                if (v.empty()) continue;
                std::sort(v.begin(), v.end());
                med += v[v.size() / 2], last += v.back(), cnt += (double)v.size(), n++;
            }
            if (n)
                printf("| %s | %s | %.0f | %.1f | %.1f |\n", full ? "full" : "sliding", mark[k],
                       cnt / n, med / n, last / n);
        }
}

/* With the wait probe (step_kernel_set_wait_probe; the words as step_kernel.h lays them out): where
 * the expert phases' time goes, over layers 1 .. NL - 2 and every block: each consumer warp's
 * (the mean of the eight) and the producer's cycles a layer a launch in µs (the SM clock from the
 * cycles and %globaltimer between two of warp 0's points), then the last launch's points of phases
 * 5-6 from the block's phase 5 start (the mean over blocks and layers). */
static void step_kernel_waits(const unsigned *wp, int NL, int G) {
    enum { W = 9, SL = 24 };
    auto row = [&](int l, int b, int w) { return wp + (((size_t)l * G + b) * W + w) * SL; };
    const double launches = row(0, 0, 8)[23];
    CHECK(launches > 0, "the wait probe: no launch counted");
    if (launches <= 0) return;
    double ghz = 0;
    int n_ghz = 0;
    for (int l = 1; l <= NL - 2; l++)
        for (int b = 0; b < G; b++) {
            const unsigned *r = row(l, b, 0);
            const double dc = (int)(r[18] - r[10]), dg = (int)(r[20] - r[19]);
            if (dg > 1000) ghz += dc / dg, n_ghz++;
        }
    CHECK(n_ghz > 0 && ghz / n_ghz > 0.5 && ghz / n_ghz < 3.0,
          "the wait probe: the SM clock from %d pairs is %.2f GHz", n_ghz, n_ghz ? ghz / n_ghz : 0);
    if (n_ghz == 0) return;
    ghz /= n_ghz;
    const int n = NL - 2;
    /* the mean over layers and blocks (and the consumer warps, w < 0) of word i, in µs or raw */
    auto mean = [&](int w, int i, bool cycles) {
        double sum = 0;
        for (int l = 1; l <= n; l++)
            for (int b = 0; b < G; b++) {
                if (w >= 0) {
                    sum += row(l, b, w)[i];
                    continue;
                }
                for (int c = 0; c < 8; c++) sum += row(l, b, c)[i] / 8.0;
            }
        sum /= (double)n * G * launches;
        return cycles ? sum / ghz * 1e-3 : sum;
    };
    printf(
        "\nthe expert phases' waits (µs a layer, the mean over layers 1-%d, %d blocks and %.0f "
        "launches; SM clock %.2f GHz):\n\n| phase | consumer warp: chunks | waits for the "
        "issue | for the copy | multiply | of which the scale words (lane 0) | meet, epilogue | "
        "producer: chunks | waits for a free stage | issue |\n| --- | ---: | ---: | ---: | ---: | "
        "---: | ---: | ---: | ---: | ---: |\n",
        n, G, launches, ghz);
    for (int d = 0; d < 2; d++) {
        const int o = d * 5;
        printf("| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f | %.2f | %.2f |\n",
               d ? "6: down" : "5: gate_up", mean(-1, o + 4, false), mean(-1, o, true),
               mean(-1, o + 1, true), mean(-1, o + 2, true), mean(-1, 21 + d, true),
               mean(-1, o + 3, true), mean(8, o + 4, false), mean(8, o, true),
               mean(8, o + 1, true));
    }
    printf("\nthe producer's other waits (µs a layer): for a free stage among QKV, O, router %.2f; "
           "for the QKV barrier %.2f; for the routing %.2f; taking tiles %.2f\n",
           mean(8, 2, true), mean(8, 3, true), mean(8, 7, true), mean(8, 8, true));
    /* the points: µs from warp 0's phase 5 start of the same block (the last launch), warp w's
     * word i; pick: 0 that warp's, 1 the first warp's, 2 the last warp's */
    auto point = [&](int w, int i, int pick) {
        double sum = 0;
        for (int l = 1; l <= n; l++)
            for (int b = 0; b < G; b++) {
                const unsigned t0 = row(l, b, 0)[10];
                double v = (int)(row(l, b, w)[i] - t0);
                if (pick)
                    for (int c = 0; c < 8; c++) {
                        const double u = (int)(row(l, b, c)[i] - t0);
                        if (c == 0 || (pick == 1 ? u < v : u > v)) v = u;
                    }
                sum += v;
            }
        return sum / ((double)n * G) / ghz * 1e-3;
    };
    printf("\nphases 5-6 of the last launch, µs from the block's phase 5 start (the mean over "
           "layers and blocks):\n\n| point | µs |\n| --- | ---: |\n");
    static const struct {
        const char *what;
        int warp, word, pick;
    } points[] = {
        {"warp 0: the logits in", 0, 11, 0},
        {"warp 0: the top-k's rounds done", 0, 12, 0},
        {"the routing done (warp 0 past the block barrier)", 0, 13, 0},
        {"the producer sees it", 8, 13, 0},
        {"the producer issues the first chunk", 8, 14, 0},
        {"the first chunk lands (the first warp)", 0, 14, 1},
        {"the producer issues down's first chunk", 8, 15, 0},
        {"gate_up's loop done (the first warp)", 0, 15, 1},
        {"gate_up's loop done (the last warp)", 0, 15, 2},
        {"phase 6's start (the grid barrier passed)", 0, 16, 0},
        {"the activations staged", 0, 17, 0},
        {"the producer issues the layer's last chunk", 8, 18, 0},
        {"down's loop done (the last warp)", 0, 18, 2},
    };
    for (const auto &p : points) printf("| %s | %.2f |\n", p.what, point(p.warp, p.word, p.pick));
}

/* --step-kernel --bench: the kernel's phases by block 0's clock in the last decode step of one
 * 1024-token sequence (a 10-token prefill, then one token a step: the last step at a 1k context),
 * 120b shapes, 12 layers; the mean, least and most over layers 1-11 (layer 0 has no norm inside).
 * blocks: with the blocks' probe too, whose spread (step_kernel_spread) is printed instead. */
static void step_kernel_bench(int moe_probe, bool blocks, bool waits = false) {
    const char *model = "synthetic:120b:layers=12:seed=0";
    enum { NL = 12, NS = 8 };
    if (waits && !step_kernel_set_wait_probe(NULL)) { /* before anything is made */
        printf("\nthe wait probe is compiled out (build with "
               "CMAKE_CUDA_FLAGS=-DGPTOSS_STEP_WAIT_PROBE=1)\n");
        return;
    }
    step_kernel_set(1);
    backend *be = make_cuda(model, 4, -1, 512, 2048);
    CHECK(be != NULL, "cuda backend %s", model);
    if (!be) {
        step_kernel_set(-1);
        return;
    }
    unsigned long long *d_st = NULL;
    CUDA_CHECK(cudaMalloc((void **)&d_st, NL * NS * sizeof *d_st));
    CUDA_CHECK(cudaMemset(d_st, 0, NL * NS * sizeof *d_st));
    step_kernel_set_probe(d_st);
    step_kernel_set_moe_probe(moe_probe);
    int G = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&G, cudaDevAttrMultiProcessorCount, 0));
    unsigned *d_bst = NULL;
    enum { NB = 12 }; /* the blocks' probe's slots a layer (step_kernel.h) */
    const size_t nb = (size_t)NL * NB * G;
    if (blocks) {
        CUDA_CHECK(cudaMalloc((void **)&d_bst, nb * sizeof *d_bst));
        CUDA_CHECK(cudaMemset(d_bst, 0xff, nb * sizeof *d_bst)); /* ~0u: not written */
        step_kernel_set_block_probe(d_bst);
    }
    unsigned *d_wp = NULL;
    const size_t nw = (size_t)NL * G * 9 * 24; /* the wait probe's words (step_kernel.h) */
    if (waits) {
        CUDA_CHECK(cudaMalloc((void **)&d_wp, nw * sizeof *d_wp));
        CUDA_CHECK(cudaMemset(d_wp, 0, nw * sizeof *d_wp));
        step_kernel_set_wait_probe(d_wp);
    }
    const int V = cuda_backend_ops.config(be)->vocab;
    rng_t same;
    rng_seed(&same, 4321);
    driver d;
    drv_init(&d, &cuda_backend_ops, be, 1024, &same);
    std::vector<tf_seq> seqs = make_seqs({1024}, V, &same, 0);
    const bool ok = run_schedule(&d, seqs, POL_DECODE, false, 0, &same) == 0;
    CHECK(ok, "%s: the schedule failed", model);
    step_kernel_set_probe(NULL);
    step_kernel_set_moe_probe(0);
    step_kernel_set_block_probe(NULL);
    step_kernel_set_wait_probe(NULL);
    std::vector<unsigned> wp(waits ? nw : 0);
    if (waits) {
        CUDA_CHECK(cudaMemcpy(wp.data(), d_wp, nw * sizeof *d_wp, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaFree(d_wp));
    }
    unsigned long long st[NL * NS];
    CUDA_CHECK(cudaMemcpy(st, d_st, sizeof st, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaFree(d_st));
    std::vector<unsigned> bst(blocks ? nb : 0);
    if (blocks) {
        CUDA_CHECK(cudaMemcpy(bst.data(), d_bst, nb * sizeof *d_bst, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaFree(d_bst));
    }
    cuda_backend_ops.destroy(be);
    step_kernel_set(-1);
    bool ordered = true;
    for (int i = 1; i < NL * NS; i++) ordered = ordered && st[i] >= st[i - 1] && st[i - 1] > 0;
    CHECK(ordered, "the probe's stamps are not all written in order");
    if (!ordered) return;
    if (waits) {
        printf("\nthe kernel whole with the wait probe:\n");
        step_kernel_waits(wp.data(), NL, G);
        return;
    }
    if (blocks) {
        bool written = true;
        for (int l = 1; l < NL - 1; l++)
            for (int i = 1; i < NS; i++)
                for (int b = 0; b < G; b++) {
                    const unsigned t = bst[((size_t)l * NB + i) * G + b];
                    written = written && (int)(t - (unsigned)st[l * NS]) >= 0 &&
                              (int)((unsigned)st[(l + 1) * NS] - t) >= 0;
                }
        CHECK(written, "the blocks' probe: a stamp outside its layer");
        if (!written) return;
        printf("\n%s with the blocks' probe:\n",
               moe_probe == 1 ? "the experts' stream alone" : "the kernel whole");
        step_kernel_spread(st, bst.data(), NL, NS, NB, G);
        return;
    }
    static const char *const name[NS] = {"0: input norm, preloads",
                                         "1: QKV (+ barrier)",
                                         "2: attention (+ barrier)",
                                         "3: O (+ barrier)",
                                         "4: MLP norm, router (+ barrier)",
                                         "5: routing, gate_up (+ barrier)",
                                         "6: down (+ barrier)",
                                         "the layer"};
    printf("\n%s\n\n| phase | mean µs | least | most |\n| --- | ---: | ---: | ---: |\n",
           moe_probe == 1   ? "the experts' chunks not multiplied (their stream alone):"
           : moe_probe == 2 ? "the experts' chunks not copied (their arithmetic alone):"
                            : "the kernel whole:");
    for (int i = 0; i < NS; i++) {
        /* phase i: from stamp i to stamp i + 1 of the layer; the layer: to the next one's start */
        const bool layer = i == NS - 1;
        const int n = layer ? NL - 2 : NL - 1;
        double sum = 0, lo = 1e30, hi = 0;
        for (int l = 1; l <= n; l++) {
            const unsigned long long t0 = st[l * NS + (layer ? 0 : i)];
            const unsigned long long t1 = layer ? st[(l + 1) * NS] : st[l * NS + i + 1];
            const double u = (double)(t1 - t0) * 1e-3;
            sum += u, lo = u < lo ? u : lo, hi = u > hi ? u : hi;
        }
        printf("| %s | %.1f | %.1f | %.1f |\n", name[i], sum / n, lo, hi);
    }
}

static void step_kernel_checks(void) {
    const std::vector<int> lens{40, 200};
    for (const char *model : {"synthetic:20b:layers=3:seed=0", "synthetic:120b:layers=2:seed=0"})
        for (int graphs : {-1, 8}) {
            int V = 0;
            long n_off = 0, n_on = 0;
            const std::vector<tf_seq> ref = step_run(model, false, graphs, lens, &V, &n_off);
            const std::vector<tf_seq> got = step_run(model, true, graphs, lens, &V, &n_on);
            fprintf(stderr, "(h) %s graphs %d: step kernel launches %ld (off: %ld)\n", model,
                    graphs, n_on, n_off);
            CHECK(n_off == 0, "%s: the step kernel ran while off (%ld launches)", model, n_off);
            CHECK(n_on > 0, "%s graphs %d: the step kernel never ran", model, graphs);
            if (ref.empty() || got.empty() || ref.size() != got.size()) continue;
            cmp_stats st;
            memset(&st, 0, sizeof st);
            for (size_t k = 0; k < got.size(); k++)
                cmp_rows(&st, got[k].logits.data(), ref[k].logits.data(), (int)got[k].toks.size(),
                         V);
            char what[96];
            snprintf(what, sizeof what, "step kernel vs layer loop (%s, graphs %d)", model + 10,
                     graphs);
            cmp_report(what, &st, tf_l2_tol(), 0.25, true, true);
        }
}

static void remove_dir(const char *dir) {
    DIR *dd = opendir(dir);
    if (!dd) return;
    for (struct dirent *e; (e = readdir(dd)) != NULL;) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(dd);
    rmdir(dir);
}

/* A contiguous KV for cpu_forward_batch over one sequence. */
typedef struct {
    int kv_dim;
    std::vector<std::vector<float>> k, v;
} flat_kv;
static float *flat_k(void *ctx, int layer, int seq, int64_t pos) {
    flat_kv *f = (flat_kv *)ctx;
    (void)seq;
    return f->k[layer].data() + (size_t)pos * f->kv_dim;
}
static float *flat_v(void *ctx, int layer, int seq, int64_t pos) {
    flat_kv *f = (flat_kv *)ctx;
    (void)seq;
    return f->v[layer].data() + (size_t)pos * f->kv_dim;
}

/* A gpt-oss-20b checkpoint cut to 2 layers (sliding, full), seed 0, in `files` safetensors files,
 * written into a new folder made from the mkdtemp template dir; its config in *c. False (after a
 * failed check, the folder removed) when it could not be written. */
static bool write_20b_two_layers(char *dir, int files, model_config *c) {
    if (!mkdtemp(dir)) {
        CHECK(false, "mkdtemp failed");
        return false;
    }
    config_preset_20b(c);
    c->n_layers = 2;
    for (int i = 0; i < c->n_layers; i++) c->layer_sliding[i] = (i % 2 == 0);
    const double t0 = now_seconds();
    const int rc = synthetic_write(c, dir, 0, files);
    CHECK(rc == 0, "synthetic_write: %s", err_msg());
    if (rc) {
        remove_dir(dir);
        return false;
    }
    fprintf(stderr, "  wrote a 20b x 2 layers checkpoint to %s in %.1f s\n", dir,
            now_seconds() - t0);
    return true;
}

/* The CPU router's k-th vs (k+1)-th logit gap of each token, the smallest over the layers (a
 * cpu_model route_hook): where it is under NEAR_TIE, the GPU's bf16 activations (which move router
 * logits by ~3e-3, bench/NOTES.md) may pick the other expert, and the token's row then moves by a
 * whole expert's contribution. Measured on the H200 (session 17, three seeds, 33 rows): the rows
 * that swapped had gaps 3.5e-4, 1.6e-3 and 5.8e-3 (alone relL2 0.18, 0.27, 0.11); rows with gaps
 * 2.8e-3 … 1.8e-2 kept their experts (alone ≤ 7e-3); ~15 % of rows have a gap under 1e-2. */
enum { GAP_MAX_T = 64, T_REAL_WIDTH = 40, MIN_ROWS_LEFT = 5 };
static const double NEAR_TIE = 1e-2;
/* A row the GPU routed differently: excused when, in every layer where the GPU's experts differ
 * from the CPU's, the GPU took exactly the CPU's runner-up (the best expert not chosen) in place of
 * its k-th, at a CPU gap under SWAP_TIE. Session 37 (H100, seed 10216668540260478008): layer 1 of
 * the prompt's last token, CPU experts 11 18 30 4 at a gap of 2.45e-2, the GPU 11 18 30 21, the row
 * off by 9.9e-2 alone; the other rows' gaps from 1.4e-2 up kept their experts. In layer 1 the
 * router reads layer 0's bf16 output, so its logits move by more than layer 0's ~3e-3: the bound
 * is twice the largest swap seen, and the GPU must have made that very swap (the route dump). */
static const double SWAP_TIE = 5e-2;
enum { GAP_MAX_L = 4, GAP_MAX_K = 8 };
typedef struct {
    float gap[GAP_MAX_T];
    int experts[GAP_MAX_L][GAP_MAX_T][GAP_MAX_K]; /* the CPU's, rank order (a row's report) */
    int runner_up[GAP_MAX_L][GAP_MAX_T];          /* the CPU's best expert not chosen */
    float layer_gap[GAP_MAX_L][GAP_MAX_T];
} route_gaps;
static void record_gaps(void *ctx, int layer, int T, const float *logits, int n_experts,
                        const int *experts, int k) {
    route_gaps *g = (route_gaps *)ctx;
    for (int t = 0; t < T && t < GAP_MAX_T; t++) {
        const float *l = logits + (size_t)t * n_experts;
        const int *ex = experts + (size_t)t * k;
        float out = -INFINITY; /* the best expert not chosen */
        int out_e = -1;
        for (int e = 0; e < n_experts; e++) {
            bool chosen = false;
            for (int j = 0; j < k; j++) chosen |= ex[j] == e;
            if (!chosen && l[e] > out) out = l[e], out_e = e;
        }
        const float gap = l[ex[k - 1]] - out;
        if (gap < g->gap[t]) g->gap[t] = gap;
        if (layer >= 0 && layer < GAP_MAX_L) {
            for (int j = 0; j < k && j < GAP_MAX_K; j++) g->experts[layer][t][j] = ex[j];
            g->runner_up[layer][t] = out_e;
            g->layer_gap[layer][t] = gap;
        }
    }
}

/* Whether a set of k experts (any order) holds e. */
static bool has_expert(const int *set, int k, int e) {
    for (int j = 0; j < k; j++)
        if (set[j] == e) return true;
    return false;
}

/* Whether token t's GPU experts (gpu[l][t], from the route dump) differ from the CPU's in some
 * layer, and every such difference is the near-tie swap SWAP_TIE describes: the CPU's k-th out,
 * its runner-up in, at a CPU gap under SWAP_TIE. False where the dump lacks the token. */
static bool near_tie_swap(const route_gaps *g, const int (*gpu)[GAP_MAX_T][GAP_MAX_K], int L, int k,
                          int t) {
    bool differs = false;
    for (int l = 0; l < L && l < GAP_MAX_L; l++) {
        const int *cpu = g->experts[l][t], *got = gpu[l][t];
        if (got[0] < 0) return false;
        bool same = true;
        for (int j = 0; j < k; j++) same &= has_expert(got, k, cpu[j]);
        if (same) continue;
        differs = true;
        for (int j = 0; j < k - 1; j++) /* the CPU's first k - 1 stay */
            if (!has_expert(got, k, cpu[j])) return false;
        if (!has_expert(got, k, g->runner_up[l][t]) || g->layer_gap[l][t] >= SWAP_TIE) return false;
    }
    return differs;
}

static void real_width(rng_t *rng) {
    fprintf(stderr, "(c) 2-layer gpt-oss-20b at real width: CUDA vs CPU, and "
                    "synthetic:20b:layers=2 on the GPU\n");
    char dir[] = "/tmp/gptoss-cuda-forward-XXXXXX";
    model_config c;
    if (!write_20b_two_layers(dir, 1, &c)) return;
    double t0 = 0;
    int rc = 0;
    const int T = T_REAL_WIDTH, V = c.vocab;
    std::vector<int32_t> toks(T);
    for (auto &t : toks) t = rng_below(rng, V);
    std::vector<int32_t> rows;
    for (int t = 0; t < T; t += 4) rows.push_back(t);
    rows.push_back(T - 1);

    /* CPU: the selected rows only (the lm_head at 201,088 x 2880 is the expensive part). */
    static_assert(T_REAL_WIDTH <= GAP_MAX_T, "route_gaps holds every token");
    route_gaps gaps;
    memset(&gaps, 0, sizeof gaps);
    model_weights w;
    rc = weights_load(dir, &w);
    CHECK(rc == 0, "weights_load: %s", err_msg());
    std::vector<float> ref(rows.size() * (size_t)V);
    if (rc == 0) {
        t0 = now_seconds();
        cpu_model m;
        cpu_model_init(&m, &w);
        flat_kv f;
        f.kv_dim = c.n_kv_heads * c.head_dim;
        f.k.assign(c.n_layers, std::vector<float>((size_t)T * f.kv_dim));
        f.v.assign(c.n_layers, std::vector<float>((size_t)T * f.kv_dim));
        cpu_kv_view view = {flat_k, flat_v, &f};
        std::vector<int32_t> seq(T, 0);
        std::vector<int64_t> pos(T);
        for (int t = 0; t < T; t++) pos[t] = t;
        for (int t = 0; t < GAP_MAX_T; t++) gaps.gap[t] = INFINITY;
        m.route_hook = record_gaps, m.route_hook_ctx = &gaps;
        rc = cpu_forward_batch(&m, &view, T, toks.data(), seq.data(), pos.data(), (int)rows.size(),
                               rows.data(), ref.data());
        CHECK(rc == 0, "cpu forward: %s", err_msg());
        fprintf(stderr, "  CPU reference in %.1f s\n", now_seconds() - t0);
        weights_free(&w);
    }

    std::vector<float> got[2];
    const char *models[2] = {dir, "synthetic:20b:layers=2:seed=0"};
    /* the GPU's experts of the checkpoint's run (runner_forward.c's GPTOSS_ROUTE_DUMP), for the
     * rows whose error has an expert swap's size */
    char dump[] = "/tmp/gptoss-route-XXXXXX";
    const int dump_fd = mkstemp(dump);
    if (dump_fd >= 0) close(dump_fd);
    static int gpu_experts[GAP_MAX_L][GAP_MAX_T][GAP_MAX_K];
    memset(gpu_experts, 0xff, sizeof gpu_experts);
    for (int k = 0; k < 2; k++) {
        if (k == 0 && dump_fd >= 0) setenv("GPTOSS_ROUTE_DUMP", dump, 1);
        backend *be = make_cuda(models[k], 4, 0, 64);
        CHECK(be != NULL, "cuda backend %s", models[k]);
        if (!be) continue;
        driver d;
        drv_init(&d, &cuda_backend_ops, be, T, rng);
        std::vector<tf_seq> seqs(1);
        seqs[0].toks = toks, seqs[0].done = 0, seqs[0].swa_first = 0, seqs[0].slot = 0;
        CHECK(run_schedule(&d, seqs, POL_WHOLE, false, 0, rng) == 0, "run %s", models[k]);
        got[k] = seqs[0].logits;
        cuda_backend_ops.destroy(be);
        unsetenv("GPTOSS_ROUTE_DUMP");
    }
    if (dump_fd >= 0) { /* the first line of each (layer, token): the prompt's one step */
        FILE *f = fopen(dump, "r");
        char line[256];
        while (f && fgets(line, sizeof line, f)) {
            int l, t, n = 0, e[GAP_MAX_K];
            if (sscanf(line, "layer %d token %d:%n", &l, &t, &n) < 2 || l < 0 || l >= GAP_MAX_L ||
                t < 0 || t >= GAP_MAX_T || gpu_experts[l][t][0] != -1)
                continue;
            const char *p = line + n;
            for (int j = 0; j < c.experts_per_tok && j < GAP_MAX_K; j++) {
                int used = 0;
                if (sscanf(p, "%d%n", &e[j], &used) != 1) break;
                gpu_experts[l][t][j] = e[j], p += used;
            }
        }
        if (f) fclose(f);
        unlink(dump);
    }
    remove_dir(dir);
    if (got[0].empty() || rc) return;
    std::vector<float> sel(rows.size() * (size_t)V);
    for (size_t r = 0; r < rows.size(); r++)
        memcpy(sel.data() + r * V, got[0].data() + (size_t)rows[r] * V, (size_t)V * sizeof(float));
    /* Rows may be expert swaps: with random weights some token's 4th and 5th router logits nearly
     * tie, and the GPU's bf16 activations pick the other expert (seed 7271119250326059773: one of 11
     * rows moved the relative L2 over all rows to 5.9e-2 with top-1 still 11/11; seed
     * 12268047980063385605 had two such rows). So the L2 bound, the max bound and top-1 below apply
     * to the rows whose CPU router gaps are all at least NEAR_TIE (record_gaps): an excused row is
     * one the reference itself says is a coin toss, not the worst one whatever it is. The excused
     * rows stay bounded, looser (a swapped expert moved one row's max error to 0.267 of the largest
     * logit on the H200), and a real bug spoils many rows. */
    const int nr = (int)rows.size();
    cmp_stats s, rest;
    memset(&s, 0, sizeof s);
    memset(&rest, 0, sizeof rest);
    cmp_rows(&s, sel.data(), ref.data(), nr, V);
    int excused = 0, swapped = 0;
    const int K = c.experts_per_tok;
    for (int r = 0; r < nr; r++) {
        cmp_stats one;
        memset(&one, 0, sizeof one);
        cmp_rows(&one, sel.data() + (size_t)r * V, ref.data() + (size_t)r * V, 1, V);
        const float gap = gaps.gap[rows[r]];
        if (gap < NEAR_TIE) {
            excused++;
            fprintf(stderr,
                    "  20b x 2 layers: row %d (token %d) excused: router gap %.2e, alone "
                    "relL2 %.2e\n",
                    r, rows[r], gap, rel_l2(&one));
        } else if (K <= GAP_MAX_K && near_tie_swap(&gaps, gpu_experts, c.n_layers, K, rows[r])) {
            excused++, swapped++;
            fprintf(stderr,
                    "  20b x 2 layers: row %d (token %d) excused: the GPU swapped the CPU's k-th "
                    "expert for its runner-up at a gap under %.0e (smallest gap %.2e), alone "
                    "relL2 %.2e\n",
                    r, rows[r], SWAP_TIE, gap, rel_l2(&one));
        } else {
            cmp_rows(&rest, sel.data() + (size_t)r * V, ref.data() + (size_t)r * V, 1, V);
            /* every row's figures, so that a failing seed says which row and how near a tie */
            fprintf(stderr,
                    "  20b x 2 layers: row %d (token %d): router gap %.2e, alone relL2 %.2e, "
                    "top-1 %s (CPU margin %s)\n",
                    r, rows[r], gap, rel_l2(&one), one.agree ? "equal" : "DIFFERS",
                    one.clear ? "clear" : "near");
            /* a row off by more than the rounding: the CPU's experts, to hold against the GPU's
             * (GPTOSS_ROUTE_DUMP=FILE writes those: runner_forward.c) */
            if (rel_l2(&one) > 1e-2)
                for (int l = 0; l < c.n_layers && l < GAP_MAX_L; l++) {
                    fprintf(stderr, "    layer %d token %d: CPU experts", l, rows[r]);
                    for (int j = 0; j < c.experts_per_tok && j < GAP_MAX_K; j++)
                        fprintf(stderr, " %d", gaps.experts[l][rows[r]][j]);
                    fprintf(stderr, " (gap %.2e to %d), GPU", gaps.layer_gap[l][rows[r]],
                            gaps.runner_up[l][rows[r]]);
                    for (int j = 0; j < c.experts_per_tok && j < GAP_MAX_K; j++)
                        fprintf(stderr, " %d", gpu_experts[l][rows[r]][j]);
                    fprintf(stderr, "\n");
                }
        }
    }
    fprintf(stderr,
            "  20b x 2 layers: relL2 over all %d rows %.2e; %d excused (router gap < %.0e, or a "
            "near-tie swap the GPU made: %d)\n",
            nr, rel_l2(&s), excused, NEAR_TIE, swapped);
    /* at ~15 % a row, 7 or more of 11 near-tied is a ~2e-4 event: then the check has lost its
     * power, and says so */
    CHECK(nr - excused >= MIN_ROWS_LEFT,
          "20b x 2 layers: %d of %d rows have router near-ties: too few left", excused, nr);
    CHECK(s.max_diff <= 0.5 * s.max_ref, "20b x 2 layers: max|d|/max|logit| %.3e > 0.5",
          s.max_ref > 0 ? s.max_diff / s.max_ref : s.max_diff);
    /* The other rows: relative L2, max error and top-1 (all of them must agree) as before. */
    cmp_report("20b x 2 layers, 40-token prompt", &rest, 3e-2, 0.25);
    if (!got[1].empty()) {
        const bool same = got[1].size() == got[0].size() &&
                          !memcmp(got[0].data(), got[1].data(), got[0].size() * 4);
        CHECK(same, "synthetic:20b:layers=2 made on the GPU differs from the same checkpoint "
                    "loaded from disk");
        fprintf(stderr, "  GPU-made synthetic weights give bit-identical logits: %s\n",
                same ? "yes" : "NO");
        summary_add(3, "synthetic:20b == checkpoint: %s", same ? "yes" : "NO");
    }
}

/* ------------------------------------------------------------------------------------------------
 */
/* --digest N: issue 13's determinism evidence for PDL. The same steps N times, each on a fresh
 * backend (synthetic:20b:layers=2, GPU-made weights, CUDA graphs on): one 60-token sequence as a
 * 10-token prefill and decode steps of one token (the attention stream kernel and the router by
 * columns), then 8 sequences together the same way (decode steps of 8 tokens). Every run's logits
 * must hash alike (FNV-1a over their bytes), and the hash is printed: scripts/device runs the
 * program with GPTOSS_PDL=0 and =1 and compares the two lines. */
static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static void digest_runs(int repeats, uint64_t seed) {
    fprintf(stderr, "(digest) %d runs of the same steps, each on a fresh backend\n", repeats);
    uint64_t first = 0;
    int same = 0;
    for (int rep = 0; rep < repeats; rep++) {
        backend *be = make_cuda("synthetic:20b:layers=2:seed=0", 16, 0, 512);
        CHECK(be != NULL, "cuda backend synthetic:20b:layers=2");
        if (!be) return;
        rng_t rng; /* the same tokens and schedule every run */
        rng_seed(&rng, seed);
        driver d;
        drv_init(&d, &cuda_backend_ops, be, 512, &rng);
        const int V = cuda_backend_ops.config(be)->vocab;
        uint64_t h = 1469598103934665603ull;
        std::vector<tf_seq> one = make_seqs({60}, V, &rng, 0);
        CHECK(run_schedule(&d, one, POL_DECODE, false, 0, &rng) == 0, "digest: one sequence");
        std::vector<tf_seq> eight = make_seqs({12, 20, 31, 40, 47, 55, 60, 64}, V, &rng, 1);
        CHECK(run_schedule(&d, eight, POL_DECODE, true, 0, &rng) == 0, "digest: eight sequences");
        for (auto *v : {&one, &eight})
            for (auto &q : *v) h = fnv1a(h, q.logits.data(), q.logits.size() * sizeof(float));
        cuda_backend_stats st;
        cuda_backend_get_stats(be, &st);
        cuda_backend_ops.destroy(be);
        fprintf(stderr, "  run %d: %016llx (%ld graph replays)\n", rep, (unsigned long long)h,
                st.graph_replays);
        if (rep == 0) first = h;
        same += h == first;
    }
    CHECK(same == repeats, "digest: %d of %d runs hash like the first", same, repeats);
    printf("digest: %016llx over %d runs (GPTOSS_PDL=%s)\n", (unsigned long long)first, repeats,
           getenv("GPTOSS_PDL") ? getenv("GPTOSS_PDL") : "unset");
    summary_add(3, "digest %016llx, %d of %d runs alike", (unsigned long long)first, same, repeats);
}

/* ------------------------------------------------------------------------------------------------
 */
/* (d) the transformers fixture with head_dim 64 */

static const st_tensor *find_tensor(const st_file *f, const char *name) {
    for (int i = 0; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

static void fixture_tiny64(rng_t *rng) {
    /* On the GPU machine the binary runs from the repository root, not where it was built. */
    const char *root = getenv("GPTOSS_SOURCE_DIR");
    if (!root) root = access("tests/fixtures", R_OK) == 0 ? "." : GPTOSS_SOURCE_DIR;
    char dir[512], ref_path[512];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/tiny64", root);
    snprintf(ref_path, sizeof ref_path, "%s/tests/fixtures/tiny64_reference.safetensors", root);
    if (access(ref_path, R_OK) != 0 || access(dir, R_OK) != 0) {
        fprintf(stderr,
                "(d) SKIPPED: %s or %s is absent (the head_dim-64 transformers fixture is not made "
                "yet)\n",
                dir, ref_path);
        return;
    }
    fprintf(stderr, "(d) transformers fixture tiny64\n");
    st_file ref;
    if (st_file_open(ref_path, &ref) != 0) {
        CHECK(false, "reference: %s", err_msg());
        return;
    }
    backend *be = make_cuda(dir, 8, 0, 1024);
    CHECK(be != NULL, "cuda backend on %s", dir);
    if (!be) {
        st_file_close(&ref);
        return;
    }
    const int V = cuda_backend_ops.config(be)->vocab;
    driver d;
    drv_init(&d, &cuda_backend_ops, be, 2048, rng);
    cmp_stats s;
    memset(&s, 0, sizeof s);
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::vector<int64_t>> greedy;
    std::vector<std::vector<float>> margins;
    for (int p = 0;; p++) {
        char key[64];
        snprintf(key, sizeof key, "p%d.ids", p);
        const st_tensor *ids_t = find_tensor(&ref, key);
        if (!ids_t) break;
        snprintf(key, sizeof key, "p%d.logits", p);
        const st_tensor *lg_t = find_tensor(&ref, key);
        snprintf(key, sizeof key, "p%d.greedy", p);
        const st_tensor *gr_t = find_tensor(&ref, key);
        snprintf(key, sizeof key, "p%d.greedy_margin", p);
        const st_tensor *mg_t = find_tensor(&ref, key);
        if (!lg_t || !gr_t || lg_t->dtype != ST_F32 || ids_t->dtype != ST_I64 ||
            lg_t->shape[1] != V) {
            CHECK(false, "tiny64 reference: prompt %d entries missing or of the wrong type", p);
            break;
        }
        const int T = (int)ids_t->shape[0];
        std::vector<tf_seq> seqs(1);
        seqs[0].toks.resize(T);
        for (int t = 0; t < T; t++) seqs[0].toks[t] = (int32_t)((const int64_t *)ids_t->data)[t];
        seqs[0].done = 0, seqs[0].swa_first = 0, seqs[0].slot = 0;
        CHECK(run_schedule(&d, seqs, POL_WHOLE, false, 0, rng) == 0, "tiny64 prompt %d", p);
        cmp_rows(&s, seqs[0].logits.data(), (const float *)lg_t->data, T, V);
        prompts.push_back(seqs[0].toks);
        greedy.push_back(std::vector<int64_t>((const int64_t *)gr_t->data,
                                              (const int64_t *)gr_t->data + gr_t->shape[0]));
        margins.push_back(mg_t && mg_t->dtype == ST_F32
                              ? std::vector<float>((const float *)mg_t->data,
                                                   (const float *)mg_t->data + mg_t->shape[0])
                              : std::vector<float>(gr_t->shape[0], 1.0f));
    }
    cuda_backend_ops.destroy(be);
    if (g_kv_dtype == BACKEND_KV_FP8) {
        /* The e4m3 cache's error on top of bf16's, against fp32 transformers: reported, loosely
         * bounded; the greedy continuation is (d)'s bf16 business. */
        cmp_report("tiny64 vs transformers (fp8 KV)", &s, 0.1, 0.5, false, false);
        st_file_close(&ref);
        return;
    }
    cmp_report("tiny64 vs transformers", &s, 3e-2, 0.25);
    /* Greedy continuation through the engine. */
    sampling_params g = sampling_params_default();
    g.temperature = 0;
    for (size_t p = 0; p < prompts.size(); p++) {
        std::vector<std::vector<int32_t>> one{prompts[p]};
        std::vector<eng_out> o =
            run_engine(&cuda_backend_ops, dir, one, g, (int)greedy[p].size(), true);
        for (size_t i = 0; i < greedy[p].size() && i < o[0].toks.size(); i++) {
            if (o[0].toks[i] == greedy[p][i]) continue;
            CHECK(margins[p][i] <= MARGIN,
                  "tiny64 prompt %zu greedy token %zu: %d, transformers %lld (margin %.3f)", p, i,
                  o[0].toks[i], (long long)greedy[p][i], margins[p][i]);
            break;
        }
    }
    st_file_close(&ref);
}

int main(int argc, char **argv) {
    setenv("CUDA_MODULE_LOADING", "EAGER", 1); /* see cuda_backend.c: ranks wait on each other */
    setenv("GPTOSS_AR_TIMEOUT_S", "10", 0);    /* a TP step that hangs fails with a report */
    const uint64_t seed = gpu_test_seed(argc, argv);
    fprintf(stderr, "test_cuda_forward: seed %llu\n", (unsigned long long)seed);
    rng_t rng;
    rng_seed(&rng, seed);
    log_set_level(LOG_WARN);

    char dir[] = "/tmp/gptoss-cuda-small-XXXXXX";
    if (!mkdtemp(dir)) {
        fprintf(stderr, "mkdtemp failed\n");
        return 1;
    }
    model_config c;
    small_config(&c);
    int rc = synthetic_write(&c, dir, seed, 2);
    CHECK(rc == 0, "synthetic_write: %s", err_msg());
    if (gpu_test_flag(argc, argv, "--kv-accuracy")) {
        remove_dir(dir);
        kv_accuracy(&rng);
        g_kv_dtype = BACKEND_KV_FP8;
        fixture_tiny64(&rng);
        g_kv_dtype = BACKEND_KV_AUTO;
        return check_report("test_cuda_forward --kv-accuracy");
    }
    if (gpu_test_flag(argc, argv, "--tp")) {
        remove_dir(dir);
        tp_checks(&rng);
        return check_report("test_cuda_forward --tp");
    }
    if (gpu_test_flag(argc, argv, "--step-kernel")) {
        remove_dir(dir);
        if (gpu_test_flag(argc, argv, "--waits"))
            step_kernel_bench(0, false, true);
        else if (gpu_test_flag(argc, argv, "--bench"))
            for (int probe : {0, 1, 2, 3, 4, 5}) /* 3, 4: the blocks' probe, whole and stream
                                                    alone; 5 the wait probe */
                step_kernel_bench(probe > 2 && probe < 5 ? probe - 3
                                  : probe == 5           ? 0
                                                         : probe,
                                  probe == 3 || probe == 4, probe == 5);
        else
            step_kernel_checks();
        return check_report("test_cuda_forward --step-kernel");
    }
    if (gpu_test_flag(argc, argv, "--digest")) {
        remove_dir(dir);
        int n = 20;
        for (int i = 1; i + 1 < argc; i++)
            if (!strcmp(argv[i], "--digest")) n = atoi(argv[i + 1]);
        digest_runs(n > 0 ? n : 20, seed);
        return check_report("test_cuda_forward --digest");
    }
    if (gpu_test_flag(argc, argv, "--dep")) {
        remove_dir(dir);
        dep_checks();
        return check_report("test_cuda_forward --dep");
    }
    const bool fp8 = !gpu_test_flag(argc, argv, "--skip-fp8");
    model_weights w;
    if (rc == 0 && weights_load(dir, &w) == 0) {
        teacher_forced(dir, &w, &rng);
        if (fp8) fp8_checks(dir, &w, &rng);
        weights_free(&w);
        batched_vs_alone(dir, &rng);
        engine_checks(dir, &rng);
    } else {
        CHECK(false, "weights_load: %s", err_msg());
    }
    remove_dir(dir);

    if (!gpu_test_flag(argc, argv, "--skip-real")) real_width(&rng);
    if (!gpu_test_flag(argc, argv, "--skip-tp")) tp_checks(&rng), dep_checks();
    step_kernel_checks();
    fixture_tiny64(&rng);
    if (fp8) {
        g_kv_dtype = BACKEND_KV_FP8;
        fixture_tiny64(&rng);
        g_kv_dtype = BACKEND_KV_AUTO;
    }
    for (int i = 0; i < 4; i++)
        if (g_summary[i][0]) fprintf(stderr, "summary: %s\n", g_summary[i]);
    return check_report("test_cuda_forward");
}
