/* One step on the GPU: check, pack, upload, enqueue the forward pass, read back; then collect.
 *
 * launch (runner_launch), all on one stream, nothing waits:
 *   1. checks the step against the contract (an engine bug must not become a stray memory access);
 *   2. decides the logits rows: for each sequence every new token when it asks for prompt logprobs,
 *      else its last token when it samples; and for each row how it is sampled (sampling.h's modes:
 *      greedy and plain temperature on the GPU; top-k/top-p/min-p, penalties, logit bias on the
 *      host from a copy of the row with step_sample_row - correct, just slower, and rare);
 *   3. packs every array the kernels read (tokens, positions, per-pool KV slots from rope_kv_slots,
 *      block tables, prefill work lists, row descriptors, host-sampled tokens to feed back) into
 *      one pinned buffer and uploads it with one copy;
 *   4. runs the forward pass (runner_forward.c), or, for a decode-only step that fits a captured
 *      bucket, replays its CUDA graph (graphs.c);
 *   5. copies the rows' results back (one copy) and records an event.
 * collect (runner_collect) synchronises on the event, samples the host rows, fills the step_result
 * and remembers each slot's token (the device copy was written by the sampling kernel already).
 *
 * The workspace the forward pass runs in is runner_workspace.c. */
#include "backend/cuda/runner_internal.h"
#include "backend/cuda/step_kernels.h"
#include "base/xalloc.h"
#include "step/sample_row.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { UP_ALIGN = 128 };

static size_t align_up(size_t x, size_t a) {
    return (x + a - 1) / a * a;
}

void up_layout_compute(up_layout *L, int n, int T, int full_stride, int swa_stride, int work_full,
                       int work_swa, int rows, int fixups) {
    size_t sz[UP_COUNT];
    sz[UP_TOKEN_IDS] = sz[UP_TOKEN_SLOT] = sz[UP_POSITIONS] = sz[UP_SLOTS_FULL] = sz[UP_SLOTS_SWA] =
        (size_t)T * 4;
    sz[UP_QUERY_START] = (size_t)(n + 1) * 4;
    sz[UP_START_POS] = sz[UP_SWA_FIRST] = (size_t)n * 4;
    sz[UP_FULL_TABLES] = (size_t)n * (size_t)full_stride * 4;
    sz[UP_SWA_TABLES] = (size_t)n * (size_t)swa_stride * 4;
    sz[UP_WORK_FULL] = (size_t)work_full * 8;
    sz[UP_WORK_SWA] = (size_t)work_swa * 8;
    sz[UP_ROWS] = (size_t)rows * sizeof(gpu_row);
    sz[UP_FIXUPS] = (size_t)fixups * 8;
    size_t o = 0;
    for (int k = 0; k < UP_COUNT; k++) {
        L->off[k] = o;
        o += align_up(sz[k] ? sz[k] : 1, UP_ALIGN);
    }
    L->total = o;
}

/* attn_decode_num_splits for the decoding sequences, lowered until the partials of a grid of n_grid
 * sequences (attn_decode_workspace_bytes) fit the workspace's share for them. */
static int decode_splits(const struct backend *b, int n_grid, int n_decode, int max_keys) {
    int s = attn_decode_num_splits(&b->dims, n_decode, max_keys);
    while (s > 1 && attn_decode_workspace_bytes(&b->dims, n_grid, s) > b->ws.dec_ws_bytes) s--;
    return s < 1 ? 1 : s;
}

/* ---- launch ---- */

static bool wants_prompt(const step_batch *st, int i) {
    return st->params[i].prompt_logprobs > 0 && st->start_pos[i] < st->prompt_len[i];
}

/* Where a sampled row is sampled (sampling_params.h's pipeline decides what the GPU can do alone).
 */
static int row_mode_for(const sampling_params *p, int V, bool gpu_masks) {
    const float rep = p->repetition_penalty, fr = p->frequency_penalty, pr = p->presence_penalty;
    const bool penalised = (p->n_logit_bias > 0 && p->logit_bias) ||
                           (isfinite(rep) && rep > 0 && rep != 1.0f) || (isfinite(fr) && fr != 0) ||
                           (isfinite(pr) && pr != 0);
    const bool filtered = (p->top_k > 0 && p->top_k < V) || p->top_p < 1.0f || p->min_p > 0;
    /* Constrained rows (structured output) take their token mask on the host (step_masks.h), or
     * by default on the device at wait (runner_masked.c). */
    if (penalised || (p->constrained && !gpu_masks) || p->logprobs > GPU_TOPK_MAX)
        return GPU_ROW_HOST;
    if (!(p->temperature > 0)) return GPU_ROW_GREEDY; /* filters do not apply to greedy */
    return filtered ? GPU_ROW_HOST : GPU_ROW_TEMP;
}

