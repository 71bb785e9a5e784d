/* The MoE kernels (moe.h) against the CPU reference (cpu_topk_softmax, cpu_mxfp4_linear, cpu_swiglu,
 * the same expert loop as cpu_model.c's moe_block), at the real shapes H = I = 2880, top-4, E = 32 and
 * 128, for T = 1, 3, 8, 64, 300, 2048 tokens:
 *   - the repack (moe_repack_device): every repacked word decodes (by a host emulation of the
 *     kernels' bit tricks) to the checkpoint's values, signs of zero included, and every scale byte
 *     is the checkpoint's (one expert with every byte value and the whole range of scales, and the
 *     first and last expert of each test layer);
 *   - routing: top-4 indices identical to the CPU's (logits with deliberate ties: rounded values and
 *     all-equal rows), weights equal to rounding, grouping a stable permutation with consistent
 *     counts, offsets, touched list and tile list;
 *   - experts through the automatic plan and the other path(s): outputs poisoned with NaN first, every
 *     slot row must be written, and Σ slots per token within ‖·‖ relative error 1e-2 of the reference
 *     (a random subset of 64 tokens when T > 64); two runs bit-identical. The large path on mma.sync
 *     and on the wgmma kernels (moe_wgmma.cu, the warp-specialised moe_wgmma_ws.cu and its TMA-fed
 *     form moe_wgmma_tma.cu, which must give the bits of ws at full width), each with 128- and
 *     with 64-token tiles (moe_plan.bn); the ws and tma kernels' folded dequantisation gives the
 *     two-multiply one's bits; ws's narrow form (its default) gives its full width's bits, and
 *     the tma kernel's register-A form (64-token tiles; the default there) comes within 4e-3 of
 *     ws (its MMAs group a k16 block's products otherwise), gives the same bits twice, folded
 *     as two-multiply, and the same bits at each of its block shapes (GPTOSS_MOE_RS_SHAPE);
 *   - expert parallelism (moe_routing's e0, n_e): the experts split over 2 and 4 ranks, each
 *     grouping only its range's pairs on weights holding only its experts: each grouping is the
 *     one-GPU grouping's slice, renumbered; every row of another range's pair is zero; and the
 *     ranks' y_slots summed equal the automatic plan's one-GPU y_slots exactly.
 * Random MXFP4 codes with scales 2^-7 … 2^-5, fresh every run.
 *
 * --bench: 120b shapes (E = 128), T = 1, 8, 64, 256, 1024, 4096, 16384, random routing, three copies
 * of the layer's weights rotated; routing, experts (the large path also on the three wgmma kernels
 * at both tile widths, ws at full width, and the register-A form at each block shape) and the
 * combine timed separately. --bench-t T1,T2,…: those T instead (any counts; for ncu and crossovers). */
#include "moe_test_util.h"

extern "C" {
#include "backend/cpu/ops.h"
}
#include "backend/cuda/moe.h"
#include "backend/cuda/moe_dequant.cuh" /* place_codes */
#include "backend/cuda/norm.h"

static const int H = 2880, I = 2880, TOPK = 4;
static const float ALPHA = 1.702f, LIMIT = 7.0f;

typedef struct {
    int E;
    std::vector<uint8_t> w1b, w1s, w2b, w2s; /* checkpoint layout */
    std::vector<uint16_t> b1, b2;
} layer_host;

static void gen_layer(layer_host *L, int E) {
    L->E = E;
    const size_t r1 = (size_t)E * 2 * I, r2 = (size_t)E * H;
    L->w1b.resize(r1 * (H / 32) * 16), L->w1s.resize(r1 * (H / 32));
    L->w2b.resize(r2 * (I / 32) * 16), L->w2s.resize(r2 * (I / 32));
    tu_fill_bytes(L->w1b.data(), L->w1b.size());
    tu_fill_bytes(L->w2b.data(), L->w2b.size());
    for (auto &s : L->w1s) s = (uint8_t)(120 + rng_next(&tu_rng) % 3); /* 2^-7 … 2^-5 */
    for (auto &s : L->w2s) s = (uint8_t)(120 + rng_next(&tu_rng) % 3);
    L->b1.resize(r1), L->b2.resize(r2);
    tu_fill_bf16(L->b1.data(), NULL, r1, -0.5f, 0.5f);
    tu_fill_bf16(L->b2.data(), NULL, r2, -0.5f, 0.5f);
}

/* ---- host emulation of the kernel's dequantisation ---- */

static void emu_dequant(uint32_t q, uint8_t S, float out[8]) {
    uint32_t r[4];
    place_codes(q, r); /* the kernels' own bit placement, run on the host */
    const float scale = S ? ldexpf(1.0f, (int)S - 127) : 0.0f; /* the kernel maps S = 0 to 0 */
    const float two126 = ldexpf(1.0f, 126);
    for (int p = 0; p < 4; p++) {
        out[2 * p] = bf16_to_f32((uint16_t)(r[p] & 0xffffu)) * two126 * scale;
        out[2 * p + 1] = bf16_to_f32((uint16_t)(r[p] >> 16)) * two126 * scale;
    }
}

/* Checkpoint row of tile row i of row tile rt (mirror of moe_repack.cu's tile_row). */
static int ref_tile_row(int rt, int i, int gate_up) {
    return gate_up ? 2 * (8 * rt + (i & 7)) + (i >> 3) : 16 * rt + i;
}

/* Checks one repacked expert (host copies q, s of moe_repack_device's output) word by word against
 * the checkpoint's blocks and scales: each word's 8 values as the kernels decode them, zero signs
 * included, and each scale byte, so that every bit of the layout is pinned. */
static void check_repack_layout(const uint8_t *blocks, const uint8_t *scales, const uint8_t *q,
                                const uint8_t *s, int R, int K, int gate_up, const char *what) {
    const int RT = R / 16, KK = K / 64, nb = K / 32;
    size_t bad = 0, bad_scale = 0;
    for (int rt = 0; rt < RT; rt++)
        for (int kk = 0; kk < KK; kk++)
            for (int lane = 0; lane < 32; lane++)
                for (int j = 0; j < 4; j++) {
                    const int g = lane >> 2, t = lane & 3;
                    const size_t wi = (((size_t)rt * KK + kk) * 32 + lane) * 4 + j;
                    uint32_t word;
                    memcpy(&word, &q[wi * 4], 4);
                    const uint8_t S = s[(((size_t)rt * KK + kk) * 8 + g) * 4 + j];
                    float v[8];
                    emu_dequant(word, S, v);
                    const int row = ref_tile_row(rt, g + 8 * (j & 1), gate_up),
                              chunk = 2 * kk + (j >> 1);
                    bad_scale += S != scales[(size_t)row * nb + chunk];
                    const float sc = e8m0_to_f32(scales[(size_t)row * nb + chunk]);
                    for (int i = 0; i < 8; i++) {
                        const int k = 8 * t + i;
                        const uint8_t byte = blocks[((size_t)row * nb + chunk) * 16 + k / 2];
                        const float ref = MXFP4_VALUES[(k & 1) ? byte >> 4 : byte & 15] * sc;
                        if (v[i] != ref || signbit(v[i]) != signbit(ref)) bad++;
                    }
                }
    CHECK(bad == 0, "%s: %zu repacked values decode differently from the checkpoint", what, bad);
    CHECK(bad_scale == 0, "%s: %zu repacked scale bytes differ from the checkpoint's", what,
          bad_scale);
}

