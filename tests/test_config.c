/* config.json parsing: both RoPE spellings, layer_types, and a clear refusal (naming the field) of
 * everything the engine cannot run exactly. */
#include "check.h"

#include "base/error.h"
#include "base/xalloc.h"
#include "model/config.h"
#include "model/synthetic.h"

#include <stdlib.h>

/* The 20b release's config.json, as published (rope_scaling spelling). */
static const char REAL_20B[] =
    "{\"architectures\":[\"GptOssForCausalLM\"],\"attention_bias\":true,\"attention_dropout\":0.0,"
    "\"eos_token_id\":200002,\"experts_per_token\":4,\"head_dim\":64,\"hidden_act\":\"silu\","
    "\"hidden_size\":2880,"
    "\"initial_context_length\":4096,\"initializer_range\":0.02,\"intermediate_size\":2880,\"layer_"
    "types\":["
    "\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"full_attention\",\"sliding_"
    "attention\","
    "\"full_attention\",\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"full_"
    "attention\","
    "\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"full_attention\",\"sliding_"
    "attention\","
    "\"full_attention\",\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"full_"
    "attention\","
    "\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"full_attention\"],"
    "\"max_position_embeddings\":131072,\"model_type\":\"gpt_oss\",\"num_attention_heads\":64,"
    "\"num_experts_per_tok\":4,\"num_hidden_layers\":24,\"num_key_value_heads\":8,\"num_local_"
    "experts\":32,"
    "\"output_router_logits\":false,\"pad_token_id\":199999,\"quantization_config\":{\"modules_to_"
    "not_convert\":["
    "\"model.layers.*.self_attn\",\"model.layers.*.mlp.router\",\"model.embed_tokens\",\"lm_head\"]"
    ","
    "\"quant_method\":\"mxfp4\"},\"rms_norm_eps\":1e-05,\"rope_scaling\":{\"beta_fast\":32.0,"
    "\"beta_slow\":1.0,"
    "\"factor\":32.0,\"original_max_position_embeddings\":4096,\"rope_type\":\"yarn\",\"truncate\":"
    "false},"
    "\"rope_theta\":150000,\"router_aux_loss_coef\":0.9,\"sliding_window\":128,\"swiglu_limit\":7."
    "0,"
    "\"tie_word_embeddings\":false,\"transformers_version\":\"4.55.0.dev0\",\"use_cache\":true,"
    "\"use_kv_cache\":true,\"vocab_size\":201088}";

/* Replaces the first occurrence of `from` in REAL_20B by `to`. */
static char *patched(const char *from, const char *to) {
    const char *p = strstr(REAL_20B, from);
    if (!p) {
        fprintf(stderr, "test bug: '%s' not in the config\n", from);
        abort();
    }
    return xasprintf("%.*s%s%s", (int)(p - REAL_20B), REAL_20B, to, p + strlen(from));
}

static void expect_error(const char *from, const char *to, const char *field) {
    char *text = patched(from, to);
    model_config c;
    int rc = config_parse(text, "config.json", &c);
    CHECK(rc == -1, "'%s' -> '%s' was accepted", from, to);
    if (rc == -1) {
        CHECK_MSG_HAS(err_msg(), field);
        CHECK_MSG_HAS(err_msg(), "config.json");
    }
    free(text);
}

