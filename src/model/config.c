#include "model/config.h"

#include "base/error.h"
#include "base/files.h"
#include "base/xalloc.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Field readers: each names the field and the file when the value is missing or of the wrong kind. */

static int get_int(json_t *obj, const char *key, const char *alt, int lo, int hi, bool required,
                   int dflt, const char *path, int *out) {
    json_t *v = json_object_get(obj, key);
    const char *name = key;
    if (!v && alt) v = json_object_get(obj, alt), name = alt;
    if (!v || json_is_null(v)) {
        if (required) return err_set("%s: field '%s' is missing", path, key);
        *out = dflt;
        return 0;
    }
    double d;
    if (json_is_integer(v))
        d = (double)json_integer_value(v);
    else if (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v))
        d = json_real_value(v);
    else
        return err_set("%s: field '%s' must be an integer", path, name);
    if (d < lo || d > hi)
        return err_set("%s: field '%s' = %.0f is out of range [%d, %d]", path, name, d, lo, hi);
    *out = (int)d;
    return 0;
}

static int get_num(json_t *obj, const char *key, bool required, double dflt, const char *path,
                   const char *where, double *out) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        if (required) return err_set("%s: field '%s%s' is missing", path, where, key);
        *out = dflt;
        return 0;
    }
    if (!json_is_number(v)) return err_set("%s: field '%s%s' must be a number", path, where, key);
    *out = json_number_value(v);
    if (!isfinite(*out)) return err_set("%s: field '%s%s' must be finite", path, where, key);
    return 0;
}

static int parse_rope(json_t *root, const char *path, model_config *c) {
    json_t *rp = json_object_get(root, "rope_parameters");
    const char *where = "rope_parameters.";
    if (!rp || json_is_null(rp))
        rp = json_object_get(root, "rope_scaling"), where = "rope_scaling.";
    if (!rp || json_is_null(rp))
        return err_set(
            "%s: field 'rope_scaling' (or 'rope_parameters') is missing: gpt-oss needs YaRN RoPE",
            path);
    if (!json_is_object(rp))
        return err_set("%s: field '%.*s' must be an object", path, (int)strlen(where) - 1, where);
    json_t *type = json_object_get(rp, "rope_type");
    if (!type) type = json_object_get(rp, "type");
    if (!json_is_string(type)) return err_set("%s: field '%srope_type' is missing", path, where);
    if (strcmp(json_string_value(type), "yarn") != 0)
        return err_set("%s: field '%srope_type' = \"%s\" is not supported (only \"yarn\")", path,
                       where, json_string_value(type));
    /* rope_theta lives inside rope_parameters in the new spelling, at the top level in the old one. */
    json_t *theta_holder = json_object_get(rp, "rope_theta") ? rp : root;
    if (get_num(theta_holder, "rope_theta", true, 0, path, theta_holder == rp ? where : "",
                &c->rope_theta))
        return -1;
    if (get_num(rp, "factor", true, 0, path, where, &c->rope_factor)) return -1;
    if (get_num(rp, "beta_fast", false, 32.0, path, where, &c->rope_beta_fast)) return -1;
    if (get_num(rp, "beta_slow", false, 1.0, path, where, &c->rope_beta_slow)) return -1;
    if (get_int(rp, "original_max_position_embeddings", NULL, 1, 1 << 30, false, 4096, path,
                &c->rope_original_max))
        return -1;
    json_t *tr = json_object_get(rp, "truncate");
    if (tr && !json_is_boolean(tr))
        return err_set("%s: field '%struncate' must be true or false", path, where);
    c->rope_truncate =
        tr ? json_is_true(tr) : true; /* transformers' default when the key is absent */
    json_t *attn = json_object_get(rp, "attention_factor");
    if (attn && !json_is_null(attn))
        return err_set(
            "%s: field '%sattention_factor' is not supported (gpt-oss derives it from 'factor')",
            path, where);
    json_t *mscale = json_object_get(rp, "mscale");
    if (mscale && !json_is_null(mscale) &&
        !(json_is_number(mscale) && json_number_value(mscale) == 1.0))
        return err_set("%s: field '%smscale' is not supported", path, where);
    if (c->rope_theta <= 1)
        return err_set("%s: field 'rope_theta' = %g must be > 1", path, c->rope_theta);
    /* gpt-oss uses 32; a factor past 1024 (a context of millions of positions from a 4k base)
     * is a broken file, and 1e308 would make the tables overflow to inf. */
    if (!(c->rope_factor >= 1 && c->rope_factor <= 1024))
        return err_set("%s: field '%sfactor' = %g must be in [1, 1024]", path, where,
                       c->rope_factor);
    if (!(c->rope_beta_fast > c->rope_beta_slow && c->rope_beta_slow > 0))
        return err_set("%s: fields '%sbeta_fast' (%g) and 'beta_slow' (%g) must satisfy beta_fast "
                       "> beta_slow > 0",
                       path, where, c->rope_beta_fast, c->rope_beta_slow);
    return 0;
}