/* Repacks one expert (checkpoint layout, host) on the GPU and checks the result. */
static void check_repack_one(const uint8_t *blocks, const uint8_t *scales, int R, int K,
                             int gate_up, const char *what) {
    const size_t nb = (size_t)R * (K / 32) * 16, ns = (size_t)R * (K / 32);
    const size_t nq = moe_repack_q_bytes(1, R, K), nsq = moe_repack_s_bytes(1, R, K);
    uint8_t *d_b = tu_dev_upload(blocks, nb), *d_s = tu_dev_upload(scales, ns);
    uint8_t *d_q = tu_dev_alloc<uint8_t>(nq), *d_sq = tu_dev_alloc<uint8_t>(nsq);
    tu_poison(d_q, nq, 0);
    tu_poison(d_sq, nsq, 0);
    CUDA_CHECK(moe_repack_device(d_b, d_s, 1, R, K, gate_up, d_q, d_sq, 0));
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint8_t> q(nq), s(nsq);
    tu_download(q.data(), d_q, nq);
    tu_download(s.data(), d_sq, nsq);
    check_repack_layout(blocks, scales, q.data(), s.data(), R, K, gate_up, what);
    CUDA_CHECK(cudaFree(d_b));
    CUDA_CHECK(cudaFree(d_s));
    CUDA_CHECK(cudaFree(d_q));
    CUDA_CHECK(cudaFree(d_sq));
}

/* One expert of each matrix, random codes and scales over the whole normal range, plus every byte
 * value in row 0. */
static void check_repack_random(void) {
    const int R1 = 2 * I, R2 = H;
    std::vector<uint8_t> b1((size_t)R1 * (H / 32) * 16), s1((size_t)R1 * (H / 32));
    std::vector<uint8_t> b2((size_t)R2 * (I / 32) * 16), s2((size_t)R2 * (I / 32));
    tu_fill_bytes(b1.data(), b1.size());
    tu_fill_bytes(b2.data(), b2.size());
    for (auto &v : s1) v = (uint8_t)(1 + rng_next(&tu_rng) % 254); /* the whole normal range */
    for (auto &v : s2) v = (uint8_t)(110 + rng_next(&tu_rng) % 20);
    for (size_t i = 0; i < 256; i++) b1[i] = (uint8_t)i; /* all byte values in row 0 */
    check_repack_one(b1.data(), s1.data(), R1, H, 1, "gate_up repack");
    check_repack_one(b2.data(), s2.data(), R2, I, 0, "down repack");
}

/* The plan's path and wgmma tile width at 120b's E = 128, top-4: the large path from 16 pairs per
 * expert (T = 512), 64-token tiles below 128 pairs (T = 4096); the small path's tokens a pass. */
static void check_plans(void) {
    moe_plan p = moe_plan_for(1, 128, 4, 132);
    CHECK(!p.large && p.down_splits >= 1, "plan T=1: large=%d splits=%d", p.large, p.down_splits);
    static const struct {
        int T, large, bn;
    } want[] = {{256, 0, 64},  {511, 0, 64},   {512, 1, 64},   {1024, 1, 64},
                {4095, 1, 64}, {4096, 1, 128}, {16384, 1, 128}};
    for (const auto &c : want) {
        p = moe_plan_for(c.T, 128, 4, 132);
        CHECK(p.large == c.large && p.bn == c.bn, "plan T=%d: large=%d bn=%d, expected %d and %d",
              c.T, p.large, p.bn, c.large, c.bn);
    }
    /* The small path stages 8 tokens a pass up to 4 pairs per expert (T = 128), 16 above. */
    static const struct { int T, ntp; } ntp[] = {{1, 1}, {64, 1}, {128, 1}, {129, 2}, {256, 2}};
    for (const auto &c : ntp) {
        p = moe_plan_for(c.T, 128, 4, 132);
        CHECK(!p.large && p.ntp == c.ntp, "plan T=%d: ntp=%d, expected %d", c.T, p.ntp, c.ntp);
    }
}

/* ---- device layer ---- */

typedef struct {
    uint8_t *w1q, *w1s, *w2q, *w2s;
    uint16_t *b1, *b2;
} layer_dev;

static void upload_layer(const layer_host *L, layer_dev *D, int copies) {
    const int E = L->E;
    uint8_t *raw_b1 = tu_dev_upload(L->w1b.data(), L->w1b.size()),
            *raw_s1 = tu_dev_upload(L->w1s.data(), L->w1s.size());
    uint8_t *raw_b2 = tu_dev_upload(L->w2b.data(), L->w2b.size()),
            *raw_s2 = tu_dev_upload(L->w2s.data(), L->w2s.size());
    for (int c = 0; c < copies; c++) {
        D[c].w1q = tu_dev_alloc<uint8_t>(moe_repack_q_bytes(E, 2 * I, H));
        D[c].w1s = tu_dev_alloc<uint8_t>(moe_repack_s_bytes(E, 2 * I, H));
        D[c].w2q = tu_dev_alloc<uint8_t>(moe_repack_q_bytes(E, H, I));
        D[c].w2s = tu_dev_alloc<uint8_t>(moe_repack_s_bytes(E, H, I));
        CUDA_CHECK(moe_repack_device(raw_b1, raw_s1, E, 2 * I, H, 1, D[c].w1q, D[c].w1s, 0));
        CUDA_CHECK(moe_repack_device(raw_b2, raw_s2, E, H, I, 0, D[c].w2q, D[c].w2s, 0));
        D[c].b1 = tu_dev_upload(L->b1.data(), L->b1.size());
        D[c].b2 = tu_dev_upload(L->b2.data(), L->b2.size());
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaFree(raw_b1));
    CUDA_CHECK(cudaFree(raw_s1));
    CUDA_CHECK(cudaFree(raw_b2));
    CUDA_CHECK(cudaFree(raw_s2));
}

static void free_layer(layer_dev *D) {
    CUDA_CHECK(cudaFree(D->w1q));
    CUDA_CHECK(cudaFree(D->w1s));
    CUDA_CHECK(cudaFree(D->w2q));
    CUDA_CHECK(cudaFree(D->w2s));
    CUDA_CHECK(cudaFree(D->b1));
    CUDA_CHECK(cudaFree(D->b2));
}

static moe_weights weights_of(const layer_dev *D, int E) {
    moe_weights w;
    w.w1_q = D->w1q, w.w1_s = D->w1s, w.b1 = D->b1, w.w2_q = D->w2q, w.w2_s = D->w2s, w.b2 = D->b2;
    w.E = E, w.H = H, w.I = I, w.swiglu_alpha = ALPHA, w.swiglu_limit = LIMIT;
    int m1 = -1, m2 = -1;
    CUDA_CHECK(moe_scales_max(D->w1s, moe_repack_s_bytes(E, 2 * I, H), &m1, 0));
    CUDA_CHECK(moe_scales_max(D->w2s, moe_repack_s_bytes(E, H, I), &m2, 0));
    CHECK(m1 == 122 && m2 == 122, "moe_scales_max: %d and %d, the scales were drawn from 120…122",
          m1, m2);
    w.w1_folded = m1 <= MOE_FOLDED_SCALE_MAX, w.w2_folded = m2 <= MOE_FOLDED_SCALE_MAX;
    return w;
}

