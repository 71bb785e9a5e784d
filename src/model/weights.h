/* A loaded checkpoint: the config plus every tensor bound by kind and layer, after checking presence,
 * dtype and shape against the config (before any math runs). The data stays in the safetensors
 * mappings; nothing is copied or widened here. */
#ifndef GPTOSS_MODEL_WEIGHTS_H
#define GPTOSS_MODEL_WEIGHTS_H

#include "base/numfmt.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "model/tensors.h"

#include <stddef.h>

/* A dense tensor in the file's own dtype (BF16 in the release; F32 accepted too). */
typedef struct {
    const void *data;
    enum st_dtype dtype;
} dense_ref;

static inline float dense_at(dense_ref r, size_t i) {
    return r.dtype == ST_F32 ? ((const float *)r.data)[i]
                             : bf16_to_f32(((const uint16_t *)r.data)[i]);
}
/* The tensor from element i on (a row or column offset into it). */
static inline dense_ref dense_shift(dense_ref r, size_t i) {
    dense_ref o = r;
    o.data = (const char *)r.data + i * (r.dtype == ST_F32 ? 4 : 2);
    return o;
}
/* out[j] = r[offset + j] for j < n, as float32. */
void dense_read(dense_ref r, size_t offset, size_t n, float *out);

typedef struct {
    const st_tensor *t[TK_COUNT]; /* global kinds in layer -1's slots are unused */
} layer_tensors;

typedef struct {
    model_config cfg;
    st_model st;
    const st_tensor *global[TK_COUNT];
    layer_tensors *layers; /* cfg.n_layers */
} model_weights;

/* Loads DIR/config.json and the safetensors files, then binds and checks every tensor. */
int weights_load(const char *dir, model_weights *w);
void weights_free(model_weights *w);

static inline dense_ref weights_dense(const model_weights *w, int layer, enum tensor_kind k) {
    const st_tensor *t = layer < 0 ? w->global[k] : w->layers[layer].t[k];
    dense_ref r = {t->data, t->dtype};
    return r;
}
static inline const uint8_t *weights_bytes(const model_weights *w, int layer, enum tensor_kind k) {
    return (const uint8_t *)w->layers[layer].t[k]->data;
}

#endif
