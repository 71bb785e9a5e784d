/* The checkpoint table at the real shapes (spec §3.3): names, dtypes, shapes and the total payload of
 * gpt-oss-20b and -120b, which `make-model --preset 20b|120b` writes and the loader checks. */
#include "check.h"

#include "model/safetensors.h"
#include "model/tensors.h"

static const tensor_spec *lookup(const tensor_spec *all, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(all[i].name, name)) return &all[i];
    return NULL;
}

static void expect(const tensor_spec *all, int n, const char *name, enum st_dtype dt, int ndim,
                   int64_t a, int64_t b, int64_t c, int64_t d) {
    const tensor_spec *t = lookup(all, n, name);
    CHECK(t != NULL, "%s missing", name);
    if (!t) return;
    int64_t want[4] = {a, b, c, d};
    CHECK(t->dtype == dt && t->ndim == ndim, "%s dtype/ndim", name);
    for (int i = 0; i < ndim; i++)
        CHECK(t->shape[i] == want[i], "%s dim %d: %lld vs %lld", name, i, (long long)t->shape[i],
              (long long)want[i]);
}

static uint64_t payload(const model_config *c, tensor_spec *all, int n) {
    uint64_t bytes = 0;
    for (int i = 0; i < n; i++) {
        tensor_spec_at(c, i, &all[i]);
        uint64_t e = st_dtype_size(all[i].dtype);
        for (int d = 0; d < all[i].ndim; d++) e *= (uint64_t)all[i].shape[d];
        bytes += e;
    }
    return bytes;
}

int main(void) {
    static tensor_spec all[3 + 36 * TK_LAYER_KINDS];
    model_config c;
    config_preset_20b(&c);
    int n = tensor_count(&c);
    CHECK(n == 3 + 24 * 19, "20b tensor count %d", n);
    CHECK(payload(&c, all, n) == 13761264768ull,
          "20b payload %llu (spec: 10,152,345,600 MXFP4 + 3,608,919,168 BF16)",
          (unsigned long long)payload(&c, all, n));
    expect(all, n, "model.embed_tokens.weight", ST_BF16, 2, 201088, 2880, 0, 0);
    expect(all, n, "lm_head.weight", ST_BF16, 2, 201088, 2880, 0, 0);
    expect(all, n, "model.norm.weight", ST_BF16, 1, 2880, 0, 0, 0);
    expect(all, n, "model.layers.0.input_layernorm.weight", ST_BF16, 1, 2880, 0, 0, 0);
    expect(all, n, "model.layers.7.self_attn.q_proj.weight", ST_BF16, 2, 4096, 2880, 0, 0);
    expect(all, n, "model.layers.7.self_attn.q_proj.bias", ST_BF16, 1, 4096, 0, 0, 0);
    expect(all, n, "model.layers.7.self_attn.k_proj.weight", ST_BF16, 2, 512, 2880, 0, 0);
    expect(all, n, "model.layers.7.self_attn.v_proj.bias", ST_BF16, 1, 512, 0, 0, 0);
    expect(all, n, "model.layers.7.self_attn.o_proj.weight", ST_BF16, 2, 2880, 4096, 0, 0);
    expect(all, n, "model.layers.7.self_attn.o_proj.bias", ST_BF16, 1, 2880, 0, 0, 0);
    expect(all, n, "model.layers.7.self_attn.sinks", ST_BF16, 1, 64, 0, 0, 0);
    expect(all, n, "model.layers.23.post_attention_layernorm.weight", ST_BF16, 1, 2880, 0, 0, 0);
    expect(all, n, "model.layers.23.mlp.router.weight", ST_BF16, 2, 32, 2880, 0, 0);
    expect(all, n, "model.layers.23.mlp.router.bias", ST_BF16, 1, 32, 0, 0, 0);
    expect(all, n, "model.layers.23.mlp.experts.gate_up_proj_blocks", ST_U8, 4, 32, 5760, 90, 16);
    expect(all, n, "model.layers.23.mlp.experts.gate_up_proj_scales", ST_U8, 3, 32, 5760, 90, 0);
    expect(all, n, "model.layers.23.mlp.experts.gate_up_proj_bias", ST_BF16, 2, 32, 5760, 0, 0);
    expect(all, n, "model.layers.23.mlp.experts.down_proj_blocks", ST_U8, 4, 32, 2880, 90, 16);
    expect(all, n, "model.layers.23.mlp.experts.down_proj_scales", ST_U8, 3, 32, 2880, 90, 0);
    expect(all, n, "model.layers.23.mlp.experts.down_proj_bias", ST_BF16, 2, 32, 2880, 0, 0);
    CHECK(lookup(all, n, "model.layers.24.mlp.router.bias") == NULL, "no layer 24 in 20b");

    config_preset_120b(&c);
    n = tensor_count(&c);
    CHECK(n == 3 + 36 * 19, "120b tensor count %d", n);
    CHECK(payload(&c, all, n) == 65248815744ull,
          "120b payload %llu (spec: 60,914,073,600 + 4,334,742,144)",
          (unsigned long long)payload(&c, all, n));
    expect(all, n, "model.layers.35.mlp.experts.gate_up_proj_blocks", ST_U8, 4, 128, 5760, 90, 16);
    expect(all, n, "model.layers.35.mlp.router.weight", ST_BF16, 2, 128, 2880, 0, 0);
    return check_report("test_tensors");
}
