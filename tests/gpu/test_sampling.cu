/* The GPU sampling kernels (src/backend/cuda/sampling.cu, sampling_launch) against the host sampler
 * (step/sampler.c): random and pathological logits rows (ties, NaN, +-inf, -0, thousands of equal
 * maxima, the real vocabulary of 201,088) one row a launch, greedy and temperature rows with and
 * without top-K lists. Checks, per row: the same greedy token, the same temperature draw for the same
 * (seed, position) (a few may differ where u * z lies within rounding of a boundary, sampling.h), the
 * slot's last token updated, the logprob and the top-K ids and logprobs (sampled distribution and
 * prompt) within 1e-4; the output record poisoned with NaN first.
 * Structured output's masks (sampling_mask_launch): the masked rows equal step_mask_apply's bit
 * for bit (sparse, dense and single-token masks, a mask shorter than the vocabulary, rows without a
 * mask untouched), and sampling the masked rows gives sampler.c's token, always an allowed one.
 * --bench times launches of 1 … 256 rows of the real vocabulary: plain greedy (the fast path),
 * temperature draws, and temperature with 20 top logprobs. --seed N reproduces a run. */
#include "gpu_check.h"

/* sampling_params.h initialises with {0}, which g++ -Wextra (C++) flags; the headers are C. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
extern "C" {
#include "step/sampler.h"
#include "step/step_masks.h"
}
#pragma GCC diagnostic pop
#include "backend/cuda/sampling.h"

#include <algorithm>
#include <vector>

enum { VOCAB = 201088 };

typedef struct {
    int V;
    std::vector<float> x;
    gpu_row row;
} samp_case;

static std::vector<samp_case> make_cases(rng_t *rng) {
    std::vector<samp_case> cases;
    const int Vs[] = {1000, 4099, VOCAB};
    for (int vi = 0; vi < 3; vi++)
        for (int k = 0; k < (vi == 2 ? 12 : 40); k++) {
            samp_case c;
            c.V = Vs[vi];
            c.x.resize(c.V);
            const float spread = 0.5f + 4.0f * rng_uniform01(rng_next(rng));
            for (auto &v : c.x) v = spread * rng_normal(rng);
            if (k % 5 == 1) /* coarse values: many exact ties */
                for (auto &v : c.x) v = roundf(v * 2.0f) / 2.0f;
            memset(&c.row, 0, sizeof c.row);
            c.row.mode = k % 3 == 0 ? GPU_ROW_GREEDY : GPU_ROW_TEMP;
            const float temps[] = {0.3f, 0.7f, 1.0f, 1.5f, 3.0f};
            c.row.temperature = temps[k % 5];
            c.row.lp_k = k % 4 == 0 ? 0 : (k % 4 == 1 ? 1 : k % 4 == 2 ? 5 : 20);
            c.row.prompt_k = k % 7 == 0 ? 20 : k % 7 == 3 ? 3 : 0;
            /* Echo scoring: the prompt token the row predicts, anywhere in the vocabulary. */
            c.row.prompt_target = k % 2 ? (int32_t)rng_below(rng, (uint64_t)c.V) : -1;
            c.row.seed = rng_next(rng);
            c.row.output_pos = (uint64_t)rng_below(rng, 5000);
            cases.push_back(c);
        }
    /* Pathological rows (V = 333). */
    for (int k = 0; k < 14; k++) {
        samp_case c;
        c.V = 333;
        c.x.resize(c.V);
        for (auto &v : c.x) v = rng_normal(rng);
        switch (k % 7) {
        case 0:
            std::fill(c.x.begin(), c.x.end(), 1.25f);
            break; /* all equal */
        case 1:
            c.x[17] = NAN, c.x[200] = INFINITY, c.x[5] = NAN;
            break; /* one +inf among NaNs */
        case 2:
            c.x[40] = INFINITY, c.x[300] = INFINITY;
            break; /* two +inf */
        case 3:
            std::fill(c.x.begin(), c.x.end(), -INFINITY);
            break; /* nothing possible */
        case 4:
            std::fill(c.x.begin(), c.x.end(), NAN);
            break;
        case 5:
            for (auto &v : c.x) v = -fabsf(v);
            c.x[9] = -0.0f, c.x[3] = 0.0f;
            break; /* -0 ties +0 */
        default:
            c.x[100] = -INFINITY, c.x[101] = -INFINITY;
            break;
        }
        memset(&c.row, 0, sizeof c.row);
        c.row.mode = k < 7 ? GPU_ROW_GREEDY : GPU_ROW_TEMP;
        c.row.temperature = 0.9f;
        c.row.lp_k = 4, c.row.prompt_k = 2;
        c.row.seed = rng_next(rng), c.row.output_pos = (uint64_t)k;
        cases.push_back(c);
    }
    /* Thousands of equal maxima: the top-K gather overflows shared memory and takes the slow path. */
    {
        samp_case c;
        c.V = VOCAB;
        c.x.resize(c.V);
        for (int i = 0; i < c.V; i++) c.x[i] = i % 50 == 0 ? 7.0f : rng_normal(rng);
        memset(&c.row, 0, sizeof c.row);
        c.row.mode = GPU_ROW_TEMP, c.row.temperature = 1.0f, c.row.lp_k = 20, c.row.prompt_k = 20;
        c.row.seed = 99, c.row.output_pos = 3;
        cases.push_back(c);
    }
    return cases;
}

