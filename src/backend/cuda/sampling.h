/* Sampling on the GPU: one CTA per logits row turns the row into a token, its logprob and top-K
 * logprob lists, with the semantics of step/sampler.h (read that first). Plain greedy rows (no
 * top-K list of either kind) take a faster road, several CTAs per row, to the same token and the
 * same logprob up to rounding (see "The greedy fast path" below). The semantics:
 *
 *   greedy       argmax by the order-preserving key of the float (NaN counts as -inf, -0 == +0),
 *                lowest id on ties; logprob under softmax(logits) (temperature 1).
 *   temperature  w_i = expf((l_i - max) / T) (0 below -104), z = sum of w_i in double, and a draw
 *                u = rng_uniform01d(rng_hash2(seed, output_pos)) - the same counter hash as
 *                base/rng.h - walked over the tokens in increasing id order: the first token whose
 *                running sum exceeds u * z. No filters on this path (top_k / top_p / min_p /
 *                penalties / logit_bias rows are sampled on the host by step_sample_row, see
 *                runner.c).
 *   top-K lists  the K (<= GPU_TOPK_MAX) largest logits, highest first, lowest id on ties, with
 *                log p = (l - max) / T - log z (T = 1 for greedy and for prompt logprobs).
 *   +inf / all -inf rows follow sampler.h's limits (the +inf tokens share everything; all -inf or
 *   NaN is uniform, greedy token 0).
 *
 * How the draw stays in id order on a parallel machine: the row is cut into contiguous spans, one
 * per warp. A warp walks its span in tiles of 32 consecutive ids with an inclusive warp scan in
 * double, so its running sum is a fixed sequence of additions. Thread 0 prefixes the span totals in
 * order. The span where the prefix first exceeds u * z is walked again by its warp with the very
 * same additions, so the crossing is guaranteed inside it. The running sums are not added in the
 * CPU's order (one double at a time), so a draw can differ from sampler.c only when u * z lies
 * within ~1e-16 relative of a boundary between two tokens (and expf may differ from glibc's by an
 * ulp: ~1e-7 relative on the weights).
 *
 * Top-K without a sort: a 2048-bin histogram of the keys' top 11 bits finds the bin that holds the
 * K-th largest key; the (usually few) candidates at or above that bin are gathered into shared
 * memory, and K rounds of a block-wide max over (key, -id) pick them in order. A row whose
 * candidate set overflows shared memory (thousands of equal logits) falls back to K passes over the
 * row.
 *
 * The greedy fast path. A plain greedy row (mode GREEDY, lp_k and prompt_k 0) needs only the argmax
 * and z, since its logprob is scaled(max) - log z = -log z. One CTA of 512 threads over the 201,088
 * logits of gpt-oss took 146 us on an H200 (167 under ncu: one SM reading 804 KB and adding
 * doubles alone; 4.6% of a 3.6 ms batch-1 decode step), now ~7 us. The row is cut into G chunks,
 * one CTA each: a chunk's CTA finds its best (key, id) and the sum of its weights relative to its
 * own maximum m_c; the last CTA of the row to finish (a counter in the workspace) merges the G
 * partials: the best pair, and z = sum over the chunks of z_c * exp(m_c - max) in double. The
 * token is exactly the one above; z differs from the one-CTA sum by rounding only (~1e-7 relative,
 * expf of x - m_c instead of x - max), which moves the float logprob by an ulp or so. G depends on
 * the vocabulary and, under 32 rows, on the number of rows of the launch (sampling.cu's
 * gf_geometry): the token never depends on it, the logprob's last bits may.
 *
 * Plain C header (no CUDA types beyond the runtime API's), shared by the runner and the kernels. */
#ifndef GPTOSS_BACKEND_CUDA_SAMPLING_H
#define GPTOSS_BACKEND_CUDA_SAMPLING_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { GPU_TOPK_MAX = 20 };

