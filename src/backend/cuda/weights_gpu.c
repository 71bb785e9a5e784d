/* Weights on the GPU: allocation, upload from a checkpoint, and synthetic weights made in place.
 *
 * Upload. weights_load() maps the safetensors files and checks every tensor; the bytes then travel
 * mapping -> pinned staging buffer -> device (weights_upload.h's pipeline). Dense tensors arrive
 * bf16 (F32 checkpoints are narrowed on the host, the sinks widened to fp32); MXFP4 experts go to a
 * device scratch a group of experts at a time and moe_repack_device() writes them in the kernels'
 * layout - 4.25 bits per weight before and after. A tensor-parallel rank's share: weights_shard.c.
 *
 * Synthetic. `--model synthetic:20b` generates the tensors with synth.cu's hash kernels, in the
 * same order and with the same keys as model/synthetic.c, so the bytes equal a `make-model`
 * checkpoint of the same config and seed. */
#include "backend/cuda/runner.h"
#include "backend/cuda/synth.h"
#include "backend/cuda/weights_upload.h"
#include "base/log.h"
#include "base/timeutil.h"
#include "base/xalloc.h"
#include "model/synthetic.h"
#include "model/tensors.h"
#include "model/weights.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { EXPERT_SCRATCH_BYTES = 256 << 20 };

/* ---- allocation ---- */

static int dalloc(void **p, size_t bytes, size_t *total) {
    *p = NULL;
    CU(cudaMalloc(p, bytes ? bytes : 256));
    *total += bytes;
    return 0;
}
#define DALLOC(ptr, nbytes)                                                                        \
    do {                                                                                           \
        void *dalloc_p_;                                                                           \
        if (dalloc(&dalloc_p_, (nbytes), &w->bytes)) return -1;                                    \
        (ptr) = dalloc_p_;                                                                         \
    } while (0)

int weights_gpu_alloc(struct backend *b) {
    gpu_weights *w = &b->gw;
    /* The router has every expert's row; the experts themselves are this rank's (El: all of them but
     * under expert parallelism, tp_plan.h). */
    const int El = b->tp_share.n_experts;
    const size_t H = (size_t)b->H, V = (size_t)b->V, Q = (size_t)b->Q, QKV = (size_t)b->QKV,
                 E = (size_t)b->E, I = (size_t)b->I;
    w->layers = xcalloc((size_t)b->L, sizeof *w->layers);
    DALLOC(w->embed, V * H * 2);
    DALLOC(w->final_norm, H * 2);
    DALLOC(w->lm_head, (size_t)b->V_lm * H * 2);
    for (int l = 0; l < b->L; l++) {
        gpu_layer *ly = &w->layers[l];
        DALLOC(ly->attn_norm, H * 2);
        DALLOC(ly->qkv_w, QKV * H * 2);
        DALLOC(ly->qkv_b, QKV * 2);
        DALLOC(ly->o_w, H * Q * 2);
        DALLOC(ly->o_b, H * 2);
        DALLOC(ly->sinks, (size_t)b->dims.n_heads * 4);
        DALLOC(ly->mlp_norm, H * 2);
        DALLOC(ly->router_w, E * H * 2);
        DALLOC(ly->router_b, E * 2);
        DALLOC(ly->w1_q, moe_repack_q_bytes(El, 2 * b->I, b->H));
        DALLOC(ly->w1_s, moe_repack_s_bytes(El, 2 * b->I, b->H));
        DALLOC(ly->b1, (size_t)El * 2 * I * 2);
        DALLOC(ly->w2_q, moe_repack_q_bytes(El, b->H, b->I));
        DALLOC(ly->w2_s, moe_repack_s_bytes(El, b->H, b->I));
        DALLOC(ly->b2, (size_t)El * H * 2);
        moe_weights *m = &ly->moe;
        m->w1_q = ly->w1_q, m->w1_s = ly->w1_s, m->b1 = ly->b1;
        m->w2_q = ly->w2_q, m->w2_s = ly->w2_s, m->b2 = ly->b2;
        m->E = El, m->H = b->H, m->I = b->I;
        m->swiglu_alpha = (float)b->cfg.swiglu_alpha, m->swiglu_limit = (float)b->cfg.swiglu_limit;
    }
    return 0;
}

void weights_gpu_free(struct backend *b) {
    gpu_weights *w = &b->gw;
    cudaFree(w->embed), cudaFree(w->final_norm), cudaFree(w->lm_head);
    for (int l = 0; w->layers && l < b->L; l++) {
        gpu_layer *ly = &w->layers[l];
        void *ps[] = {ly->attn_norm, ly->qkv_w,    ly->qkv_b,    ly->o_w,      ly->o_b,
                      ly->sinks,     ly->mlp_norm, ly->router_w, ly->router_b, ly->w1_q,
                      ly->w1_s,      ly->b1,       ly->w2_q,     ly->w2_s,     ly->b2};
        for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) cudaFree(ps[i]);
    }
    free(w->layers);
    memset(w, 0, sizeof *w);
}