/* The layer's repack (all experts in one launch, as at load), first and last expert checked. */
static void check_repack_layer(const layer_host *L, const layer_dev *D) {
    const int E = L->E;
    for (int e : {0, E - 1}) {
        for (int m = 0; m < 2; m++) {
            const int R = m == 0 ? 2 * I : H, K = m == 0 ? H : I;
            const uint8_t *blocks =
                (m == 0 ? L->w1b.data() : L->w2b.data()) + (size_t)e * R * (K / 32) * 16;
            const uint8_t *scales =
                (m == 0 ? L->w1s.data() : L->w2s.data()) + (size_t)e * R * (K / 32);
            const size_t qn = moe_repack_q_bytes(1, R, K), sn = moe_repack_s_bytes(1, R, K);
            std::vector<uint8_t> qd(qn), sd(sn);
            tu_download(qd.data(), (m == 0 ? D->w1q : D->w2q) + (size_t)e * qn, qn);
            tu_download(sd.data(), (m == 0 ? D->w1s : D->w2s) + (size_t)e * sn, sn);
            char what[64];
            snprintf(what, sizeof what, "E=%d expert %d %s", E, e, m == 0 ? "gate_up" : "down");
            check_repack_layout(blocks, scales, qd.data(), sd.data(), R, K, m == 0, what);
        }
    }
}

/* Random logits with ties: every 4th token rounded to multiples of 0.5, every 8th all equal, every
 * 16th with its first 8 logits +0 and -0 in turn (equal: the lowest indices win) above the rest. */
static void gen_logits(std::vector<float> &lg, int T, int E) {
    lg.resize((size_t)T * E);
    for (int t = 0; t < T; t++)
        for (int e = 0; e < E; e++) {
            float v = tu_uniform(-4.0f, 4.0f);
            if (t % 4 == 1) v = roundf(v * 2.0f) / 2.0f;
            if (t % 8 == 3) v = 0.25f;
            if (t % 16 == 5) v = e < 8 ? ((e & 1) ? -0.0f : 0.0f) : -fabsf(v) - 0.5f;
            lg[(size_t)t * E + e] = v;
        }
}

typedef struct {
    std::vector<int> idx, count, offset, pair_sorted, touched, tiles;
    std::vector<float> w;
    int n_touched, n_tiles;
} routing_host;

static void download_routing(const moe_routing *r, routing_host *h) {
    const size_t P = (size_t)r->T * r->k;
    h->idx.resize(P), h->w.resize(P), h->count.resize(r->E), h->offset.resize(r->E + 1),
        h->pair_sorted.resize(P);
    h->touched.resize(r->E);
    tu_download(h->idx.data(), r->topk_idx, P);
    tu_download(h->w.data(), r->topk_w, P);
    tu_download(h->count.data(), r->count, (size_t)r->E);
    tu_download(h->offset.data(), r->offset, (size_t)r->E + 1);
    tu_download(h->pair_sorted.data(), r->pair_sorted, P);
    tu_download(h->touched.data(), r->touched, (size_t)r->E);
    tu_download(&h->n_touched, r->n_touched, 1);
    tu_download(&h->n_tiles, r->n_tiles, 1);
    h->tiles.resize(h->n_tiles > 0 ? h->n_tiles : 0);
    if (h->n_tiles > 0) tu_download(h->tiles.data(), r->tiles, (size_t)h->n_tiles);
}

static void check_routing(const std::vector<float> &lg, int T, int E, const routing_host *g) {
    const size_t P = (size_t)T * TOPK;
    size_t idx_bad = 0, w_bad = 0;
    for (int t = 0; t < T; t++) {
        int idx[TOPK];
        float w[TOPK];
        cpu_topk_softmax(&lg[(size_t)t * E], E, TOPK, idx, w);
        for (int j = 0; j < TOPK; j++) {
            idx_bad += g->idx[(size_t)t * TOPK + j] != idx[j];
            w_bad += fabsf(g->w[(size_t)t * TOPK + j] - w[j]) > 1e-6f * (1.0f + w[j]);
        }
    }
    CHECK(idx_bad == 0, "E=%d T=%d: %zu top-k indices differ from cpu_topk_softmax", E, T, idx_bad);
    CHECK(w_bad == 0, "E=%d T=%d: %zu routing weights differ from cpu_topk_softmax", E, T, w_bad);
    /* Grouping: counts, offsets, a stable permutation, touched list, tiles. */
    std::vector<int> cnt(E, 0);
    for (size_t p = 0; p < P; p++) cnt[g->idx[p]]++;
    bool ok = g->offset[0] == 0;
    int nt = 0, ntl = 0;
    for (int e = 0; e < E; e++) {
        ok &= g->count[e] == cnt[e] && g->offset[e + 1] == g->offset[e] + cnt[e];
        if (cnt[e]) ok &= nt < E && g->touched[nt++] == e;
        for (int b = 0; b * MOE_TILE_TOKENS < cnt[e]; b++)
            ok &= ntl < g->n_tiles && g->tiles[ntl++] == ((e << 16) | b);
    }
    ok &= g->n_touched == nt && g->n_tiles == ntl;
    CHECK(ok, "E=%d T=%d: counts / offsets / touched / tiles inconsistent", E, T);
    std::vector<char> seen(P, 0);
    bool perm = true;
    for (int e = 0; e < E && perm; e++)
        for (int i = g->offset[e]; i < g->offset[e + 1]; i++) {
            const int p = g->pair_sorted[i];
            perm &= p >= 0 && (size_t)p < P && !seen[p] && g->idx[p] == e &&
                    (i == g->offset[e] || g->pair_sorted[i - 1] < p);
            if (perm) seen[p] = 1;
        }
    CHECK(perm, "E=%d T=%d: pair_sorted is not the stable grouping by expert", E, T);
}

