/* One tensor-parallel rank's share of the weights (model/tp_plan.h's plan, tp_world > 1), from the
 * synthetic model or from a checkpoint.
 *
 * Every element a rank holds equals the element the one-GPU load puts at the same place of the whole
 * tensor (weights_gpu_synthetic: synth.cu's hashes take the element's index; weights_gpu_upload: the
 * checkpoint's bytes), so TP and one GPU run the same model and a test can compare them. What a rank
 * holds of each tensor:
 *   replicated     embedding, norms, router, final norm: whole;
 *   by rows        q, k, v weights and biases (its heads; rows are contiguous: made in place),
 *                  sinks (its heads), lm_head (its vocabulary rows);
 *   by columns     O weight [H][Q] (its heads' columns): made whole in a scratch, then a 2D copy;
 *   rank 0 only    O bias, and (TP) the experts' down bias (added once; the others hold zeros);
 *   experts        TP: its intermediate units (of 32) of every expert: gate_up rows
 *                  [64 u0, 64 (u0 + n)) (gate and up interleaved), bias alike, and the down
 *                  projection's input blocks [u0, u0 + n) of every row. EP
 *                  (--enable-expert-parallel): its experts [x0, x0 + nx) whole, both biases
 *                  included (the owner adds its experts' down bias), as local experts 0 .. nx - 1;
 *                  the same path, with every unit of fewer experts. A group of experts is made
 *                  whole in one scratch, its share copied (2D) into a second, and that repacked
 *                  (moe.h).
 * Padding. The MoE kernels need the down projection's K (this rank's intermediate size) to be a
 * multiple of 64; 45 units of 32 (2,880 over two ranks) are not. The share is padded to b->I with
 * zero codes and zero biases: a padded gate and up are 0, SwiGLU(0, 0) = 0, and a zero input
 * meets zero down weights, so the padding adds exact zeros.
 *
 * Sources. The share arithmetic above asks its source for three things only (shard_source below):
 * a run of a dense tensor's elements written in place, a whole dense tensor written into a scratch,
 * and a group of experts' blocks and scales written whole into a scratch. The synthetic source makes
 * them with synth.cu's kernels; the checkpoint source sends them from the safetensors mapping
 * through weights_upload.h's staging pipeline (up_dense of the run, dense_shift'ed to its first
 * element; up_dense of the whole tensor; up_bytes of experts [e0, e0 + eg), at e0 times an expert's
 * bytes). Each rank maps the checkpoint itself (the page cache holds one copy) and reads what it
 * needs: its rows of q, k, v and the lm_head, the replicated tensors, the whole O weights and the
 * whole experts (their share is cut on the device). */
#include "backend/cuda/runner.h"
#include "backend/cuda/synth.h"
#include "backend/cuda/weights_upload.h"
#include "base/log.h"
#include "base/timeutil.h"
#include "model/synthetic.h"
#include "model/weights.h"

#include <stdio.h>
#include <string.h>

enum { SHARD_SCRATCH_BYTES = 256 << 20 };

/* ---- sources ---- */

/* Where the rank's share comes from: the synthetic model of `seed` (mw NULL), or the mapped
 * checkpoint mw sent through the uploader. Tensors are named by their index i in checkpoint order
 * (the synthetic keys) and their spec (the checkpoint's binding). */
typedef struct {
    struct backend *b;
    uint64_t seed;
    const model_weights *mw;
    uploader *up;
} shard_source;

static uint64_t spec_elements(const tensor_spec *s) {
    uint64_t n = 1;
    for (int d = 0; d < s->ndim; d++) n *= (uint64_t)s->shape[d];
    return n;
}

