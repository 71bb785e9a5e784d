/* Synthetic checkpoints: random weights at any shape, written in the exact Hugging Face release layout
 * (config.json, sharded safetensors with an index, bf16 dense tensors, MXFP4 experts, bf16 biases,
 * generation_config.json and the tokenizer files beside them). The bytes depend only on the config and
 * the seed. Weight scales are chosen so activations stay in a realistic range through every layer and
 * the logits are far from flat. */
#ifndef GPTOSS_MODEL_SYNTHETIC_H
#define GPTOSS_MODEL_SYNTHETIC_H

#include "model/config.h"

#include <stdint.h>

/* A small model with every feature of the real ones: GQA (8 query heads per 2 KV heads), sliding and
 * full layers (window 16 so short prompts cross it), 8 experts with top-4, the real vocabulary. */
void config_preset_tiny(model_config *c);
/* Looks up "tiny", "20b" or "120b"; -1 with an error naming the preset otherwise. */
int config_preset(const char *name, model_config *c);

/* Writes the checkpoint into out_dir (created if needed) in n_shards safetensors files. */
int synthetic_write(const model_config *c, const char *out_dir, uint64_t seed, int n_shards);

#endif