/* The contract of step/batch.h, checked before anything reaches the device. */
static int validate(const struct backend *b, const step_batch *st) {
    const int n = st->n_seqs, T = st->n_tokens, bs = b->block_size;
    /* DEP: a rank's part may be empty (the rank still joins the step's MoE; dp_backend.c) */
    if (n < 0 || T < 0 || ((n < 1 || T < 1) && b->dp_size < 2))
        return err_set("cuda backend: empty step (%d sequences, %d tokens)", n, T);
    if (st->block_size != bs)
        return err_set("cuda backend: step block size %d, the KV pools use %d", st->block_size, bs);
    if (st->query_start[0] != 0 || st->query_start[n] != T)
        return err_set("cuda backend: query_start spans [%d, %d), the step has %d tokens",
                       st->query_start[0], st->query_start[n], T);
    if (st->full_stride < 1 || st->swa_stride < 1)
        return err_set("cuda backend: block table stride < 1");
    for (int i = 0; i < n; i++) {
        const int q0 = st->query_start[i], nn = st->query_start[i + 1] - q0, sp = st->start_pos[i];
        if (nn < 1) return err_set("cuda backend: sequence %d has no new token", i);
        if (st->slot[i] < 0 || st->slot[i] >= b->max_slots)
            return err_set("cuda backend: slot %d out of range [0, %d)", st->slot[i], b->max_slots);
        if (sp < 0 || (int64_t)sp + nn > b->cfg.max_position)
            return err_set("cuda backend: sequence %d: positions [%d, %d) outside the model's %d",
                           i, sp, sp + nn, b->cfg.max_position);
        if (st->params[i].prompt_logprobs > GPU_TOPK_MAX && wants_prompt(st, i))
            return err_set("cuda backend: prompt_logprobs %d > %d", st->params[i].prompt_logprobs,
                           GPU_TOPK_MAX);
        for (int j = 0; j < nn; j++) {
            const int32_t tok = st->token_ids[q0 + j];
            if (st->positions[q0 + j] != sp + j)
                return err_set("cuda backend: sequence %d token %d: position %d, expected %d", i, j,
                               st->positions[q0 + j], sp + j);
            if (tok != STEP_TOKEN_FROM_DEVICE && (tok < 0 || tok >= b->V))
                return err_set("token id %d at index %d is outside the vocabulary [0, %d)", tok,
                               q0 + j, b->V);
        }
        /* Every block the kernels read: the full table up to the last new position; the sliding
         * table from the first new token's window start. */
        const int last_lb = (sp + nn - 1) / bs;
        if (b->n_full_layers) {
            if (last_lb >= st->full_stride)
                return err_set("cuda backend: sequence %d: full table too short", i);
            for (int j = 0; j <= last_lb; j++) {
                const int32_t blk = st->full_tables[(size_t)i * st->full_stride + j];
                if (blk < 0 || blk >= b->num_full)
                    return err_set(
                        "cuda backend: sequence %d: full block %d of logical %d out of range", i,
                        blk, j);
            }
        }
        if (b->n_swa_layers) {
            const int lo = (sp - b->W + 1 > 0 ? sp - b->W + 1 : 0) / bs, first = st->swa_first[i];
            if (lo < first || last_lb - first >= st->swa_stride)
                return err_set(
                    "cuda backend: sequence %d: sliding table [%d, %d) misses blocks [%d, %d]", i,
                    first, first + st->swa_stride, lo, last_lb);
            for (int j = lo; j <= last_lb; j++) {
                const int32_t blk = st->swa_tables[(size_t)i * st->swa_stride + (j - first)];
                if (blk < 0 || blk >= b->num_swa)
                    return err_set(
                        "cuda backend: sequence %d: sliding block %d of logical %d out of range", i,
                        blk, j);
            }
        }
    }
    return 0;
}

