#include "model/kv_scale.h"

void kv_fp8_scales(const model_config *c, int layer, float *table) {
    (void)layer; /* the same for every layer today (kv_scale.h says why) */
    const int n = c->n_kv_heads;
    for (int j = 0; j < n; j++) {
        const float k = 1.0f, v = 1.0f;
        table[j] = k, table[n + j] = v;
        table[2 * n + j] = 1.0f / k, table[3 * n + j] = 1.0f / v;
    }
}
