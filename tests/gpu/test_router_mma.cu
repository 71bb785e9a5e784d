/* router_mma_route (backend/cuda/router_mma.h): the tensor-core router with its routing in the last
 * block. For E = 128 (120b) and 32 (20b), T = 1 … 16 (one and two tiles of 8 tokens), K = 2880
 * with and without the split input's lo half, with and without expert parallelism, and K = 64: the
 * logits within 1e-5 (relative L2) of gemv_bf16's (the same exact bf16 products summed in fp32 in
 * another order, in part inside the tensor cores: ~2e-6 expected at K = 2880); every routing array
 * the bytes of moe_route_split applied to those logits; two runs the same bytes (the slices
 * are added in order, whoever arrives last); the arrival counter back at zero. Also the shapes it
 * refuses. --bench: its time against gemv_route and against the three launches (cuBLASLt's 2T-row
 * product, moe_route_split on the two halves) steps of 5 or more tokens used before it, the weights
 * rotated over copies so that L2 does not hold them. */
#include "gpu_check.h"
#include "moe_test_util.h"

#include "backend/cuda/gemm.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/router_mma.h"

#include <vector>

static void check_case(int E, int T, int K, bool lo, bool ep, int *counter, cudaStream_t st) {
    const int k = 4;
    tu_router in = tu_router_upload(E, T, K, lo);
    uint16_t *dw = in.w, *dx = in.x, *dl = in.lo, *db = in.bias;
    const size_t nb = moe_routing_bytes(T, E, k), nl = (size_t)T * E;
    uint8_t *rb[2] = {tu_dev_alloc<uint8_t>(nb), tu_dev_alloc<uint8_t>(nb)};
    float *lg_ref = tu_dev_alloc<float>(nl), *lg = tu_dev_alloc<float>((1 + RM_KS) * nl);
    moe_routing r[2];
    for (int i = 0; i < 2; i++) {
        moe_routing_carve(&r[i], rb[i], T, E, k);
        if (ep) r[i].e0 = E / 2, r[i].n_e = E / 2;
    }
    for (int m0 = 0; m0 < T; m0 += GEMV_MAX_M) { /* the reference, GEMV_MAX_M tokens at a time */
        const int mt = T - m0 < GEMV_MAX_M ? T - m0 : GEMV_MAX_M;
        CUDA_CHECK(gemv_bf16(dx + (size_t)m0 * K, dl ? dl + (size_t)m0 * K : NULL, mt, K, dw, E,
                             NULL, lg_ref + (size_t)m0 * E, 1, st));
    }
    std::vector<float> want(nl), got(nl), first(nl);
    std::vector<uint8_t> rwant(nb), rgot(nb), rfirst(nb);
    CUDA_CHECK(cudaStreamSynchronize(st));
    tu_download(want.data(), lg_ref, nl);
    for (int rep = 0; rep < 2; rep++) {
        CUDA_CHECK(cudaMemset(rb[0], 0, nb));
        CUDA_CHECK(cudaMemset(rb[1], 0, nb));
        CUDA_CHECK(cudaMemset(lg, 0xff, (1 + RM_KS) * nl * 4));
        CUDA_CHECK(router_mma_route(dx, dl, T, K, dw, E, lg, db, &r[1], counter, st));
        /* the routing moe_route_split gives for the kernel's own logits */
        CUDA_CHECK(moe_route_split(lg, NULL, db, &r[0], st));
        CUDA_CHECK(cudaStreamSynchronize(st));
        tu_download(got.data(), lg, nl);
        tu_download(rwant.data(), rb[0], nb);
        tu_download(rgot.data(), rb[1], nb);
        int c = -1;
        tu_download(&c, counter, 1);
        const double rel = tu_rel_err(got.data(), want.data(), nl);
        CHECK(rel <= 1e-5, "router_mma E=%d T=%d K=%d lo=%d: logits %.3g from gemv_bf16's", E, T, K,
              lo, rel);
        CHECK(rwant == rgot,
              "router_mma E=%d T=%d K=%d lo=%d ep=%d: routing differs from "
              "moe_route_split's on its logits",
              E, T, K, lo, ep);
        CHECK(c == 0, "router_mma E=%d T=%d: counter left at %d", E, T, c);
        if (rep == 0) {
            first = got, rfirst = rgot;
        } else {
            CHECK(first == got && rfirst == rgot, "router_mma E=%d T=%d K=%d: two runs differ", E,
                  T, K);
        }
    }
    for (int i = 0; i < 2; i++) CUDA_CHECK(cudaFree(rb[i]));
    CUDA_CHECK(cudaFree(lg_ref));
    CUDA_CHECK(cudaFree(lg));
    tu_router_free(&in);
}

static void check_refusals(int *counter, cudaStream_t st) {
    CHECK(router_mma_supported(8, 2880, 128) && router_mma_supported(16, 2880, 128) &&
              router_mma_supported(1, 16, 16) && !router_mma_supported(17, 2880, 128) &&
              !router_mma_supported(1, 2888, 128) && !router_mma_supported(1, 8192, 128) &&
              !router_mma_supported(1, 2880, 120) && !router_mma_supported(1, 2880, 272),
          "router_mma_supported limits");
    moe_routing bad;
    memset(&bad, 0, sizeof bad);
    bad.T = 2, bad.E = 128, bad.k = 4, bad.n_e = 128;
    uint16_t *p = (uint16_t *)counter;
    CHECK(router_mma_route(p, NULL, 1, 64, p, 128, (float *)counter, NULL, &bad, counter, st) ==
              cudaErrorInvalidValue,
          "router_mma_route refuses r->T != M");
    bad.T = 16, bad.k = 5; /* 80 pairs: past the routing's 64 */
    CHECK(router_mma_route(p, NULL, 16, 64, p, 128, (float *)counter, NULL, &bad, counter, st) ==
              cudaErrorInvalidValue,
          "router_mma_route refuses more than 64 pairs");
    bad.k = 4;
    bad.T = 1;
    CHECK(router_mma_route(NULL, NULL, 1, 64, p, 128, (float *)counter, NULL, &bad, counter, st) ==
              cudaErrorInvalidValue,
          "router_mma_route refuses a NULL input");
}