/* 1. Elements [first, first + n) of dense tensor (i, s) into dst: bf16, or fp32 (f32: the sinks). */
static int src_range(const shard_source *src, int i, const tensor_spec *s, void *dst, int f32,
                     size_t first, size_t n) {
    struct backend *b = src->b;
    if (first + n > spec_elements(s))
        return err_set("cuda backend: elements [%zu, %zu) are outside the tensor's %llu", first,
                       first + n, (unsigned long long)spec_elements(s));
    if (src->mw)
        return up_dense(src->up, dense_shift(weights_dense(src->mw, s->layer, s->kind), first), n,
                        dst, f32);
    const synthetic_draw d = synthetic_draw_for(&b->cfg, s->kind);
    const uint64_t key = synth_key(src->seed, i);
    if (f32)
        CU(synth_dense_f32(dst, first, n, key, (float)d.mean, (float)d.std, b->stream));
    else
        CU(synth_dense_bf16(dst, first, n, key, (float)d.mean, (float)d.std, b->stream));
    return 0;
}

/* 2. The whole dense tensor (i, s), bf16, into scratch (SHARD_SCRATCH_BYTES). */
static int src_whole(const shard_source *src, int i, const tensor_spec *s, uint16_t *scratch) {
    const uint64_t n = spec_elements(s);
    if (n * 2 > SHARD_SCRATCH_BYTES)
        return err_set("cuda backend: the tensor (%llu elements) exceeds the %d MiB shard scratch",
                       (unsigned long long)n, SHARD_SCRATCH_BYTES >> 20);
    return src_range(src, i, s, scratch, 0, 0, n);
}

/* 3. Experts [e0, e0 + eg) of an expert matrix, blocks (tensor i, spec s) and scales (i + 1): bb
 * and sb bytes an expert, written whole into blocks and scales. */
static int src_experts(const shard_source *src, int i, const tensor_spec *s, int e0, int eg,
                       size_t bb, size_t sb, uint8_t *blocks, uint8_t *scales) {
    struct backend *b = src->b;
    const int gu = s->kind == TK_GATE_UP_BLOCKS;
    if (src->mw) {
        const uint8_t *wb = weights_bytes(src->mw, s->layer, s->kind),
                      *ws =
                          weights_bytes(src->mw, s->layer, gu ? TK_GATE_UP_SCALES : TK_DOWN_SCALES);
        if (up_bytes(src->up, blocks, wb + (size_t)e0 * bb, (size_t)eg * bb)) return -1;
        return up_bytes(src->up, scales, ws + (size_t)e0 * sb, (size_t)eg * sb);
    }
    const double std = synthetic_draw_for(&b->cfg, s->kind).std;
    CU(synth_blocks(blocks, (size_t)e0 * bb, (size_t)eg * bb, synth_key(src->seed, i), b->stream));
    CU(synth_scales(scales, (size_t)e0 * sb, (size_t)eg * sb, synth_key(src->seed, i + 1),
                    weights_gpu_scale_base(std), b->stream));
    return 0;
}

/* ---- the shares ---- */

/* Columns [c0, c0 + nc) of a bf16 [rows][cols] tensor, made whole in scratch first. */
static int shard_columns(const shard_source *src, int i, const tensor_spec *s, uint16_t *dst,
                         size_t rows, size_t cols, size_t c0, size_t nc, void *scratch) {
    struct backend *b = src->b;
    if (src_whole(src, i, s, scratch)) return -1;
    CU(cudaMemcpy2DAsync(dst, nc * 2, (const uint16_t *)scratch + c0, cols * 2, nc * 2, rows,
                         cudaMemcpyDeviceToDevice, b->stream));
    return 0;
}

/* One expert matrix's share: gate_up (rows 64 u0 .. of each expert, R_pad = 2 I rows) or down
 * (input blocks u0 .. of each row, K_pad = I columns), of this rank's experts (EP: experts x0 ..;
 * else all), in groups: source experts x0 + e0 .., local experts e0 ... */
