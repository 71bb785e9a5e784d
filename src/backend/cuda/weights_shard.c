/* One tensor-parallel rank's share of the synthetic weights (model/tp_plan.h's plan, tp_size > 1).
 *
 * Every element a rank holds equals the element weights_gpu_synthetic makes at the same place of
 * the whole tensor (synth.cu's hashes take the element's index), so TP and one GPU run the same
 * model and a test can compare them. What a rank holds of each tensor:
 *   replicated     embedding, norms, router, final norm: whole;
 *   by rows        q, k, v weights and biases (its heads; rows are contiguous: made in place),
 *                  sinks (its heads), lm_head (its vocabulary rows);
 *   by columns     O weight [H][Q] (its heads' columns): made whole in a scratch, then a 2D copy;
 *   rank 0 only    O bias and the experts' down bias (added once; the others hold zeros);
 *   experts        its intermediate units (of 32) of every expert: gate_up rows [64 u0, 64 (u0 + n))
 *                  (gate and up interleaved), bias alike, and the down projection's input blocks
 *                  [u0, u0 + n) of every row. A group of experts is made whole in one scratch,
 *                  its share copied (2D) into a second, and that repacked (moe.h).
 * Padding. The MoE kernels need the down projection's K (this rank's intermediate size) to be a
 * multiple of 64; 45 units of 32 (2,880 over two ranks) are not. The share is padded to b->I with
 * zero codes and zero biases: a padded gate and up are 0, SwiGLU(0, 0) = 0, and a zero input
 * meets zero down weights, so the padding adds exact zeros. */
#include "backend/cuda/runner.h"
#include "backend/cuda/synth.h"
#include "base/log.h"
#include "base/timeutil.h"
#include "model/synthetic.h"

#include <string.h>

enum { SHARD_SCRATCH_BYTES = 256 << 20 };

/* Elements [first, first + n) of tensor i, bf16 or fp32 (the sinks). */
static int synth_range(struct backend *b, void *dst, int f32, size_t first, size_t n, uint64_t key,
                       synthetic_draw d) {
    if (f32)
        CU(synth_dense_f32(dst, first, n, key, (float)d.mean, (float)d.std, b->stream));
    else
        CU(synth_dense_bf16(dst, first, n, key, (float)d.mean, (float)d.std, b->stream));
    return 0;
}

/* Columns [c0, c0 + nc) of a bf16 [rows][cols] tensor, made whole in scratch first. */
static int synth_columns(struct backend *b, uint16_t *dst, size_t rows, size_t cols, size_t c0,
                         size_t nc, uint64_t key, synthetic_draw d, void *scratch) {
    if (rows * cols * 2 > SHARD_SCRATCH_BYTES)
        return err_set("cuda backend: a %zu x %zu tensor exceeds the shard scratch", rows, cols);
    CU(synth_dense_bf16(scratch, 0, rows * cols, key, (float)d.mean, (float)d.std, b->stream));
    CU(cudaMemcpy2DAsync(dst, nc * 2, (const uint16_t *)scratch + c0, cols * 2, nc * 2, rows,
                         cudaMemcpyDeviceToDevice, b->stream));
    return 0;
}

/* One expert matrix's share: gate_up (rows 64 u0 .. of each expert, R_pad = 2 I rows) or down
 * (input blocks u0 .. of each row, K_pad = I columns). */
