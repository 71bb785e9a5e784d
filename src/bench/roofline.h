/* The performance model every benchmark is held against (DESIGN.md, performance-anchors.md §5).
 *
 * A decode step of B sequences at context C reads the bf16 dense weights once (attention, router,
 * norms, lm_head), the MXFP4 experts the batch touches (distinct experts per layer ≈ E·(1−(1−k/E)^B)
 * under uniform routing), and every sequence's KV (full layers over C tokens, sliding layers over
 * min(C, window)); it computes 2 FLOPs per active weight per token plus attention. Its time is at
 * least max(bytes / bandwidth, FLOPs / matrix rate). With tensor parallelism over N GPUs each GPU
 * reads 1/N of the weights and KV and does 1/N of the FLOPs (communication is not modelled). */
#ifndef GPTOSS_BENCH_ROOFLINE_H
#define GPTOSS_BENCH_ROOFLINE_H

#include "model/config.h"

typedef struct {
    int batch;
    int context;
    int kv_bytes; /* per element: 2 (bf16) or 1 (fp8) */
    int tp;
    double bandwidth; /* bytes/s */
    double flops;     /* FLOP/s */
} roofline_in;

typedef struct {
    double weight_bytes, expert_bytes, kv_bytes, bytes_per_step; /* per GPU */
    double distinct_experts;                                     /* per layer */
    double flops_per_step;                                       /* per GPU */
    double seconds_per_step, tokens_per_second;                  /* tokens/s of the whole batch */
    int memory_bound;
} roofline_out;

/* Measured on our H200 (DESIGN.md): copy bandwidth and dense bf16 matrix rate. */
#define ROOFLINE_H200_BANDWIDTH 4.2e12
#define ROOFLINE_H200_FLOPS     790e12

void roofline_decode(const model_config *c, const roofline_in *in, roofline_out *out);

/* Bytes of one KV element for a --kv-dtype / --kv-cache-dtype name: 2 for auto and bf16, 1 for fp8
 * and fp8_e4m3 (the e4m3 cache: what the kernels move, the per-(layer, KV head) scales aside, which
 * are read once per CTA), -1 for anything else. */
int roofline_kv_bytes(const char *kv_dtype);

#endif
