/* Structured output in the step loop: the masks of a step's constrained rows.
 *
 * Timing (why here): a row's mask depends on every token the sequence sampled before, so the mask
 * of step N+1 can only be computed once step N's token is known — after collect(N), which with
 * asynchronous scheduling happens just before launch(N+1). Rather than delaying the launch by the
 * masks' cost, the step is launched with its gate closed (structured_prepare), and the masks are
 * filled while the backend runs the forward pass (structured_fill), then the gate opens; the
 * samplers wait on it (step/step_masks.h). Measured cost: bench/NOTES.md. */
#include "engine/engine_internal.h"

#include "base/xalloc.h"

#include <string.h>

void structured_prepare(engine *e, step_slot *st) {
    step_batch *b = &st->b;
    int n_constrained = 0;
    /* The step was scheduled before the previous step's tokens were known; they are now, so only
     * the rows that will really be masked are flagged: the CUDA backend samples those on the host,
     * the rest (harmony's free analysis, say) stay on the device. */
    for (int i = 0; i < b->n_seqs; i++) {
        if (!b->params[i].constrained) continue;
        const seq *s = st->seqs[i];
        b->params[i].constrained =
            b->sample[i] && s->status != SEQ_FINISHED && s->cs && constraint_needs_mask(s->cs);
        n_constrained += b->params[i].constrained;
    }
    st->b.masks = NULL;
    if (n_constrained == 0 || !e->opt.grammar_vocab) return;
    const size_t words = grammar_mask_words(e->opt.grammar_vocab);
    if (b->n_seqs > st->cap_mask_rows) {
        st->cap_mask_rows = b->n_seqs;
        st->mask_rows = xrealloc((void *)st->mask_rows, (size_t)b->n_seqs * sizeof *st->mask_rows);
    }
    if (n_constrained > st->cap_mask) {
        st->cap_mask = n_constrained;
        st->mask_buf = xrealloc(st->mask_buf, (size_t)n_constrained * words * sizeof *st->mask_buf);
    }
    memset((void *)st->mask_rows, 0, (size_t)b->n_seqs * sizeof *st->mask_rows);
    step_masks_reset(&st->masks);
    st->masks.rows = st->mask_rows;
    st->masks.n_rows = b->n_seqs;
    st->masks.words = words;
    st->b.masks = &st->masks;
}

void structured_fill(engine *e, step_slot *st) {
    if (!st->b.masks) return;
    const step_batch *b = &st->b;
    const size_t words = st->masks.words;
    int k = 0;
    for (int i = 0; i < b->n_seqs; i++) {
        if (!b->sample[i] || !b->params[i].constrained) continue;
        uint32_t *row = st->mask_buf + (size_t)k++ * words;
        seq *s = st->seqs[i];
        /* A sequence that stopped while it was scheduled keeps no mask: its token is dropped. */
        if (s->status != SEQ_FINISHED && s->cs &&
            constraint_fill_mask(s->cs, row, s->stop_ids, s->n_stop_ids))
            st->mask_rows[i] = row;
    }
    (void)e;
    step_masks_publish(&st->masks);
}
