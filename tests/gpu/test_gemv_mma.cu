/* gemv_mma (backend/cuda/gemv_mma.h): dense bf16 products of 1-16 token rows on the tensor cores.
 * Against a double-precision reference of the same bf16 inputs, for every M = 1 … 16 (one and two
 * tiles of 8 tokens) at the decode shapes — 120b's QKV (K = 2880, N = 5120, the split input's lo
 * half, fp32 out, no bias) and O (K = 4096, N = 2880, bias, bf16 out) — and two small odd ones (K =
 * 32 and 96, N = 16 and 48, each form): fp32 out within 1e-5 relative L2 (fp32 sums of exact
 * products, part of them inside the tensor cores: ~1e-6 expected), bf16 out every element within
 * its rounding (2^-8 of the value) plus 1e-5 of the row's largest; no row past M written; two runs
 * the same bytes (the warps' sums are added in a fixed order). Also the shapes it refuses.
 * --bench: its time against cuBLASLt (gemm_bf16: the QKV form as 2T rows, O as T rows with its
 * bias), the weights rotated over copies so that L2 does not hold them. */
#include "gpu_check.h"
#include "moe_test_util.h"

#include "backend/cuda/gemm.h"
#include "backend/cuda/gemv_mma.h"

#include <vector>

struct gm_case {
    int K, N;
    bool lo, bias, f32;
};