static int parse_layer_types(json_t *root, const char *path, model_config *c) {
    json_t *lt = json_object_get(root, "layer_types");
    if (!lt || json_is_null(lt)) {
        for (int i = 0; i < c->n_layers; i++)
            c->layer_sliding[i] = (i % 2 == 0); /* transformers' default */
        return 0;
    }
    if (!json_is_array(lt)) return err_set("%s: field 'layer_types' must be an array", path);
    if ((int)json_array_size(lt) != c->n_layers)
        return err_set("%s: field 'layer_types' has %zu entries but num_hidden_layers is %d", path,
                       json_array_size(lt), c->n_layers);
    for (int i = 0; i < c->n_layers; i++) {
        const char *s = json_string_value(json_array_get(lt, (size_t)i));
        if (s && !strcmp(s, "sliding_attention"))
            c->layer_sliding[i] = true;
        else if (s && !strcmp(s, "full_attention"))
            c->layer_sliding[i] = false;
        else
            return err_set(
                "%s: field 'layer_types[%d]' must be \"sliding_attention\" or \"full_attention\"",
                path, i);
    }
    return 0;
}

static int parse_quant(json_t *root, const char *path, model_config *c) {
    json_t *q = json_object_get(root, "quantization_config");
    if (!q || json_is_null(q))
        return err_set(
            "%s: field 'quantization_config' is missing: only MXFP4 checkpoints (the official "
            "release format) are supported",
            path);
    if (!json_is_object(q))
        return err_set("%s: field 'quantization_config' must be an object", path);
    const char *m = json_string_value(json_object_get(q, "quant_method"));
    if (!m) return err_set("%s: field 'quantization_config.quant_method' is missing", path);
    if (strcmp(m, "mxfp4") != 0)
        return err_set("%s: field 'quantization_config.quant_method' = \"%s\" is not supported "
                       "(only \"mxfp4\")",
                       path, m);
    c->mxfp4 = true;
    return 0;
}

static int parse_eos(json_t *root, const char *path, model_config *c) {
    json_t *e = json_object_get(root, "eos_token_id");
    c->n_eos = 0;
    if (!e || json_is_null(e)) return 0;
    /* Range-checked before the cast: 2^32 + 110221 would otherwise wrap to the ordinary token
     * 110221 and stop every answer that uses it. The bound is the largest vocabulary a config may
     * declare, not this one's: small test checkpoints keep harmony's ids (200002) beyond their
     * vocabulary, where they are never sampled and do no harm. */
    if (json_is_integer(e)) {
        json_int_t id = json_integer_value(e);
        if (id < 0 || id >= CONFIG_MAX_VOCAB)
            return err_set("%s: field 'eos_token_id' = %lld is out of range [0, %d)", path,
                           (long long)id, CONFIG_MAX_VOCAB);
        c->eos[c->n_eos++] = (int32_t)id;
        return 0;
    }
    if (!json_is_array(e))
        return err_set("%s: field 'eos_token_id' must be an integer or an array", path);
    size_t i;
    json_t *v;
    json_array_foreach(e, i, v) {
        if (!json_is_integer(v))
            return err_set("%s: field 'eos_token_id[%zu]' must be an integer", path, i);
        json_int_t id = json_integer_value(v);
        if (id < 0 || id >= CONFIG_MAX_VOCAB)
            return err_set("%s: field 'eos_token_id[%zu]' = %lld is out of range [0, %d)", path, i,
                           (long long)id, CONFIG_MAX_VOCAB);
        if (c->n_eos < CONFIG_MAX_EOS) c->eos[c->n_eos++] = (int32_t)id;
    }
    return 0;
}

