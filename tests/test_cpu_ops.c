/* The CPU reference's building blocks against hand-computed values and transformers' numbers:
 * YaRN RoPE frequencies (spec §7 table and transformers' own inv_freq/cos/sin), sink softmax,
 * top-k routing, clamped SwiGLU, and the MXFP4 expert product. */
#include "check.h"

#include "backend/cpu/ops.h"
#include "model/rope.h"
#include "base/error.h"
#include "model/synthetic.h"

static const double SPEC_INV_FREQ[32] = {
    1.000000000e+00, 6.890443059e-01, 4.747820555e-01, 3.271458719e-01, 2.254180002e-01,
    1.553229895e-01, 1.070244215e-01, 7.374456821e-02, 5.081327482e-02, 3.170569618e-02,
    1.933500113e-02, 1.159204926e-02, 6.794959490e-03, 3.860359317e-03, 2.093792379e-03,
    1.052602101e-03, 4.564839192e-04, 1.293187012e-04, 3.830881237e-05, 2.639646903e-05,
    1.818833668e-05, 1.253256982e-05, 8.635495875e-06, 5.950239261e-06, 4.099978482e-06,
    2.825066827e-06, 1.946596211e-06, 1.341291035e-06, 9.242089502e-07, 6.368209146e-07,
    4.387978251e-07, 3.023511428e-07};

