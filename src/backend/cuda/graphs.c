/* CUDA graphs for decode steps.
 *
 * A decode step of 120b launches ~450 kernels; at small batch their launch gaps alone would cost
 * about as much as the math. A captured graph replays them with the launch work done once. A graph
 * bakes in every kernel argument - sizes, pointers, strides - so the step is made to look the same
 * each time:
 *   - the batch is padded to a bucket (1, 2, 4, ..., max): padded sequences have one token at
 * position 0 whose KV slot is -1 (rope_kv skips the write), read block 0 (any finite data) and ask
 * for no token (GPU_ROW_NONE), so they cost a little work and change nothing;
 *   - the step's arrays live at fixed offsets of a fixed device buffer (up_layout for the bucket);
 *   - block tables get a fixed stride: the full table's stride is rounded up to a class (32, 64,
 * ... blocks, up to max_model_len), the sliding one is window / block_size + 3 for every graph. One
 *     graph per (bucket, class), captured lazily the first time such a step comes: that step runs
 *     eagerly with the very same arguments, then the same calls are captured (capture does not run
 *     them), so warm-up, cuBLASLt's algorithm cache and the kernels' one-time attribute calls have
 * all happened before capture;
 *   - decode split counts and the MoE plan are functions of the bucket and class alone.
 * Anything else (prefill chunks, mixed steps, wider tables, a failed capture) runs eagerly. The
 * workspace growing (a step longer than any before) drops every graph; they are captured again. */
#include "backend/cuda/runner.h"
#include "base/log.h"

#include <stdlib.h>
#include <string.h>

int graphs_init(struct backend *b, int max_size) {
    graph_cache *g = &b->graphs;
    memset(g, 0, sizeof *g);
    if (max_size <= 0) return 0;
    if (max_size > b->max_slots) max_size = b->max_slots;
    for (int s = 1; s < max_size && g->n_buckets < GRAPH_MAX_BUCKETS - 1; s *= 2)
        g->bucket[g->n_buckets++] = s;
    g->bucket[g->n_buckets++] = max_size;
    const int bs = b->block_size;
    if (b->n_full_layers) {
        const int G = (b->max_model_len + bs - 1) / bs;
        int c = 1024 / bs > 1 ? 1024 / bs : 1;
        while (c < G && g->n_classes < GRAPH_MAX_CLASSES - 1)
            g->full_class[g->n_classes++] = c, c *= 2;
        g->full_class[g->n_classes++] = G; /* every stride a sequence of max_model_len needs */
    } else {
        g->full_class[g->n_classes++] = 1;
    }
    g->swa_stride = b->n_swa_layers ? (b->W + bs - 1) / bs + 3 : 1;
    up_layout L;
    up_layout_compute(&L, max_size, max_size, g->full_class[g->n_classes - 1], g->swa_stride, 0, 0,
                      max_size, b->max_slots);
    g->up_bytes = L.total;
    CU(cudaMalloc(&g->up_dev, g->up_bytes));
    g->max_size = max_size;
    return 0;
}

void graphs_invalidate(struct backend *b) {
    graph_cache *g = &b->graphs;
    for (int i = 0; i < GRAPH_MAX_BUCKETS; i++)
        for (int c = 0; c < GRAPH_MAX_CLASSES; c++) {
            graph_slot *s = &g->slot[i][c];
            if (s->state == 1) cudaGraphExecDestroy(s->exec);
            s->exec = NULL, s->state = 0;
        }
}

void graphs_free(struct backend *b) {
    graphs_invalidate(b);
    cudaFree(b->graphs.up_dev);
    b->graphs.up_dev = NULL;
    b->graphs.max_size = 0;
}

bool graphs_pick(const struct backend *b, int n, int full_stride, int swa_stride, int *bucket,
                 int *cls) {
    const graph_cache *g = &b->graphs;
    if (g->max_size <= 0 || n > g->max_size) return false;
    if (b->n_swa_layers && swa_stride > g->swa_stride) return false;
    int bi = 0;
    while (bi < g->n_buckets && g->bucket[bi] < n) bi++;
    if (bi == g->n_buckets) return false;
    int c = 0;
    if (b->n_full_layers) {
        while (c < g->n_classes && g->full_class[c] < full_stride) c++;
        if (c == g->n_classes) return false;
    }
    if (g->slot[bi][c].state < 0) return false;
    *bucket = bi, *cls = c;
    return true;
}

int graphs_run(struct backend *b, int bucket_index, int cls, const fwd_plan *p) {
    graph_cache *g = &b->graphs;
    graph_slot *s = &g->slot[bucket_index][cls];
    if (s->state == 1) {
        CU(cudaGraphLaunch(s->exec, b->stream));
        g->replays++;
        return 0;
    }
    /* First use: the real step runs eagerly, then the same calls are recorded for next time. */
    if (runner_forward(b, p, false)) return -1;
    cudaError_t e = cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeRelaxed);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        s->state = -1;
        log_warn("cuda backend: cannot capture a graph (batch %d): %s; such steps run eagerly",
                 g->bucket[bucket_index], cudaGetErrorString(e));
        return 0;
    }
    int rc = runner_forward(b, p, false);
    cudaGraph_t graph = NULL;
    e = cudaStreamEndCapture(b->stream, &graph);
    if (rc != 0 || e != cudaSuccess || !graph) {
        log_warn("cuda backend: graph capture for batch %d failed (%s); such steps run eagerly",
                 g->bucket[bucket_index], rc != 0 ? err_msg() : cudaGetErrorString(e));
        if (graph) cudaGraphDestroy(graph);
        (void)cudaGetLastError();
        err_clear();
        s->state = -1;
        return 0;
    }
    e = cudaGraphInstantiate(&s->exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        log_warn(
            "cuda backend: graph instantiation for batch %d failed: %s; such steps run eagerly",
            g->bucket[bucket_index], cudaGetErrorString(e));
        (void)cudaGetLastError();
        s->exec = NULL;
        s->state = -1;
        return 0;
    }
    s->state = 1;
    g->captures++;
    return 0;
}
