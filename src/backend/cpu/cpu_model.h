/* The CPU reference forward pass of gpt-oss (spec §2), float32, with a simple per-sequence KV cache.
 * It is the ground truth the GPU backend is tested against: readable first, fast enough for tiny
 * models and a few tokens of the real ones. */
#ifndef GPTOSS_BACKEND_CPU_CPU_MODEL_H
#define GPTOSS_BACKEND_CPU_CPU_MODEL_H

#include "backend/cpu/rope.h"
#include "model/weights.h"

#include <stdint.h>

typedef struct {
    const model_weights *w;
    rope_table rope;
} cpu_model;

/* K (after RoPE) and V of every position of one sequence, per layer: [layer][pos][kv_heads*head_dim]. */
typedef struct {
    int n_layers, kv_dim;
    int64_t len, cap;
    float **k, **v;
} cpu_kv_cache;

void cpu_model_init(cpu_model *m, const model_weights *w);

void cpu_kv_init(cpu_kv_cache *kv, const model_config *c);
void cpu_kv_free(cpu_kv_cache *kv);

enum cpu_logits { CPU_LOGITS_NONE, CPU_LOGITS_LAST, CPU_LOGITS_ALL };

/* Runs T new tokens at positions kv->len .. kv->len+T-1 and appends their K/V. Writes logits
 * (vocab floats per row) for the last token or for every token, as asked. Token ids are checked
 * against the vocabulary. */
int cpu_forward(const cpu_model *m, cpu_kv_cache *kv, const int32_t *tokens, int T, enum cpu_logits want,
                float *logits);

#endif