/* What a row asks for. */
enum gpu_row_mode {
    GPU_ROW_NONE = 0,   /* no token (prompt logprobs only, or a padded row of a CUDA graph) */
    GPU_ROW_GREEDY = 1, /* argmax */
    GPU_ROW_TEMP = 2,   /* temperature draw, no filters */
    GPU_ROW_HOST = 3    /* sampled on the host from a copy of the row (filters, penalties, bias) */
};

/* One logits row of a step (uploaded with the step; 48 bytes). */
typedef struct {
    int32_t tok;       /* token row of the step whose hidden state gives these logits */
    int32_t mode;      /* enum gpu_row_mode */
    float temperature; /* GPU_ROW_TEMP: > 0 */
    int32_t lp_k;      /* top logprobs of the sampled distribution (GPU modes), 0..GPU_TOPK_MAX */
    int32_t prompt_k;  /* prompt top logprobs (softmax of the raw row), 0..GPU_TOPK_MAX */
    int32_t slot;      /* GPU modes: slot whose last sampled token becomes this one; -1: none */
    int32_t prompt_target; /* prompt_k > 0: the prompt token this row predicts (its own logprob
                              is written to prompt_target_lp, echo scoring); -1: none */
    int32_t pad1;
    uint64_t seed;       /* GPU_ROW_TEMP: the request's seed */
    uint64_t output_pos; /* GPU_ROW_TEMP: index of the token among the outputs */
} gpu_row;

/* What a row produced (read back with one copy per step). Fields a row did not ask for are left
 * unwritten. */
typedef struct {
    int32_t token;
    float logprob;
    int32_t n_top, n_prompt;
    int32_t top_ids[GPU_TOPK_MAX];
    float top_lp[GPU_TOPK_MAX];
    int32_t prompt_ids[GPU_TOPK_MAX];
    float prompt_lp[GPU_TOPK_MAX];
    float prompt_target_lp; /* prompt_k > 0 and prompt_target >= 0: its logprob (softmax at T 1) */
    int32_t pad;
} gpu_row_out;

/* Bytes of device scratch the greedy fast path needs for launches of up to max_rows rows (per-row
 * counters and per-chunk partials). Allocate it once and zero it once (cudaMemset): every launch
 * leaves the counters at zero again (the last CTA of a row resets its own), so launches and graph
 * replays need no host work. One launch at a time may use it (launches on one stream are fine). */
size_t sampling_workspace_bytes(int max_rows);

/* Rows [0, n_rows) of logits [n_rows][vocab] fp32 with descriptors rows[0..n_rows) ->
 * outs[0..n_rows). Writes slot_last[rows[r].slot] = token for rows sampled here (slot in [0,
 * max_slots)). workspace: sampling_workspace_bytes(workspace_rows) bytes as above, with
 * workspace_rows >= n_rows; NULL runs the greedy fast path with one CTA per row (correct, much
 * slower at small batch). Asynchronous on stream, graph-capturable (two kernels). */
cudaError_t sampling_launch(const float *logits, int vocab, const gpu_row *rows, int n_rows,
                            gpu_row_out *outs, int32_t *slot_last, int max_slots, void *workspace,
                            int workspace_rows, cudaStream_t stream);

/* Structured output: masks the logits of constrained rows in place, as step_mask_apply does on the
 * host (step/step_masks.h): row r of logits [n_rows][vocab] with mask_of_row[r] >= 0 takes the mask
 * masks + mask_of_row[r] * words (bit t of word t / 32 set = token t allowed) and every token it does
 * not allow becomes -inf, tokens at or past words * 32 included; rows with -1 are left alone. The
 * host never sends a mask that allows nothing (step_mask_apply leaves such a row unmasked, and so
 * must the caller: -1). Then sampling_launch samples the rows as usual. Asynchronous on stream. */
cudaError_t sampling_mask_launch(float *logits, int vocab, int n_rows, const int32_t *mask_of_row,
                                 const uint32_t *masks, int words, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
