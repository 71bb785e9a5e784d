/* The fused MoE decode kernel (moe_fused.h) against the unfused path it replaces: gemv_bf16 (router
 * logits from the split-bf16 input) + moe_route_split (top-4, grouping) + moe_experts (gate_up,
 * down), which tests/gpu/test_moe.cu and test_gemv.cu hold to the CPU reference. Both compute every
 * value with the same code in the same order, so the check is bit-for-bit:
 *   - router logits, the routing arrays moe_route_split writes, gate_up's activations and every
 *     y_slots row (poisoned with NaN first), for T = 1 … 8 tokens, E = 32 (experts shared by up to 8
 *     tokens) and E = 128 (120b's router), the folded and the two-multiply dequantisation;
 *   - both modes: registers-only prefetch of down's first weights (1) and the deep prefetch into
 *     shared memory with down items dealt from the last block (2);
 *   - 20 more launches give the same bits (the grid barrier orders every phase: a race would show);
 *   - the launch captured in a CUDA graph and replayed gives the same bits (cooperative launches in
 *     graphs, as the decode step uses them);
 *   - refusals: unsupported shapes and plans.
 * Weights are random bytes in the repacked layout (any byte is a valid pair of codes), scales 2^-7 …
 * 2^-5, made on the device.
 *
 * --bench: 120b shapes, T = 1, 2, 4, 8: the unfused path's four launches against the fused kernel,
 * each captured in a CUDA graph (as in a decode step), 16 input sets rotated so that the touched
 * experts change every replay (the weights come from HBM, not L2). */
#include "moe_test_util.h"

#include "backend/cuda/gemv.h"
#include "backend/cuda/moe_fused.h"

static const int H = 2880, I = 2880, TOPK = 4;

/* Random bytes by a hash of the index: fast to make 1.6 GB on the device. */
__global__ void fill_hash_kernel(uint8_t *p, size_t n, uint64_t seed, int lo, int span) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        p[i] = span ? (uint8_t)(lo + (int)(z % (uint64_t)span)) : (uint8_t)z;
    }
}

static void fill_dev(uint8_t *p, size_t n, int lo, int span) {
    fill_hash_kernel<<<1024, 256>>>(p, n, rng_next(&tu_rng), lo, span);
    CUDA_CHECK(cudaGetLastError());
}

struct layer {
    moe_weights w;
    uint16_t *router_w, *router_b;
};

static layer make_layer(int E) {
    layer L;
    memset(&L, 0, sizeof L);
    moe_weights &w = L.w;
    uint8_t *q1 = tu_dev_alloc<uint8_t>(moe_repack_q_bytes(E, 2 * I, H)),
            *s1 = tu_dev_alloc<uint8_t>(moe_repack_s_bytes(E, 2 * I, H)),
            *q2 = tu_dev_alloc<uint8_t>(moe_repack_q_bytes(E, H, I)),
            *s2 = tu_dev_alloc<uint8_t>(moe_repack_s_bytes(E, H, I));
    fill_dev(q1, moe_repack_q_bytes(E, 2 * I, H), 0, 0);
    fill_dev(q2, moe_repack_q_bytes(E, H, I), 0, 0);
    fill_dev(s1, moe_repack_s_bytes(E, 2 * I, H), 120, 3);
    fill_dev(s2, moe_repack_s_bytes(E, H, I), 120, 3);
    std::vector<uint16_t> b1((size_t)E * 2 * I), b2((size_t)E * H), rw((size_t)E * H), rb(E);
    tu_fill_bf16(b1.data(), NULL, b1.size(), -0.5f, 0.5f);
    tu_fill_bf16(b2.data(), NULL, b2.size(), -0.5f, 0.5f);
    tu_fill_bf16(rw.data(), NULL, rw.size(), -0.05f, 0.05f);
    tu_fill_bf16(rb.data(), NULL, rb.size(), -0.5f, 0.5f);
    w.w1_q = q1, w.w1_s = s1, w.w2_q = q2, w.w2_s = s2;
    w.b1 = tu_dev_upload(b1.data(), b1.size()), w.b2 = tu_dev_upload(b2.data(), b2.size());
    w.E = E, w.H = H, w.I = I, w.swiglu_alpha = 1.702f, w.swiglu_limit = 7.0f;
    w.w1_folded = w.w2_folded = 1; /* scales ≤ 128 */
    L.router_w = tu_dev_upload(rw.data(), rw.size());
    L.router_b = tu_dev_upload(rb.data(), rb.size());
    CUDA_CHECK(cudaDeviceSynchronize());
    return L;
}

