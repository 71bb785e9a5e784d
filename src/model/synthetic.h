/* Synthetic checkpoints: random weights at any shape, written in the exact Hugging Face release layout
 * (config.json, sharded safetensors with an index, bf16 dense tensors, MXFP4 experts, bf16 biases,
 * generation_config.json and the tokenizer files beside them). The bytes depend only on the config and
 * the seed. Weight scales are chosen so activations stay in a realistic range through every layer and
 * the logits are far from flat. */
#ifndef GPTOSS_MODEL_SYNTHETIC_H
#define GPTOSS_MODEL_SYNTHETIC_H

#include "model/config.h"
#include "model/tensors.h"

#include <stdint.h>

/* A small model with every feature of the real ones: GQA (8 query heads per 2 KV heads), sliding and
 * full layers (window 16 so short prompts cross it), 8 experts with top-4, the real vocabulary. */
void config_preset_tiny(model_config *c);
/* Looks up "tiny", "20b" or "120b"; -1 with an error naming the preset otherwise. */
int config_preset(const char *name, model_config *c);

/* How each tensor's random values are drawn. Dense weights: approximately normal with standard
 * deviation `std` around `mean`. The 1/sqrt(fan_in) scales keep every projection's output near unit
 * variance after RMSNorm; the output projections are halved so the residual stream grows slowly over
 * the layers, as in trained models; lm_head is scaled up so logits have a spread of a few units.
 * MXFP4 blocks: `std` is the target the scale bytes are chosen for. The GPU backend makes synthetic
 * weights in place from the same table, bit for bit equal to a written checkpoint. */
typedef struct {
    double mean, std;
} synthetic_draw;
synthetic_draw synthetic_draw_for(const model_config *c, enum tensor_kind k);

/* Writes the checkpoint into out_dir (created if needed) in n_shards safetensors files. */
int synthetic_write(const model_config *c, const char *out_dir, uint64_t seed, int n_shards);

/* The model string a backend should load. "synthetic:NAME" (a preset) becomes the folder
 * $(cache)/models/synthetic-NAME-seed0, written on first use (synthetic_cache.c), when the backend
 * reads checkpoints from disk: the CPU backend always, any backend for the tiny model. The GPU
 * backend makes synthetic:20b and synthetic:120b[:layers=N] in device memory, so those, and every
 * other model string, are returned as they are. Heap string, NULL + err_set() on failure. */
char *synthetic_resolve(const char *model, const char *backend);

#endif