/* After the experts are on the device: may each matrix use the folded dequantisation (moe.h)? */
int weights_gpu_decide_folded(struct backend *b) {
    int n_folded = 0;
    for (int l = 0; l < b->L; l++) {
        gpu_layer *ly = &b->gw.layers[l];
        int m1 = 0, m2 = 0;
        CU(moe_scales_max(ly->w1_s, moe_repack_s_bytes(ly->moe.E, 2 * b->I, b->H), &m1, b->stream));
        CU(moe_scales_max(ly->w2_s, moe_repack_s_bytes(ly->moe.E, b->H, b->I), &m2, b->stream));
        ly->moe.w1_folded = m1 <= MOE_FOLDED_SCALE_MAX;
        ly->moe.w2_folded = m2 <= MOE_FOLDED_SCALE_MAX;
        n_folded += ly->moe.w1_folded + ly->moe.w2_folded;
    }
    log_info(
        "cuda backend: %d of %d expert matrices have every scale <= 2^%d (one multiply per weight "
        "pair)",
        n_folded, 2 * b->L, MOE_FOLDED_SCALE_MAX - 127);
    return 0;
}

/* ---- experts ---- */

/* Experts of one matrix (R rows, Kd inputs): checkpoint blocks/scales in groups through `scratch`,
 * repacked into q/s. */
static int up_experts(struct backend *b, uploader *u, const uint8_t *blocks, const uint8_t *scales,
                      int R, int Kd, int gate_up, uint8_t *q, uint8_t *s, uint8_t *scratch) {
    const size_t bb = (size_t)R * (size_t)(Kd / 32) * 16, sb = (size_t)R * (size_t)(Kd / 32);
    int group = (int)(EXPERT_SCRATCH_BYTES / (bb + sb));
    if (group < 1)
        return err_set("cuda backend: one expert (%zu bytes) exceeds the repack scratch", bb + sb);
    for (int e0 = 0; e0 < b->E; e0 += group) {
        int eg = b->E - e0 < group ? b->E - e0 : group;
        if (up_bytes(u, scratch, blocks + (size_t)e0 * bb, (size_t)eg * bb)) return -1;
        if (up_bytes(u, scratch + (size_t)eg * bb, scales + (size_t)e0 * sb, (size_t)eg * sb))
            return -1;
        CU(moe_repack_device(scratch, scratch + (size_t)eg * bb, eg, R, Kd, gate_up,
                             q + (size_t)e0 * R * Kd / 2, s + (size_t)e0 * R * Kd / 32, b->stream));
    }
    return 0;
}

/* ---- from a checkpoint ---- */

static int upload_all(struct backend *b, uploader *u, const model_weights *mw, uint8_t *scratch) {
    gpu_weights *g = &b->gw;
    const size_t H = (size_t)b->H, V = (size_t)b->V, Q = (size_t)b->Q, KV = (size_t)b->KVD,
                 E = (size_t)b->E, I = (size_t)b->I;
    if (up_dense(u, weights_dense(mw, -1, TK_EMBED), V * H, g->embed, 0)) return -1;
    for (int l = 0; l < b->L; l++) {
        gpu_layer *ly = &g->layers[l];
        if (up_dense(u, weights_dense(mw, l, TK_ATTN_NORM), H, ly->attn_norm, 0) ||
            up_dense(u, weights_dense(mw, l, TK_Q_W), Q * H, ly->qkv_w, 0) ||
            up_dense(u, weights_dense(mw, l, TK_K_W), KV * H, ly->qkv_w + Q * H, 0) ||
            up_dense(u, weights_dense(mw, l, TK_V_W), KV * H, ly->qkv_w + (Q + KV) * H, 0) ||
            up_dense(u, weights_dense(mw, l, TK_Q_B), Q, ly->qkv_b, 0) ||
            up_dense(u, weights_dense(mw, l, TK_K_B), KV, ly->qkv_b + Q, 0) ||
            up_dense(u, weights_dense(mw, l, TK_V_B), KV, ly->qkv_b + Q + KV, 0) ||
            up_dense(u, weights_dense(mw, l, TK_O_W), H * Q, ly->o_w, 0) ||
            up_dense(u, weights_dense(mw, l, TK_O_B), H, ly->o_b, 0) ||
            up_dense(u, weights_dense(mw, l, TK_SINKS), (size_t)b->cfg.n_heads, ly->sinks, 1) ||
            up_dense(u, weights_dense(mw, l, TK_MLP_NORM), H, ly->mlp_norm, 0) ||
            up_dense(u, weights_dense(mw, l, TK_ROUTER_W), E * H, ly->router_w, 0) ||
            up_dense(u, weights_dense(mw, l, TK_ROUTER_B), E, ly->router_b, 0) ||
            up_dense(u, weights_dense(mw, l, TK_GATE_UP_BIAS), E * 2 * I, ly->b1, 0) ||
            up_dense(u, weights_dense(mw, l, TK_DOWN_BIAS), E * H, ly->b2, 0))
            return err_prefix("layer %d", l);
        if (up_experts(b, u, weights_bytes(mw, l, TK_GATE_UP_BLOCKS),
                       weights_bytes(mw, l, TK_GATE_UP_SCALES), 2 * b->I, b->H, 1, ly->w1_q,
                       ly->w1_s, scratch) ||
            up_experts(b, u, weights_bytes(mw, l, TK_DOWN_BLOCKS),
                       weights_bytes(mw, l, TK_DOWN_SCALES), b->H, b->I, 0, ly->w2_q, ly->w2_s,
                       scratch))
            return err_prefix("layer %d experts", l);
    }
    if (up_dense(u, weights_dense(mw, -1, TK_FINAL_NORM), H, g->final_norm, 0) ||
        up_dense(u, weights_dense(mw, -1, TK_LM_HEAD), V * H, g->lm_head, 0))
        return -1;
    return 0;
}