static void free_layer(layer &L) {
    CUDA_CHECK(cudaFree((void *)L.w.w1_q));
    CUDA_CHECK(cudaFree((void *)L.w.w1_s));
    CUDA_CHECK(cudaFree((void *)L.w.w2_q));
    CUDA_CHECK(cudaFree((void *)L.w.w2_s));
    CUDA_CHECK(cudaFree((void *)L.w.b1));
    CUDA_CHECK(cudaFree((void *)L.w.b2));
    CUDA_CHECK(cudaFree(L.router_w));
    CUDA_CHECK(cudaFree(L.router_b));
}

/* Everything one path writes, for one step of T tokens. */
struct outputs {
    int T, E;
    moe_plan plan;
    float *logits, *y;
    uint16_t *act;
    void *routing_buf;
    moe_routing r;
    size_t y_bytes, act_bytes, routing_bytes;
};

static outputs make_outputs(int T, int E, int sm) {
    outputs o;
    o.T = T, o.E = E;
    o.plan = moe_plan_for(T, E, TOPK, sm);
    o.logits = tu_dev_alloc<float>((size_t)T * E);
    o.y_bytes = moe_y_slots_bytes(T, TOPK, H, &o.plan);
    o.y = tu_dev_alloc<float>(o.y_bytes / 4);
    o.act_bytes = moe_act_bytes(T, TOPK, I);
    o.act = tu_dev_alloc<uint16_t>(o.act_bytes / 2);
    o.routing_bytes = moe_routing_bytes(T, E, TOPK);
    o.routing_buf = tu_dev_alloc<uint8_t>(o.routing_bytes);
    moe_routing_carve(&o.r, o.routing_buf, T, E, TOPK);
    return o;
}

static void poison(outputs &o, cudaStream_t st) {
    tu_poison(o.logits, (size_t)o.T * o.E * 4, st);
    tu_poison(o.y, o.y_bytes, st);
    tu_poison(o.act, o.act_bytes, st);
    tu_poison(o.routing_buf, o.routing_bytes, st);
}

static void free_outputs(outputs &o) {
    CUDA_CHECK(cudaFree(o.logits));
    CUDA_CHECK(cudaFree(o.y));
    CUDA_CHECK(cudaFree(o.act));
    CUDA_CHECK(cudaFree(o.routing_buf));
}

static cudaError_t run_unfused(const layer &L, const uint16_t *x, const uint16_t *x_lo, outputs &o,
                               cudaStream_t st) {
    cudaError_t e = gemv_bf16(x, x_lo, o.T, H, L.router_w, o.E, NULL, o.logits, 1, st);
    if (e == cudaSuccess) e = moe_route_split(o.logits, NULL, L.router_b, &o.r, st);
    if (e == cudaSuccess) e = moe_experts(&L.w, x, &o.r, &o.plan, o.act, o.y, st);
    return e;
}

static cudaError_t run_fused(const layer &L, const uint16_t *x, const uint16_t *x_lo, outputs &o,
                             unsigned *bar, cudaStream_t st) {
    return moe_decode_fused(&L.w, x, x_lo, L.router_w, L.router_b, o.logits, &o.r, &o.plan, o.act,
                            o.y, bar, st);
}

