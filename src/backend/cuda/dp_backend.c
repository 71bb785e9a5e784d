/* DEP, "data + expert parallel" (--data-parallel-size 2 with --enable-expert-parallel; issue 17):
 * attention data-parallel, the MoE expert-parallel, on the CUDA backend.
 *
 * The ranks are tp_backend.c's (one process, one struct backend and launch thread per rank, on
 * their own GPUs or in lockstep on one with GPTOSS_TP_ONE_GPU=1) with tp_plan_make_dep's shares:
 * whole attention and lm_head, half the experts each. What differs from TP/EP is the step: each
 * sequence lives on one rank (its KV blocks in that rank's pools, chosen by the engine at admission;
 * step/batch.h's dp_seq0), so each rank is launched with its own part of the step
 * (step/batch_split.h) and runs attention on those rows only; the MoE of every layer runs over every
 * rank's rows (runner_forward_dep.c's all-gather and reduce-scatter, below). At wait each rank's
 * results go back to their sequences' places in the step's result, and each rank keeps its own
 * sequences' last tokens (slot_last): there is nothing to mirror between the ranks, unlike TP.
 *
 * First form, not yet done: graphs (eager only); structured output's device masks (the masks are
 * indexed in the whole step: refused here, clearly); dispatch of only the routed rows instead of
 * the all-gather of every row (bench/NOTES.md). */
#include "backend/cuda/runner.h"
#include "base/barrier.h"
#include "base/xalloc.h"
#include "step/batch_split.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The logits rows rank r's part makes (runner.c's rule for an eager step: every new token of a
 * sequence with prompt logprobs, else the last one of a sequence that samples). */
static int part_rows(const step_batch *p) {
    int rows = 0;
    for (int i = 0; i < p->n_seqs; i++) {
        const int nn = p->query_start[i + 1] - p->query_start[i];
        const bool prompt = p->params[i].prompt_logprobs > 0 && p->start_pos[i] < p->prompt_len[i];
        rows += prompt ? nn : p->sample[i] ? 1 : 0;
    }
    return rows;
}

int dp_launch(struct backend *b, const step_batch *st) {
    const int N = b->dp_size;
    if (step_batch_check_parts(st, N)) return err_prefix("cuda backend");
    for (int i = 0; i < st->n_seqs; i++)
        if (st->params[i].constrained && st->sample[i])
            return err_set("cuda backend: structured output (a constrained row) is not supported "
                           "with --data-parallel-size %d yet",
                           N);
    const step_batch *parts[TP_MAX];
    int rows[DP_MAX], total = 0;
    for (int r = 0; r < N; r++) {
        const int n = st->dp_seq0[r + 1] - st->dp_seq0[r];
        if (n + 1 > b->dp_qs_cap[r]) {
            b->dp_qs_cap[r] = 2 * (n + 1);
            b->dp_qs[r] = xrealloc(b->dp_qs[r], (size_t)b->dp_qs_cap[r] * sizeof(int32_t));
        }
        step_batch_part(st, r, &b->dp_part[r], b->dp_qs[r]);
        parts[r] = &b->dp_part[r];
        rows[r] = b->dp_part[r].n_tokens, total += rows[r];
    }
    if (total < 1) return err_set("cuda backend: empty step (%d sequences)", st->n_seqs);
    /* Every rank learns every rank's rows (its MoE runs over all of them); the test hook's rows of
     * rank r follow the ranks' before it in rank 0's buffer. */
    int before = 0;
    for (int r = 0; r < N; r++) {
        struct backend *br = b->tp_peer[r];
        memcpy(br->dp_rows, rows, sizeof rows);
        if (r > 0) {
            const bool room = b->dbg_logits && before < b->dbg_cap;
            br->dbg_logits = room ? b->dbg_logits + (size_t)before * b->V : NULL;
            br->dbg_cap = room ? b->dbg_cap - before : 0;
        }
        before += part_rows(parts[r]);
    }
    return tp_launch_parts(b, parts);
}