static void book_reserve(step_book *k, int rows, int seqs) {
    if (rows > k->cap_rows) {
        int cap = rows > 2 * k->cap_rows ? rows : 2 * k->cap_rows;
        k->row_mode = xrealloc(k->row_mode, (size_t)cap * sizeof *k->row_mode);
        k->row_host = xrealloc(k->row_host, (size_t)cap * sizeof *k->row_host);
        k->row_masked = xrealloc(k->row_masked, (size_t)cap * sizeof *k->row_masked);
        k->cap_rows = cap;
    }
    if (seqs > k->cap_seqs) {
        int cap = seqs > 2 * k->cap_seqs ? seqs : 2 * k->cap_seqs;
        k->seq_row0 = xrealloc(k->seq_row0, (size_t)cap * sizeof *k->seq_row0);
        k->seq_nrows = xrealloc(k->seq_nrows, (size_t)cap * sizeof *k->seq_nrows);
        k->cap_seqs = cap;
    }
}

int runner_pinned_reserve(void **p, size_t *cap, size_t need) {
    if (need <= *cap && *p) return 0;
    size_t n = need > 2 * *cap ? need : 2 * *cap;
    if (*p) cudaFreeHost(*p);
    *p = NULL, *cap = 0;
    CU(cudaHostAlloc(p, n ? n : 64, cudaHostAllocDefault));
    *cap = n;
    return 0;
}

int runner_device_reserve(void **p, size_t *cap, size_t need) {
    if (need <= *cap && *p) return 0;
    size_t n = need > 2 * *cap ? need : 2 * *cap;
    if (*p) cudaFree(*p);
    *p = NULL, *cap = 0;
    CU(cudaMalloc(p, n ? n : 256));
    *cap = n;
    return 0;
}

/* Fills one row descriptor for token t of sequence i; returns its mode (RUNNER_ROW_MASKED for a
 * constrained row sampled at wait: its descriptor here is NONE). */
static int fill_row(struct backend *b, const step_batch *st, int i, int t, gpu_row *row,
                    int32_t *host_idx, int32_t *masked_idx) {
    const sampling_params *p = &st->params[i];
    memset(row, 0, sizeof *row);
    row->tok = t;
    row->mode = GPU_ROW_NONE;
    row->slot = -1;
    row->prompt_k = wants_prompt(st, i) ? p->prompt_logprobs : 0;
    /* The prompt token this row predicts: the step's next token, or the next chunk's first. */
    row->prompt_target = t + 1 < st->query_start[i + 1] ? st->token_ids[t + 1]
                         : st->prompt_next              ? st->prompt_next[i]
                                                        : -1;
    *host_idx = -1;
    *masked_idx = -1;
    if (st->sample[i] && t == st->query_start[i + 1] - 1) {
        row->mode = row_mode_for(p, b->V, b->gpu_masks);
        row->temperature = p->temperature;
        row->lp_k = p->logprobs < GPU_TOPK_MAX ? (p->logprobs > 0 ? p->logprobs : 0) : GPU_TOPK_MAX;
        row->slot = st->slot[i];
        row->seed = p->seed;
        row->output_pos = (uint64_t)(int64_t)st->output_len[i];
        if (row->mode == GPU_ROW_HOST) {
            *host_idx = b->book.n_host++;
        } else if (p->constrained && row->mode != GPU_ROW_NONE) {
            /* sampled at wait, with its mask (runner_masked.c); the prompt logprobs stay here */
            *masked_idx = runner_masked_add(b, i, row);
            if (*masked_idx >= 0) {
                row->mode = GPU_ROW_NONE, row->slot = -1, row->lp_k = 0;
                return RUNNER_ROW_MASKED;
            }
            row->mode = GPU_ROW_HOST; /* no room reserved: cannot happen; the host path is right */
            *host_idx = b->book.n_host++;
        }
    }
    return row->mode;
}

#define AT(type, L, k) ((type *)(b->up_host + (L).off[k]))

int runner_launch(struct backend *b, const step_batch *st) {
    return runner_launch_prepare(b, st) || runner_launch_enqueue(b) ? -1 : 0;
}

