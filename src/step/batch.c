#include "step/batch.h"

#include <stdlib.h>

void step_result_free(step_result *r, int n_seqs) {
    if (!r->seqs) return;
    for (int i = 0; i < n_seqs; i++) {
        free(r->seqs[i].top_ids), free(r->seqs[i].top_logprobs);
        free(r->seqs[i].prompt_top_ids), free(r->seqs[i].prompt_top_logprobs);
        free(r->seqs[i].prompt_token_logprobs);
    }
    free(r->seqs);
    r->seqs = NULL;
    r->n = 0;
}
