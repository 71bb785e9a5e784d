/* A kernel timeline of any CUDA program, for the decode step's "bubble" (issue 13): the time a step
 * takes minus the time some kernel of it runs.
 *
 * ncu times each kernel alone, with its own launch and ramp, so the sum of its kernel times exceeds
 * a graph-replayed step (bench/results/kernels-decode-*.md: a bubble of -9 %). CUPTI's activity
 * records instead carry the start and end of every kernel as it really ran, inside the graph, next
 * to its neighbours. This file is a CUDA injection library: the driver loads it into an unmodified
 * program when CUDA_INJECTION64_PATH names it, and calls InitializeInjection before the program's
 * first CUDA call. It enables the concurrent-kernel activity and, at exit, writes one CSV line per
 * kernel to $GPTOSS_TRACE_OUT (default kernels-trace.csv):
 *     start_ns,end_ns,correlation,graph,grid,block,name
 * `correlation` is the id of the API call that launched it: every kernel of one cudaGraphLaunch
 * shares it, which is how scripts/device/bubble.py cuts the timeline into steps.
 *
 * Usage on the GPU machine: CUDA_INJECTION64_PATH=$PWD/.devcarry/lib/libgptoss_trace.so
 * GPTOSS_TRACE_OUT=t.csv gptoss bench latency ...; python3 scripts/device/bubble.py t.csv. */
#include <cupti.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { BUFFER_BYTES = 8 << 20 };

static FILE *g_out;
static unsigned long long g_kernels, g_dropped;

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = aligned_alloc(8, BUFFER_BYTES); /* activity records need 8-byte alignment */
    *size = *buffer ? BUFFER_BYTES : 0;
    *max_records = 0; /* as many as fit */
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer,
                                      size_t size, size_t valid) {
    (void)ctx, (void)stream_id, (void)size;
    CUpti_Activity *rec = NULL;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
            rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
            continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
        if (g_out)
            fprintf(g_out, "%llu,%llu,%u,%u,%d,%d,%s\n", (unsigned long long)k->start,
                    (unsigned long long)k->end, k->correlationId, k->graphId,
                    k->gridX * k->gridY * k->gridZ, k->blockX * k->blockY * k->blockZ,
                    k->name ? k->name : "?");
        g_kernels++;
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped) == CUPTI_SUCCESS)
        g_dropped += dropped;
    free(buffer);
}

static void finish(void) {
    cuptiActivityFlushAll(1);
    if (g_out) {
        fclose(g_out);
        g_out = NULL;
    }
    fprintf(stderr, "cupti_trace: %llu kernels written, %llu records dropped\n", g_kernels,
            g_dropped);
}

int InitializeInjection(void);
int InitializeInjection(void) {
    const char *path = getenv("GPTOSS_TRACE_OUT");
    if (!path || !*path) path = "kernels-trace.csv";
    g_out = fopen(path, "w");
    if (!g_out) {
        fprintf(stderr, "cupti_trace: cannot write %s\n", path);
        return 0;
    }
    fprintf(g_out, "start_ns,end_ns,correlation,graph,grid,block,name\n");
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        fprintf(stderr, "cupti_trace: CUPTI refused the kernel activity\n");
        fclose(g_out);
        g_out = NULL;
        return 0;
    }
    atexit(finish);
    return 1;
}
