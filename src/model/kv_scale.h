/* The scales of the FP8 (e4m3) KV cache (--kv-cache-dtype fp8), one rule for both backends.
 *
 * Format (backend/cuda/attention.h): every (layer, K or V, KV head) has a scale s; a value x is stored
 * as the e4m3 code of x * (1/s) and read back as e4m3(code) * s. The table of one layer is
 *     [0, n)   K scales     [n, 2n)  V scales     [2n, 3n) 1 / K scales     [3n, 4n) 1 / V scales
 * (n = n_kv_heads; the reciprocals rounded to fp32 once, here, so the CPU reference and the GPU
 * quantise with the same multiplier and store the same codes).
 *
 * The values: fixed, all 1.0 (vLLM's default when a checkpoint carries no scales), chosen over scales
 * computed from the data (vLLM's --calculate-kv-scales) because:
 *  - e4m3 is a floating-point format: its rounding error is relative (<= 2^-4) anywhere in
 *    2^-6 .. 448, so a scale does not have to fit the data, only keep it inside that window of 17
 *    binades. gpt-oss's K (after RoPE) and V are RMS-normed activations through a linear layer: on
 *    the synthetic weights their RMS is ~1 and their largest values a few units; at scale 1 the bulk
 *    sits in the middle of the window, and only |x| < 2^-6 (a negligible share of any dot product)
 *    is rounded on the coarser subnormal grid.
 *  - Data-computed scales must be fixed before the first block is written (a block written under one
 *    scale cannot be read under another), so they come from whatever request arrives first: the
 *    outputs of every later request would depend on it, prefix-cache hits could read blocks of a
 *    different calibration run, and the CPU reference could not reproduce the GPU's codes.
 *  - Power-of-two scales (1 is one) make x * (1/s) exact, so the stored code is the e4m3 rounding of x
 *    itself, whatever the order of operations.
 * Per-KV-head granularity is in the format and the kernels (each CTA of the attention kernels owns one
 * KV head, so a per-head scale costs nothing); a checkpoint's calibrated scales, or a calibration
 * pass, would fill this table instead of the constant. Whether per-head scales help is measured, not
 * assumed: with a floating-point format they only matter for a head whose values leave the window. */
#ifndef GPTOSS_MODEL_KV_SCALE_H
#define GPTOSS_MODEL_KV_SCALE_H

#include "model/config.h"

/* Fills table[4 * c->n_kv_heads] for layer `layer` (the layout above). */
void kv_fp8_scales(const model_config *c, int layer, float *table);

#endif
