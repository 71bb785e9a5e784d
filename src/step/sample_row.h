/* Sampling one sequence's row of logits on the host: the one place where a backend turns a step's
 * logits into a token for a sequence whose sampling the device does not do (the CPU backend for every
 * row, the CUDA backend for rows with penalties or bias). */
#ifndef GPTOSS_STEP_SAMPLE_ROW_H
#define GPTOSS_STEP_SAMPLE_ROW_H

#include "step/batch.h"

#include <stdint.h>

/* Samples sequence i of st from row (vocab logits; penalties and bias edit it in place) with its
 * sampling parameters, and fills out's token, logprob and top lists (allocated here when the request
 * asked for logprobs; step_result_free releases them). slot_last is the token this sequence's slot
 * sampled last: when the step reads its input token from the device (asynchronous scheduling), the
 * engine's history lacks that token, and the penalties must still see it. A constrained row
 * (params.constrained, structured output) first waits for its mask on st->masks and sets every
 * token outside it to -inf. Returns the token. */
int32_t step_sample_row(const step_batch *st, int i, float *row, int vocab, int32_t slot_last,
                        seq_result *out);

#endif