/* The host copy of the bytes a path is compared on. Only the entries the routing defines: pairs,
 * the E counts and E + 1 offsets, the touched experts and their tiles. */
struct snapshot {
    std::vector<uint8_t> logits, y, act, routing;
};

template <typename T> static void append(std::vector<uint8_t> &v, const T *d, size_t n) {
    std::vector<T> h(n);
    tu_download(h.data(), d, n);
    const uint8_t *b = (const uint8_t *)h.data();
    v.insert(v.end(), b, b + n * sizeof(T));
}

static snapshot take(const outputs &o) {
    snapshot s;
    CUDA_CHECK(cudaDeviceSynchronize());
    append(s.logits, o.logits, (size_t)o.T * o.E);
    append(s.y, o.y, o.y_bytes / 4);
    int nt = 0;
    tu_download(&nt, o.r.n_touched, 1);
    /* act: the rows of the T·k pairs (all of them are written) */
    append(s.act, o.act, (size_t)o.T * TOPK * I);
    const size_t P = (size_t)o.T * TOPK;
    append(s.routing, o.r.topk_idx, P);
    append(s.routing, o.r.topk_w, P);
    append(s.routing, o.r.count, o.E);
    append(s.routing, o.r.offset, o.E + 1);
    append(s.routing, o.r.pair_sorted, P);
    append(s.routing, o.r.n_touched, 1);
    if (nt > 0 && nt <= o.E) {
        append(s.routing, o.r.touched, nt);
        append(s.routing, o.r.tiles, nt);
    }
    return s;
}

static size_t count_diff(const std::vector<uint8_t> &a, const std::vector<uint8_t> &b) {
    if (a.size() != b.size()) return (size_t)-1;
    size_t n = 0;
    for (size_t i = 0; i < a.size(); i++) n += a[i] != b[i];
    return n;
}

static bool same(const snapshot &a, const snapshot &b, const char *what, int T, int E, int f1,
                 int f2) {
    const size_t dl = count_diff(a.logits, b.logits), dr = count_diff(a.routing, b.routing),
                 da = count_diff(a.act, b.act), dy = count_diff(a.y, b.y);
    CHECK(dl == 0 && dr == 0 && da == 0 && dy == 0,
          "%s, T=%d E=%d folded %d/%d: bytes differing: logits %zu, routing %zu, act %zu, y %zu",
          what, T, E, f1, f2, dl, dr, da, dy);
    return dl == 0 && dr == 0 && da == 0 && dy == 0;
}

