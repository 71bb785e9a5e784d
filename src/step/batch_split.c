#include "step/batch_split.h"

#include "base/error.h"

#include <stdlib.h>
#include <string.h>

int step_batch_check_parts(const step_batch *st, int n_ranks) {
    if (st->dp_size != n_ranks)
        return err_set("a step for %d data-parallel ranks handed to a backend of %d", st->dp_size,
                       n_ranks);
    if (n_ranks < 1 || n_ranks > STEP_DP_MAX)
        return err_set("a step split over %d data-parallel ranks (1 to %d)", n_ranks, STEP_DP_MAX);
    if (st->dp_seq0[0] != 0 || st->dp_seq0[n_ranks] != st->n_seqs)
        return err_set("the step's data-parallel parts span sequences [%d, %d) of %d",
                       st->dp_seq0[0], st->dp_seq0[n_ranks], st->n_seqs);
    for (int r = 0; r < n_ranks; r++)
        if (st->dp_seq0[r + 1] < st->dp_seq0[r])
            return err_set("the step's data-parallel part %d ends before it starts", r);
    return 0;
}

void step_batch_part(const step_batch *st, int r, step_batch *part, int32_t *qs) {
    const int i0 = st->dp_seq0[r], n = st->dp_seq0[r + 1] - i0;
    const int q0 = st->query_start[i0];
    memset(part, 0, sizeof *part);
    part->n_seqs = n, part->n_tokens = st->query_start[i0 + n] - q0;
    part->block_size = st->block_size;
    part->token_ids = st->token_ids + q0, part->positions = st->positions + q0;
    for (int i = 0; i <= n; i++) qs[i] = st->query_start[i0 + i] - q0;
    part->query_start = qs;
    part->slot = st->slot + i0, part->start_pos = st->start_pos + i0;
    part->swa_first = st->swa_first + i0, part->sample = st->sample + i0;
    part->reset_slot = st->reset_slot + i0, part->params = st->params + i0;
    part->output_len = st->output_len + i0, part->history = st->history + i0;
    part->history_len = st->history_len + i0, part->prompt_len = st->prompt_len + i0;
    part->prompt_next = st->prompt_next ? st->prompt_next + i0 : NULL;
    part->full_tables = st->full_tables + (size_t)i0 * st->full_stride;
    part->full_stride = st->full_stride;
    part->swa_tables = st->swa_tables + (size_t)i0 * st->swa_stride;
    part->swa_stride = st->swa_stride;
    part->masks = NULL;
}

void step_result_place(step_result *whole, int i0, step_result *part, int n_part) {
    if (part->seqs && n_part > 0)
        memcpy(whole->seqs + i0, part->seqs, (size_t)n_part * sizeof *part->seqs);
    whole->n += part->n;
    free(part->seqs);
    part->seqs = NULL, part->n = 0;
}