int runner_launch_prepare(struct backend *b, const step_batch *st) {
    b->pending.st = NULL;
    if (validate(b, st)) return -1;
    const int n = st->n_seqs, T = st->n_tokens, bs = b->block_size;
    graph_cache *gc = &b->graphs;
    step_book *bk = &b->book;

    bool decode_only = true;
    for (int i = 0; i < n && decode_only; i++)
        decode_only = st->query_start[i + 1] - st->query_start[i] == 1;
    int bucket_i = -1, cls = 0;
    const bool graph =
        decode_only && graphs_pick(b, n, st->full_stride, st->swa_stride, &bucket_i, &cls);
    if (decode_only && !graph) gc->eager_decodes++;
    const int np = graph ? gc->bucket[bucket_i] : n, Tp = graph ? np : T; /* padded in graph mode */
    /* DEP: the MoE runs over every rank's rows (runner_forward_dep.c); its buffers and plan are
     * for their sum, and this rank's rows come after the ranks' before it */
    int T_moe = Tp, row0 = 0;
    if (b->dp_size > 1) {
        T_moe = 0;
        for (int r = 0; r < b->dp_size; r++) {
            if (r < b->tp_rank) row0 += b->dp_rows[r];
            T_moe += b->dp_rows[r];
        }
        if (b->dp_rows[b->tp_rank] != T || T_moe < 1)
            return err_set("cuda backend: DEP rank %d: a part of %d tokens, %d expected of %d",
                           b->tp_rank, T, b->dp_rows[b->tp_rank], T_moe);
    }
    if (workspace_ensure(b, T_moe)) return -1;

    /* Rows. Graphs: one per (padded) sequence, in order; eager: only the needed ones, compacted. */
    int n_rows = 0;
    for (int i = 0; i < n; i++) {
        const int nn = st->query_start[i + 1] - st->query_start[i];
        n_rows += wants_prompt(st, i) ? nn : st->sample[i] ? 1 : 0;
    }
    const int rows_dev = graph ? np : n_rows;
    book_reserve(bk, rows_dev > 0 ? rows_dev : 1, n);
    bk->n_rows = rows_dev, bk->n_host = 0, bk->graph = graph;
    bk->n_out_rows = graph ? n : n_rows;

    int n_work = 0; /* prefill tiles: the same count in both pools (only their order differs) */
    for (int i = 0; i < n; i++) {
        const int nn = st->query_start[i + 1] - st->query_start[i];
        if (nn >= 2) n_work += (nn + ATTN_PREFILL_TOKENS - 1) / ATTN_PREFILL_TOKENS;
    }
    const int fs = graph ? gc->full_class[cls] : st->full_stride,
              ss = graph ? gc->swa_stride : st->swa_stride;
    up_layout L;
    up_layout_compute(&L, np, Tp, fs, ss, n_work, n_work, rows_dev, b->n_fix);
    if (runner_pinned_reserve((void **)&b->up_host, &b->up_host_cap, L.total)) return -1;
    if (graph && L.total > gc->up_bytes)
        return err_set("cuda backend: graph step layout exceeds its buffer");
    if (!graph && runner_device_reserve(&b->up_dev, &b->up_dev_cap, L.total)) return -1;
    unsigned char *dev = graph ? gc->up_dev : b->up_dev;

    /* Tokens. */
    int32_t *tok = AT(int32_t, L, UP_TOKEN_IDS), *tslot = AT(int32_t, L, UP_TOKEN_SLOT);
    int32_t *pos = AT(int32_t, L, UP_POSITIONS), *sfull = AT(int32_t, L, UP_SLOTS_FULL);
    int32_t *sswa = AT(int32_t, L, UP_SLOTS_SWA);
    memcpy(tok, st->token_ids, (size_t)T * 4);
    memcpy(pos, st->positions, (size_t)T * 4);
    for (int i = 0; i < n; i++)
        for (int t = st->query_start[i]; t < st->query_start[i + 1]; t++) tslot[t] = st->slot[i];
    for (int t = T; t < Tp; t++) tok[t] = 0, tslot[t] = -1, pos[t] = 0;
    for (int t = 0; t < Tp; t++) sfull[t] = sswa[t] = -1;
    if (b->n_full_layers && rope_kv_slots(n, st->query_start, st->start_pos, st->full_tables,
                                          st->full_stride, NULL, bs, sfull))
        return err_set("cuda backend: a full block table entry is missing");
    if (b->n_swa_layers && rope_kv_slots(n, st->query_start, st->start_pos, st->swa_tables,
                                         st->swa_stride, st->swa_first, bs, sswa))
        return err_set("cuda backend: a sliding block table entry is missing");

    /* Sequences; padded ones have one token at position 0 reading block 0 (finite: pools start
     * zeroed) and writing nowhere (slot -1). */
    int32_t *qs = AT(int32_t, L, UP_QUERY_START), *sp = AT(int32_t, L, UP_START_POS);
    int32_t *sf = AT(int32_t, L, UP_SWA_FIRST), *ft = AT(int32_t, L, UP_FULL_TABLES);
    int32_t *stb = AT(int32_t, L, UP_SWA_TABLES);
    memcpy(qs, st->query_start, (size_t)(n + 1) * 4);
    memcpy(sp, st->start_pos, (size_t)n * 4);
    memcpy(sf, st->swa_first, (size_t)n * 4);
    for (int i = n; i < np; i++) qs[i + 1] = qs[i] + 1, sp[i] = 0, sf[i] = 0;
    memset(ft, 0, (size_t)np * fs * 4);
    memset(stb, 0, (size_t)np * ss * 4);
    for (int i = 0; i < n; i++) {
        const int cf = st->full_stride < fs ? st->full_stride : fs,
                  cs = st->swa_stride < ss ? st->swa_stride : ss;
        memcpy(ft + (size_t)i * fs, st->full_tables + (size_t)i * st->full_stride, (size_t)cf * 4);
        memcpy(stb + (size_t)i * ss, st->swa_tables + (size_t)i * st->swa_stride, (size_t)cs * 4);
    }

    /* Prefill work lists (eager steps only have n_work > 0). */
    if (n_work > 0) {
        if (attn_prefill_plan(n, st->query_start, st->start_pos, 0, 2, AT(int32_t, L, UP_WORK_FULL),
                              n_work) != n_work ||
            attn_prefill_plan(n, st->query_start, st->start_pos, b->W, 2,
                              AT(int32_t, L, UP_WORK_SWA), n_work) != n_work)
            return err_set("cuda backend: prefill work list of unexpected size");
    }

    /* Rows. */
    int n_constrained = 0;
    for (int i = 0; i < n && b->gpu_masks; i++)
        n_constrained += st->sample[i] && st->params[i].constrained;
    if (runner_masked_reserve(b, n_constrained)) return -1;
    gpu_row *rows = AT(gpu_row, L, UP_ROWS);
    int r = 0;
    for (int i = 0; i < n; i++) {
        const int q0 = st->query_start[i], q1 = st->query_start[i + 1];
        const int t0 = wants_prompt(st, i) ? q0 : st->sample[i] ? q1 - 1 : q1;
        if (graph) { /* row i is token i; a sequence that needs nothing keeps an idle row */
            bk->seq_row0[i] = i, bk->seq_nrows[i] = t0 < q1;
            if (t0 < q1) {
                bk->row_mode[i] =
                    fill_row(b, st, i, t0, &rows[i], &bk->row_host[i], &bk->row_masked[i]);
            } else {
                memset(&rows[i], 0, sizeof rows[i]);
                rows[i].tok = i, rows[i].slot = -1, bk->row_mode[i] = GPU_ROW_NONE,
                bk->row_host[i] = -1, bk->row_masked[i] = -1;
            }
            continue;
        }
        bk->seq_row0[i] = r, bk->seq_nrows[i] = q1 - t0;
        for (int t = t0; t < q1; t++, r++)
            bk->row_mode[r] = fill_row(b, st, i, t, &rows[r], &bk->row_host[r], &bk->row_masked[r]);
    }
    for (int k = graph ? n : r; k < rows_dev; k++) { /* graph padding */
        memset(&rows[k], 0, sizeof rows[k]);
        rows[k].tok = k, rows[k].slot = -1, bk->row_mode[k] = GPU_ROW_NONE, bk->row_host[k] = -1,
        bk->row_masked[k] = -1;
    }

    /* Tokens sampled on the host last step, for the device's slot_last. */
    const int n_fix = b->n_fix;
    if (n_fix) memcpy(AT(int32_t, L, UP_FIXUPS), b->fix, (size_t)n_fix * 8);
    b->n_fix = 0;

    /* Host-side result buffers. */
    if (runner_pinned_reserve((void **)&b->outs_host, &b->outs_host_bytes,
                              (size_t)(rows_dev > 0 ? rows_dev : 1) * sizeof(gpu_row_out)))
        return -1;
    if (bk->n_host && runner_pinned_reserve((void **)&b->hl_host, &b->hl_host_bytes,
                                            (size_t)bk->n_host * b->V * sizeof(float)))
        return -1;

    /* The plan. */
    fwd_plan p;
    memset(&p, 0, sizeof p);
    p.T = Tp, p.n_seqs = np, p.n_rows = rows_dev;
    p.full_stride = fs, p.swa_stride = ss;
    p.n_work_full = p.n_work_swa = n_work;
    int n_dec = 0, max_ctx = 1;
    for (int i = 0; i < n; i++)
        if (st->query_start[i + 1] - st->query_start[i] == 1) {
            n_dec++;
            if (st->start_pos[i] + 1 > max_ctx) max_ctx = st->start_pos[i] + 1;
        }
    p.has_decode = n_dec > 0 || graph;
    if (graph) { /* a graph's split counts hold for the largest context its table class can hold */
        p.splits_full = decode_splits(b, np, np, fs * bs);
        p.splits_swa = decode_splits(b, np, np, b->W);
    } else if (p.has_decode) {
        p.splits_full = decode_splits(b, np, n_dec, max_ctx);
        p.splits_swa = decode_splits(b, np, n_dec, max_ctx < b->W ? max_ctx : b->W);
    } else {
        p.splits_full = p.splits_swa = 1;
    }
    p.moe = runner_moe_plan(b, T_moe);
    p.n_slots = runner_moe_slots(b, &p.moe);
    if (b->dp_size > 1) {
        p.dep_T_all = T_moe, p.dep_row0 = row0;
        memcpy(p.dep_rows, b->dp_rows, sizeof p.dep_rows);
    }
    p.token_ids = (const int32_t *)(dev + L.off[UP_TOKEN_IDS]);
    p.token_slot = (const int32_t *)(dev + L.off[UP_TOKEN_SLOT]);
    p.positions = (const int32_t *)(dev + L.off[UP_POSITIONS]);
    p.slots_full = (const int32_t *)(dev + L.off[UP_SLOTS_FULL]);
    p.slots_swa = (const int32_t *)(dev + L.off[UP_SLOTS_SWA]);
    p.query_start = (const int32_t *)(dev + L.off[UP_QUERY_START]);
    p.start_pos = (const int32_t *)(dev + L.off[UP_START_POS]);
    p.swa_first = (const int32_t *)(dev + L.off[UP_SWA_FIRST]);
    p.full_tables = (const int32_t *)(dev + L.off[UP_FULL_TABLES]);
    p.swa_tables = (const int32_t *)(dev + L.off[UP_SWA_TABLES]);
    p.work_full = (const int32_t *)(dev + L.off[UP_WORK_FULL]);
    p.work_swa = (const int32_t *)(dev + L.off[UP_WORK_SWA]);
    p.rows = (const gpu_row *)(dev + L.off[UP_ROWS]);

    b->pending.st = st, b->pending.p = p, b->pending.up_bytes = L.total, b->pending.dev = dev;
    b->pending.graph = graph, b->pending.bucket_i = bucket_i, b->pending.cls = cls;
    b->pending.n_fix = n_fix, b->pending.fixups = (const int32_t *)(dev + L.off[UP_FIXUPS]);
    return 0;
}

