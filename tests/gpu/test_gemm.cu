/* The dense bf16 GEMM (gemm.h) against the CPU reference cpu_linear, at the model's shapes:
 * QKV 2880→5120, O 4096→2880, router 2880→32 and →128 (fp32 logits), lm_head 2880→201088 (fp32, no
 * bias), for M = 1, 3, 8, 64, 129, 300, 2048 tokens, through the automatic path and each forced path.
 * Outputs are poisoned with NaN before every launch; every element must come back finite, and the
 * relative error ‖y − ref‖/‖ref‖ must be within bf16 bounds (the reference sees the same bf16 inputs).
 * For large outputs the reference covers a random subset of rows (all tokens). The skinny path must
 * have run at least once with many K splits whose count is not a multiple of 8 (the router: S = 45),
 * so that the split-K fix-up's batches of 8 loads and its partial last batch are both exercised.
 *
 * --bench: median CUDA-event times at M = 1, 8, 64, 256, 4096 with weights rotated over enough copies
 * to defeat the 60 MB L2; one markdown row per case. */
#include "moe_test_util.h"

extern "C" {
#include "backend/cpu/ops.h"
}
#include "backend/cuda/gemm.h"

typedef struct {
    const char *name;
    int N, K;
    enum gemm_out out;
    int has_bias;
} shape;

static const shape SHAPES[] = {
    {"qkv", 5120, 2880, GEMM_OUT_BF16, 1},      {"o", 2880, 4096, GEMM_OUT_BF16, 1},
    {"router32", 32, 2880, GEMM_OUT_F32, 1},    {"router128", 128, 2880, GEMM_OUT_F32, 1},
    {"lm_head", 201088, 2880, GEMM_OUT_F32, 0},
};

static const char *path_name(enum gemm_path p) {
    return p == GEMM_PATH_AUTO ? "auto" : p == GEMM_PATH_SKINNY ? "skinny" : "cublas";
}

/* Skinny launches checked so far whose split count S > 8 is not a multiple of 8. */
static int g_skinny_odd_splits;

/* One correctness case: uploads nothing (buffers given), runs the path, compares. */
static void check_case(gemm_ctx *ctx, cudaStream_t st, const shape *sh, int M, enum gemm_path path,
                       const uint16_t *d_x, const uint16_t *d_w, const uint16_t *d_b, void *d_y,
                       const float *ref, const std::vector<int> &rows) {
    const size_t esz = sh->out == GEMM_OUT_F32 ? 4 : 2;
    const size_t n_out = (size_t)M * sh->N;
    tu_poison(d_y, n_out * esz, st);
    cudaError_t e = gemm_bf16_path(ctx, d_x, M, sh->K, d_w, sh->N, d_b, d_y, sh->out, path, st);
    if (path == GEMM_PATH_SKINNY && e == cudaErrorNotSupported)
        return; /* shape outside the kernel's limits */
    CHECK(e == cudaSuccess, "%s M=%d %s: launch: %s", sh->name, M, path_name(path),
          cudaGetErrorString(e));
    if (e != cudaSuccess) return;
    CUDA_CHECK(cudaStreamSynchronize(st));
    CUDA_CHECK(cudaGetLastError());

    std::vector<float> y(n_out);
    if (sh->out == GEMM_OUT_F32) {
        tu_download(y.data(), (const float *)d_y, n_out);
    } else {
        std::vector<uint16_t> yb(n_out);
        tu_download(yb.data(), (const uint16_t *)d_y, n_out);
        for (size_t i = 0; i < n_out; i++) y[i] = bf16_to_f32(yb[i]);
    }
    const size_t bad = tu_count_nonfinite_f32(y.data(), n_out);
    CHECK(bad == 0, "%s M=%d %s: %zu of %zu outputs not finite (unwritten or NaN)", sh->name, M,
          path_name(path), bad, n_out);

    const size_t nr = rows.size();
    std::vector<float> got((size_t)M * nr);
    for (int m = 0; m < M; m++)
        for (size_t j = 0; j < nr; j++) got[(size_t)m * nr + j] = y[(size_t)m * sh->N + rows[j]];
    const double err = tu_rel_err(got.data(), ref, got.size());
    const double tol = sh->out == GEMM_OUT_F32 ? 1e-3 : 1e-2;
    CHECK(err <= tol, "%s M=%d %s: relative error %.3g > %.1g", sh->name, M, path_name(path), err,
          tol);
    int S = 0;
    const int autop = gemm_plan_describe(ctx, M, sh->K, sh->N, &S, NULL, NULL);
    const bool skinny =
        path == GEMM_PATH_SKINNY || (path == GEMM_PATH_AUTO && autop == GEMM_PATH_SKINNY);
    if (skinny && err <= tol && S > 8 && S % 8 != 0) g_skinny_odd_splits++;
    char splits[32] = "";
    if (skinny) snprintf(splits, sizeof splits, " (skinny, S=%d)", S);
    fprintf(stderr, "  %-9s M=%-4d %-6s rel err %.2e%s\n", sh->name, M, path_name(path), err,
            splits);
}