int weights_gpu_upload(struct backend *b, const char *dir) {
    model_weights mw;
    if (weights_load(dir, &mw) != 0) return -1;
    const size_t total = up_checkpoint_bytes(&mw);
    uploader u;
    void *scratch = NULL;
    double t0 = now_seconds();
    int rc = up_init(&u, b->stream, total, "cuda backend");
    if (rc == 0 && cudaMalloc(&scratch, EXPERT_SCRATCH_BYTES) != cudaSuccess)
        rc = err_set("cuda backend: cannot allocate the %d MiB expert repack scratch",
                     EXPERT_SCRATCH_BYTES >> 20);
    if (rc == 0) rc = upload_all(b, &u, &mw, scratch);
    /* Everything queued must finish before the mapping and the staging buffers go away. */
    cudaError_t e = cudaStreamSynchronize(b->stream);
    if (rc == 0 && e != cudaSuccess)
        rc = err_set("cuda backend: weight upload failed: %s", cudaGetErrorString(e));
    if (rc == 0) rc = weights_gpu_decide_folded(b);
    if (rc == 0) {
        up_report(&u);
        double dt = now_seconds() - t0;
        log_info("cuda backend: %.2f GB of checkpoint in %.1f s (%.2f GB/s); %.2f GB on the device",
                 (double)total / 1e9, dt, (double)total / 1e9 / (dt > 1e-9 ? dt : 1e-9),
                 (double)b->gw.bytes / 1e9);
    }
    up_free(&u);
    cudaFree(scratch);
    weights_free(&mw);
    return rc;
}

/* ---- synthetic ---- */

/* synthetic.c's fill_scales base exponent for a target standard deviation. */
int weights_gpu_scale_base(double std) {
    return 127 + (int)lround(log2(std / 2.926));
}

/* Where a dense tensor goes (bf16 unless *f32). */
void *weights_gpu_dense_dst(struct backend *b, const tensor_spec *s, int *f32) {
    gpu_weights *g = &b->gw;
    const size_t H = (size_t)b->H, Q = (size_t)b->Q, KV = (size_t)b->KVD;
    *f32 = 0;
    if (s->layer < 0)
        return s->kind == TK_EMBED        ? g->embed
               : s->kind == TK_FINAL_NORM ? g->final_norm
                                          : g->lm_head;
    gpu_layer *ly = &g->layers[s->layer];
    switch (s->kind) {
    case TK_ATTN_NORM:
        return ly->attn_norm;
    case TK_Q_W:
        return ly->qkv_w;
    case TK_K_W:
        return ly->qkv_w + Q * H;
    case TK_V_W:
        return ly->qkv_w + (Q + KV) * H;
    case TK_Q_B:
        return ly->qkv_b;
    case TK_K_B:
        return ly->qkv_b + Q;
    case TK_V_B:
        return ly->qkv_b + Q + KV;
    case TK_O_W:
        return ly->o_w;
    case TK_O_B:
        return ly->o_b;
    case TK_SINKS:
        *f32 = 1;
        return ly->sinks;
    case TK_MLP_NORM:
        return ly->mlp_norm;
    case TK_ROUTER_W:
        return ly->router_w;
    case TK_ROUTER_B:
        return ly->router_b;
    case TK_GATE_UP_BIAS:
        return ly->b1;
    case TK_DOWN_BIAS:
        return ly->b2;
    default:
        return NULL;
    }
}

