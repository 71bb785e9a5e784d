/* gemv_mma (backend/cuda/gemv_mma.h): dense bf16 products of 1-16 token rows on the tensor cores.
 * Against a double-precision reference of the same bf16 inputs, for every M = 1 … 16 (one and two
 * tiles of 8 tokens) at the decode shapes — 120b's QKV (K = 2880, N = 5120, the split input's lo
 * half, fp32 out, no bias) and O (K = 4096, N = 2880, bias, bf16 out) — and two small odd ones (K =
 * 32 and 96, N = 16 and 48, each form): fp32 out within 1e-5 relative L2 (fp32 sums of exact
 * products, part of them inside the tensor cores: ~1e-6 expected), bf16 out every element within
 * its rounding (2^-8 of the value) plus 1e-5 of the row's largest; no row past M written; two runs
 * the same bytes (the warps' sums are added in a fixed order). Also the shapes it refuses.
 *
 * The fused QKV form (gemv_mma_rope: RoPE and the KV write in the epilogue) against the two launches
 * it replaces (gemv_mma to fp32 rows, then rope_kv_launch_f32 with the bias), both on the GPU, at
 * 120b's shapes (64 q heads, 8 KV heads, head_dim 64, K = 2880, the lo half, a bias), M = 1 … 16,
 * bf16 and FP8 caches (the FP8 one with non-unit scales), positions up to 131071 (sincosf's slow
 * path from 105615 rad), shuffled slots and, from M = 2, one row of slot -1 (a padded graph row):
 * the q rows (with a guard row past M) and both whole caches must hold the same bytes — the same
 * fp32 operations in the same order (rope_kv_row.cuh) — where the two-launch form is itself held to
 * the CPU reference by test_rope_kv and to the double reference above. Every byte either form did
 * not write keeps the poison both started from, so a stray write shows as a difference too.
 * The same with the attention norm in front (gemv_mma_norm_rope, M = 1-4) against
 * norm_add_rmsnorm_split + gemv_mma_rope: q, both caches and the residual rows h written back the
 * same bytes, the arrival counter back at 0, and a second launch the same again.
 * Each of gemv_mma_tune's block shapes is checked too (M = 1, 5, 8, 9, 16 of every case).
 * --bench: its time, in each of those shapes, against cuBLASLt (gemm_bf16: the QKV form as 2T rows, O as T rows with its
 * bias), the weights rotated over copies so that L2 does not hold them. */
#include "gpu_check.h"
#include "moe_test_util.h"
#include "rope_test_util.h"

#include "backend/cuda/gemm.h"
#include "backend/cuda/gemv_mma.h"
#include "backend/cuda/norm.h"
#include "backend/cuda/rope_kv.h"

#include <vector>

struct gm_case {
    int K, N;
    bool lo, bias, f32;
};

