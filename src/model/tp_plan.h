/* Tensor and expert parallelism for gpt-oss (--tensor-parallel-size N, --enable-expert-parallel):
 * which part of each weight rank r of N holds, and so what each rank's partial result is.
 *
 * The maths, per layer (a rank's partials are summed over the ranks: the all-reduce):
 *   attention  by heads. Rank r holds query heads [q0, q0 + n_q) with their sinks, and the KV heads
 *              those read (query head h reads KV head h / (heads per KV head)): the rows of q, k, v
 *              (and their biases) for those heads, and the columns of O for its query heads. Its
 *              partial output is attn[:, its heads] · O[:, its heads]ᵀ; the O bias is added once,
 *              by rank 0. With more ranks than KV heads, each KV head is held by N / n_kv_heads
 *              ranks (computed by each, as vLLM does).
 *   MoE (TP)   by the intermediate dimension, in units of 32 (the MXFP4 block of the down
 *              projection's input): rank r holds units [u0, u0 + n_u) of every expert: gate_up rows
 *              [2·32·u0, 2·32·(u0 + n_u)) (gate and up are interleaved, row 2j is gate j and 2j + 1
 *              up j) and the down projection's input blocks [u0, u0 + n_u) of every row. Its partial
 *              output is Σ_expert gate · down_r(swiglu(gate_up_r(x))); the down bias is added once,
 *              by rank 0. 2,880 = 90 units: 45 each at N = 2, 23/23/22/22 at N = 4.
 *   MoE (EP)   by experts: rank r runs experts [e0, e0 + n_e) whole, biases included.
 *   router     replicated: every rank routes every token the same way.
 *   lm_head    by vocabulary rows [v0, v0 + n_v); sampling gathers the rows.
 *   embedding, norms: replicated.
 * This file is the plan only; the CPU backend runs it rank by rank (cpu_model.c, to test the maths
 * in CI), and a multi-GPU backend loads each rank's slices. */
#ifndef GPTOSS_MODEL_TP_PLAN_H
#define GPTOSS_MODEL_TP_PLAN_H

#include "model/config.h"

#include <stdbool.h>

/* TP_MAX ranks in all (--nnodes > 1 spreads them over machines), at most TP_MAX_NODE of them on one
 * node (the GPUs of one machine: the CUDA backend's peer-memory group, backend/cuda/allreduce.h). */
enum { TP_MAX = 16, TP_MAX_NODE = 8, TP_UNIT = 32, DP_MAX = 2 };

typedef struct {
    int q_head0, n_q_heads;   /* query heads (and sinks; O columns) */
    int kv_head0, n_kv_heads; /* KV heads read by those query heads */
    int unit0, n_units; /* intermediate units of TP_UNIT of every expert (TP: a share; EP: all) */
    int expert0, n_experts; /* experts run (EP: a share; TP: all) */
    int vocab0, n_vocab;    /* lm_head rows */
    bool adds_biases;       /* the O and (TP) down biases, once: rank 0 */
} tp_rank;

typedef struct {
    int size;
    bool expert_parallel;
    bool data_parallel; /* DEP (tp_plan_make_dep): each rank runs attention on its own rows */
    tp_rank rank[TP_MAX];
} tp_plan;

/* The plan for N = size ranks (1..TP_MAX). Refuses, naming the flag and the count, a size that does
 * not divide the query heads, whose KV heads cannot be spread (N must divide n_kv_heads, or
 * n_kv_heads divide N), an intermediate size that is not a multiple of TP_UNIT, or (EP) a size that
 * does not divide the experts. */
int tp_plan_make(const model_config *c, int size, bool expert_parallel, tp_plan *out);

/* DEP (--data-parallel-size N with --enable-expert-parallel; issue 17): data-parallel attention,
 * expert-parallel MoE. Every rank holds the whole attention (all query and KV heads, O and its
 * bias: each rank's O output is its own rows' whole output, so every rank adds the bias), the whole
 * lm_head, and experts [e0, e0 + n_e) as under EP. A rank's rows are its own sequences' tokens;
 * only the MoE is shared: the ranks' normalised rows are gathered (rank order), every rank routes
 * all of them and runs its experts' pairs, and the sum over the ranks of those outputs is kept, by
 * each rank, for its own rows (a reduce-scatter). N is 1 or 2 (DP_MAX) and must divide the
 * experts. */
int tp_plan_make_dep(const model_config *c, int size, tp_plan *out);

#endif