int config_parse(const char *text, const char *path, model_config *c) {
    memset(c, 0, sizeof *c);
    json_error_t jerr;
    json_t *root = json_loads(text, 0, &jerr);
    if (!root) return err_set("%s: invalid JSON at line %d: %s", path, jerr.line, jerr.text);
    int rc = -1;
    if (!json_is_object(root)) {
        err_set("%s: the top level must be a JSON object", path);
        goto out;
    }
    const char *mt = json_string_value(json_object_get(root, "model_type"));
    if (mt && strcmp(mt, "gpt_oss") != 0) {
        err_set("%s: field 'model_type' = \"%s\" is not supported (only \"gpt_oss\")", path, mt);
        goto out;
    }
    if (get_int(root, "num_hidden_layers", NULL, 1, CONFIG_MAX_LAYERS, true, 0, path,
                &c->n_layers) ||
        get_int(root, "num_local_experts", "num_experts", 1, 4096, true, 0, path, &c->n_experts) ||
        get_int(root, "num_experts_per_tok", "experts_per_token", 1, 64, true, 0, path,
                &c->experts_per_tok) ||
        get_int(root, "hidden_size", NULL, 1, 1 << 16, true, 0, path, &c->hidden) ||
        get_int(root, "intermediate_size", NULL, 1, 1 << 16, true, 0, path, &c->intermediate) ||
        get_int(root, "num_attention_heads", NULL, 1, 1024, true, 0, path, &c->n_heads) ||
        get_int(root, "num_key_value_heads", NULL, 1, 1024, true, 0, path, &c->n_kv_heads) ||
        get_int(root, "vocab_size", NULL, 1, CONFIG_MAX_VOCAB, true, 0, path, &c->vocab) ||
        get_int(root, "sliding_window", NULL, 1, 1 << 30, true, 0, path, &c->sliding_window) ||
        get_int(root, "max_position_embeddings", NULL, 1, 1 << 30, false, 131072, path,
                &c->max_position) ||
        get_int(root, "pad_token_id", NULL, -1, 1 << 24, false, -1, path, &c->pad_token))
        goto out;
    if (get_int(root, "head_dim", NULL, 2, 1024, false, c->hidden / c->n_heads, path, &c->head_dim))
        goto out;
    if (get_num(root, "rms_norm_eps", false, 1e-5, path, "", &c->rms_norm_eps) ||
        get_num(root, "swiglu_limit", false, 7.0, path, "", &c->swiglu_limit) ||
        get_num(root, "swiglu_alpha", false, 1.702, path, "", &c->swiglu_alpha))
        goto out;
    if (parse_rope(root, path, c) || parse_layer_types(root, path, c) ||
        parse_quant(root, path, c) || parse_eos(root, path, c))
        goto out;

    /* Consistency: what the kernels and the MXFP4 layout require. */
    if (c->experts_per_tok > c->n_experts) {
        err_set("%s: field 'num_experts_per_tok' = %d exceeds 'num_local_experts' = %d", path,
                c->experts_per_tok, c->n_experts);
        goto out;
    }
    if (c->hidden % 32) {
        err_set("%s: field 'hidden_size' = %d is not a multiple of 32 (the MXFP4 block size)", path,
                c->hidden);
        goto out;
    }
    if (c->intermediate % 32) {
        err_set("%s: field 'intermediate_size' = %d is not a multiple of 32 (the MXFP4 block size)",
                path, c->intermediate);
        goto out;
    }
    if (c->n_heads % c->n_kv_heads) {
        err_set(
            "%s: field 'num_attention_heads' = %d is not a multiple of 'num_key_value_heads' = %d",
            path, c->n_heads, c->n_kv_heads);
        goto out;
    }
    if (c->head_dim % 2) {
        err_set("%s: field 'head_dim' = %d must be even (RoPE rotates halves)", path, c->head_dim);
        goto out;
    }
    if (!(c->rms_norm_eps > 0)) {
        err_set("%s: field 'rms_norm_eps' must be > 0", path);
        goto out;
    }
    if (!(c->swiglu_limit > 0)) {
        err_set("%s: field 'swiglu_limit' must be > 0", path);
        goto out;
    }
    json_t *ab = json_object_get(root, "attention_bias");
    if (ab && json_is_false(ab)) {
        err_set("%s: field 'attention_bias' = false is not supported (gpt-oss has q/k/v/o biases)",
                path);
        goto out;
    }
    json_t *tie = json_object_get(root, "tie_word_embeddings");
    if (tie && json_is_true(tie)) {
        err_set("%s: field 'tie_word_embeddings' = true is not supported (gpt-oss has a separate "
                "lm_head)",
                path);
        goto out;
    }
    rc = 0;
out:
    json_decref(root);
    return rc;
}

int config_load(const char *dir, model_config *out) {
    char *path = path_join(dir, "config.json");
    char *text = file_read_all(path, NULL);
    int rc = text ? config_parse(text, path, out) : -1;
    free(text);
    free(path);
    return rc;
}

static void preset_common(model_config *c, int layers, int experts) {
    memset(c, 0, sizeof *c);
    c->n_layers = layers;
    c->n_experts = experts;
    c->experts_per_tok = 4;
    c->hidden = 2880;
    c->intermediate = 2880;
    c->n_heads = 64;
    c->n_kv_heads = 8;
    c->head_dim = 64;
    c->vocab = 201088;
    c->sliding_window = 128;
    for (int i = 0; i < layers; i++) c->layer_sliding[i] = (i % 2 == 0);
    c->rope_theta = 150000;
    c->rope_factor = 32;
    c->rope_beta_fast = 32;
    c->rope_beta_slow = 1;
    c->rope_original_max = 4096;
    c->rope_truncate = false;
    c->max_position = 131072;
    c->rms_norm_eps = 1e-5;
    c->swiglu_limit = 7.0;
    c->swiglu_alpha = 1.702;
    c->mxfp4 = true;
    c->n_eos = 1;
    c->eos[0] = 200002;
    c->pad_token = 199999;
}