/* shape: -1 for gemv_mma, else gemv_mma_tune's shape. */
static void check_case(const gm_case &cs, int M, cudaStream_t st, int shape = -1) {
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
        if (shape < 0)
            CUDA_CHECK(gemv_mma(dx, dl, M, K, dw, N, db, dy, cs.f32, st));
        else
            CUDA_CHECK(gemv_mma_tune(shape, dx, dl, M, K, dw, N, db, dy, cs.f32, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
        tu_download(got.data(), dy, ybytes);
        if (rep == 0) {
            first = got;
            continue;
        }
        CHECK(first == got, "gemv_mma shape %d K=%d N=%d M=%d: two runs differ", shape, K, N, M);
    }
    bool untouched = true;
    for (size_t i = yn * (cs.f32 ? 4 : 2); i < ybytes; i++) untouched &= got[i] == 0xff;
    CHECK(untouched, "gemv_mma shape %d K=%d N=%d M=%d: wrote past row M", shape, K, N, M);
    if (cs.f32) {
        std::vector<float> y(yn), r(yn);
        memcpy(y.data(), got.data(), yn * 4);
        for (size_t i = 0; i < yn; i++) r[i] = (float)ref[i];
        const double rel = tu_rel_err(y.data(), r.data(), yn);
        CHECK(rel <= 1e-5,
              "gemv_mma shape %d K=%d N=%d M=%d lo=%d: fp32 out %.3g from the reference", shape, K,
              N, M, cs.lo, rel);
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
        CHECK(
            bad == 0,
            "gemv_mma shape %d K=%d N=%d M=%d bias=%d: %d bf16 outputs past their rounding (worst "
            "%.2f of the bound)",
            shape, K, N, M, cs.bias, bad, worst);
    }
    CUDA_CHECK(cudaFree(dw));
    CUDA_CHECK(cudaFree(dx));
    if (dl) CUDA_CHECK(cudaFree(dl));
    if (db) CUDA_CHECK(cudaFree(db));
    CUDA_CHECK(cudaFree(dy));
}

/* One fused-QKV case (see the file's comment): fused against gemv_mma + rope_kv_launch_f32. */
static void check_rope_case(const rope_kv_freq &f, int M, bool fp8, cudaStream_t st) {
    enum { NH = 64, NKV = 8, HD = 64, K = 2880, BS = 32, NBLK = 24 };
    const int N = (NH + 2 * NKV) * HD;
    const size_t wn = (size_t)N * K, xn = (size_t)M * K;
    std::vector<uint16_t> hw(wn), hx(2 * xn), hb(N);
    tu_fill_bf16(hw.data(), NULL, wn, -0.05f, 0.05f);
    tu_fill_bf16(hx.data(), NULL, xn, -2.0f, 2.0f);
    tu_fill_bf16(hx.data() + xn, NULL, xn, -0.01f, 0.01f); /* the lo halves follow the hi rows */
    tu_fill_bf16(hb.data(), NULL, N, -0.5f, 0.5f);
    std::vector<int32_t> pos(M), slot(M), perm(NBLK * BS);
    for (int i = 0; i < NBLK * BS; i++) perm[i] = i;
    rng_shuffle(&tu_rng, perm.data(), NBLK * BS);
    for (int m = 0; m < M; m++) {
        pos[m] = (int32_t)(rng_next(&tu_rng) % 131072u);
        slot[m] = perm[m];
    }
    if (M >= 2) slot[M / 2] = -1; /* a padded row: no KV write */
    float sc[4 * NKV];
    for (int j = 0; j < NKV; j++) {
        const float ks = fp8 ? 0.25f + 0.3f * (float)j : 1.0f, vs = fp8 ? 2.0f / (1 + j) : 1.0f;
        sc[j] = ks, sc[NKV + j] = vs, sc[2 * NKV + j] = 1.0f / ks, sc[3 * NKV + j] = 1.0f / vs;
    }
    attn_dims d = {NH, NKV, HD, BS, fp8 ? 1 : 0};
    const size_t eb = fp8 ? 1 : 2, cache_bytes = (size_t)NBLK * NKV * BS * HD * eb;
    const size_t q_bytes = (size_t)(M + 1) * NH * HD * 2; /* one guard row */
    uint16_t *dw = tu_dev_upload(hw.data(), wn), *dx = tu_dev_upload(hx.data(), 2 * xn),
             *db = tu_dev_upload(hb.data(), N);
    int32_t *dpos = tu_dev_upload(pos.data(), M), *dslot = tu_dev_upload(slot.data(), M);
    float *dsc = tu_dev_upload(sc, 4 * NKV), *dy = tu_dev_alloc<float>((size_t)M * N);
    uint8_t *dq[2], *dk[2], *dv[2];
    std::vector<uint8_t> hq[2], hk[2], hv[2];
    for (int form = 0; form < 2; form++) { /* 0: the two launches, 1: fused */
        dq[form] = tu_dev_alloc<uint8_t>(q_bytes);
        dk[form] = tu_dev_alloc<uint8_t>(cache_bytes);
        dv[form] = tu_dev_alloc<uint8_t>(cache_bytes);
        gpu_poison(dq[form], q_bytes);
        gpu_poison(dk[form], cache_bytes);
        gpu_poison(dv[form], cache_bytes);
        if (form == 0) {
            CUDA_CHECK(gemv_mma(dx, dx + xn, M, K, dw, N, NULL, dy, 1, st));
            CUDA_CHECK(rope_kv_launch_f32(&d, &f, dy, NULL, db, N, M, dpos, dslot,
                                          (uint16_t *)dq[0], dk[0], dv[0], dsc, st));
        } else {
            CUDA_CHECK(gemv_mma_rope(dx, dx + xn, M, K, dw, db, &d, &f, dpos, dslot,
                                     (uint16_t *)dq[1], dk[1], dv[1], dsc, st));
        }
        CUDA_CHECK(cudaStreamSynchronize(st));
        hq[form].resize(q_bytes), hk[form].resize(cache_bytes), hv[form].resize(cache_bytes);
        tu_download(hq[form].data(), dq[form], q_bytes);
        tu_download(hk[form].data(), dk[form], cache_bytes);
        tu_download(hv[form].data(), dv[form], cache_bytes);
    }
    auto differ = [](const std::vector<uint8_t> &a, const std::vector<uint8_t> &b) {
        size_t n = 0;
        for (size_t i = 0; i < a.size(); i++) n += a[i] != b[i];
        return n;
    };
    const size_t nq = differ(hq[0], hq[1]), nk = differ(hk[0], hk[1]), nv = differ(hv[0], hv[1]);
    CHECK(nq == 0 && nk == 0 && nv == 0,
          "gemv_mma_rope M=%d %s: %zu q, %zu k, %zu v bytes differ from gemv_mma + rope_kv", M,
          fp8 ? "fp8" : "bf16", nq, nk, nv);
    for (int form = 0; form < 2; form++) {
        CUDA_CHECK(cudaFree(dq[form]));
        CUDA_CHECK(cudaFree(dk[form]));
        CUDA_CHECK(cudaFree(dv[form]));
    }
    CUDA_CHECK(cudaFree(dw));
    CUDA_CHECK(cudaFree(dx));
    CUDA_CHECK(cudaFree(db));
    CUDA_CHECK(cudaFree(dpos));
    CUDA_CHECK(cudaFree(dslot));
    CUDA_CHECK(cudaFree(dsc));
    CUDA_CHECK(cudaFree(dy));
}

/* One case of the norm in front: gemv_mma_norm_rope against norm_add_rmsnorm_split + gemv_mma_rope
 * on the same h, slots and weights (see the file's comment). */
static void check_norm_case(const rope_kv_freq &f, int M, bool fp8, cudaStream_t st) {
    enum { NH = 64, NKV = 8, HD = 64, K = 2880, BS = 32, NBLK = 8, NSLOT = 4 };
    const int N = (NH + 2 * NKV) * HD;
    const size_t wn = (size_t)N * K, hn = (size_t)M * K, sn = hn * NSLOT;
    std::vector<uint16_t> hw(wn), hb(N), hg(K);
    std::vector<float> hh(hn), hs(sn);
    tu_fill_bf16(hw.data(), NULL, wn, -0.05f, 0.05f);
    tu_fill_bf16(hb.data(), NULL, N, -0.5f, 0.5f);
    tu_fill_bf16(hg.data(), NULL, K, 0.5f, 1.5f);
    for (auto &v : hh) v = tu_uniform(-3.0f, 3.0f);
    for (auto &v : hs) v = tu_uniform(-0.5f, 0.5f);
    std::vector<int32_t> pos(M), slot(M);
    for (int m = 0; m < M; m++)
        pos[m] = (int32_t)(rng_next(&tu_rng) % 131072u), slot[m] = 3 * m + 1;
    if (M >= 2) slot[M - 1] = -1;
    float sc[4 * NKV];
    for (int j = 0; j < NKV; j++) {
        const float ks = fp8 ? 0.5f + 0.25f * (float)j : 1.0f, vs = fp8 ? 1.5f : 1.0f;
        sc[j] = ks, sc[NKV + j] = vs, sc[2 * NKV + j] = 1.0f / ks, sc[3 * NKV + j] = 1.0f / vs;
    }
    attn_dims d = {NH, NKV, HD, BS, fp8 ? 1 : 0};
    const size_t eb = fp8 ? 1 : 2, cache_bytes = (size_t)NBLK * NKV * BS * HD * eb;
    const size_t q_bytes = (size_t)(M + 1) * NH * HD * 2;
    uint16_t *dw = tu_dev_upload(hw.data(), wn), *db = tu_dev_upload(hb.data(), N),
             *dg = tu_dev_upload(hg.data(), K);
    float *dslots = tu_dev_upload(hs.data(), sn), *dsc = tu_dev_upload(sc, 4 * NKV);
    int32_t *dpos = tu_dev_upload(pos.data(), M), *dslot = tu_dev_upload(slot.data(), M);
    uint16_t *dy = tu_dev_alloc<uint16_t>(2 * hn); /* the norm's y, then y_lo */
    int *dctr = tu_dev_alloc<int>(1);
    CUDA_CHECK(cudaMemset(dctr, 0, sizeof(int)));
    std::vector<uint8_t> got[3][4];        /* [form][q, k, v, h] */
    for (int form = 0; form < 3; form++) { /* 0: two launches, 1 and 2: fused, twice */
        float *dh = tu_dev_upload(hh.data(), hn);
        uint8_t *dq = tu_dev_alloc<uint8_t>(q_bytes), *dk = tu_dev_alloc<uint8_t>(cache_bytes),
                *dv = tu_dev_alloc<uint8_t>(cache_bytes);
        gpu_poison(dq, q_bytes);
        gpu_poison(dk, cache_bytes);
        gpu_poison(dv, cache_bytes);
        if (form == 0) {
            CUDA_CHECK(
                norm_add_rmsnorm_split(dh, NULL, dslots, NSLOT, M, K, dg, 1e-5f, dy, dy + hn, st));
            CUDA_CHECK(gemv_mma_rope(dy, dy + hn, M, K, dw, db, &d, &f, dpos, dslot, (uint16_t *)dq,
                                     dk, dv, dsc, st));
        } else {
            const gemv_mma_norm_in in = {dh, dslots, NSLOT, dg, 1e-5f, dctr};
            CUDA_CHECK(gemv_mma_norm_rope(&in, M, K, dw, db, &d, &f, dpos, dslot, (uint16_t *)dq,
                                          dk, dv, dsc, st));
        }
        CUDA_CHECK(cudaStreamSynchronize(st));
        const size_t sizes[4] = {q_bytes, cache_bytes, cache_bytes, hn * 4};
        const void *src[4] = {dq, dk, dv, dh};
        for (int i = 0; i < 4; i++) {
            got[form][i].resize(sizes[i]);
            CUDA_CHECK(cudaMemcpy(got[form][i].data(), src[i], sizes[i], cudaMemcpyDeviceToHost));
        }
        CUDA_CHECK(cudaFree(dh));
        CUDA_CHECK(cudaFree(dq));
        CUDA_CHECK(cudaFree(dk));
        CUDA_CHECK(cudaFree(dv));
        if (form > 0) {
            int ctr = -1;
            CUDA_CHECK(cudaMemcpy(&ctr, dctr, sizeof ctr, cudaMemcpyDeviceToHost));
            CHECK(ctr == 0, "gemv_mma_norm_rope M=%d: the counter left at %d", M, ctr);
        }
    }
    static const char *what[4] = {"q", "k cache", "v cache", "h"};
    for (int form = 1; form < 3; form++)
        for (int i = 0; i < 4; i++) {
            size_t bad = 0;
            for (size_t j = 0; j < got[0][i].size(); j++) bad += got[0][i][j] != got[form][i][j];
            CHECK(bad == 0,
                  "gemv_mma_norm_rope M=%d %s (launch %d): %zu bytes of %s differ from norm_add + "
                  "gemv_mma_rope",
                  M, fp8 ? "fp8" : "bf16", form, bad, what[i]);
        }
    CUDA_CHECK(cudaFree(dw));
    CUDA_CHECK(cudaFree(db));
    CUDA_CHECK(cudaFree(dg));
    CUDA_CHECK(cudaFree(dslots));
    CUDA_CHECK(cudaFree(dsc));
    CUDA_CHECK(cudaFree(dpos));
    CUDA_CHECK(cudaFree(dslot));
    CUDA_CHECK(cudaFree(dy));
    CUDA_CHECK(cudaFree(dctr));
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
    rope_kv_freq f;
    memset(&f, 0, sizeof f);
    f.half = 32;
    attn_dims d = {64, 8, 64, 32, 0}, d80 = {64, 8, 80, 32, 0}, d_bs = {64, 8, 64, 24, 0};
    CHECK(gemv_mma_rope_supported(16, 2880, 5120, &d, &f) &&
              !gemv_mma_rope_supported(17, 2880, 5120, &d, &f) &&
              !gemv_mma_rope_supported(1, 2880, 5120, &d80, &f) &&
              !gemv_mma_rope_supported(1, 2880, 5120, &d_bs, &f) &&
              !gemv_mma_rope_supported(1, 2880, 5104, &d, &f),
          "gemv_mma_rope_supported limits");
    int32_t *ip = (int32_t *)p;
    CHECK(gemv_mma_rope(p, NULL, 1, 2880, p, NULL, &d, &f, NULL, ip, p, p, p, NULL, st) ==
              cudaErrorInvalidValue,
          "gemv_mma_rope refuses NULL positions");
    attn_dims d8 = d;
    d8.kv_fp8 = 1;
    CHECK(gemv_mma_rope(p, NULL, 1, 2880, p, NULL, &d8, &f, ip, ip, p, p, p, NULL, st) ==
              cudaErrorInvalidValue,
          "gemv_mma_rope refuses an FP8 cache without scales");
    CHECK(gemv_mma_norm_supported(4, 2880, 5120, &d, &f) &&
              !gemv_mma_norm_supported(5, 2880, 5120, &d, &f) &&
              !gemv_mma_norm_supported(4, 4096, 5120, &d, &f),
          "gemv_mma_norm_supported limits");
    const gemv_mma_norm_in no_ctr = {(float *)p, (const float *)p, 4, p, 1e-5f, NULL};
    CHECK(gemv_mma_norm_rope(&no_ctr, 1, 2880, p, NULL, &d, &f, ip, ip, p, p, p, NULL, st) ==
              cudaErrorInvalidValue,
          "gemv_mma_norm_rope refuses a missing counter");
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
        /* gemv_mma_tune's shapes (chunks a batch, warps a block), the default first */
        static const char *shape_name[GEMV_MMA_TUNE_SHAPES] = {"4x8", "2x8", "6x8",
                                                               "4x4", "8x4", "4x16"};
        printf("\n%s: µs (gemv_mma by its shape: chunks a batch x warps a block; 4x8 the "
               "default)\n| T |",
               sh.name);
        for (const char *nm : shape_name) printf(" %s |", nm);
        printf(" cuBLASLt | best TB/s |\n| ---: |");
        for (int i = 0; i <= GEMV_MMA_TUNE_SHAPES + 1; i++) printf(" ---: |");
        printf("\n");
        for (int T = 1; T <= GEMV_MMA_MAX_M; T++) {
            const uint16_t *lo = sh.lo ? dx + (size_t)T * K : NULL; /* hi rows, then lo rows */
            printf("| %d |", T);
            double best = 1e30;
            for (int shape = 0; shape < GEMV_MMA_TUNE_SHAPES; shape++) {
                const double us = tu_time_us(st, 5, 50, [&](int i) {
                    const int c = i % COPIES; /* the weights rotated past L2 */
                    CUDA_CHECK(gemv_mma_tune(shape, dx, lo, T, K, dw[c], N, sh.bias ? db : NULL, dy,
                                             sh.f32, st));
                });
                best = us < best ? us : best;
                printf(" %.1f |", us);
            }
            const double lt = tu_time_us(st, 5, 50, [&](int i) {
                const int c = i % COPIES; /* the weights rotated past L2 */
                CUDA_CHECK(gemm_bf16(g, dx, sh.lo ? 2 * T : T, K, dw[c], N, sh.bias ? db : NULL, dy,
                                     sh.f32 ? GEMM_OUT_F32 : GEMM_OUT_BF16, st));
            });
            printf(" %.1f | %.2f |\n", lt, (double)N * K * 2 / best / 1e6);
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
        for (int shape = 0; shape < GEMV_MMA_TUNE_SHAPES; shape++) /* the tuning bench's shapes */
            for (const gm_case &cs : cases)
                for (int M : {1, 5, 8, 9, 16}) check_case(cs, M, st, shape), n++;
        rope_table rt;
        rope_kv_freq f;
        rope_tables_120b(&rt, &f);
        for (int fp8 = 0; fp8 < 2; fp8++)
            for (int M = 1; M <= GEMV_MMA_MAX_M; M++, n++) check_rope_case(f, M, fp8 != 0, st);
        for (int fp8 = 0; fp8 < 2; fp8++)
            for (int M = 1; M <= GEMV_MMA_NORM_MAX_M; M++, n++) check_norm_case(f, M, fp8 != 0, st);
        check_refusals(st);
        fprintf(stderr,
                "  gemv_mma: %ld cases (the plain form and its tuning shapes against the double "
                "reference, two runs alike, nothing written past M; the fused QKV forms the same "
                "bytes as the launches they replace)\n",
                n);
    }
    CUDA_CHECK(cudaStreamDestroy(st));
    return check_report("test_gemv_mma");
}
