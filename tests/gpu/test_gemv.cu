/* gemv_bf16 (backend/cuda/gemv.h) against a double-precision CPU product, for the decode shapes of
 * gpt-oss (QKV 5120×2880, O 2880×4096, router 128×2880) and awkward ones (K not a multiple of 256,
 * N not a multiple of the warps, K = 8), M = 1…8, with and without x_lo and bias, fp32 and bf16 out;
 * nothing past y[M][N] is written; both kernel forms, which must give the same bytes; gemv_route
 * against gemv_bf16 + moe_route_split (check_route). --bench: median times against cuBLASLt/skinny (gemm_bf16 AUTO) at
 * M = 1, 2, 4, 8 with the weights rotated over enough copies that no repetition finds them in L2. */
#include "gpu_check.h"
#include "moe_test_util.h"

#include "backend/cuda/gemm.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/norm.h"

#include <vector>

struct gv_shape {
    const char *name;
    int N, K;
};

static const gv_shape SHAPES[] = {{"qkv", 5120, 2880}, {"o", 2880, 4096}, {"router", 128, 2880},
                                  {"odd", 1000, 2888}, {"tiny", 3, 8},    {"k64", 77, 64}};

static void check_shape(const gv_shape &sh, int M, bool lo, bool bias, bool f32, cudaStream_t st) {
    const size_t wn = (size_t)sh.N * sh.K, xn = (size_t)M * sh.K;
    std::vector<uint16_t> hw(wn), hx(xn), hl(xn), hb(sh.N);
    std::vector<float> fw(wn), fx(xn), fl(xn), fb(sh.N);
    tu_fill_bf16(hw.data(), fw.data(), wn, -0.05f, 0.05f);
    tu_fill_bf16(hx.data(), fx.data(), xn, -2.0f, 2.0f);
    tu_fill_bf16(hl.data(), fl.data(), xn, -0.01f, 0.01f);
    tu_fill_bf16(hb.data(), fb.data(), sh.N, -0.5f, 0.5f);
    uint16_t *dw = tu_dev_upload(hw.data(), wn), *dx = tu_dev_upload(hx.data(), xn),
             *dl = tu_dev_upload(hl.data(), xn), *db = tu_dev_upload(hb.data(), (size_t)sh.N);
    const size_t yn = (size_t)M * sh.N, esz = f32 ? 4 : 2, pad = 64;
    uint8_t *dy = tu_dev_alloc<uint8_t>((yn + pad) * esz);
    /* Both kernel forms (gemv.h): the ring form is checked against the reference below (the rows
     * form where the ring does not apply, M > 4), and the rows form must give the same bytes. */
    std::vector<uint8_t> hy((yn + pad) * esz), hr((yn + pad) * esz);
    for (int form : {GEMV_FORM_ROWS, GEMV_FORM_RING}) {
        gemv_set_form(form);
        CUDA_CHECK(cudaMemset(dy, 0xff, (yn + pad) * esz)); /* NaN in both formats */
        CUDA_CHECK(gemv_bf16(dx, lo ? dl : NULL, M, sh.K, dw, sh.N, bias ? db : NULL, dy, f32, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
        tu_download(form == GEMV_FORM_ROWS ? hr.data() : hy.data(), dy, hy.size());
    }
    gemv_set_form(GEMV_FORM_AUTO);
    CHECK(hr == hy, "gemv %s M=%d lo=%d bias=%d f32=%d: the rows and ring forms differ", sh.name, M,
          lo, bias, f32);
    /* The early form (gemv.h: a larger ring, the rest of the rows prefetched toward L2, launched
     * with the PDL attribute): the same bytes again, nothing past y written. */
    if (gemv_early_supported(M, sh.K, sh.N)) {
        std::vector<uint8_t> he((yn + pad) * esz);
        CUDA_CHECK(cudaMemset(dy, 0xff, (yn + pad) * esz));
        CUDA_CHECK(
            gemv_bf16_early(dx, lo ? dl : NULL, M, sh.K, dw, sh.N, bias ? db : NULL, dy, f32, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
        tu_download(he.data(), dy, he.size());
        CHECK(he == hr, "gemv %s M=%d lo=%d bias=%d f32=%d: the early and rows forms differ",
              sh.name, M, lo, bias, f32);
    } else
        CHECK(M > 4, "gemv_early_supported refuses %s at M=%d", sh.name, M);
    double worst = 0.0;
    long bad = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < sh.N; n++) {
            double ref = bias ? fb[n] : 0.0, mag = fabs(ref);
            for (int k = 0; k < sh.K; k++) {
                const double xv = (double)fx[(size_t)m * sh.K + k] +
                                  (lo ? (double)fl[(size_t)m * sh.K + k] : 0.0);
                ref += xv * fw[(size_t)n * sh.K + k];
                mag += fabs(xv * fw[(size_t)n * sh.K + k]);
            }
            const size_t i = (size_t)m * sh.N + n;
            double got;
            if (f32) {
                float v;
                memcpy(&v, hy.data() + i * 4, 4);
                got = v;
            } else {
                uint16_t v;
                memcpy(&v, hy.data() + i * 2, 2);
                got = bf16_to_f32(v);
            }
            /* fp32 sums: error ~ K · 2^-24 · Σ|terms|; bf16 out adds a rounding of |ref| · 2^-8. */
            const double tol = 1e-5 * mag + (f32 ? 0.0 : fabs(ref) * 4e-3) + 1e-30;
            const double err = fabs(got - ref);
            if (!(err <= tol)) bad++;
            if (mag > 0) worst = fmax(worst, err / mag);
        }
    long stray = 0;
    for (size_t i = yn * esz; i < hy.size(); i++) stray += hy[i] != 0xff;
    CHECK(bad == 0, "gemv %s M=%d lo=%d bias=%d f32=%d: %ld outputs off (worst %.2e of Σ|terms|)",
          sh.name, M, lo, bias, f32, bad, worst);
    CHECK(stray == 0, "gemv %s M=%d: %ld bytes written past y", sh.name, M, stray);
    fprintf(stderr, "  gemv %-7s M=%d lo=%d bias=%d f32=%d  worst %.2e of Σ|terms|\n", sh.name, M,
            lo, bias, f32, worst);
    CUDA_CHECK(cudaFree(dw));
    CUDA_CHECK(cudaFree(dx));
    CUDA_CHECK(cudaFree(dl));
    CUDA_CHECK(cudaFree(db));
    CUDA_CHECK(cudaFree(dy));
}

/* gemv_route: the router GEMV with the routing in its last block must give the bytes of gemv_bf16
 * followed by moe_route_split (logits and every routing array), twice in a row (the arrival counter
 * is left at zero), for T = 1 … 8 at 120b's E = 128 and 20b's 32, also under expert parallelism (the
 * pairs of experts [e0, e0 + n_e) only). */
static void check_route(cudaStream_t st) {
    const int K = 2880, k = 4;
    int *counter = tu_dev_alloc<int>(1);
    CUDA_CHECK(cudaMemset(counter, 0, sizeof(int)));
    for (int E : {128, 32})
        for (int T = 1; T <= GEMV_MAX_M; T++)
            for (int ep = 0; ep < 2; ep++) {
                const size_t xn = (size_t)T * K;
                tu_router in = tu_router_upload(E, T, K, true);
                uint16_t *dw = in.w, *dx = in.x, *dl = in.lo, *db = in.bias;
                const size_t nb = moe_routing_bytes(T, E, k);
                uint8_t *rb[2] = {tu_dev_alloc<uint8_t>(nb), tu_dev_alloc<uint8_t>(nb)};
                float *lg[2] = {tu_dev_alloc<float>(xn / K * E), tu_dev_alloc<float>(xn / K * E)};
                std::vector<uint8_t> want(nb), got(nb);
                std::vector<float> lw((size_t)T * E), lgot((size_t)T * E);
                moe_routing r[2];
                for (int i = 0; i < 2; i++) {
                    moe_routing_carve(&r[i], rb[i], T, E, k);
                    if (ep) r[i].e0 = E / 2, r[i].n_e = E / 2;
                    CUDA_CHECK(cudaMemset(rb[i], 0, nb));
                }
                CUDA_CHECK(gemv_bf16(dx, dl, T, K, dw, E, NULL, lg[0], 1, st));
                CUDA_CHECK(moe_route_split(lg[0], NULL, db, &r[0], st));
                CUDA_CHECK(cudaStreamSynchronize(st));
                tu_download(want.data(), rb[0], nb);
                tu_download(lw.data(), lg[0], lw.size());
                for (int rep = 0; rep < 2; rep++) {
                    CUDA_CHECK(cudaMemset(rb[1], 0, nb));
                    CUDA_CHECK(cudaMemset(lg[1], 0xff, lgot.size() * 4));
                    CUDA_CHECK(
                        gemv_route(dx, dl, T, K, dw, E, lg[1], db, &r[1], counter, rep & 1, st));
                    CUDA_CHECK(cudaStreamSynchronize(st));
                    tu_download(got.data(), rb[1], nb);
                    tu_download(lgot.data(), lg[1], lgot.size());
                    int c = -1;
                    tu_download(&c, counter, 1);
                    CHECK(!memcmp(lw.data(), lgot.data(), lw.size() * 4),
                          "gemv_route E=%d T=%d ep=%d run %d: logits differ from gemv_bf16's", E, T,
                          ep, rep);
                    CHECK(want == got,
                          "gemv_route E=%d T=%d ep=%d run %d: routing differs from "
                          "moe_route_split's",
                          E, T, ep, rep);
                    CHECK(c == 0, "gemv_route E=%d T=%d run %d: counter left at %d", E, T, rep, c);
                }
                for (int i = 0; i < 2; i++) {
                    CUDA_CHECK(cudaFree(rb[i]));
                    CUDA_CHECK(cudaFree(lg[i]));
                }
                tu_router_free(&in);
            }
    moe_routing bad;
    memset(&bad, 0, sizeof bad);
    bad.T = 2, bad.E = 128, bad.k = 4, bad.n_e = 128;
    CHECK(gemv_route((uint16_t *)counter, NULL, 1, 64, (uint16_t *)counter, 128, (float *)counter,
                     NULL, &bad, counter, 0, st) == cudaErrorInvalidValue,
          "gemv_route refuses r->T != M");
    CUDA_CHECK(cudaFree(counter));
    fprintf(stderr, "  gemv_route: E = 128 and 32, T = 1..%d, with and without EP: same bytes\n",
            GEMV_MAX_M);
}

static void bench(cudaStream_t st) {
    gemm_ctx *ctx = NULL;
    CUDA_CHECK(gemm_ctx_create(&ctx));
    const gv_shape BS[] = {
        {"qkv", 5120, 2880}, {"o", 2880, 4096}, {"router", 128, 2880}, {"lm_head", 201088, 2880}};
    tu_bench_header();
    for (const gv_shape &sh : BS) {
        const size_t wn = (size_t)sh.N * sh.K, wbytes = wn * 2;
        int copies = (int)((256u << 20) / wbytes) + 2;
        if (copies > 16) copies = 16;
        /* 16 rows: gemm_bf16 gets the split input's 2M rows (M ≤ 8) */
        std::vector<uint16_t> h(wn), hx((size_t)16 * sh.K), hb(sh.N);
        tu_fill_bf16(h.data(), NULL, wn, -0.05f, 0.05f);
        tu_fill_bf16(hx.data(), NULL, hx.size(), -1.0f, 1.0f);
        tu_fill_bf16(hb.data(), NULL, hb.size(), -0.5f, 0.5f);
        std::vector<uint16_t *> dw(copies);
        for (auto &p : dw) p = tu_dev_upload(h.data(), wn);
        uint16_t *dx = tu_dev_upload(hx.data(), hx.size()),
                 *db = tu_dev_upload(hb.data(), hb.size());
        float *dy = tu_dev_alloc<float>((size_t)16 * sh.N);
        const bool out_f32 = strcmp(sh.name, "o") != 0;
        const uint16_t *bias = strcmp(sh.name, "o") == 0 ? db : NULL;
        for (int M : {1, 2, 4, 8}) {
            const int reps = sh.N > 100000 ? 20 : 200;
            gemv_set_form(GEMV_FORM_ROWS);
            const double us_gv = tu_time_us(st, 3, reps, [&](int i) {
                CUDA_CHECK(
                    gemv_bf16(dx, NULL, M, sh.K, dw[i % copies], sh.N, bias, dy, out_f32, st));
            });
            gemv_set_form(GEMV_FORM_RING); /* the rows form again at M > 4 */
            const double us_gr = tu_time_us(st, 3, reps, [&](int i) {
                CUDA_CHECK(
                    gemv_bf16(dx, NULL, M, sh.K, dw[i % copies], sh.N, bias, dy, out_f32, st));
            });
            gemv_set_form(GEMV_FORM_AUTO);
            /* The early form alone (nothing before it to overlap: its ring size and L2 requests). */
            double us_ge = 0.0;
            if (gemv_early_supported(M, sh.K, sh.N))
                us_ge = tu_time_us(st, 3, reps, [&](int i) {
                    CUDA_CHECK(gemv_bf16_early(dx, NULL, M, sh.K, dw[i % copies], sh.N, bias, dy,
                                               out_f32, st));
                });
            /* The split-bf16 input the runner gives gemm.h: 2M rows (gemv adds x_lo instead). */
            const int gm = out_f32 ? 2 * M : M;
            const double us_gm = tu_time_us(st, 3, reps, [&](int i) {
                CUDA_CHECK(gemm_bf16(ctx, dx, gm, sh.K, dw[i % copies], sh.N, bias, dy,
                                     out_f32 ? GEMM_OUT_F32 : GEMM_OUT_BF16, st));
            });
            char name[128];
            snprintf(name, sizeof name, "%s M=%d gemv rows", sh.name, M);
            tu_bench_row(name, us_gv, (double)wbytes, 0);
            snprintf(name, sizeof name, "%s M=%d gemv ring", sh.name, M);
            tu_bench_row(name, us_gr, (double)wbytes, 0);
            if (us_ge > 0.0) {
                snprintf(name, sizeof name, "%s M=%d gemv early", sh.name, M);
                tu_bench_row(name, us_ge, (double)wbytes, 0);
            }
            snprintf(name, sizeof name, "%s M=%d gemm_bf16 AUTO (%d rows)", sh.name, M, gm);
            tu_bench_row(name, us_gm, (double)wbytes, 0);
        }
        for (auto &p : dw) CUDA_CHECK(cudaFree(p));
        CUDA_CHECK(cudaFree(dx));
        CUDA_CHECK(cudaFree(db));
        CUDA_CHECK(cudaFree(dy));
    }
    gemm_ctx_destroy(ctx);
}

/* gemv_norm_route: the MLP norm inside the router's kernel must give the bytes of
 * norm_add_rmsnorm_split followed by gemv_route — the residual h written back, the normalised rows
 * y, the logits and every routing array — at T = 1 … 4, E = 128 and 32, K = 2880 (gpt-oss) and 4096
 * (the widest: sixteen warps of the norm's reduction), with and without delta, twice in a row. */
static void check_norm_route(cudaStream_t st) {
    const int k = 4;
    const float eps = 1e-5f;
    int *counter = tu_dev_alloc<int>(1);
    CUDA_CHECK(cudaMemset(counter, 0, sizeof(int)));
    long cases = 0;
    for (int K : {2880, 4096})
        for (int E : {128, 32})
            for (int T = 1; T <= 4; T++)
                for (int with_delta = 0; with_delta < 2; with_delta++) {
                    const size_t wn = (size_t)E * K, xn = (size_t)T * K;
                    std::vector<uint16_t> hw(wn), hd(xn), hg(K), hb(E);
                    std::vector<float> hh(xn);
                    tu_fill_bf16(hw.data(), NULL, wn, -0.05f, 0.05f);
                    tu_fill_bf16(hd.data(), NULL, xn, -1.0f, 1.0f);
                    tu_fill_bf16(hg.data(), NULL, K, 0.5f, 1.5f);
                    tu_fill_bf16(hb.data(), NULL, E, -0.5f, 0.5f);
                    for (size_t i = 0; i < xn; i++)
                        hh[i] = (float)((i * 2654435761u) % 2001) / 500.0f - 2.0f;
                    uint16_t *dw = tu_dev_upload(hw.data(), wn), *dd = tu_dev_upload(hd.data(), xn),
                             *dg = tu_dev_upload(hg.data(), K), *db = tu_dev_upload(hb.data(), E);
                    float *dh[2] = {tu_dev_alloc<float>(xn), tu_dev_alloc<float>(xn)};
                    uint16_t *dy[2] = {tu_dev_alloc<uint16_t>(2 * xn), tu_dev_alloc<uint16_t>(xn)};
                    const size_t nb = moe_routing_bytes(T, E, k);
                    uint8_t *rb[2] = {tu_dev_alloc<uint8_t>(nb), tu_dev_alloc<uint8_t>(nb)};
                    float *lg[2] = {tu_dev_alloc<float>((size_t)T * E),
                                    tu_dev_alloc<float>((size_t)T * E)};
                    moe_routing r[2];
                    for (int i = 0; i < 2; i++) moe_routing_carve(&r[i], rb[i], T, E, k);
                    std::vector<uint8_t> want(nb), got(nb);
                    std::vector<float> lw((size_t)T * E), lgot((size_t)T * E), hwant(xn), hgot(xn);
                    std::vector<uint16_t> ywant(xn), ygot(xn);
                    const uint16_t *delta = with_delta ? dd : NULL;
                    for (int rep = 0; rep < 2; rep++) {
                        for (int i = 0; i < 2; i++) {
                            CUDA_CHECK(
                                cudaMemcpy(dh[i], hh.data(), xn * 4, cudaMemcpyHostToDevice));
                            CUDA_CHECK(cudaMemset(rb[i], 0, nb));
                            CUDA_CHECK(cudaMemset(lg[i], 0xff, (size_t)T * E * 4));
                        }
                        CUDA_CHECK(cudaMemset(dy[1], 0xff, xn * 2));
                        /* the two launches */
                        CUDA_CHECK(norm_add_rmsnorm_split(dh[0], delta, NULL, 0, T, K, dg, eps,
                                                          dy[0], dy[0] + xn, st));
                        CUDA_CHECK(gemv_route(dy[0], dy[0] + xn, T, K, dw, E, lg[0], db, &r[0],
                                              counter, 0, st));
                        /* the one */
                        const gemv_norm_in nm = {dh[1], delta, dg, eps, dy[1]};
                        CUDA_CHECK(gemv_norm_route(&nm, T, K, dw, E, lg[1], db, &r[1], counter,
                                                   rep & 1, st));
                        CUDA_CHECK(cudaStreamSynchronize(st));
                        tu_download(want.data(), rb[0], nb);
                        tu_download(got.data(), rb[1], nb);
                        tu_download(lw.data(), lg[0], lw.size());
                        tu_download(lgot.data(), lg[1], lgot.size());
                        tu_download(hwant.data(), dh[0], xn);
                        tu_download(hgot.data(), dh[1], xn);
                        tu_download(ywant.data(), dy[0], xn);
                        tu_download(ygot.data(), dy[1], xn);
                        int c = -1;
                        tu_download(&c, counter, 1);
                        CHECK(!memcmp(lw.data(), lgot.data(), lw.size() * 4),
                              "gemv_norm_route K=%d E=%d T=%d delta=%d run %d: logits differ", K, E,
                              T, with_delta, rep);
                        CHECK(want == got,
                              "gemv_norm_route K=%d E=%d T=%d delta=%d run %d: routing differs", K,
                              E, T, with_delta, rep);
                        CHECK(!memcmp(hwant.data(), hgot.data(), xn * 4),
                              "gemv_norm_route K=%d E=%d T=%d delta=%d run %d: residual h differs",
                              K, E, T, with_delta, rep);
                        CHECK(ywant == ygot,
                              "gemv_norm_route K=%d E=%d T=%d delta=%d run %d: normalised rows "
                              "differ",
                              K, E, T, with_delta, rep);
                        CHECK(c == 0, "gemv_norm_route run %d: counter left at %d", rep, c);
                    }
                    for (int i = 0; i < 2; i++) {
                        CUDA_CHECK(cudaFree(rb[i]));
                        CUDA_CHECK(cudaFree(lg[i]));
                        CUDA_CHECK(cudaFree(dh[i]));
                        CUDA_CHECK(cudaFree(dy[i]));
                    }
                    CUDA_CHECK(cudaFree(dw));
                    CUDA_CHECK(cudaFree(dd));
                    CUDA_CHECK(cudaFree(dg));
                    CUDA_CHECK(cudaFree(db));
                    cases++;
                }
    CHECK(gemv_norm_route(NULL, 1, 64, (uint16_t *)counter, 128, (float *)counter, NULL, NULL,
                          counter, 0, st) == cudaErrorInvalidValue,
          "gemv_norm_route refuses a NULL norm");
    CUDA_CHECK(cudaFree(counter));
    fprintf(stderr, "  gemv_norm_route: %ld cases, the bytes of norm_add + gemv_route\n", cases);
}

int main(int argc, char **argv) {
    tu_init("test_gemv");
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreate(&st));
    if (tu_has_flag(argc, argv, "--bench")) {
        bench(st);
    } else {
        for (const gv_shape &sh : SHAPES)
            for (int M = 1; M <= GEMV_MAX_M; M++)
                for (int v = 0; v < 8; v++) {
                    /* Every combination at M = 1 and 2; one mixed case per shape above. */
                    if (M > 2 && v != 5 && !(M == GEMV_MAX_M && v == 6)) continue;
                    check_shape(sh, M, v & 1, (v >> 1) & 1, (v >> 2) & 1, st);
                }
        CHECK(!gemv_supported(GEMV_MAX_M + 1, 64, 8) && !gemv_supported(1, 12, 8) &&
                  !gemv_supported(1, 8192, 8) && gemv_supported(GEMV_MAX_M, 4096, 1),
              "gemv_supported limits");
        CHECK(gemv_bf16(NULL, NULL, 1, 64, NULL, 8, NULL, NULL, 1, st) == cudaErrorInvalidValue,
              "gemv_bf16 refuses NULL pointers");
        check_route(st);
        check_norm_route(st);
    }
    CUDA_CHECK(cudaStreamDestroy(st));
    return check_report("test_gemv");
}