static int shard_experts(const shard_source *src, int i, const tensor_spec *spec, uint8_t *q,
                         uint8_t *s, uint8_t *whole, uint8_t *share) {
    struct backend *b = src->b;
    const int gu = spec->kind == TK_GATE_UP_BLOCKS;
    const int H = b->H, Im = b->I_model, Ip = b->I, u0 = b->tp_share.unit0,
              nu = b->tp_share.n_units, x0 = b->tp_share.expert0, nx = b->tp_share.n_experts;
    /* The whole matrix per expert: R rows of Kd inputs; the share: Rp rows of Kp inputs. */
    const int R = gu ? 2 * Im : H, Kd = gu ? H : Im, Rp = gu ? 2 * Ip : H, Kp = gu ? H : Ip;
    const size_t bb = (size_t)R * (Kd / 32) * 16, sb = (size_t)R * (Kd / 32);
    const size_t pbb = (size_t)Rp * (Kp / 32) * 16, psb = (size_t)Rp * (Kp / 32);
    int group = (int)(SHARD_SCRATCH_BYTES / (bb + sb));
    const int group_share = (int)(SHARD_SCRATCH_BYTES / (pbb + psb));
    if (group_share < group) group = group_share;
    if (group < 1) return err_set("cuda backend: one expert exceeds the shard scratch");
    for (int e0 = 0; e0 < nx; e0 += group) {
        const int eg = nx - e0 < group ? nx - e0 : group;
        uint8_t *wb = whole, *ws = whole + (size_t)eg * bb, *pb = share,
                *ps = share + (size_t)eg * pbb;
        if (src_experts(src, i, spec, x0 + e0, eg, bb, sb, wb, ws)) return -1;
        /* Padding: zero codes (the value 0 whatever the scale), scale 2^0. */
        CU(cudaMemsetAsync(pb, 0, (size_t)eg * pbb, b->stream));
        CU(cudaMemsetAsync(ps, 127, (size_t)eg * psb, b->stream));
        if (nu == 0) {
            /* no units on this rank (fewer units than ranks): padding only */
        } else if (gu) { /* rows [64 u0, 64 (u0 + nu)) of each expert: one 2D copy, a row per
                            expert */
            const size_t row_b = (size_t)(Kd / 32) * 16, row_s = (size_t)(Kd / 32);
            CU(cudaMemcpy2DAsync(pb, pbb, wb + (size_t)64 * u0 * row_b, bb, (size_t)64 * nu * row_b,
                                 eg, cudaMemcpyDeviceToDevice, b->stream));
            CU(cudaMemcpy2DAsync(ps, psb, ws + (size_t)64 * u0 * row_s, sb, (size_t)64 * nu * row_s,
                                 eg, cudaMemcpyDeviceToDevice, b->stream));
        } else { /* input blocks [u0, u0 + nu) of every row of every expert */
            const size_t rows = (size_t)eg * H;
            CU(cudaMemcpy2DAsync(pb, (size_t)(Kp / 32) * 16, wb + (size_t)u0 * 16,
                                 (size_t)(Kd / 32) * 16, (size_t)nu * 16, rows,
                                 cudaMemcpyDeviceToDevice, b->stream));
            CU(cudaMemcpy2DAsync(ps, (size_t)(Kp / 32), ws + u0, (size_t)(Kd / 32), (size_t)nu,
                                 rows, cudaMemcpyDeviceToDevice, b->stream));
        }
        CU(moe_repack_device(pb, ps, eg, Rp, Kp, gu, q + (size_t)e0 * Rp * Kp / 2,
                             s + (size_t)e0 * Rp * Kp / 32, b->stream));
    }
    return 0;
}

/* The gate_up bias [E][2 I_model]: rows [64 u0, 64 (u0 + nu)) of each of this rank's experts
 * (x0 ..), zero padding. */
static int shard_gate_up_bias(const shard_source *src, int i, const tensor_spec *s, uint16_t *dst,
                              void *scratch) {
    struct backend *b = src->b;
    const tp_rank *k = &b->tp_share;
    const size_t nx = (size_t)k->n_experts, Im2 = 2 * (size_t)b->I_model, Ip2 = 2 * (size_t)b->I;
    if (src_whole(src, i, s, scratch)) return -1;
    CU(cudaMemsetAsync(dst, 0, nx * Ip2 * 2, b->stream));
    const uint16_t *from =
        (const uint16_t *)scratch + (size_t)k->expert0 * Im2 + 64 * (size_t)k->unit0;
    if (k->n_units > 0)
        CU(cudaMemcpy2DAsync(dst, Ip2 * 2, from, Im2 * 2, 64 * (size_t)k->n_units * 2, nx,
                             cudaMemcpyDeviceToDevice, b->stream));
    return 0;
}