/* Reference MoE output (before the residual add) for the given tokens, as moe_block computes it. */
static void cpu_moe(const layer_host *L, const std::vector<float> &xf, const std::vector<float> &lg,
                    int E, const std::vector<int> &toks, std::vector<float> &out) {
    const int nb1 = H / 32, nb2 = I / 32, R1 = 2 * I;
    const int n = (int)toks.size();
    out.assign((size_t)n * H, 0.0f);
    std::vector<int> sidx((size_t)n * TOPK);
    std::vector<float> sw((size_t)n * TOPK);
    for (int i = 0; i < n; i++)
        cpu_topk_softmax(&lg[(size_t)toks[i] * E], E, TOPK, &sidx[(size_t)i * TOPK],
                         &sw[(size_t)i * TOPK]);
    dense_ref b1 = {L->b1.data(), ST_BF16}, b2 = {L->b2.data(), ST_BF16};
    std::vector<float> xin, gu, act, down;
    for (int e = 0; e < E; e++) {
        std::vector<int> who;
        std::vector<float> gate;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < TOPK; j++)
                if (sidx[(size_t)i * TOPK + j] == e)
                    who.push_back(i), gate.push_back(sw[(size_t)i * TOPK + j]);
        if (who.empty()) continue;
        const int c = (int)who.size();
        xin.resize((size_t)c * H), gu.resize((size_t)c * R1), act.resize((size_t)c * I),
            down.resize((size_t)c * H);
        for (int i = 0; i < c; i++)
            memcpy(&xin[(size_t)i * H], &xf[(size_t)toks[who[i]] * H], (size_t)H * 4);
        cpu_mxfp4_linear(xin.data(), c, H, L->w1b.data() + (size_t)e * R1 * nb1 * 16,
                         L->w1s.data() + (size_t)e * R1 * nb1, b1, (size_t)e * R1, R1, gu.data());
        for (int i = 0; i < c; i++)
            cpu_swiglu(&gu[(size_t)i * R1], I, ALPHA, LIMIT, &act[(size_t)i * I]);
        cpu_mxfp4_linear(act.data(), c, I, L->w2b.data() + (size_t)e * H * nb2 * 16,
                         L->w2s.data() + (size_t)e * H * nb2, b2, (size_t)e * H, H, down.data());
        for (int i = 0; i < c; i++)
            for (int r = 0; r < H; r++)
                out[(size_t)who[i] * H + r] += gate[i] * down[(size_t)i * H + r];
    }
}

static const char *plan_name(const moe_plan *p, char *buf, size_t n) {
    if (p->large)
        snprintf(buf, n, "large");
    else
        snprintf(buf, n, "small(ntp=%d,S=%d%s)", p->ntp, p->down_splits,
                 p->tail_split ? ",tail" : "");
    return buf;
}

static void run_experts_case(const moe_weights *w, const moe_routing *r, const moe_plan *plan,
                             const uint16_t *d_x, uint16_t *d_act, float *d_y, int T, int E,
                             const std::vector<int> &toks, const std::vector<float> &ref,
                             cudaStream_t st, std::vector<float> *y_keep) {
    char pn[64];
    plan_name(plan, pn, sizeof pn);
    const size_t P = (size_t)T * TOPK;
    const int S = plan->large ? 1 : plan->down_splits;
    const size_t ny = (size_t)T * TOPK * S * H;
    tu_poison(d_act, P * I * 2, st);
    tu_poison(d_y, ny * 4, st);
    cudaError_t e = moe_experts(w, d_x, r, plan, d_act, d_y, st);
    CHECK(e == cudaSuccess, "E=%d T=%d %s: launch: %s", E, T, pn, cudaGetErrorString(e));
    if (e != cudaSuccess) return;
    CUDA_CHECK(cudaStreamSynchronize(st));
    CUDA_CHECK(cudaGetLastError());
    std::vector<uint16_t> act(P * I);
    std::vector<float> y(ny);
    tu_download(act.data(), d_act, act.size());
    tu_download(y.data(), d_y, ny);
    const size_t bad_act = tu_count_nonfinite_bf16(act.data(), act.size());
    const size_t bad_y = tu_count_nonfinite_f32(y.data(), ny);
    CHECK(bad_act == 0, "E=%d T=%d %s: %zu of %zu activations not written / not finite", E, T, pn,
          bad_act, act.size());
    CHECK(bad_y == 0, "E=%d T=%d %s: %zu of %zu slot outputs not written / not finite", E, T, pn,
          bad_y, ny);
    std::vector<float> got(toks.size() * H, 0.0f);
    for (size_t i = 0; i < toks.size(); i++)
        for (int sl = 0; sl < TOPK * S; sl++)
            for (int c = 0; c < H; c++)
                got[i * H + c] += y[((size_t)toks[i] * TOPK * S + sl) * H + c];
    const double err = tu_rel_err(got.data(), ref.data(), got.size());
    CHECK(err <= 1e-2, "E=%d T=%d %s: relative error %.3g > 1e-2", E, T, pn, err);
    fprintf(stderr, "  E=%-3d T=%-4d %-20s rel err %.2e\n", E, T, pn, err);
    if (y_keep) *y_keep = y;
}

/* Expert parallelism (moe.h) over n ranks, against the one-GPU routing `full` and y_slots y1 of the
 * same plan: rank q holds experts [e0, e0 + E/n) (weights: pointers into the whole layer's) and
 * groups only their pairs. Each row of y_slots is computed whole by one rank with the same kernel
 * on the same tokens, and the other ranks' rows are +0, so the sum is exact. */
static void check_ep(const layer_dev *D, const moe_weights *w, int E, int T, const float *d_lg,
                     const uint16_t *d_x, const moe_plan *plan, const routing_host *full,
                     const std::vector<float> &y1, uint16_t *d_act, float *d_y, cudaStream_t st) {
    const int S = plan->large ? 1 : plan->down_splits;
    const size_t P = (size_t)T * TOPK, ny = P * S * H, nb = moe_routing_bytes(T, E, TOPK);
    CHECK(y1.size() == ny, "E=%d T=%d EP: no one-GPU y_slots to compare with", E, T);
    if (y1.size() != ny) return;
    void *rbuf = tu_dev_alloc<uint8_t>(nb);
    std::vector<float> y(ny), sum(ny);
    for (int n : {2, 4}) {
        const int ne = E / n;
        std::fill(sum.begin(), sum.end(), 0.0f);
        size_t group_bad = 0, nonzero = 0;
        for (int q = 0; q < n; q++) {
            const int e0 = q * ne;
            moe_routing r;
            moe_routing_carve(&r, rbuf, T, E, TOPK);
            r.e0 = e0, r.n_e = ne;
            CUDA_CHECK(cudaMemsetAsync(rbuf, 0xff, nb, st)); /* poison */
            CUDA_CHECK(moe_route_split(d_lg, NULL, NULL, &r, st));
            CUDA_CHECK(cudaStreamSynchronize(st));
            routing_host h;
            download_routing(&r, &h);
            /* The slice of the one-GPU grouping: [full.offset[e0], full.offset[e0 + ne]). */
            const int o0 = full->offset[e0], o1 = full->offset[e0 + ne];
            group_bad += h.idx != full->idx || memcmp(h.w.data(), full->w.data(), P * 4) != 0;
            for (int i = 0; i < ne; i++)
                group_bad +=
                    h.count[i] != full->count[e0 + i] || h.offset[i] != full->offset[e0 + i] - o0;
            group_bad += h.offset[ne] != o1 - o0;
            for (int i = 0; i < o1 - o0 && h.offset[ne] == o1 - o0; i++)
                group_bad += h.pair_sorted[i] != full->pair_sorted[o0 + i];
            int nt = 0, ntl = 0;
            for (int i = 0; i < full->n_touched; i++) {
                const int e = full->touched[i] - e0;
                if (e >= 0 && e < ne) group_bad += nt >= ne || h.touched[nt++] != e;
            }
            for (int i = 0; i < full->n_tiles; i++) {
                const int e = (full->tiles[i] >> 16) - e0;
                if (e >= 0 && e < ne)
                    group_bad += ntl >= h.n_tiles ||
                                 h.tiles[ntl++] != ((e << 16) | (full->tiles[i] & 0xffff));
            }
            group_bad += h.n_touched != nt || h.n_tiles != ntl;

            moe_weights wl = *w;
            wl.E = ne;
            wl.w1_q = D->w1q + moe_repack_q_bytes(e0, 2 * I, H);
            wl.w1_s = D->w1s + moe_repack_s_bytes(e0, 2 * I, H);
            wl.w2_q = D->w2q + moe_repack_q_bytes(e0, H, I);
            wl.w2_s = D->w2s + moe_repack_s_bytes(e0, H, I);
            wl.b1 = D->b1 + (size_t)e0 * 2 * I, wl.b2 = D->b2 + (size_t)e0 * H;
            tu_poison(d_act, P * I * 2, st);
            tu_poison(d_y, ny * 4, st);
            const cudaError_t e = moe_experts(&wl, d_x, &r, plan, d_act, d_y, st);
            CHECK(e == cudaSuccess, "E=%d T=%d EP%d rank %d: %s", E, T, n, q,
                  cudaGetErrorString(e));
            CUDA_CHECK(cudaStreamSynchronize(st));
            tu_download(y.data(), d_y, ny);
            for (size_t row = 0; row < P * S; row++) {
                const int ex = full->idx[row / S];
                const bool local = ex >= e0 && ex < e0 + ne;
                for (int c = 0; c < H; c++) {
                    const float v = y[row * H + c];
                    if (!local) nonzero += v != 0.0f; /* NaN (not written) counts too */
                    sum[row * H + c] += v;
                }
            }
        }
        size_t differ = 0;
        for (size_t i = 0; i < ny; i++) differ += !(sum[i] == y1[i]);
        CHECK(group_bad == 0, "E=%d T=%d EP%d: %zu grouping entries differ from the one-GPU slice",
              E, T, n, group_bad);
        CHECK(nonzero == 0, "E=%d T=%d EP%d: %zu values of other ranks' pairs' rows are not zero",
              E, T, n, nonzero);
        CHECK(differ == 0, "E=%d T=%d EP%d: %zu of %zu summed y_slots values differ from one GPU's",
              E, T, n, differ, ny);
        fprintf(stderr, "  E=%-3d T=%-4d EP%d: grouping slices, zero rows, exact sum: %s\n", E, T,
                n, group_bad + nonzero + differ == 0 ? "yes" : "NO");
    }
    CUDA_CHECK(cudaFree(rbuf));
}