/* What sampler.c draws for the row a descriptor describes: the token, its logprob and top-K in so
 * (ids/lps hold the lists, GPU_TOPK_MAX + 1 entries). */
static int32_t cpu_draw(const float *x, int V, const gpu_row &row, std::vector<int32_t> &ids,
                        std::vector<float> &lps, sample_out *so) {
    sampling_params p = sampling_params_default();
    p.temperature = row.mode == GPU_ROW_GREEDY ? 0.0f : row.temperature;
    p.logprobs = row.lp_k;
    ids.assign(GPU_TOPK_MAX + 1, 0);
    lps.assign(GPU_TOPK_MAX + 1, 0.0f);
    memset(so, 0, sizeof *so);
    so->top_ids = ids.data(), so->top_logprobs = lps.data();
    return sampler_draw(x, V, &p, row.seed, (int64_t)row.output_pos, so);
}

static void check_sampling(rng_t *rng) {
    std::vector<samp_case> cases = make_cases(rng);
    int n_draw = 0, draw_mismatch = 0;
    for (size_t ci = 0; ci < cases.size(); ci++) {
        samp_case &c = cases[ci];
        c.row.slot = 0;
        float *d_x = (float *)gpu_upload(c.x.data(), c.x.size() * sizeof(float));
        gpu_row *d_row = (gpu_row *)gpu_upload(&c.row, sizeof c.row);
        gpu_row_out *d_out = (gpu_row_out *)gpu_alloc(sizeof(gpu_row_out));
        int32_t *d_slot = (int32_t *)gpu_alloc(sizeof(int32_t));
        const size_t ws_bytes = sampling_workspace_bytes(1);
        void *d_ws = gpu_alloc(ws_bytes);
        CUDA_CHECK(cudaMemset(d_ws, 0, ws_bytes));
        gpu_poison(d_out, sizeof(gpu_row_out));
        CUDA_CHECK(cudaMemset(d_slot, 0xff, sizeof(int32_t)));
        CUDA_CHECK(sampling_launch(d_x, c.V, d_row, 1, d_out, d_slot, 1, d_ws, 1, 0));
        CUDA_CHECK(cudaDeviceSynchronize());
        gpu_row_out o;
        int32_t slot_tok;
        CUDA_CHECK(cudaMemcpy(&o, d_out, sizeof o, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(&slot_tok, d_slot, sizeof slot_tok, cudaMemcpyDeviceToHost));
        cudaFree(d_x), cudaFree(d_row), cudaFree(d_out), cudaFree(d_slot), cudaFree(d_ws);

        std::vector<int32_t> ids;
        std::vector<float> lps;
        sample_out so;
        const int32_t tok = cpu_draw(c.x.data(), c.V, c.row, ids, lps, &so);
        const bool draw = c.row.mode == GPU_ROW_TEMP;
        n_draw += draw;
        if (o.token != tok) {
            if (draw) draw_mismatch++;
            CHECK(draw, "case %zu (V %d, greedy): GPU token %d, CPU %d", ci, c.V, o.token, tok);
            fprintf(stderr, "  case %zu (V %d, T %.2f): GPU drew %d, CPU %d\n", ci, c.V,
                    c.row.temperature, o.token, tok);
            continue;
        }
        CHECK(slot_tok == tok, "case %zu: slot_last %d, token %d", ci, slot_tok, tok);
        const bool lp_ok = (isinf(so.logprob) && o.logprob == so.logprob) ||
                           fabsf(o.logprob - so.logprob) <= 1e-4f;
        CHECK(lp_ok, "case %zu: logprob %.7g vs %.7g", ci, o.logprob, so.logprob);
        CHECK(o.n_top == so.n_top, "case %zu: n_top %d vs %d", ci, o.n_top, so.n_top);
        for (int j = 0; j < so.n_top && j < o.n_top; j++) {
            CHECK(o.top_ids[j] == ids[j], "case %zu: top[%d] id %d vs %d", ci, j, o.top_ids[j],
                  ids[j]);
            const bool ok =
                (isinf(lps[j]) && o.top_lp[j] == lps[j]) || fabsf(o.top_lp[j] - lps[j]) <= 1e-4f;
            CHECK(ok, "case %zu: top[%d] logprob %.7g vs %.7g", ci, j, o.top_lp[j], lps[j]);
        }
        if (c.row.prompt_k > 0 && c.row.prompt_target >= 0) {
            const float want = sampler_logprob_of(c.x.data(), c.V, 0, c.row.prompt_target);
            const bool ok = (isinf(want) && o.prompt_target_lp == want) ||
                            (isnan(want) && isnan(o.prompt_target_lp)) ||
                            fabsf(o.prompt_target_lp - want) <= 1e-4f;
            CHECK(ok, "case %zu: prompt target %d logprob %.7g vs %.7g", ci, c.row.prompt_target,
                  o.prompt_target_lp, want);
        }
        if (c.row.prompt_k > 0) {
            const int pk = std::min(c.row.prompt_k, c.V);
            sampler_top_logprobs(c.x.data(), c.V, 0, pk, ids.data(), lps.data());
            CHECK(o.n_prompt == pk, "case %zu: n_prompt %d vs %d", ci, o.n_prompt, pk);
            for (int j = 0; j < pk; j++) {
                CHECK(o.prompt_ids[j] == ids[j], "case %zu: prompt top[%d] id %d vs %d", ci, j,
                      o.prompt_ids[j], ids[j]);
                const bool ok = (isinf(lps[j]) && o.prompt_lp[j] == lps[j]) ||
                                fabsf(o.prompt_lp[j] - lps[j]) <= 1e-4f;
                CHECK(ok, "case %zu: prompt top[%d] logprob %.7g vs %.7g", ci, j, o.prompt_lp[j],
                      lps[j]);
            }
        }
    }
    /* A draw may differ where u * z lies within float rounding of a boundary (expf to an ulp). */
    printf("sampling: %zu rows, %d draws, %d draws differ from sampler.c\n", cases.size(), n_draw,
           draw_mismatch);
    CHECK(draw_mismatch <= n_draw / 50, "%d of %d temperature draws differ from sampler.c",
          draw_mismatch, n_draw);
}

/* ---- structured output's masks ---- */

static void check_masks(rng_t *rng) {
    const int Vs[] = {4099, VOCAB};
    int n_checked = 0, n_draw = 0, draw_mismatch = 0;
    for (int vi = 0; vi < 2; vi++) {
        const int V = Vs[vi], R = 8;
        /* vi == 0: a mask one word short of the vocabulary (tokens past it are disallowed) */
        const int words = vi == 0 ? (V + 31) / 32 - 1 : (V + 31) / 32;
        std::vector<float> x((size_t)R * V);
        for (auto &v : x) v = 2.0f * rng_normal(rng);
        std::vector<uint32_t> masks((size_t)R * words, 0u);
        std::vector<int32_t> mask_of_row(R);
        for (int r = 0; r < R; r++) {
            uint32_t *m = masks.data() + (size_t)r * words;
            switch (r % 4) {
            case 0: /* sparse: a few dozen tokens, as a JSON grammar allows */
                for (int k = 0; k < 40; k++) {
                    const int t = (int)rng_below(rng, (uint64_t)words * 32);
                    m[t >> 5] |= 1u << (t & 31);
                }
                break;
            case 1: /* dense: most tokens */
                for (int w = 0; w < words; w++) m[w] = (uint32_t)rng_next(rng) | 0x11111111u;
                break;
            case 2: { /* one token */
                const int t = (int)rng_below(rng, (uint64_t)std::min(V, words * 32));
                m[t >> 5] = 1u << (t & 31);
                break;
            }
            default: /* none: the row is sampled as it is */
                break;
            }
            /* rows 3 and 7 have no mask; the mask tables are used out of order */
            mask_of_row[r] = r % 4 == 3 ? -1 : (r + 4) % R;
        }
        /* mask_of_row points at another row's slot: move the masks there */
        std::vector<uint32_t> table((size_t)R * words, 0u);
        for (int r = 0; r < R; r++)
            if (mask_of_row[r] >= 0)
                memcpy(table.data() + (size_t)mask_of_row[r] * words,
                       masks.data() + (size_t)r * words, (size_t)words * 4);
        float *d_x = (float *)gpu_upload(x.data(), x.size() * sizeof(float));
        int32_t *d_map = (int32_t *)gpu_upload(mask_of_row.data(), R * sizeof(int32_t));
        uint32_t *d_masks = (uint32_t *)gpu_upload(table.data(), table.size() * 4);
        CUDA_CHECK(sampling_mask_launch(d_x, V, R, d_map, d_masks, words, 0));
        CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<float> got(x.size());
        CUDA_CHECK(cudaMemcpy(got.data(), d_x, got.size() * sizeof(float), cudaMemcpyDeviceToHost));

        /* The masked rows, sampled: greedy rows 0-3, temperature rows 4-7. */
        std::vector<gpu_row> rows(R);
        for (int r = 0; r < R; r++) {
            memset(&rows[r], 0, sizeof rows[r]);
            rows[r].tok = r, rows[r].slot = r;
            rows[r].mode = r < 4 ? GPU_ROW_GREEDY : GPU_ROW_TEMP;
            rows[r].temperature = 0.8f, rows[r].lp_k = r % 2 ? 3 : 0;
            rows[r].seed = rng_next(rng), rows[r].output_pos = (uint64_t)r;
        }
        gpu_row *d_rows = (gpu_row *)gpu_upload(rows.data(), R * sizeof(gpu_row));
        gpu_row_out *d_out = (gpu_row_out *)gpu_alloc(R * sizeof(gpu_row_out));
        int32_t *d_slot = (int32_t *)gpu_alloc(R * sizeof(int32_t));
        const size_t ws_bytes = sampling_workspace_bytes(R);
        void *d_ws = gpu_alloc(ws_bytes);
        CUDA_CHECK(cudaMemset(d_ws, 0, ws_bytes));
        gpu_poison(d_out, R * sizeof(gpu_row_out));
        CUDA_CHECK(sampling_launch(d_x, V, d_rows, R, d_out, d_slot, R, d_ws, R, 0));
        CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<gpu_row_out> outs(R);
        CUDA_CHECK(cudaMemcpy(outs.data(), d_out, R * sizeof(gpu_row_out), cudaMemcpyDeviceToHost));
        cudaFree(d_x), cudaFree(d_map), cudaFree(d_masks), cudaFree(d_rows), cudaFree(d_out),
            cudaFree(d_slot), cudaFree(d_ws);

        for (int r = 0; r < R; r++) {
            float *want = x.data() + (size_t)r * V;
            const uint32_t *m = masks.data() + (size_t)r * words;
            if (mask_of_row[r] >= 0) step_mask_apply(want, V, m, (size_t)words);
            CHECK(!memcmp(want, got.data() + (size_t)r * V, (size_t)V * sizeof(float)),
                  "V %d row %d (mask %d): the masked logits differ from step_mask_apply's", V, r,
                  mask_of_row[r]);
            std::vector<int32_t> ids;
            std::vector<float> lps;
            sample_out so;
            const int32_t tok = cpu_draw(want, V, rows[r], ids, lps, &so);
            const int32_t gt = outs[r].token;
            const bool allowed =
                gt >= 0 && gt < V &&
                (mask_of_row[r] < 0 || (gt < words * 32 && (m[gt >> 5] >> (gt & 31) & 1u)));
            CHECK(allowed, "V %d row %d: the GPU sampled token %d, which its mask does not allow",
                  V, r, gt);
            const bool draw = rows[r].mode == GPU_ROW_TEMP;
            n_draw += draw;
            if (gt != tok) {
                if (draw) draw_mismatch++;
                CHECK(draw, "V %d row %d (greedy): GPU token %d, CPU %d", V, r, gt, tok);
                continue;
            }
            const bool lp_ok = (isinf(so.logprob) && outs[r].logprob == so.logprob) ||
                               fabsf(outs[r].logprob - so.logprob) <= 1e-4f;
            CHECK(lp_ok, "V %d row %d: logprob %.7g vs %.7g", V, r, outs[r].logprob, so.logprob);
            n_checked++;
        }
    }
    printf("masks: %d masked rows sampled as sampler.c does, %d of %d draws differ\n", n_checked,
           draw_mismatch, n_draw);
    CHECK(draw_mismatch <= 1, "%d of %d masked temperature draws differ from sampler.c",
          draw_mismatch, n_draw);
}

/* ---- --bench ---- */

/* One launch of the first n_rows rows of x (the real vocabulary), all of one kind, timed by graph
 * replay. The achieved bandwidth counts one read of the logits (the fast path's only pass; the
 * others read a row two or three times). */
static void bench_case(const char *what, const float *d_x, int mode, int lp_k, int n_rows,
                       uint64_t seed, cudaStream_t st) {
    std::vector<gpu_row> rows(n_rows);
    for (int r = 0; r < n_rows; r++) {
        memset(&rows[r], 0, sizeof rows[r]);
        rows[r].tok = r, rows[r].mode = mode, rows[r].temperature = 0.8f, rows[r].lp_k = lp_k,
        rows[r].slot = r;
        rows[r].seed = seed + r, rows[r].output_pos = 7;
    }
    gpu_row *d_rows = (gpu_row *)gpu_upload(rows.data(), rows.size() * sizeof(gpu_row));
    gpu_row_out *d_out = (gpu_row_out *)gpu_alloc((size_t)n_rows * sizeof(gpu_row_out));
    int32_t *d_slot = (int32_t *)gpu_alloc((size_t)n_rows * sizeof(int32_t));
    const size_t ws_bytes = sampling_workspace_bytes(n_rows);
    void *d_ws = gpu_alloc(ws_bytes);
    CUDA_CHECK(cudaMemset(d_ws, 0, ws_bytes));

    const int reps = 10;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int r = 0; r < reps; r++)
        CUDA_CHECK(
            sampling_launch(d_x, VOCAB, d_rows, n_rows, d_out, d_slot, n_rows, d_ws, n_rows, st));
    CUDA_CHECK(cudaStreamEndCapture(st, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    const float us = gpu_time_graph_us(exec, st, reps, 15);
    const double gbps = (double)n_rows * VOCAB * sizeof(float) / (us * 1e-6) / 1e9;
    printf("| sampling %s, %d rows | %.2f | %.0f GB/s | %.2f |\n", what, n_rows, us, gbps,
           gbps / H200_GBPS);
    fflush(stdout);
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUDA_CHECK(cudaFree(d_rows));
    CUDA_CHECK(cudaFree(d_out));
    CUDA_CHECK(cudaFree(d_slot));
    CUDA_CHECK(cudaFree(d_ws));
}

static void bench(uint64_t seed, rng_t *rng) {
    enum { MAX_ROWS = 256 };
    const size_t n = (size_t)MAX_ROWS * VOCAB;
    std::vector<float> x(n);
    for (auto &v : x) v = 3.0f * rng_normal(rng);
    float *d_x = (float *)gpu_upload(x.data(), n * sizeof(float));
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    printf("| case | time (us) | achieved | fraction of ceiling |\n| --- | --- | --- | --- |\n");
    const int rows[] = {1, 8, 64, MAX_ROWS};
    for (int i = 0; i < 4; i++) bench_case("greedy", d_x, GPU_ROW_GREEDY, 0, rows[i], seed + i, st);
    for (int i = 0; i < 4; i++)
        bench_case("temperature", d_x, GPU_ROW_TEMP, 0, rows[i], seed + 10 + i, st);
    for (int i = 0; i < 4; i++)
        bench_case("temperature + top-20", d_x, GPU_ROW_TEMP, 20, rows[i], seed + 20 + i, st);
    CUDA_CHECK(cudaStreamDestroy(st));
    CUDA_CHECK(cudaFree(d_x));
}

int main(int argc, char **argv) {
    const uint64_t seed = gpu_test_seed(argc, argv);
    printf("test_sampling: seed %llu\n", (unsigned long long)seed);
    rng_t rng;
    rng_seed(&rng, seed);
    check_sampling(&rng);
    check_masks(&rng);
    if (gpu_test_flag(argc, argv, "--bench")) bench(seed, &rng);
    return check_report("test_sampling");
}
