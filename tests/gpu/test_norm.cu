/* Residual add + RMSNorm and the embedding gather (norm.h) against cpu_rmsnorm, H = 2880, T = 1, 3, 8,
 * 64, 300, 2048: the residual update must match the same fp32 sums exactly (same order), the
 * normalised bf16 output within bf16 rounding of the reference, the rounding residue (y_lo, the
 * form runner_forward.c uses) bringing hi + lo within 3e-5; a plain RMSNorm (no delta, no slots)
 * leaves h alone; outputs poisoned with NaN first.
 * --bench: T = 1 … 4096, the MoE combine (4 and 20 fp32 slots), the attention residual (bf16) and a
 * plain RMSNorm. */
#include "moe_test_util.h"

extern "C" {
#include "backend/cpu/ops.h"
}
#include "backend/cuda/norm.h"

#include <string.h>

static const int H = 2880;
static const float EPS = 1e-5f;

static std::vector<float> bf16_vec_to_f32(const std::vector<uint16_t> &b) {
    std::vector<float> f(b.size());
    for (size_t i = 0; i < b.size(); i++) f[i] = bf16_to_f32(b[i]);
    return f;
}

/* One add+norm case: delta (bf16) and/or n_slots fp32 slots. */
static void check_add(int T, bool with_delta, int n_slots, cudaStream_t st, const uint16_t *d_gain,
                      const std::vector<uint16_t> &gain) {
    const size_t n = (size_t)T * H;
    std::vector<float> h(n), slots(n_slots > 0 ? n * n_slots : 0);
    std::vector<uint16_t> delta(with_delta ? n : 0);
    for (auto &v : h) v = tu_uniform(-8.0f, 8.0f);
    for (auto &v : slots) v = tu_uniform(-2.0f, 2.0f);
    if (with_delta) tu_fill_bf16(delta.data(), NULL, n, -4.0f, 4.0f);
    float *d_h = tu_dev_upload(h.data(), n);
    float *d_s = n_slots ? tu_dev_upload(slots.data(), slots.size()) : NULL;
    uint16_t *d_d = with_delta ? tu_dev_upload(delta.data(), n) : NULL;
    uint16_t *d_y = tu_dev_alloc<uint16_t>(n);
    tu_poison(d_y, n * 2, st);
    CUDA_CHECK(norm_add_rmsnorm_split(d_h, d_d, d_s, n_slots, T, H, d_gain, EPS, d_y, NULL, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    std::vector<float> h_gpu(n);
    std::vector<uint16_t> y_gpu(n);
    tu_download(h_gpu.data(), d_h, n);
    tu_download(y_gpu.data(), d_y, n);

    /* The kernel's order: d = slot 0 + slot 1 + …, d += delta, h += d. */
    std::vector<float> h_ref(n);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < H; c++) {
            float d = 0.0f;
            for (int s = 0; s < n_slots; s++) d += slots[((size_t)t * n_slots + s) * H + c];
            if (with_delta) d += bf16_to_f32(delta[(size_t)t * H + c]);
            h_ref[(size_t)t * H + c] = h[(size_t)t * H + c] + d;
        }
    size_t h_bad = 0;
    for (size_t i = 0; i < n; i++) h_bad += h_gpu[i] != h_ref[i];
    CHECK(h_bad == 0, "T=%d delta=%d slots=%d: %zu residual values differ from the fp32 sum", T,
          with_delta, n_slots, h_bad);
    std::vector<float> y_ref(n);
    dense_ref g = {gain.data(), ST_BF16};
    cpu_rmsnorm(h_ref.data(), g, T, H, EPS, y_ref.data());
    std::vector<float> yf = bf16_vec_to_f32(y_gpu);
    CHECK(tu_count_nonfinite_bf16(y_gpu.data(), n) == 0,
          "T=%d: normalised output not fully written", T);
    const double err = tu_rel_err(yf.data(), y_ref.data(), n);
    CHECK(err <= 1e-2, "T=%d delta=%d slots=%d: rmsnorm relative error %.3g", T, with_delta,
          n_slots, err);
    fprintf(stderr, "  add+norm T=%-4d delta=%d slots=%-2d rel err %.2e\n", T, with_delta, n_slots,
            err);

    /* With the residue (y_lo, as runner_forward.c asks for it): the same bf16 row, plus a residue that
     * brings hi + lo within ~2^-16 of the fp32 result (bf16 alone: ~2^-9). */
    CUDA_CHECK(cudaMemcpy(d_h, h.data(), n * 4, cudaMemcpyHostToDevice));
    uint16_t *d_y2 = tu_dev_alloc<uint16_t>(n), *d_lo = tu_dev_alloc<uint16_t>(n);
    tu_poison(d_y2, n * 2, st);
    tu_poison(d_lo, n * 2, st);
    CUDA_CHECK(norm_add_rmsnorm_split(d_h, d_d, d_s, n_slots, T, H, d_gain, EPS, d_y2, d_lo, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    std::vector<uint16_t> y2(n), lo(n);
    tu_download(y2.data(), d_y2, n);
    tu_download(lo.data(), d_lo, n);
    CHECK(!memcmp(y2.data(), y_gpu.data(), n * 2),
          "T=%d: the bf16 row with a residue differs from the one without", T);
    CHECK(tu_count_nonfinite_bf16(lo.data(), n) == 0, "T=%d: residue not fully written", T);
    std::vector<float> sum(n);
    for (size_t i = 0; i < n; i++) sum[i] = bf16_to_f32(y2[i]) + bf16_to_f32(lo[i]);
    const double err2 = tu_rel_err(sum.data(), y_ref.data(), n);
    CHECK(err2 <= 3e-5, "T=%d delta=%d slots=%d: split hi + lo relative error %.3g > 3e-5", T,
          with_delta, n_slots, err2);
    if (T == 1 || T == 64)
        fprintf(stderr, "  split form: hi + lo rel err %.2e (hi alone %.2e)\n", err2, err);
    CUDA_CHECK(cudaFree(d_y2));
    CUDA_CHECK(cudaFree(d_lo));
    CUDA_CHECK(cudaFree(d_h));
    if (d_s) CUDA_CHECK(cudaFree(d_s));
    if (d_d) CUDA_CHECK(cudaFree(d_d));
    CUDA_CHECK(cudaFree(d_y));
}

static void check_final_and_embed(int T, cudaStream_t st, const uint16_t *d_gain,
                                  const std::vector<uint16_t> &gain) {
    const size_t n = (size_t)T * H;
    dense_ref g = {gain.data(), ST_BF16};
    /* A plain RMSNorm (no delta, no slots): h is read only. */
    std::vector<float> h(n);
    for (auto &v : h) v = tu_uniform(-50.0f, 50.0f);
    float *d_h = tu_dev_upload(h.data(), n);
    uint16_t *d_y = tu_dev_alloc<uint16_t>(n);
    tu_poison(d_y, n * 2, st);
    CUDA_CHECK(norm_add_rmsnorm_split(d_h, NULL, NULL, 0, T, H, d_gain, EPS, d_y, NULL, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    std::vector<uint16_t> y(n);
    tu_download(y.data(), d_y, n);
    std::vector<float> h_after(n);
    tu_download(h_after.data(), d_h, n);
    CHECK(!memcmp(h_after.data(), h.data(), n * 4), "plain norm T=%d: h was written", T);
    std::vector<float> ref(n), yf = bf16_vec_to_f32(y);
    cpu_rmsnorm(h.data(), g, T, H, EPS, ref.data());
    CHECK(tu_count_nonfinite_bf16(y.data(), n) == 0, "plain norm T=%d: output not fully written",
          T);
    double err = tu_rel_err(yf.data(), ref.data(), n);
    CHECK(err <= 1e-2, "plain norm T=%d: relative error %.3g", T, err);

    /* Embedding: a small table, ids including out-of-range ones (→ zero rows). */
    const int vocab = 1000;
    std::vector<uint16_t> table((size_t)vocab * H);
    tu_fill_bf16(table.data(), NULL, table.size(), -0.1f, 0.1f);
    std::vector<int32_t> ids(T);
    for (int t = 0; t < T; t++) ids[t] = (int32_t)(rng_next(&tu_rng) % vocab);
    if (T >= 3) ids[1] = vocab, ids[2] = -1;
    uint16_t *d_tab = tu_dev_upload(table.data(), table.size());
    int32_t *d_ids = tu_dev_upload(ids.data(), (size_t)T);
    tu_poison(d_h, n * 4, st);
    tu_poison(d_y, n * 2, st);
    CUDA_CHECK(norm_embed_split(d_ids, T, d_tab, vocab, H, d_h, d_gain, EPS, d_y, NULL, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    std::vector<float> hg(n);
    tu_download(hg.data(), d_h, n);
    tu_download(y.data(), d_y, n);
    size_t bad = 0;
    for (int t = 0; t < T; t++)
        for (int c = 0; c < H; c++) {
            const float want =
                ids[t] >= 0 && ids[t] < vocab ? bf16_to_f32(table[(size_t)ids[t] * H + c]) : 0.0f;
            bad += hg[(size_t)t * H + c] != want;
        }
    CHECK(bad == 0, "embed T=%d: %zu gathered values wrong", T, bad);
    cpu_rmsnorm(hg.data(), g, T, H, EPS, ref.data());
    yf = bf16_vec_to_f32(y);
    CHECK(tu_count_nonfinite_bf16(y.data(), n) == 0,
          "embed T=%d: normalised output not fully written", T);
    err = tu_rel_err(yf.data(), ref.data(), n);
    CHECK(err <= 1e-2, "embed T=%d: rmsnorm relative error %.3g", T, err);
    CUDA_CHECK(cudaFree(d_h));
    CUDA_CHECK(cudaFree(d_y));
    CUDA_CHECK(cudaFree(d_tab));
    CUDA_CHECK(cudaFree(d_ids));
}

static void bench(cudaStream_t st, const uint16_t *d_gain) {
    static const int TS[] = {1, 8, 64, 256, 1024, 4096};
    const int maxT = 4096, maxS = 20;
    float *d_h = tu_dev_alloc<float>((size_t)maxT * H),
          *d_s = tu_dev_alloc<float>((size_t)maxT * maxS * H);
    uint16_t *d_d = tu_dev_alloc<uint16_t>((size_t)maxT * H),
             *d_y = tu_dev_alloc<uint16_t>((size_t)maxT * H);
    CUDA_CHECK(cudaMemset(d_h, 0, (size_t)maxT * H * 4));
    CUDA_CHECK(cudaMemset(d_s, 0, (size_t)maxT * maxS * H * 4));
    CUDA_CHECK(cudaMemset(d_d, 0, (size_t)maxT * H * 2));
    tu_bench_header();
    for (int T : TS) {
        char name[128];
        double us = tu_time_us(st, 5, 100, [&](int) {
            CUDA_CHECK(norm_add_rmsnorm_split(d_h, d_d, NULL, 0, T, H, d_gain, EPS, d_y, NULL, st));
        });
        snprintf(name, sizeof name, "norm residual(bf16)+rmsnorm T=%d", T);
        tu_bench_row(name, us, (double)T * H * (8 + 2 + 2), 0);
        for (int S : {4, 20}) {
            us = tu_time_us(st, 5, 100, [&](int) {
                CUDA_CHECK(
                    norm_add_rmsnorm_split(d_h, NULL, d_s, S, T, H, d_gain, EPS, d_y, NULL, st));
            });
            snprintf(name, sizeof name, "norm moe-combine(%d fp32 slots)+rmsnorm T=%d", S, T);
            tu_bench_row(name, us, (double)T * H * (8 + 4.0 * S + 2), 0);
        }
        us = tu_time_us(st, 5, 100, [&](int) {
            CUDA_CHECK(
                norm_add_rmsnorm_split(d_h, NULL, NULL, 0, T, H, d_gain, EPS, d_y, NULL, st));
        });
        snprintf(name, sizeof name, "norm plain rmsnorm T=%d", T);
        tu_bench_row(name, us, (double)T * H * (4 + 2), 0);
    }
    CUDA_CHECK(cudaFree(d_h));
    CUDA_CHECK(cudaFree(d_s));
    CUDA_CHECK(cudaFree(d_d));
    CUDA_CHECK(cudaFree(d_y));
}

int main(int argc, char **argv) {
    tu_init("test_norm");
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreate(&st));
    std::vector<uint16_t> gain(H);
    tu_fill_bf16(gain.data(), NULL, H, 0.5f, 1.5f);
    uint16_t *d_gain = tu_dev_upload(gain.data(), (size_t)H);
    if (tu_has_flag(argc, argv, "--bench")) {
        bench(st, d_gain);
    } else {
        for (int T : {1, 3, 8, 64, 300, 2048}) {
            check_add(T, true, 0, st, d_gain, gain);
            check_add(T, false, 4, st, d_gain, gain);
            check_add(T, true, 20, st, d_gain, gain);
            check_final_and_embed(T, st, d_gain, gain);
        }
    }
    CUDA_CHECK(cudaFree(d_gain));
    CUDA_CHECK(cudaStreamDestroy(st));
    return check_report("test_norm");
}