void config_preset_20b(model_config *c) {
    preset_common(c, 24, 32);
}
void config_preset_120b(model_config *c) {
    preset_common(c, 36, 128);
}

char *config_to_json(const model_config *c) {
    json_t *root = json_object();
    json_t *arch = json_array();
    json_array_append_new(arch, json_string("GptOssForCausalLM"));
    json_object_set_new(root, "architectures", arch);
    json_object_set_new(root, "attention_bias", json_true());
    json_object_set_new(root, "attention_dropout", json_real(0.0));
    json_t *eos = c->n_eos == 1 ? json_integer(c->eos[0]) : json_array();
    for (int i = 0; c->n_eos > 1 && i < c->n_eos; i++)
        json_array_append_new(eos, json_integer(c->eos[i]));
    json_object_set_new(root, "eos_token_id", eos);
    json_object_set_new(root, "experts_per_token", json_integer(c->experts_per_tok));
    json_object_set_new(root, "head_dim", json_integer(c->head_dim));
    json_object_set_new(root, "hidden_act", json_string("silu"));
    json_object_set_new(root, "hidden_size", json_integer(c->hidden));
    json_object_set_new(root, "initial_context_length", json_integer(c->rope_original_max));
    json_object_set_new(root, "initializer_range", json_real(0.02));
    json_object_set_new(root, "intermediate_size", json_integer(c->intermediate));
    json_t *lt = json_array();
    for (int i = 0; i < c->n_layers; i++)
        json_array_append_new(
            lt, json_string(c->layer_sliding[i] ? "sliding_attention" : "full_attention"));
    json_object_set_new(root, "layer_types", lt);
    json_object_set_new(root, "max_position_embeddings", json_integer(c->max_position));
    json_object_set_new(root, "model_type", json_string("gpt_oss"));
    json_object_set_new(root, "num_attention_heads", json_integer(c->n_heads));
    json_object_set_new(root, "num_experts_per_tok", json_integer(c->experts_per_tok));
    json_object_set_new(root, "num_hidden_layers", json_integer(c->n_layers));
    json_object_set_new(root, "num_key_value_heads", json_integer(c->n_kv_heads));
    json_object_set_new(root, "num_local_experts", json_integer(c->n_experts));
    json_object_set_new(root, "output_router_logits", json_false());
    json_object_set_new(root, "pad_token_id", json_integer(c->pad_token));
    json_t *q = json_object();
    json_t *skip = json_array();
    json_array_append_new(skip, json_string("model.layers.*.self_attn"));
    json_array_append_new(skip, json_string("model.layers.*.mlp.router"));
    json_array_append_new(skip, json_string("model.embed_tokens"));
    json_array_append_new(skip, json_string("lm_head"));
    json_object_set_new(q, "modules_to_not_convert", skip);
    json_object_set_new(q, "quant_method", json_string("mxfp4"));
    json_object_set_new(root, "quantization_config", q);
    json_object_set_new(root, "rms_norm_eps", json_real(c->rms_norm_eps));
    json_t *rs = json_object();
    json_object_set_new(rs, "beta_fast", json_real(c->rope_beta_fast));
    json_object_set_new(rs, "beta_slow", json_real(c->rope_beta_slow));
    json_object_set_new(rs, "factor", json_real(c->rope_factor));
    json_object_set_new(rs, "original_max_position_embeddings", json_integer(c->rope_original_max));
    json_object_set_new(rs, "rope_type", json_string("yarn"));
    json_object_set_new(rs, "truncate", json_boolean(c->rope_truncate));
    json_object_set_new(root, "rope_scaling", rs);
    json_object_set_new(root, "rope_theta", json_real(c->rope_theta));
    json_object_set_new(root, "router_aux_loss_coef", json_real(0.9));
    json_object_set_new(root, "sliding_window", json_integer(c->sliding_window));
    json_object_set_new(root, "swiglu_limit", json_real(c->swiglu_limit));
    json_object_set_new(root, "tie_word_embeddings", json_false());
    json_object_set_new(root, "transformers_version", json_string("4.55.0.dev0"));
    json_object_set_new(root, "use_cache", json_true());
    json_object_set_new(root, "vocab_size", json_integer(c->vocab));
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(15));
    json_decref(root);
    char *out = xasprintf("%s\n", s);
    free(s);
    return out;
}
