/* Structured output's constrained rows, sampled on the device (the default;
 * GPTOSS_GPU_MASKS=0 samples them on the host).
 *
 * Why: a constrained row's mask is only known after the step is launched (step/step_masks.h: the
 * engine fills the masks while the forward pass runs). The host path copies each such row's
 * 201,088 logits back (804 KB) and samples it on one core; at 64 constrained sequences that is 51 MB
 * over PCIe and 64 host samplings per step. Here the row stays on the device:
 *   launch  the row's descriptor is recorded and the forward pass's sampling skips it (mode NONE);
 *           after the lm_head chunk that holds its logits, they are copied aside (device to device,
 *           since a later chunk reuses the logits buffer);
 *   wait    once the step is done, the masks (published long before) are packed with the
 *           descriptors into one upload; sampling_mask_launch sets every disallowed logit to -inf
 *           (step_mask_apply's rule) and sampling_launch samples the rows exactly as it samples any
 *           greedy or temperature row, writing slot_last for the next step; one read-back of the
 *           results, then a stream synchronisation.
 * The extra cost at wait is one upload of the masks (25 KB a row), two small launches and one
 * read-back, in place of the rows' host copies and host sampling. Rows with penalties, logit bias
 * or top-k/top-p/min-p filters stay on the host path (sampling.h has no filters). */
#include "backend/cuda/runner_internal.h"
#include "base/xalloc.h"

#include <stdlib.h>
#include <string.h>

int runner_masked_reserve(struct backend *b, int n) {
    runner_masked *m = &b->masked;
    m->n = 0;
    if (n <= 0) return 0;
    if (n > m->cap) {
        int cap = n > 2 * m->cap ? n : 2 * m->cap;
        m->seq = xrealloc(m->seq, (size_t)cap * sizeof *m->seq);
        m->desc = xrealloc(m->desc, (size_t)cap * sizeof *m->desc);
        m->cap = cap;
    }
    if (runner_device_reserve((void **)&m->logits, &m->logits_bytes,
                              (size_t)m->cap * (size_t)b->V * sizeof(float)) ||
        runner_device_reserve((void **)&m->outs_dev, &m->outs_dev_bytes,
                              (size_t)m->cap * sizeof(gpu_row_out)) ||
        runner_pinned_reserve((void **)&m->outs_host, &m->outs_host_bytes,
                              (size_t)m->cap * sizeof(gpu_row_out)))
        return -1;
    return 0;
}

int runner_masked_add(struct backend *b, int seq, const gpu_row *row) {
    runner_masked *m = &b->masked;
    if (m->n >= m->cap) return -1; /* runner_launch reserved one per constrained sequence */
    gpu_row *d = &m->desc[m->n];
    *d = *row;
    d->tok = m->n;   /* the sampling kernels do not read it; the index, for debugging */
    d->prompt_k = 0; /* prompt logprobs are the unmasked row's: the forward pass wrote them */
    d->prompt_target = -1;
    m->seq[m->n] = seq;
    return m->n++;
}

int runner_masked_copy(struct backend *b, int k, int row_in_chunk) {
    const size_t rowb = (size_t)b->V * sizeof(float);
    CU(cudaMemcpyAsync(b->masked.logits + (size_t)k * b->V,
                       b->ws.logits + (size_t)row_in_chunk * b->V, rowb, cudaMemcpyDeviceToDevice,
                       b->stream));
    return 0;
}

static size_t align256(size_t x) {
    return (x + 255) / 256 * 256;
}

int runner_masked_sample(struct backend *b, const step_batch *st) {
    runner_masked *m = &b->masked;
    const int n = m->n;
    if (n == 0) return 0;
    const size_t words = st->masks ? st->masks->words : 0;
    /* One upload: descriptors [n], mask_of_row [n], masks [n][words]. */
    const size_t off_map = align256((size_t)n * sizeof(gpu_row));
    const size_t off_masks = off_map + align256((size_t)n * sizeof(int32_t));
    const size_t total = off_masks + (size_t)n * words * sizeof(uint32_t);
    if (runner_pinned_reserve((void **)&m->up_host, &m->up_host_cap, total) ||
        runner_device_reserve(&m->up_dev, &m->up_dev_cap, total))
        return -1;
    memcpy(m->up_host, m->desc, (size_t)n * sizeof(gpu_row));
    int32_t *map = (int32_t *)(m->up_host + off_map);
    uint32_t *masks = (uint32_t *)(m->up_host + off_masks);
    int n_masks = 0;
    for (int k = 0; k < n; k++) {
        /* NULL: the sequence left its constrained part, or stopped, after the launch: no mask. */
        const uint32_t *mk = words ? step_masks_row(st->masks, m->seq[k]) : NULL;
        bool any = false;
        for (size_t w = 0; mk && w < words && !any; w++) any = mk[w] != 0;
        map[k] = any ? n_masks : -1; /* a mask that allows nothing is not applied (step_masks.h) */
        if (any) memcpy(masks + (size_t)n_masks++ * words, mk, words * sizeof *mk);
    }
    unsigned char *dev = m->up_dev;
    const size_t bytes = off_masks + (size_t)n_masks * words * sizeof(uint32_t);
    CU(cudaMemcpyAsync(dev, m->up_host, bytes, cudaMemcpyHostToDevice, b->stream));
    CU(sampling_mask_launch(m->logits, b->V, n, (const int32_t *)(dev + off_map),
                            (const uint32_t *)(dev + off_masks), (int)words, b->stream));
    /* The greedy fast path's workspace holds R_cap rows: launch in chunks of that many. */
    for (int k0 = 0; k0 < n; k0 += b->ws.R_cap) {
        const int nk = n - k0 < b->ws.R_cap ? n - k0 : b->ws.R_cap;
        CU(sampling_launch(m->logits + (size_t)k0 * b->V, b->V, (const gpu_row *)dev + k0, nk,
                           m->outs_dev + k0, b->slot_last, b->max_slots, b->ws.samp_ws, b->ws.R_cap,
                           b->stream));
    }
    CU(cudaMemcpyAsync(m->outs_host, m->outs_dev, (size_t)n * sizeof(gpu_row_out),
                       cudaMemcpyDeviceToHost, b->stream));
    cudaError_t e = cudaStreamSynchronize(b->stream);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess)
        return err_set("cuda backend: sampling the constrained rows failed on the device: %s",
                       cudaGetErrorString(e));
    m->rows_total += n;
    return 0;
}

void runner_masked_free(struct backend *b) {
    runner_masked *m = &b->masked;
    free(m->seq), free(m->desc);
    cudaFree(m->logits), cudaFree(m->outs_dev), cudaFree(m->up_dev);
    if (m->outs_host) cudaFreeHost(m->outs_host);
    if (m->up_host) cudaFreeHost(m->up_host);
    const long total = m->rows_total;
    memset(m, 0, sizeof *m);
    m->rows_total = total;
}