static void check_case(layer &L, int T, int f1, int f2, unsigned *bar, cudaStream_t st, int sm) {
    const int E = L.w.E;
    L.w.w1_folded = f1, L.w.w2_folded = f2;
    std::vector<uint16_t> xh((size_t)T * H), xl((size_t)T * H);
    tu_fill_bf16(xh.data(), NULL, xh.size(), -2.0f, 2.0f);
    tu_fill_bf16(xl.data(), NULL, xl.size(), -0.004f, 0.004f);
    uint16_t *x = tu_dev_upload(xh.data(), xh.size()), *x_lo = tu_dev_upload(xl.data(), xl.size());
    outputs ref = make_outputs(T, E, sm), fu = make_outputs(T, E, sm);
    const bool ok = moe_fused_supported(T, E, TOPK, H, I, &fu.plan);
    CHECK(ok, "T=%d E=%d: the fused path should support this step", T, E);
    if (!ok) return;

    poison(ref, st);
    CUDA_CHECK(run_unfused(L, x, x_lo, ref, st));
    const snapshot want = take(ref);
    /* The unfused outputs are real numbers: a comparison with garbage would prove nothing. */
    size_t bad = tu_count_nonfinite_f32((const float *)want.y.data(), want.y.size() / 4);
    CHECK(bad == 0, "T=%d E=%d: the unfused path left %zu non-finite y values", T, E, bad);

    for (int mode = 1; mode <= 2; mode++) {
        moe_set_fused(mode);
        poison(fu, st);
        CHECK(run_fused(L, x, x_lo, fu, bar, st) == cudaSuccess, "T=%d: moe_decode_fused failed",
              T);
        const snapshot got = take(fu);
        same(want, got, mode == 1 ? "fused vs unfused" : "fused (deep prefetch) vs unfused", T, E,
             f1, f2);

        /* 20 more launches (no poison between: a launch that skipped a row would keep old bits, so
         * poison every fifth) and a graph replay. */
        bool all = true;
        for (int rep = 0; rep < 20 && all; rep++) {
            if (rep % 5 == 0) poison(fu, st);
            CUDA_CHECK(run_fused(L, x, x_lo, fu, bar, st));
            all = same(want, take(fu), "fused, repeated", T, E, f1, f2);
        }
        cudaGraph_t g;
        cudaGraphExec_t ge;
        poison(fu, st);
        CUDA_CHECK(cudaStreamSynchronize(st));
        CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        const cudaError_t ce = run_fused(L, x, x_lo, fu, bar, st);
        CUDA_CHECK(cudaStreamEndCapture(st, &g));
        CHECK(ce == cudaSuccess, "T=%d: the fused launch under stream capture: %s", T,
              cudaGetErrorString(ce));
        CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
        for (int rep = 0; rep < 3; rep++) CUDA_CHECK(cudaGraphLaunch(ge, st));
        same(want, take(fu), "fused, graph replay", T, E, f1, f2);
        CUDA_CHECK(cudaGraphExecDestroy(ge));
        CUDA_CHECK(cudaGraphDestroy(g));
        int nt = 0;
        tu_download(&nt, fu.r.n_touched, 1);
        fprintf(stderr,
                "T=%d E=%d folded %d/%d mode %d: %d touched experts, down split %d: compared\n", T,
                E, f1, f2, mode, nt, fu.plan.down_splits);
    }
    moe_set_fused(0);
    free_outputs(ref);
    free_outputs(fu);
    CUDA_CHECK(cudaFree(x));
    CUDA_CHECK(cudaFree(x_lo));
}

static void check_refusals(const layer &L, unsigned *bar, cudaStream_t st, int sm) {
    moe_plan p = moe_plan_for(1, L.w.E, TOPK, sm);
    CHECK(moe_fused_supported(1, 128, 4, H, I, &p), "T=1 on 120b's shapes is supported");
    CHECK(!moe_fused_supported(9, 128, 4, H, I, &p), "T=9 is refused");
    CHECK(!moe_fused_supported(1, 300, 4, H, I, &p), "E=300 is refused");
    CHECK(!moe_fused_supported(1, 128, 4, 4096, I, &p), "H=4096 is refused (router row width)");
    moe_plan large = p;
    large.large = 1;
    CHECK(!moe_fused_supported(1, 128, 4, H, I, &large), "the large path's plan is refused");
    outputs o = make_outputs(1, L.w.E, sm);
    CHECK(moe_decode_fused(&L.w, NULL, NULL, L.router_w, L.router_b, o.logits, &o.r, &o.plan, o.act,
                           o.y, bar, st) == cudaErrorInvalidValue,
          "a NULL input is refused");
    CHECK(moe_decode_fused(&L.w, o.act, NULL, L.router_w, L.router_b, o.logits, &o.r, &o.plan,
                           o.act, o.y, NULL, st) == cudaErrorInvalidValue,
          "a NULL barrier is refused");
    free_outputs(o);
}

