/* The model's hyper-parameters, parsed from a Hugging Face gpt-oss config.json.
 *
 * Accepts both spellings of the RoPE settings (rope_scaling + rope_theta, and the newer
 * rope_parameters with rope_theta inside), layer_types, sliding_window and quantization_config.
 * Anything this engine cannot run exactly (a non-yarn rope, a non-mxfp4 quantisation, inconsistent
 * sizes) is refused with a message that names the field. */
#ifndef GPTOSS_MODEL_CONFIG_H
#define GPTOSS_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

enum { CONFIG_MAX_LAYERS = 256, CONFIG_MAX_EOS = 8, CONFIG_MAX_VOCAB = 1 << 24 };

typedef struct {
    int n_layers;        /* num_hidden_layers */
    int n_experts;       /* num_local_experts */
    int experts_per_tok; /* num_experts_per_tok */
    int hidden;          /* hidden_size */
    int intermediate;    /* intermediate_size (per expert, per half of gate_up) */
    int n_heads;         /* num_attention_heads */
    int n_kv_heads;      /* num_key_value_heads */
    int head_dim;
    int vocab;          /* vocab_size */
    int sliding_window; /* keys visible on sliding layers, the current one included */
    bool layer_sliding[CONFIG_MAX_LAYERS];
    double rope_theta;
    double rope_factor;    /* yarn factor (32) */
    double rope_beta_fast; /* 32: gives the low end of the ramp */
    double rope_beta_slow; /* 1: gives the high end */
    int rope_original_max; /* original_max_position_embeddings (4096) */
    bool rope_truncate;    /* round low/high to integers (false for gpt-oss) */
    int max_position;      /* max_position_embeddings */
    double rms_norm_eps;
    double swiglu_limit;
    double swiglu_alpha;
    bool mxfp4; /* experts stored as MXFP4 blocks and scales */
    int n_eos;
    int32_t eos[CONFIG_MAX_EOS];
    int32_t pad_token;
} model_config;

/* Parses JSON text; `path` names the file in messages. */
int config_parse(const char *json_text, const char *path, model_config *out);
/* Reads DIR/config.json. */
int config_load(const char *dir, model_config *out);

/* The real releases' values (for synthetic checkpoints and the roofline). */
void config_preset_20b(model_config *c);
void config_preset_120b(model_config *c);

/* Serialises to config.json text in the release layout (heap string). */
char *config_to_json(const model_config *c);

#endif