static void test_E(int E, cudaStream_t st, int sm) {
    static const int TS[] = {1, 3, 8, 64, 300, 2048};
    layer_host L;
    gen_layer(&L, E);
    layer_dev D;
    upload_layer(&L, &D, 1);
    check_repack_layer(&L, &D);
    const moe_weights w = weights_of(&D, E);

    for (int T : TS) {
        std::vector<float> lg, xf((size_t)T * H);
        std::vector<uint16_t> xb((size_t)T * H);
        gen_logits(lg, T, E);
        /* Every third token 4× larger, so that the SwiGLU clamps (gate ≤ 7, |up| ≤ 7) engage. */
        for (int t = 0; t < T; t++) {
            const float a = t % 3 == 0 ? 4.0f : 1.0f;
            tu_fill_bf16(&xb[(size_t)t * H], &xf[(size_t)t * H], (size_t)H, -a, a);
        }
        float *d_lg = tu_dev_upload(lg.data(), lg.size());
        uint16_t *d_x = tu_dev_upload(xb.data(), xb.size());
        void *rbuf = tu_dev_alloc<uint8_t>(moe_routing_bytes(T, E, TOPK));
        moe_routing r;
        moe_routing_carve(&r, rbuf, T, E, TOPK);
        CUDA_CHECK(cudaMemsetAsync(rbuf, 0xff, moe_routing_bytes(T, E, TOPK), st)); /* poison */
        CUDA_CHECK(moe_route_split(d_lg, NULL, NULL, &r, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
        routing_host rh;
        download_routing(&r, &rh);
        check_routing(lg, T, E, &rh);
        {
            /* hi + lo + a bf16 bias (as runner_forward.c passes them) route exactly like their fp32 sum
             * passed alone. */
            const size_t nb = moe_routing_bytes(T, E, TOPK);
            std::vector<float> hi(lg.size()), lo(lg.size()), sum(lg.size());
            std::vector<uint16_t> bias(E);
            for (auto &b : bias) b = f32_to_bf16(tu_uniform(-1.0f, 1.0f));
            for (size_t i = 0; i < lg.size(); i++) {
                hi[i] = lg[i], lo[i] = tu_uniform(-1e-3f, 1e-3f);
                sum[i] = (hi[i] + lo[i]) + bf16_to_f32(bias[i % E]);
            }
            float *d_hi = tu_dev_upload(hi.data(), hi.size()),
                  *d_lo = tu_dev_upload(lo.data(), lo.size());
            float *d_sum = tu_dev_upload(sum.data(), sum.size());
            uint16_t *d_b = tu_dev_upload(bias.data(), bias.size());
            std::vector<uint8_t> want(nb), got(nb);
            CUDA_CHECK(cudaMemsetAsync(rbuf, 0xff, nb, st));
            CUDA_CHECK(moe_route_split(d_sum, NULL, NULL, &r, st));
            CUDA_CHECK(cudaStreamSynchronize(st));
            tu_download(want.data(), (uint8_t *)rbuf, nb);
            CUDA_CHECK(cudaMemsetAsync(rbuf, 0xff, nb, st));
            CUDA_CHECK(moe_route_split(d_hi, d_lo, d_b, &r, st));
            CUDA_CHECK(cudaStreamSynchronize(st));
            tu_download(got.data(), (uint8_t *)rbuf, nb);
            CHECK(!memcmp(want.data(), got.data(), nb),
                  "E=%d T=%d: hi + lo + bias route differently from their sum", E, T);
            CUDA_CHECK(cudaFree(d_hi));
            CUDA_CHECK(cudaFree(d_lo));
            CUDA_CHECK(cudaFree(d_sum));
            CUDA_CHECK(cudaFree(d_b));
            /* Back to the first routing for the expert runs below. */
            CUDA_CHECK(moe_route_split(d_lg, NULL, NULL, &r, st));
            CUDA_CHECK(cudaStreamSynchronize(st));
        }

        std::vector<int> toks;
        if (T <= 64) {
            for (int t = 0; t < T; t++) toks.push_back(t);
        } else {
            toks.push_back(0), toks.push_back(T - 1);
            while (toks.size() < 64) toks.push_back((int)(rng_next(&tu_rng) % (uint64_t)T));
        }
        std::vector<float> ref;
        cpu_moe(&L, xf, lg, E, toks, ref);

        /* The automatic plan, the other path, and for the small path a second shape of it. */
        const moe_plan autop = moe_plan_for(T, E, TOPK, sm);
        std::vector<moe_plan> plans = {autop};
        moe_plan other = autop;
        other.large = !autop.large, other.ntp = 2, other.down_splits = 1;
        plans.push_back(other);
        moe_plan small2 = {0, 1, 3, 128, 0};
        if (!autop.large && autop.ntp == 1) small2.ntp = 2, small2.down_splits = 2;
        plans.push_back(small2);
        /* The tail-split trial (moe_plan.tail_split, off by default): whole items in the full
         * waves of resident blocks, the last partial wave's split in two (E = 128 at 3-64 tokens
         * has both; E = 32 at 8 tokens only whole items, whose second slot is cleared). */
        if (!autop.large && T >= 2) plans.push_back(moe_plan_tail_split(autop, sm));
        int maxS = 1;
        for (auto &p : plans) maxS = std::max(maxS, p.large ? 1 : p.down_splits);
        uint16_t *d_act = tu_dev_alloc<uint16_t>((size_t)T * TOPK * I);
        float *d_y = tu_dev_alloc<float>((size_t)T * TOPK * maxS * H);
        std::vector<float> y1, y2;
        for (size_t i = 0; i < plans.size(); i++)
            run_experts_case(&w, &r, &plans[i], d_x, d_act, d_y, T, E, toks, ref, st,
                             i == 0 ? &y1 : NULL);
        /* Again with the two-multiply dequantisation: the folded one rounds the same exact products
         * once, so the bits must not change (and two runs must agree anyway). */
        moe_weights wu = w;
        wu.w1_folded = wu.w2_folded = 0;
        CHECK(w.w1_folded && w.w2_folded, "E=%d: the folded dequantisation is not exercised", E);
        run_experts_case(&wu, &r, &plans[0], d_x, d_act, d_y, T, E, toks, ref, st, &y2);
        CHECK(y1.size() == y2.size() && !memcmp(y1.data(), y2.data(), y1.size() * 4),
              "E=%d T=%d: folded vs two-multiply dequantisation (or two runs of one plan) differ",
              E, T);
        check_ep(&D, &w, E, T, d_lg, d_x, &plans[0], &rh, y1, d_act, d_y, st);
        /* The large path on the warpgroup MMA (moe_wgmma.cu) at both token tiles (moe_plan.bn,
         * whichever moe_plan_for picked): the same reference bound, and two runs give the same
         * bits. The widths add each output's k blocks in the same order, so the same bits are
         * expected but only reported (m64n64 and m64n128 need not sum a k16 block alike). A width
         * the kernel lacks is refused. */
        for (auto &p : plans) {
            if (!p.large) continue;
            /* kind 1: moe_wgmma.cu; kind 2: the warp-specialised moe_wgmma_ws.cu; kind 4: its form
             * fed by the copy engine, moe_wgmma_tma.cu, which must give kind 2's bits (the same
             * MMAs on the same operands) */
            std::vector<float> ws_y[2];
            for (int kind : {1, 2, 4}) {
                moe_set_wgmma(kind);
                /* each kind from the same state: ws at full width (the tma kernel's reference) and
                 * no register-A form (the default would take kind 4's place at both widths) */
                moe_wgmma_ws_set_narrow(0);
                moe_wgmma_tma_set_rs(0);
                std::vector<float> wy[2][2];
                for (int b = 0; b < 2; b++) {
                    moe_plan q = p;
                    q.bn = b ? 64 : 128;
                    fprintf(stderr, "  (wgmma%s, %d-token tiles)\n",
                            kind == 2   ? " ws"
                            : kind == 4 ? " tma"
                                        : "",
                            q.bn);
                    run_experts_case(&w, &r, &q, d_x, d_act, d_y, T, E, toks, ref, st, &wy[b][0]);
                    run_experts_case(&w, &r, &q, d_x, d_act, d_y, T, E, toks, ref, st, &wy[b][1]);
                    CHECK(
                        wy[b][0].size() == wy[b][1].size() &&
                            !memcmp(wy[b][0].data(), wy[b][1].data(), wy[b][0].size() * 4),
                        "E=%d T=%d: two runs of the wgmma (kind %d) large path with %d-token tiles "
                        "differ",
                        E, T, kind, q.bn);
                    if (kind >= 2) {
                        /* the two-multiply dequantisation (weights wu) gives the folded one's
                         * bits (w: every scale byte allows folding) */
                        std::vector<float> wu_y;
                        run_experts_case(&wu, &r, &q, d_x, d_act, d_y, T, E, toks, ref, st, &wu_y);
                        CHECK(wu_y.size() == wy[b][0].size() &&
                                  !memcmp(wu_y.data(), wy[b][0].data(), wu_y.size() * 4),
                              "E=%d T=%d: the kind %d kernel's folded and two-multiply "
                              "dequantisation differ (%d-token tiles)",
                              E, T, kind, q.bn);
                    }
                    if (kind == 2) ws_y[b] = wy[b][0];
                    if (kind == 4)
                        CHECK(ws_y[b].size() == wy[b][0].size() &&
                                  !memcmp(ws_y[b].data(), wy[b][0].data(), ws_y[b].size() * 4),
                              "E=%d T=%d: the tma kernel's bits differ from the ws kernel's "
                              "(%d-token tiles)",
                              E, T, q.bn);
                    if (kind == 4 && q.bn == 64) {
                        /* the register-A form (GPTOSS_MOE_TMA_RS): its k16 blocks group the
                         * products otherwise, so ws's values within rounding (run_experts_case
                         * holds both against the CPU reference), the folded and two-multiply
                         * dequantisation the same bits, two runs the same bits */
                        moe_wgmma_tma_set_rs(1);
                        moe_wgmma_rs_set_shape(MOE_RS_NARROW); /* whatever the plan */
                        std::vector<float> ry, ry2, ru;
                        run_experts_case(&w, &r, &q, d_x, d_act, d_y, T, E, toks, ref, st, &ry);
                        run_experts_case(&w, &r, &q, d_x, d_act, d_y, T, E, toks, ref, st, &ry2);
                        run_experts_case(&wu, &r, &q, d_x, d_act, d_y, T, E, toks, ref, st, &ru);
                        moe_wgmma_tma_set_rs(0);
                        const bool same_size = ry.size() == ws_y[b].size() &&
                                               ry2.size() == ry.size() && ru.size() == ry.size();
                        CHECK(same_size && !memcmp(ry.data(), ry2.data(), ry.size() * 4) &&
                                  !memcmp(ru.data(), ry.data(), ry.size() * 4),
                              "E=%d T=%d: the register-A form's two runs, or its folded and "
                              "two-multiply dequantisation, differ",
                              E, T);
                        const double rel =
                            same_size ? tu_rel_err(ry.data(), ws_y[b].data(), ry.size()) : 1.0;
                        CHECK(rel <= 4e-3,
                              "E=%d T=%d: the register-A form is %.3g from ws (> 4e-3)", E, T, rel);
                        fprintf(stderr, "  register-A form vs ws: rel %.2e\n", rel);
                        /* its other block shape (128 tokens x 192 rows; GPTOSS_MOE_RS_SHAPE) and
                         * the choice by the plan (2): each output is the same k16 MMAs in the same
                         * order, so the first shape's bits, folded and two-multiply */
                        for (int sh : {MOE_RS_WIDE, MOE_RS_BY_PLAN}) {
                            moe_wgmma_tma_set_rs(1);
                            moe_wgmma_rs_set_shape(sh);
                            std::vector<float> sy, su;
                            run_experts_case(&w, &r, &q, d_x, d_act, d_y, T, E, toks, ref, st, &sy);
                            run_experts_case(&wu, &r, &q, d_x, d_act, d_y, T, E, toks, ref, st,
                                             &su);
                            moe_wgmma_rs_set_shape(MOE_RS_NARROW);
                            moe_wgmma_tma_set_rs(0);
                            CHECK(sy.size() == ry.size() && su.size() == ry.size() &&
                                      !memcmp(sy.data(), ry.data(), ry.size() * 4) &&
                                      !memcmp(su.data(), ry.data(), ry.size() * 4),
                                  "E=%d T=%d: the register-A form's block shape %d differs from "
                                  "the default shape's bits",
                                  E, T, sh);
                        }
                    }
                    if (kind == 4 && q.bn == 128) {
                        /* GPTOSS_MOE_TMA_RS=2: the register-A form (at 64-token tiles) in place
                         * of a 128-token plan's kernel, within rounding of ws at 128 */
                        moe_wgmma_tma_set_rs(2);
                        std::vector<float> ry;
                        run_experts_case(&w, &r, &q, d_x, d_act, d_y, T, E, toks, ref, st, &ry);
                        moe_wgmma_tma_set_rs(0);
                        const double rel = ry.size() == ws_y[b].size()
                                               ? tu_rel_err(ry.data(), ws_y[b].data(), ry.size())
                                               : 1.0;
                        CHECK(rel <= 4e-3,
                              "E=%d T=%d: the register-A form at a 128-token plan is %.3g from ws "
                              "(> 4e-3)",
                              E, T, rel);
                    }
                    if (kind == 2) {
                        /* the ws kernel's narrow form (MMAs as wide as the tile's tokens rounded
                         * up to a quarter tile; the tma kernel's at 64 always): the same bits,
                         * with the folded and the two-multiply dequantisation */
                        moe_wgmma_ws_set_narrow(1);
                        std::vector<float> ny, nu;
                        run_experts_case(&w, &r, &q, d_x, d_act, d_y, T, E, toks, ref, st, &ny);
                        run_experts_case(&wu, &r, &q, d_x, d_act, d_y, T, E, toks, ref, st, &nu);
                        moe_wgmma_ws_set_narrow(0);
                        CHECK(ny.size() == wy[b][0].size() && nu.size() == ny.size() &&
                                  !memcmp(ny.data(), wy[b][0].data(), ny.size() * 4) &&
                                  !memcmp(nu.data(), ny.data(), ny.size() * 4),
                              "E=%d T=%d: the ws kernel's narrow form differs from its full "
                              "width's bits (%d-token tiles)",
                              E, T, q.bn);
                    }
                }
                moe_plan bad = p;
                bad.bn = 96;
                const cudaError_t be = moe_experts(&w, d_x, &r, &bad, d_act, d_y, st);
                CHECK(be == cudaErrorInvalidValue, "E=%d T=%d: bn=96 gave %s, not an invalid value",
                      E, T, cudaGetErrorString(be));
                moe_set_wgmma(0);
                moe_wgmma_ws_set_narrow(-1);
                moe_wgmma_tma_set_rs(-1);
                moe_wgmma_rs_set_shape(-1);
                fprintf(stderr, "  64-token tiles %s 128-token tiles' bits\n",
                        wy[0][0].size() == wy[1][0].size() &&
                                !memcmp(wy[0][0].data(), wy[1][0].data(), wy[0][0].size() * 4)
                            ? "give the"
                            : "differ from the");
            }
        }
        CUDA_CHECK(cudaFree(d_act));
        CUDA_CHECK(cudaFree(d_y));
        CUDA_CHECK(cudaFree(rbuf));
        CUDA_CHECK(cudaFree(d_lg));
        CUDA_CHECK(cudaFree(d_x));
    }
    free_layer(&D);
}

/* ---- benchmark ---- */

/* Wall-clock µs (monotonic). */
static double host_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

/* Whether T is one of the comma-separated numbers of list. */
/* The token counts of --bench-t T1,T2,… (positive, at most 65536 each); empty on a malformed list. */
static std::vector<int> bench_ts(const char *list) {
    std::vector<int> ts;
    for (const char *p = list; *p;) {
        char *end;
        const long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 65536 || (*end && *end != ',')) return {};
        ts.push_back((int)v);
        p = *end == ',' ? end + 1 : end;
    }
    return ts;
}

static void bench(cudaStream_t st, int sm, const char *only_t) {
    std::vector<int> TS = {1, 8, 64, 256, 1024, 4096, 16384};
    if (only_t) {
        TS = bench_ts(only_t);
        if (TS.empty()) {
            fprintf(stderr, "--bench-t: expected token counts like 512,1024, got '%s'\n", only_t);
            return;
        }
    }
    const int E = 128, COPIES = 3;
    layer_host L;
    gen_layer(&L, E);
    layer_dev D[COPIES];
    upload_layer(&L, D, COPIES);
    moe_weights W[COPIES];
    for (int c = 0; c < COPIES; c++) W[c] = weights_of(&D[c], E);
    const double expert_bytes =
        (double)(2 * I) * H * 17 / 32 + (double)H * I * 17 / 32 + (2.0 * I + H) * 2;
    tu_bench_header();
    for (int T : TS) {
        std::vector<float> lg((size_t)T * E);
        for (auto &v : lg) v = tu_uniform(-4.0f, 4.0f);
        std::vector<uint16_t> xb((size_t)T * H);
        tu_fill_bf16(xb.data(), NULL, xb.size(), -1.0f, 1.0f);
        float *d_lg = tu_dev_upload(lg.data(), lg.size());
        uint16_t *d_x = tu_dev_upload(xb.data(), xb.size());
        void *rbuf = tu_dev_alloc<uint8_t>(moe_routing_bytes(T, E, TOPK));
        moe_routing r;
        moe_routing_carve(&r, rbuf, T, E, TOPK);
        CUDA_CHECK(moe_route_split(d_lg, NULL, NULL, &r, st));
        int n_touched = 0;
        CUDA_CHECK(cudaMemcpyAsync(&n_touched, r.n_touched, 4, cudaMemcpyDeviceToHost, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
        const size_t P = (size_t)T * TOPK;
        char name[160];

        double us = tu_time_us(st, 3, 50,
                               [&](int) { CUDA_CHECK(moe_route_split(d_lg, NULL, NULL, &r, st)); });
        snprintf(name, sizeof name, "moe route E=128 T=%d (top-4 + grouping)", T);
        tu_bench_row(name, us, (double)T * E * 4 + P * 16, 0);

        const moe_plan autop = moe_plan_for(T, E, TOPK, sm);
        std::vector<moe_plan> plans = {autop};
        const bool crossover = T >= 256 && T <= 1024;
        if (crossover) { /* the crossover region: show the other path too */
            moe_plan o = autop;
            o.large = !autop.large, o.ntp = 2, o.down_splits = 1;
            plans.push_back(o);
        }
        const size_t n_main = plans.size(); /* the wgmma rounds below index plans[1] */
        if (!autop.large && T >= 2)         /* the tail-split trial (moe_plan.tail_split) */
            plans.push_back(moe_plan_tail_split(autop, sm));
        int maxS = 1;
        for (auto &p : plans) maxS = std::max(maxS, p.large ? 1 : p.down_splits);
        uint16_t *d_act = tu_dev_alloc<uint16_t>(P * I);
        float *d_y = tu_dev_alloc<float>(P * maxS * H);
        /* One experts row: the touched experts' weights, x, act written and read, the slots. */
        auto experts_row = [&](const char *row_name, double row_us, const moe_plan &p) {
            const int S = p.large ? 1 : p.down_splits;
            const double bytes = n_touched * expert_bytes + (double)T * H * 2 + 2.0 * P * I * 2 +
                                 (double)P * S * H * 4;
            const double flops = 2.0 * P * ((double)2 * I * H + (double)H * I);
            tu_bench_row(row_name, row_us, bytes, T >= 64 ? flops : 0);
        };
        const size_t rounds =
            plans.size() +
            ((autop.large || n_main > 1) ? 7 + 3 : 0); /* 3: the register-A settings 0-2 */
        for (size_t pi = 0; pi < rounds; pi++) {
            /* the last ten rounds: the large plan again on the warpgroup MMA, moe_wgmma.cu
             * (kind 1), the warp-specialised moe_wgmma_ws.cu (kind 2) and its TMA-fed form
             * moe_wgmma_tma.cu (kind 4), each with 128- and then 64-token tiles (whichever
             * moe_plan_for picks; the automatic plan's choice is the "auto" one), then the ws
             * kernel at 128 at full width instead of its default narrow form, then the tma
             * kernel's register-A form at 64 (the default for every large plan; the rounds before
             * it run without it, so "tma n64" is the shared-memory form) at 64 tokens x 128 rows,
             * at 128 x 192 and at the shape the plan chooses (GPTOSS_MOE_RS_SHAPE 0, 1, 2: the
             * last is what moe_experts runs) */
            const int extra = pi >= plans.size() ? (int)(pi - plans.size()) : -1;
            const int wide = extra == 6, rs = extra >= 7, shape = rs ? extra - 7 : 0;
            const int wg = extra >= 0 ? (wide ? 2 : extra / 2 >= 2 ? 4 : 1 + extra / 2) : 0;
            moe_plan p = wg ? (autop.large ? autop : plans[1]) : plans[pi];
            if (wg) p.bn = (extra & 1) || rs ? 64 : 128;
            moe_wgmma_ws_set_narrow(wide ? 0 : -1);
            moe_wgmma_tma_set_rs(rs ? 1 : extra >= 0 ? 0 : -1);
            moe_wgmma_rs_set_shape(extra >= 0 ? shape : -1);
            const int reps = T >= 1024 ? 10 : 50;
            moe_set_wgmma(wg);
            us = tu_time_us(st, 2, reps, [&](int i) {
                CUDA_CHECK(moe_experts(&W[i % COPIES], d_x, &r, &p, d_act, d_y, st));
            });
            /* The host's cost of a call (launches, tensor maps), timed while the GPU works on the
             * queue: a step of 36 layers pays it 36 times wherever the GPU waits for the host. */
            const double h0 = host_us();
            for (int i = 0; i < 10; i++)
                CUDA_CHECK(moe_experts(&W[i % COPIES], d_x, &r, &p, d_act, d_y, st));
            const double host = (host_us() - h0) / 10;
            CUDA_CHECK(cudaStreamSynchronize(st));
            moe_set_wgmma(0);
            moe_wgmma_ws_set_narrow(-1);
            moe_wgmma_tma_set_rs(-1);
            moe_wgmma_rs_set_shape(-1);
            char pn[64], wn[48] = "";
            /* what moe_experts runs for the automatic plan: the register-A form at any tile */
            const bool is_auto = autop.large && rs && shape == MOE_RS_BY_PLAN;
            if (wg)
                snprintf(wn, sizeof wn, " wgmma%s n%d%s",
                         wide                            ? " ws wide"
                         : rs && shape == MOE_RS_WIDE    ? " tma rs 128x192"
                         : rs && shape == MOE_RS_BY_PLAN ? " tma rs by plan"
                         : rs                            ? " tma rs"
                         : wg == 2                       ? " ws"
                         : wg == 4                       ? " tma"
                                                         : "",
                         p.bn, is_auto ? " (auto)" : "");
            snprintf(name, sizeof name, "moe experts 120b T=%d %s%s touched=%d host %.1f us", T,
                     plan_name(&p, pn, sizeof pn), wn, n_touched, host);
            experts_row(name, us, p);
        }
        /* The combine: h += Σ slots, then RMSNorm (norm.h), at the automatic plan's slot count. */
        {
            const int S = autop.large ? 1 : autop.down_splits;
            float *d_h = tu_dev_alloc<float>((size_t)T * H);
            uint16_t *d_g = tu_dev_upload(xb.data(), (size_t)H),
                     *d_out = tu_dev_alloc<uint16_t>((size_t)T * H);
            CUDA_CHECK(cudaMemsetAsync(d_h, 0, (size_t)T * H * 4, st));
            CUDA_CHECK(cudaMemsetAsync(d_y, 0, P * S * H * 4, st));
            us = tu_time_us(st, 3, 50, [&](int) {
                CUDA_CHECK(norm_add_rmsnorm_split(d_h, NULL, d_y, TOPK * S, T, H, d_g, 1e-5f, d_out,
                                                  NULL, st));
            });
            snprintf(name, sizeof name, "moe combine+residual+rmsnorm T=%d slots=%d", T, TOPK * S);
            tu_bench_row(name, us, (double)T * H * (8.0 + 4.0 * TOPK * S + 2.0), 0);
            CUDA_CHECK(cudaFree(d_h));
            CUDA_CHECK(cudaFree(d_g));
            CUDA_CHECK(cudaFree(d_out));
        }
        CUDA_CHECK(cudaFree(d_act));
        CUDA_CHECK(cudaFree(d_y));
        CUDA_CHECK(cudaFree(rbuf));
        CUDA_CHECK(cudaFree(d_lg));
        CUDA_CHECK(cudaFree(d_x));
    }
    for (int c = 0; c < COPIES; c++) free_layer(&D[c]);
}

int main(int argc, char **argv) {
    tu_init("test_moe");
    moe_set_wgmma(0); /* the plain large-path passes test mma.sync; the wgmma passes turn it on */
    check_plans();
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreate(&st));
    const int sm = tu_sm_count();
    if (tu_has_flag(argc, argv, "--bench")) {
        const char *only_t = NULL; /* --bench-t T1,T2: those token counts only (for ncu) */
        for (int i = 1; i + 1 < argc; i++)
            if (!strcmp(argv[i], "--bench-t")) only_t = argv[i + 1];
        bench(st, sm, only_t);
    } else {
        check_repack_random();
        test_E(32, st, sm);
        test_E(128, st, sm);
    }
    CUDA_CHECK(cudaStreamDestroy(st));
    return check_report("test_moe");
}