int dp_wait(struct backend *b, step_result *res) {
    const int N = b->dp_size;
    int n_all = 0;
    for (int r = 0; r < N; r++) n_all += b->dp_part[r].n_seqs;
    memset(res, 0, sizeof *res);
    res->seqs = xcalloc((size_t)(n_all > 0 ? n_all : 1), sizeof *res->seqs);
    int rc = 0, i0 = 0, dbg_rows = 0;
    bool dbg_whole = true; /* every rank's rows so far made it into the hook's buffer */
    char msg[600] = "";
    for (int r = 0; r < N; r++) { /* every rank's, even after a failure: none stays in flight */
        struct backend *br = b->tp_peer[r];
        const int n = b->dp_part[r].n_seqs;
        step_result part;
        cudaSetDevice(br->device);
        if (runner_collect(br, &part)) {
            if (!rc) snprintf(msg, sizeof msg, "rank %d: %s", r, err_msg());
            rc = -1;
        } else {
            if (part.seconds > res->seconds) res->seconds = part.seconds;
            step_result_place(res, i0, &part, n);
        }
        i0 += n;
        if (dbg_whole) dbg_rows += br->dbg_rows;
        dbg_whole = dbg_whole && br->dbg_rows == br->book.n_out_rows;
    }
    CU(cudaSetDevice(b->device));
    b->dbg_rows = b->dbg_logits ? dbg_rows : 0;
    if (rc) {
        step_result_free(res, n_all);
        return err_set("%s", msg);
    }
    return 0;
}

void dp_free(struct backend *b) {
    for (int r = 0; r < DP_MAX; r++) {
        free(b->dp_qs[r]);
        b->dp_qs[r] = NULL, b->dp_qs_cap[r] = 0;
    }
}

/* ---- the forward pass's collectives (runner_forward_dep.c) ---- */

/* The normed rows' all-gather: this rank's T hi rows and T lo rows (ws.a, contiguous: bf16 pairs
 * seen as T x H / 2 floats each) go to its gather buffer as a piece of two rows; the gather of
 * allreduce.h then lays every rank's piece side by side in rank order, row 0 (the hi halves) and
 * row 1 (the lo halves) of T_all x H / 2 floats each: ws.a's layout for T_all rows. */
int dep_gather_rows(struct backend *b, const fwd_plan *p, cudaStream_t s) {
    const int N = b->tp_size, half = b->H / 2;
    int col0[AR_MAX_RANKS], ncols[AR_MAX_RANKS], off = 0;
    for (int k = 0; k < N; k++) {
        col0[k] = off * half, ncols[k] = p->dep_rows[k] * half;
        off += p->dep_rows[k];
    }
    if (off != p->dep_T_all || p->dep_rows[b->tp_rank] != p->T)
        return err_set("cuda backend: DEP rank %d: %d rows of %d, the ranks' counts add to %d",
                       b->tp_rank, p->T, p->dep_T_all, off);
    if (p->T > 0)
        CU(cudaMemcpyAsync(b->ar->gather[b->tp_rank], b->ws.a,
                           (size_t)p->T * b->H * 2 * sizeof(uint16_t), cudaMemcpyDeviceToDevice,
                           s));
    float *out = (float *)b->ws.a;
    const int ld = p->dep_T_all * half;
    if (!b->tp_lock) {
        CU(ar_gather_rows(b->ar, col0, ncols, 2, out, ld, s));
        return 0;
    }
    /* lockstep: every rank's piece, then every rank's copy, then (the next layer rewrites the
     * pieces) again */
    if (barrier_wait(b->tp_lock))
        return err_set("rank %d: the all-gather's partners failed (lockstep)", b->tp_rank);
    CU(ar_gather_copy(b->ar, col0, ncols, 2, out, ld, s));
    if (barrier_wait(b->tp_lock))
        return err_set("rank %d: the all-gather's partners failed (lockstep)", b->tp_rank);
    return 0;
}

/* y_slots' reduce-scatter at site 1 (the only site DEP uses: between two calls there is always
 * the all-gather, whose barriers order them as the other site does under TP; allreduce.h). */
int dep_reduce_scatter(struct backend *b, const fwd_plan *p, const uint16_t *gain, uint16_t *y,
                       uint16_t *y_lo, cudaStream_t s) {
    const int TA = p->dep_T_all, row0 = p->dep_row0, n = p->T;
    float *h = b->ws.h;
    const float *slots = b->ws.y_slots;
    if (!b->tp_lock) {
        CU(ar_reduce_scatter_rmsnorm(b->ar, AR_PHASE_ALL, 1, slots, p->n_slots, TA, row0, n, h,
                                     gain, b->eps, y, y_lo, s));
        return 0;
    }
    CU(ar_reduce_scatter_rmsnorm(b->ar, AR_PHASE_PARTIAL, 1, slots, p->n_slots, TA, row0, n, h,
                                 gain, b->eps, y, y_lo, s));
    if (barrier_wait(b->tp_lock))
        return err_set("rank %d: the reduce-scatter's partners failed (lockstep)", b->tp_rank);
    CU(ar_reduce_scatter_rmsnorm(b->ar, AR_PHASE_REDUCE, 1, slots, p->n_slots, TA, row0, n, h, gain,
                                 b->eps, y, y_lo, s));
    return 0;
}
