/* The tensors a gpt-oss checkpoint holds, in the Hugging Face release layout: one table that both the
 * loader (to check presence, dtype and shape) and the synthetic-checkpoint writer use, so the two can
 * never disagree. */
#ifndef GPTOSS_MODEL_TENSORS_H
#define GPTOSS_MODEL_TENSORS_H

#include "model/config.h"
#include "model/safetensors.h"

enum tensor_kind {
    /* global */
    TK_EMBED,
    TK_FINAL_NORM,
    TK_LM_HEAD,
    /* per layer */
    TK_ATTN_NORM,
    TK_Q_W,
    TK_Q_B,
    TK_K_W,
    TK_K_B,
    TK_V_W,
    TK_V_B,
    TK_O_W,
    TK_O_B,
    TK_SINKS,
    TK_MLP_NORM,
    TK_ROUTER_W,
    TK_ROUTER_B,
    TK_GATE_UP_BLOCKS,
    TK_GATE_UP_SCALES,
    TK_GATE_UP_BIAS,
    TK_DOWN_BLOCKS,
    TK_DOWN_SCALES,
    TK_DOWN_BIAS,
    TK_COUNT
};
enum { TK_FIRST_LAYER_KIND = TK_ATTN_NORM, TK_LAYER_KINDS = TK_COUNT - TK_ATTN_NORM };

typedef struct {
    char name[96];
    enum tensor_kind kind;
    int layer;           /* -1 for global tensors */
    enum st_dtype dtype; /* the release's dtype */
    int ndim;
    int64_t shape[4];
} tensor_spec;

/* Number of tensors for this config: 3 + layers * TK_LAYER_KINDS. */
int tensor_count(const model_config *c);
/* The i-th tensor in checkpoint order (embedding, then each layer, then final norm and lm_head). */
void tensor_spec_at(const model_config *c, int i, tensor_spec *out);
/* True for tensors stored as raw MXFP4 bytes (U8); the others are dense (BF16 in the release). */
int tensor_kind_is_mxfp4(enum tensor_kind k);

#endif