int runner_launch_enqueue(struct backend *b) {
    const step_batch *st = b->pending.st;
    if (!st) return err_set("cuda backend: a launch enqueued without its preparation");
    b->pending.st = NULL;
    const fwd_plan *pp = &b->pending.p;
    const bool graph = b->pending.graph;
    const int n = st->n_seqs;
    step_book *bk = &b->book;

    /* Enqueue: one upload, the host-sampled tokens, the forward pass, one read-back. */
    CU(cudaEventRecord(b->t_start, b->stream));
    CU(cudaMemcpyAsync(b->pending.dev, b->up_host, b->pending.up_bytes, cudaMemcpyHostToDevice,
                       b->stream));
    CU(step_apply_fixups(b->pending.fixups, b->pending.n_fix, b->slot_last, b->max_slots,
                         b->stream));
    b->dbg_rows = 0;
    if (graph) {
        if (graphs_run(b, b->pending.bucket_i, b->pending.cls, pp)) return -1;
        /* One chunk: rows 0..np-1 are all in the logits buffer now. */
        const size_t rowb = (size_t)b->V * sizeof(float);
        int k = 0;
        for (int i = 0; i < n; i++) {
            if (!bk->seq_nrows[i]) continue;
            if (bk->row_host[i] >= 0)
                CU(cudaMemcpyAsync(b->hl_host + (size_t)bk->row_host[i] * b->V,
                                   b->ws.logits + (size_t)i * b->V, rowb, cudaMemcpyDeviceToHost,
                                   b->stream));
            if (bk->row_masked[i] >= 0 && runner_masked_copy(b, bk->row_masked[i], i)) return -1;
            if (b->dbg_logits && k < b->dbg_cap)
                CU(cudaMemcpyAsync(b->dbg_logits + (size_t)k * b->V,
                                   b->ws.logits + (size_t)i * b->V, rowb, cudaMemcpyDeviceToHost,
                                   b->stream));
            k++;
        }
        if (b->dbg_logits) b->dbg_rows = k < b->dbg_cap ? k : b->dbg_cap;
    } else if (b->dp_size > 1 ? runner_forward_dep(b, pp) : runner_forward(b, pp, true)) {
        return -1;
    }
    if (bk->n_out_rows > 0)
        CU(cudaMemcpyAsync(b->outs_host, b->ws.outs, (size_t)bk->n_out_rows * sizeof(gpu_row_out),
                           cudaMemcpyDeviceToHost, b->stream));
    CU(cudaEventRecord(b->t_end, b->stream));
    CU(cudaEventRecord(b->done, b->stream));
    b->inflight = st;
    return 0;
}