int main(void) {
    model_config c, ref;
    CHECK(config_parse(REAL_20B, "config.json", &c) == 0, "real config: %s", err_msg());
    config_preset_20b(&ref);
    CHECK(c.n_layers == 24 && c.n_experts == 32 && c.experts_per_tok == 4 && c.hidden == 2880,
          "sizes");
    CHECK(c.n_heads == 64 && c.n_kv_heads == 8 && c.head_dim == 64 && c.vocab == 201088,
          "heads/vocab");
    CHECK(c.sliding_window == 128 && c.layer_sliding[0] && !c.layer_sliding[1] &&
              c.layer_sliding[22],
          "layers");
    CHECK(c.rope_theta == 150000 && c.rope_factor == 32 && c.rope_beta_fast == 32 &&
              c.rope_beta_slow == 1,
          "rope");
    CHECK(c.rope_original_max == 4096 && !c.rope_truncate && c.mxfp4, "rope/quant");
    CHECK(c.rms_norm_eps == 1e-5 && c.swiglu_limit == 7.0 && c.swiglu_alpha == 1.702, "eps/swiglu");
    CHECK(c.n_eos == 1 && c.eos[0] == 200002 && c.pad_token == 199999, "eos/pad");
    CHECK(memcmp(c.layer_sliding, ref.layer_sliding, sizeof c.layer_sliding) == 0,
          "preset layer kinds");

    /* The newer rope_parameters spelling (rope_theta inside), eos lists, and defaults. */
    char *t1 = patched("\"rope_scaling\":{", "\"rope_parameters\":{\"rope_theta\":10000.5,");
    CHECK(config_parse(t1, "config.json", &c) == 0, "rope_parameters: %s", err_msg());
    CHECK(c.rope_theta == 10000.5, "rope_theta inside rope_parameters wins: %g", c.rope_theta);
    free(t1);
    char *t2 = patched("\"eos_token_id\":200002", "\"eos_token_id\":[200002,199999,200012]");
    CHECK(config_parse(t2, "config.json", &c) == 0 && c.n_eos == 3 && c.eos[2] == 200012,
          "eos list");
    free(t2);
    char *t3 = patched("\"truncate\":false", "\"truncate\":true");
    CHECK(config_parse(t3, "config.json", &c) == 0 && c.rope_truncate, "truncate true");
    free(t3);

    /* Round trip: what make-model writes parses back to the same values. */
    char *json = config_to_json(&ref);
    CHECK(config_parse(json, "written", &c) == 0, "round trip: %s", err_msg());
    CHECK(c.n_layers == ref.n_layers && c.rope_theta == ref.rope_theta &&
              c.rms_norm_eps == ref.rms_norm_eps && c.rope_truncate == ref.rope_truncate &&
              c.vocab == ref.vocab,
          "round trip values");
    free(json);

    /* Refusals, each naming the field. */
    expect_error("\"rope_type\":\"yarn\"", "\"rope_type\":\"linear\"", "rope_type");
    expect_error("\"quant_method\":\"mxfp4\"", "\"quant_method\":\"fp8\"", "quant_method");
    expect_error("\"num_experts_per_tok\":4", "\"num_experts_per_tok\":40", "num_experts_per_tok");
    expect_error("\"hidden_size\":2880", "\"hidden_size\":2890", "hidden_size");
    expect_error("\"intermediate_size\":2880", "\"intermediate_size\":100", "intermediate_size");
    expect_error("\"num_hidden_layers\":24", "\"num_hidden_layers\":\"24\"", "num_hidden_layers");
    expect_error("\"num_hidden_layers\":24", "\"num_hidden_layers\":-3", "num_hidden_layers");
    expect_error("\"num_hidden_layers\":24", "\"num_hidden_layers\":23", "layer_types");
    expect_error("\"vocab_size\":201088", "\"vocab_sizes\":201088", "vocab_size");
    expect_error("\"num_key_value_heads\":8", "\"num_key_value_heads\":7", "num_attention_heads");
    expect_error("\"model_type\":\"gpt_oss\"", "\"model_type\":\"llama\"", "model_type");
    expect_error("\"sliding_attention\",\"full_attention\",\"sliding",
                 "\"sliding_attention\",\"cross\",\"sliding", "layer_types[1]");
    expect_error("\"tie_word_embeddings\":false", "\"tie_word_embeddings\":true",
                 "tie_word_embeddings");
    expect_error("\"rope_theta\":150000", "\"rope_theta\":\"big\"", "rope_theta");
    expect_error("\"factor\":32.0", "\"factor\":0.5", "factor");
    expect_error("\"rms_norm_eps\":1e-05", "\"rms_norm_eps\":-1", "rms_norm_eps");
    /* Issue 18: no int32 wrap of eos ids (2^32 + 110221 would be token 110221), no YaRN factor
     * that overflows the tables. */
    expect_error("\"eos_token_id\":200002", "\"eos_token_id\":4295077517", "eos_token_id");
    expect_error("\"eos_token_id\":200002", "\"eos_token_id\":-1", "eos_token_id");
    expect_error("\"eos_token_id\":200002", "\"eos_token_id\":1099511627776", "eos_token_id");
    expect_error("\"eos_token_id\":200002", "\"eos_token_id\":[200002,4295077517]",
                 "eos_token_id[1]");
    expect_error("\"factor\":32.0", "\"factor\":1e308", "factor");
    expect_error("\"factor\":32.0", "\"factor\":1025", "factor");
    expect_error("\"rope_scaling\":{", "\"rope_scalingX\":{", "rope_scaling");
    expect_error("\"quantization_config\":{", "\"quantization_configX\":{", "quantization_config");
    expect_error("{\"architectures\"", "[{\"architectures\"", "JSON");

    model_config bad;
    CHECK(config_parse("{", "x/config.json", &bad) == -1, "truncated JSON accepted");
    CHECK_MSG_HAS(err_msg(), "x/config.json");
    return check_report("test_config");
}