static void check_case(const gm_case &cs, int M, cudaStream_t st) {
    const int K = cs.K, N = cs.N;
    const size_t wn = (size_t)N * K, xn = (size_t)M * K, yn = (size_t)M * N;
    std::vector<uint16_t> hw(wn), hx(xn), hl(xn), hb(N);
    std::vector<float> fw(wn), fx(xn), fl(xn), fb(N);
    tu_fill_bf16(hw.data(), fw.data(), wn, -0.05f, 0.05f);
    tu_fill_bf16(hx.data(), fx.data(), xn, -2.0f, 2.0f);
    tu_fill_bf16(hl.data(), fl.data(), xn, -0.01f, 0.01f);
    tu_fill_bf16(hb.data(), fb.data(), N, -0.5f, 0.5f);
    std::vector<double> ref(yn);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = cs.bias ? fb[n] : 0.0;
            const float *w = &fw[(size_t)n * K], *x = &fx[(size_t)m * K], *l = &fl[(size_t)m * K];
            for (int k = 0; k < K; k++) s += (double)w[k] * ((double)x[k] + (cs.lo ? l[k] : 0.0));
            ref[(size_t)m * N + n] = s;
        }
    uint16_t *dw = tu_dev_upload(hw.data(), wn), *dx = tu_dev_upload(hx.data(), xn),
             *dl = cs.lo ? tu_dev_upload(hl.data(), xn) : NULL,
             *db = cs.bias ? tu_dev_upload(hb.data(), N) : NULL;
    /* one row more than M: it must stay as poisoned */
    const size_t ybytes = (size_t)(M + 1) * N * (cs.f32 ? 4 : 2);
    uint8_t *dy = tu_dev_alloc<uint8_t>(ybytes);
    std::vector<uint8_t> first(ybytes), got(ybytes);
    for (int rep = 0; rep < 2; rep++) {
        CUDA_CHECK(cudaMemset(dy, 0xff, ybytes));
        CUDA_CHECK(gemv_mma(dx, dl, M, K, dw, N, db, dy, cs.f32, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
        tu_download(got.data(), dy, ybytes);
        if (rep == 0) {
            first = got;
            continue;
        }
        CHECK(first == got, "gemv_mma K=%d N=%d M=%d: two runs differ", K, N, M);
    }
    bool untouched = true;
    for (size_t i = yn * (cs.f32 ? 4 : 2); i < ybytes; i++) untouched &= got[i] == 0xff;
    CHECK(untouched, "gemv_mma K=%d N=%d M=%d: wrote past row M", K, N, M);
    if (cs.f32) {
        std::vector<float> y(yn), r(yn);
        memcpy(y.data(), got.data(), yn * 4);
        for (size_t i = 0; i < yn; i++) r[i] = (float)ref[i];
        const double rel = tu_rel_err(y.data(), r.data(), yn);
        CHECK(rel <= 1e-5, "gemv_mma K=%d N=%d M=%d lo=%d: fp32 out %.3g from the reference", K, N,
              M, cs.lo, rel);
    } else {
        const uint16_t *y = (const uint16_t *)got.data();
        int bad = 0;
        double worst = 0;
        for (int m = 0; m < M; m++) {
            double big = 0;
            for (int n = 0; n < N; n++) big = fmax(big, fabs(ref[(size_t)m * N + n]));
            for (int n = 0; n < N; n++) {
                const double r = ref[(size_t)m * N + n], v = bf16_to_f32(y[(size_t)m * N + n]);
                const double err = fabs(v - r), lim = ldexp(fabs(r), -8) + 1e-5 * big;
                bad += !(err <= lim);
                worst = fmax(worst, err / (lim > 0 ? lim : 1));
            }
        }
        CHECK(bad == 0,
              "gemv_mma K=%d N=%d M=%d bias=%d: %d bf16 outputs past their rounding (worst "
              "%.2f of the bound)",
              K, N, M, cs.bias, bad, worst);
    }
    CUDA_CHECK(cudaFree(dw));
    CUDA_CHECK(cudaFree(dx));
    if (dl) CUDA_CHECK(cudaFree(dl));
    if (db) CUDA_CHECK(cudaFree(db));
    CUDA_CHECK(cudaFree(dy));
}

static void check_refusals(cudaStream_t st) {
    CHECK(gemv_mma_supported(16, 2880, 5120) && gemv_mma_supported(1, 32, 16) &&
              !gemv_mma_supported(0, 2880, 5120) && !gemv_mma_supported(17, 2880, 5120) &&
              !gemv_mma_supported(1, 48, 16) && !gemv_mma_supported(1, 32, 24) &&
              !gemv_mma_supported(1, 0, 16) && !gemv_mma_supported(1, 32, 0),
          "gemv_mma_supported limits");
    uint16_t *p = tu_dev_alloc<uint16_t>(64 * 32);
    CHECK(gemv_mma(NULL, NULL, 1, 32, p, 16, NULL, p, 1, st) == cudaErrorInvalidValue,
          "gemv_mma refuses a NULL input");
    CHECK(gemv_mma(p, NULL, 17, 32, p, 16, NULL, p, 1, st) == cudaErrorInvalidValue,
          "gemv_mma refuses 17 rows");
    CHECK(gemv_mma(p, NULL, 1, 40, p, 16, NULL, p, 1, st) == cudaErrorInvalidValue,
          "gemv_mma refuses K = 40");
    CUDA_CHECK(cudaFree(p));
}

static void bench(cudaStream_t st) {
    struct shape {
        const char *name;
        int K, N;
        bool lo, bias, f32;
    } shapes[2] = {{"QKV 2880 x 5120, lo, fp32", 2880, 5120, true, false, true},
                   {"O 4096 x 2880, bias, bf16", 4096, 2880, false, true, false}};
    gemm_ctx *g = NULL;
    CUDA_CHECK(gemm_ctx_create(&g));
    for (const shape &sh : shapes) {
        const int K = sh.K, N = sh.N, COPIES = 8; /* 8 x 24-30 MB: past L2 */
        std::vector<uint16_t> hw((size_t)N * K), hx((size_t)32 * K), hb(N);
        tu_fill_bf16(hw.data(), NULL, hw.size(), -0.05f, 0.05f);
        tu_fill_bf16(hx.data(), NULL, hx.size(), -2.0f, 2.0f);
        tu_fill_bf16(hb.data(), NULL, N, -0.5f, 0.5f);
        std::vector<uint16_t *> dw(COPIES);
        for (auto &d : dw) d = tu_dev_upload(hw.data(), hw.size());
        uint16_t *dx = tu_dev_upload(hx.data(), hx.size()), *db = tu_dev_upload(hb.data(), N);
        float *dy = tu_dev_alloc<float>((size_t)32 * N);
        printf("\n%s: µs\n| T | gemv_mma | cuBLASLt | gemv_mma TB/s |\n| ---: | ---: | ---: | ---: "
               "|\n",
               sh.name);
        for (int T = 1; T <= GEMV_MMA_MAX_M; T++) {
            const uint16_t *lo = sh.lo ? dx + (size_t)T * K : NULL; /* hi rows, then lo rows */
            const double mma = tu_time_us(st, 5, 50, [&](int i) {
                const int c = i % COPIES; /* the weights rotated past L2 */
                CUDA_CHECK(gemv_mma(dx, lo, T, K, dw[c], N, sh.bias ? db : NULL, dy, sh.f32, st));
            });
            const double lt = tu_time_us(st, 5, 50, [&](int i) {
                const int c = i % COPIES; /* the weights rotated past L2 */
                CUDA_CHECK(gemm_bf16(g, dx, sh.lo ? 2 * T : T, K, dw[c], N, sh.bias ? db : NULL, dy,
                                     sh.f32 ? GEMM_OUT_F32 : GEMM_OUT_BF16, st));
            });
            printf("| %d | %.1f | %.1f | %.2f |\n", T, mma, lt, (double)N * K * 2 / mma / 1e6);
        }
        for (auto d : dw) CUDA_CHECK(cudaFree(d));
        CUDA_CHECK(cudaFree(dx));
        CUDA_CHECK(cudaFree(db));
        CUDA_CHECK(cudaFree(dy));
    }
    gemm_ctx_destroy(g);
}

int main(int argc, char **argv) {
    tu_init("test_gemv_mma");
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreate(&st));
    if (tu_has_flag(argc, argv, "--bench")) {
        bench(st);
    } else {
        const gm_case cases[] = {{2880, 5120, true, false, true}, {4096, 2880, false, true, false},
                                 {32, 16, false, true, true},     {96, 48, true, false, false},
                                 {32, 16, true, true, false},     {96, 48, false, false, true}};
        long n = 0;
        for (const gm_case &cs : cases)
            for (int M = 1; M <= GEMV_MMA_MAX_M; M++, n++) check_case(cs, M, st);
        check_refusals(st);
        fprintf(stderr,
                "  gemv_mma: %ld cases against the double reference, two runs alike, nothing "
                "written past M\n",
                n);
    }
    CUDA_CHECK(cudaStreamDestroy(st));
    return check_report("test_gemv_mma");
}