/* ---- wait ---- */

static void copy_top(const int32_t *ids, const float *lps, int k, int32_t **ids_out,
                     float **lps_out) {
    *ids_out = xmalloc((size_t)(k > 0 ? k : 1) * sizeof **ids_out);
    *lps_out = xmalloc((size_t)(k > 0 ? k : 1) * sizeof **lps_out);
    if (k > 0)
        memcpy(*ids_out, ids, (size_t)k * sizeof **ids_out),
            memcpy(*lps_out, lps, (size_t)k * sizeof **lps_out);
}

void runner_add_fixup(struct backend *b, int32_t slot, int32_t token) {
    if (b->n_fix == b->cap_fix) {
        b->cap_fix = b->cap_fix ? 2 * b->cap_fix : 64;
        b->fix = xrealloc(b->fix, (size_t)b->cap_fix * 2 * sizeof *b->fix);
    }
    b->fix[2 * b->n_fix] = slot, b->fix[2 * b->n_fix + 1] = token;
    b->n_fix++;
}

/* Waits for the step, then fills the result: rows the device sampled are copied out of its output
 * records; rows it could not (penalties, bias) are sampled here from their host copy with
 * step_sample_row, and their token is queued as a fix-up for the slot's device-side last token. */
int runner_collect(struct backend *b, step_result *res) {
    const step_batch *st = b->inflight;
    b->inflight = NULL;
    memset(res, 0, sizeof *res);
    cudaError_t e = cudaEventSynchronize(b->done);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess)
        return err_set("cuda backend: the step failed on the device: %s", cudaGetErrorString(e));
    const step_book *bk = &b->book;
    float ms = 0; /* the step's time on the device, for the engine's step cost model */
    if (cudaEventElapsedTime(&ms, b->t_start, b->t_end) == cudaSuccess && ms > 0)
        res->seconds = ms / 1e3;
    else
        (void)cudaGetLastError(); /* not an error of the step (checked above): do not leave it */
    if (runner_masked_sample(b, st)) return -1;
    res->seqs = xcalloc((size_t)st->n_seqs, sizeof *res->seqs);
    for (int i = 0; i < st->n_seqs; i++) {
        seq_result *out = &res->seqs[i];
        const sampling_params *p = &st->params[i];
        const int r0 = bk->seq_row0[i], nr = bk->seq_nrows[i];
        const int nn = st->query_start[i + 1] - st->query_start[i];
        if (wants_prompt(st, i)) {
            const int k = p->prompt_logprobs;
            out->n_prompt_rows = nn, out->prompt_k = k;
            out->prompt_top_ids = xmalloc((size_t)nn * k * sizeof(int32_t));
            out->prompt_top_logprobs = xmalloc((size_t)nn * k * sizeof(float));
            out->prompt_token_logprobs = xmalloc((size_t)nn * sizeof(float));
            for (int j = 0; j < nn; j++) {
                const gpu_row_out *ro = &b->outs_host[r0 + j];
                const int32_t target = j + 1 < nn        ? st->token_ids[st->query_start[i] + j + 1]
                                       : st->prompt_next ? st->prompt_next[i]
                                                         : -1;
                out->prompt_token_logprobs[j] = target >= 0 ? ro->prompt_target_lp : NAN;
                memcpy(out->prompt_top_ids + (size_t)j * k, ro->prompt_ids,
                       (size_t)k * sizeof(int32_t));
                memcpy(out->prompt_top_logprobs + (size_t)j * k, ro->prompt_lp,
                       (size_t)k * sizeof(float));
            }
        }
        if (!st->sample[i] || nr < 1) continue;
        const int r = r0 + nr - 1;
        if (bk->row_mode[r] == GPU_ROW_HOST) {
            out->token = step_sample_row(st, i, b->hl_host + (size_t)bk->row_host[r] * b->V, b->V,
                                         b->slot_last_host[st->slot[i]], out);
            runner_add_fixup(b, st->slot[i], out->token);
            b->host_rows_total++;
        } else {
            const gpu_row_out *ro = bk->row_mode[r] == RUNNER_ROW_MASKED
                                        ? &b->masked.outs_host[bk->row_masked[r]]
                                        : &b->outs_host[r];
            out->token = ro->token;
            out->logprob = ro->logprob;
            out->n_top = p->logprobs > 0 ? ro->n_top : 0;
            if (out->n_top > 0)
                copy_top(ro->top_ids, ro->top_lp, out->n_top, &out->top_ids, &out->top_logprobs);
        }
        b->slot_last_host[st->slot[i]] = out->token;
        res->n++;
    }
    return 0;
}

