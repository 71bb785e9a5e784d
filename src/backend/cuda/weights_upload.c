/* The staging pipeline (weights_upload.h): mapping -> pinned staging -> device. */
#include "backend/cuda/weights_upload.h"

#include "backend/cuda/runner.h"
#include "base/numfmt.h"
#include "base/timeutil.h"

#include <stdio.h>
#include <string.h>

enum { STAGE_BYTES = 64 << 20, PAR_PIECE = 4 << 20 };

int up_init(uploader *u, cudaStream_t stream, size_t total, const char *what) {
    memset(u, 0, sizeof *u);
    u->stream = stream, u->total = total;
    snprintf(u->what, sizeof u->what, "%s", what);
    for (int i = 0; i < 2; i++) {
        CU(cudaHostAlloc((void **)&u->pin[i], STAGE_BYTES, cudaHostAllocDefault));
        CU(cudaEventCreateWithFlags(&u->ev[i], cudaEventDisableTiming));
        CU(cudaEventRecord(u->ev[i], stream)); /* "free" from the start */
    }
    u->t0 = u->last_print = now_seconds();
    return 0;
}

void up_free(uploader *u) {
    for (int i = 0; i < 2; i++) {
        if (u->ev[i]) cudaEventSynchronize(u->ev[i]), cudaEventDestroy(u->ev[i]);
        if (u->pin[i]) cudaFreeHost(u->pin[i]);
    }
    memset(u->pin, 0, sizeof u->pin);
    memset(u->ev, 0, sizeof u->ev);
}

static void up_progress(uploader *u, size_t n, bool final) {
    u->done += n;
    double t = now_seconds();
    if (!final && t - u->last_print < 0.5) return;
    u->last_print = t;
    double el = t - u->t0 > 1e-9 ? t - u->t0 : 1e-9;
    char total[32] = "";
    if (u->total) snprintf(total, sizeof total, " / %.2f", (double)u->total / 1e9);
    fprintf(stderr, "\r%s: loading weights %.2f%s GB (%.2f GB/s)%s", u->what, (double)u->done / 1e9,
            total, (double)u->done / 1e9 / el, final ? "\n" : "");
}

void up_report(uploader *u) {
    up_progress(u, 0, true);
}

/* Waits until staging buffer `cur` may be refilled and returns it. */
static unsigned char *up_buffer(uploader *u) {
    if (cudaEventSynchronize(u->ev[u->cur]) != cudaSuccess) return NULL;
    return u->pin[u->cur];
}

/* Sends staging buffer `cur` (len bytes) to dst and switches buffers. */
static int up_send(uploader *u, void *dst, size_t len) {
    CU(cudaMemcpyAsync(dst, u->pin[u->cur], len, cudaMemcpyHostToDevice, u->stream));
    CU(cudaEventRecord(u->ev[u->cur], u->stream));
    u->cur ^= 1;
    up_progress(u, len, false);
    return 0;
}

static void copy_par(unsigned char *dst, const unsigned char *src, size_t n) {
    if (n < 2 * (size_t)PAR_PIECE) {
        memcpy(dst, src, n);
        return;
    }
    long pieces = (long)((n + PAR_PIECE - 1) / PAR_PIECE);
#pragma omp parallel for schedule(dynamic, 1)
    for (long i = 0; i < pieces; i++) {
        size_t off = (size_t)i * PAR_PIECE,
               len = n - off < (size_t)PAR_PIECE ? n - off : (size_t)PAR_PIECE;
        memcpy(dst + off, src + off, len);
    }
}

int up_bytes(uploader *u, void *dst, const void *src, size_t n) {
    for (size_t off = 0; off < n; off += STAGE_BYTES) {
        size_t len = n - off < (size_t)STAGE_BYTES ? n - off : (size_t)STAGE_BYTES;
        unsigned char *pin = up_buffer(u);
        if (!pin)
            return err_set("cuda backend: staging buffer wait failed: %s",
                           cudaGetErrorString(cudaGetLastError()));
        copy_par(pin, (const unsigned char *)src + off, len);
        if (up_send(u, (unsigned char *)dst + off, len)) return -1;
    }
    return 0;
}

int up_dense(uploader *u, dense_ref src, size_t n, void *dst, int dst_f32) {
    if (!dst_f32 && src.dtype == ST_BF16) return up_bytes(u, dst, src.data, n * 2);
    const size_t es = dst_f32 ? 4 : 2,
                 per = STAGE_BYTES / 4; /* elements per chunk (room for fp32) */
    for (size_t off = 0; off < n; off += per) {
        size_t len = n - off < per ? n - off : per;
        unsigned char *pin = up_buffer(u);
        if (!pin) return err_set("cuda backend: staging buffer wait failed");
        if (dst_f32) {
            dense_read(src, off, len, (float *)pin);
        } else { /* F32 file -> bf16: read as floats into the upper half of the buffer, narrow down
                  */
            float *tmp = (float *)(pin + (size_t)STAGE_BYTES / 2);
            uint16_t *o = (uint16_t *)pin;
            for (size_t p = 0; p < len; p += per / 2) {
                size_t m = len - p < per / 2 ? len - p : per / 2;
                dense_read(src, off + p, m, tmp);
                for (size_t j = 0; j < m; j++) o[p + j] = f32_to_bf16(tmp[j]);
            }
        }
        if (up_send(u, (unsigned char *)dst + off * es, len * es)) return -1;
    }
    return 0;
}

static size_t tensor_bytes(const st_tensor *t) {
    size_t n = st_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    return n;
}

size_t up_checkpoint_bytes(const model_weights *mw) {
    size_t total = 0;
    for (int k = 0; k < TK_COUNT; k++)
        if (mw->global[k]) total += tensor_bytes(mw->global[k]);
    for (int l = 0; l < mw->cfg.n_layers; l++)
        for (int k = 0; k < TK_COUNT; k++)
            if (mw->layers[l].t[k]) total += tensor_bytes(mw->layers[l].t[k]);
    return total;
}
