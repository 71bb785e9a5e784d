/* The CPU reference forward pass of gpt-oss (spec §2), float32, with a simple per-sequence KV cache.
 * It is the ground truth the GPU backend is tested against: readable first, fast enough for tiny
 * models and a few tokens of the real ones. */
#ifndef GPTOSS_BACKEND_CPU_CPU_MODEL_H
#define GPTOSS_BACKEND_CPU_CPU_MODEL_H

#include "model/rope.h"
#include "model/tp_plan.h"
#include "model/weights.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    const model_weights *w;
    rope_table rope;
    /* FP8 KV emulation (--kv-cache-dtype fp8 on the CPU backend; 0 after cpu_model_init): every K
     * and V value is rounded on its way into the cache exactly as the CUDA backend stores it,
     * x -> e4m3(x * (1/s)) * s with the scales of model/kv_scale.h (base/numfmt.h:
     * e4m3_kv_roundtrip), and attention reads the rounded values. So the CPU reference of an fp8 run
     * has the same cached codes as the GPU's (the tests of tests/gpu/ compare against it), and the
     * engine's properties (prefix caching, preemption) are tested with fp8 in CI. */
    int kv_fp8;
    /* A study hook (NULL after cpu_model_init; bench/kv_fp8_study.c sets it): when set, it is called
     * for each new token's K (after RoPE) and V of one KV head, head_dim values each, just before they
     * are cached (after the FP8 rounding above when kv_fp8 is on), and attention reads what it leaves.
     * It may only read them (statistics) or round them in place (other formats, scales, K or V
     * alone). Why: issue 15 asks how much of the FP8 cache's top-1 loss is the format, the scales, K
     * or V; the hook varies the rounding without a second copy of the forward pass. Called from one
     * thread, in token order. */
    void (*kv_hook)(void *ctx, int layer, int kv_head, int64_t pos, float *k, float *v,
                    int head_dim);
    void *kv_hook_ctx;
    /* Its companion (NULL after cpu_model_init): called once per layer and forward call with the
     * router logits of the call's T tokens (logits[t * n_experts + e]) and the experts chosen
     * (experts[t * k + j], the top-k in order). Why: a perturbation that flips a token's expert set
     * moves its output by a whole expert's contribution, a jump no smooth error model predicts; the
     * study counts such flips and the router's k-th vs (k+1)-th gaps. */
    void (*route_hook)(void *ctx, int layer, int T, const float *logits, int n_experts,
                       const int *experts, int k);
    void *route_hook_ctx;
    /* Tensor / expert parallelism emulated (model/tp_plan.h; size 1 after cpu_model_init): each
     * layer's attention and MoE are computed rank by rank from that rank's slices of the weights,
     * and the partial outputs summed in rank order, as N GPUs' all-reduce would. Size 1 runs the
     * plain forward pass (bit-identical to it). The CI test of the sharding maths (test_tp). */
    tp_plan plan;
} cpu_model;

/* K (after RoPE) and V of every position of one sequence, per layer: [layer][pos][kv_heads*head_dim]. */
typedef struct {
    int n_layers, kv_dim;
    int64_t len, cap;
    float **k, **v;
} cpu_kv_cache;

void cpu_model_init(cpu_model *m, const model_weights *w);
/* Emulates N = size ranks (1 = off); refuses, naming the problem, what tp_plan_make refuses. */
int cpu_model_set_parallel(cpu_model *m, int size, bool expert_parallel);

/* DEP emulated (model/tp_plan.h's tp_plan_make_dep; N = size ranks, 1 or 2): cpu_forward_dep's
 * plan. Refuses what tp_plan_make_dep refuses. */
int cpu_model_set_dep(cpu_model *m, int size);

void cpu_kv_init(cpu_kv_cache *kv, const model_config *c);
void cpu_kv_free(cpu_kv_cache *kv);

enum cpu_logits { CPU_LOGITS_NONE, CPU_LOGITS_LAST, CPU_LOGITS_ALL };

/* Where the K and V rows of (layer, sequence, position) live. The forward pass writes the step's new
 * rows first and then reads every visible row, so any storage works: the contiguous per-sequence cache
 * below, or the paged pools of the CPU backend. */
typedef struct {
    float *(*k_row)(void *ctx, int layer, int seq, int64_t pos);
    float *(*v_row)(void *ctx, int layer, int seq, int64_t pos);
    void *ctx;
} cpu_kv_view;

/* A flat batch: T tokens of possibly several sequences (token t belongs to sequence seq[t] at position
 * pos[t]). Logits are computed for the n_rows tokens listed in rows[] (ascending), vocab floats each.
 * The math of one token never depends on the others in the batch (each output row is its own dot
 * product, summed in a fixed order), so a sequence gets bit-identical logits alone or batched. */
int cpu_forward_batch(const cpu_model *m, const cpu_kv_view *kv, int T, const int32_t *tokens,
                      const int32_t *seq, const int64_t *pos, int n_rows, const int32_t *rows,
                      float *logits);

/* One DEP rank's part of a step: its own rows (T may be 0: the rank still joins every MoE), read
 * and written through its own KV view, and the logits of its n_rows rows (indices into its T). */
typedef struct {
    const cpu_kv_view *kv;
    int T;
    const int32_t *tokens, *seq;
    const int64_t *pos;
    int n_rows;
    const int32_t *rows;
    float *logits;
} cpu_dep_part;

/* A DEP step of n_ranks ranks (m's plan from cpu_model_set_dep): each rank's attention on its own
 * rows with the whole attention weights; per layer the ranks' MLP-normed rows gathered in rank
 * order, every rank's experts run over all of them (the EP partials summed in rank order, as the
 * all-reduce does), and each rank adds its own rows of the sum to its residual stream. Every row's
 * maths is the plain forward pass's but for the order of the MoE partials' sum, so the logits
 * equal cpu_forward_batch's on the same sequences to float32 rounding (tests/test_tp.c). */
int cpu_forward_dep(const cpu_model *m, int n_ranks, const cpu_dep_part *part);

/* Runs T new tokens at positions kv->len .. kv->len+T-1 and appends their K/V. Writes logits
 * (vocab floats per row) for the last token or for every token, as asked. Token ids are checked
 * against the vocabulary. */
int cpu_forward(const cpu_model *m, cpu_kv_cache *kv, const int32_t *tokens, int T,
                enum cpu_logits want, float *logits);

#endif