int runner_tp_follow(struct backend *peer, const struct backend *lead, const step_batch *st,
                     const step_result *res) {
    peer->inflight = NULL;
    cudaError_t e = cudaEventSynchronize(peer->done);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess)
        return err_set("cuda backend: rank %d: the step failed on the device: %s", peer->tp_grank,
                       cudaGetErrorString(e));
    for (int i = 0; i < st->n_seqs && res->seqs; i++) {
        if (!st->sample[i] || lead->book.seq_nrows[i] < 1) continue;
        const int32_t token = res->seqs[i].token;
        if (runner_lead_sampled(lead, st, i)) runner_add_fixup(peer, st->slot[i], token);
        peer->slot_last_host[st->slot[i]] = token;
    }
    return 0;
}

bool runner_lead_sampled(const struct backend *lead, const step_batch *st, int i) {
    const step_book *bk = &lead->book;
    const int nr = bk->seq_nrows[i];
    if (!st->sample[i] || nr < 1) return false;
    const int mode = bk->row_mode[bk->seq_row0[i] + nr - 1];
    return mode == GPU_ROW_HOST || mode == RUNNER_ROW_MASKED;
}

void runner_free(struct backend *b) {
    step_book *k = &b->book;
    free(k->row_mode), free(k->row_host), free(k->row_masked), free(k->seq_row0),
        free(k->seq_nrows);
    runner_masked_free(b);
    memset(k, 0, sizeof *k);
    if (b->up_host) cudaFreeHost(b->up_host);
    if (b->outs_host) cudaFreeHost(b->outs_host);
    if (b->hl_host) cudaFreeHost(b->hl_host);
    cudaFree(b->up_dev);
    b->up_host = NULL, b->outs_host = NULL, b->hl_host = NULL, b->up_dev = NULL;
    b->up_host_cap = b->outs_host_bytes = b->hl_host_bytes = b->up_dev_cap = 0;
    free(b->fix);
    b->fix = NULL, b->n_fix = b->cap_fix = 0;
}