static void test_shape(gemm_ctx *ctx, cudaStream_t st, const shape *sh) {
    static const int MS[] = {1,   3,   8,   64,
                             129, 300, 2048}; /* 129: three token chunks, the last of one token */
    const int maxM = 2048;
    const size_t wn = (size_t)sh->N * sh->K;
    std::vector<uint16_t> w(wn), b(sh->N), x((size_t)maxM * sh->K);
    std::vector<float> xf((size_t)maxM * sh->K);
    tu_fill_bf16(w.data(), NULL, wn, -0.05f, 0.05f);
    tu_fill_bf16(b.data(), NULL, sh->N, -0.5f, 0.5f);
    tu_fill_bf16(x.data(), xf.data(), x.size(), -1.0f, 1.0f);
    uint16_t *d_w = tu_dev_upload(w.data(), wn), *d_b = tu_dev_upload(b.data(), (size_t)sh->N);
    uint16_t *d_x = tu_dev_upload(x.data(), x.size());
    void *d_y = tu_dev_alloc<float>((size_t)maxM * sh->N);

    for (int M : MS) {
        /* Reference rows: all when small, else the first and last 16 and a random 480. */
        std::vector<int> rows;
        if ((size_t)M * sh->N <= ((size_t)1 << 20)) {
            for (int r = 0; r < sh->N; r++) rows.push_back(r);
        } else {
            for (int r = 0; r < 16; r++) rows.push_back(r), rows.push_back(sh->N - 1 - r);
            for (int i = 0; i < 480; i++)
                rows.push_back((int)(rng_next(&tu_rng) % (uint64_t)sh->N));
        }
        const int nr = (int)rows.size();
        std::vector<uint16_t> wsub((size_t)nr * sh->K), bsub(nr);
        for (int j = 0; j < nr; j++) {
            memcpy(&wsub[(size_t)j * sh->K], &w[(size_t)rows[j] * sh->K], (size_t)sh->K * 2);
            bsub[j] = b[rows[j]];
        }
        dense_ref W = {wsub.data(), ST_BF16}, B = {bsub.data(), ST_BF16};
        std::vector<float> ref((size_t)M * nr);
        cpu_linear(xf.data(), M, sh->K, W, sh->has_bias ? &B : NULL, nr, ref.data());

        const uint16_t *bias = sh->has_bias ? d_b : NULL;
        check_case(ctx, st, sh, M, GEMM_PATH_AUTO, d_x, d_w, bias, d_y, ref.data(), rows);
        if (M <= 256)
            check_case(ctx, st, sh, M, GEMM_PATH_SKINNY, d_x, d_w, bias, d_y, ref.data(), rows);
        if (M <= 64 || M == 2048)
            check_case(ctx, st, sh, M, GEMM_PATH_CUBLAS, d_x, d_w, bias, d_y, ref.data(), rows);
    }
    /* Same inputs, same bits: the split-K reduction is ordered. */
    {
        const int M = 8;
        const size_t n = (size_t)M * sh->N, esz = sh->out == GEMM_OUT_F32 ? 4 : 2;
        std::vector<uint8_t> y1(n * esz), y2(n * esz);
        const uint16_t *bias = sh->has_bias ? d_b : NULL;
        CUDA_CHECK(gemm_bf16(ctx, d_x, M, sh->K, d_w, sh->N, bias, d_y, sh->out, st));
        CUDA_CHECK(cudaMemcpyAsync(y1.data(), d_y, n * esz, cudaMemcpyDeviceToHost, st));
        tu_poison(d_y, n * esz, st);
        CUDA_CHECK(gemm_bf16(ctx, d_x, M, sh->K, d_w, sh->N, bias, d_y, sh->out, st));
        CUDA_CHECK(cudaMemcpyAsync(y2.data(), d_y, n * esz, cudaMemcpyDeviceToHost, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
        CHECK(!memcmp(y1.data(), y2.data(), n * esz), "%s: two runs differ (non-deterministic)",
              sh->name);
    }
    CUDA_CHECK(cudaFree(d_w));
    CUDA_CHECK(cudaFree(d_b));
    CUDA_CHECK(cudaFree(d_x));
    CUDA_CHECK(cudaFree(d_y));
}

static void bench(gemm_ctx *ctx, cudaStream_t st) {
    static const int MS[] = {1, 2, 8, 16, 64, 256, 4096};
    static const shape BS[] = {
        {"qkv", 5120, 2880, GEMM_OUT_BF16, 1},
        {"o", 2880, 4096, GEMM_OUT_BF16, 1},
        {"router128", 128, 2880, GEMM_OUT_F32, 1},
        {"lm_head", 201088, 2880, GEMM_OUT_F32, 0},
    };
    tu_bench_header();
    for (const shape &sh : BS) {
        const size_t wn = (size_t)sh.N * sh.K, wbytes = wn * 2;
        /* Enough copies that consecutive repetitions never find their weights in L2. */
        int copies = (int)((256u << 20) / wbytes) + 2;
        if (copies > 16) copies = 16;
        std::vector<uint16_t *> dw(copies);
        std::vector<uint16_t> h(wn);
        tu_fill_bf16(h.data(), NULL, wn, -0.05f, 0.05f);
        for (int c = 0; c < copies; c++) dw[c] = tu_dev_upload(h.data(), wn);
        std::vector<uint16_t> hb(sh.N), hx((size_t)4096 * sh.K);
        tu_fill_bf16(hb.data(), NULL, hb.size(), -0.5f, 0.5f);
        tu_fill_bf16(hx.data(), NULL, hx.size(), -1.0f, 1.0f);
        uint16_t *db = tu_dev_upload(hb.data(), hb.size()),
                 *dx = tu_dev_upload(hx.data(), hx.size());
        void *dy = tu_dev_alloc<float>((size_t)4096 * sh.N);
        const uint16_t *bias = sh.has_bias ? db : NULL;
        for (int M : MS) {
            for (int pi = 0; pi < 3; pi++) {
                const enum gemm_path path = (enum gemm_path)pi;
                int S = 0, Z = 0, tpw = 0;
                const int autop = gemm_plan_describe(ctx, M, sh.K, sh.N, &S, &Z, &tpw);
                if (path == GEMM_PATH_SKINNY && (autop == GEMM_PATH_SKINNY || S == 0))
                    continue; /* = auto, or unsupported */
                if (path == GEMM_PATH_CUBLAS && autop == GEMM_PATH_CUBLAS) continue;
                const int reps = M >= 1024 || sh.N > 100000 ? 20 : 100;
                bool ok = true;
                const double us = tu_time_us(st, 3, reps, [&](int i) {
                    cudaError_t e = gemm_bf16_path(ctx, dx, M, sh.K, dw[i % copies], sh.N, bias, dy,
                                                   sh.out, path, st);
                    if (e != cudaSuccess) ok = false;
                });
                if (!ok) continue;
                char name[160];
                const int used = path == GEMM_PATH_AUTO ? autop : (int)path;
                if (used == GEMM_PATH_SKINNY)
                    snprintf(name, sizeof name, "gemm %s M=%d %s (skinny S=%d Z=%d tpw=%d)",
                             sh.name, M, path_name(path), S, Z, tpw);
                else
                    snprintf(name, sizeof name, "gemm %s M=%d %s (cublasLt)", sh.name, M,
                             path_name(path));
                const double bytes = (double)wbytes + (double)M * sh.K * 2 +
                                     (double)M * sh.N * (sh.out == GEMM_OUT_F32 ? 4 : 2);
                const double flops = 2.0 * M * sh.N * sh.K;
                tu_bench_row(name, us, bytes, M >= 64 ? flops : 0);
            }
        }
        for (int c = 0; c < copies; c++) CUDA_CHECK(cudaFree(dw[c]));
        CUDA_CHECK(cudaFree(db));
        CUDA_CHECK(cudaFree(dx));
        CUDA_CHECK(cudaFree(dy));
    }
}

int main(int argc, char **argv) {
    tu_init("test_gemm");
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreate(&st));
    gemm_ctx *ctx = NULL;
    CUDA_CHECK(gemm_ctx_create(&ctx));
    if (tu_has_flag(argc, argv, "--bench")) {
        bench(ctx, st);
    } else {
        for (const shape &sh : SHAPES) test_shape(ctx, st, &sh);
        CHECK(g_skinny_odd_splits > 0,
              "no skinny case ran with more than 8 K splits, not a multiple of 8 (fix-up batches)");
    }
    gemm_ctx_destroy(ctx);
    CUDA_CHECK(cudaStreamDestroy(st));
    return check_report("test_gemm");
}