static void bench(cudaStream_t st, unsigned *bar, int sm) {
    layer L = make_layer(128);
    enum { SETS = 16 };
    printf("| T | unfused µs (gemv + route + experts) | fused µs | fused / unfused | fused, deep "
           "prefetch µs | deep / unfused |\n");
    printf("| ---: | ---: | ---: | ---: | ---: | ---: |\n");
    /* probe p: 0 whole, 1-3 stop after router / routing / gate_up, 4 whole without the
     * cooperative attribute, 5-6 compiled for 3 blocks an SM (whole, and up to gate_up) */
    for (int probe = 0; probe <= 6; probe++)
        for (int T : {1, 8}) {
            moe_fused_set_probe(probe <= 3 ? probe : probe == 6 ? 3 : 0, probe == 4, probe >= 5);
            static const char *names[7] = {"whole",
                                           "router only",
                                           "+ routing",
                                           "+ gate_up",
                                           "whole, plain launch",
                                           "whole, 3 blocks an SM",
                                           "+ gate_up, 3 blocks an SM"};
            printf("| probe: %s | | | | | |\n", names[probe]);
            std::vector<uint16_t> xh((size_t)SETS * T * H), xl((size_t)SETS * T * H);
            tu_fill_bf16(xh.data(), NULL, xh.size(), -2.0f, 2.0f);
            tu_fill_bf16(xl.data(), NULL, xl.size(), -0.004f, 0.004f);
            uint16_t *x = tu_dev_upload(xh.data(), xh.size()),
                     *x_lo = tu_dev_upload(xl.data(), xl.size());
            outputs o = make_outputs(T, 128, sm);
            double us[3];
            for (int fused = 0; fused < 3; fused++) {
                moe_set_fused(fused);
                cudaGraphExec_t ge[SETS];
                for (int s = 0; s < SETS; s++) {
                    cudaGraph_t g;
                    const size_t at = (size_t)s * T * H;
                    CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
                    if (fused)
                        CUDA_CHECK(run_fused(L, x + at, x_lo + at, o, bar, st));
                    else
                        CUDA_CHECK(run_unfused(L, x + at, x_lo + at, o, st));
                    CUDA_CHECK(cudaStreamEndCapture(st, &g));
                    CUDA_CHECK(cudaGraphInstantiate(&ge[s], g, 0));
                    CUDA_CHECK(cudaGraphDestroy(g));
                }
                us[fused] = tu_time_us(
                    st, 8, 64, [&](int rep) { CUDA_CHECK(cudaGraphLaunch(ge[rep % SETS], st)); });
                for (int s = 0; s < SETS; s++) CUDA_CHECK(cudaGraphExecDestroy(ge[s]));
            }
            printf("| %d | %.1f | %.1f | %.3f | %.1f | %.3f |\n", T, us[0], us[1], us[1] / us[0],
                   us[2], us[2] / us[0]);
            fflush(stdout);
            free_outputs(o);
            CUDA_CHECK(cudaFree(x));
            CUDA_CHECK(cudaFree(x_lo));
        }
    moe_fused_set_probe(0, 0, 0);
    free_layer(L);
}

int main(int argc, char **argv) {
    tu_init("test_moe_fused");
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreate(&st));
    const int sm = tu_sm_count();
    unsigned *bar = tu_dev_alloc<unsigned>(2);
    CUDA_CHECK(cudaMemset(bar, 0, 2 * sizeof(unsigned)));
    if (tu_has_flag(argc, argv, "--bench")) {
        bench(st, bar, sm);
    } else {
        for (int E : {32, 128}) {
            layer L = make_layer(E);
            for (int T = 1; T <= 8; T++) {
                const int f = E == 128 && T == 3 ? 0
                              : T == 5           ? 2
                                                 : 3; /* folded both, none, mixed */
                check_case(L, T, f & 1, f >> 1, bar, st, sm);
            }
            if (E == 128) check_refusals(L, bar, st, sm);
            free_layer(L);
        }
    }
    CUDA_CHECK(cudaFree(bar));
    CUDA_CHECK(cudaStreamDestroy(st));
    return check_report("test_moe_fused");
}