/* The down bias [E][H]. EP: this rank's experts' rows, added by their owner. TP: added once, by
 * rank 0 (every expert's rows); the others hold zeros. */
static int shard_down_bias(const shard_source *src, int i, const tensor_spec *s, uint16_t *dst,
                           bool expert_parallel) {
    struct backend *b = src->b;
    const tp_rank *k = &b->tp_share;
    const size_t H = (size_t)b->H;
    if (expert_parallel) return src_range(src, i, s, dst, 0, k->expert0 * H, k->n_experts * H);
    if (!k->adds_biases) {
        CU(cudaMemsetAsync(dst, 0, (size_t)b->E * H * 2, b->stream));
        return 0;
    }
    return src_range(src, i, s, dst, 0, 0, (size_t)b->E * H);
}

static int shard_dense(const shard_source *src, int i, const tensor_spec *s, void *scratch) {
    struct backend *b = src->b;
    const tp_rank *k = &b->tp_share;
    const size_t H = (size_t)b->H, D = (size_t)b->cfg.head_dim;
    int f32;
    void *dst = weights_gpu_dense_dst(b, s, &f32);
    if (!dst) return err_set("cuda backend: no destination for tensor %s", s->name);
    const uint64_t whole = spec_elements(s);
    switch (s->kind) {
    case TK_Q_W:
        return src_range(src, i, s, dst, 0, k->q_head0 * D * H, k->n_q_heads * D * H);
    case TK_K_W:
    case TK_V_W:
        return src_range(src, i, s, dst, 0, k->kv_head0 * D * H, k->n_kv_heads * D * H);
    case TK_Q_B:
        return src_range(src, i, s, dst, 0, k->q_head0 * D, k->n_q_heads * D);
    case TK_K_B:
    case TK_V_B:
        return src_range(src, i, s, dst, 0, k->kv_head0 * D, k->n_kv_heads * D);
    case TK_SINKS:
        return src_range(src, i, s, dst, 1, (size_t)k->q_head0, (size_t)k->n_q_heads);
    case TK_O_W:
        return shard_columns(src, i, s, dst, H, (size_t)b->cfg.n_heads * D, k->q_head0 * D,
                             k->n_q_heads * D, scratch);
    case TK_DOWN_BIAS:
        return shard_down_bias(src, i, s, dst, k->n_experts < b->E);
    case TK_O_B:
        if (!k->adds_biases) {
            CU(cudaMemsetAsync(dst, 0, whole * 2, b->stream));
            return 0;
        }
        return src_range(src, i, s, dst, 0, 0, whole);
    case TK_GATE_UP_BIAS:
        return shard_gate_up_bias(src, i, s, dst, scratch);
    case TK_LM_HEAD:
        return src_range(src, i, s, dst, 0, (size_t)b->V0 * H, (size_t)b->V_lm * H);
    default: /* replicated */
        return src_range(src, i, s, dst, f32, 0, whole);
    }
}

static int shard_all(const shard_source *src, uint8_t *whole, uint8_t *share) {
    struct backend *b = src->b;
    const model_config *c = &b->cfg;
    const int n = tensor_count(c);
    for (int i = 0; i < n; i++) {
        tensor_spec s;
        tensor_spec_at(c, i, &s);
        if (s.kind == TK_GATE_UP_SCALES || s.kind == TK_DOWN_SCALES) continue; /* with the blocks */
        int rc;
        if (s.kind == TK_GATE_UP_BLOCKS || s.kind == TK_DOWN_BLOCKS) {
            tensor_spec sc;
            tensor_spec_at(c, i + 1, &sc);
            const int gu = s.kind == TK_GATE_UP_BLOCKS;
            if (sc.kind != (gu ? TK_GATE_UP_SCALES : TK_DOWN_SCALES) || sc.layer != s.layer)
                return err_set("cuda backend: tensor order: %s is not followed by its scales",
                               s.name);
            gpu_layer *ly = &b->gw.layers[s.layer];
            rc = shard_experts(src, i, &s, gu ? ly->w1_q : ly->w2_q, gu ? ly->w1_s : ly->w2_s,
                               whole, share);
        } else {
            rc = shard_dense(src, i, &s, whole);
        }
        if (rc == 0) continue;
        if (src->mw) { /* name the file too */
            const st_tensor *t =
                s.layer < 0 ? src->mw->global[s.kind] : src->mw->layers[s.layer].t[s.kind];
            return err_prefix("%s (%s)", s.name, t ? t->file : "?");
        }
        return err_prefix("%s", s.name);
    }
    return 0;
}

