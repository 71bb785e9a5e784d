/* A DEP step (step/batch.h's dp_size > 1) as one step per rank: each rank's backend runs attention
 * on its own sequences only, so it is handed their part of the step as a step of its own, and its
 * results go back to their places in the whole step's result. Used by the backends that run DEP
 * (the CPU backend's emulation and the CUDA backend's ranks). */
#ifndef GPTOSS_STEP_BATCH_SPLIT_H
#define GPTOSS_STEP_BATCH_SPLIT_H

#include "step/batch.h"

/* 0 when st's DEP fields describe n_ranks ranks' parts of its sequences (dp_seq0 from 0 to n_seqs,
 * never decreasing); else -1 with err_set naming the problem. */
int step_batch_check_parts(const step_batch *st, int n_ranks);

/* Rank r's part: sequences [dp_seq0[r], dp_seq0[r + 1]) and their tokens as a step of one rank
 * (dp_size 0). Every array is a view into st's (nothing is copied, so st must outlive the part)
 * except query_start, rebased to 0, which is written to qs (room for the part's n_seqs + 1). Its
 * masks are NULL: a constrained row's mask is indexed in the whole step (the caller samples such
 * rows, or refuses them). */
void step_batch_part(const step_batch *st, int r, step_batch *part, int32_t *qs);

/* Moves a part's n_part results into the whole step's result at sequences i0 .. (the per-sequence
 * arrays change owner; part->seqs is freed) and adds its count of sampled rows. */
void step_result_place(step_result *whole, int i0, step_result *part, int n_part);

#endif