static void fmt_us(char *buf, size_t n, double us) {
    if (us < 0)
        snprintf(buf, n, "-");
    else
        snprintf(buf, n, "%.1f", us);
}

static void bench(int *counter, cudaStream_t st) {
    const int E = 128, K = 2880, k = 4, COPIES = 64; /* 64 x 0.74 MB: past L2 */
    std::vector<uint16_t> hw((size_t)E * K), hx((size_t)32 * K), hb(E);
    tu_fill_bf16(hw.data(), NULL, hw.size(), -0.05f, 0.05f);
    tu_fill_bf16(hx.data(), NULL, hx.size(), -2.0f, 2.0f);
    tu_fill_bf16(hb.data(), NULL, E, -0.5f, 0.5f);
    std::vector<uint16_t *> dw(COPIES);
    for (auto &d : dw) d = tu_dev_upload(hw.data(), hw.size());
    uint16_t *dx = tu_dev_upload(hx.data(), hx.size()), *db = tu_dev_upload(hb.data(), E);
    /* the split input as the runner lays it out: T hi rows, then T lo rows */
    uint16_t *d2 = tu_dev_alloc<uint16_t>((size_t)64 * K);
    float *lg = tu_dev_alloc<float>((size_t)(1 + RM_KS) * 32 * E + 64 * E);
    const size_t nb = moe_routing_bytes(32, E, k);
    uint8_t *rb = tu_dev_alloc<uint8_t>(nb);
    gemm_ctx *g = NULL;
    CUDA_CHECK(gemm_ctx_create(&g));
    printf("| T | router_mma us | gemv_route us | cuBLASLt 2T rows + moe_route_split us |\n");
    printf("| ---: | ---: | ---: | ---: |\n");
    for (int T = 1; T <= RM_MAX_M; T++) {
        moe_routing r;
        moe_routing_carve(&r, rb, T, E, k);
        CUDA_CHECK(cudaMemcpy(d2, dx, (size_t)T * K * 2, cudaMemcpyDeviceToDevice));
        CUDA_CHECK(cudaMemcpy(d2 + (size_t)T * K, dx, (size_t)T * K * 2, cudaMemcpyDeviceToDevice));
        const uint16_t *lo = d2 + (size_t)T * K;
        const double mma = tu_time_us(st, 5, 50, [&](int i) {
            const int c = i % COPIES; /* the weights rotated past L2 */
            CUDA_CHECK(router_mma_route(d2, lo, T, K, dw[c], E, lg, db, &r, counter, st));
        });
        double gv = -1;
        if (T <= 4)
            gv = tu_time_us(st, 5, 50, [&](int i) {
                const int c = i % COPIES; /* the weights rotated past L2 */
                CUDA_CHECK(gemv_route(d2, lo, T, K, dw[c], E, lg, db, &r, counter, 0, st));
            });
        const double three = tu_time_us(st, 5, 50, [&](int i) {
            const int c = i % COPIES; /* the weights rotated past L2 */
            CUDA_CHECK(gemm_bf16(g, d2, 2 * T, K, dw[c], E, NULL, lg, GEMM_OUT_F32, st));
            CUDA_CHECK(moe_route_split(lg, lg + (size_t)T * E, db, &r, st));
        });
        char gvs[32];
        fmt_us(gvs, sizeof gvs, gv);
        printf("| %d | %.1f | %s | %.1f |\n", T, mma, gvs, three);
    }
    gemm_ctx_destroy(g);
    for (auto d : dw) CUDA_CHECK(cudaFree(d));
    CUDA_CHECK(cudaFree(dx));
    CUDA_CHECK(cudaFree(db));
    CUDA_CHECK(cudaFree(d2));
    CUDA_CHECK(cudaFree(lg));
    CUDA_CHECK(cudaFree(rb));
}

int main(int argc, char **argv) {
    tu_init("test_router_mma");
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreate(&st));
    int *counter = tu_dev_alloc<int>(1);
    CUDA_CHECK(cudaMemset(counter, 0, sizeof(int)));
    if (tu_has_flag(argc, argv, "--bench")) {
        bench(counter, st);
    } else {
        long cases = 0;
        for (int E : {128, 32})
            for (int T = 1; T <= RM_MAX_M; T++)
                for (int v = 0; v < 3; v++, cases++)
                    check_case(E, T, 2880, v != 1, v == 2, counter, st);
        check_case(128, 3, 64, true, false, counter, st), cases++;
        check_refusals(counter, st);
        fprintf(stderr,
                "  router_mma: %ld cases within 1e-5 of gemv_bf16, routing = "
                "moe_route_split's, two runs alike\n",
                cases);
    }
    CUDA_CHECK(cudaFree(counter));
    CUDA_CHECK(cudaStreamDestroy(st));
    return check_report("test_router_mma");
}
