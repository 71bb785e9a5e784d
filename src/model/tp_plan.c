#include "model/tp_plan.h"

#include "base/error.h"

#include <string.h>

/* [lo, hi) of part r of n items split into `parts` contiguous shares, the first n % parts one
 * larger. */
static void share(int n, int parts, int r, int *lo, int *count) {
    const int base = n / parts, extra = n % parts;
    *lo = r * base + (r < extra ? r : extra);
    *count = base + (r < extra ? 1 : 0);
}

int tp_plan_make(const model_config *c, int size, bool expert_parallel, tp_plan *out) {
    memset(out, 0, sizeof *out);
    if (size < 1 || size > TP_MAX)
        return err_set("--tensor-parallel-size %d: expected 1 to %d", size, TP_MAX);
    if (c->n_heads % size)
        return err_set("--tensor-parallel-size %d does not divide the model's %d attention heads",
                       size, c->n_heads);
    if (c->n_kv_heads % size && size % c->n_kv_heads)
        return err_set("--tensor-parallel-size %d: the model's %d KV heads can be neither split "
                       "nor replicated evenly over %d ranks",
                       size, c->n_kv_heads, size);
    if (c->intermediate % TP_UNIT)
        return err_set("--tensor-parallel-size: the intermediate size %d is not a multiple of %d",
                       c->intermediate, TP_UNIT);
    if (expert_parallel && c->n_experts % size)
        return err_set("--enable-expert-parallel: %d ranks do not divide the model's %d experts",
                       size, c->n_experts);
    out->size = size;
    out->expert_parallel = expert_parallel;
    const int heads = c->n_heads / size, group = c->n_heads / c->n_kv_heads;
    const int units = c->intermediate / TP_UNIT;
    for (int r = 0; r < size; r++) {
        tp_rank *k = &out->rank[r];
        k->q_head0 = r * heads, k->n_q_heads = heads;
        /* the KV heads its query heads read: a share, or (more ranks than KV heads) one */
        k->kv_head0 = k->q_head0 / group;
        k->n_kv_heads = heads >= group ? heads / group : 1;
        if (expert_parallel) {
            k->unit0 = 0, k->n_units = units;
            k->expert0 = r * (c->n_experts / size), k->n_experts = c->n_experts / size;
        } else {
            share(units, size, r, &k->unit0, &k->n_units);
            k->expert0 = 0, k->n_experts = c->n_experts;
        }
        share(c->vocab, size, r, &k->vocab0, &k->n_vocab);
        k->adds_biases = r == 0;
    }
    return 0;
}

int tp_plan_make_dep(const model_config *c, int size, tp_plan *out) {
    memset(out, 0, sizeof *out);
    if (size < 1 || size > DP_MAX)
        return err_set("--data-parallel-size %d: expected 1 to %d", size, DP_MAX);
    if (c->n_experts % size)
        return err_set("--data-parallel-size %d with --enable-expert-parallel: %d ranks do not "
                       "divide the model's %d experts",
                       size, size, c->n_experts);
    if (c->intermediate % TP_UNIT)
        return err_set("--data-parallel-size: the intermediate size %d is not a multiple of %d",
                       c->intermediate, TP_UNIT);
    out->size = size;
    out->expert_parallel = true;
    out->data_parallel = true;
    for (int r = 0; r < size; r++) {
        tp_rank *k = &out->rank[r];
        k->q_head0 = 0, k->n_q_heads = c->n_heads; /* attention whole: each rank its own rows */
        k->kv_head0 = 0, k->n_kv_heads = c->n_kv_heads;
        k->unit0 = 0, k->n_units = c->intermediate / TP_UNIT;
        k->expert0 = r * (c->n_experts / size), k->n_experts = c->n_experts / size;
        k->vocab0 = 0, k->n_vocab = c->vocab;
        k->adds_biases = true; /* its rows' O output is whole, bias included */
    }
    return 0;
}