static const st_tensor *find(const st_file *f, const char *name) {
    for (int i = 0; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

static void test_rope(void) {
    model_config c;
    config_preset_20b(&c);
    rope_table r;
    rope_init(&r, &c);
    CHECK_NEAR(r.low, 8.092779115512402, 1e-12, "low");
    CHECK_NEAR(r.high, 17.39802450158856, 1e-12, "high");
    CHECK_NEAR(r.concentration, 1.3465735902799727, 1e-7, "concentration");
    for (int i = 0; i < 32; i++)
        CHECK(fabs(r.inv_freq[i] - SPEC_INV_FREQ[i]) <= 2e-6 * SPEC_INV_FREQ[i],
              "inv_freq[%d] %.9e vs %.9e", i, r.inv_freq[i], SPEC_INV_FREQ[i]);

    /* transformers' own values (scripts/make_fixtures.py). */
    st_file f;
    int rc = st_file_open(GPTOSS_SOURCE_DIR "/tests/fixtures/rope_reference.safetensors", &f);
    CHECK(rc == 0, "rope reference: %s", err_msg());
    if (rc) return;
    const float *inv = find(&f, "inv_freq")->data;
    /* Within one float32 ulp: powf and torch's pow may round the last bit differently. */
    for (int i = 0; i < 32; i++)
        CHECK(fabsf(r.inv_freq[i] - inv[i]) <= 2.4e-7f * inv[i],
              "inv_freq[%d] %.9e vs transformers %.9e", i, r.inv_freq[i], inv[i]);
    const st_tensor *pos = find(&f, "positions"), *cos_t = find(&f, "cos"),
                    *sin_t = find(&f, "sin");
    for (int p = 0; p < pos->shape[0]; p++) {
        float cv[32], sv[32];
        int64_t position = ((const int64_t *)pos->data)[p];
        rope_cos_sin(&r, position, cv, sv);
        const float *rc_ = (const float *)cos_t->data + (size_t)p * 32,
                    *rs = (const float *)sin_t->data + (size_t)p * 32;
        for (int i = 0; i < 32; i++) {
            CHECK_NEAR(cv[i], rc_[i], 2e-5 * (1 + fabs(position * inv[i]) * 1e-2), "cos");
            CHECK_NEAR(sv[i], rs[i], 2e-5 * (1 + fabs(position * inv[i]) * 1e-2), "sin");
        }
    }
    st_file_close(&f);

    /* Half-split rotation: dimension i pairs with i + 32. */
    float x[64], cv[32], sv[32];
    for (int i = 0; i < 64; i++) x[i] = (float)(i + 1);
    rope_cos_sin(&r, 3, cv, sv);
    float x0 = x[0], x32 = x[32];
    rope_apply(&r, cv, sv, x);
    CHECK_NEAR(x[0], x0 * cv[0] - x32 * sv[0], 1e-5, "rotated first half");
    CHECK_NEAR(x[32], x32 * cv[0] + x0 * sv[0], 1e-5, "rotated second half");
}

static void test_sink_attention(void) {
    /* Two keys, head_dim 2: scores z = scale * q.k; P = exp(z) / (exp(sink) + sum exp(z)). */
    float q[2] = {1, 2}, k[4] = {0.5f, -1, 2, 1}, v[4] = {1, 10, -3, 4}, out[2];
    float scale = 0.5f, sink = 0.7f;
    cpu_sink_attention(q, k, v, 2, 0, 2, 0, 1, scale, sink, out);
    double z0 = 0.5 * (0.5 - 2), z1 = 0.5 * (2 + 2);
    double d = exp(sink) + exp(z0) + exp(z1);
    CHECK_NEAR(out[0], (exp(z0) * 1 + exp(z1) * -3) / d, 1e-6, "out[0]");
    CHECK_NEAR(out[1], (exp(z0) * 10 + exp(z1) * 4) / d, 1e-6, "out[1]");
    /* A huge sink takes all the mass: the output goes to zero, without overflow. */
    cpu_sink_attention(q, k, v, 2, 0, 2, 0, 1, scale, 1000.0f, out);
    CHECK(fabsf(out[0]) < 1e-30f && fabsf(out[1]) < 1e-30f && isfinite(out[0]), "sink dominates");
    /* Window: only the second key visible. */
    cpu_sink_attention(q, k, v, 2, 0, 2, 1, 1, scale, sink, out);
    double p1 = exp(z1) / (exp(sink) + exp(z1));
    CHECK_NEAR(out[0], p1 * -3, 1e-6, "windowed");
}

static void test_routing(void) {
    float logits[6] = {0.1f, 2.0f, -1.0f, 2.0f, 0.5f, 1.5f};
    int idx[4];
    float w[4];
    cpu_topk_softmax(logits, 6, 4, idx, w);
    CHECK(idx[0] == 1 && idx[1] == 3 && idx[2] == 5 && idx[3] == 4,
          "top-4 order with the lower index first on ties: %d %d %d %d", idx[0], idx[1], idx[2],
          idx[3]);
    double d = 2 * exp(2.0) + exp(1.5) + exp(0.5);
    CHECK_NEAR(w[0], exp(2.0) / d, 1e-6, "w0");
    CHECK_NEAR(w[2], exp(1.5) / d, 1e-6, "w2");
    CHECK_NEAR(w[0] + w[1] + w[2] + w[3], 1.0, 1e-6,
               "weights sum to 1 (softmax over the selected only)");
}

static void test_swiglu(void) {
    float gu[8] = {1.0f, 0.5f, 9.0f, 9.0f, -2.0f, -9.0f, 0.0f, 3.0f}, out[4];
    cpu_swiglu(gu, 4, 1.702f, 7.0f, out);
    CHECK_NEAR(out[0], 1.0 / (1 + exp(-1.702)) * 1.5, 1e-6, "plain");
    CHECK_NEAR(out[1], 7.0 / (1 + exp(-1.702 * 7)) * 8.0, 1e-5, "gate and up clamped at 7");
    CHECK_NEAR(out[2], -2.0 / (1 + exp(1.702 * 2)) * (-7.0 + 1), 1e-6,
               "up clamped at -7, gate not from below");
    CHECK_NEAR(out[3], 0.0, 1e-9, "zero gate");
}

static void test_mxfp4_linear(void) {
    /* 2 rows x 32 inputs, known codes: row 0 all code 2 (1.0) scale 2^0, row 1 code 9 (-0.5) scale 2^1. */
    uint8_t blocks[32], scales[2] = {127, 128};
    memset(blocks, 0x22, 16);
    memset(blocks + 16, 0x99, 16);
    uint16_t bias_bf16[2] = {f32_to_bf16(0.5f), f32_to_bf16(-1.0f)};
    dense_ref bias = {bias_bf16, ST_BF16};
    float x[32], y[2];
    for (int i = 0; i < 32; i++) x[i] = (float)i;
    cpu_mxfp4_linear(x, 1, 32, blocks, scales, bias, 0, 2, y);
    CHECK_NEAR(y[0], 496.0 + 0.5, 1e-3, "row 0");
    CHECK_NEAR(y[1], -1.0 * 496.0 - 1.0, 1e-3, "row 1");
}

int main(void) {
    test_rope();
    test_sink_attention();
    test_routing();
    test_swiglu();
    test_mxfp4_linear();
    return check_report("test_cpu_ops");
}