/* Loads the share from src on b's stream through two device scratches, then decides the folded
 * scales. */
static int shard_load(const shard_source *src) {
    struct backend *b = src->b;
    void *whole = NULL, *share = NULL;
    int rc = 0;
    if (cudaMalloc(&whole, SHARD_SCRATCH_BYTES) != cudaSuccess ||
        cudaMalloc(&share, SHARD_SCRATCH_BYTES) != cudaSuccess) {
        (void)cudaGetLastError();
        rc = err_set("cuda backend: cannot allocate the two %d MiB shard scratches on GPU %d",
                     SHARD_SCRATCH_BYTES >> 20, b->device);
    }
    if (rc == 0) rc = shard_all(src, whole, share);
    /* Everything queued must finish before the scratches (and a mapping) go away. */
    cudaError_t e = cudaStreamSynchronize(b->stream);
    if (rc == 0 && e != cudaSuccess)
        rc = err_set("cuda backend: weights of rank %d failed on GPU %d: %s", b->tp_grank,
                     b->device, cudaGetErrorString(e));
    cudaFree(whole);
    cudaFree(share);
    if (rc == 0) rc = weights_gpu_decide_folded(b);
    return rc;
}

int weights_shard_synthetic(struct backend *b, uint64_t seed) {
    const double t0 = now_seconds();
    const shard_source src = {b, seed, NULL, NULL};
    if (shard_load(&src)) return -1;
    log_info("cuda backend: rank %d of %d: synthetic weights (seed %llu), %.2f GB on GPU %d in "
             "%.2f s",
             b->tp_grank, b->tp_world, (unsigned long long)seed, (double)b->gw.bytes / 1e9,
             b->device, now_seconds() - t0);
    return 0;
}

int weights_shard_checkpoint(struct backend *b, const char *dir) {
    const double t0 = now_seconds();
    model_weights mw;
    if (weights_load(dir, &mw) != 0) return -1;
    /* The config the ranks' shares were planned from (create_inner read it from the same folder):
     * the tensors' shapes were checked against mw's, so the two must agree. */
    const model_config *c = &b->cfg;
    if (mw.cfg.n_layers != c->n_layers || mw.cfg.hidden != c->hidden ||
        mw.cfg.n_heads != c->n_heads || mw.cfg.n_kv_heads != c->n_kv_heads ||
        mw.cfg.head_dim != c->head_dim || mw.cfg.intermediate != c->intermediate ||
        mw.cfg.n_experts != c->n_experts || mw.cfg.vocab != c->vocab) {
        weights_free(&mw);
        return err_set("%s/config.json changed while the model was loading", dir);
    }
    char what[64];
    snprintf(what, sizeof what, "cuda backend: rank %d of %d", b->tp_grank, b->tp_world);
    uploader u;
    int rc = up_init(&u, b->stream, 0, what);
    shard_source src = {b, 0, &mw, &u};
    if (rc == 0) rc = shard_load(&src);
    if (rc == 0) {
        up_report(&u);
        const double dt = now_seconds() - t0;
        log_info(
            "cuda backend: rank %d of %d: %.2f GB of %s read in %.1f s (%.2f GB/s); %.2f GB on "
            "GPU %d",
            b->tp_grank, b->tp_world, (double)u.done / 1e9, dir, dt,
            (double)u.done / 1e9 / (dt > 1e-9 ? dt : 1e-9), (double)b->gw.bytes / 1e9, b->device);
    }
    up_free(&u); /* after shard_load's synchronisation: nothing of the mapping is still in flight */
    weights_free(&mw);
    return rc;
}
