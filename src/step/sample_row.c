/* One sequence's host sampling (sample_row.h): the history the penalties need, then sampler.c. */
#include "step/sample_row.h"
#include "base/xalloc.h"
#include "step/sampler.h"

#include <stdlib.h>
#include <string.h>

int32_t step_sample_row(const step_batch *st, int i, float *row, int vocab, int32_t slot_last,
                        seq_result *out) {
    const sampling_params *p = &st->params[i];
    if (p->constrained && st->masks) {
        const uint32_t *mask = step_masks_row(st->masks, i);
        if (mask) step_mask_apply(row, vocab, mask, st->masks->words);
    }
    /* History for the penalties: what the engine knows, plus the token this slot sampled last when the
     * engine did not know it yet (asynchronous scheduling). */
    const int32_t *hist = st->history[i];
    int hist_len = st->history_len[i];
    int32_t *with_pending = NULL;
    if (hist && st->token_ids[st->query_start[i + 1] - 1] == STEP_TOKEN_FROM_DEVICE) {
        with_pending = xmalloc((size_t)(hist_len + 1) * sizeof *with_pending);
        if (hist_len) memcpy(with_pending, hist, (size_t)hist_len * sizeof *hist);
        with_pending[hist_len++] = slot_last;
        hist = with_pending;
    }
    if (p->logprobs > 0) {
        out->top_ids = xmalloc((size_t)p->logprobs * sizeof(int32_t));
        out->top_logprobs = xmalloc((size_t)p->logprobs * sizeof(float));
    }
    sample_out so = {.top_ids = out->top_ids, .top_logprobs = out->top_logprobs};
    int32_t token = sampler_sample(row, vocab, p, hist, hist_len, st->prompt_len[i], p->seed,
                                   (int64_t)st->output_len[i], &so);
    out->logprob = so.logprob;
    out->n_top = so.n_top;
    free(with_pending);
    return token;
}