static uint64_t spec_elements(const tensor_spec *s) {
    uint64_t n = 1;
    for (int d = 0; d < s->ndim; d++) n *= (uint64_t)s->shape[d];
    return n;
}

/* One expert matrix: blocks (tensor index bi) and scales (index si) generated a group at a time
 * into scratch, then repacked. */
static int synth_experts(struct backend *b, uint64_t seed, int bi, int si, double std, int R,
                         int Kd, int gate_up, uint8_t *q, uint8_t *s, uint8_t *scratch) {
    const size_t bb = (size_t)R * (size_t)(Kd / 32) * 16, sb = (size_t)R * (size_t)(Kd / 32);
    int group = (int)(EXPERT_SCRATCH_BYTES / (bb + sb));
    if (group < 1)
        return err_set("cuda backend: one expert (%zu bytes) exceeds the repack scratch", bb + sb);
    const uint64_t kb = synth_key(seed, bi), ks = synth_key(seed, si);
    const int base = weights_gpu_scale_base(std);
    for (int e0 = 0; e0 < b->E; e0 += group) {
        int eg = b->E - e0 < group ? b->E - e0 : group;
        CU(synth_blocks(scratch, (size_t)e0 * bb, (size_t)eg * bb, kb, b->stream));
        CU(synth_scales(scratch + (size_t)eg * bb, (size_t)e0 * sb, (size_t)eg * sb, ks, base,
                        b->stream));
        CU(moe_repack_device(scratch, scratch + (size_t)eg * bb, eg, R, Kd, gate_up,
                             q + (size_t)e0 * R * Kd / 2, s + (size_t)e0 * R * Kd / 32, b->stream));
    }
    return 0;
}

static int synth_all(struct backend *b, uint64_t seed, uint8_t *scratch) {
    const model_config *c = &b->cfg;
    const int n = tensor_count(c);
    for (int i = 0; i < n; i++) {
        tensor_spec s;
        tensor_spec_at(c, i, &s);
        if (s.kind == TK_GATE_UP_SCALES || s.kind == TK_DOWN_SCALES)
            continue; /* made with their blocks */
        if (s.kind == TK_GATE_UP_BLOCKS || s.kind == TK_DOWN_BLOCKS) {
            tensor_spec sc;
            tensor_spec_at(c, i + 1, &sc);
            const int gu = s.kind == TK_GATE_UP_BLOCKS;
            if (sc.kind != (gu ? TK_GATE_UP_SCALES : TK_DOWN_SCALES) || sc.layer != s.layer)
                return err_set("cuda backend: tensor order: %s is not followed by its scales",
                               s.name);
            gpu_layer *ly = &b->gw.layers[s.layer];
            const double std = synthetic_draw_for(c, s.kind).std;
            if (synth_experts(b, seed, i, i + 1, std, gu ? 2 * b->I : b->H, gu ? b->H : b->I, gu,
                              gu ? ly->w1_q : ly->w2_q, gu ? ly->w1_s : ly->w2_s, scratch))
                return err_prefix("%s", s.name);
            continue;
        }
        int f32;
        void *dst = weights_gpu_dense_dst(b, &s, &f32);
        if (!dst) return err_set("cuda backend: no destination for synthetic tensor %s", s.name);
        const synthetic_draw d = synthetic_draw_for(c, s.kind);
        const uint64_t key = synth_key(seed, i), ne = spec_elements(&s);
        if (f32)
            CU(synth_dense_f32(dst, 0, ne, key, (float)d.mean, (float)d.std, b->stream));
        else
            CU(synth_dense_bf16(dst, 0, ne, key, (float)d.mean, (float)d.std, b->stream));
    }
    return 0;
}

int weights_gpu_synthetic(struct backend *b, uint64_t seed) {
    double t0 = now_seconds();
    void *scratch = NULL;
    CU(cudaMalloc(&scratch, EXPERT_SCRATCH_BYTES));
    int rc = synth_all(b, seed, scratch);
    cudaError_t e = cudaStreamSynchronize(b->stream);
    if (rc == 0 && e != cudaSuccess)
        rc = err_set("cuda backend: synthetic weights failed: %s", cudaGetErrorString(e));
    cudaFree(scratch);
    if (rc == 0) rc = weights_gpu_decide_folded(b);
    if (rc == 0)
        log_info("cuda backend: synthetic weights (seed %llu), %.2f GB on the device in %.2f s",
                 (unsigned long long)seed, (double)b->gw.bytes / 1e9, now_seconds() - t0);
    return rc;
}