static int synth_experts_share(struct backend *b, uint64_t seed, int bi, int si, double std, int gu,
                               uint8_t *q, uint8_t *s, uint8_t *whole, uint8_t *share) {
    const int H = b->H, Im = b->I_model, Ip = b->I, u0 = b->tp_share.unit0,
              nu = b->tp_share.n_units;
    /* The whole matrix per expert: R rows of Kd inputs; the share: Rp rows of Kp inputs. */
    const int R = gu ? 2 * Im : H, Kd = gu ? H : Im, Rp = gu ? 2 * Ip : H, Kp = gu ? H : Ip;
    const size_t bb = (size_t)R * (Kd / 32) * 16, sb = (size_t)R * (Kd / 32);
    const size_t pbb = (size_t)Rp * (Kp / 32) * 16, psb = (size_t)Rp * (Kp / 32);
    int group = (int)(SHARD_SCRATCH_BYTES / (bb + sb));
    const int group_share = (int)(SHARD_SCRATCH_BYTES / (pbb + psb));
    if (group_share < group) group = group_share;
    if (group < 1) return err_set("cuda backend: one expert exceeds the shard scratch");
    const uint64_t kb = synth_key(seed, bi), ks = synth_key(seed, si);
    const int base = weights_gpu_scale_base(std);
    for (int e0 = 0; e0 < b->E; e0 += group) {
        const int eg = b->E - e0 < group ? b->E - e0 : group;
        uint8_t *wb = whole, *ws = whole + (size_t)eg * bb, *pb = share,
                *ps = share + (size_t)eg * pbb;
        CU(synth_blocks(wb, (size_t)e0 * bb, (size_t)eg * bb, kb, b->stream));
        CU(synth_scales(ws, (size_t)e0 * sb, (size_t)eg * sb, ks, base, b->stream));
        /* Padding: zero codes (the value 0 whatever the scale), scale 2^0. */
        CU(cudaMemsetAsync(pb, 0, (size_t)eg * pbb, b->stream));
        CU(cudaMemsetAsync(ps, 127, (size_t)eg * psb, b->stream));
        if (gu) { /* rows [64 u0, 64 (u0 + nu)) of each expert: one 2D copy, a row per expert */
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

/* The gate_up bias [E][2 I_model]: rows [64 u0, 64 (u0 + nu)) of each expert, zero padding. */
static int synth_gate_up_bias(struct backend *b, uint16_t *dst, uint64_t key, synthetic_draw d,
                              void *scratch) {
    const size_t E = (size_t)b->E, Im2 = 2 * (size_t)b->I_model, Ip2 = 2 * (size_t)b->I;
    CU(synth_dense_bf16(scratch, 0, E * Im2, key, (float)d.mean, (float)d.std, b->stream));
    CU(cudaMemsetAsync(dst, 0, E * Ip2 * 2, b->stream));
    CU(cudaMemcpy2DAsync(dst, Ip2 * 2, (const uint16_t *)scratch + 64 * (size_t)b->tp_share.unit0,
                         Im2 * 2, 64 * (size_t)b->tp_share.n_units * 2, E, cudaMemcpyDeviceToDevice,
                         b->stream));
    return 0;
}

static int synth_dense_share(struct backend *b, uint64_t seed, int i, const tensor_spec *s,
                             void *scratch) {
    const tp_rank *k = &b->tp_share;
    const size_t H = (size_t)b->H, D = (size_t)b->cfg.head_dim;
    const synthetic_draw d = synthetic_draw_for(&b->cfg, s->kind);
    const uint64_t key = synth_key(seed, i);
    int f32;
    void *dst = weights_gpu_dense_dst(b, s, &f32);
    if (!dst) return err_set("cuda backend: no destination for synthetic tensor %s", s->name);
    uint64_t whole = 1;
    for (int j = 0; j < s->ndim; j++) whole *= (uint64_t)s->shape[j];
    switch (s->kind) {
    case TK_Q_W:
        return synth_range(b, dst, 0, k->q_head0 * D * H, k->n_q_heads * D * H, key, d);
    case TK_K_W:
    case TK_V_W:
        return synth_range(b, dst, 0, k->kv_head0 * D * H, k->n_kv_heads * D * H, key, d);
    case TK_Q_B:
        return synth_range(b, dst, 0, k->q_head0 * D, k->n_q_heads * D, key, d);
    case TK_K_B:
    case TK_V_B:
        return synth_range(b, dst, 0, k->kv_head0 * D, k->n_kv_heads * D, key, d);
    case TK_SINKS:
        return synth_range(b, dst, 1, (size_t)k->q_head0, (size_t)k->n_q_heads, key, d);
    case TK_O_W:
        return synth_columns(b, dst, H, (size_t)b->cfg.n_heads * D, k->q_head0 * D,
                             k->n_q_heads * D, key, d, scratch);
    case TK_O_B:
    case TK_DOWN_BIAS:
        if (!k->adds_biases) {
            CU(cudaMemsetAsync(dst, 0, whole * 2, b->stream));
            return 0;
        }
        return synth_range(b, dst, 0, 0, whole, key, d);
    case TK_GATE_UP_BIAS:
        return synth_gate_up_bias(b, dst, key, d, scratch);
    case TK_LM_HEAD:
        return synth_range(b, dst, 0, (size_t)b->V0 * H, (size_t)b->V_lm * H, key, d);
    default: /* replicated */
        return synth_range(b, dst, f32, 0, whole, key, d);
    }
}

static int shard_all(struct backend *b, uint64_t seed, uint8_t *whole, uint8_t *share) {
    const model_config *c = &b->cfg;
    const int n = tensor_count(c);
    for (int i = 0; i < n; i++) {
        tensor_spec s;
        tensor_spec_at(c, i, &s);
        if (s.kind == TK_GATE_UP_SCALES || s.kind == TK_DOWN_SCALES) continue;
        if (s.kind == TK_GATE_UP_BLOCKS || s.kind == TK_DOWN_BLOCKS) {
            const int gu = s.kind == TK_GATE_UP_BLOCKS;
            gpu_layer *ly = &b->gw.layers[s.layer];
            if (synth_experts_share(b, seed, i, i + 1, synthetic_draw_for(c, s.kind).std, gu,
                                    gu ? ly->w1_q : ly->w2_q, gu ? ly->w1_s : ly->w2_s, whole,
                                    share))
                return err_prefix("%s", s.name);
            continue;
        }
        if (synth_dense_share(b, seed, i, &s, whole)) return err_prefix("%s", s.name);
    }
    return 0;
}

int weights_shard_synthetic(struct backend *b, uint64_t seed) {
    const double t0 = now_seconds();
    void *whole = NULL, *share = NULL;
    CU(cudaMalloc(&whole, SHARD_SCRATCH_BYTES));
    int rc = cudaMalloc(&share, SHARD_SCRATCH_BYTES) == cudaSuccess
                 ? 0
                 : err_set("cuda backend: cannot allocate the shard scratch");
    if (rc == 0) rc = shard_all(b, seed, whole, share);
    cudaError_t e = cudaStreamSynchronize(b->stream);
    if (rc == 0 && e != cudaSuccess)
        rc = err_set("cuda backend: synthetic weights (rank %d) failed: %s", b->tp_rank,
                     cudaGetErrorString(e));
    cudaFree(whole);
    cudaFree(share);
    if (rc == 0) rc = weights_gpu_decide_folded(b);
    if (rc == 0)
        log_info("cuda backend: rank %d of %d: synthetic weights (seed %llu), %.2f GB on GPU %d in "
                 "%.2f s",
                 b->tp_rank, b->tp_size, (unsigned long long)seed, (double)b->gw.bytes / 1e9,
                 b->device, now_seconds() - t0);
    return rc;
}
